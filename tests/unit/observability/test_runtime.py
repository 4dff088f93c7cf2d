"""Runtime health: process metrics, the event loop's lag, the task dump (signal and endpoint)."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import time

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.observability.metrics import Metrics
from setpoint.observability.runtime import (
    LoopLagMonitor,
    ReconcileInfo,
    collect_tasks,
    current_reconcile,
    install_task_dump_signal,
    reconcile_scope,
    task_dump,
)
from setpoint.testing import eventually


def test_the_registry_carries_process_and_python_runtime_metrics() -> None:
    metrics = Metrics(CollectorRegistry())
    names = {sample.name for family in metrics.registry.collect() for sample in family.samples}
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "python_gc_collections_total",
        "python_info",
    ):
        assert name in names, name
    assert metrics.value("process_resident_memory_bytes") > 1_000_000
    assert metrics.value("process_open_fds") >= 3


def test_runtime_collectors_can_be_left_out() -> None:
    metrics = Metrics(CollectorRegistry(), runtime=False)
    names = {sample.name for family in metrics.registry.collect() for sample in family.samples}
    assert not any(name.startswith(("process_", "python_")) for name in names)


async def test_late_wake_ups_show_as_lag_and_a_blocked_loop_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each wake-up's lateness is measured exactly; one blocked episode gives one warning.

    On a ManualClock: moving it past the monitor's timer is a wake-up that comes that late,
    as after a loop blocked by a synchronous call.
    """
    clock = ManualClock()
    metrics = Metrics(CollectorRegistry(), runtime=False)
    monitor = LoopLagMonitor(metrics, interval=0.02, warn_after=0.2, clock=clock)
    count = "setpoint_event_loop_lag_seconds_count"

    async def wake_up(late: float) -> None:
        """Let the monitor set its timer, fire it ``late`` seconds late, and see it measure."""
        before = metrics.value(count)
        for _ in range(10):  # no time passes: the monitor reaches its next await
            if clock.next_deadline is not None and metrics.value(count) == before:
                break
            await asyncio.sleep(0)
        deadline = clock.next_deadline
        assert deadline is not None, "the monitor does not wait on its clock"
        clock.advance_to(deadline + late)
        for _ in range(10):
            if metrics.value(count) > before:
                return
            await asyncio.sleep(0)
        raise AssertionError(f"no lag measured after a wake-up {late}s late")

    await monitor.start()
    try:
        with caplog.at_level(logging.WARNING, logger="setpoint.runtime"):
            for late in (0.0, 0.35, 0.3, 0.0, 0.22):
                await wake_up(late)
    finally:
        await monitor.stop(1.0)
    assert monitor.max_lag == pytest.approx(0.35)
    assert monitor.last_lag == pytest.approx(0.22)
    assert clock.next_deadline is None  # stopping cancels the monitor's timer
    # The two wake-ups of the blocked episode (0.35 and 0.3 s late) land above 0.25 s.
    below = metrics.value("setpoint_event_loop_lag_seconds_bucket", le="0.25")
    assert (metrics.value(count), below) == (5, 3)
    warnings = [r.getMessage() for r in caplog.records if r.name == "setpoint.runtime"]
    assert len(warnings) == 2, warnings  # 0.35 then 0.3: one episode; 0.22 starts another
    assert warnings[0].startswith("the event loop was blocked for 0.35s")
    assert monitor.failure() is None


async def test_the_lag_monitor_measures_the_running_loop_by_default() -> None:
    """Without a clock it wakes on the real loop (how late is not asserted: that is load)."""
    metrics = Metrics(CollectorRegistry(), runtime=False)
    monitor = LoopLagMonitor(metrics, interval=0.02)
    await monitor.start()
    try:
        await eventually(
            lambda: metrics.value("setpoint_event_loop_lag_seconds_count") >= 2,
            timeout=10,
            interval=0.02,
            description="two lag samples",
        )
    finally:
        await monitor.stop(1.0)
    assert monitor.failure() is None


async def test_the_task_dump_names_each_task_its_await_chain_and_its_reconcile() -> None:
    release, waiting = asyncio.Event(), asyncio.Event()

    async def wait_for_release() -> None:
        waiting.set()
        await release.wait()

    async def fake_reconcile() -> str | None:
        info = ReconcileInfo("tenant", "prod", "acme", "rid-1", time.monotonic())
        with reconcile_scope(info):
            assert current_reconcile() is info
            await wait_for_release()
            inside = current_reconcile()
            return inside.key if inside is not None else None

    task = asyncio.create_task(fake_reconcile(), name="controller/tenant worker 0")
    await waiting.wait()  # the task now waits in release.wait()
    infos = {info.name: info for info in collect_tasks()}
    worker = infos["controller/tenant worker 0"]
    assert worker.reconcile is not None and worker.reconcile.key == "prod/acme"
    functions = [function for _, _, function in worker.frames]
    assert functions[:2] == ["fake_reconcile", "wait_for_release"]
    assert "Event.wait" in functions[-1] or functions[-1] == "wait"
    assert "Future" in worker.waiting_on
    text = task_dump()
    assert "Task 'controller/tenant worker 0' (pending) reconciling: controller=tenant" in text
    assert "key=prod/acme reconcile_id=rid-1" in text
    assert "in wait_for_release" in text
    release.set()
    assert await task == "prod/acme"
    assert current_reconcile() is None
    assert all(info.reconcile is None for info in collect_tasks())


def blocking_computation(out: io.StringIO) -> None:
    """Stands for a synchronous call that holds the event loop until the dump is written.

    The signal handler runs between two bytecodes of this loop; the real clock only bounds
    the wait (nothing asserts how long it took).
    """
    os.kill(os.getpid(), signal.SIGUSR1)
    give_up = time.monotonic() + 10
    while not out.getvalue() and time.monotonic() < give_up:
        pass


async def test_sigusr1_dumps_the_tasks_and_the_code_blocking_the_loop() -> None:
    out = io.StringIO()
    restore = install_task_dump_signal(asyncio.get_running_loop(), stream=lambda: out)
    assert restore is not None
    try:
        # A handler already installed is left alone (and nothing is installed a second time).
        assert install_task_dump_signal(asyncio.get_running_loop(), stream=lambda: out) is None
        blocking_computation(out)
    finally:
        restore()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    text = out.getvalue()
    assert text.startswith(f"setpoint task dump: pid {os.getpid()}")
    running = text.split("Running on the event loop's thread right now", 1)[1]
    assert "in blocking_computation" in running.split("\n\nTask ", 1)[0]
