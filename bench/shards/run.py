"""Sharding at scale on a real local control plane (decision 0011): the big run and the benchmark.

Replicas are processes of the sharded test operator (tests/_support/shard_replica.py: ring
``gizmos``, one controller over the test kind Gizmo, every reconcile's start and end
journalled); the helpers around them are tests/_support/shard_cluster.py, the same ones the
CI test (tests/integration/sharding/) uses on a small N. Each command starts its own control
plane (etcd and kube-apiserver, no kube-controller-manager).

``scale`` (``make test-sharding-scale``): the acceptance run of issue 16, with checks.

1. N Gizmos (default 3,000) exist, unlabelled; three replicas start. Every object converges
   (labelled for a live shard and ``status.phase`` = that shard), and each replica caches
   exactly the objects labelled for it, about a third.
2. SIGKILL one replica that is not the leader: the first of its objects is reconciled by a
   survivor within ``lease_duration + retry_period`` of the kill, and all converge on the two.
3. A fourth replica joins: the ring rebalances through drains and all converge on three.
   Meanwhile (``--foreign``, default 60) the run relabels that many objects as a writer
   other than the sharder would, each while its owner reconciles it (issue 27, finding 5):
   to another live shard, or off.
4. The journals show no two replicas ever reconciling one object at the same time.

Exit code 1 if any check fails.

``bench`` (``make bench-sharding``): converge time and per-replica memory for 1, 2 and 3
replicas at N (default 6,000), each on a fresh control plane, plus one unsharded replica as
the baseline. N Gizmos exist before the replicas start; converge is from spawning them until
a watch has seen all N labelled for a live shard and reconciled by it. Also recorded: each
replica's peak RSS and CPU seconds, and kube-apiserver's and etcd's CPU seconds over the
same window, which shows how much of the machine the API server takes.

Both print a Markdown summary and write JSON to ``~/.cache/setpoint/bench/``::

    .venv/bin/python bench/shards/run.py scale [--n 3000]
    .venv/bin/python bench/shards/run.py bench [--n 6000] [--replicas 1,2,3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from _common import markdown_table, proc_stats, run_header

from setpoint import Client
from setpoint.api.meta import labels_of
from setpoint.client import load_kubeconfig
from setpoint.testing import ControlPlane, ControlPlaneOptions
from setpoint.testing.controlplane import cache_dir
from setpoint.testing.waits import eventually
from tests._support.kinds import CRDS
from tests._support.shard_cluster import (
    GIZMO,
    LABEL,
    ShardCluster,
    create_gizmos,
    overlaps,
)

NAMESPACE = "shards"
SHARDS = ("alpha", "beta", "gamma", "delta")


def log(message: str) -> None:
    """Progress on stderr, with the time, so a long run shows where it is."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Tracker:
    """Follows every Gizmo's shard label and ``status.phase`` through one list and a watch."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.state: dict[str, tuple[str, str]] = {}
        self.rv = ""
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @staticmethod
    def _entry(obj: dict[str, Any]) -> tuple[str, str]:
        phase = (obj.get("status") or {}).get("phase") or ""
        return labels_of(obj).get(LABEL, ""), str(phase)

    async def start(self) -> None:
        """List once, then follow the watch in the background."""
        listed = await self.client.list(GIZMO, namespace=self.namespace)
        self.state = {o["metadata"]["name"]: self._entry(o) for o in listed}
        self.rv = listed.resource_version
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            try:
                async with self.client.watch(
                    GIZMO, namespace=self.namespace, resource_version=self.rv, timeout_seconds=300
                ) as watch:
                    async for event in watch:
                        self.rv = event.resource_version or self.rv
                        name = event.object.get("metadata", {}).get("name")
                        if event.type in ("ADDED", "MODIFIED") and name:
                            self.state[name] = self._entry(event.object)
                        elif event.type == "DELETED" and name:
                            self.state.pop(name, None)
                        self._changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a closed watch or an expired rv: relist
                log(f"tracker: {type(exc).__name__}: {exc}; relisting")
                await asyncio.sleep(1)
                listed = await self.client.list(GIZMO, namespace=self.namespace)
                self.state = {o["metadata"]["name"]: self._entry(o) for o in listed}
                self.rv = listed.resource_version

    def converged(self, shards: set[str], n: int, *, labelled: bool = True) -> bool:
        """All ``n`` objects reconciled by a shard in ``shards`` (and labelled for it), each
        shard used."""
        if len(self.state) != n:
            return False
        used = set()
        for label, phase in self.state.values():
            if phase not in shards or (labelled and label != phase):
                return False
            used.add(phase)
        return used == shards

    def labelled(self, shards: set[str], n: int) -> bool:
        """All ``n`` objects labelled for a shard in ``shards`` (reconciled or not)."""
        return len(self.state) == n and all(lab in shards for lab, _ in self.state.values())

    async def wait_labelled(self, shards: set[str], n: int, timeout: float) -> float | None:
        """Wait until :meth:`labelled`; the wall-clock time it was seen, or ``None``."""
        deadline = time.monotonic() + timeout
        while not self.labelled(shards, n):
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.2)
        return time.time()

    def counts(self) -> dict[str, int]:
        """Objects per shard label (``""`` for unassigned)."""
        out: dict[str, int] = {}
        for label, _ in self.state.values():
            out[label] = out.get(label, 0) + 1
        return out

    async def wait(
        self, shards: set[str], n: int, timeout: float, *, labelled: bool = True
    ) -> float | None:
        """Wait until :meth:`converged`; the wall-clock time it was seen, or ``None``."""
        deadline = time.monotonic() + timeout
        while not self.converged(shards, n, labelled=labelled):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 5))
        return time.time()

    async def stop(self) -> None:
        """Stop following the watch."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def control_plane_pids() -> dict[str, int]:
    """The pids of this process's kube-apiserver and etcd children (read from /proc)."""
    me = os.getpid()
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text.rsplit(")", 1)[1].split()[1])
        if ppid == me and name in ("kube-apiserver", "etcd"):
            found[name] = int(entry)
    return found


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named pid."""
    return {name: proc_stats(pid).cpu_seconds for name, pid in pids.items()}


async def prepare(client: Client, n: int) -> float:
    """The namespace and ``n`` unlabelled Gizmos; returns the seconds the creates took."""
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    started = time.monotonic()
    await create_gizmos(client, NAMESPACE, n)
    return time.monotonic() - started


def new_plane() -> ControlPlane:
    """A fresh plane (default kube-apiserver flags) with the test CRDs installed."""
    return ControlPlane(
        ControlPlaneOptions(
            controller_manager=False,
            crds=CRDS,
        )
    )


# --------------------------------------------------------------------------- scale


async def scale_run(plane: ControlPlane, args: argparse.Namespace) -> dict[str, Any]:
    """The acceptance run; returns the measurements and a list of failed checks."""
    n = args.n
    lease, renew, retry = args.lease, args.renew, args.retry
    client = Client(load_kubeconfig(str(plane.kubeconfig_path)))
    failures: list[str] = []
    result: dict[str, Any] = {"n": n, "lease": [lease, renew, retry], "failures": failures}
    with tempfile.TemporaryDirectory(prefix="setpoint-shards-") as tmp:
        cluster = ShardCluster(
            Path(tmp), plane.kubeconfig_path, NAMESPACE, (lease, renew, retry), workers=4
        )
        tracker = Tracker(client, NAMESPACE)
        try:
            result["create_seconds"] = await prepare(client, n)
            log(f"created {n} Gizmos in {result['create_seconds']:.1f}s")
            await tracker.start()
            first = {"alpha", "beta", "gamma"}
            spawned = time.time()
            for shard in sorted(first):
                cluster.spawn(shard)
            done = await tracker.wait(first, n, args.timeout)
            if done is None:
                failures.append(f"{n} objects did not converge on 3 replicas: {tracker.counts()}")
                return result
            result["converge_seconds"] = done - spawned
            counts = tracker.counts()
            result["per_shard"] = counts
            log(f"converged on 3 replicas in {done - spawned:.1f}s: {counts}")

            # Each replica's cache holds exactly its share.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all(cluster.stats(s).get("cached") == counts.get(s) for s in first):
                    break
                await asyncio.sleep(0.5)
            cached = {s: cluster.stats(s).get("cached") for s in sorted(first)}
            result["cached"] = cached
            result["rss_mib"] = {s: cluster.stats(s).get("peak_rss_mib") for s in sorted(first)}
            for shard in sorted(first):
                if cached[shard] != counts.get(shard):
                    failures.append(f"{shard} caches {cached[shard]}, owns {counts.get(shard)}")
                if not 0.2 * n <= counts.get(shard, 0) <= 0.47 * n:
                    failures.append(f"{shard} owns {counts.get(shard)} of {n}: not about a third")

            # SIGKILL a replica that does not lead (the leader runs the sharder).
            leader = next((s for s in sorted(first) if cluster.stats(s).get("leader")), "")
            result["leader"] = leader
            victim = next(s for s in sorted(first) if s != leader)
            survivors = first - {victim}
            theirs = {
                f"{NAMESPACE}/{name}" for name, (lab, _) in tracker.state.items() if lab == victim
            }
            killed_at = cluster.kill(victim)
            log(f"SIGKILLed {victim} ({len(theirs)} objects); leader is {leader}")
            done = await tracker.wait(survivors, n, args.timeout)
            if done is None:
                failures.append(f"{victim}'s objects were not taken over: {tracker.counts()}")
                return result
            taken = [
                i.start
                for i in cluster.intervals()
                if i.shard in survivors and i.key in theirs and i.start > killed_at
            ]
            takeover = min(taken) - killed_at if taken else math.inf
            result["takeover_seconds"] = takeover
            result["takeover_converge_seconds"] = done - killed_at
            log(
                f"first takeover reconcile {takeover:.2f}s after the kill; all in "
                f"{done - killed_at:.1f}s"
            )
            if takeover > lease + retry:
                failures.append(f"takeover took {takeover:.2f}s > lease {lease}s + retry {retry}s")

            # A fourth replica joins; foreign relabels while it rebalances.
            joined = time.time()
            cluster.spawn("delta")
            final = survivors | {"delta"}
            if args.foreign:
                await eventually(
                    lambda: bool(cluster.stats("delta").get("holding")),
                    timeout=60,
                    description="delta holds its shard Lease",
                )
                started = time.monotonic()
                caught = await cluster.foreign_relabels(client, sorted(final), args.foreign)
                result["foreign_relabels"] = [args.foreign, caught]
                result["foreign_seconds"] = time.monotonic() - started
                log(f"{args.foreign} foreign relabels, {caught} of them mid-reconcile")
            done = await tracker.wait(final, n, args.timeout)
            if done is None:
                failures.append(f"delta's join did not converge: {tracker.counts()}")
                return result
            result["rebalance_seconds"] = done - joined
            counts = tracker.counts()
            result["per_shard_after"] = counts
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all(cluster.stats(s).get("cached") == counts.get(s) for s in final):
                    break
                await asyncio.sleep(0.5)
            cached = {s: cluster.stats(s).get("cached") for s in sorted(final)}
            result["cached_after"] = cached
            for shard in sorted(final):
                if cached[shard] != counts.get(shard):
                    failures.append(f"{shard} caches {cached[shard]}, owns {counts.get(shard)}")
                if not 0.2 * n <= counts.get(shard, 0) <= 0.47 * n:
                    failures.append(f"{shard} owns {counts.get(shard)} of {n} after the join")
            log(f"rebalanced onto {sorted(final)} in {done - joined:.1f}s: {tracker.counts()}")

            intervals = cluster.intervals()
            problems = overlaps(intervals)
            result["reconciles"] = len(intervals)
            result["overlaps"] = problems[:20]
            if problems:
                failures.append(f"{len(problems)} overlapping reconciles, e.g. {problems[0]}")
            log(f"{len(intervals)} reconciles journalled, {len(problems)} overlaps")
        finally:
            await tracker.stop()
            cluster.close()
            await client.close()
    return result


def scale_main(args: argparse.Namespace) -> int:
    """``scale``: run, print, record; 1 on a failed check."""
    with new_plane() as plane:
        result = asyncio.run(scale_run(plane, args))
    rows = [
        ["create N objects", f"{result.get('create_seconds', 0):.1f} s"],
        ["converge on 3 replicas", _s(result.get("converge_seconds"))],
        ["objects per shard", json.dumps(result.get("per_shard"))],
        ["cached per replica", json.dumps(result.get("cached"))],
        ["peak RSS per replica (MiB)", json.dumps(result.get("rss_mib"))],
        ["SIGKILL to first takeover reconcile", _s(result.get("takeover_seconds"))],
        ["SIGKILL to all converged on 2", _s(result.get("takeover_converge_seconds"))],
        ["join to all converged on 3", _s(result.get("rebalance_seconds"))],
        [
            "foreign relabels during the join (mid-reconcile)",
            "{} ({}), one at a time, in {}".format(
                *result.get("foreign_relabels", ["-", "-"]), _s(result.get("foreign_seconds"))
            ),
        ],
        ["objects per shard after", json.dumps(result.get("per_shard_after"))],
        ["cached per replica after", json.dumps(result.get("cached_after"))],
        ["reconciles journalled", str(result.get("reconciles", "-"))],
        ["overlapping reconciles", str(len(result.get("overlaps", [])))],
    ]
    print(run_header())
    print(
        f"- N = {args.n}; lease {args.lease} s, renew deadline {args.renew} s, "
        f"retry {args.retry} s; 4 workers per replica"
    )
    print(markdown_table(["step", "result"], rows))
    _save("shards-scale", result)
    if result["failures"]:
        print("\nFAILED:\n" + "\n".join(f"- {f}" for f in result["failures"]))
        return 1
    print("\nall checks passed")
    return 0


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _save(name: str, result: Any) -> None:
    out = cache_dir() / "bench" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nJSON: {out}", file=sys.stderr)


# --------------------------------------------------------------------------- bench


async def bench_one(
    plane: ControlPlane,
    n: int,
    replicas: int,
    sharded: bool,
    timeout: float,
    *,
    sharder_workers: int = 8,
) -> dict[str, Any]:
    """One row: ``replicas`` replicas converging ``n`` pre-existing Gizmos on a fresh plane."""
    client = Client(load_kubeconfig(str(plane.kubeconfig_path)))
    result: dict[str, Any] = {
        "replicas": replicas,
        "sharded": sharded,
        "n": n,
        "sharder_workers": sharder_workers,
    }
    with tempfile.TemporaryDirectory(prefix="setpoint-shards-") as tmp:
        cluster = ShardCluster(
            Path(tmp),
            plane.kubeconfig_path,
            NAMESPACE,
            (15.0, 10.0, 2.0),
            sharding=sharded,
            sharder_workers=sharder_workers,
        )
        tracker = Tracker(client, NAMESPACE)
        try:
            result["create_seconds"] = await prepare(client, n)
            await tracker.start()
            pids = control_plane_pids()
            before = cpu_of(pids)
            shards = set(SHARDS[:replicas])
            spawned = time.time()
            for shard in sorted(shards):
                cluster.spawn(shard)
            labelling = asyncio.create_task(tracker.wait_labelled(shards, n, timeout))
            done = await tracker.wait(shards, n, timeout, labelled=sharded)
            after = cpu_of(pids)
            all_labelled = await labelling if sharded else None
            if not sharded:
                labelling.cancel()
            if all_labelled is not None:
                result["labelled_seconds"] = all_labelled - spawned
            if done is None:
                result["error"] = f"no convergence in {timeout}s: {tracker.counts()}"
                return result
            seconds = done - spawned
            result["converge_seconds"] = seconds
            per: dict[str, Any] = {}
            for shard in sorted(shards):
                stats = proc_stats(cluster.replicas[shard].process.pid)
                per[shard] = {
                    "objects": tracker.counts().get(shard, 0) if sharded else n,
                    "cached": cluster.stats(shard).get("cached"),
                    "leader": cluster.stats(shard).get("leader"),
                    "peak_rss_mib": round(stats.peak_rss_mib, 1),
                    "cpu_seconds": round(stats.cpu_seconds, 1),
                }
            result["per_replica"] = per
            result["server_cpu_seconds"] = {
                name: round(after[name] - before.get(name, 0.0), 1) for name in after
            }
            result["intervals"] = len(cluster.intervals())
            result["overlaps"] = len(overlaps(cluster.intervals()))
            log(
                f"{replicas} replica(s){'' if sharded else ' unsharded'}: {seconds:.1f}s, "
                f"server CPU {result['server_cpu_seconds']}, replicas {per}"
            )
        finally:
            await tracker.stop()
            cluster.close()
            await client.close()
    return result


def bench_main(args: argparse.Namespace) -> int:
    """``bench``: each configuration on a fresh plane; print the table, record the JSON."""
    configs: list[tuple[int, bool]] = []
    if args.baseline:
        configs.append((1, False))
    configs += [(int(r), True) for r in args.replicas.split(",")]
    results = []
    for replicas, sharded in configs:
        with new_plane() as plane:
            load = os.getloadavg()[0]
            result = asyncio.run(
                bench_one(
                    plane,
                    args.n,
                    replicas,
                    sharded,
                    args.timeout,
                    sharder_workers=args.sharder_workers,
                )
            )
            result["loadavg_1m_before"] = round(load, 2)
            result["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
            results.append(result)
    print(run_header())
    print(
        f"- N = {args.n} Gizmos, created before the replicas start; 4 workers per replica; "
        f"sharder_workers {args.sharder_workers}"
    )
    print(markdown_table(*bench_table(results)))
    _save("shards-bench", results)
    return 0 if all("error" not in r for r in results) else 1


def bench_table(results: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The Markdown table of :func:`bench_main`."""
    headers = [
        "replicas",
        "converge (s)",
        "objects/s",
        "objects per replica",
        "peak RSS per replica (MiB)",
        "replica CPU (s)",
        "kube-apiserver CPU (s)",
        "etcd CPU (s)",
        "server cores busy",
        "CPU ms/object: server, replicas",
        "load 1m",
    ]
    rows = []
    for r in results:
        name = f"{r['replicas']}" + ("" if r["sharded"] else " (unsharded)")
        if "error" in r:
            rows.append([name, r["error"]] + [""] * (len(headers) - 2))
            continue
        seconds = r["converge_seconds"]
        per = r["per_replica"]
        server = r["server_cpu_seconds"]
        server_cpu = server.get("kube-apiserver", 0) + server.get("etcd", 0)
        replica_cpu = sum(p["cpu_seconds"] for p in per.values())
        busy = server_cpu / seconds
        rows.append(
            [
                name,
                f"{seconds:.1f}",
                f"{r['n'] / seconds:.0f}",
                " / ".join(str(p["objects"]) for p in per.values()),
                " / ".join(
                    f"{p['peak_rss_mib']:.0f}{'*' if p['leader'] else ''}" for p in per.values()
                ),
                " / ".join(f"{p['cpu_seconds']:.0f}" for p in per.values()),
                f"{server.get('kube-apiserver', 0):.0f}",
                f"{server.get('etcd', 0):.0f}",
                f"{busy:.2f}",
                f"{1000 * server_cpu / r['n']:.1f}, {1000 * replica_cpu / r['n']:.1f}",
                f"{r['loadavg_1m_before']:.1f} / {r['loadavg_1m_after']:.1f}",
            ]
        )
    return headers, rows


def main() -> int:
    """Parse the command line and run ``scale`` or ``bench``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    scale = sub.add_parser("scale", help="3 replicas, N objects, a SIGKILL, a join, with checks")
    scale.add_argument("--n", type=int, default=3000)
    scale.add_argument("--lease", type=float, default=8.0, help="lease duration (s)")
    scale.add_argument("--renew", type=float, default=6.0, help="renew deadline (s)")
    scale.add_argument("--retry", type=float, default=2.0, help="retry period (s)")
    scale.add_argument("--timeout", type=float, default=600.0, help="per step (s)")
    scale.add_argument(
        "--foreign",
        type=int,
        default=60,
        help="objects relabelled by a foreign writer during the join, each mid-reconcile",
    )
    bench = sub.add_parser("bench", help="converge time and memory for 1, 2, 3 replicas")
    bench.add_argument("--n", type=int, default=6000)
    bench.add_argument("--replicas", default="1,2,3")
    bench.add_argument("--timeout", type=float, default=900.0)
    bench.add_argument(
        "--sharder-workers", type=int, default=8, help="ShardingOptions.sharder_workers"
    )
    bench.add_argument(
        "--no-baseline", dest="baseline", action="store_false", help="skip the unsharded row"
    )
    args = parser.parse_args()
    return scale_main(args) if args.command == "scale" else bench_main(args)


if __name__ == "__main__":
    sys.exit(main())
