"""The plugin's ``--setpoint-blocked-loop``: an async test that blocks its loop fails (issue 30).

A project's tests run by pytest in a subprocess (under ``tmp_path``, with its own ini), as a
user's suite would: one test blocks the loop in ``time.sleep``, one awaits; with the option
the first fails naming the blocking line, and without it both pass.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = """
import asyncio
import time


def hold_the_loop():
    time.sleep(0.5)  # ten times the threshold: caught however loaded the machine is


async def test_blocks_the_loop():
    hold_the_loop()


async def test_awaits():
    await asyncio.sleep(0.01)


def test_sync_is_not_watched():
    time.sleep(0.2)
"""


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def project(tmp_path: Path, ini: str = "") -> Path:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n" + ini
    )
    (tmp_path / "test_project.py").write_text(textwrap.dedent(TESTS))
    return tmp_path


def test_an_async_test_that_blocks_its_loop_fails_with_the_blocking_line(tmp_path: Path) -> None:
    run = run_pytest(project(tmp_path), "--setpoint-blocked-loop=0.05")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 failed, 2 passed" in out, out
    assert "FAILED test_project.py::test_blocks_the_loop" in out, out
    assert "the event loop was blocked for more than 0.05s during this test" in out, out
    assert "test_project.py:7 in hold_the_loop" in out, out


def test_the_option_is_off_by_default_and_read_from_the_ini(tmp_path: Path) -> None:
    run = run_pytest(project(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    on = run_pytest(project(tmp_path, "setpoint_blocked_loop = 0.05\n"))
    assert on.returncode == 1 and "test_blocks_the_loop" in on.stdout, on.stdout + on.stderr
    bad = run_pytest(project(tmp_path), "--setpoint-blocked-loop=soon")
    assert bad.returncode == 4 and "give a number of seconds" in bad.stderr, bad.stderr
