"""Sharding end to end in one process: managers sharing a FakeClient, as replicas would.

Each manager is a replica with its own cache; the leader's sharder assigns. The real control
plane versions (separate processes, SIGKILL) are in tests/integration/sharding/.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.keys import ObjectKey
from setpoint.api.meta import labels_of
from setpoint.client import MergePatch, NotFound
from setpoint.controller import Builder, Context
from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions, ManagerStateError
from setpoint.manager.sharding import ShardingOptions, shard_label
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from tests._support.kinds import GIZMO, Gizmo
from tests._support.manager_fakes import FakeHttpServer

RING = "gizmos"
LABEL = shard_label(RING)
WORK = "test.setpoint.dev/work"
"""Annotation: seconds each reconcile of that Gizmo takes (so a test can catch one mid-way)."""
TIMINGS: dict[str, Any] = {"lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.5}

Interval = tuple[str, ObjectKey, int, int]
"""Shard, key, and the steps (in the order things happened) a reconcile began and ended at."""


class Replicas:
    """Managers on one fake API server, each recording its reconciles' start and end.

    Starts and ends are numbered in the order they happen (one event loop: a total order),
    not timed: two reconciles overlap when one starts before the other has ended.
    """

    def __init__(self, fake: FakeClient) -> None:
        self.fake = fake
        self.intervals: list[Interval] = []
        self.steps = itertools.count()
        self.running: dict[str, tuple[Manager, asyncio.Task[None]]] = {}
        self.reconciling: dict[ObjectKey, str] = {}
        """Keys being reconciled right now, and by which shard."""

    def start(self, shard: str) -> Manager:
        manager = Manager(
            self.fake,
            ManagerOptions(
                metrics=Metrics(CollectorRegistry()),
                new_http_server=FakeHttpServer,
                handle_signals=False,
                failure_check_interval=0.05,
                graceful_shutdown_timeout=5.0,
                leader_election=LeaderElectionOptions(
                    name="gizmo-operator",
                    namespace="default",
                    identity=shard,
                    release_on_cancel=True,
                    **TIMINGS,
                ),
                sharding=ShardingOptions(
                    ring=RING,
                    controllers=("gizmo",),
                    shard_id=shard,
                    namespace="default",
                    resync_period=5.0,
                    **TIMINGS,
                ),
            ),
        )
        intervals, reconciling, steps = self.intervals, self.reconciling, self.steps

        async def reconcile(ctx: Context, request: ObjectKey) -> None:
            started = next(steps)
            reconciling[request] = shard
            try:
                try:
                    obj = await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
                except NotFound:
                    return
                annotations = obj["metadata"].get("annotations") or {}
                await asyncio.sleep(float(annotations.get(WORK, 0.005)))
                patch = MergePatch({"status": {"phase": shard}})
                await ctx.client.patch(
                    GIZMO, request.name, patch, namespace=request.namespace, subresource="status"
                )
            finally:
                reconciling.pop(request, None)
                intervals.append((shard, request, started, next(steps)))

        manager.controller("gizmo").for_(GIZMO).max_concurrent_reconciles(4).build(reconcile)
        self.running[shard] = (manager, asyncio.create_task(manager.run()))
        return manager

    async def stop(self, shard: str) -> None:
        manager, task = self.running.pop(shard)
        manager.stop()
        await asyncio.wait_for(task, 10)

    async def close(self) -> None:
        for manager, task in self.running.values():
            manager.stop()
            await asyncio.gather(task, return_exceptions=True)

    def cached(self, shard: str) -> set[ObjectKey]:
        manager, _ = self.running[shard]
        return set(manager.cache.informer(GIZMO).store.keys())

    async def converged(self, shards: set[str], n: int) -> bool:
        """Every object labelled for one of ``shards`` (each has some), status written by it."""
        items = list(await self.fake.list(GIZMO, namespace="default"))
        if len(items) != n:
            return False
        used = set()
        for obj in items:
            shard = labels_of(obj).get(LABEL)
            if shard not in shards or (obj.get("status") or {}).get("phase") != shard:
                return False
            used.add(shard)
        caches = [self.cached(s) for s in shards]
        return used == shards and sum(len(c) for c in caches) == n

    def overlaps(self) -> list[str]:
        """Reconciles of one key by two shards whose [start, end] intervals intersect."""
        by_key: dict[ObjectKey, list[Interval]] = defaultdict(list)
        for record in self.intervals:
            by_key[record[1]].append(record)
        found = []
        for key, records in by_key.items():
            records.sort(key=lambda r: r[2])
            for a, b in itertools.pairwise(records):
                if a[0] != b[0] and b[2] < a[3]:
                    found.append(f"{key}: {a[0]} until step {a[3]}, {b[0]} from step {b[2]}")
        return found


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    made = Replicas(FakeClient(resources=[Gizmo]))
    yield made
    await made.close()


async def create_gizmos(fake: FakeClient, n: int) -> None:
    for i in range(n):
        await fake.create(
            {
                "apiVersion": GIZMO.api_version,
                "kind": "Gizmo",
                "metadata": {"name": f"g{i:03d}", "namespace": "default"},
                "spec": {"size": i},
            }
        )


def waiter(replicas: Replicas, shards: set[str], n: int) -> Callable[[], Any]:
    return lambda: replicas.converged(shards, n)


async def test_replicas_split_the_objects_rebalance_and_never_overlap(
    replicas: Replicas,
) -> None:
    """Two replicas split 60 objects; a third joins (drain, then reassign); one leaves cleanly.

    After each step every object is labelled for a live shard, its status was written by
    that shard, each replica's cache holds exactly its own objects (together all of them),
    and no two replicas ever reconciled one object at overlapping times.
    """
    n = 60
    await create_gizmos(replicas.fake, n)
    replicas.start("alpha")
    replicas.start("beta")
    await eventually(waiter(replicas, {"alpha", "beta"}, n), timeout=30, description="2 shards")
    alpha, beta = replicas.cached("alpha"), replicas.cached("beta")
    assert alpha and beta and not alpha & beta and len(alpha | beta) == n

    replicas.start("gamma")
    await eventually(
        waiter(replicas, {"alpha", "beta", "gamma"}, n), timeout=30, description="3 shards"
    )
    assert replicas.cached("gamma"), "the new replica took over some objects"
    sharder = next(m for m, _ in replicas.running.values() if m.is_leader).metrics.value(
        "setpoint_shard_handover_seconds_count", ring=RING, reason="drain"
    )
    assert sharder > 0, "objects moved to the new shard through drains"

    await replicas.stop("beta")
    await eventually(waiter(replicas, {"alpha", "gamma"}, n), timeout=30, description="beta left")
    assert replicas.overlaps() == []
    assert {r[0] for r in replicas.intervals} == {"alpha", "beta", "gamma"}


async def test_a_foreign_relabel_mid_reconcile_never_gives_an_object_two_replicas(
    replicas: Replicas,
) -> None:
    """Issue 27, finding 5: someone other than the sharder edits the shard label.

    While an object's owner is in the middle of reconciling it, another writer (a user, a
    GitOps tool) relabels it for the other live shard, or removes its label. The object
    leaves the owner's cache at once, but its reconcile goes on: the new label's shard must
    not start one before the owner's has ended. Everything still converges (the sharder
    repairs the labels) and the reconcile intervals of the two replicas never intersect.
    """
    n = 12
    await create_gizmos(replicas.fake, n)
    replicas.start("alpha")
    replicas.start("beta")
    await eventually(waiter(replicas, {"alpha", "beta"}, n), timeout=30, description="2 shards")
    for i, obj in enumerate(list(await replicas.fake.list(GIZMO, namespace="default"))):
        key = ObjectKey("default", obj["metadata"]["name"])
        owner = labels_of(obj)[LABEL]
        other = "beta" if owner == "alpha" else "alpha"
        # A slow reconcile by the owner, then the foreign edit while it runs.
        await replicas.fake.patch(
            GIZMO,
            key.name,
            MergePatch({"metadata": {"annotations": {WORK: "0.3"}}}),
            namespace="default",
        )
        await eventually(
            lambda k=key, o=owner: replicas.reconciling.get(k) == o,  # type: ignore[misc]
            timeout=10,
            description=f"{owner} reconciles {key}",
        )
        relabel = other if i % 3 else None  # to the other live shard, or no shard at all
        await replicas.fake.patch(
            GIZMO,
            key.name,
            MergePatch({"metadata": {"labels": {LABEL: relabel}}}),
            namespace="default",
        )
    await eventually(
        waiter(replicas, {"alpha", "beta"}, n), timeout=30, description="repaired and converged"
    )
    assert replicas.overlaps() == []


async def test_a_sharded_controller_must_be_built_before_run(replicas: Replicas) -> None:
    """Adding a sharded controller to a running manager is refused with the reason."""
    manager = replicas.start("alpha")
    await manager.wait_elected(timeout=10)

    async def reconcile(ctx: Context, request: ObjectKey) -> None:
        return None

    late = Builder("gizmo").for_(GIZMO).build(reconcile, client=replicas.fake, cache=manager.cache)
    with pytest.raises(ManagerStateError, match="narrowed to this shard before it starts"):
        manager.add(late)


async def test_a_named_controller_that_was_never_added_fails_the_start() -> None:
    """ShardingOptions.controllers naming a missing controller fails run() with its name."""
    manager = Manager(
        FakeClient(resources=[Gizmo]),
        ManagerOptions(
            metrics=Metrics(CollectorRegistry()),
            new_http_server=FakeHttpServer,
            handle_signals=False,
            leader_election=LeaderElectionOptions(name="le", namespace="default", **TIMINGS),
            sharding=ShardingOptions(ring=RING, controllers=("missing",), **TIMINGS),
        ),
    )
    with pytest.raises(ValueError, match="names 'missing', but no controller of that name"):
        await asyncio.wait_for(manager.run(), 10)
