"""LeaderElector on an in-memory lease with a manual clock: every deadline checked exactly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.clock import ManualClock
from setpoint.client.errors import NotFound
from setpoint.manager import (
    LeaderElectionOptions,
    LeaderElectionRecord,
    LeaderElector,
    LeaseLock,
    LockNotInitialized,
)
from setpoint.observability.metrics import Metrics
from tests._support.manager_fakes import ConflictError, LeaseStore, MemoryLock, advance
from tests._support.virtual_time import settle

OPTIONS = LeaderElectionOptions(
    name="test-lease", lease_duration=4, renew_deadline=3, retry_period=1, request_timeout=0.5
)
WALL = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class Candidate:
    """An elector plus what its callbacks saw (and when, on the manual clock)."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        clock: ManualClock,
        *,
        options: LeaderElectionOptions = OPTIONS,
        metrics: Metrics | None = None,
    ) -> None:
        self.lock = MemoryLock(store, identity)
        self.clock = clock
        self.elector = LeaderElector(
            self.lock,
            options,
            clock=clock,
            metrics=metrics,
            wall_clock=lambda: WALL + timedelta(seconds=clock.now()),
            jitter=lambda: 0.0,
        )
        self.elected_at: float | None = None
        self.lost_at: float | None = None

    def start(self) -> None:
        self.elector.start(self._elected, self._lost)

    def _elected(self) -> None:
        self.elected_at = self.clock.now()

    def _lost(self) -> None:
        self.lost_at = self.clock.now()


@pytest.fixture
async def clock() -> AsyncIterator[ManualClock]:
    yield ManualClock(start=100.0)


@pytest.fixture
async def electors() -> AsyncIterator[list[LeaderElector]]:
    """Electors the test built; stopped afterwards so no task outlives the test."""
    built: list[LeaderElector] = []
    yield built
    for elector in built:
        await elector.stop()


def candidate(
    store: LeaseStore, identity: str, clock: ManualClock, electors: list[LeaderElector], **kw: Any
) -> Candidate:
    made = Candidate(store, identity, clock, **kw)
    electors.append(made.elector)
    return made


async def test_first_candidate_creates_the_lease_and_leads(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    metrics = Metrics(CollectorRegistry())
    a = candidate(store, "a", clock, electors, metrics=metrics)
    gauge = metrics.leader_election_master_status.labels("test-lease")
    assert gauge.get() == 0
    a.start()
    await settle()
    assert a.elected_at == 100.0 and a.elector.is_leader
    assert store.record is not None
    assert store.record.holder_identity == "a"
    assert store.record.lease_duration_seconds == 4
    assert store.record.leader_transitions == 0
    assert gauge.get() == 1
    assert a.lock.events == ["a became leader"]
    # It renews every retry period, keeping acquireTime and bumping renewTime.
    await advance(clock, 3.5, step=0.01)
    assert store.record.holder_identity == "a"
    assert store.record.acquire_time == WALL + timedelta(seconds=100)
    assert store.record.renew_time is not None
    renewed = (store.record.renew_time - WALL).total_seconds()
    assert renewed == pytest.approx(103.0, abs=0.05)
    assert len(store.writes) == 4  # the create and three renewals
    assert a.lost_at is None and a.elector.check() is None


async def test_a_second_candidate_waits_while_the_leader_renews(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    b = candidate(store, "b", clock, electors)
    a.start()
    await settle()
    b.start()
    await advance(clock, 20)
    assert a.elector.is_leader and not b.elector.is_leader
    assert b.elected_at is None
    assert b.elector.leader == "a"
    assert b.elector.check() is None  # a healthy standby: it reads the lease fine


async def test_takeover_happens_exactly_when_the_lease_expires_on_the_standbys_clock(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    a.start()
    await settle()
    b = candidate(store, "b", clock, electors)
    b.start()
    await advance(clock, 2.5, step=0.01)
    # The leader dies silently: it stops renewing, and the lease is never released.
    task = a.elector._task
    assert task is not None
    task.cancel()
    await settle()
    assert store.record is not None and store.record.renew_time is not None
    last_renewal = (store.record.renew_time - WALL).total_seconds()
    await advance(clock, 10, step=0.01)
    assert b.elected_at is not None
    # Never before lease_duration after the last renewal; at most one (jittered) retry
    # period later, because b wakes exactly at expiry of the last record it saw.
    takeover = b.elected_at - last_renewal
    assert 4.0 <= takeover <= 4.0 + 1.2 + 0.011
    assert store.record.holder_identity == "b"
    assert store.record.leader_transitions == 1


async def test_expiry_is_measured_on_our_clock_not_from_the_holders_renew_time(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    # The holder's renewTime is an hour old (its wall clock is wrong, or it is dead). We
    # still wait a full lease duration from the moment we first see the record.
    stale = WALL - timedelta(hours=1)
    store = LeaseStore(record=LeaderElectionRecord("ghost", 4, stale, stale, 7), version=1)
    b = candidate(store, "b", clock, electors)
    b.start()
    await advance(clock, 3.9, step=0.01)
    assert b.elected_at is None
    await advance(clock, 0.2, step=0.01)
    assert b.elected_at == pytest.approx(104.0, abs=0.011)
    assert store.record is not None and store.record.leader_transitions == 8


async def test_a_leader_that_cannot_renew_loses_exactly_at_the_renew_deadline(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    metrics = Metrics(CollectorRegistry())
    a = candidate(store, "a", clock, electors, metrics=metrics)
    a.start()
    await settle()
    await advance(clock, 1.0)  # renewal sent at 101 succeeded
    store.fail_with = ConnectionError("API server unreachable")
    await advance(clock, 1.0)  # the 102 renewal fails
    assert a.elector.is_leader
    problem = a.elector.check()
    assert problem is not None and "API server unreachable" in problem
    await advance(clock, 5, step=0.01)
    # Deadline: renew_deadline after the last successful renewal was *sent* (101).
    assert a.lost_at == pytest.approx(104.0, abs=0.011)
    assert not a.elector.is_leader and a.elector.lost
    assert metrics.leader_election_master_status.labels("test-lease").get() == 0
    assert a.lock.events == ["a became leader", "a stopped leading"]
    assert a.elector.check() == "leadership of Lease test/lock was lost"


async def test_is_leader_reads_the_deadline_even_before_the_loss_timer_runs(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    a.start()
    await settle()
    assert a.elector.is_leader
    # The process is frozen for 10 s: time jumps, and no task has run since.
    clock.advance_to(clock.now() + 10)
    assert not a.elector.is_leader
    assert a.lost_at is None  # on_lost has not run yet; leader-only code is fenced anyway
    await settle()


async def test_a_hung_renewal_cannot_extend_leadership(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    a.start()
    await settle()  # acquired at 100: deadline 103 unless renewed
    store.hang = True  # every request from now on hangs forever
    await advance(clock, 5, step=0.01)
    assert a.lost_at == pytest.approx(103.0, abs=0.011)


async def test_a_leader_that_finds_another_holder_loses_at_once(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    a.start()
    await settle()
    # Someone else wrote the lease (a's fast-path update now conflicts; the read shows them).
    store.record = LeaderElectionRecord("intruder", 4, WALL, WALL, 1)
    store.version += 1
    await advance(clock, 1.0, step=0.01)
    assert a.lost_at == pytest.approx(101.0, abs=0.011)


async def test_only_one_of_two_racing_candidates_wins_an_expired_lease(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    stale = LeaderElectionRecord("ghost", 4, WALL, WALL, 0)
    store = LeaseStore(record=stale, version=1)
    b = candidate(store, "b", clock, electors)
    c = candidate(store, "c", clock, electors)
    b.start()
    c.start()
    await advance(clock, 12, step=0.01)
    winners = [x for x in (b, c) if x.elected_at is not None]
    assert len(winners) == 1
    assert store.record is not None
    assert store.record.holder_identity == winners[0].lock.identity
    assert store.record.leader_transitions == 1


async def test_release_on_cancel_hands_the_lease_over_at_once(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    options = LeaderElectionOptions(
        name="test-lease",
        lease_duration=4,
        renew_deadline=3,
        retry_period=1,
        request_timeout=0.5,
        release_on_cancel=True,
    )
    store = LeaseStore()
    a = candidate(store, "a", clock, electors, options=options)
    b = candidate(store, "b", clock, electors, options=options)
    a.start()
    await settle()
    b.start()
    await advance(clock, 1.5)
    await a.elector.stop()
    assert store.record is not None
    assert store.record.holder_identity == ""
    assert store.record.lease_duration_seconds == 1
    released_at = clock.now()
    await advance(clock, 1.5, step=0.01)
    # b's next attempt (one retry period later at most) takes it without waiting for expiry.
    assert b.elected_at is not None and b.elected_at - released_at <= 1.0 + 1e-6
    assert store.record.holder_identity == "b"


async def test_without_release_a_stopped_leader_keeps_the_lease_until_it_expires(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    a.start()
    await settle()
    await a.elector.stop()
    assert store.record is not None and store.record.holder_identity == "a"


async def test_slow_path_renewals_are_counted(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore()
    metrics = Metrics(CollectorRegistry())
    a = candidate(store, "a", clock, electors, metrics=metrics)
    a.start()
    await settle()
    store.version += 1  # someone touched the object (e.g. a label): fast path conflicts
    await advance(clock, 1.0)
    assert a.elector.is_leader
    assert metrics.leader_election_slowpath_total.labels("test-lease").get() == 1


async def test_a_standby_that_cannot_reach_the_lease_is_reported_unhealthy(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    store = LeaseStore(fail_with=PermissionError("leases is forbidden"))
    b = candidate(store, "b", clock, electors)
    assert b.elector.check() == "leader election has not started"
    b.start()
    await advance(clock, 0.5)
    problem = b.elector.check()
    assert problem is not None and "has not been reached yet" in problem
    assert "leases is forbidden" in problem


async def test_a_candidate_that_loses_the_create_race_stays_healthy(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    """Replicas started together: one reads no Lease, another creates it first, and the
    create answers Conflict. The API server answered, so readiness must not fail (it did
    for a retry period: a worker of ``--processes`` was unready ~2 s at every start)."""
    store = LeaseStore()
    a = candidate(store, "a", clock, electors)
    b = candidate(store, "b", clock, electors)
    read = b.lock.get

    async def read_before_a_creates() -> LeaderElectionRecord | None:
        found = await read()
        if found is None:  # a creates it between b's read and b's create
            await a.lock.create(
                LeaderElectionRecord(
                    holder_identity="a",
                    lease_duration_seconds=4,
                    acquire_time=WALL,
                    renew_time=WALL,
                    leader_transitions=0,
                )
            )
        return found

    b.lock.get = read_before_a_creates  # type: ignore[method-assign]
    b.start()
    await advance(clock, 0.1)
    assert not b.elector.is_leader
    assert b.elector.check() is None
    await advance(clock, 1.0)  # the retry reads a's record: a healthy standby
    assert b.elector.leader == "a" and b.elector.check() is None


async def test_an_elector_starts_only_once(
    clock: ManualClock, electors: list[LeaderElector]
) -> None:
    a = candidate(LeaseStore(), "a", clock, electors)
    a.start()
    with pytest.raises(RuntimeError, match="starts once"):
        a.start()


# -- LeaseLock against a fake client ------------------------------------------------------


class LeaseApi:
    """A tiny Lease API: get/create/update with resourceVersion checks."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.calls: list[str] = []

    async def get(self, kind: Any, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        self.calls.append(f"get {kind.kind} {namespace}/{name}")
        if self.lease is None:
            raise NotFound("not found", code=404)
        return self.lease

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("create")
        self.rv += 1
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        return self.lease

    async def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("update")
        assert self.lease is not None
        if obj["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ConflictError("stale resourceVersion")
        self.rv += 1
        self.lease = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        return self.lease


async def test_lease_lock_reads_creates_and_updates_a_lease() -> None:
    api = LeaseApi()
    lock = LeaseLock(api, namespace="ops", name="op-lock", identity="me")
    assert lock.describe() == "Lease ops/op-lock"
    assert await lock.get() is None
    record = LeaderElectionRecord("me", 15, WALL, WALL, 0)
    await lock.create(record)
    assert api.lease is not None
    assert api.lease["apiVersion"] == kinds.Lease.api_version
    assert api.lease["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "2024-05-01T12:00:00.000000Z",
        "renewTime": "2024-05-01T12:00:00.000000Z",
        "leaseTransitions": 0,
    }
    assert await lock.get() == record
    # Fields this lock does not own survive an update.
    api.lease["spec"]["preferredHolder"] = "someone"
    await lock.get()
    later = LeaderElectionRecord("me", 15, WALL, WALL + timedelta(seconds=2), 0)
    await lock.update(later)
    assert api.lease["spec"]["preferredHolder"] == "someone"
    assert api.lease["spec"]["renewTime"] == "2024-05-01T12:00:02.000000Z"


async def test_lease_lock_updates_are_optimistic() -> None:
    api = LeaseApi()
    lock = LeaseLock(api, namespace="ops", name="op-lock", identity="me")
    other = LeaseLock(api, namespace="ops", name="op-lock", identity="other")
    await lock.create(LeaderElectionRecord("me", 15, WALL, WALL, 0))
    await other.get()
    await other.update(LeaderElectionRecord("other", 15, WALL, WALL, 1))
    with pytest.raises(ConflictError):
        await lock.update(LeaderElectionRecord("me", 15, WALL, WALL, 0))


async def test_lease_lock_update_before_get_is_an_error() -> None:
    lock = LeaseLock(LeaseApi(), namespace="ops", name="op-lock", identity="me")
    with pytest.raises(LockNotInitialized, match="call get"):
        await lock.update(LeaderElectionRecord("me", 15, WALL, WALL, 0))


def test_records_read_missing_fields_as_empty() -> None:
    assert LeaderElectionRecord.from_lease_spec(None) == LeaderElectionRecord("", 0, None, None, 0)
    parsed = LeaderElectionRecord.from_lease_spec(
        {"holderIdentity": "x", "renewTime": "2024-05-01T12:00:00.5Z", "leaseDurationSeconds": 9}
    )
    assert parsed.renew_time == WALL + timedelta(seconds=0.5)
    assert parsed.lease_duration_seconds == 9


async def test_leader_events_are_recorded_on_the_lease() -> None:
    api = LeaseApi()
    seen: list[tuple[str, str, str, str]] = []

    class Recorder:
        def event(self, obj: Any, type: str, reason: str, message: str) -> None:
            seen.append((obj["metadata"]["name"], type, reason, message))

    lock = LeaseLock(api, namespace="ops", name="op-lock", identity="me", recorder=Recorder())
    lock.record_event("nothing yet")  # no lease seen: nothing to point the Event at
    await lock.create(LeaderElectionRecord("me", 15, WALL, WALL, 0))
    lock.record_event("me became leader")
    assert seen == [("op-lock", "Normal", "LeaderElection", "me became leader")]


async def test_clock_timeout_raises_timeout_error_not_cancellation(clock: ManualClock) -> None:
    from setpoint.api.clock import clock_timeout

    async def forever() -> None:
        await asyncio.Event().wait()

    task = asyncio.create_task(clock_timeout(clock, forever(), 2.0))
    await settle()
    clock.advance(1.9)
    await settle()
    assert not task.done()
    clock.advance(0.1)
    await settle()
    with pytest.raises(TimeoutError):
        await task
