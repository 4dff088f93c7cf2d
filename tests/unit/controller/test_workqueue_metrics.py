"""The work queue's workqueue_* metrics, read back from an isolated registry."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.controller.workqueue import Priority, WorkQueue
from setpoint.observability.metrics import PRIORITY_LABEL_LIMIT, PRIORITY_OVERFLOW_LABEL, Metrics

NAME = "cm-controller"
QUEUE_LABELS = {"name": NAME, "controller": NAME}


def make() -> tuple[WorkQueue[str], ManualClock, CollectorRegistry]:
    registry = CollectorRegistry()
    clock = ManualClock()
    queue: WorkQueue[str] = WorkQueue(NAME, metrics=Metrics(registry), clock=clock)
    return queue, clock, registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, {**QUEUE_LABELS, **labels})
    assert value is not None, f"{name}{labels} is not exported"
    return value


def depth(registry: CollectorRegistry, priority: int) -> float:
    return sample(registry, "workqueue_depth", priority=str(priority))


async def take(queue: WorkQueue[str]) -> str:
    return await asyncio.wait_for(queue.get(), 5.0)


async def test_depth_counts_ready_keys_per_priority() -> None:
    queue, clock, registry = make()
    queue.add("a", priority=Priority.LOW)
    queue.add("b", priority=Priority.LOW)
    queue.add("c")
    queue.add_after("later", 5.0)  # not ready: not in depth
    assert depth(registry, -100) == 2
    assert depth(registry, 0) == 1
    queue.add("a")  # raised from LOW to NORMAL: moves between series
    assert (depth(registry, -100), depth(registry, 0)) == (1, 2)
    await take(queue)
    assert depth(registry, 0) == 1
    clock.advance(5.0)
    assert depth(registry, 0) == 2


async def test_dirty_key_counts_in_depth_only_once_it_can_run() -> None:
    queue, _, registry = make()
    queue.add("k")
    await take(queue)
    queue.add("k")
    assert depth(registry, 0) == 0  # waiting on its own processing, not on a worker
    queue.done("k")
    assert depth(registry, 0) == 1


async def test_adds_total_counts_keys_becoming_ready_not_duplicate_adds() -> None:
    queue, clock, registry = make()
    for _ in range(3):
        queue.add("a")
    queue.add_after("b", 1.0)
    assert sample(registry, "workqueue_adds_total") == 1
    clock.advance(1.0)
    assert sample(registry, "workqueue_adds_total") == 2


async def test_retries_total_counts_delayed_and_rate_limited_adds() -> None:
    queue, _, registry = make()
    queue.add("plain")
    queue.add_after("k", 1.0)
    queue.add_after("k", 0.5)
    queue.add_rate_limited("r")
    assert sample(registry, "workqueue_retries_total") == 3


async def test_queue_and_work_durations_use_the_queue_clock() -> None:
    queue, clock, registry = make()
    queue.add("k")
    clock.advance(3.0)
    await take(queue)
    clock.advance(0.25)
    queue.done("k")
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 3.0
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="1.0") == 0
    assert sample(registry, "workqueue_queue_duration_seconds_bucket", le="10.0") == 1
    assert sample(registry, "workqueue_work_duration_seconds_sum") == 0.25
    assert sample(registry, "workqueue_work_duration_seconds_bucket", le="0.1") == 0
    assert sample(registry, "workqueue_work_duration_seconds_bucket", le="1.0") == 1


async def test_delayed_key_queue_duration_starts_when_it_becomes_ready() -> None:
    queue, clock, registry = make()
    queue.add_after("k", 10.0)
    clock.advance(12.0)
    await take(queue)
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 2.0


async def test_in_flight_gauges_are_computed_at_scrape_time() -> None:
    queue, clock, registry = make()
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0
    queue.add("old")
    queue.add("new")
    await take(queue)
    clock.advance(4.0)
    await take(queue)
    clock.advance(1.0)
    assert sample(registry, "workqueue_unfinished_work_seconds") == 5.0 + 1.0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 5.0
    queue.done("old")
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 1.0
    queue.done("new")
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0


async def test_shutdown_zeroes_depth_of_dropped_keys() -> None:
    queue, _, registry = make()
    queue.add("a")
    queue.add("b", priority=Priority.LOW)
    queue.shutdown()
    assert (depth(registry, 0), depth(registry, -100)) == (0, 0)


async def test_priority_label_cardinality_is_capped_and_balanced() -> None:
    queue, _, registry = make()
    priorities = list(range(PRIORITY_LABEL_LIMIT + 5))
    for priority in priorities:
        queue.add(f"k{priority}", priority=priority)
    labelled = [depth(registry, p) for p in priorities[:PRIORITY_LABEL_LIMIT]]
    assert labelled == [1] * PRIORITY_LABEL_LIMIT
    overflow = registry.get_sample_value(
        "workqueue_depth", {**QUEUE_LABELS, "priority": PRIORITY_OVERFLOW_LABEL}
    )
    assert overflow == 5
    assert (
        registry.get_sample_value(
            "workqueue_depth", {**QUEUE_LABELS, "priority": str(priorities[-1])}
        )
        is None
    )
    while queue.ready_count:
        queue.done(await take(queue))
    samples = [
        s
        for metric in registry.collect()
        if metric.name == "workqueue_depth"
        for s in metric.samples
    ]
    assert len(samples) == PRIORITY_LABEL_LIMIT + 1
    assert all(s.value == 0 for s in samples)


async def test_queue_without_metrics_provider_exports_nothing() -> None:
    registry = CollectorRegistry()
    Metrics(registry)  # the families exist, but no queue reports into them
    queue: WorkQueue[str] = WorkQueue(NAME, clock=ManualClock())
    queue.add("k")
    await take(queue)
    queue.done("k")
    assert registry.get_sample_value("workqueue_adds_total", QUEUE_LABELS) is None


def test_metrics_provider_rejects_empty_queue_name() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        Metrics(CollectorRegistry()).new_queue_metrics("")
