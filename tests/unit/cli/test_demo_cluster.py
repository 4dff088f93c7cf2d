"""``setpoint demo --nodes N``: the option, and the errors before anything starts."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from setpoint.cli import demo_cluster
from setpoint.cli.main import build_parser, main
from setpoint.testing import nodes
from setpoint.testing.nodes import MAX_NODES, NodesError


def test_nodes_defaults_to_the_plain_demo_and_takes_0_to_the_plane_maximum() -> None:
    parser = build_parser("demo")
    assert parser.parse_args(["demo"]).nodes == 0
    assert parser.parse_args(["demo", "--nodes", "2"]).nodes == 2
    assert parser.parse_args(["demo", "--nodes", str(MAX_NODES)]).nodes == MAX_NODES


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "-1: a plane has 0 to 9 nodes"),
        (str(MAX_NODES + 1), f"{MAX_NODES + 1}: a plane has 0 to 9 nodes"),
        ("two", "'two' is not a number of nodes"),
    ],
)
def test_a_bad_node_count_is_a_usage_error(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser("demo").parse_args(["demo", "--nodes", value])
    assert exited.value.code == 2
    assert f"argument --nodes: {message}" in capsys.readouterr().err


def test_nodes_runs_the_cluster_demo_with_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, bool]] = []

    def run_demo(count: int, *, keep: bool = False) -> int:
        calls.append((count, keep))
        return 7

    monkeypatch.setattr(demo_cluster, "run_demo", run_demo)
    assert main(["demo", "--nodes", "3", "--keep"]) == 7
    assert main(["demo", "--nodes", "2"]) == 7
    assert calls == [(3, True), (2, False)]


def _nothing_may_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the demo went on after a failed check")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    monkeypatch.setattr(demo_cluster, "_ensure_binaries", refuse)
    monkeypatch.setattr(demo_cluster, "_preflight_nodes", refuse)


def test_not_root_is_refused_before_anything_starts_naming_the_make_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    _nothing_may_start(monkeypatch)
    assert main(["demo", "--nodes", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "`setpoint demo --nodes 2` needs root" in captured.err
    assert "sudo make demo-cluster" in captured.err
    assert "plain `setpoint demo`" in captured.err


def test_missing_packages_name_them_and_make_cluster_deps() -> None:
    with pytest.raises(NodesError) as raised:
        demo_cluster.check_host(2, euid=0, which=lambda tool: None)
    message = str(raised.value)
    assert "containerd" in message and "socat" in message
    assert "make cluster-deps" in message


def test_missing_debootstrap_names_make_cluster_deps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "check_machine", lambda **kwargs: None)  # the nodes' packages
    with pytest.raises(NodesError, match=r"debootstrap.*make cluster-deps"):
        demo_cluster.check_host(2, euid=0, which=lambda tool: None)
    demo_cluster.check_host(2, euid=0, which=lambda tool: f"/usr/sbin/{tool}")


def test_the_overlay_points_at_config_default_with_the_replicas(tmp_path: Path) -> None:
    overlay = demo_cluster.write_overlay(tmp_path / "overlay", replicas=3)
    text = (overlay / "kustomization.yaml").read_text()
    base = text.split("resources:\n- ", 1)[1].split("\n", 1)[0]
    assert not Path(base).is_absolute()  # kustomize refuses absolute bases
    assert (overlay / base).resolve() == demo_cluster.config_dir()
    assert (demo_cluster.config_dir() / "kustomization.yaml").is_file()
    assert "replicas: 3" in text
    assert f"name: {demo_cluster.DEPLOYMENT}" in text
