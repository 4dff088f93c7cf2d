"""The fair work queue (``fair_by``): round-robin between groups, and every other guarantee kept.

Keys are strings ``"<group>-<n>"`` grouped by their prefix, as a controller groups object keys
by namespace. Time is a ManualClock; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.cache import Cache
from setpoint.controller import Builder, Context, ControllerOptions, Request, Result
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.controller.workqueue import Priority, ShutDown, WorkQueue, WorkQueueOptions
from setpoint.observability.metrics import Metrics
from tests._support.virtual_time import settle


def group(key: str) -> str:
    return key.split("-", 1)[0]


def make(
    *, fair: bool = True, options: WorkQueueOptions | None = None
) -> tuple[WorkQueue[str], ManualClock]:
    clock = ManualClock()
    queue: WorkQueue[str] = WorkQueue("fair", options, clock=clock, fair_by=group if fair else None)
    return queue, clock


async def take(queue: WorkQueue[str]) -> str:
    return await asyncio.wait_for(queue.get(), 5.0)


async def drain(queue: WorkQueue[str]) -> list[str]:
    """Take and finish every ready key, in the order the queue hands them out."""
    order = []
    while queue.ready_count:
        key = await take(queue)
        order.append(key)
        queue.done(key)
    return order


def fill(queue: WorkQueue[str], name: str, count: int, priority: int = Priority.NORMAL) -> None:
    for n in range(count):
        queue.add(f"{name}-{n}", priority=priority)


async def test_small_group_is_served_round_robin_with_a_large_backlog() -> None:
    queue, _ = make()
    fill(queue, "big", 1000)
    fill(queue, "small", 3)
    order = await drain(queue)
    assert order[:7] == ["big-0", "small-0", "big-1", "small-1", "big-2", "small-2", "big-3"]
    assert order[7:] == [f"big-{n}" for n in range(4, 1000)]


async def test_without_fair_by_the_order_is_one_fifo() -> None:
    queue, _ = make(fair=False)
    fill(queue, "big", 1000)
    fill(queue, "small", 3)
    order = await drain(queue)
    assert not queue.fair
    assert order.index("small-0") == 1000


async def test_three_groups_take_turns_each_in_its_own_arrival_order() -> None:
    queue, _ = make()
    for n in range(3):
        queue.add(f"a-{n}")
    queue.add("b-0")
    for n in range(2):
        queue.add(f"c-{n}")
    assert await drain(queue) == ["a-0", "b-0", "c-0", "a-1", "c-1", "a-2"]


async def test_group_arriving_late_neither_waits_for_the_backlog_nor_saved_turns() -> None:
    queue, _ = make()
    fill(queue, "big", 10)
    for _ in range(5):
        queue.done(await take(queue))
    # "small" was idle while five turns went by: it joins the current round, after the
    # key of "big" that arrived first, and gets no catch-up run of five.
    fill(queue, "small", 3)
    order = await drain(queue)
    assert order[:6] == ["big-5", "small-0", "big-6", "small-1", "big-7", "small-2"]


async def test_priority_comes_before_fairness_and_rounds_are_per_priority() -> None:
    queue, _ = make()
    fill(queue, "big", 5, Priority.LOW)
    fill(queue, "small", 2, Priority.LOW)
    queue.add("big-live-0")  # NORMAL: "big" has no NORMAL backlog
    queue.add("other-0")
    assert await drain(queue) == [
        "big-live-0",
        "other-0",
        "big-0",
        "small-0",
        "big-1",
        "small-1",
        "big-2",
        "big-3",
        "big-4",
    ]


async def test_raising_a_waiting_key_gives_it_a_turn_in_the_higher_priority() -> None:
    queue, _ = make()
    fill(queue, "big", 5, Priority.LOW)
    fill(queue, "small", 2)
    queue.add("big-4")  # moves up from LOW to NORMAL, into the first NORMAL round
    queue.add("big-2", priority=Priority.LOW)  # a lower priority never moves a key down
    assert len(queue) == 7
    assert await drain(queue) == [
        "small-0",
        "big-4",
        "small-1",
        "big-0",
        "big-1",
        "big-2",
        "big-3",
    ]


async def test_a_key_added_again_while_waiting_is_queued_once_and_keeps_its_turn() -> None:
    queue, _ = make()
    fill(queue, "a", 3)
    queue.add("b-0")
    queue.add("a-0")
    queue.add("b-0")
    assert len(queue) == 4
    assert await drain(queue) == ["a-0", "b-0", "a-1", "a-2"]


async def test_a_key_in_flight_is_not_handed_out_again_until_done() -> None:
    queue, _ = make()
    queue.add("a-0")
    queue.add("b-0")
    key = await take(queue)
    assert key == "a-0"
    queue.add("a-0")  # changed while being processed: dirty, not ready
    assert queue.ready_count == 1
    assert await take(queue) == "b-0"
    waiter = asyncio.create_task(take(queue))
    await settle()
    assert not waiter.done()
    queue.done("a-0")
    assert await waiter == "a-0"  # processed again, after the first processing ended


async def test_rate_limited_retry_waits_its_backoff_then_takes_a_turn() -> None:
    queue, clock = make(options=WorkQueueOptions(rate_limits=RateLimiterOptions(base_delay=1.0)))
    queue.add("a-0")
    key = await take(queue)
    queue.add_rate_limited(key)
    queue.done(key)
    assert queue.num_requeues(key) == 1
    fill(queue, "b", 2)
    assert await drain(queue) == ["b-0", "b-1"]
    clock.advance(0.999)
    assert queue.ready_count == 0
    fill(queue, "b", 4)  # b-0 and b-1 again, b-2, b-3
    clock.advance(0.001)
    # a-0 became ready after four keys of "b": it joins the current round, not the end.
    assert await drain(queue) == ["b-0", "a-0", "b-1", "b-2", "b-3"]
    queue.forget(key)
    assert queue.num_requeues(key) == 0


async def test_shutdown_drops_waiting_keys_and_wakes_workers() -> None:
    queue, _ = make()
    fill(queue, "a", 3)
    fill(queue, "b", 3)
    key = await take(queue)
    waiters = [asyncio.create_task(queue.get()) for _ in range(2)]
    await settle()
    queue.shutdown()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    # The two waiters may have been handed keys before the shutdown: only later gets fail.
    assert queue.ready_count == 0 and len(queue) == 0
    with pytest.raises(ShutDown):
        await queue.get()
    queue.add("c-0")
    assert len(queue) == 0
    for result in results:
        if isinstance(result, str):
            queue.done(result)
    queue.done(key)
    assert queue.in_flight_count == 0


async def test_group_state_is_kept_only_while_the_group_has_ready_keys() -> None:
    queue, _ = make()
    for name in ("a", "b", "c"):
        fill(queue, name, 2)
    assert len(queue._fair_groups) == 3
    await drain(queue)
    assert queue._fair_groups == {}
    fill(queue, "d", 1)
    queue.shutdown()
    assert queue._fair_groups == {}


async def test_depth_metric_counts_ready_keys_per_priority_as_without_fairness() -> None:
    registry = CollectorRegistry()
    clock = ManualClock()
    queue: WorkQueue[str] = WorkQueue("fair", metrics=Metrics(registry), clock=clock, fair_by=group)

    def depth(priority: int) -> float | None:
        labels = {"name": "fair", "controller": "fair", "priority": str(priority)}
        return registry.get_sample_value("workqueue_depth", labels)

    fill(queue, "a", 3, Priority.LOW)
    fill(queue, "b", 1, Priority.LOW)
    queue.add("a-2")  # moves up to NORMAL
    assert (depth(Priority.LOW), depth(Priority.NORMAL)) == (3, 1)
    assert (
        registry.get_sample_value("workqueue_adds_total", {"name": "fair", "controller": "fair"})
        == 4
    )
    queue.done(await take(queue))
    assert (depth(Priority.LOW), depth(Priority.NORMAL)) == (3, 0)


def test_fair_by_must_be_callable() -> None:
    with pytest.raises(TypeError, match="fair_by must be a function"):
        WorkQueue("fair", fair_by="namespace", clock=ManualClock())  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The controller option


async def reconcile(ctx: Context, request: Request) -> Result | None:
    return None


def build(builder: Builder) -> Any:
    client: Any = object()  # building never talks to the API
    return builder.build(reconcile, client=client, cache=Cache(client))


async def queued_order(controller: Any, keys: list[ObjectKey]) -> list[ObjectKey]:
    queue: WorkQueue[ObjectKey] = controller.queue
    for key in keys:
        queue.add(key)
    order = []
    while queue.ready_count:
        key = await asyncio.wait_for(queue.get(), 5.0)
        order.append(key)
        queue.done(key)
    return order


KIND = GroupVersionKind("test.setpoint.dev", "v1", "Tenant")
BACKLOG = [ObjectKey("big", f"o{n}") for n in range(50)] + [
    ObjectKey("small", f"o{n}") for n in range(2)
]


async def test_builder_fair_by_namespace_makes_the_controller_queue_fair() -> None:
    clock = ManualClock()
    options = ControllerOptions(clock=clock)
    fair = build(Builder("fair").for_(KIND).with_options(options).fair_by())
    plain = build(Builder("plain").for_(KIND).with_options(options))
    assert fair.options.fair_by == "namespace" and fair.queue.fair
    assert plain.options.fair_by is None and not plain.queue.fair
    assert (await queued_order(fair, BACKLOG))[:4] == [
        ObjectKey("big", "o0"),
        ObjectKey("small", "o0"),
        ObjectKey("big", "o1"),
        ObjectKey("small", "o1"),
    ]
    assert (await queued_order(plain, BACKLOG))[50:] == BACKLOG[50:]


async def test_fair_by_function_groups_by_what_it_returns() -> None:
    def tenant(key: ObjectKey) -> str:
        return key.name.split(".", 1)[0]  # cluster-scoped objects named "<tenant>.<name>"

    options = ControllerOptions(clock=ManualClock(), fair_by=tenant)
    controller = build(Builder("by-name").for_(KIND).with_options(options))
    keys = [ObjectKey("", f"a.{n}") for n in range(3)] + [ObjectKey("", "b.0")]
    assert [key.name for key in await queued_order(controller, keys)] == [
        "a.0",
        "b.0",
        "a.1",
        "a.2",
    ]


def test_fair_by_rejects_unknown_names_and_non_functions() -> None:
    with pytest.raises(ValueError, match="only named grouping is 'namespace'"):
        ControllerOptions(fair_by="tenant")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="fair_by must be 'namespace'"):
        ControllerOptions(fair_by=3)  # type: ignore[arg-type]
