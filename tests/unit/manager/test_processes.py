"""Worker processes (decision 0038): CPU count, the worker contract, options, the supervisor.

The supervisor tests run small fake workers (``python -c``, no setpoint import) that speak
the channel protocol, so they start in a few tens of milliseconds; the real worker side (a
Manager in worker mode) is tested against the fake client at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.clock import LoopClock
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import labels_of
from setpoint.api.runnable import RunnableGroup
from setpoint.manager import (
    LeaderElectionLost,
    LeaderElectionOptions,
    Manager,
    ManagerOptions,
    RunnableFailed,
)
from setpoint.manager import processes as proc
from setpoint.manager.processes import (
    Supervisor,
    ThreadedRunnable,
    WorkerEnvironment,
    WorkerStartupFailed,
    cpu_count,
    resolve_processes,
    worker_environment,
    worker_name,
    worker_options,
)
from setpoint.manager.sharding import ShardingOptions, shard_label
from setpoint.manager.workersplit import SupervisorLock, worker_of
from setpoint.observability.metrics import Metrics
from setpoint.observability.recording import RecordOptions
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from tests._support.kinds import GIZMO, Gizmo
from tests._support.manager_fakes import FakeHttpServer, FakeRunnable

LE = LeaderElectionOptions(name="my-operator.leader", namespace="ops")

# -- how many ------------------------------------------------------------------------------


def _cgroup_v2(root: Path, path: str, limits: dict[str, str]) -> None:
    for sub, value in limits.items():
        directory = root / sub.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.max").write_text(value + "\n")
    (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)


def test_cpu_count_reads_the_tightest_cgroup_v2_quota_rounded_up(tmp_path: Path) -> None:
    _cgroup_v2(
        tmp_path,
        "/kubepods/pod1/ctr",
        {
            "/kubepods": "800000 100000",
            "/kubepods/pod1": "250000 100000",
            "/kubepods/pod1/ctr": "max 100000",
        },
    )
    got = cpu_count(cgroup_root=tmp_path, proc_cgroup="0::/kubepods/pod1/ctr\n", affinity=16)
    assert got == 3  # 2.5 CPUs from the Pod's cgroup, rounded up


def test_cpu_count_is_capped_by_the_affinity_and_at_least_one(tmp_path: Path) -> None:
    _cgroup_v2(tmp_path, "/a", {"/a": "800000 100000"})
    assert cpu_count(cgroup_root=tmp_path, proc_cgroup="0::/a\n", affinity=2) == 2
    _cgroup_v2(tmp_path, "/b", {"/b": "10000 100000"})
    assert cpu_count(cgroup_root=tmp_path, proc_cgroup="0::/b\n", affinity=8) == 1


def test_cpu_count_without_a_quota_is_the_affinity(tmp_path: Path) -> None:
    _cgroup_v2(tmp_path, "/a", {"/a": "max 100000"})
    assert cpu_count(cgroup_root=tmp_path, proc_cgroup="0::/a\n", affinity=5) == 5
    assert cpu_count(cgroup_root=tmp_path / "none", proc_cgroup="", affinity=3) == 3


def test_cpu_count_reads_cgroup_v1(tmp_path: Path) -> None:
    directory = tmp_path / "cpu,cpuacct" / "kubepods" / "x"
    directory.mkdir(parents=True)
    (directory / "cpu.cfs_quota_us").write_text("150000\n")
    (directory / "cpu.cfs_period_us").write_text("100000\n")
    text = "4:memory:/kubepods/x\n3:cpu,cpuacct:/kubepods/x\n"
    assert cpu_count(cgroup_root=tmp_path, proc_cgroup=text, affinity=8) == 2
    (directory / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_count(cgroup_root=tmp_path, proc_cgroup=text, affinity=8) == 8


def test_resolve_processes() -> None:
    assert resolve_processes(3) == 3
    assert resolve_processes("auto") >= 1
    for bad in (0, -1, True, 2.5, "two"):
        with pytest.raises(ValueError, match="whole number of at least 1"):
            resolve_processes(bad)  # type: ignore[arg-type]


# -- options -------------------------------------------------------------------------------


def test_manager_options_reject_bad_process_counts_and_missing_leader_election() -> None:
    with pytest.raises(ValueError, match=r"processes=0 must be a whole number"):
        ManagerOptions(processes=0)
    with pytest.raises(ValueError, match=r"processes='many'"):
        ManagerOptions(processes="many")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="processes=2 needs leader_election"):
        ManagerOptions(processes=2)
    ManagerOptions(processes=2, leader_election=LE)
    ManagerOptions(processes="auto")  # checked once resolved: one CPU needs nothing


def test_sharding_every_controller_excludes_a_list() -> None:
    ShardingOptions(ring="r", every_controller=True)
    with pytest.raises(ValueError, match="leave controllers empty"):
        ShardingOptions(ring="r", controllers=("a",), every_controller=True)
    with pytest.raises(ValueError, match="or set every_controller=True"):
        ShardingOptions(ring="r")


def test_worker_environment_contract() -> None:
    assert worker_environment({}) is None
    env = {
        proc.WORKER_INDEX_ENV: "1",
        proc.WORKER_COUNT_ENV: "3",
        proc.WORKER_CHANNEL_ENV: "7",
        proc.WORKER_WEBHOOK_FD_ENV: "9",
    }
    assert worker_environment(env) == WorkerEnvironment(1, 3, 7, 9)
    grouped = worker_environment({**env, proc.WORKER_GROUP_ENV: "pod-a-1f2e3d"})
    assert grouped is not None and grouped.group == "pod-a-1f2e3d"
    got = worker_options(ManagerOptions(processes=3, leader_election=LE), grouped)
    assert got.leader_election is not None and got.leader_election.lock is not None
    assert got.leader_election.lock.identity == "pod-a-1f2e3d-w1"
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        worker_environment({**env, proc.WORKER_INDEX_ENV: "3"})
    with pytest.raises(ValueError, match="SETPOINT_WORKER_COUNT='x' is not a number"):
        worker_environment({**env, proc.WORKER_COUNT_ENV: "x"})


def test_worker_names_are_stable_dns_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTNAME", "Tenant_Operator-7d9f.Pod")
    assert worker_name(0) == "tenant-operator-7d9f-pod-w0"
    assert worker_name(0) == worker_name(0)
    long = worker_name(12, "x" * 80)
    assert long.endswith("-w12") and len(long) <= 63


def test_worker_options_split_under_the_supervisors_lease_with_stable_ids(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOSTNAME", "pod-a")
    given = ManagerOptions(
        processes=2,
        leader_election=LE,
        metrics_bind_address=":8443",
        metrics_secure=True,
        health_probe_bind_address=":8081",
        record=RecordOptions(path=str(tmp_path / "rec.jsonl")),
    )
    got = worker_options(given, WorkerEnvironment(1, 2, None))
    assert got.sharding is None and got.leader_election is not None
    lock = got.leader_election.lock
    assert isinstance(lock, SupervisorLock) and lock.identity == "pod-a-w1"
    assert lock.describe() == "Lease my-operator.leader (held by the supervisor)"
    assert (got.metrics_bind_address, got.metrics_secure) == ("127.0.0.1:0", False)
    assert got.health_probe_bind_address == "127.0.0.1:0"
    assert got.record is not None and got.record.path == str(tmp_path / "rec.jsonl.w1")
    off = worker_options(
        ManagerOptions(processes=2, leader_election=LE, metrics_bind_address="0"),
        WorkerEnvironment(0, 2, None),
    )
    assert off.metrics_bind_address == "0"


def test_worker_options_keep_the_users_sharding_with_a_per_worker_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOSTNAME", "pod-a")
    sharding = ShardingOptions(ring="widgets", controllers=("widget",), shard_id="replica-3")
    le = LeaderElectionOptions(name="widgets", identity="me")
    given = ManagerOptions(processes=2, leader_election=le, sharding=sharding)
    got = worker_options(given, WorkerEnvironment(0, 2, None))
    assert got.sharding is not None and got.leader_election is not None
    assert got.sharding.controllers == ("widget",) and not got.sharding.every_controller
    assert got.sharding.shard_id == "replica-3-w0"
    assert got.leader_election.identity == "me-w0"


# -- the supervisor, with fake workers ---------------------------------------------------------

FAKE_WORKER = r"""
import json, os, signal, socket, sys, time
index = os.environ["SETPOINT_WORKER_INDEX"]
mode = os.environ.get("FAKE_MODE_" + index, "ok")
starts = os.environ["FAKE_STARTS"]
with open(starts, "a") as f:
    f.write(json.dumps({"i": int(index), "n": os.environ["SETPOINT_WORKER_COUNT"],
                        "g": os.environ["SETPOINT_WORKER_GROUP"], "pid": os.getpid()}) + "\n")
channel = socket.socket(fileno=int(os.environ["SETPOINT_WORKER_CHANNEL_FD"]))
def send(**m):
    channel.sendall(json.dumps(m).encode() + b"\n")
if mode == "fail":
    send(error="setup failed: no such kind")
    sys.exit(1)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif mode == "slow":  # a graceful shutdown that takes long; a second SIGTERM cuts it short
    def slow(*a):
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        with open(starts, "a") as f:
            f.write(json.dumps({"i": int(index), "stopping": os.getpid()}) + "\n")
        time.sleep(60)
        sys.exit(0)
    signal.signal(signal.SIGTERM, slow)
else:
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
send(metrics=["127.0.0.1", 9000 + int(index)], probes=["127.0.0.1", 9100 + int(index)])
if mode != "never-ready":
    send(ready=True)
buf, heard = b"", False
while chunk := channel.recv(4096):
    buf += chunk
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        if json.loads(line).get("lead") is not None and not heard:  # the supervisor leads
            heard = True
            with open(starts, "a") as f:
                f.write(json.dumps({"i": int(index), "leads": os.getpid()}) + "\n")
with open(starts, "a") as f:
    f.write(json.dumps({"i": int(index), "eof": os.getpid()}) + "\n")
"""


class Fakes:
    def __init__(self, tmp_path: Path) -> None:
        self.starts = tmp_path / "starts.jsonl"
        self.starts.touch()
        self.env = {**os.environ, "FAKE_STARTS": str(self.starts)}

    def supervisor(self, count: int, **kwargs: Any) -> Supervisor:
        values: dict[str, Any] = {
            "argv": [sys.executable, "-c", FAKE_WORKER],
            "environ": self.env,
            "clock": LoopClock(),
            "graceful_shutdown_timeout": 5.0,
            "restart_backoff": 0.01,
        }
        values.update(kwargs)
        return Supervisor(count, **values)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.starts.read_text().splitlines()]


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    return Fakes(tmp_path)


class Running:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(supervisor.run(self.stop))

    async def ready(self) -> None:
        await eventually(
            lambda: all(w.state == "ready" for w in self.supervisor.workers()),
            timeout=20,
            description="every worker ready",
        )

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 20)


@pytest.fixture
async def cleanup() -> AsyncIterator[list[Running]]:
    runs: list[Running] = []
    yield runs
    for run in runs:
        if not run.task.done():
            run.stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run.task, 20)


async def test_supervisor_starts_n_workers_with_the_contract_and_their_reports(
    fakes: Fakes, cleanup: list[Running]
) -> None:
    run = Running(fakes.supervisor(2))
    cleanup.append(run)
    await run.ready()
    workers = run.supervisor.workers()
    assert [w.index for w in workers] == [0, 1]
    assert [w.metrics_address for w in workers] == [("127.0.0.1", 9000), ("127.0.0.1", 9001)]
    assert [w.probe_address for w in workers] == [("127.0.0.1", 9100), ("127.0.0.1", 9101)]
    assert {(r["i"], r["n"]) for r in fakes.records()} == {(0, "2"), (1, "2")}
    assert {r["g"] for r in fakes.records()} == {run.supervisor.group}
    other = fakes.supervisor(2)
    assert other.group != run.supervisor.group  # two supervisors on one host never share ids
    pids = run.supervisor.pids()
    assert {w.pid for w in workers} == {pids[0], pids[1]} and None not in pids.values()
    await run.finish()
    assert [w.state for w in run.supervisor.workers()] == ["stopped", "stopped"]
    assert all(w.pid is None for w in run.supervisor.workers())


async def test_a_killed_worker_is_reaped_and_restarted_with_its_index(
    fakes: Fakes, cleanup: list[Running]
) -> None:
    supervisor = fakes.supervisor(2)
    supervisor.tell(lead=123.0, leader="pod")  # before any worker runs: each hears it at start
    run = Running(supervisor)
    cleanup.append(run)
    await run.ready()
    old = run.supervisor.pids()[1]
    assert old is not None
    os.kill(old, signal.SIGKILL)
    await eventually(
        lambda: (
            run.supervisor.pids()[1] not in (None, old)
            and run.supervisor.workers()[1].state == "ready"
        ),
        timeout=20,
        description="worker 1 restarted and ready",
    )
    # Reaped before its successor started: the old pid is gone, not a zombie.
    with pytest.raises(ProcessLookupError):
        os.kill(old, 0)
    assert run.supervisor.workers()[1].restarts == 1
    # The successor heard the supervisor's latest word too.
    successor = run.supervisor.pids()[1]
    await eventually(
        lambda: {r["leads"] for r in fakes.records() if "leads" in r} >= {old, successor},
        timeout=10,
        description="every worker, the successor too, heard the grant",
    )
    assert run.supervisor.workers()[0].restarts == 0
    assert [r["i"] for r in fakes.records() if "pid" in r].count(1) == 2
    assert len({r["g"] for r in fakes.records() if "pid" in r}) == 1  # the same identities
    await run.finish()


async def test_a_worker_that_crash_loops_counts_as_failed(
    fakes: Fakes, cleanup: list[Running]
) -> None:
    run = Running(fakes.supervisor(1, crash_loop_restarts=2, restart_reset_after=3600))
    cleanup.append(run)
    await run.ready()
    states: list[str] = []
    for _ in range(2):
        pid = run.supervisor.pids()[0]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

        def restarted(old: int = pid) -> bool:
            return run.supervisor.pids()[0] not in (None, old)

        await eventually(restarted, timeout=20, description="restarted")
        states.append(run.supervisor.workers()[0].state)
    assert states[-1] == "failed"
    assert run.supervisor.workers()[0].restarts == 2
    await run.finish()


async def test_a_worker_failing_before_it_was_ever_ready_stops_all_with_its_message(
    fakes: Fakes,
) -> None:
    fakes.env["FAKE_MODE_1"] = "fail"
    supervisor = fakes.supervisor(2)
    with pytest.raises(
        WorkerStartupFailed, match="worker 1 failed before it was ever ready: setup failed"
    ):
        await asyncio.wait_for(supervisor.run(asyncio.Event()), 20)
    assert [w.state for w in supervisor.workers()] == ["stopped", "stopped"]
    assert [r["i"] for r in fakes.records() if "pid" in r].count(1) == 1  # no restart loop


async def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace_period(
    fakes: Fakes,
) -> None:
    fakes.env["FAKE_MODE_0"] = "stubborn"
    run = Running(fakes.supervisor(2, graceful_shutdown_timeout=0.2))
    await run.ready()
    pid = run.supervisor.pids()[0]
    run.stop.set()
    with pytest.raises(TimeoutError, match=r"worker\(s\) 0 did not stop within 0.2s"):
        await asyncio.wait_for(run.task, 20)
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


SUPERVISOR = r"""
import asyncio, sys
from setpoint.api.clock import LoopClock
from setpoint.manager.processes import Supervisor
supervisor = Supervisor(1, argv=[sys.executable, "-c", sys.argv[1]], clock=LoopClock(),
                        graceful_shutdown_timeout=30)
asyncio.run(supervisor.run(asyncio.Event()))
"""


async def test_workers_leave_when_the_supervisor_is_killed(fakes: Fakes) -> None:
    env = {**fakes.env, "FAKE_MODE_0": "stubborn"}  # ignores SIGTERM: only the channel counts
    supervisor = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SUPERVISOR, FAKE_WORKER, env=env
    )
    try:
        await eventually(
            lambda: any("pid" in r for r in fakes.records()),
            timeout=20,
            description="the worker started",
        )
        (pid,) = [r["pid"] for r in fakes.records() if "pid" in r]
        supervisor.kill()
        await supervisor.wait()
        await eventually(
            lambda: any(r.get("eof") == pid for r in fakes.records()),
            timeout=20,
            description="the orphaned worker saw its channel close and left",
        )
    finally:
        if supervisor.returncode is None:
            supervisor.kill()
            await supervisor.wait()


# -- the worker side: a Manager in worker mode ------------------------------------------------


async def _noop(ctx: Any, request: Any) -> None:
    return None


def _worker_env(monkeypatch: pytest.MonkeyPatch, fd: int, index: int = 0) -> None:
    monkeypatch.setenv(proc.WORKER_INDEX_ENV, str(index))
    monkeypatch.setenv(proc.WORKER_COUNT_ENV, "2")
    monkeypatch.setenv(proc.WORKER_CHANNEL_ENV, str(fd))
    monkeypatch.setenv("HOSTNAME", "pod-x")


def _options(**overrides: Any) -> ManagerOptions:
    values: dict[str, Any] = {
        "metrics": Metrics(CollectorRegistry()),
        "new_http_server": FakeHttpServer,
        "handle_signals": False,
        "preflight": False,
        "graceful_shutdown_timeout": 5.0,
        "processes": 2,
        "leader_election": LeaderElectionOptions(
            name="ops", namespace="default", lease_duration=4, renew_deadline=3, retry_period=1
        ),
    }
    values.update(overrides)
    return ManagerOptions(**values)


async def test_a_ring_worker_manager_shards_reports_and_stops_when_the_supervisor_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent, child = socket.socketpair()
    _worker_env(monkeypatch, child.detach(), index=1)
    client = FakeClient()
    ring = ShardingOptions(ring="ops", every_controller=True)
    manager = Manager(client, _options(sharding=ring))
    assert manager.worker is not None and (manager.worker.index, manager.worker.count) == (1, 2)
    assert manager.identity == "pod-x-w1"
    manager.controller("cms").for_(kinds.ConfigMap).build(_noop)
    manager.controller("plain").watches(kinds.Secret, lambda obj: []).build(_noop)
    shard = manager.shard
    assert shard is not None and shard.shard == "pod-x-w1" and shard.ring == "ops"
    assert [c.controller_name for c in shard.controllers] == ["cms"]
    running = asyncio.create_task(manager.run())
    parent.setblocking(False)
    reader, writer = await asyncio.open_unix_connection(sock=parent)
    reports: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(20):
            while not any(r.get("ready") for r in reports):
                line = await reader.readline()
                assert line, "the worker closed its channel"
                reports.append(json.loads(line))
        assert "metrics" in reports[0] and "probes" in reports[0]
        writer.close()  # the supervisor is gone
        await asyncio.wait_for(running, 20)
    finally:
        if not running.done():
            manager.stop()
            await asyncio.wait_for(running, 20)


@pytest.mark.parametrize("index", [0, 1])
async def test_a_split_worker_reconciles_its_keys_only_while_the_supervisor_leads(
    monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    """Worker ``index`` of 2: its keys only, leader-only ones once granted, other leader-only
    work (not split) in worker 0 only."""
    parent, child = socket.socketpair()
    _worker_env(monkeypatch, child.detach(), index=index)
    client = FakeClient()
    names = [f"cm-{i}" for i in range(12)]
    for name in names:
        await client.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}}
        )
    manager = Manager(client, _options())
    assert manager.shard is None and manager.identity == f"pod-x-w{index}"
    log: list[str] = []
    manager.add(FakeRunnable("job", RunnableGroup.OTHERS, log, leader=True))
    reconciled: list[str] = []

    async def record(ctx: Any, request: Any) -> None:
        reconciled.append(request.name)

    manager.controller("cms").for_(kinds.ConfigMap).build(record)
    # One that runs without leader election is split too, and needs no grant.
    anywhere: list[str] = []

    async def record_anywhere(ctx: Any, request: Any) -> None:
        anywhere.append(request.name)

    manager.controller("anywhere").for_(kinds.Secret).needs_leader_election(False).build(
        record_anywhere
    )
    for name in names:
        await client.create(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "a"}}
        )
    mine = {n for n in names if worker_of(ObjectKey("a", n), 2) == index}
    assert 0 < len(mine) < len(names)
    running = asyncio.create_task(manager.run())
    parent.setblocking(False)
    reader, writer = await asyncio.open_unix_connection(sock=parent)

    def grant(lead: float | None) -> None:
        writer.write(json.dumps({"lead": lead, "leader": "pod-x"}).encode() + b"\n")

    try:
        await asyncio.wait_for(reader.readline(), 20)  # its addresses: it runs
        await eventually(
            lambda: set(anywhere) == mine, timeout=10, description="the leaderless controller"
        )
        await asyncio.sleep(1.0)  # campaigns without a grant: a quiet candidate
        assert not manager.is_leader and reconciled == []
        # The supervisor leads: fenced 4 s ahead (the test's lease_duration), renewed.
        async with asyncio.timeout(20):
            while set(reconciled) != mine:
                grant(time.monotonic() + 4)
                await asyncio.sleep(0.2)
        assert manager.is_leader
        # Leader-only work that is not split: one copy per Pod, as in one replica.
        if index == 0:
            await eventually(lambda: "start:job" in log, timeout=10, description="the job")
        else:
            await asyncio.sleep(0.5)  # as long as worker 0 may take to start it after cms
            assert "start:job" not in log, log
        grant(None)  # the supervisor lost its Lease: the worker fails as a leader would
        with pytest.raises(LeaderElectionLost):
            await asyncio.wait_for(running, 20)
        assert set(reconciled) == mine  # never another worker's key
        assert set(anywhere) == mine
    finally:
        writer.close()
        if not running.done():
            manager.stop()
            await asyncio.gather(running, return_exceptions=True)


def _supervise_fakes(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Make this process a supervisor whose workers run ``FAKE_WORKER`` with ``env``."""
    monkeypatch.delenv(proc.WORKER_INDEX_ENV, raising=False)
    monkeypatch.setattr(proc, "worker_argv", lambda: [sys.executable, "-c", FAKE_WORKER])
    monkeypatch.setattr(os, "environ", env)


async def _workers_ready(manager: Manager) -> None:
    await eventually(
        lambda: (
            manager.supervisor is not None
            and all(w.state == "ready" for w in manager.supervisor.workers())
        ),
        timeout=20,
        description="every worker ready",
    )


async def test_a_supervising_manager_runs_workers_and_nothing_else(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _supervise_fakes(monkeypatch, fakes.env)
    manager = Manager(FakeClient(), _options())
    manager.controller("cms").for_(kinds.ConfigMap).build(_noop)
    assert manager.shard is None  # the supervisor shards nothing
    running = asyncio.create_task(manager.run())
    try:
        await _workers_ready(manager)
        assert not manager.cache.synced  # nothing of the operator runs here
        # It holds the leader election Lease for the Pod and tells every worker so.
        await manager.wait_elected(10)
        lease = await manager.client.get(kinds.Lease, "ops", namespace="default")
        assert lease["spec"]["holderIdentity"] == manager.identity
        await eventually(
            lambda: {r["i"] for r in fakes.records() if "leads" in r} == {0, 1},
            timeout=10,
            description="both workers heard the supervisor's grant",
        )
        # The addresses are the supervisor's public endpoints (no server of its own runs).
        metrics, probes = manager.metrics_address, manager.health_probe_address
        assert metrics is not None and probes is not None and metrics != probes
    finally:
        manager.stop()
        await asyncio.wait_for(running, 20)
    assert manager.supervisor is not None
    assert [w.state for w in manager.supervisor.workers()] == ["stopped", "stopped"]


async def test_a_supervisor_that_cannot_campaign_stops_instead_of_idling(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an elector no worker would ever lead: the supervisor fails with the cause."""
    _supervise_fakes(monkeypatch, fakes.env)
    manager = Manager(FakeClient(), _options())

    def broken(le: LeaderElectionOptions) -> Any:
        raise RuntimeError("no lock for you")

    monkeypatch.setattr(manager, "_new_elector", broken)
    with pytest.raises(RuntimeError, match="no lock for you"):
        await asyncio.wait_for(manager.run(), 30)
    assert manager.supervisor is not None
    assert [w.state for w in manager.supervisor.workers()] == ["stopped", "stopped"]


async def test_a_supervising_manager_fails_with_the_workers_startup_error(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _supervise_fakes(monkeypatch, {**fakes.env, "FAKE_MODE_0": "fail"})
    manager = Manager(FakeClient(), _options())
    with pytest.raises(RunnableFailed, match="worker 0 failed before it was ever ready: setup"):
        await asyncio.wait_for(manager.run(), 20)


class _InSupervisor(FakeRunnable):
    """A runnable that records when it starts and stops, and what the workers were then."""

    def __init__(self, name: str, manager: Manager, leader: bool = False) -> None:
        super().__init__(name, RunnableGroup.SERVERS, [], leader=leader)
        self.manager = manager
        self.events: list[tuple[str, list[str]]] = []

    def _workers(self) -> list[str]:
        supervisor = self.manager.supervisor
        return [w.state for w in supervisor.workers()] if supervisor else []

    async def start(self) -> None:
        await super().start()
        self.events.append(("start", self._workers()))

    async def stop(self, timeout: float) -> None:
        await super().stop(timeout)
        self.events.append(("stop", self._workers()))


async def test_a_supervising_manager_runs_what_was_added_in_supervisor(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add(in_supervisor=True) runs in the supervisor (the metrics certificate's reload):
    started before the workers, stopped after them; anything else added does not run."""
    _supervise_fakes(monkeypatch, fakes.env)
    manager = Manager(FakeClient(), _options())
    early, plain, late = (_InSupervisor(n, manager) for n in ("early", "plain", "late"))
    manager.add(early, in_supervisor=True)
    manager.add(plain)
    with pytest.raises(
        ValueError, match=r"'leads' needs leader election.*none of the operator's leader-only work"
    ):
        manager.add(_InSupervisor("leads", manager, leader=True), in_supervisor=True)
    running = asyncio.create_task(manager.run())
    try:
        await _workers_ready(manager)
        manager.add(late, in_supervisor=True)  # while the supervisor runs: started at once
        await eventually(lambda: late.events, timeout=20, description="the late one started")
    finally:
        manager.stop()
        await asyncio.wait_for(running, 20)
    assert early.events == [("start", ["starting", "starting"]), ("stop", ["stopped"] * 2)]
    assert late.events == [("start", ["ready", "ready"]), ("stop", ["stopped", "stopped"])]
    assert plain.events == []


async def test_a_failure_in_the_supervisor_stops_the_workers_and_is_raised(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _supervise_fakes(monkeypatch, fakes.env)
    manager = Manager(FakeClient(), _options(failure_check_interval=0.01))
    watch = _InSupervisor("metrics-certificate", manager)
    manager.add(watch, in_supervisor=True)
    running = asyncio.create_task(manager.run())
    try:
        await _workers_ready(manager)
        watch.error = RuntimeError("the watch died")
        with pytest.raises(RunnableFailed, match="metrics-certificate failed: the watch died"):
            await asyncio.wait_for(running, 20)
    finally:
        if not running.done():
            manager.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running, 20)
    assert watch.events[-1] == ("stop", ["stopped", "stopped"])


def test_one_process_imports_nothing_of_the_supervisor() -> None:
    code = (
        "import sys\n"
        "from setpoint.manager import Manager, ManagerOptions\n"
        "from setpoint.testing import FakeClient\n"
        "Manager(FakeClient(), ManagerOptions())\n"
        "print('setpoint.manager.processes' in sys.modules)\n"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the sharder waits for the workers started together --------------------------------------

TIMINGS: dict[str, Any] = {"lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.5}


def _replica(fake: FakeClient, shard: str, wait_for_shards: int) -> Manager:
    manager = Manager(
        fake,
        ManagerOptions(
            metrics=Metrics(CollectorRegistry()),
            new_http_server=FakeHttpServer,
            handle_signals=False,
            graceful_shutdown_timeout=5.0,
            leader_election=LeaderElectionOptions(
                name="gizmo-operator", namespace="default", identity=shard, **TIMINGS
            ),
            sharding=ShardingOptions(
                ring="gizmos",
                every_controller=True,
                shard_id=shard,
                namespace="default",
                wait_for_shards=wait_for_shards,
                **TIMINGS,
            ),
        ),
    )
    manager.controller("gizmo").for_(GIZMO).build(_noop)
    return manager


async def _labels(fake: FakeClient) -> list[str]:
    items = await fake.list(GIZMO, namespace="default")
    return [labels_of(obj).get(shard_label("gizmos"), "") for obj in items]


async def test_the_sharder_waits_for_the_expected_shards_before_assigning() -> None:
    fake = FakeClient(resources=[Gizmo])
    for i in range(20):
        await fake.create(
            {
                "apiVersion": GIZMO.api_version,
                "kind": "Gizmo",
                "metadata": {"name": f"g{i:02d}", "namespace": "default"},
                "spec": {"size": i},
            }
        )
    first = _replica(fake, "a", wait_for_shards=2)
    tasks = [asyncio.create_task(first.run())]
    try:
        await first.wait_elected(10)
        await asyncio.sleep(0.5)  # the sharder runs; with one of two shards it assigns nothing
        assert set(await _labels(fake)) == {""}
        second = _replica(fake, "b", wait_for_shards=2)
        tasks.append(asyncio.create_task(second.run()))

        async def split() -> bool:
            labels = await _labels(fake)
            return "" not in labels and set(labels) == {"a", "b"}

        await eventually(split, timeout=10, description="both shards own objects")
        drains = [
            m.metrics.registry.get_sample_value("setpoint_shard_drains_total", {"ring": "gizmos"})
            for m in (first, second)
        ]
        assert set(drains) <= {None, 0.0}  # nobody took everything and gave half back
    finally:
        for manager in (first, *([second] if len(tasks) > 1 else [])):
            manager.stop()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_sharder_stops_waiting_after_a_lease_duration() -> None:
    fake = FakeClient(resources=[Gizmo])
    await fake.create(
        {
            "apiVersion": GIZMO.api_version,
            "kind": "Gizmo",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"size": 1},
        }
    )
    alone = _replica(fake, "a", wait_for_shards=3)
    task = asyncio.create_task(alone.run())
    try:

        async def assigned() -> bool:
            return await _labels(fake) == ["a"]

        await eventually(assigned, timeout=10, description="assigned to the only shard")
    finally:
        alone.stop()
        await asyncio.gather(task, return_exceptions=True)


def test_wait_for_shards_is_at_least_one_and_workers_wait_for_each_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="wait_for_shards must be >= 1"):
        ShardingOptions(ring="r", every_controller=True, wait_for_shards=0)
    ring = ShardingOptions(ring="r", every_controller=True)
    got = worker_options(
        ManagerOptions(processes=3, leader_election=LE, sharding=ring),
        WorkerEnvironment(0, 3, None),
    )
    assert got.sharding is not None and got.sharding.wait_for_shards == 3


async def test_a_second_signal_to_the_supervisor_is_passed_on_to_the_workers(
    fakes: Fakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    _supervise_fakes(monkeypatch, {**fakes.env, "FAKE_MODE_0": "slow", "FAKE_MODE_1": "slow"})
    manager = Manager(FakeClient(), _options(handle_signals=True, graceful_shutdown_timeout=60))
    before = signal.getsignal(signal.SIGTERM)
    running = asyncio.create_task(manager.run())
    try:
        await _workers_ready(manager)
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, before)
        os.kill(os.getpid(), signal.SIGTERM)
        await eventually(
            lambda: len([r for r in fakes.records() if "stopping" in r]) == 2,
            timeout=20,
            description="both workers shutting down slowly",
        )
        assert not running.done()
        os.kill(os.getpid(), signal.SIGTERM)  # what a second Ctrl-C or SIGTERM does
        await asyncio.wait_for(asyncio.shield(running), 20)  # well before the 60 s grace
    finally:
        if not running.done():
            manager.stop()
            await asyncio.gather(running, return_exceptions=True)


async def test_a_worker_command_that_cannot_start_stops_the_supervisor(fakes: Fakes) -> None:
    supervisor = fakes.supervisor(2, argv=["/nonexistent/python-for-setpoint", "-c", "pass"])
    with pytest.raises(WorkerStartupFailed, match="could not be started"):
        await asyncio.wait_for(supervisor.run(asyncio.Event()), 20)


def test_auto_on_several_cpus_needs_leader_election(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "cpu_count", lambda: 4)
    with pytest.raises(ValueError, match="processes='auto' needs leader_election"):
        Manager(FakeClient(), ManagerOptions(processes="auto"))
    monkeypatch.setattr(proc, "cpu_count", lambda: 1)
    manager = Manager(FakeClient(), ManagerOptions(processes="auto"))
    assert manager.worker is None and manager.shard is None  # one CPU: today's path


# -- a runnable on a thread's loop (the workers' sharder) ------------------------------------


class _Recorder(FakeRunnable):
    """A leader-only runnable that records the threads it starts and stops on."""

    def __init__(self, fail_start: bool = False) -> None:
        error = RuntimeError("cannot list the Leases") if fail_start else None
        super().__init__("recorder", RunnableGroup.OTHERS, [], leader=True, start_error=error)
        self.threads: list[str] = []
        self.stopped_with: float | None = None

    async def start(self) -> None:
        self.threads.append(threading.current_thread().name)
        await super().start()

    async def stop(self, timeout: float) -> None:
        self.threads.append(threading.current_thread().name)
        self.stopped_with = timeout
        await super().stop(timeout)


async def test_a_threaded_runnable_runs_on_its_own_thread_and_closes_after_stop() -> None:
    inner = _Recorder()
    closed: list[str] = []

    async def close() -> None:
        closed.append(threading.current_thread().name)

    runnable = ThreadedRunnable("sharder/x", RunnableGroup.OTHERS, True, lambda: (inner, close))
    assert (runnable.name, runnable.group, runnable.needs_leader_election) == (
        "sharder/x",
        RunnableGroup.OTHERS,
        True,
    )
    await runnable.start()
    assert inner.threads == ["setpoint-sharder/x"]
    assert runnable.failure() is None
    inner.error = RuntimeError("a sharder task died")
    assert runnable.failure() is inner.error
    await runnable.stop(2.5)
    assert inner.stopped_with == 2.5
    assert inner.threads[-1] == closed[-1] == "setpoint-sharder/x"
    assert threading.current_thread().name not in inner.threads


async def test_a_threaded_runnable_reports_a_failed_start() -> None:
    inner = _Recorder(fail_start=True)
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    runnable = ThreadedRunnable("sharder/x", RunnableGroup.OTHERS, True, lambda: (inner, close))
    with pytest.raises(RuntimeError, match="cannot list the Leases"):
        await runnable.start()
    assert closed == [True]
    await runnable.stop(1.0)  # nothing left to stop: returns at once


async def test_a_worker_killed_before_it_was_ready_is_restarted_not_fatal(
    fakes: Fakes, cleanup: list[Running]
) -> None:
    fakes.env["FAKE_MODE_0"] = "never-ready"
    run = Running(fakes.supervisor(1))
    cleanup.append(run)
    await eventually(lambda: run.supervisor.pids()[0] is not None, timeout=20, description="up")
    first = run.supervisor.pids()[0]
    assert first is not None and run.supervisor.workers()[0].state == "starting"
    os.kill(first, signal.SIGKILL)

    def restarted() -> bool:
        return run.supervisor.pids()[0] not in (None, first)

    await eventually(restarted, timeout=20, description="restarted after the kill")
    assert not run.task.done()
    await run.finish()
