"""The sharder's cost per object (issue 34): what it watches, and which updates it looks at.

The sharder decides by an object's metadata only (the shard and drain labels, the hand-over
record, the UID and the hash key), so it watches metadata-only; an update that left all of
that as it was (a status write, another label) queues nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.clock import ManualClock
from setpoint.api.keys import ObjectKey
from setpoint.api.metadata import PARTIAL_OBJECT_METADATA, Metadata
from setpoint.cache.store import Store
from setpoint.client import MergePatch
from setpoint.manager.sharder import Sharder, same_assignment
from setpoint.manager.sharding import (
    RING_LABEL,
    Handover,
    ShardingOptions,
    drain_label,
    handover_annotation,
    shard_label,
    shard_of,
)
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from tests._support.kinds import GIZMO, Gizmo
from tests._support.manager_fakes import advance

RING = "gizmos"
SHARDS = ("alpha", "beta")
N = 20


def lease(name: str) -> dict[str, Any]:
    """A live shard Lease held by ``name`` (renewed an hour ahead)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "default", "labels": {RING_LABEL: RING}},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 3600,
            "renewTime": "2026-01-01T00:00:00.000000Z",
        },
    }


def gizmo(name: str) -> dict[str, Any]:
    """An unlabelled Gizmo."""
    return {
        "apiVersion": GIZMO.api_version,
        "kind": GIZMO.kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"size": 1},
    }


def adds(metrics: Metrics) -> float:
    """The sharder's work queue adds so far (``workqueue_adds_total``)."""
    name = f"sharder-{RING}"
    value = metrics.registry.get_sample_value(
        "workqueue_adds_total", {"name": name, "controller": name}
    )
    return value or 0.0


def store_of(sharder: Sharder) -> Store:
    """The sharder's own store of Gizmos (its metadata-only informer's)."""
    cache = sharder._cache
    assert cache is not None
    return cache.informer(Metadata(GIZMO)).store


@asynccontextmanager
async def labelled_sharder(
    *, clock: ManualClock | None = None, resync_period: float = 60.0, lease_seconds: int = 3600
) -> AsyncIterator[tuple[FakeClient, Sharder, Metrics]]:
    """A sharder over ``N`` unlabelled Gizmos and the live ``SHARDS``, once all are labelled."""
    fake = FakeClient(resources=[Gizmo])
    for name in SHARDS:
        held = lease(name)
        held["spec"]["leaseDurationSeconds"] = lease_seconds
        await fake.create(held)
    for i in range(N):
        await fake.create(gizmo(f"g{i:02d}"))
    metrics = Metrics(CollectorRegistry())
    sharder = Sharder(
        fake,
        ShardingOptions(ring=RING, every_controller=True, resync_period=resync_period),
        namespace="default",
        kinds=[GIZMO],
        identity="test",
        metrics=metrics,
        clock=clock,
    )
    await sharder.start()
    try:

        async def labelled() -> bool:
            items = await fake.list(GIZMO, namespace="default")
            return all(shard_of(obj, RING) in SHARDS for obj in items)

        await eventually(labelled, description="every Gizmo labelled")
        yield fake, sharder, metrics
    finally:
        await sharder.stop(1.0)


@pytest.fixture
async def running() -> AsyncIterator[tuple[FakeClient, Sharder, Metrics]]:
    async with labelled_sharder() as started:
        yield started


async def test_the_sharder_watches_metadata_only(
    running: tuple[FakeClient, Sharder, Metrics],
) -> None:
    _, sharder, _ = running
    stored = store_of(sharder).get(ObjectKey("default", "g00"))
    assert stored is not None
    assert stored["kind"] == PARTIAL_OBJECT_METADATA
    assert "spec" not in stored
    assert shard_of(stored, RING) in SHARDS


async def test_a_status_write_queues_nothing_but_a_label_edit_does(
    running: tuple[FakeClient, Sharder, Metrics],
) -> None:
    fake, sharder, metrics = running
    store = store_of(sharder)

    async def seen(name: str, resource_version: str) -> bool:
        obj = store.get(ObjectKey("default", name))
        return obj is not None and obj["metadata"]["resourceVersion"] == resource_version

    before = adds(metrics)
    for i in range(N):
        name = f"g{i:02d}"
        patch = MergePatch({"status": {"phase": "busy"}, "metadata": {"labels": {"x": "y"}}})
        written = await fake.patch(GIZMO, name, patch, namespace="default")
        version = str(written["metadata"]["resourceVersion"])
        await eventually(partial(seen, name, version), description=f"{name} at {version}")
    assert adds(metrics) == before

    owner = shard_of(written, RING)
    other = next(s for s in SHARDS if s != owner)
    edit = MergePatch({"metadata": {"labels": {shard_label(RING): other}}})
    await fake.patch(GIZMO, written["metadata"]["name"], edit, namespace="default")

    async def restored() -> bool:
        obj = await fake.get(GIZMO, written["metadata"]["name"], namespace="default")
        return shard_of(obj, RING) == owner

    await eventually(restored, description="the edited label given back to its owner")
    assert adds(metrics) > before


def test_same_assignment_compares_what_next_step_reads() -> None:
    record = Handover("alpha", "u1", via="new").render()
    base: dict[str, Any] = {
        "metadata": {
            "uid": "u1",
            "labels": {shard_label(RING): "alpha", "app": "x"},
            "annotations": {handover_annotation(RING): record, "note": "a"},
        },
        "status": {"phase": "a"},
    }

    def changed(**metadata: Any) -> dict[str, Any]:
        new: dict[str, Any] = {"metadata": {**base["metadata"], **metadata}}
        return new

    assert same_assignment(base, changed(), RING)
    assert same_assignment(base, {**changed(), "status": {"phase": "b"}}, RING)
    assert same_assignment(base, changed(labels={shard_label(RING): "alpha"}), RING)
    assert same_assignment(
        base, changed(annotations={handover_annotation(RING): record, "note": "b"}), RING
    )
    assert not same_assignment(base, changed(labels={shard_label(RING): "beta"}), RING)
    assert not same_assignment(base, changed(labels={"app": "x"}), RING)
    drained = {shard_label(RING): "alpha", drain_label(RING): "true"}
    assert not same_assignment(base, changed(labels=drained), RING)
    assert not same_assignment(base, changed(annotations={}), RING)
    assert not same_assignment(base, changed(uid="u2"), RING)
    other_ring = {shard_label(RING): "alpha", shard_label("other"): "beta"}
    assert same_assignment(base, changed(labels=other_ring), RING)


async def test_the_periodic_pass_runs_on_the_sharders_clock() -> None:
    """The full pass every ``resync_period`` is timed by the sharder's clock, like its Lease
    expiry: a ManualClock advanced past it makes the sharder look at every object again at
    once, and one standing still never does (before, it slept on the event loop's time)."""
    clock = ManualClock()
    # Leases alive however far the clock goes here, and a pass due only on the clock.
    async with labelled_sharder(clock=clock, resync_period=3600.0, lease_seconds=10**6) as run:
        _, _, metrics = run
        before = adds(metrics)
        await advance(clock, 3000.0, step=600.0)
        assert adds(metrics) == before  # no pass before resync_period on the sharder's clock
        await advance(clock, 1200.0, step=600.0)
        await eventually(
            lambda: adds(metrics) >= before + N, description="a full pass over every Gizmo"
        )
