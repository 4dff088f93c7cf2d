"""The release matrix: choosing a Kubernetes release and generating its Go wrapper module."""

from pathlib import Path

import pytest

from setpoint.cli.main import main
from setpoint.testing.build import build_controlplane, generate_module, render_go_mod
from setpoint.testing.controlplane import (
    DEFAULT_KUBERNETES_VERSION,
    SUPPORTED_KUBERNETES_VERSIONS,
    ControlPlaneError,
    ControlPlaneOptions,
    find_binaries,
    selected_kubernetes_version,
)

UPSTREAM = """module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
\tgo.etcd.io/etcd/server/v3 v3.6.5 // indirect
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/api => ./staging/src/k8s.io/api
)
"""


def test_the_default_is_the_newest_supported_release() -> None:
    assert SUPPORTED_KUBERNETES_VERSIONS[-1] == DEFAULT_KUBERNETES_VERSION
    assert len(SUPPORTED_KUBERNETES_VERSIONS) == 3
    minors = [int(v.split(".")[1]) for v in SUPPORTED_KUBERNETES_VERSIONS]
    assert minors == sorted(set(minors))


def test_the_variable_selects_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_VERSION", raising=False)
    assert selected_kubernetes_version() == DEFAULT_KUBERNETES_VERSION
    monkeypatch.setenv("SETPOINT_CONTROLPLANE_VERSION", SUPPORTED_KUBERNETES_VERSIONS[0])
    assert selected_kubernetes_version() == SUPPORTED_KUBERNETES_VERSIONS[0]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1.36", r"SETPOINT_CONTROLPLANE_VERSION='1\.36' is not a Kubernetes release of the form"),
        ("v1.30.0", r"'v1\.30\.0' is not a supported Kubernetes release; setpoint is tested on"),
    ],
)
def test_a_bad_variable_names_itself_and_the_supported_releases(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("SETPOINT_CONTROLPLANE_VERSION", value)
    with pytest.raises(ControlPlaneError, match=message) as info:
        selected_kubernetes_version()
    assert all(v in str(info.value) for v in SUPPORTED_KUBERNETES_VERSIONS)


def test_binaries_are_looked_up_in_the_selected_release_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = SUPPORTED_KUBERNETES_VERSIONS[0]
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_BIN", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SETPOINT_CONTROLPLANE_VERSION", old)
    bin_dir = tmp_path / "controlplane" / old / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("kube-apiserver", "etcd"):
        (bin_dir / name).write_text("#!/bin/sh\n")
    assert find_binaries().kube_apiserver == bin_dir / "kube-apiserver"
    assert ControlPlaneOptions().version is None  # resolved when the plane starts
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_VERSION")
    with pytest.raises(ControlPlaneError, match=rf"build --version {DEFAULT_KUBERNETES_VERSION}"):
        find_binaries()


def test_render_go_mod_takes_go_etcd_and_staging_from_the_release() -> None:
    text = render_go_mod("v1.35.4", UPSTREAM)
    assert "module setpoint.dev/controlplane\n" in text
    assert "\ngo 1.25.0\n" in text
    assert "\tgo.etcd.io/etcd/server/v3 v3.6.5\n" in text
    assert "\tk8s.io/kubernetes v1.35.4\n" in text
    # each staging module once, at the release's published v0.Y.Z
    assert text.count("k8s.io/api => k8s.io/api v0.35.4") == 1
    assert "k8s.io/client-go => k8s.io/client-go v0.35.4" in text


def test_render_go_mod_refuses_a_layout_it_does_not_know() -> None:
    with pytest.raises(ControlPlaneError, match="has no staging replacements"):
        render_go_mod(
            "v1.36.3",
            "module k8s.io/kubernetes\n\ngo 1.26.0\nrequire go.etcd.io/etcd/server/v3 v3.6.8\n",
        )
    with pytest.raises(ControlPlaneError, match=r"not of the form v1\.Y\.Z"):
        render_go_mod("1.36", UPSTREAM)


def test_the_default_release_builds_from_the_packaged_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SETPOINT_CONTROLPLANE_SRC", raising=False)
    assert generate_module(DEFAULT_KUBERNETES_VERSION).name == "controlplane_src"


def test_an_unsupported_build_fails_before_touching_go(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # no go: the check must come first
    with pytest.raises(ControlPlaneError, match=r"--version='v1\.20\.0' is not a supported"):
        build_controlplane(version="v1.20.0")
    assert not any(tmp_path.iterdir())


def test_a_cached_release_needs_no_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    old = SUPPORTED_KUBERNETES_VERSIONS[0]
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    bin_dir = tmp_path / "controlplane" / old / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl"):
        (bin_dir / name).write_bytes(b"x" * 10)
    result = build_controlplane(version=old)
    assert result.version == old
    assert result.binaries["etcd"] == (10, 0.0)


def test_the_cli_reports_a_bad_version_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controlplane", "build", "--version", "v9.9.9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("setpoint: error: --version='v9.9.9' is not a supported")
    assert "Traceback" not in err
