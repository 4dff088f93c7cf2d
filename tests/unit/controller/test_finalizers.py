"""Finalizer handlers, piece by piece: states, records, retry, validation, metrics, the Lease.

The running-controller scenarios are in test_finalizers_flow.py (also run against the real
API server by tests/integration/finalizers).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, finalizers_of
from setpoint.api.types import Kind
from setpoint.cache import Cache
from setpoint.client.errors import NotFound
from setpoint.client.objects import ObjectList
from setpoint.controller import Builder, Context, ControllerError, Result
from setpoint.controller.blocking import SyncContext
from setpoint.controller.finalizers import (
    ADVERTISES_FINALIZERS_LABEL,
    CLEANUP_ANNOTATION_PREFIX,
    OWNED_FINALIZERS_ANNOTATION,
    CleanupFailed,
    CleanupRecord,
    CleanupRetry,
    FinalizerHandler,
    Finalizers,
    ObjectState,
    PendingIndex,
    classify,
    cleanup_annotation,
    cleanup_condition_type,
    parse_owned_finalizers,
    read_cleanup_records,
)
from setpoint.manager import LeaseLock, Manager, ManagerOptions
from setpoint.manager.resourcelock import LeaderElectionRecord
from setpoint.observability.logging import get_logger
from setpoint.observability.metrics import Metrics
from setpoint.testing.fake import FakeClient
from tests._support.finalizer_flow import FIN, FIN2, FOREIGN
from tests._support.kinds import CRDS, GIZMO

NS = "ns"
T = TypeVar("T")


async def nothing(ctx: Context, obj: Any) -> None:
    return None


def widget(
    name: str = "w1", *, finalizers: list[str] | None = None, deleting: bool = False
) -> JsonObject:
    metadata: dict[str, Any] = {"name": name, "namespace": NS}
    if finalizers is not None:
        metadata["finalizers"] = finalizers
    if deleting:
        metadata["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return {"apiVersion": GIZMO.api_version, "kind": "Gizmo", "metadata": metadata}


# -- states -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "state"),
    [
        (None, ObjectState.GONE),
        (widget(), ObjectState.LIVE_WITHOUT),
        (widget(finalizers=[FOREIGN]), ObjectState.LIVE_WITHOUT),
        (widget(finalizers=[FIN]), ObjectState.LIVE_WITHOUT),  # FIN2 missing
        (widget(finalizers=[FIN2, FOREIGN, FIN]), ObjectState.LIVE_WITH),
        (widget(finalizers=[FIN], deleting=True), ObjectState.DELETING_WITH_OURS),
        (widget(finalizers=[FOREIGN, FIN2], deleting=True), ObjectState.DELETING_WITH_OURS),
        (widget(finalizers=[FOREIGN], deleting=True), ObjectState.DELETING_WITHOUT_OURS),
        (widget(deleting=True), ObjectState.DELETING_WITHOUT_OURS),
    ],
)
def test_every_state_is_classified(obj: JsonObject | None, state: ObjectState) -> None:
    assert classify(obj, [FIN, FIN2]) is state


# -- the durable record -------------------------------------------------------------------------


def test_annotation_keys_are_valid_distinct_and_short() -> None:
    assert (
        cleanup_annotation(FIN) == CLEANUP_ANNOTATION_PREFIX + "widgets.test.setpoint.dev_directory"
    )
    # "a.b/c" and "a/b.c" must not collide (a prefix never holds "_").
    assert cleanup_annotation("a.b/c") != cleanup_annotation("a/b.c")
    long_one = "very-long-subdomain-name.example.com/" + "x" * 60
    key = cleanup_annotation(long_one)
    name = key.removeprefix(CLEANUP_ANNOTATION_PREFIX)
    assert len(name) == 63 and name[-1].isalnum()
    assert key != cleanup_annotation(long_one[:-1] + "y")


def test_condition_type_is_per_finalizer_and_valid() -> None:
    from setpoint.api.conditions import validate_condition

    assert cleanup_condition_type(FIN) == f"{FIN}.CleanupFailed"
    assert cleanup_condition_type(FIN) != cleanup_condition_type(FIN2)
    assert validate_condition(cleanup_condition_type(FIN), "True", "CleanupFailed", "x", None) == []


def test_records_round_trip_and_foreign_annotations_are_ignored() -> None:
    record = CleanupRecord(
        finalizer=FIN,
        controller="widgets",
        error="RuntimeError: boom",
        reason="CleanupFailed",
        failures=3,
        first_failure="2024-05-01T12:00:00Z",
        last_failure="2024-05-01T12:05:00Z",
    )
    obj = widget()
    obj["metadata"]["annotations"] = {
        cleanup_annotation(FIN): record.to_json(),
        cleanup_annotation(FIN2): "not json",
        CLEANUP_ANNOTATION_PREFIX + "elsewhere": record.to_json(),  # key does not match its value
        "example.com/other": "x",
    }
    assert read_cleanup_records(obj) == {FIN: record}
    assert CleanupRecord.from_json("[1, 2]") is None


def test_owned_finalizers_come_from_the_lease_annotation() -> None:
    lease = {"metadata": {"annotations": {OWNED_FINALIZERS_ANNOTATION: json.dumps({FIN: "w"})}}}
    assert parse_owned_finalizers(lease) == {FIN: "w"}
    assert parse_owned_finalizers({"metadata": {}}) is None
    broken = {"metadata": {"annotations": {OWNED_FINALIZERS_ANNOTATION: "{"}}}
    assert parse_owned_finalizers(broken) is None


# -- options and validation ---------------------------------------------------------------------


def test_retry_delays_double_up_to_the_cap() -> None:
    retry = CleanupRetry(base_delay=1, max_delay=10)
    assert [retry.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert retry.delay(10_000) == 10
    with pytest.raises(ValueError, match="max_delay"):
        CleanupRetry(base_delay=5, max_delay=1)
    with pytest.raises(ValueError, match="base_delay"):
        CleanupRetry(base_delay=0)


def test_handlers_are_validated() -> None:
    with pytest.raises(ValueError, match="domain-qualified"):
        FinalizerHandler(name="cleanup", cleanup=nothing)
    with pytest.raises(ValueError, match="deadline"):
        FinalizerHandler(name=FIN, cleanup=nothing, deadline=0)
    with pytest.raises(ValueError, match="deadline"):
        FinalizerHandler(name=FIN, cleanup=nothing, deadline=float("inf"))

    def blocking(ctx: SyncContext, obj: Any) -> None:
        return None

    # Issue 30: a plain def is a blocking cleanup, run in the controller's threads.
    assert FinalizerHandler(name=FIN, cleanup=blocking).blocking
    assert not FinalizerHandler(name=FIN, cleanup=nothing).blocking
    with pytest.raises(TypeError, match="must be a function"):
        not_callable: Any = "nope"  # deliberately the wrong type
        FinalizerHandler(name=FIN, cleanup=not_callable)


def test_builder_refuses_bad_finalizer_registrations() -> None:
    fake = FakeClient()
    builder = Builder("widgets").for_(GIZMO).finalizer(FIN, nothing)
    with pytest.raises(ControllerError, match="registered twice"):
        builder.finalizer(FIN, nothing)
    with pytest.raises(ControllerError, match="deadline"):
        builder.finalizer(FIN2, nothing, deadline=-1)
    without_for = Builder("cms").watches(kinds.ConfigMap, lambda obj: []).finalizer(FIN, nothing)
    with pytest.raises(ControllerError, match=r"needs for_\(Kind\)"):
        without_for.build(nothing, client=fake, cache=Cache(fake))
    controller = (
        Builder("widgets")
        .for_(GIZMO)
        .finalizer(FIN, nothing)
        .finalizer(FIN2, nothing)
        .build(nothing, client=fake, cache=Cache(fake))
    )
    assert controller.finalizers == (FIN, FIN2)
    plain = Builder("plain").for_(GIZMO).build(nothing, client=fake, cache=Cache(fake))
    assert plain.finalizers == ()


# -- leak visibility ----------------------------------------------------------------------------


def test_pending_index_follows_events() -> None:
    index = PendingIndex([FIN, FIN2])
    live = widget("a", finalizers=[FIN])
    index.on_add(live, is_initial_list=True)
    assert index.count(FIN) == 0
    deleting = widget("a", finalizers=[FIN, FIN2], deleting=True)
    index.on_update(live, deleting)
    other = widget("b", finalizers=[FIN], deleting=True)
    other["metadata"]["deletionTimestamp"] = "2024-05-01T12:01:00Z"
    index.on_add(other, is_initial_list=False)
    assert (index.count(FIN), index.count(FIN2)) == (2, 1)
    noon = 1714564800.0  # 2024-05-01T12:00:00Z
    assert index.oldest_age(FIN, now=noon + 90) == 90
    released = widget("a", finalizers=[FIN2], deleting=True)
    index.on_update(deleting, released)
    assert index.keys(FIN) == [ObjectKey(NS, "b")]
    assert index.oldest_age(FIN, now=noon + 90) == 30
    index.on_delete(other, final_state_unknown=False)
    index.on_delete(released, final_state_unknown=True)
    assert (index.count(FIN), index.count(FIN2)) == (0, 0)
    assert index.oldest_age(FIN) == 0.0


def test_gauges_are_computed_at_scrape_and_dropped_when_stopped() -> None:
    metrics = Metrics(CollectorRegistry())
    finalizers = Finalizers(
        "widgets", [FinalizerHandler(name=FIN, cleanup=nothing)], kind=GIZMO, metrics=metrics
    )
    finalizers.publish_metrics()

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sample("setpoint_finalizer_pending_objects", finalizer=FIN) == 0
    assert (
        sample("setpoint_finalizer_cleanup_failures_total", controller="widgets", finalizer=FIN)
        == 0
    )
    finalizers.pending.on_add(widget(finalizers=[FIN], deleting=True), is_initial_list=False)
    assert sample("setpoint_finalizer_pending_objects", finalizer=FIN) == 1
    oldest = sample("setpoint_finalizer_oldest_pending_seconds", finalizer=FIN)
    assert oldest is not None and oldest > 0
    finalizers.unpublish_metrics()
    assert sample("setpoint_finalizer_pending_objects", finalizer=FIN) is None
    finalizers.unpublish_metrics()  # twice is fine


# -- prepare() with a cache that lags the server --------------------------------------------------


class StaleReader:
    """A reader that returns a fixed (stale) view of the object."""

    def __init__(self, obj: JsonObject | None) -> None:
        self.obj = obj

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        if self.obj is None:
            raise NotFound(f"{name} not found", code=404)
        return kind.from_object(self.obj)

    async def list(self, kind: Kind[T], **_: Any) -> ObjectList[T]:
        return ObjectList([] if self.obj is None else [kind.from_object(self.obj)], "")

    async def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        return await self.list(kind)


def context(client: FakeClient, cached: JsonObject | None) -> Context:
    return Context(
        request=ObjectKey(NS, "w1"),
        reconcile_id="test",
        log=get_logger("test"),
        client=client,
        reader=StaleReader(cached),
        recorder=None,
        controller="widgets",
        gvk=GIZMO,
    )


def fake_with(*objects: JsonObject) -> FakeClient:
    return FakeClient(objects=[*CRDS, *objects])


async def test_cache_says_live_but_the_object_started_deleting_with_ours() -> None:
    """The add is refused (the list changed); the re-read object is finalized instead."""
    ran: list[str] = []

    async def cleanup(ctx: Context, obj: Any) -> None:
        ran.append(obj["metadata"]["name"])

    fake = fake_with(widget(finalizers=[FIN]))
    await fake.delete(GIZMO, "w1", namespace=NS)
    finalizers = Finalizers("widgets", [FinalizerHandler(name=FIN, cleanup=cleanup)], kind=GIZMO)
    result = await finalizers.prepare(context(fake, widget()))
    assert result == Result()
    assert ran == ["w1"]
    assert fake.lookup(GIZMO, "w1", namespace=NS) is None


async def test_cache_says_live_but_the_object_is_deleting_without_ours() -> None:
    """The server refuses the new finalizer; nothing runs and reconcile is skipped."""
    fake = fake_with(widget(finalizers=[FOREIGN]))
    await fake.delete(GIZMO, "w1", namespace=NS)
    finalizers = Finalizers("widgets", [FinalizerHandler(name=FIN, cleanup=nothing)], kind=GIZMO)
    assert await finalizers.prepare(context(fake, widget(finalizers=[FOREIGN]))) == Result()
    stored = fake.lookup(GIZMO, "w1", namespace=NS)
    assert stored is not None and finalizers_of(stored) == [FOREIGN]


async def test_cache_says_live_but_the_object_is_gone() -> None:
    fake = fake_with()
    finalizers = Finalizers("widgets", [FinalizerHandler(name=FIN, cleanup=nothing)], kind=GIZMO)
    assert await finalizers.prepare(context(fake, widget())) == Result()
    assert await finalizers.prepare(context(fake, None)) == Result()


async def test_live_object_gets_missing_finalizers_and_proceeds() -> None:
    fake = fake_with(widget(finalizers=[FOREIGN]))
    finalizers = Finalizers(
        "widgets",
        [FinalizerHandler(name=FIN, cleanup=nothing), FinalizerHandler(name=FIN2, cleanup=nothing)],
        kind=GIZMO,
    )
    cached = fake.lookup(GIZMO, "w1", namespace=NS)
    assert await finalizers.prepare(context(fake, cached)) is None
    stored = fake.lookup(GIZMO, "w1", namespace=NS)
    assert stored is not None and finalizers_of(stored) == [FOREIGN, FIN, FIN2]


async def test_failure_raises_with_its_backoff_and_gates_early_retries() -> None:
    """A failure raises CleanupFailed; a prepare before the backoff ends only requeues."""
    calls: list[float] = []
    now = [100.0]

    async def failing(ctx: Context, obj: Any) -> None:
        calls.append(now[0])
        raise KeyError("bug")

    fake = fake_with(widget(finalizers=[FIN]))
    await fake.delete(GIZMO, "w1", namespace=NS)
    retry = CleanupRetry(base_delay=2, max_delay=60)
    finalizers = Finalizers(
        "widgets",
        [FinalizerHandler(name=FIN, cleanup=failing, retry=retry)],
        kind=GIZMO,
        clock=lambda: now[0],
    )
    ctx = context(fake, fake.lookup(GIZMO, "w1", namespace=NS))
    with pytest.raises(CleanupFailed) as info:
        await finalizers.prepare(ctx)
    assert (info.value.retry_after, info.value.finalizer) == (2, FIN)
    assert isinstance(info.value.cause, KeyError)
    now[0] += 1.5
    early = await finalizers.prepare(ctx)
    assert early is not None and early.requeue_after == pytest.approx(0.5)
    assert calls == [100.0]
    now[0] += 0.5
    with pytest.raises(CleanupFailed) as info:
        await finalizers.prepare(ctx)
    assert info.value.retry_after == 4
    assert calls == [100.0, 102.0]
    stored = fake.lookup(GIZMO, "w1", namespace=NS)
    assert stored is not None
    assert read_cleanup_records(stored)[FIN].failures == 2


async def test_cancellation_is_not_a_failure() -> None:
    """A cleanup cancelled because the controller stops records nothing."""
    started = asyncio.Event()

    async def slow(ctx: Context, obj: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    fake = fake_with(widget(finalizers=[FIN]))
    await fake.delete(GIZMO, "w1", namespace=NS)
    finalizers = Finalizers("widgets", [FinalizerHandler(name=FIN, cleanup=slow)], kind=GIZMO)
    task = asyncio.create_task(
        finalizers.prepare(context(fake, fake.lookup(GIZMO, "w1", namespace=NS)))
    )
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = fake.lookup(GIZMO, "w1", namespace=NS)
    assert stored is not None and read_cleanup_records(stored) == {}


# -- the manager's Lease --------------------------------------------------------------------------


async def test_manager_advertises_its_controllers_finalizers_on_the_lease() -> None:
    fake = FakeClient()
    manager = Manager(fake, ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0"))
    assert json.loads(manager.lease_annotations()[OWNED_FINALIZERS_ANNOTATION]) == {}
    manager.controller("widgets").for_(GIZMO).finalizer(FIN, nothing).finalizer(
        FIN2, nothing
    ).build(
        nothing,
        cache=Cache(fake),
    )
    manager.controller("plain").for_(GIZMO).build(nothing, cache=Cache(fake))
    owned = json.loads(manager.lease_annotations()[OWNED_FINALIZERS_ANNOTATION])
    assert owned == {FIN: "widgets", FIN2: "widgets"}

    advertised = {"value": manager.lease_annotations()}
    lock = LeaseLock(
        fake,
        namespace="default",
        name="op",
        identity="me",
        labels={ADVERTISES_FINALIZERS_LABEL: "true"},
        annotations=lambda: advertised["value"],
    )
    record = LeaderElectionRecord("me", 15, None, None, 0)
    await lock.create(record)
    lease = await fake.get(kinds.Lease, "op", namespace="default")
    assert lease["metadata"]["labels"] == {ADVERTISES_FINALIZERS_LABEL: "true"}
    assert parse_owned_finalizers(lease) == owned

    # Someone else's annotation survives; a changed answer is written on the next update.
    lease["metadata"]["annotations"]["example.com/note"] = "keep"
    await fake.update(lease)
    await lock.get()
    advertised["value"] = {OWNED_FINALIZERS_ANNOTATION: json.dumps({FIN: "widgets"})}
    await lock.update(record)
    lease = await fake.get(kinds.Lease, "op", namespace="default")
    assert lease["metadata"]["annotations"]["example.com/note"] == "keep"
    assert parse_owned_finalizers(lease) == {FIN: "widgets"}
