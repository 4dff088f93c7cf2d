"""External event sources (``setpoint.controller.sources``) on a ManualClock, and in a controller.

On the real API server, the tenants example's test_directory_drift.py polls its SQLite
directory with a PollingSource and sees drift reach a Tenant's status.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.api.keys import ObjectKey
from setpoint.controller import Builder, Context, ControllerError, Priority, Request
from setpoint.controller.sources import (
    RECHECK_SECONDS,
    ChannelSource,
    PerObjectPollingSource,
    PollingSource,
    SourceTarget,
)
from setpoint.observability.logging import get_logger
from setpoint.observability.metrics import Metrics
from setpoint.testing import eventually
from tests._support import finalizer_flow, sources_flow
from tests._support.finalizer_flow import Operator
from tests._support.kinds import GIZMO

A, B, C = ObjectKey("ns", "a"), ObjectKey("ns", "b"), ObjectKey("ns", "c")


@dataclass
class Sink:
    """A stand-in controller: what was queued, a queue depth the test sets, a clock."""

    clock: ManualClock = field(default_factory=ManualClock)
    added: list[tuple[ObjectKey, int]] = field(default_factory=list)
    depth: int = 0
    objects: list[ObjectKey] = field(default_factory=list)
    metrics: Metrics = field(default_factory=lambda: Metrics(CollectorRegistry(), runtime=False))

    def target(self) -> SourceTarget:
        return SourceTarget(
            controller="ctl",
            add=self.add,
            ready_count=lambda: self.depth,
            keys=lambda: list(self.objects),
            clock=self.clock,
            log=get_logger("test.sources"),
            metrics=self.metrics,
        )

    def add(self, key: ObjectKey, priority: int) -> None:
        self.added.append((key, priority))
        self.depth += 1  # ready in the work queue until a test lets a worker take it

    def keys(self) -> list[ObjectKey]:
        return [key for key, _ in self.added]

    def value(self, metric: str) -> float:
        return self.metrics.value(metric, controller="ctl")

    async def tick(self, seconds: float) -> None:
        """Move the clock and let the sources' tasks (and threads) run."""
        self.clock.advance(seconds)
        await settle()


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


# -- ChannelSource -------------------------------------------------------------------------------


async def test_channel_keys_sent_before_start_are_queued_at_start() -> None:
    sink = Sink()
    channel = ChannelSource("bus")
    await channel.send(A)
    await channel.send(A)  # duplicates merge
    assert channel.offer(B, priority=Priority.LOW)
    assert sink.added == []
    await channel.start(sink.target())
    assert sink.added == [(A, Priority.NORMAL), (B, Priority.LOW)]
    assert sink.value("setpoint_source_enqueued_total") == 2
    await channel.send(C)
    assert sink.keys() == [A, B, C]
    await channel.stop()


async def test_channel_holds_keys_while_the_work_queue_is_full_and_refuses_past_capacity() -> None:
    sink = Sink(depth=2)
    channel = ChannelSource("bus", capacity=2)
    await channel.start(sink.target())
    assert channel.offer(A)
    assert channel.offer(B)
    assert sink.added == []  # the work queue holds `capacity` ready keys: nothing handed over
    assert channel.buffered == 2
    assert sink.value("setpoint_source_buffered") == 2
    assert not channel.offer(C)
    assert sink.value("setpoint_source_dropped_total") == 1
    sender = asyncio.create_task(channel.send(C))
    await settle()
    assert not sender.done()  # send waits for room
    sink.depth = 1  # a worker took a key: room for one
    await sink.tick(RECHECK_SECONDS)
    assert sink.keys() == [A]
    assert sender.done()
    assert sink.keys() == [A]  # C is buffered; the queue is full again
    sink.depth = 0
    await sink.tick(RECHECK_SECONDS)
    assert sink.keys() == [A, B, C]
    assert channel.buffered == 0
    assert sink.clock.pending_timers == 0
    await channel.stop()


async def test_channel_rejects_what_is_not_a_key_and_a_second_controller() -> None:
    channel = ChannelSource("bus")
    with pytest.raises(TypeError, match="not an ObjectKey"):
        channel.offer(("ns", "a"))  # type: ignore[arg-type]
    await channel.start(Sink().target())
    with pytest.raises(ControllerError, match="already started"):
        await channel.start(Sink().target())
    await channel.stop()
    await asyncio.wait_for(channel.send(A), 1)  # stopped: returns, dropped


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capacity": 0}, "capacity"),
        ({"period": 0}, "period"),
        ({"period": 1, "jitter": 1.0}, "jitter"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        if "period" in kwargs:
            PollingSource("p", dict, **kwargs)
        else:
            ChannelSource("c", **kwargs)


# -- PollingSource -------------------------------------------------------------------------------


class External:
    """The outside world a poll reads: values by key, or a failure."""

    def __init__(self, **values: str) -> None:
        self.values = {ObjectKey("ns", k): v for k, v in values.items()}
        self.fail: Exception | None = None
        self.calls = 0

    async def poll(self) -> dict[ObjectKey, str]:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return dict(self.values)


async def test_polling_queues_the_first_poll_low_then_only_what_changed() -> None:
    sink = Sink()
    world = External(a="1", b="1")
    source: PollingSource[str] = PollingSource("db", world.poll, period=10, jitter=0)
    await source.start(sink.target())
    await settle()
    assert sink.added == [(A, Priority.LOW), (B, Priority.LOW)]
    assert source.get(A) == "1"
    sink.added.clear()

    await sink.tick(9.9)
    assert world.calls == 1  # not yet: the period runs from the end of the previous poll
    await sink.tick(0.1)
    assert world.calls == 2
    assert sink.added == []  # nothing changed

    world.values[A] = "2"  # changed
    del world.values[B]  # gone
    world.values[C] = "1"  # new
    await sink.tick(10)
    assert sorted(sink.keys()) == [A, B, C]
    assert {p for _, p in sink.added} == {Priority.NORMAL}
    assert source.snapshot() == {A: "2", C: "1"}
    assert sink.value("setpoint_source_polls_total") == 3
    assert sink.value("setpoint_source_poll_duration_seconds_count") == 3
    await source.stop()
    assert sink.clock.pending_timers == 0


async def test_a_failed_poll_keeps_the_values_counts_and_polls_again_on_time() -> None:
    sink = Sink()
    world = External(a="1")
    source: PollingSource[str] = PollingSource("db", world.poll, period=5, jitter=0)
    await source.start(sink.target())
    await settle()
    sink.added.clear()
    world.fail = OSError("database is locked")
    await sink.tick(5)
    await sink.tick(5)
    assert world.calls == 3
    assert source.get(A) == "1"
    assert sink.added == []
    assert sink.value("setpoint_source_poll_errors_total") == 2
    assert sink.value("setpoint_source_polls_total") == 3
    world.fail = None
    world.values[A] = "2"
    await sink.tick(5)
    assert sink.added == [(A, Priority.NORMAL)]
    await source.stop()


async def test_a_blocking_poll_runs_in_a_thread() -> None:
    sink = Sink()
    seen: list[str] = []

    def poll() -> dict[ObjectKey, int]:
        import threading

        seen.append(threading.current_thread().name)
        return {A: 1}

    source: PollingSource[int] = PollingSource("db", poll, period=5)
    await source.start(sink.target())
    await eventually(lambda: sink.added, timeout=5, description="first poll queued")
    assert seen and seen[0] != "MainThread"
    await source.stop()


async def test_jitter_spreads_the_delay_within_its_bounds() -> None:
    source: PollingSource[str] = PollingSource(
        "db", dict, period=10, jitter=0.2, rng=random.Random(7)
    )
    delays = [source.next_delay() for _ in range(500)]
    assert min(delays) >= 8 and max(delays) <= 12
    assert max(delays) - min(delays) > 3  # spread, not a constant
    assert PollingSource("db", dict, period=10, jitter=0).next_delay() == 10


async def test_a_full_buffer_holds_the_next_poll_until_there_is_room() -> None:
    sink = Sink(depth=1)
    world = External(a="1")
    source: PollingSource[str] = PollingSource("db", world.poll, period=1, jitter=0, capacity=1)
    await source.start(sink.target())
    await settle()
    assert world.calls == 1 and source.buffered == 1  # the work queue is full: A waits
    await sink.tick(5)
    assert world.calls == 1  # no poll while the buffer is full: skipped, not piled up
    sink.depth = 0
    await sink.tick(RECHECK_SECONDS)
    assert sink.keys() == [A]
    assert world.calls == 2  # the poll that was due runs once there is room
    await sink.tick(1)
    assert world.calls == 3
    await source.stop()


# -- PerObjectPollingSource ----------------------------------------------------------------------


async def test_per_object_polls_each_object_and_queues_the_ones_that_changed() -> None:
    sink = Sink(objects=[A, B])
    outside = {A: "1", B: "1"}
    polled: list[ObjectKey] = []

    async def poll(key: ObjectKey) -> str | None:
        polled.append(key)
        if key == B and outside[B] == "boom":
            raise RuntimeError("API down")
        return outside.get(key)

    source: PerObjectPollingSource[str] = PerObjectPollingSource(
        "cloud", poll, period=30, jitter=0, concurrency=2
    )
    await source.start(sink.target())
    await settle()
    assert sorted(polled) == [A, B]
    assert sink.added == []  # first values are only recorded
    assert source.get(A) == "1"

    outside[A] = "2"
    outside[B] = "boom"
    await sink.tick(30)
    assert sink.added == [(A, Priority.NORMAL)]
    assert source.get(B) == "1"  # its poll failed: the previous value stays
    assert sink.value("setpoint_source_poll_errors_total") == 1

    sink.objects = [A]  # B left the cache
    await sink.tick(30)
    assert source.get(B) is None
    assert polled.count(B) == 2
    await source.stop()


# -- in a controller -----------------------------------------------------------------------------


async def test_a_controller_reconciles_what_a_channel_sends() -> None:
    backend = finalizer_flow.fake_backend()
    channel = ChannelSource("bus")
    operator = Operator(backend)
    reconciled: list[Request] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        reconciled.append(request)

    operator.reconcile = reconcile  # type: ignore[method-assign]
    controller = await operator.start(Builder(operator.name).for_(GIZMO).watches_source(channel))
    try:
        key = ObjectKey(backend.namespace, "outside")
        await channel.send(key)
        await eventually(lambda: key in reconciled, timeout=10, description="reconciled")
        assert operator.metrics.value("setpoint_source_enqueued_total", source="bus") == 1
        assert "source:bus" in repr(Builder("x").watches_source(ChannelSource("bus")))
    finally:
        await operator.stop()
    assert controller.queue.shutting_down


async def test_a_controller_may_watch_only_an_external_source() -> None:
    backend = finalizer_flow.fake_backend()
    world = External(a="1")
    source: PollingSource[str] = PollingSource("db", world.poll, period=60)
    operator = Operator(backend)
    reconciled: list[Request] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        reconciled.append(request)

    operator.reconcile = reconcile  # type: ignore[method-assign]
    await operator.start(Builder(operator.name).watches_source(source))
    try:
        await eventually(lambda: reconciled == [A], timeout=10, description="reconciled")
    finally:
        await operator.stop()


def test_the_builder_refuses_what_is_not_a_source_and_a_repeated_name() -> None:
    with pytest.raises(ControllerError, match="needs an external source"):
        Builder("x").watches_source(GIZMO)  # type: ignore[arg-type]
    with pytest.raises(ControllerError, match="added already"):
        Builder("x").watches_source(ChannelSource("bus")).watches_source(ChannelSource("bus"))


def test_a_poll_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(TypeError, match="poll must be a function"):
        PollingSource("db", {}, period=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        PerObjectPollingSource("db", lambda key: None, period=1, concurrency=0)


async def test_a_channel_and_a_per_object_poller_in_a_controller() -> None:
    await sources_flow.channel_and_per_object_poller(finalizer_flow.fake_backend())


class Incomparable:
    """A polled value whose comparison raises (as a numpy array's truth value does)."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("ambiguous")

    __hash__ = None  # type: ignore[assignment]


async def test_a_value_that_cannot_be_compared_counts_as_changed() -> None:
    sink = Sink()
    values: dict[ObjectKey, Any] = {A: Incomparable()}

    async def poll() -> dict[ObjectKey, Any]:
        return dict(values)

    source: PollingSource[Any] = PollingSource("db", poll, period=5, jitter=0)
    await source.start(sink.target())
    await settle()
    sink.added.clear()
    await sink.tick(5)  # comparing the new Incomparable with the old one raises: changed
    assert sink.keys() == [A]
    values[A] = "fine"
    await sink.tick(5)
    await sink.tick(5)
    assert source.polls == 4
    assert source.get(A) == "fine"
    assert sink.keys() == [A, A]  # the change to "fine" once, then nothing
    await source.stop()


async def test_a_thread_sends_through_the_loop_and_waits_while_the_buffer_is_full() -> None:
    sink = Sink(depth=1)
    channel = ChannelSource("bus", capacity=1)
    with pytest.raises(ControllerError, match="needs a started controller"):
        channel.send_threadsafe(A)
    await channel.start(sink.target())

    def from_a_thread() -> None:
        channel.send_threadsafe(A).result(timeout=10)  # buffered: the queue is full
        channel.send_threadsafe(B).result(timeout=10)  # returns once the test makes room

    thread = asyncio.create_task(asyncio.to_thread(from_a_thread))
    await eventually(lambda: channel.buffered == 1, timeout=10, description="A buffered")
    assert not thread.done()  # B waits for room (or has not been sent yet)
    sink.depth = 0
    await sink.tick(RECHECK_SECONDS)  # A goes to the queue; B takes its place
    await asyncio.wait_for(thread, 10)
    sink.depth = 0
    await sink.tick(RECHECK_SECONDS)
    assert sink.keys() == [A, B]
    await channel.stop()
