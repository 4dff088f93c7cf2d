from pathlib import Path

import pytest

import setpoint.testing
from setpoint.testing.build import controlplane_source_dir
from setpoint.testing.controlplane import DEFAULT_KUBERNETES_VERSION, ControlPlaneError


def test_the_go_module_is_found_inside_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_SRC", raising=False)
    source = controlplane_source_dir()
    assert source.parent == Path(setpoint.testing.__file__).resolve().parent
    assert f"k8s.io/kubernetes {DEFAULT_KUBERNETES_VERSION}" in (source / "go.mod").read_text()
    assert (source / "go.sum").is_file()
    assert (source / "cmd" / "etcd" / "main.go").is_file()


def test_the_working_directory_does_not_matter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_SRC", raising=False)
    monkeypatch.chdir(tmp_path)
    assert (controlplane_source_dir() / "go.mod").is_file()


def test_explicit_source_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module example.com/plane\n")
    monkeypatch.setenv("SETPOINT_CONTROLPLANE_SRC", str(tmp_path))
    assert controlplane_source_dir() == tmp_path


def test_explicit_source_without_go_mod_is_an_error_not_a_fallback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SETPOINT_CONTROLPLANE_SRC", str(tmp_path))
    with pytest.raises(ControlPlaneError, match=r"SETPOINT_CONTROLPLANE_SRC.*has no go\.mod"):
        controlplane_source_dir()
