"""The split of one supervisor's workers: keys by hash, leadership fenced by the supervisor."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from setpoint.api import kinds
from setpoint.api.clock import ManualClock
from setpoint.api.keys import ObjectKey
from setpoint.cache import Cache
from setpoint.cache.errors import CacheError
from setpoint.controller import Builder, Context, Controller, Result
from setpoint.manager import LeaderElectionOptions, LeaderElectionRecord, LeaderElector
from setpoint.manager.processes import split_leader_election
from setpoint.manager.workersplit import (
    STANDBY_HOLDER,
    LeadershipNotGranted,
    SupervisorLock,
    WorkerSplit,
    grant_message,
    worker_of,
)
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from tests._support.manager_fakes import LeaseStore, MemoryLock, advance
from tests._support.virtual_time import settle

WALL = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def configmap(namespace: str, name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {},
    }


# -- the key split ------------------------------------------------------------------------------


def test_worker_of_is_a_fixed_even_split_by_key() -> None:
    keys = [ObjectKey(f"ns-{i % 7}", f"obj-{i}") for i in range(10_000)]
    for count in (2, 3, 4):
        sizes = [0] * count
        for key in keys:
            sizes[worker_of(key, count)] += 1
        assert max(sizes) / len(keys) < 1 / count + 0.02, (count, sizes)
    # Fixed across processes and Python runs (not hash()): pinned so a change is noticed,
    # since it would move objects between the workers of running Pods.
    assert [worker_of(ObjectKey("default", f"w{i}"), 4) for i in range(16)] == [
        1, 1, 3, 1, 1, 1, 1, 1, 1, 1, 3, 1, 2, 0, 1, 0
    ]  # fmt: skip
    assert worker_of(ObjectKey("default", "widget-1"), 2) == 1
    # The namespace counts: the same name in two namespaces is two keys.
    assert {worker_of(ObjectKey(f"n{i}", "same"), 2) for i in range(20)} == {0, 1}


async def _noop(ctx: Context, request: ObjectKey) -> Result:
    return Result()


def controller(name: str, client: FakeClient, cache: Cache, *, kind: bool = True) -> Controller:
    builder = Builder(name)
    if kind:
        builder.for_(kinds.ConfigMap)
    else:
        builder.watches(kinds.ConfigMap, lambda obj: [])
    return builder.build(_noop, client=client, cache=cache)


async def test_a_split_worker_caches_and_admits_only_its_keys() -> None:
    client = FakeClient()
    names = [f"cm-{i}" for i in range(40)]
    for name in names[:20]:
        await client.create(configmap("default", name))  # listed at start
    cache = Cache(client)
    leading = [True]
    split = WorkerSplit(1, 2, lambda: leading[0])
    split.adopt(controller("cms", client, cache))
    split.adopt(controller("more", client, cache))
    assert [c.controller_name for c in split.controllers] == ["cms", "more"]
    informer = cache.informer(kinds.ConfigMap)
    seen: list[str] = []
    informer.add_handler(_Recorder(seen))
    await cache.start()
    try:
        await cache.wait_for_sync(5)
        for name in names[20:]:
            await client.create(configmap("default", name))  # watched
        mine = {n for n in names if worker_of(ObjectKey("default", n), 2) == 1}
        assert 0 < len(mine) < len(names)

        def stored() -> set[str]:
            return {k.name for k in informer.store}

        await eventually(lambda: stored() == mine, timeout=5, description="own keys stored")
        await client.delete(kinds.ConfigMap, names[0], namespace="default")
        await client.delete(kinds.ConfigMap, names[1], namespace="default")
        await eventually(
            lambda: stored() == mine - set(names[:2]), timeout=5, description="deletes applied"
        )
        # The handlers never heard of another worker's objects; a reader never sees them.
        assert set(seen) <= mine
        others = sorted(set(names) - mine)
        assert not informer.matches(configmap("default", others[0]))
        assert informer.matches(configmap("default", sorted(mine)[0]))
        # The key gate: this worker's keys only, and only while it leads.
        own, theirs = ObjectKey("default", sorted(mine)[0]), ObjectKey("default", others[0])
        assert split.admits(own) and not split.admits(theirs)
        leading[0] = False
        assert not split.admits(own)

        # Too late to narrow a started informer.
        with pytest.raises(CacheError, match="has started; narrow it"):
            WorkerSplit(0, 2, lambda: True).adopt(controller("late", client, cache))
    finally:
        await cache.stop(5)


class _Recorder:
    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def on_add(self, obj: dict[str, object], *, is_initial_list: bool) -> None:
        self.seen.append(_name(obj))

    def on_update(self, old: dict[str, object], new: dict[str, object]) -> None:
        self.seen.append(_name(new))

    def on_delete(self, obj: dict[str, object], *, final_state_unknown: bool) -> None:
        self.seen.append(_name(obj))


def _name(obj: dict[str, object]) -> str:
    metadata = obj["metadata"]
    assert isinstance(metadata, dict)
    return str(metadata["name"])


def test_a_split_needs_a_for_kind_and_a_valid_index() -> None:
    with pytest.raises(ValueError, match="is not among 2 workers"):
        WorkerSplit(2, 2, lambda: True)
    with pytest.raises(ValueError, match="has no for_"):
        client = FakeClient()
        WorkerSplit(0, 2, lambda: True).adopt(controller("w", client, Cache(client), kind=False))


# -- leadership from the supervisor -------------------------------------------------------------

SUPERVISOR = LeaderElectionOptions(
    name="ops", lease_duration=15, renew_deadline=10, retry_period=2, request_timeout=1
)


def test_split_leader_election_fits_inside_the_supervisors_fence() -> None:
    got = split_leader_election(SUPERVISOR, "pod-a-w0")
    assert isinstance(got.lock, SupervisorLock) and got.lock.identity == "pod-a-w0"
    assert (got.lease_duration, got.renew_deadline, got.retry_period) == (15, 5, 0.5)
    assert got.request_timeout is None and not got.release_on_cancel
    short = split_leader_election(
        LeaderElectionOptions(name="x", lease_duration=4, renew_deadline=3, retry_period=1), "w"
    )
    assert (short.renew_deadline, short.retry_period) == (1, 0.25)


@pytest.fixture
async def clock() -> AsyncIterator[ManualClock]:
    yield ManualClock(start=100.0)


def worker(clock: ManualClock) -> tuple[SupervisorLock, LeaderElector]:
    """A worker's elector as split_leader_election builds it, on the manual clock."""
    lock = SupervisorLock(
        "pod-a-w0", name="ops", renew_deadline=5, lease_duration=15, monotonic=clock.now
    )
    options = dataclasses.replace(split_leader_election(SUPERVISOR, "pod-a-w0"), lock=lock)
    elector = LeaderElector(
        lock,
        options,
        clock=clock,
        wall_clock=lambda: WALL + timedelta(seconds=clock.now()),
        jitter=lambda: 0.0,
    )
    return lock, elector


async def test_a_worker_leads_only_inside_the_supervisors_fence(clock: ManualClock) -> None:
    lock, elector = worker(clock)
    events: list[tuple[str, float]] = []
    elector.start(
        lambda: events.append(("elected", clock.now())),
        lambda: events.append(("lost", clock.now())),
    )
    try:
        await advance(clock, 10)
        # No grant yet: a quiet candidate that reached its lock.
        assert events == [] and elector.check() is None and elector.leader == STANDBY_HOLDER
        with pytest.raises(LeadershipNotGranted, match="does not lead"):
            await lock.update(await _record(lock))
        # The supervisor renews at 110 and keeps renewing every 2 s until 120.
        for at in range(110, 121, 2):
            lock.grant(at + 15.0, "pod-a")
            await advance(clock, 2)
        assert events and events[0][0] == "elected" and events[0][1] <= 112
        assert elector.is_leader
        # The supervisor's last renewal was sent at 120: nobody else can take the Lease
        # before 135. The worker stops leading before that, even if its task never ran again.
        fence = 120.0 + 15.0
        clock.advance_to(fence)
        assert not elector.is_leader
        await settle()
        assert events[-1][0] == "lost" and events[-1][1] <= fence
    finally:
        await elector.stop()


async def test_a_worker_loses_at_its_next_renewal_once_the_supervisor_stops_leading(
    clock: ManualClock,
) -> None:
    lock, elector = worker(clock)
    lost: list[float] = []
    elector.start(lambda: None, lambda: lost.append(clock.now()))
    try:
        lock.hear({"lead": clock.now() + 15.0, "leader": "pod-a"})
        await advance(clock, 3)
        assert elector.is_leader
        lock.hear({"lead": None, "leader": "pod-b"})  # the supervisor lost its Lease
        await advance(clock, 3)
        assert lost and lost[0] <= 106.0 and not elector.is_leader
        assert elector.leader == "pod-b"
    finally:
        await elector.stop()


async def test_the_supervisors_grant_is_its_fence_on_the_monotonic_clock(
    clock: ManualClock,
) -> None:
    store = LeaseStore()
    supervisor = LeaderElector(
        MemoryLock(store, "pod-a"),
        SUPERVISOR,
        clock=clock,
        wall_clock=lambda: WALL + timedelta(seconds=clock.now()),
        jitter=lambda: 0.0,
    )
    assert grant_message(supervisor, clock) == {"lead": None, "leader": None}
    supervisor.start(lambda: None, lambda: None)
    try:
        await settle()
        assert supervisor.is_leader
        message = grant_message(supervisor, clock, monotonic=lambda: 5000.0)
        # Elected at 100 (sent then): fenced until 115 on the clock, 15 s from now, which
        # is 5015 on the monotonic clock.
        assert message == {"lead": 5015.0, "leader": "pod-a"}
        assert supervisor.fenced_until == 115.0
    finally:
        await supervisor.stop()


async def _record(lock: SupervisorLock) -> LeaderElectionRecord:
    got = await lock.get()
    assert got is not None
    return got


def test_a_lock_ignores_other_messages() -> None:
    lock = SupervisorLock(
        "w", name="ops", renew_deadline=5, lease_duration=15, monotonic=lambda: 0.0
    )
    lock.hear({"lead": 100.0})
    assert lock.granted
    lock.hear({"ready": True})
    assert lock.granted
    lock.hear({"lead": "soon"})
    assert not lock.granted
