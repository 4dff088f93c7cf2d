"""Controller guarantees on a real API server: exclusivity, backoff, terminal errors."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest_asyncio
from prometheus_client import CollectorRegistry

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client, load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.controller import (
    Builder,
    Context,
    Controller,
    ControllerOptions,
    ReconcileError,
    Request,
    Result,
    TerminalError,
)
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.controller.reconcile import ReconcilerLike
from setpoint.observability.metrics import Metrics
from setpoint.testing import eventually
from tests._support.gizmos import create_gizmos
from tests._support.kinds import GIZMO

Start = Callable[..., Awaitable[tuple[Controller, Metrics]]]


@pytest_asyncio.fixture(loop_scope="session")
async def start(
    kubeconfig_path: Path, namespace: str, gizmo_crd: GroupVersionKind
) -> AsyncIterator[Start]:
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    cache = Cache(client, options=CacheOptions(namespaces=(namespace,)))
    await cache.start()
    controllers: list[Controller] = []

    async def start_controller(
        name: str, reconciler: ReconcilerLike, options: ControllerOptions
    ) -> tuple[Controller, Metrics]:
        metrics = Metrics(CollectorRegistry())
        controller = (
            Builder(name)
            .for_(GIZMO)
            .with_options(options)
            .build(reconciler, client=client, cache=cache, metrics=metrics)
        )
        await controller.start()
        controllers.append(controller)
        return controller, metrics

    try:
        yield start_controller
    finally:
        for controller in controllers:
            await controller.stop(10)
        await cache.stop(5)
        await client.close()


async def test_no_two_workers_ever_hold_one_key(k8s: Client, namespace: str, start: Start) -> None:
    """Per-key exclusivity holds with max_concurrent_reconciles > 1.

    Eight workers reconcile ten objects while each object is changed twenty times. The
    reconciler records which keys are in progress; no key is ever entered twice at once,
    while different keys do run in parallel.
    """
    in_progress: set[ObjectKey] = set()
    overlaps: list[ObjectKey] = []
    peak = 0
    calls = 0

    async def reconcile(ctx: Context, request: Request) -> None:
        nonlocal peak, calls
        calls += 1
        if request in in_progress:
            overlaps.append(request)
        in_progress.add(request)
        peak = max(peak, len(in_progress))
        try:
            # Hold the key across a real API round trip, so changes arrive meanwhile.
            await ctx.client.get(GIZMO, request.name, namespace=request.namespace)
            await asyncio.sleep(0.01)
        finally:
            in_progress.discard(request)

    await create_gizmos(k8s, namespace, 10)
    await start("exclusive", reconcile, ControllerOptions(max_concurrent_reconciles=8))

    async def churn(i: int) -> None:
        for round_ in range(20):
            patch = MergePatch({"metadata": {"annotations": {"round": str(round_)}}})
            await k8s.patch(GIZMO, f"g-{i:04d}", patch, namespace=namespace)

    await asyncio.gather(*(churn(i) for i in range(10)))
    await eventually(lambda: not in_progress and calls >= 20, timeout=60)
    assert overlaps == []
    assert peak > 1, "workers never ran in parallel; the test proves nothing"


async def test_errors_back_off_with_growing_intervals(
    k8s: Client, namespace: str, start: Start
) -> None:
    """A reconcile that keeps failing is retried with exponentially growing delays.

    With a 50 ms base delay the retries come at roughly 50, 100, 200, 400 ms...; each
    interval between attempts is measured and must clearly exceed the one before. The
    errors are counted (not as panics), and the worker stays alive for other keys.
    """
    attempts: list[float] = []

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        if request.name == "g-0000":
            attempts.append(time.monotonic())
            raise ReconcileError("the database is not ready")
        return None

    options = ControllerOptions(rate_limits=RateLimiterOptions(base_delay=0.05, max_delay=10.0))
    controller, metrics = await start("backoff", reconcile, options)
    await create_gizmos(k8s, namespace, 2)
    await eventually(lambda: len(attempts) >= 6, timeout=60, description="six attempts")
    intervals = [b - a for a, b in itertools.pairwise(attempts)][:5]
    assert intervals[0] >= 0.04
    for earlier, later in itertools.pairwise(intervals):
        assert later > earlier * 1.5, f"intervals did not grow: {intervals}"
    assert metrics.reconcile_errors_total.labels("backoff").get() >= 6
    assert metrics.reconcile_panics_total.labels("backoff").get() == 0
    assert controller.queue.num_requeues(ObjectKey(namespace, "g-0000")) >= 6
    assert controller.failure() is None


async def test_terminal_errors_are_not_retried(k8s: Client, namespace: str, start: Start) -> None:
    """A TerminalError is recorded once and not retried; the next change reconciles again.

    After the terminal failure nothing is waiting in the queue for the key and its backoff
    is reset; the terminal error counter shows it. Changing the object (level-based: any
    event) reconciles it again.
    """
    attempts: list[str] = []

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        attempts.append(request.name)
        obj = await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
        if obj["spec"]["size"] < 0:
            raise TerminalError("spec.size must not be negative; fix the object")
        return None

    controller, metrics = await start("terminal", reconcile, ControllerOptions())
    await k8s.create(
        {
            "apiVersion": GIZMO.api_version,
            "kind": "Gizmo",
            "metadata": {"name": "bad", "namespace": namespace},
            "spec": {"size": -1},
        }
    )
    terminal = metrics.terminal_reconcile_errors_total.labels("terminal")
    await eventually(lambda: terminal.get() == 1, timeout=30)
    await eventually(lambda: controller.queue.in_flight_count == 0, timeout=10)
    assert len(controller.queue) == 0
    assert controller.queue.num_requeues(ObjectKey(namespace, "bad")) == 0
    assert attempts == ["bad"]

    await k8s.patch(GIZMO, "bad", MergePatch({"spec": {"size": 3}}), namespace=namespace)
    # Reconciled again; clearing the Stalled condition is a status write whose event may
    # reconcile a third time, so only the first two attempts are pinned.
    await eventually(lambda: len(attempts) >= 2, timeout=30)
    assert set(attempts) == {"bad"}
    # The outcome is counted when the reconcile returns, a moment after it was entered.
    succeeded = metrics.reconcile_total.labels("terminal", "success")
    await eventually(lambda: succeeded.get() >= 1, timeout=30)
    assert terminal.get() == 1, f"attempts: {attempts}"
