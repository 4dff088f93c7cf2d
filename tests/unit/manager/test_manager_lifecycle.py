"""Manager lifecycle with fake runnables: order, failures, shutdown, leadership, signals."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.api.runnable import RunnableGroup
from setpoint.cache import CacheSyncTimeout
from setpoint.client import Client, ClientConfig
from setpoint.manager import (
    LeaderElectionLost,
    LeaderElectionOptions,
    LeadershipLossPolicy,
    Manager,
    ManagerOptions,
    ManagerStateError,
    RunnableFailed,
    ShutdownIncomplete,
    StartupSyncTimeout,
)
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from tests._support.manager_fakes import (
    FakeCache,
    FakeHttpServer,
    FakeRunnable,
    LeaseStore,
    MemoryLock,
    advance,
)
from tests._support.virtual_time import settle

G = RunnableGroup


def options(**overrides: Any) -> ManagerOptions:
    values: dict[str, Any] = {
        "metrics": Metrics(CollectorRegistry()),
        "new_http_server": FakeHttpServer,
        "handle_signals": False,
        "failure_check_interval": 0.02,
        "graceful_shutdown_timeout": 5.0,
    }
    values.update(overrides)
    return ManagerOptions(**values)


class Running:
    """A manager's run() in a task, with helpers to wait on it."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.task: asyncio.Task[None] = asyncio.create_task(manager.run())

    async def result(self, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            await asyncio.shield(self.task)


@pytest.fixture
async def running() -> AsyncIterator[Callable[[Manager], Running]]:
    started: list[Running] = []

    def start(manager: Manager) -> Running:
        run = Running(manager)
        started.append(run)
        return run

    yield start
    for run in started:  # never leave a manager running after a failed assertion
        run.manager.stop()
        await asyncio.gather(run.task, return_exceptions=True)


def contains(log: list[str], *items: str) -> Callable[[], bool]:
    return lambda: all(item in log for item in items)


async def test_groups_start_in_order_and_stop_in_reverse(
    running: Callable[[Manager], Running],
) -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    cache = FakeCache("cache", log)
    cache.synced_event.set()
    # Added out of order on purpose: the group decides, not the order of add().
    for runnable in (
        FakeRunnable("ctrl-leader", G.CONTROLLERS, log, leader=True),
        FakeRunnable("ctrl", G.CONTROLLERS, log),
        FakeRunnable("other-leader", G.OTHERS, log, leader=True),
        FakeRunnable("other", G.OTHERS, log),
        cache,
        FakeRunnable("webhook", G.WEBHOOKS, log),
        FakeRunnable("server", G.SERVERS, log),
    ):
        manager.add(runnable)
    run = running(manager)
    await eventually(contains(log, "start:ctrl-leader"), timeout=5, description="all started")
    assert log == [
        "start:server",
        "start:webhook",
        "start:cache",
        "synced:cache",
        "start:other",
        "start:ctrl",
        # Leader-only work starts once elected (at once without leader election).
        "start:other-leader",
        "start:ctrl-leader",
    ]
    assert manager.is_leader
    log.clear()
    manager.stop()
    await run.result()
    assert log == [
        "stop:ctrl-leader",
        "stop:other-leader",
        "stop:ctrl",
        "stop:other",
        "stop:cache",
        "stop:webhook",
        "stop:server",
    ]


async def test_controllers_wait_until_caches_have_synced(
    running: Callable[[Manager], Running],
) -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    cache = FakeCache("cache", log)
    manager.add(cache)
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    running(manager)
    await eventually(contains(log, "start:cache"), timeout=5, description="cache started")
    response = await manager.readyz.run("informer-sync")
    assert response == "caches not synced yet: cache"
    await settle()
    assert "start:ctrl" not in log
    cache.synced_event.set()
    await eventually(contains(log, "start:ctrl"), timeout=5, description="controller started")
    assert log.index("synced:cache") < log.index("start:ctrl")
    assert await manager.readyz.run("informer-sync") is None
    assert cache.sync_timeouts == [120.0]


async def test_a_cache_that_never_syncs_fails_startup_clearly() -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options(cache_sync_timeout=0.2))
    manager.add(FakeCache("informers", log))
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    with pytest.raises(StartupSyncTimeout) as info:
        await asyncio.wait_for(manager.run(), 10)
    assert isinstance(info.value, CacheSyncTimeout) and isinstance(info.value, RunnableFailed)
    assert info.value.runnable == "informers"
    assert "informers did not sync within 0.2s" in str(info.value)
    assert "list and watch" in str(info.value)
    assert "start:ctrl" not in log
    assert log[-1] == "stop:informers"


async def test_a_cache_sync_error_names_the_cache() -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    manager.add(FakeCache("informers", log, sync_error=LookupError("no kind Widget")))
    with pytest.raises(RunnableFailed, match="informers failed to sync: no kind Widget") as info:
        await asyncio.wait_for(manager.run(), 10)
    assert isinstance(info.value.__cause__, LookupError)


async def test_a_start_error_stops_what_started_and_raises() -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    manager.add(FakeRunnable("server", G.SERVERS, log))
    boom = OSError("port in use")
    manager.add(FakeRunnable("webhook", G.WEBHOOKS, log, start_error=boom))
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    with pytest.raises(RunnableFailed) as info:
        await asyncio.wait_for(manager.run(), 10)
    assert info.value.runnable == "webhook"
    assert "webhook failed to start: port in use" in str(info.value)
    assert info.value.__cause__ is boom
    assert "start:ctrl" not in log
    assert log[-2:] == ["stop:webhook", "stop:server"]


async def test_a_runnable_whose_work_dies_shuts_the_manager_down(
    running: Callable[[Manager], Running],
) -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    worker = FakeRunnable("worker", G.OTHERS, log)
    manager.add(worker)
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    run = running(manager)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    worker.error = RuntimeError("watch loop crashed")
    with pytest.raises(RunnableFailed, match="worker failed: watch loop crashed") as info:
        await run.result()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert log[-2:] == ["stop:ctrl", "stop:worker"]


async def test_stop_before_run_makes_run_return_at_once() -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    manager.stop()
    await asyncio.wait_for(manager.run(), 10)
    assert "start:ctrl" not in log


async def test_a_manager_runs_once() -> None:
    manager = Manager(FakeClient(), options())
    manager.stop()
    await manager.run()
    with pytest.raises(ManagerStateError, match="runs once"):
        await manager.run()
    with pytest.raises(ManagerStateError, match="shutting down or finished"):
        manager.add(FakeRunnable("late", G.OTHERS, []))


async def test_adding_twice_or_a_non_runnable_is_an_error() -> None:
    manager = Manager(FakeClient(), options())
    runnable = FakeRunnable("x", G.OTHERS, [])
    manager.add(runnable)
    with pytest.raises(ValueError, match="added to this manager already"):
        manager.add(runnable)
    with pytest.raises(TypeError, match="is not a Runnable"):
        not_a_runnable: Any = object()  # deliberately the wrong type
        manager.add(not_a_runnable)


async def test_a_runnable_added_while_running_starts_at_once(
    running: Callable[[Manager], Running],
) -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    run = running(manager)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    manager.add(FakeRunnable("late", G.OTHERS, log, leader=True))
    await eventually(contains(log, "start:late"), timeout=5, description="late one started")
    manager.stop()
    await run.result()
    assert log[-2:] == ["stop:late", "stop:ctrl"]


async def test_a_stop_that_overruns_the_grace_period_is_reported() -> None:
    log: list[str] = []
    # The budget is read on a ManualClock that stands still: the stuck runnable is given all
    # of it, exactly (the wait itself, 0.2 s plus slack, is real: nothing asserts it).
    manager = Manager(
        FakeClient(),
        options(graceful_shutdown_timeout=0.2, clock=ManualClock()),
    )
    stuck = FakeRunnable("stuck", G.OTHERS, log, stop_hangs=True)
    manager.add(stuck)
    manager.add(FakeRunnable("server", G.SERVERS, log))
    task = asyncio.create_task(manager.run())
    await eventually(contains(log, "start:stuck"), timeout=5, description="started")
    manager.stop()
    with pytest.raises(ShutdownIncomplete, match=r"stuck: did not stop within 0\.2s") as info:
        await asyncio.wait_for(task, 10)
    assert info.value.problems[0][0] == "stuck"
    assert stuck.stop_timeouts == [0.2]
    assert log[-1] == "stop:server"  # the others still stop


async def test_cancelling_run_shuts_down_gracefully_then_propagates() -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options())
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    task = asyncio.create_task(manager.run())
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log[-1] == "stop:ctrl"


async def test_sigterm_shuts_down_gracefully() -> None:
    log: list[str] = []
    manager = Manager(FakeClient(), options(handle_signals=True))
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    before = signal.getsignal(signal.SIGTERM)
    task = asyncio.create_task(manager.run())
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    # Only send the signal once the loop's handler is installed: the default would kill pytest.
    assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, before)
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 10)
    assert log[-1] == "stop:ctrl"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handler removed again


async def test_request_metrics_hook_is_installed_while_running(
    running: Callable[[Manager], Running],
) -> None:
    # The live client (it sends nothing here, with no preflight check): the hook lives on
    # its transport.
    client = Client(ClientConfig(server="https://api.invalid:6443"))
    seen: list[tuple[str, str, str]] = []

    def previous(method: str, host: str, code: str) -> None:
        seen.append((method, host, code))

    client.transport.on_request = previous
    metrics = Metrics(CollectorRegistry())
    manager = Manager(client, options(metrics=metrics, preflight=False))
    log: list[str] = []
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log))
    run = running(manager)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    client.transport.on_request("GET", "api:6443", "200")
    counter = metrics.rest_client_requests_total.labels("200", "GET", "api:6443")
    assert counter.get() == 1
    assert seen == [("GET", "api:6443", "200")]  # the previous hook still runs
    manager.stop()
    await run.result()
    assert client.transport.on_request is previous
    await client.close()


# -- leadership ---------------------------------------------------------------------------


def elected_manager(
    store: LeaseStore,
    identity: str,
    clock: ManualClock,
    *,
    on_lost: LeadershipLossPolicy = LeadershipLossPolicy.FAIL,
    release: bool = False,
) -> tuple[Manager, MemoryLock, Metrics]:
    lock = MemoryLock(store, identity)
    metrics = Metrics(CollectorRegistry())
    le = LeaderElectionOptions(
        name="ops-lock",
        lease_duration=4,
        renew_deadline=3,
        retry_period=1,
        request_timeout=0.5,
        lock=lock,
        on_lost=on_lost,
        release_on_cancel=release,
    )
    manager = Manager(
        FakeClient(),
        options(leader_election=le, clock=clock, metrics=metrics),
    )
    return manager, lock, metrics


async def test_leader_only_runnables_run_only_while_leading_and_stop_at_once_on_loss(
    running: Callable[[Manager], Running],
) -> None:
    clock = ManualClock(50.0)
    store = LeaseStore()
    log: list[str] = []
    manager, _, metrics = elected_manager(store, "me", clock)
    leader_ctrl = FakeRunnable("ctrl", G.CONTROLLERS, log, leader=True)
    manager.add(leader_ctrl)
    manager.add(FakeRunnable("standby-work", G.OTHERS, log))
    run = running(manager)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="elected and started")
    assert log == ["start:standby-work", "start:ctrl"]
    assert manager.is_leader and manager.identity == "me"
    assert metrics.leader_election_master_status.labels("ops-lock").get() == 1
    assert await manager.readyz.run("leader-election") is None

    store.fail_with = ConnectionError("apiserver gone")
    await advance(clock, 2.9, step=0.01)
    assert leader_ctrl.running  # still within the renew deadline (acquired at 50)
    await advance(clock, 0.2, step=0.01)
    # At the deadline, leader-only work is stopped with no grace period.
    await eventually(contains(log, "stop:ctrl"), timeout=5, description="stopped at once")
    assert leader_ctrl.stop_timeouts == [0.0]
    with pytest.raises(LeaderElectionLost, match="lost leadership of Lease test/lock"):
        await run.result()
    assert log[-1] == "stop:standby-work"
    assert metrics.leader_election_master_status.labels("ops-lock").get() == 0


async def test_losing_the_lease_can_end_run_without_an_error(
    running: Callable[[Manager], Running],
) -> None:
    clock = ManualClock(0.0)
    store = LeaseStore()
    log: list[str] = []
    manager, _, _ = elected_manager(store, "me", clock, on_lost=LeadershipLossPolicy.SHUTDOWN)
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log, leader=True))
    run = running(manager)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    store.hang = True
    await advance(clock, 3.5, step=0.01)
    await run.result()  # returns: no exception
    assert log == ["start:ctrl", "stop:ctrl"]


async def test_a_standby_never_starts_leader_only_work_but_is_ready(
    running: Callable[[Manager], Running],
) -> None:
    from datetime import UTC, datetime

    from setpoint.manager import LeaderElectionRecord

    now = datetime.now(UTC)
    clock = ManualClock(0.0)
    store = LeaseStore(record=LeaderElectionRecord("other", 4, now, now, 0), version=1)
    log: list[str] = []
    manager, _, metrics = elected_manager(store, "me", clock)
    manager.add(FakeRunnable("ctrl", G.CONTROLLERS, log, leader=True))
    manager.add(FakeRunnable("standby-work", G.OTHERS, log))
    run = running(manager)
    await eventually(contains(log, "start:standby-work"), timeout=5, description="started")

    async def elector_read_lease() -> bool:
        return await manager.readyz.run("leader-election") is None

    await eventually(elector_read_lease, timeout=5, description="lease observed")
    for _ in range(3):  # the holder keeps renewing: the record changes every second
        store.record = LeaderElectionRecord("other", 4, now, now, 0)
        store.version += 1
        await advance(clock, 1.0)
    assert not manager.is_leader and "start:ctrl" not in log
    assert metrics.leader_election_master_status.labels("ops-lock").get() == 0
    # The holder stops renewing: this standby takes over after the lease expires.
    await advance(clock, 5.0)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="took over")
    manager.stop()
    await run.result()


async def test_release_on_cancel_releases_after_leader_only_work_stopped(
    running: Callable[[Manager], Running],
) -> None:
    clock = ManualClock(0.0)
    store = LeaseStore()
    log: list[str] = []
    manager, _, _ = elected_manager(store, "me", clock, release=True)
    holder_when_stopped: list[str] = []

    class Recording(FakeRunnable):
        async def stop(self, timeout: float) -> None:
            assert store.record is not None
            holder_when_stopped.append(store.record.holder_identity)
            await super().stop(timeout)

    manager.add(Recording("ctrl", G.CONTROLLERS, log, leader=True))
    run = running(manager)
    await eventually(contains(log, "start:ctrl"), timeout=5, description="started")
    manager.stop()
    await run.result()
    assert holder_when_stopped == ["me"]  # still held while leader-only work drained
    assert store.record is not None and store.record.holder_identity == ""


async def test_wait_elected_without_leader_election_returns_once_running(
    running: Callable[[Manager], Running],
) -> None:
    manager = Manager(FakeClient(), options())
    with pytest.raises(TimeoutError):
        await manager.wait_elected(timeout=0.05)
    run = running(manager)
    await manager.wait_elected(timeout=5)
    assert manager.is_leader and manager.identity is None
    manager.stop()
    await run.result()


async def test_controller_builder_is_prefilled_from_the_manager() -> None:
    from setpoint.api import kinds
    from setpoint.controller import ControllerError

    metrics = Metrics(CollectorRegistry())
    manager = Manager(FakeClient(), options(metrics=metrics))

    async def reconcile(ctx: Any, request: Any) -> None:
        return None

    controller = manager.controller("demo").for_(kinds.ConfigMap).build(reconcile)
    assert controller.name == "controller/demo"
    assert controller in manager.runnables and manager.cache in manager.runnables
    assert controller._metrics is metrics
    assert controller._recorder is not None
    assert controller._recorder.reporting_controller == "demo"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="already runs a controller named 'demo'"):
        manager.controller("demo").for_(kinds.ConfigMap).build(reconcile)
    with pytest.raises(ControllerError, match="is not valid"):
        manager.controller("not/valid")
