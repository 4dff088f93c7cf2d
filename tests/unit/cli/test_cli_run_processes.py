"""`setpoint run --processes`: parsing, the variable, and leader election turned on."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from setpoint.cli import run
from setpoint.cli.main import build_parser
from setpoint.manager import processes


def settings(*argv: str, env: dict[str, str] | None = None) -> run.RunSettings:
    args = build_parser().parse_args(["run", *argv])
    assert isinstance(args, argparse.Namespace)
    return run.resolve_settings(args, env or {})


def test_processes_default_to_one_and_change_nothing() -> None:
    options = run.build_manager_options(settings("op"), "op")
    assert options.processes == 1
    assert options.leader_election is None


def test_processes_turn_leader_election_on_and_say_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path / "absent"))
    caplog.set_level("INFO", logger="setpoint.cli.run")
    options = run.build_manager_options(settings("op", "--processes", "2"), "my_op")
    assert options.processes == 2
    assert options.leader_election is not None
    assert options.leader_election.name == "my-op-leader-election"
    assert "--processes 2: leader election is turned on" in caplog.text


def test_processes_from_the_variable_and_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings("op", env={"SETPOINT_PROCESSES": "3"}).processes == 3
    assert settings("op", "--processes", "1", env={"SETPOINT_PROCESSES": "3"}).processes == 1
    monkeypatch.setattr(processes, "cpu_count", lambda: 4)
    options = run.build_manager_options(settings("op", "--processes", "auto"), "op")
    assert options.processes == "auto" and options.leader_election is not None
    monkeypatch.setattr(processes, "cpu_count", lambda: 1)
    one = run.build_manager_options(settings("op", env={"SETPOINT_PROCESSES": "auto"}), "op")
    assert one.processes == 1 and one.leader_election is None  # one CPU: today's path


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_bad_process_counts_are_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"SETPOINT_PROCESSES=.*at least 1, or 'auto'"):
        settings("op", env={"SETPOINT_PROCESSES": value})
    with pytest.raises(SystemExit) as exit_info:
        settings("op", "--processes", value)
    assert exit_info.value.code == 2
    assert "--processes" in capsys.readouterr().err
