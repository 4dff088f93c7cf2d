"""Runtime health: process metrics, the event loop's lag, the task dump (signal and endpoint)."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time

from prometheus_client import CollectorRegistry

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


async def test_a_blocked_loop_shows_as_lag_and_is_logged_once(caplog: object) -> None:
    metrics = Metrics(CollectorRegistry(), runtime=False)
    monitor = LoopLagMonitor(metrics, interval=0.02, warn_after=0.2)
    await monitor.start()
    try:
        # Samples every 20 ms: wait for two rather than sleeping for them (a loaded machine
        # may run the monitor less often than a fixed sleep assumes).
        await eventually(
            lambda: metrics.value("setpoint_event_loop_lag_seconds_count") >= 2,
            timeout=10,
            interval=0.02,
            description="two lag samples",
        )
        time.sleep(0.35)  # noqa: ASYNC251 - block the loop: the next wake-up comes ~0.35 s late
        await asyncio.sleep(0.1)
    finally:
        await monitor.stop(1.0)
    assert monitor.max_lag >= 0.3
    # The slow wake-up landed in a bucket above 0.25 s.
    below = metrics.value("setpoint_event_loop_lag_seconds_bucket", le="0.25")
    total = metrics.value("setpoint_event_loop_lag_seconds_count")
    assert total - below >= 1
    assert monitor.failure() is None


async def test_the_task_dump_names_each_task_its_await_chain_and_its_reconcile() -> None:
    release = asyncio.Event()

    async def wait_for_release() -> None:
        await release.wait()

    async def fake_reconcile() -> str | None:
        info = ReconcileInfo("tenant", "prod", "acme", "rid-1", time.monotonic())
        with reconcile_scope(info):
            assert current_reconcile() is info
            await wait_for_release()
            inside = current_reconcile()
            return inside.key if inside is not None else None

    task = asyncio.create_task(fake_reconcile(), name="controller/tenant worker 0")
    await asyncio.sleep(0.01)
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


def blocking_computation() -> None:
    """Stands for a synchronous call that holds the event loop."""
    deadline = time.monotonic() + 0.5
    os.kill(os.getpid(), signal.SIGUSR1)
    while time.monotonic() < deadline:
        pass


async def test_sigusr1_dumps_the_tasks_and_the_code_blocking_the_loop() -> None:
    out = io.StringIO()
    restore = install_task_dump_signal(asyncio.get_running_loop(), stream=lambda: out)
    assert restore is not None
    try:
        # A handler already installed is left alone (and nothing is installed a second time).
        assert install_task_dump_signal(asyncio.get_running_loop(), stream=lambda: out) is None
        blocking_computation()
    finally:
        restore()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
    text = out.getvalue()
    assert text.startswith(f"setpoint task dump: pid {os.getpid()}")
    running = text.split("Running on the event loop's thread right now", 1)[1]
    assert "in blocking_computation" in running.split("\n\nTask ", 1)[0]
