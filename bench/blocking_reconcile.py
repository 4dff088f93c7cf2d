"""What a blocking (plain ``def``) reconcile costs against an async one, and the watchdog's cost.

Not a test (issue 30). Three measurements, each interleaved with its baseline in the same
run, 5 runs each, median [min-max]:

1. **Controller end to end**: 2,000 ConfigMaps on the FakeClient, one controller with 4
   workers reconciling each once with one cached read (``ctx.reader.get``); async reconciler
   (the baseline) against the same reconciler as a plain ``def`` in the controller's
   threads. Reported: microseconds per reconcile, and the ratio.
2. **Per call**: one reconcile dispatched through ``ReconcileThreads.call`` (the thread
   handoff, no facade call), and each further ``ctx.reader.get`` through the facade (a
   round trip to the loop), against awaiting the same async function directly.
3. **Watchdog**: 200,000 ``await asyncio.sleep(0)`` on a loop with the blocked-loop
   detector running (threshold 100 ms) against the same loop without it.

Run::

    .venv/bin/python bench/blocking_reconcile.py
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import Summary, markdown_table, ratio, run_header
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.cache import Cache
from setpoint.controller import Builder, ControllerOptions, Request
from setpoint.controller.blocking import ReconcileThreads, SyncContext
from setpoint.observability.metrics import Metrics
from setpoint.observability.runtime import BlockedLoopDetector
from setpoint.testing import FakeClient, context_for

NAMESPACE = "bench"


def config_maps(n: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": NAMESPACE},
            "data": {"i": str(i)},
        }
        for i in range(n)
    ]


async def controller_run(n: int, blocking: bool) -> float:
    """Seconds per reconcile for ``n`` keys through a started controller over the fake."""
    fake = FakeClient(objects=config_maps(n))
    cache = Cache(fake)
    await cache.start()
    done = 0
    finished = asyncio.Event()

    def count() -> None:
        nonlocal done
        done += 1
        if done == n:
            finished.set()

    async def async_reconcile(ctx: Any, request: Request) -> None:
        await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
        count()

    def sync_reconcile(ctx: SyncContext, request: Request) -> None:
        ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
        fake_loop.call_soon_threadsafe(count)

    fake_loop = asyncio.get_running_loop()
    controller = (
        Builder("bench")
        .for_(kinds.ConfigMap)
        .with_options(ControllerOptions(max_concurrent_reconciles=4))
        .build(
            sync_reconcile if blocking else async_reconcile,
            client=fake,
            cache=cache,
            metrics=Metrics(CollectorRegistry()),
        )
    )
    start = time.perf_counter()
    await controller.start()
    await asyncio.wait_for(finished.wait(), 300)
    elapsed = time.perf_counter() - start
    await controller.stop(5)
    await cache.stop(5)
    return elapsed / n


async def per_call(calls: int, reads: int, blocking: bool) -> float:
    """Seconds per reconcile making ``reads`` reads, dispatched ``calls`` times."""
    fake = FakeClient(objects=config_maps(1))
    ctx = context_for(fake, ObjectKey(NAMESPACE, "cm-0"))

    async def async_reconcile(ctx: Any, request: Request) -> None:
        for _ in range(reads):
            await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)

    def sync_reconcile(ctx: SyncContext, request: Request) -> None:
        for _ in range(reads):
            ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)

    threads = ReconcileThreads("bench", 1)
    start = time.perf_counter()
    for _ in range(calls):
        if blocking:
            await threads.call(sync_reconcile, ctx, ctx.request, limit="none")
        else:
            await async_reconcile(ctx, ctx.request)
    elapsed = time.perf_counter() - start
    threads.shutdown()
    return elapsed / calls


async def sleeps(n: int, watchdog: bool) -> float:
    """Seconds for ``n`` bare loop iterations, with or without the blocked-loop detector."""
    detector = BlockedLoopDetector(threshold=0.1) if watchdog else None
    if detector is not None:
        detector.start()
    start = time.perf_counter()
    for _ in range(n):
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - start
    if detector is not None:
        detector.stop()
    return elapsed


async def interleaved(
    runs: int, a: Callable[[], Awaitable[float]], b: Callable[[], Awaitable[float]]
) -> tuple[Summary, Summary]:
    first: list[float] = []
    second: list[float] = []
    await a(), await b()  # warm-up: imports, the first thread
    for _ in range(runs):
        first.append(await a())
        second.append(await b())
    return Summary.of(first), Summary.of(second)


async def main(n: int, runs: int) -> None:
    rows: list[list[str]] = []
    base, sync = await interleaved(
        runs, lambda: controller_run(n, False), lambda: controller_run(n, True)
    )
    rows.append(
        [
            f"controller, {n} keys, 4 workers, 1 cached read (us/reconcile)",
            base.spread(1e6),
            sync.spread(1e6),
            ratio(sync.median, base.median),
        ]
    )
    for reads in (0, 1, 10):
        base, sync = await interleaved(
            runs, lambda r=reads: per_call(2000, r, False), lambda r=reads: per_call(2000, r, True)
        )
        rows.append(
            [
                f"one call, {reads} facade reads (us/call)",
                base.spread(1e6, 1),
                sync.spread(1e6, 1),
                ratio(sync.median, base.median),
            ]
        )
    base, watched = await interleaved(
        runs, lambda: sleeps(200_000, False), lambda: sleeps(200_000, True)
    )
    rows.append(
        [
            "200k asyncio.sleep(0) (ms), watchdog off / on",
            base.spread(1e3),
            watched.spread(1e3),
            ratio(watched.median, base.median),
        ]
    )
    print(run_header())
    print()
    print(markdown_table(["what", "async (baseline)", "blocking / with", "ratio"], rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="keys of the controller run")
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.runs))
