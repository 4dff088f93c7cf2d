"""The plugin's ``--setpoint-nodes``: the session's plane gets N worker nodes (issue 29).

A project's tests run by pytest in a subprocess (under ``tmp_path``, with its own ini), as a
user's suite would. Its conftest swaps the plugin's ``ControlPlane`` for a stand-in that
records its options and stops with the leftovers the test names, so no plane (and no node)
starts: what is proven is the option's parsing and what the ``control_plane`` fixture does
with it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import cast

import pytest

from setpoint.testing.pytest_plugin import node_count

CONFTEST = """
import os

import setpoint.testing.pytest_plugin as plugin


class StandIn:
    def __init__(self, options):
        self.options = options
        self.node_leftovers = []

    def start(self):
        pass

    def stop(self):
        left = os.environ.get("LEFT")
        self.node_leftovers = [left] if left else []


plugin.ControlPlane = StandIn
"""

TESTS = """
def test_the_plane_has_the_nodes_asked_for(control_plane):
    print(f"NODES={control_plane.options.nodes}")
"""


def run_pytest(project: Path, *args: str, left: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "-rfE", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**_clean_env(), "LEFT": left},
    )


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("SETPOINT_USE_EXISTING_CLUSTER", "PYTEST_ADDOPTS")
    }


def project(tmp_path: Path, ini: str = "") -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ini)
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_project.py").write_text(textwrap.dedent(TESTS))
    return tmp_path


class Config:
    """What :func:`node_count` reads from a pytest config: the option, then the ini."""

    def __init__(self, option: str | None, ini: str = "") -> None:
        self.option = option
        self.ini = ini

    def getoption(self, name: str, default: object = None) -> str | None:
        assert name == "setpoint_nodes"
        return self.option

    def getini(self, name: str) -> str:
        assert name == "setpoint_nodes"
        return self.ini


def count(option: str | None, ini: str = "") -> int:
    return node_count(cast(pytest.Config, Config(option, ini)))


def test_the_option_wins_over_the_ini_and_the_default_is_no_nodes() -> None:
    assert count(None) == 0
    assert count("") == 0
    assert count(None, "1") == 1
    assert count("3", "1") == 3
    assert count(" 9 ") == 9
    assert count("0", "2") == 0


def test_a_count_that_is_not_a_whole_number_from_0_to_9_is_a_usage_error() -> None:
    for bad in ("ten", "-1", "10", "1.5", "0x2"):
        with pytest.raises(pytest.UsageError) as caught:
            count(bad)
        assert str(caught.value) == (
            f"--setpoint-nodes={bad!r}: give a number of worker nodes from 0 to 9"
        )
    with pytest.raises(pytest.UsageError, match="'many'"):
        count(None, "many")


def test_the_control_plane_fixture_starts_the_plane_with_the_nodes_asked_for(
    tmp_path: Path,
) -> None:
    option = run_pytest(project(tmp_path, "setpoint_nodes = 1\n"), "--setpoint-nodes", "2")
    assert option.returncode == 0 and "NODES=2" in option.stdout, option.stdout
    ini = run_pytest(project(tmp_path, "setpoint_nodes = 1\n"))
    assert ini.returncode == 0 and "NODES=1" in ini.stdout, ini.stdout
    bad = run_pytest(project(tmp_path), "--setpoint-nodes=ten")
    assert bad.returncode == 4, (bad.stdout, bad.stderr)
    assert "give a number of worker nodes from 0 to 9" in bad.stderr, bad.stderr
    assert "NODES=" not in bad.stdout


def test_what_stopping_the_nodes_left_on_the_host_fails_the_session(tmp_path: Path) -> None:
    run = run_pytest(project(tmp_path), "--setpoint-nodes=1", left="network namespace node1")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 passed, 1 error" in out, out
    assert "stopping the plane's nodes left this on the host" in out, out
    assert "network namespace node1" in out and "down --clean" in out, out
