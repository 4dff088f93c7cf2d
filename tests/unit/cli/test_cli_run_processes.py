"""`setpoint run --processes`: parsing, the variable, and leader election turned on."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from setpoint.cli import run
from setpoint.cli.main import build_parser, main
from setpoint.manager import Manager, processes
from setpoint.manager.workerendpoints import SupervisorEndpoints
from setpoint.testing.waits import eventually
from setpoint.webhook import server as webhook_server
from setpoint.webhook.server import CertificateDirectory
from tests.unit.cli.test_cli_run import (
    clean_imports,  # noqa: F401  (a fixture)
    der,
    kubeconfig,
    served_certificate,
    write,
    write_pair,
)
from tests.unit.manager.test_processes import Fakes, _supervise_fakes


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


# -- the supervisor's metrics certificate --


@dataclass(frozen=True)
class _FastDirectory(CertificateDirectory):
    """The CLI's certificate watch on a short poll, so the test does not wait 10 s."""

    poll_interval: float = 0.02


@pytest.mark.usefixtures("clean_imports")
async def test_the_supervisor_reloads_the_metrics_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`setpoint run --processes 2 --metrics-cert-dir`: the supervisor serves the public
    /metrics, so it is the one that must serve the renewed certificate from the next
    handshake, as one process does (the workers serve plain loopback HTTP)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path / "absent"))
    write(tmp_path / "op_supervised.py", "def setup(manager):\n    pass\n")
    first = write_pair(tmp_path / "certs", "metrics-first")
    fakes = Fakes(tmp_path)
    _supervise_fakes(monkeypatch, fakes.env)
    monkeypatch.setattr(webhook_server, "CertificateDirectory", _FastDirectory)
    managers: list[Manager] = []
    endpoints: list[SupervisorEndpoints] = []
    run_manager, start_endpoints = Manager.run, SupervisorEndpoints.start

    async def capture_manager(self: Manager) -> None:
        managers.append(self)
        await run_manager(self)

    async def capture_endpoints(self: SupervisorEndpoints) -> None:
        await start_endpoints(self)
        endpoints.append(self)

    monkeypatch.setattr(Manager, "run", capture_manager)
    monkeypatch.setattr(SupervisorEndpoints, "start", capture_endpoints)
    argv = ["run", "op_supervised.py", "--kubeconfig", str(kubeconfig(tmp_path))]
    argv += ["--processes", "2", "--metrics-secure", "--metrics-bind-address=127.0.0.1:0"]
    argv += ["--health-probe-bind-address=0", f"--metrics-cert-dir={tmp_path / 'certs'}"]
    # main() runs its own event loop (the supervisor's) in a thread; this test's loop looks.
    running = asyncio.create_task(asyncio.to_thread(main, argv))
    try:
        await eventually(lambda: bool(endpoints) or running.done(), timeout=20)
        assert not running.done(), "setpoint run ended before serving /metrics"
        [manager], [served] = managers, endpoints
        assert manager.supervisor is not None  # the supervisor, not a worker
        address = served.metrics_address
        assert address is not None
        assert await asyncio.to_thread(served_certificate, address) == der(first)
        second = write_pair(tmp_path / "certs", "metrics-second")

        async def renewed() -> bool:
            return await asyncio.to_thread(served_certificate, address) == der(second)

        await eventually(renewed, timeout=20, description="the renewed certificate served")
    finally:
        if managers:
            managers[0].stop()
        code = await asyncio.wait_for(running, 30)
    assert code == 0


@pytest.mark.usefixtures("clean_imports")
def test_workers_do_not_watch_the_metrics_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker serves plain loopback metrics: the CLI adds no certificate watch there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "SERVICE_ACCOUNT_DIR", str(tmp_path / "absent"))
    write(tmp_path / "op_worker.py", "def setup(manager):\n    pass\n")
    write_pair(tmp_path / "certs", "metrics-first")
    monkeypatch.setenv(processes.WORKER_INDEX_ENV, "0")
    monkeypatch.setenv(processes.WORKER_COUNT_ENV, "2")
    managers: list[Manager] = []

    async def capture(self: Manager) -> None:
        managers.append(self)

    monkeypatch.setattr(Manager, "run", capture)
    argv = ["run", "op_worker.py", "--kubeconfig", str(kubeconfig(tmp_path))]
    argv += ["--processes", "2", "--metrics-secure", f"--metrics-cert-dir={tmp_path / 'certs'}"]
    assert main(argv) == 0
    [manager] = managers
    assert manager.worker is not None and manager.options.metrics_tls is None
    assert "metrics-server" in [r.name for r in manager.runnables]
    assert "metrics-certificate" not in [r.name for r in manager.runnables]
