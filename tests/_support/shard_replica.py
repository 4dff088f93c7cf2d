"""One replica of a sharded operator, as its own process (the sharding tests and benchmark).

Run as ``python shard_replica.py --kubeconfig K --namespace N --shard ID --journal DIR``.
It runs a Manager with leader election (Lease ``N/shard-test``) and sharding (ring
``gizmos``, shard Leases in ``N``) of one controller, ``gizmo``, over the test kind Gizmo
(tests/_support/kinds.py). Each reconcile reads its Gizmo from the cache, optionally works
for ``--work`` seconds (or as long as the Gizmo's annotation ``test.setpoint.dev/work``
says: ``"<seconds>"`` or ``"<seconds>#<anything>"``), and writes ``status.phase = <shard>``
and ``status.observedGeneration`` when they differ.

What it records, for the tests to check from outside:

- ``DIR/<shard>.jsonl``: one line when each reconcile begins and one when it ends,
  ``{"s": shard, "k": "ns/name", "a": "b"|"e", "t": time.time()}``, each appended with a
  single ``write`` to a file opened with ``O_APPEND`` (``t`` is the host's wall clock, shared
  by every process on the machine);
- ``DIR/<shard>.stats.json``, rewritten every ``--stats-every`` seconds (atomically):
  objects in this replica's Gizmo cache, RSS, whether it holds its shard Lease and leads.

With ``--no-sharding`` the same controller runs unsharded (the benchmark's baseline): one
replica, the leader, reconciles everything.

Exit code 0 after a clean shutdown (SIGTERM), 3 after losing a lease.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from setpoint.api.keys import ObjectKey
from setpoint.client import Client, MergePatch, NotFound, load_kubeconfig
from setpoint.controller import Context
from setpoint.manager import LeaderElectionLost, LeaderElectionOptions, Manager, ManagerOptions
from setpoint.manager.sharding import ShardingOptions
from setpoint.observability.metrics import Metrics

GIZMO_API = ("test.setpoint.dev", "v1", "Gizmo")
WORK_ANNOTATION = "test.setpoint.dev/work"
RING = "gizmos"
LEADER_LEASE = "shard-test"


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Journal:
    def __init__(self, path: Path, shard: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._shard = shard

    def write(self, key: ObjectKey, what: str) -> None:
        line = json.dumps(
            {"s": self._shard, "k": f"{key.namespace}/{key.name}", "a": what, "t": time.time()},
            separators=(",", ":"),
        )
        os.write(self._fd, (line + "\n").encode())


async def write_stats(manager: Manager, path: Path, every: float, kind: Any) -> None:
    tmp = path.with_suffix(".tmp")
    while True:
        try:
            cached = len(manager.cache.informer(kind).store)
        except Exception:  # the cache is not built yet
            cached = 0
        shard = manager.shard
        data = {
            "pid": os.getpid(),
            "t": time.time(),
            "cached": cached,
            "rss_mib": round(_rss_mib(), 1),
            "peak_rss_mib": round(_peak_rss_mib(), 1),
            "holding": bool(shard is not None and shard.holding),
            "leader": manager.is_leader,
        }
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        await asyncio.sleep(every)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--shard", required=True)
    parser.add_argument("--journal", required=True, type=Path)
    parser.add_argument("--lease-duration", type=float, default=4)
    parser.add_argument("--renew-deadline", type=float, default=3)
    parser.add_argument("--retry-period", type=float, default=1)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--work", type=float, default=0.0)
    parser.add_argument("--stats-every", type=float, default=0.5)
    parser.add_argument("--sharder-workers", type=int, default=8)
    parser.add_argument(
        "--no-sharding",
        action="store_true",
        help="run the same controller unsharded (leader election only): the benchmark's baseline",
    )
    args = parser.parse_args()

    from setpoint.api.gvk import GroupVersionKind

    gizmo = GroupVersionKind(*GIZMO_API)
    timings = {
        "lease_duration": args.lease_duration,
        "renew_deadline": args.renew_deadline,
        "retry_period": args.retry_period,
    }
    journal = Journal(args.journal / f"{args.shard}.jsonl", args.shard)
    client = Client(load_kubeconfig(args.kubeconfig))
    manager = Manager(
        client,
        ManagerOptions(
            leader_election=LeaderElectionOptions(
                name=LEADER_LEASE,
                namespace=args.namespace,
                identity=args.shard,
                release_on_cancel=True,
                **timings,
            ),
            sharding=None
            if args.no_sharding
            else ShardingOptions(
                ring=RING,
                controllers=("gizmo",),
                shard_id=args.shard,
                namespace=args.namespace,
                sharder_workers=args.sharder_workers,
                **timings,
            ),
            metrics=Metrics.isolated(),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            preflight=False,
        ),
    )
    shard, work = args.shard, args.work

    async def reconcile(ctx: Context, request: ObjectKey) -> None:
        journal.write(request, "b")
        try:
            try:
                obj = await ctx.reader.get(gizmo, request.name, namespace=request.namespace)
            except NotFound:
                return
            annotations = obj["metadata"].get("annotations") or {}
            seconds = work
            if WORK_ANNOTATION in annotations:
                with contextlib.suppress(ValueError):
                    seconds = float(str(annotations[WORK_ANNOTATION]).split("#")[0])
            if seconds > 0:
                await asyncio.sleep(seconds)
            status = obj.get("status") or {}
            generation = obj["metadata"].get("generation")
            if status.get("phase") != shard or status.get("observedGeneration") != generation:
                patch = MergePatch({"status": {"phase": shard, "observedGeneration": generation}})
                await ctx.client.patch(
                    gizmo, request.name, patch, namespace=request.namespace, subresource="status"
                )
        finally:
            journal.write(request, "e")

    manager.controller("gizmo").for_(gizmo).max_concurrent_reconciles(args.workers).build(reconcile)
    stats = asyncio.create_task(
        write_stats(manager, args.journal / f"{args.shard}.stats.json", args.stats_every, gizmo)
    )
    try:
        await manager.run()
    except LeaderElectionLost as exc:
        print(f"lost: {exc}", file=sys.stderr)
        return 3
    finally:
        stats.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stats
        await client.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
