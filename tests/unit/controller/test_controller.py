"""Controller semantics on a scripted API: sources, outcomes, metrics, exclusivity, shutdown.

The informers list and watch the public FakeClient, so these tests drive events
deterministically; the same behaviour against the real API server
is in tests/integration/controller.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.runnable import Runnable, RunnableGroup
from setpoint.cache import Cache, ConsistentReader, TrackingClient
from setpoint.client.patch import MergePatch
from setpoint.controller import (
    Builder,
    Context,
    Controller,
    ControllerError,
    GenerationChanged,
    Priority,
    ReconcileError,
    Request,
    Result,
    TerminalError,
)
from setpoint.controller.controller import _Deadlines
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient, eventually
from tests._support.stored import stored
from tests._support.virtual_time import settle
from tests._support.widgets import WIDGET, fake_api, put, remove, widget

PARENT = GroupVersionKind("test.setpoint.dev", "v1", "Parent")
FAST_RETRIES = RateLimiterOptions(base_delay=0.001, max_delay=0.05)


class Calls:
    """A reconciler that records its calls and does what the test scripts per key."""

    def __init__(self) -> None:
        self.calls: list[tuple[ObjectKey, Context]] = []
        self.behaviour: dict[str, Any] = {}

    def names_called(self) -> list[str]:
        return [str(k) for k, _ in self.calls]

    def count(self, name: str) -> int:
        return sum(1 for k, _ in self.calls if k.name == name)

    async def reconcile(self, ctx: Context, request: Request) -> Result | None:
        self.calls.append((request, ctx))
        action = self.behaviour.get(request.name)
        if callable(action):
            outcome = action(ctx, request)
            if asyncio.iscoroutine(outcome):
                outcome = await outcome
            return outcome  # type: ignore[no-any-return]
        if isinstance(action, BaseException):
            raise action
        return action


def sample(metric: Any, *labels: str) -> float:
    return float(metric.labels(*labels).get())


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    fake.register(ResourceInfo(PARENT, "parents", True))
    await put(fake, widget("a"))
    await put(fake, widget("b"))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


@pytest.fixture
def reconciler() -> Calls:
    return Calls()


class Harness:
    def __init__(self, cache: Cache, api: FakeClient, metrics: Metrics, reconciler: Calls) -> None:
        self.cache, self.api, self.metrics, self.reconciler = cache, api, metrics, reconciler
        self.controllers: list[Controller] = []

    async def start(self, builder: Builder, reconciler: Any = None, **kwargs: Any) -> Controller:
        controller = builder.build(
            reconciler if reconciler is not None else self.reconciler,
            client=self.api,
            cache=self.cache,
            metrics=self.metrics,
            **kwargs,
        )
        await controller.start()
        self.controllers.append(controller)
        return controller


@pytest.fixture
async def harness(
    cache: Cache, api: FakeClient, metrics: Metrics, reconciler: Calls
) -> AsyncIterator[Harness]:
    h = Harness(cache, api, metrics, reconciler)
    try:
        yield h
    finally:
        for controller in h.controllers:
            await controller.stop(5)


def builder(name: str = "widgets") -> Builder:
    return Builder(name).with_options(
        Builder(name).options.__class__(rate_limits=FAST_RETRIES, reconcile_timeout=5)
    )


async def test_initial_objects_and_later_changes_are_reconciled(
    harness: Harness, reconciler: Calls, api: FakeClient
) -> None:
    controller = await harness.start(builder().for_(WIDGET))
    await eventually(
        lambda: sorted(reconciler.names_called()) == ["default/a", "default/b"], timeout=5
    )
    await put(api, widget("c"))
    await eventually(
        lambda: "default/c" in reconciler.names_called(), timeout=5, description="new object"
    )
    await remove(api, ObjectKey("default", "a"))
    await eventually(lambda: reconciler.count("a") == 2, timeout=5, description="deletion")
    assert controller.failure() is None


async def test_initial_list_keys_queue_at_low_priority(
    cache: Cache, api: FakeClient, reconciler: Calls
) -> None:
    controller = builder().for_(WIDGET).build(reconciler, client=api, cache=cache)
    queued: list[tuple[ObjectKey, int]] = []
    original = controller.queue.add

    def add(key: ObjectKey, *, priority: int = 0, stamp: int | None = None) -> None:
        queued.append((key, priority))
        original(key, priority=priority, stamp=stamp)

    controller.queue.add = add  # type: ignore[method-assign]  # spy on the queue
    await controller.start()
    try:
        await eventually(lambda: len(reconciler.calls) == 2, timeout=5)
        assert {p for _, p in queued} == {Priority.LOW}
        await put(api, widget("live"))
        await eventually(lambda: reconciler.count("live") == 1, timeout=5)
        assert (ObjectKey("default", "live"), Priority.NORMAL) in queued
    finally:
        await controller.stop(5)


async def test_each_write_of_a_reconcile_is_seen_by_a_later_reconcile(
    harness: Harness, api: FakeClient
) -> None:
    """A reconcile that advances a step per call is called again for each of its own writes."""
    steps: list[int] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        if request.name != "a":
            return
        obj = await ctx.reader.get(WIDGET, "a", namespace="default")
        step = int((obj["metadata"].get("annotations") or {}).get("step", "0"))
        steps.append(step)
        if step < 3:
            change = {"metadata": {"annotations": {"step": str(step + 1)}}}
            await ctx.client.patch(WIDGET, "a", MergePatch(change), namespace="default")

    await harness.start(builder().for_(WIDGET), reconcile)
    await eventually(lambda: 3 in steps, timeout=5, description="all three steps")
    assert steps == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("change_before_first_read", "expected"),
    [(True, ["2"]), (False, ["", "2"])],
    ids=["before-first-read-not-queued-again", "after-first-read-queued-again"],
)
async def test_a_change_during_a_reconcile_queues_it_again_only_if_not_read(
    harness: Harness, api: FakeClient, change_before_first_read: bool, expected: list[str]
) -> None:
    """An event applied before the in-flight reconcile's first read needs no second one."""
    release = asyncio.Event()
    seen: list[str] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        if request.name != "a":
            return
        if change_before_first_read and not seen:
            await release.wait()  # the change arrives now, before the first read
        obj = await ctx.reader.get(WIDGET, "a", namespace="default")
        seen.append(str((obj["metadata"].get("labels") or {}).get("v", "")))
        if not change_before_first_read and len(seen) == 1:
            await release.wait()  # the change arrives after this read

    controller = await harness.start(builder().for_(WIDGET), reconcile)
    key = ObjectKey("default", "a")
    await eventually(
        lambda: controller.holds(key) and (change_before_first_read or seen == [""]), timeout=5
    )
    await put(api, widget("a", metadata={"labels": {"v": "2"}}))
    await eventually(lambda: len(controller.queue) == 1, timeout=5, description="dirty")
    release.set()
    await eventually(lambda: seen == expected, timeout=5, description=f"reads {expected}")
    await controller.wait_idle(timeout=5, settle=0.3)
    assert seen == expected


async def test_context_carries_request_id_logger_clients_and_recorder(
    harness: Harness, reconciler: Calls, cache: Cache
) -> None:
    class Recorder:
        def event(self, obj: Any, type: str, reason: str, message: str) -> None:
            pass

    recorder = Recorder()
    await harness.start(builder().for_(WIDGET), recorder=recorder)
    await eventually(lambda: len(reconciler.calls) == 2, timeout=5)
    (key, ctx), (_, other) = reconciler.calls
    assert ctx.request == key
    assert str(uuid.UUID(ctx.reconcile_id)) == ctx.reconcile_id
    assert ctx.reconcile_id != other.reconcile_id
    assert ctx.controller == "widgets"
    assert ctx.gvk == WIDGET
    assert ctx.recorder is recorder
    assert dict(ctx.log.bound) == {
        "controller": "widgets",
        "gvk": str(WIDGET),
        "namespace": key.namespace,
        "name": key.name,
        "reconcile_id": ctx.reconcile_id,
    }
    assert isinstance(ctx.reader, ConsistentReader) and ctx.reader.cache is cache
    assert isinstance(ctx.client, TrackingClient) and ctx.client.cache is cache


async def test_requeue_after_reconciles_again_and_counts(
    harness: Harness, reconciler: Calls, metrics: Metrics
) -> None:
    reconciler.behaviour["a"] = Result(requeue_after=0.02)
    await harness.start(builder().for_(WIDGET))
    await eventually(lambda: reconciler.count("a") >= 3, timeout=5, description="requeues")
    assert sample(metrics.reconcile_total, "widgets", "requeue_after") >= 2
    assert sample(metrics.reconcile_total, "widgets", "success") >= 1


async def test_errors_back_off_and_are_counted_as_errors_not_panics(
    harness: Harness, reconciler: Calls, metrics: Metrics
) -> None:
    reconciler.behaviour["a"] = ReconcileError("dependency not ready")
    controller = await harness.start(builder().for_(WIDGET))
    await eventually(lambda: reconciler.count("a") >= 4, timeout=5, description="retries")
    assert controller.queue.num_requeues(ObjectKey("default", "a")) >= 3
    assert sample(metrics.reconcile_errors_total, "widgets") >= 4
    assert sample(metrics.reconcile_total, "widgets", "error") >= 4
    assert sample(metrics.reconcile_panics_total, "widgets") == 0
    reconciler.behaviour.pop("a")  # it recovers: the backoff is forgotten
    await eventually(
        lambda: controller.queue.num_requeues(ObjectKey("default", "a")) == 0, timeout=5
    )


async def test_unexpected_exceptions_are_panics_and_never_kill_a_worker(
    harness: Harness, reconciler: Calls, metrics: Metrics, api: FakeClient
) -> None:
    def explode(ctx: Context, request: Request) -> None:
        raise KeyError("bug")

    reconciler.behaviour["a"] = explode
    controller = await harness.start(builder().for_(WIDGET))
    await eventually(lambda: reconciler.count("a") >= 3, timeout=5)
    assert sample(metrics.reconcile_panics_total, "widgets") >= 3
    assert sample(metrics.reconcile_errors_total, "widgets") >= 3
    await put(api, widget("still-works"))
    await eventually(lambda: reconciler.count("still-works") == 1, timeout=5)
    assert controller.failure() is None


async def test_terminal_errors_are_recorded_and_not_retried(
    harness: Harness, reconciler: Calls, metrics: Metrics, api: FakeClient
) -> None:
    reconciler.behaviour["a"] = TerminalError("spec.size must be positive")
    controller = await harness.start(builder().for_(WIDGET))
    await eventually(
        lambda: sample(metrics.terminal_reconcile_errors_total, "widgets") == 1, timeout=30
    )
    await eventually(lambda: reconciler.count("b") == 1, timeout=30)
    # Nothing is waiting or running: no retry was scheduled.
    assert len(controller.queue) == 0
    assert controller.queue.in_flight_count == 0
    assert controller.queue.num_requeues(ObjectKey("default", "a")) == 0
    assert reconciler.count("a") == 1
    assert sample(metrics.reconcile_errors_total, "widgets") == 1
    # The next change reconciles it again.
    await put(api, widget("a", data={"fixed": "yes"}))
    await eventually(lambda: reconciler.count("a") == 2, timeout=30)


async def test_a_reconcile_over_its_timeout_is_cancelled_and_retried(
    harness: Harness, reconciler: Calls, metrics: Metrics
) -> None:
    cancelled: list[bool] = []

    async def hang(ctx: Context, request: Request) -> None:
        if reconciler.count("a") > 1:
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    reconciler.behaviour["a"] = hang
    options = builder().options.__class__(rate_limits=FAST_RETRIES, reconcile_timeout=0.05)
    await harness.start(Builder("widgets").for_(WIDGET).with_options(options))
    await eventually(lambda: reconciler.count("a") == 2, timeout=5, description="retried")
    assert cancelled == [True]
    assert sample(metrics.reconcile_errors_total, "widgets") == 1
    assert sample(metrics.reconcile_panics_total, "widgets") == 0


async def test_a_reconcile_timeout_runs_from_its_own_start_after_earlier_ones_ended() -> None:
    """A reconcile started after earlier ones ended is cancelled at its own deadline, not theirs.

    The controller keeps one timer for all running reconciles (``_Deadlines``), armed for the
    oldest: here it is armed for the first reconcile's deadline, finds it gone and must wait
    again. The deadlines run on a ManualClock, driven here as the controller's workers use
    them (``watch`` before the reconcile, ``release`` after it), so every instant is exact.
    """
    clock = ManualClock()
    deadlines = _Deadlines(0.3, clock)
    outcomes: dict[str, str] = {}

    async def reconcile(name: str, release: asyncio.Event) -> None:
        watch = deadlines.watch()
        try:
            await release.wait()
        except asyncio.CancelledError:
            if not deadlines.release(watch):
                raise
            outcomes[name] = f"timed out at {clock.now():.2f}"
            return
        deadlines.release(watch)
        outcomes[name] = f"ended at {clock.now():.2f}"

    ended = asyncio.Event()
    ended.set()
    await reconcile("first", ended)  # at 0: arms the one timer for 0.3
    assert clock.next_deadline == 0.3
    clock.advance_to(0.15)
    second = asyncio.create_task(reconcile("second", asyncio.Event()))
    await settle()  # its deadline is 0.45; the timer is still armed for 0.3
    clock.advance_to(0.3)
    await settle()
    assert not second.done(), "cancelled at the first reconcile's deadline"
    assert clock.next_deadline == pytest.approx(0.45)  # armed again, for the second
    clock.advance_to(0.449)
    await settle()
    assert not second.done()
    clock.advance_to(0.45)
    await asyncio.wait_for(second, 5)
    assert outcomes == {"first": "ended at 0.00", "second": "timed out at 0.45"}
    assert clock.next_deadline is None


async def test_no_key_is_ever_reconciled_twice_at_once(
    harness: Harness, reconciler: Calls, api: FakeClient
) -> None:
    running: set[ObjectKey] = set()
    overlaps: list[ObjectKey] = []
    peak = [0]

    async def slow(ctx: Context, request: Request) -> None:
        if request in running:
            overlaps.append(request)
        running.add(request)
        peak[0] = max(peak[0], len(running))
        await asyncio.sleep(0.002)  # work, not a wait for a condition
        running.discard(request)

    for i in range(20):
        await put(api, widget(f"w{i}"))
    await harness.start(builder().for_(WIDGET).max_concurrent_reconciles(4), reconciler=slow)
    for round_ in range(5):
        for i in range(20):
            await put(api, widget(f"w{i}", data={"round": str(round_)}))
        await asyncio.sleep(0)
    await eventually(lambda: not running and peak[0] > 1, timeout=10, description="settled")
    assert overlaps == []
    assert peak[0] <= 4


async def test_stop_drains_in_flight_reconciles(
    cache: Cache, api: FakeClient, metrics: Metrics
) -> None:
    release = asyncio.Event()
    finished: list[str] = []

    async def blocking(ctx: Context, request: Request) -> None:
        await release.wait()
        finished.append(request.name)

    controller = (
        builder().for_(WIDGET).max_concurrent_reconciles(2).build(
            blocking, client=api, cache=cache, metrics=metrics
        )
    )  # fmt: skip
    await controller.start()
    await eventually(lambda: controller.active_workers == 2, timeout=5)
    stopping = asyncio.create_task(controller.stop(5))
    await asyncio.sleep(0)
    await put(api, widget("after-stop"))  # intake is closed: never reconciled
    assert not stopping.done()
    release.set()
    await asyncio.wait_for(stopping, 5)
    assert sorted(finished) == ["a", "b"]
    assert sample(metrics.active_workers, "widgets") == 0
    await controller.stop(5)  # idempotent


async def test_stop_cancels_what_does_not_finish_in_time(cache: Cache, api: FakeClient) -> None:
    cancelled: list[str] = []

    async def stuck(ctx: Context, request: Request) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request.name)
            raise

    controller = builder().for_(WIDGET).build(stuck, client=api, cache=cache)
    await controller.start()
    await eventually(lambda: controller.active_workers == 1, timeout=5)
    await asyncio.wait_for(controller.stop(0.05), 5)
    assert len(cancelled) == 1
    assert controller.queue.in_flight_count == 0


async def test_owns_enqueues_the_controlling_owner(
    harness: Harness, reconciler: Calls, api: FakeClient
) -> None:
    def child(name: str, *refs: dict[str, Any]) -> dict[str, Any]:
        return widget(name, metadata={"ownerReferences": list(refs)})

    def ref(kind: str, name: str, *, controller: bool = True, group: str = "test.setpoint.dev"):  # type: ignore[no-untyped-def]
        return {"apiVersion": f"{group}/v2", "kind": kind, "name": name, "uid": "u",
                "controller": controller}  # fmt: skip

    await harness.start(builder().for_(PARENT).owns(WIDGET))
    await eventually(lambda: harness.controllers[0].queue.in_flight_count == 0, timeout=5)
    await put(api, child("c1", ref("Parent", "p1")))
    await put(api, child("c2", ref("Parent", "p2", controller=False), ref("Other", "x")))
    await put(api, child("c3", ref("Parent", "p3", group="elsewhere.dev")))
    await put(api, child("c4", ref("Other", "o", controller=False), ref("Parent", "p4")))
    await eventually(lambda: reconciler.count("p4") == 1, timeout=5)
    assert sorted(reconciler.names_called()) == ["default/p1", "default/p4"]
    # An owner change reconciles the previous owner and the new one.
    await put(api, child("c1", ref("Parent", "p5")))
    await eventually(lambda: reconciler.count("p5") == 1, timeout=5)
    await eventually(lambda: reconciler.count("p1") == 2, timeout=5)


async def test_watches_maps_with_sync_and_async_mappers(
    harness: Harness, reconciler: Calls, api: FakeClient
) -> None:
    def by_label(obj: dict[str, Any]) -> list[ObjectKey]:
        target = obj["metadata"].get("labels", {}).get("target")
        return [ObjectKey("default", target)] if target else []

    async def to_two(obj: dict[str, Any]) -> list[ObjectKey]:
        await asyncio.sleep(0)
        return [ObjectKey("default", "x"), ObjectKey("default", "y")]

    await harness.start(builder().for_(PARENT).watches(WIDGET, by_label).watches(WIDGET, to_two))
    await eventually(lambda: reconciler.count("x") >= 1, timeout=5)
    reconciler.calls.clear()
    await put(api, widget("a", metadata={"labels": {"target": "t"}}))
    await eventually(lambda: reconciler.count("t") == 1, timeout=5)
    await eventually(lambda: reconciler.count("y") >= 1, timeout=5)


async def test_a_mapper_returning_garbage_is_logged_not_fatal(
    harness: Harness, reconciler: Calls, api: FakeClient
) -> None:
    def bad(obj: dict[str, Any]) -> Any:
        return ["not-a-key"]  # not ObjectKeys: what the test is about

    controller = await harness.start(builder().for_(PARENT).watches(WIDGET, bad))
    await put(api, widget("z"))
    await eventually(lambda: "z" in [k.name for k in harness.cache.informer(WIDGET).store],
                     timeout=5)  # fmt: skip
    assert reconciler.calls == []
    assert controller.failure() is None


async def test_source_and_global_predicates_filter_events(
    harness: Harness, reconciler: Calls, api: FakeClient
) -> None:
    await put(api, widget("g", metadata={"labels": {"team": "a"}}))
    only_team_a = lambda event: event.object["metadata"].get("labels", {}).get("team") == "a"  # noqa: E731
    await harness.start(
        builder().for_(WIDGET, predicates=[GenerationChanged()]).with_event_filter(only_team_a)
    )
    await eventually(lambda: reconciler.count("g") == 1, timeout=5)
    assert reconciler.names_called() == ["default/g"]
    # A status-only change (same generation) is filtered; a spec change is not.
    g = stored(api, WIDGET, "g", namespace="default")
    await api.replace_status({**g, "status": {"x": 1}})
    await put(api, widget("g", metadata={"labels": {"team": "a"}}, spec={"v": 2}))
    await eventually(lambda: reconciler.count("g") == 2, timeout=5)
    await put(api, widget("g", metadata={"labels": {"team": "b"}}, spec={"v": 3}))
    await put(api, widget("h", metadata={"labels": {"team": "a"}}))
    await eventually(lambda: reconciler.count("h") == 1, timeout=5)
    assert reconciler.count("g") == 2


async def test_plain_async_functions_are_reconcilers(
    harness: Harness, api: FakeClient, metrics: Metrics
) -> None:
    seen: list[str] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        seen.append(request.name)

    await harness.start(builder().for_(WIDGET), reconciler=reconcile)
    await eventually(lambda: sorted(seen) == ["a", "b"], timeout=5)
    assert sample(metrics.reconcile_total, "widgets", "success") == 2
    assert sample(metrics.max_concurrent_reconciles, "widgets") == 1
    assert sample(metrics.active_workers, "widgets") == 0


async def test_a_wrong_return_value_is_a_panic(
    harness: Harness, reconciler: Calls, metrics: Metrics
) -> None:
    reconciler.behaviour["a"] = "done"
    await harness.start(builder().for_(WIDGET))
    await eventually(lambda: sample(metrics.reconcile_panics_total, "widgets") >= 1, timeout=5)


async def test_runnable_contract(cache: Cache, api: FakeClient, reconciler: Calls) -> None:
    controller = builder().for_(WIDGET).build(reconciler, client=api, cache=cache)
    assert isinstance(controller, Runnable)
    assert controller.group is RunnableGroup.CONTROLLERS
    assert controller.needs_leader_election is True
    assert controller.name == "controller/widgets"
    follower = builder("f").for_(WIDGET).needs_leader_election(False)
    assert follower.build(reconciler, client=api, cache=cache).needs_leader_election is False
    await controller.stop(1)  # never started: fine
    with pytest.raises(ControllerError, match="already started"):
        await controller.start()


async def test_start_needs_a_started_cache(api: FakeClient, reconciler: Calls) -> None:
    cache = Cache(api)
    controller = builder().for_(WIDGET).build(reconciler, client=api, cache=cache)
    with pytest.raises(ControllerError, match="start the cache"):
        await controller.start()


async def test_start_fails_clearly_for_an_unknown_kind(cache: Cache, reconciler: Calls) -> None:
    missing = GroupVersionKind("missing.setpoint.dev", "v1", "Gadget")
    client = cache.client
    assert isinstance(client, FakeClient)
    controller = builder().for_(missing).build(reconciler, client=client, cache=cache)
    with pytest.raises(Exception, match="Gadget"):
        await controller.start()
    await controller.stop(1)


async def test_enqueue_reconciles_on_demand(harness: Harness, reconciler: Calls) -> None:
    controller = await harness.start(builder().for_(WIDGET))
    await eventually(lambda: len(reconciler.calls) == 2, timeout=5)
    controller.enqueue(ObjectKey("default", "external"))
    controller.enqueue(ObjectKey("default", "later"), after=0.01)
    await eventually(lambda: reconciler.count("later") == 1, timeout=5)
    assert reconciler.count("external") == 1
