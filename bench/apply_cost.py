"""What the API server spends on one child write: a plain create against a server-side apply.

Not a test. ``apply_child`` (the recommended way) makes a child with server-side apply; the
floor and controller-runtime make it with a POST. On this 2-core machine the API server and
etcd are the converge benchmark's bottleneck, so their CPU per write decides how fast any
operator can go. This script measures it directly: one local control plane (etcd and
kube-apiserver, no controller manager), ``--n`` ConfigMaps written by 8 concurrent tasks
per batch, the batches of each mode interleaved ``--rounds`` times, and for each batch the
CPU seconds kube-apiserver and etcd used (from ``/proc``) and its wall time. Modes:

- ``post``: ``client.create`` (POST), as the floor and controller-runtime create children;
- ``apply``: ``client.apply`` (PATCH ``application/apply-patch+yaml``, force), as
  ``apply_child`` creates one;
- ``apply-again``: the same apply once more on objects that already match it (the server's
  no-op apply; ``apply_child`` skips the request when the cache proves it unnecessary).

Every body is the same ConfigMap a converge child is: a controller owner reference, the
apply marker annotation, one data key. Run::

    .venv/bin/python bench/apply_cost.py --n 1000 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import Summary, cpu_seconds_of, markdown_table, pids_with_argument, run_header

from setpoint import Client
from setpoint.testing import ControlPlane, ControlPlaneOptions

NAMESPACE = "bench"
FIELD_MANAGER = "widget-operator"
MODES = ("post", "apply", "apply-again")


def child(i: int, batch: str) -> dict[str, Any]:
    """ConfigMap ``i`` of ``batch``, shaped as the converge benchmark's children are."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{batch}-{i:05d}",
            "namespace": NAMESPACE,
            "annotations": {"applied.setpoint.dev/0123456789": "abcdefabcdefabcdefab"},
            "ownerReferences": [
                {
                    "apiVersion": "bench.setpoint.dev/v1",
                    "kind": "Widget",
                    "name": f"widget-{i:05d}",
                    "uid": "00000000-0000-0000-0000-000000000001",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {"size": str(i)},
    }


async def batch(n: int, write: Callable[[int], Awaitable[Any]], workers: int = 8) -> None:
    """``write(0) ... write(n - 1)`` with ``workers`` tasks."""
    numbers = iter(range(n))

    async def worker() -> None:
        for i in numbers:
            await write(i)

    await asyncio.gather(*(worker() for _ in range(workers)))


async def measure(plane: ControlPlane, n: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each mode's batches: server CPU per write (apiserver, etcd) and wall seconds."""
    servers = pids_with_argument(str(plane.directory))
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        await client.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        await asyncio.sleep(5)  # past the fresh server's own start-up work
        for round_ in range(rounds):
            # post first in even rounds, last in odd ones; apply-again always right after apply
            order = MODES if round_ % 2 == 0 else ("apply", "apply-again", "post")
            for mode in order:
                post = mode == "post"
                name = f"{'post' if post else 'apply'}{round_}"  # apply-again: apply's objects

                async def write(i: int, post: bool = post, name: str = name) -> Any:
                    if post:
                        return await client.create(child(i, name), field_manager=FIELD_MANAGER)
                    return await client.apply(
                        child(i, name), field_manager=FIELD_MANAGER, force=True
                    )

                await asyncio.sleep(2)  # let the previous batch's watch fan-out settle
                before = cpu_seconds_of(servers)
                started = time.monotonic()
                await batch(n, write)
                seconds = time.monotonic() - started
                after = cpu_seconds_of(servers)
                spent = {program: after[program] - before.get(program, 0.0) for program in after}
                results[mode].append(
                    {
                        "apiserver_ms": spent.get("kube-apiserver", 0.0) / n * 1000,
                        "etcd_ms": spent.get("etcd", 0.0) / n * 1000,
                        "seconds": seconds,
                    }
                )
                print(f"[{round_}] {mode}: {results[mode][-1]}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="writes per batch")
    parser.add_argument("--rounds", type=int, default=4, help="batches per mode")
    args = parser.parse_args()
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
        results = asyncio.run(measure(plane, args.n, args.rounds))
    post = Summary.of([r["apiserver_ms"] + r["etcd_ms"] for r in results["post"]]).median
    rows = []
    for mode in MODES:
        runs = results[mode]
        total = Summary.of([r["apiserver_ms"] + r["etcd_ms"] for r in runs])
        rows.append(
            [
                mode,
                Summary.of([r["apiserver_ms"] for r in runs]).spread(digits=2),
                Summary.of([r["etcd_ms"] for r in runs]).spread(digits=2),
                total.spread(digits=2),
                f"{total.median / post:.2f}x" if post else "n/a",
                Summary.of([args.n / r["seconds"] for r in runs]).spread(),
            ]
        )
    print(run_header())
    print()
    headers = [
        "mode",
        "kube-apiserver CPU ms/write",
        "etcd CPU ms/write",
        "server CPU ms/write",
        "x post",
        "writes/s",
    ]
    print(markdown_table(headers, rows))


if __name__ == "__main__":
    main()
