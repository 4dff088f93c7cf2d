from pathlib import Path

import pytest

from setpoint.testing.controlplane import ControlPlaneError, find_binaries


def test_env_var_without_binaries_is_an_error_with_a_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_BIN", raising=False)
    with pytest.raises(ControlPlaneError, match="does not contain kube-apiserver and etcd"):
        find_binaries()


def test_envtest_assets_are_used_without_building(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("kube-apiserver", "etcd", "kubectl"):
        (tmp_path / name).write_text("#!/bin/sh\n")
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_BIN", raising=False)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = find_binaries()
    assert found.kube_apiserver == tmp_path / "kube-apiserver"
    assert found.kube_controller_manager is None
    assert found.source.startswith("KUBEBUILDER_ASSETS=")


def test_no_binaries_anywhere_lists_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_BIN", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    with pytest.raises(ControlPlaneError) as info:
        find_binaries()
    message = str(info.value)
    assert "KUBEBUILDER_ASSETS" in message
    assert str(tmp_path) in message
    assert "make controlplane" in message
