"""The blocked-loop detector: a watchdog thread names the reconcile and the code blocking the loop.

Issue 30: an async reconcile that blocks (a ``time.sleep``, a synchronous SDK call) stalls
every controller; the lag histogram only said *that* it happened. The detector's steps run
on a ManualClock (``poll``), against a loop whose thread the test holds on a
``threading.Event``, so nothing here depends on how long anything takes; one test runs the
real watchdog thread behind the lag monitor.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.observability.runtime import (
    BlockedLoopDetector,
    LoopLagMonitor,
    ReconcileInfo,
    reconcile_scope,
)
from setpoint.testing import FakeClient, eventually

HOLD = 30.0  # seconds the held loop waits at most, so a failing test cannot hang


class HeldLoop:
    """An event loop on its own thread, blocked inside a reconcile until released."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.done: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="held-loop")

    def _run(self) -> None:
        self.loop.run_until_complete(self._main())
        self.loop.close()

    async def _main(self) -> None:
        info = ReconcileInfo("tenants", "prod", "acme", "rid-1", time.monotonic())
        self.done = asyncio.Event()
        await asyncio.sleep(0)  # running as a task
        with reconcile_scope(info):
            self.entered.set()
            a_blocking_sdk_call(self.release)
        await self.done.wait()  # serve the watchdog's pings until the test ends

    def stop(self) -> None:
        self.release.set()
        if self.done is not None:
            self.loop.call_soon_threadsafe(self.done.set)
        self.thread.join(HOLD)


def a_blocking_sdk_call(release: threading.Event) -> None:
    assert release.wait(HOLD)


@pytest.fixture
def held() -> Iterator[HeldLoop]:
    held = HeldLoop()
    held.thread.start()
    assert held.entered.wait(HOLD)
    try:
        yield held
    finally:
        held.stop()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` while the loop's thread catches up (bounded by tries, not time)."""
    for _ in range(int(HOLD * 1000)):
        if condition():
            return
        time.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


def test_a_stall_past_the_threshold_names_the_reconcile_and_the_blocking_stack(
    held: HeldLoop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="setpoint.runtime")
    metrics = Metrics(CollectorRegistry(), runtime=False)
    clock = ManualClock()
    detector = BlockedLoopDetector(threshold=0.1, metrics=metrics, clock=clock)
    assert held.thread.ident is not None
    detector.attach(held.loop, held.thread.ident)

    assert detector.poll() == pytest.approx(0.1)  # the first ping is posted
    clock.advance(0.05)
    assert detector.poll() == pytest.approx(0.05)  # not answered, not blocked long enough yet
    assert detector.stalls == []
    clock.advance(0.05)
    detector.poll()
    [stall] = detector.stalls
    assert stall.reconcile is not None
    assert (stall.reconcile.controller, stall.reconcile.key) == ("tenants", "prod/acme")
    assert stall.stack[-1][2] == "wait"  # innermost: threading.Event.wait ...
    assert "a_blocking_sdk_call" in [function for _, _, function in stall.stack]
    assert metrics.value("setpoint_event_loop_blocked_total") == 1
    [line] = [r.getMessage() for r in caplog.records if "event loop is blocked" in r.getMessage()]
    assert "controller=tenants key=prod/acme" in line
    assert "in a_blocking_sdk_call" in line

    clock.advance(1.0)
    detector.poll()  # the same stall: reported once
    assert len(detector.stalls) == 1

    held.release.set()  # the loop answers the ping; the next stall is a new one
    clock.advance(0.05)

    def answered() -> bool:
        detector.poll()
        return detector._answered == detector._sent == 1

    wait_until(answered, "the loop answers the ping")
    clock.advance(1.0)
    detector.poll()  # a new ping
    assert detector._sent == 2 and len(detector.stalls) == 1


def test_a_loop_that_answers_in_time_is_never_reported(held: HeldLoop) -> None:
    held.release.set()  # the loop serves its callbacks
    clock = ManualClock()
    detector = BlockedLoopDetector(threshold=0.1, clock=clock)
    assert held.thread.ident is not None
    detector.attach(held.loop, held.thread.ident)
    for _ in range(5):
        detector.poll()
        sent = detector._sent
        wait_until(lambda: detector._answered >= sent, "the loop answers")  # noqa: B023
        clock.advance(0.099)  # answered just within the threshold
        detector.poll()
        clock.advance(0.03)
    assert detector.stalls == []


def test_the_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="threshold"):
        BlockedLoopDetector(threshold=0)


async def test_the_lag_monitor_runs_the_watchdog_thread_that_catches_a_time_sleep() -> None:
    """The real thread on the real loop: a 0.4 s ``time.sleep`` against a 0.04 s threshold."""
    metrics = Metrics(CollectorRegistry(), runtime=False)
    monitor = LoopLagMonitor(metrics, interval=0.02, blocked_after=0.04)
    await monitor.start()
    try:
        detector = monitor.detector
        assert detector is not None
        await asyncio.sleep(0)  # the watchdog pings once the loop has run after start()
        info = ReconcileInfo("buckets", "", "logs", "rid-2", time.monotonic())
        with reconcile_scope(info):
            time.sleep(0.4)  # noqa: ASYNC251 - the point: an async reconcile that blocks
        await eventually(lambda: detector.stalls, timeout=10, description="the stall")
        stall = detector.stalls[0]
        assert stall.reconcile == info
        assert any("test_blocked_loop.py" in f for f, _, _ in stall.stack)
        watchdog = detector._watchdog
        assert watchdog is not None and watchdog.is_alive()
    finally:
        await monitor.stop(1.0)
    assert monitor.detector is None
    assert not watchdog.is_alive()
    off = LoopLagMonitor(metrics, blocked_after=None)
    await off.start()
    try:
        assert off.detector is None
    finally:
        await off.stop(1.0)


def test_the_manager_option_sets_the_detectors_threshold() -> None:
    def lag_monitor(**options: Any) -> LoopLagMonitor | None:
        manager = Manager(
            FakeClient(),
            ManagerOptions(metrics=Metrics(CollectorRegistry()), handle_signals=False, **options),
        )
        return manager.loop_lag

    default = lag_monitor()
    assert default is not None and default.blocked_after == 0.1
    tuned = lag_monitor(blocked_loop_threshold=0.5)
    assert tuned is not None and tuned.blocked_after == 0.5
    off = lag_monitor(blocked_loop_threshold=None)
    assert off is not None and off.blocked_after is None
    with pytest.raises(ValueError, match=r"blocked_loop_threshold=0 must be a positive number"):
        ManagerOptions(blocked_loop_threshold=0)


def test_stalls_are_logged_at_most_once_per_log_every_and_all_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="setpoint.runtime")
    metrics = Metrics(CollectorRegistry(), runtime=False)
    clock = ManualClock()
    detector = BlockedLoopDetector(threshold=0.1, metrics=metrics, clock=clock, log_every=10.0)
    loop = asyncio.new_event_loop()  # never run: the test answers the pings itself
    try:
        detector.attach(loop, threading.get_ident())

        def one_stall() -> None:
            detector.poll()  # a ping
            clock.advance(0.11)
            detector.poll()  # unanswered past the threshold: a stall
            detector._pong(detector._sent)  # the loop answers
            clock.advance(0.05)

        one_stall()
        one_stall()  # within 10 s of the first line: counted, not logged
        clock.advance(10.0)
        one_stall()
    finally:
        loop.close()
    lines = [r.getMessage() for r in caplog.records if "event loop is blocked" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "more stalls" not in lines[0]
    assert lines[1].endswith("(1 more stalls since the last line, not logged)")
    assert len(detector.stalls) == 3
    assert metrics.value("setpoint_event_loop_blocked_total") == 3
