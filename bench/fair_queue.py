"""Fair work queue (``fair_by``): how long a small tenant waits behind a large one, and the cost.

Not a test: it prints two Markdown tables.

1. **Starvation.** A large namespace's 10,000 keys are queued; 100 ms later a small
   namespace's 10 keys are added. Workers (4, as ``max_concurrent_reconciles=4``) take keys
   the way a controller's workers do (``get``, reconcile, ``forget``, ``done``), and the
   reconcile is *simulated*: ``await asyncio.sleep(cost)`` (1 ms by default), standing for
   the API round trip of a real one. Measured: time from the small namespace's adds to each
   of its keys being done (median and last of the 10), and the time to drain everything,
   for the default FIFO queue and ``fair_by=namespace``, interleaved run by run.
2. **Cost when nothing is unfair.** Add 100,000 keys then take and finish them all with one
   worker and no reconcile (the queue's own time only), without ``fair_by``, with it and
   every key in one namespace, and both over 100 namespaces; interleaved; ratio to the
   queue without ``fair_by`` on one namespace.

Run::

    .venv/bin/python bench/fair_queue.py
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Hashable

from _common import Summary, markdown_table, ratio, run_header

from setpoint.api.keys import ObjectKey
from setpoint.controller.workqueue import WorkQueue

FairBy = Callable[[ObjectKey], Hashable] | None


def by_namespace(key: ObjectKey) -> str:
    """The grouping ``ControllerOptions(fair_by="namespace")`` uses."""
    return key.namespace


async def starvation(
    fair_by: FairBy, big: int, small: int, workers: int, cost: float
) -> tuple[list[float], float]:
    """Return the small tenant's per-key seconds from its add to done, and the drain time."""
    queue: WorkQueue[ObjectKey] = WorkQueue("bench", fair_by=fair_by)
    small_keys = [ObjectKey("small", f"o{n}") for n in range(small)]
    finished: dict[ObjectKey, float] = {}
    remaining = big + small

    async def worker() -> None:
        nonlocal remaining
        while True:
            key = await queue.get()
            await asyncio.sleep(cost)  # the simulated reconcile
            queue.forget(key)
            queue.done(key)
            if key.namespace == "small":
                finished[key] = time.perf_counter()
            remaining -= 1
            if not remaining:
                queue.shutdown()

    start = time.perf_counter()
    for n in range(big):
        queue.add(ObjectKey("big", f"o{n}"))
    tasks = [asyncio.create_task(worker()) for _ in range(workers)]
    await asyncio.sleep(0.1)  # the large tenant is converging when the small one arrives
    added = time.perf_counter()
    for key in small_keys:
        queue.add(key)
    # The workers end when shutdown() makes get() raise; that exception is expected.
    await asyncio.gather(*tasks, return_exceptions=True)
    drained = time.perf_counter() - start
    return [finished[key] - added for key in small_keys], drained


async def overhead(fair_by: FairBy, keys: list[ObjectKey]) -> float:
    """Add every key, then one worker takes and finishes them all; return the seconds."""
    queue: WorkQueue[ObjectKey] = WorkQueue("bench", fair_by=fair_by)
    start = time.perf_counter()
    for key in keys:
        queue.add(key)
    for _ in range(len(keys)):
        key = await queue.get()
        queue.done(key)
    return time.perf_counter() - start


def main() -> None:
    """Run both parts, interleaving the queues compared, and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="runs per queue (median reported)")
    parser.add_argument("--big", type=int, default=10_000, help="keys of the large tenant")
    parser.add_argument("--small", type=int, default=10, help="keys of the small tenant")
    parser.add_argument("--workers", type=int, default=4, help="concurrent workers")
    parser.add_argument("--cost", type=float, default=0.001, help="simulated reconcile, s")
    parser.add_argument("--n", type=int, default=100_000, help="keys of the overhead part")
    args = parser.parse_args()

    queues: list[tuple[str, FairBy]] = [
        ("FIFO (default)", None),
        ("fair_by=namespace", by_namespace),
    ]
    median_wait: dict[str, list[float]] = {label: [] for label, _ in queues}
    last_wait: dict[str, list[float]] = {label: [] for label, _ in queues}
    drain: dict[str, list[float]] = {label: [] for label, _ in queues}
    for _ in range(args.runs):
        for label, fair_by in queues:
            waits, drained = asyncio.run(
                starvation(fair_by, args.big, args.small, args.workers, args.cost)
            )
            median_wait[label].append(Summary.of(waits).median)
            last_wait[label].append(max(waits))
            drain[label].append(drained)
    base = Summary.of(last_wait[queues[0][0]]).median
    rows = [
        [
            label,
            Summary.of(median_wait[label]).spread(1000),
            Summary.of(last_wait[label]).spread(1000),
            ratio(base, Summary.of(last_wait[label]).median),
            Summary.of(drain[label]).spread(1000),
        ]
        for label, _ in queues
    ]

    one_ns = [ObjectKey("tenant", f"o{i}") for i in range(args.n)]
    many_ns = [ObjectKey(f"ns-{i % 100}", f"o{i}") for i in range(args.n)]
    workloads: list[tuple[str, FairBy, list[ObjectKey]]] = [
        ("no fair_by (default)", None, one_ns),
        ("no fair_by, 100 namespaces", None, many_ns),
        ("fair_by=namespace, 1 namespace", by_namespace, one_ns),
        ("fair_by=namespace, 100 namespaces", by_namespace, many_ns),
    ]
    costs: dict[str, list[float]] = {label: [] for label, _, _ in workloads}
    for _ in range(args.runs):
        for label, fair_by, keys in workloads:
            costs[label].append(asyncio.run(overhead(fair_by, keys)))
    cost_base = Summary.of(costs[workloads[0][0]]).median
    cost_rows = [
        [
            label,
            Summary.of(costs[label]).spread(1000),
            f"{args.n / Summary.of(costs[label]).median:,.0f}",
            ratio(Summary.of(costs[label]).median, cost_base),
        ]
        for label, _, _ in workloads
    ]

    print(run_header())
    print()
    print(
        f"**Small tenant behind a large one**: {args.big:,} keys queued, {args.small} more "
        f"100 ms later; {args.workers} workers, simulated reconcile {args.cost * 1000:g} ms "
        f"(median [min-max] ms of {args.runs} runs; FIFO / this: how many times longer the "
        "small tenant's last key waits in the FIFO queue):"
    )
    print()
    print(
        markdown_table(
            ["queue", "small: median key", "small: last key", "FIFO / this", "drain all"], rows
        )
    )
    print()
    print(
        f"**The queue's own cost, N={args.n:,}** (add N, then get+done N, one worker, no "
        f"reconcile; median [min-max] ms of {args.runs} runs):"
    )
    print()
    print(markdown_table(["queue", "ms", "keys/s", "time ratio"], cost_rows))


if __name__ == "__main__":
    main()
