"""Throughput of WorkQueue add/get/done for 100k keys, against a plain asyncio.Queue baseline.

Not a test: it prints, for each workload, the median [min-max] time of 5 runs, keys/s, and the
ratio to the asyncio.Queue baseline measured in the same run. The baseline does far less (no
dedup, no per-key exclusivity, no priorities, no delays), so the ratio is the price of those
guarantees, not a target of 1.00x.

Run::

    .venv/bin/python bench/workqueue_throughput.py
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from _common import Summary, markdown_table, ratio, run_header
from prometheus_client import CollectorRegistry

from setpoint.api.keys import ObjectKey
from setpoint.controller.workqueue import Priority, WorkQueue
from setpoint.observability.metrics import Metrics

N = 100_000
KEYS = [ObjectKey(f"ns-{i % 100}", f"obj-{i}") for i in range(N)]

Workload = Callable[[], Coroutine[Any, Any, float]]
"""One measured run: returns the seconds it took."""


def _queue(metrics: bool) -> WorkQueue[ObjectKey]:
    # A fresh registry per run: the default one would refuse a second queue named "bench".
    return WorkQueue("bench", metrics=Metrics(CollectorRegistry()) if metrics else None)


async def sequential(metrics: bool, mixed: bool) -> float:
    """Add N keys, then one worker takes and finishes them all."""
    queue = _queue(metrics)
    start = time.perf_counter()
    for i, key in enumerate(KEYS):
        queue.add(key, priority=Priority.LOW if mixed and i % 2 else Priority.NORMAL)
    for _ in range(N):
        key = await queue.get()
        queue.done(key)
    elapsed = time.perf_counter() - start
    assert len(queue) == 0
    return elapsed


async def concurrent(workers: int, metrics: bool) -> float:
    """A producer adds N keys in batches of 1000 while ``workers`` tasks drain the queue."""
    queue = _queue(metrics)
    processed = 0

    async def worker() -> None:
        nonlocal processed
        while True:
            key = await queue.get()
            queue.done(key)
            processed += 1
            if processed == N:
                queue.shutdown()

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    for offset in range(0, N, 1000):
        for key in KEYS[offset : offset + 1000]:
            queue.add(key)
        await asyncio.sleep(0)  # yield to the workers between batches
    # The workers end when shutdown() makes get() raise; that exception is expected.
    await asyncio.gather(*tasks, return_exceptions=True)
    elapsed = time.perf_counter() - start
    assert processed == N
    return elapsed


async def delayed(metrics: bool) -> float:
    """add_after N keys with distinct deadlines inside 50 ms; one worker drains them."""
    queue = _queue(metrics)
    start = time.perf_counter()
    for i, key in enumerate(KEYS):
        queue.add_after(key, 0.05 * i / N)
    for _ in range(N):
        key = await queue.get()
        queue.done(key)
    return time.perf_counter() - start


async def baseline() -> float:
    """asyncio.Queue put_nowait/get for the same N keys (no dedup, no exclusivity)."""
    queue: asyncio.Queue[ObjectKey] = asyncio.Queue()
    start = time.perf_counter()
    for key in KEYS:
        queue.put_nowait(key)
    for _ in range(N):
        await queue.get()
        queue.task_done()
    return time.perf_counter() - start


WORKLOADS: list[tuple[str, Workload]] = [
    ("asyncio.Queue baseline (put/get)", baseline),
    ("add N, then get+done N (no metrics)", lambda: sequential(False, False)),
    ("same, half LOW priority (no metrics)", lambda: sequential(False, True)),
    ("same, with Prometheus metrics", lambda: sequential(True, False)),
    ("add_after N (50 ms spread), get+done", lambda: delayed(False)),
    ("4 workers draining while producer adds", lambda: concurrent(4, False)),
    ("4 workers, with Prometheus metrics", lambda: concurrent(4, True)),
]
"""Every workload, baseline first; each runs in its own event loop per repeat."""


def main() -> None:
    """Measure every workload, interleaved round by round, and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="runs per workload (median reported)")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {label: [] for label, _ in WORKLOADS}
    # Rounds interleave the workloads, so slow drift of a shared machine hits them all alike.
    for _ in range(args.runs):
        for label, workload in WORKLOADS:
            samples[label].append(asyncio.run(workload()))
    summaries = {label: Summary.of(values) for label, values in samples.items()}
    base = summaries[WORKLOADS[0][0]].median
    rows = [
        [
            label,
            s.spread(1000),
            f"{N / s.median:,.0f}",
            ratio(s.median, base),
        ]
        for label, s in summaries.items()
    ]
    print(run_header())
    print()
    print(
        f"**WorkQueue, N={N:,} keys** (median [min-max] ms of {args.runs} runs; ratio is time "
        "relative to the asyncio.Queue baseline of the same run, so higher is slower):"
    )
    print()
    print(markdown_table(["workload", "ms", "keys/s", "time ratio"], rows))


if __name__ == "__main__":
    main()
