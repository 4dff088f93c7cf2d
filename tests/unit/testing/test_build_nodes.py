"""`setpoint controlplane build --nodes`: kubelet, kube-proxy and kube-scheduler, opt-in."""

import json
from pathlib import Path

import pytest

import setpoint.testing.build as build_module
from setpoint.cli.main import main
from setpoint.testing import nodes
from setpoint.testing.build import build_controlplane, controlplane_source_dir
from setpoint.testing.controlplane import SUPPORTED_KUBERNETES_VERSIONS, ControlPlaneError

PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
NODE = ("kubelet", "kube-proxy", "kube-scheduler")
OLD = SUPPORTED_KUBERNETES_VERSIONS[0]
OLD_TOOLS = (
    "package tools\n\nimport (\n"
    '\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n'
    '\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n'
    '\t_ "k8s.io/kubernetes/cmd/kubectl"\n)\n'
)


def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> Path:
    monkeypatch.setenv("SETPOINT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-go-here"))
    bin_dir = tmp_path / "controlplane" / OLD / "bin"
    bin_dir.mkdir(parents=True)
    for name in names:
        (bin_dir / name).write_bytes(b"x" * 10)
    return bin_dir


def _module(directory: Path, tools: str) -> Path:
    directory.mkdir()
    (directory / "go.mod").write_text(f"module x\n\nrequire (\n\tk8s.io/kubernetes {OLD}\n)\n")
    (directory / "tools.go").write_text(tools)
    return directory


def test_the_packaged_module_keeps_the_node_commands_dependencies() -> None:
    # go.sum covers only what tools.go (or a build) imports: without these lines
    # `go build k8s.io/kubernetes/cmd/kubelet` fails on missing go.sum entries.
    tools = (controlplane_source_dir() / "tools.go").read_text()
    for name in NODE:
        assert f'"k8s.io/kubernetes/cmd/{name}"' in tools


def test_the_default_build_does_not_build_node_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cache(tmp_path, monkeypatch, PLANE)
    result = build_controlplane(version=OLD)  # no go on PATH: nothing may be built
    assert sorted(result.binaries) == sorted(PLANE)


def test_nodes_builds_the_node_binaries_when_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cache(tmp_path, monkeypatch, PLANE)
    generated = _module(tmp_path / "module", (controlplane_source_dir() / "tools.go").read_text())
    monkeypatch.setattr(build_module, "generate_module", lambda *a, **k: generated)
    # The plane is cached, the node binaries are not: the build goes on to Go.
    with pytest.raises(ControlPlaneError, match="the `go` command is not on PATH"):
        build_controlplane(version=OLD, nodes=True)


def test_cached_node_binaries_need_no_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cache(tmp_path, monkeypatch, PLANE + NODE)
    result = build_controlplane(version=OLD, nodes=True)
    assert sorted(result.binaries) == sorted(PLANE + NODE)
    assert result.binaries["kubelet"] == (10, 0.0)


def test_a_module_generated_before_the_node_commands_is_generated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cache(tmp_path, monkeypatch, PLANE)
    stale = _module(tmp_path / "stale", OLD_TOOLS)
    fresh = _module(tmp_path / "fresh", (controlplane_source_dir() / "tools.go").read_text())
    calls: list[bool] = []

    def generate(version: str, *, out: object = None, force: bool = False) -> Path:
        calls.append(force)
        return fresh if force else stale

    monkeypatch.setattr(build_module, "generate_module", generate)
    with pytest.raises(ControlPlaneError, match="the `go` command is not on PATH"):
        build_controlplane(version=OLD, nodes=True)
    assert calls == [False, True]


def test_a_module_that_cannot_build_nodes_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cache(tmp_path, monkeypatch, PLANE)
    stale = _module(tmp_path / "stale", OLD_TOOLS)
    monkeypatch.setattr(build_module, "generate_module", lambda *a, **k: stale)
    with pytest.raises(ControlPlaneError, match="does not import kubelet, kube-proxy"):
        build_controlplane(version=OLD, nodes=True)


def test_the_cli_passes_nodes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cache(tmp_path, monkeypatch, PLANE + NODE)
    # CoreDNS and the CNI plugins built already (their own Go modules): nothing to build.
    for built in [nodes.coredns_binary()] + [nodes.cni_bin_dir() / p for p in nodes.CNI_PLUGINS]:
        built.parent.mkdir(parents=True, exist_ok=True)
        built.write_bytes(b"x" * 10)
    assert main(["controlplane", "build", "--nodes", "--version", OLD]) == 0
    out = capsys.readouterr().out
    for name in (*NODE, "coredns", "cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap"):
        assert f"{name} " in out
    assert f"CNI plugins: {nodes.cni_bin_dir()}" in out


FAKE_GO = """#!/bin/sh
case "$1" in
  version) echo "go version fake";;
  list) echo a; echo b;;
  build) while [ "$#" -gt 0 ]; do [ "$1" = -o ] && printf 1234567 > "$2"; shift; done;;
esac
"""


def test_building_node_binaries_keeps_the_planes_recorded_build_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = _cache(tmp_path, monkeypatch, PLANE)
    go_dir = tmp_path / "no-go-here"
    go_dir.mkdir()
    (go_dir / "go").write_text(FAKE_GO)
    (go_dir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", f"{go_dir}:/usr/bin:/bin")
    module = _module(tmp_path / "module", (controlplane_source_dir() / "tools.go").read_text())
    monkeypatch.setattr(build_module, "generate_module", lambda *a, **k: module)
    earlier = {name: {"bytes": 10, "build_seconds": 99.0} for name in PLANE}
    (bin_dir.parent / "build.json").write_text(json.dumps({"binaries": earlier}))

    result = build_controlplane(version=OLD, nodes=True)

    assert result.binaries["kubelet"][0] == 7
    recorded = json.loads((bin_dir.parent / "build.json").read_text())["binaries"]
    assert recorded["kube-apiserver"] == {"bytes": 10, "build_seconds": 99.0}
    assert recorded["kubelet"]["bytes"] == 7
