"""Replica processes of the sharded test operator, their journals, and the overlap check.

Used by tests/integration/sharding/ and bench/shards/run.py. Each replica is
``shard_replica.py`` run with ``sys.executable``; see that module for what it records.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import labels_of
from setpoint.client.patch import MergePatch
from setpoint.manager.sharding import drain_label, shard_label

SCRIPT = Path(__file__).with_name("shard_replica.py")
GIZMO = GroupVersionKind("test.setpoint.dev", "v1", "Gizmo")
RING = "gizmos"
LABEL = shard_label(RING)
DRAIN = drain_label(RING)
WORK = "test.setpoint.dev/work"
"""Annotation ``"<seconds>#<nonce>"``: each reconcile of that Gizmo takes that long
(shard_replica.py); a new nonce makes its owner reconcile it again."""


@dataclass(frozen=True)
class Interval:
    """One reconcile of one key by one shard; ``end`` is ``inf`` when it never ended."""

    shard: str
    key: str
    start: float
    end: float


@dataclass
class Replica:
    """A running (or ended) replica process."""

    shard: str
    process: subprocess.Popen[bytes]
    started: float
    killed_at: float | None = None


@dataclass
class ShardCluster:
    """Replica processes sharing one journal directory; all are killed by :meth:`close`."""

    directory: Path
    kubeconfig: Path
    namespace: str
    timings: tuple[float, float, float] = (4.0, 3.0, 1.0)
    workers: int = 4
    work: float = 0.0
    sharding: bool = True
    sharder_workers: int = 8
    replicas: dict[str, Replica] = field(default_factory=dict)

    def spawn(self, shard: str) -> Replica:
        """Start replica ``shard`` (its output goes to ``<dir>/<shard>.log``)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lease, renew, retry = self.timings
        output = (self.directory / f"{shard}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--kubeconfig",
                str(self.kubeconfig),
                "--namespace",
                self.namespace,
                "--shard",
                shard,
                "--journal",
                str(self.directory),
                "--lease-duration",
                str(lease),
                "--renew-deadline",
                str(renew),
                "--retry-period",
                str(retry),
                "--workers",
                str(self.workers),
                "--work",
                str(self.work),
                "--sharder-workers",
                str(self.sharder_workers),
                *(() if self.sharding else ("--no-sharding",)),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        replica = Replica(shard, process, time.time())
        self.replicas[shard] = replica
        return replica

    def kill(self, shard: str) -> float:
        """SIGKILL ``shard``; returns the wall-clock time of the kill."""
        replica = self.replicas[shard]
        replica.killed_at = time.time()
        os.kill(replica.process.pid, signal.SIGKILL)
        replica.process.wait(timeout=30)
        return replica.killed_at

    def terminate(self, shard: str, timeout: float = 30) -> int:
        """SIGTERM ``shard`` and wait for its clean exit; returns the exit code."""
        replica = self.replicas[shard]
        replica.process.terminate()
        return replica.process.wait(timeout=timeout)

    def alive(self) -> list[str]:
        """Shards whose process is still running."""
        return [s for s, r in self.replicas.items() if r.process.poll() is None]

    def stats(self, shard: str) -> dict[str, Any]:
        """The replica's latest stats file (``{}`` before the first)."""
        path = self.directory / f"{shard}.stats.json"
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data

    def log_tail(self, shard: str, chars: int = 3000) -> str:
        """The end of a replica's output, for failure messages."""
        path = self.directory / f"{shard}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def intervals(self) -> list[Interval]:
        """Every reconcile in the journals; one without an end ends at its replica's kill time
        (or never, if the replica still runs)."""
        found: list[Interval] = []
        for shard, replica in self.replicas.items():
            path = self.directory / f"{shard}.jsonl"
            if not path.exists():
                continue
            open_at: dict[str, float] = {}
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                record = json.loads(line)
                if record["a"] == "b":
                    open_at[record["k"]] = record["t"]
                else:
                    start = open_at.pop(record["k"], None)
                    if start is not None:
                        found.append(Interval(shard, record["k"], start, record["t"]))
            end = replica.killed_at if replica.killed_at is not None else math.inf
            found.extend(Interval(shard, key, start, end) for key, start in open_at.items())
        return found

    def reconciling(self, shard: str, key: str, since: float) -> bool:
        """Whether ``shard`` is reconciling ``key`` (its journal says so), begun after ``since``."""
        path = self.directory / f"{shard}.jsonl"
        if not path.exists():
            return False
        last = None
        for line in path.read_text().splitlines():
            if f'"k":"{key}"' in line:
                last = json.loads(line)
        return last is not None and last["a"] == "b" and last["t"] >= since

    async def relabel_mid_reconcile(
        self,
        client: Any,
        name: str,
        owner: str,
        to: str | None,
        *,
        work: float = 0.5,
        timeout: float = 10.0,
    ) -> bool:
        """Relabel a Gizmo as someone other than the sharder would, mid-reconcile by its owner.

        Sets the Gizmo's work annotation (a new nonce, so ``owner`` reconciles it again,
        taking ``work`` seconds), waits until ``owner``'s journal shows that reconcile
        running, then sets the shard label to ``to`` (``None`` removes it) with a merge patch
        without a resourceVersion, as ``kubectl label --overwrite`` does. Returns whether
        the relabel was sent while the reconcile ran (``False``: the owner did not start one
        within ``timeout``; the label is changed anyway).
        """
        since = time.time()
        poke = MergePatch({"metadata": {"annotations": {WORK: f"{work}#{time.monotonic_ns()}"}}})
        await client.patch(GIZMO, name, poke, namespace=self.namespace)
        deadline = time.monotonic() + timeout
        caught = False
        while time.monotonic() < deadline:
            if self.reconciling(owner, f"{self.namespace}/{name}", since):
                caught = True
                break
            await asyncio.sleep(0.02)
        relabel = MergePatch({"metadata": {"labels": {LABEL: to}}})
        await client.patch(GIZMO, name, relabel, namespace=self.namespace)
        return caught

    async def foreign_relabels(
        self,
        client: Any,
        shards: list[str],
        count: int,
        *,
        off: bool = True,
        wait: float = 5.0,
    ) -> int:
        """Relabel ``count`` Gizmos of ``shards``, one at a time, each mid-reconcile.

        Objects being drained are left out. Each goes to another shard of ``shards`` (live or
        not), or, every third one when ``off``, loses its label (:meth:`relabel_mid_reconcile`).
        ``wait``: how long to wait for the owner's reconcile (0 for a killed owner). Returns
        how many relabels landed mid-reconcile.
        """
        # Objects being drained are not reconciled by their owner: not worth waiting for.
        listed = await client.list(GIZMO, namespace=self.namespace, labels=f"!{DRAIN}")
        labelled = ((o["metadata"]["name"], labels_of(o).get(LABEL, "")) for o in listed)
        owned = sorted((name, label) for name, label in labelled if label in shards)
        picked = owned[:: max(1, len(owned) // max(count, 1))][:count]
        caught = 0
        for i, (name, owner) in enumerate(picked):
            others = [s for s in shards if s != owner]
            to = None if off and i % 3 == 0 else others[i % len(others)]
            caught += await self.relabel_mid_reconcile(client, name, owner, to, timeout=wait)
            # One at a time, so the new label's shard has an idle worker at once: one slow
            # reconcile per 0.2 s keeps a replica's workers from filling up.
            await asyncio.sleep(0.2)
        return caught

    def close(self) -> None:
        """Kill every replica still running."""
        for replica in self.replicas.values():
            if replica.process.poll() is None:
                replica.process.kill()
            replica.process.wait(timeout=30)


def overlaps(intervals: list[Interval]) -> list[str]:
    """Pairs of reconciles of one key, by different shards, whose intervals intersect.

    Also reports two overlapping reconciles of one key in one shard (the work queue's
    exclusivity, checked on the way).
    """
    by_key: dict[str, list[Interval]] = defaultdict(list)
    for interval in intervals:
        by_key[interval.key].append(interval)
    problems = []
    for key, items in by_key.items():
        items.sort(key=lambda i: i.start)
        latest = items[0]
        for item in items[1:]:
            if item.start < latest.end:
                problems.append(
                    f"{key}: {latest.shard} [{latest.start:.3f}, {latest.end:.3f}] and "
                    f"{item.shard} [{item.start:.3f}, {item.end:.3f}]"
                )
            if item.end > latest.end:
                latest = item
    return problems


async def create_gizmos(client: Any, namespace: str, n: int, *, concurrency: int = 16) -> None:
    """Create Gizmos ``g00000``... in ``namespace`` (unlabelled: the sharder assigns them)."""
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limit:
            await client.create(
                {
                    "apiVersion": GIZMO.api_version,
                    "kind": GIZMO.kind,
                    "metadata": {"name": f"g{i:05d}", "namespace": namespace},
                    "spec": {"size": i},
                }
            )

    await asyncio.gather(*(one(i) for i in range(n)))


async def assignment(client: Any, namespace: str) -> dict[str, tuple[str, str]]:
    """``name -> (shard label, status.phase)`` for every Gizmo in ``namespace``."""
    items = await client.list(GIZMO, namespace=namespace)
    return {
        obj["metadata"]["name"]: (
            labels_of(obj).get(LABEL, ""),
            str((obj.get("status") or {}).get("phase") or ""),
        )
        for obj in items
    }


def converged(state: dict[str, tuple[str, str]], shards: set[str], n: int) -> bool:
    """All ``n`` objects labelled for one of ``shards`` (each used) and reconciled by it."""
    if len(state) != n:
        return False
    used = set()
    for label, phase in state.values():
        if label not in shards or phase != label:
            return False
        used.add(label)
    return used == shards
