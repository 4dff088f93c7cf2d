"""Multi-cluster managers with fake member clusters: requests name their cluster, members join
and leave at runtime, and an unreachable member degrades only itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.client import ConnectionFailed, MergePatch, NotFound
from setpoint.controller import ClusterRequest, Context
from setpoint.manager import ClusterSetOptions, Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient
from setpoint.testing.waits import eventually
from tests._support.kinds import GIZMO, Gizmo
from tests._support.manager_fakes import FakeHttpServer


def gizmo(name: str) -> dict[str, Any]:
    return {
        "apiVersion": GIZMO.api_version,
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": "default"},
    }


async def phase(client: FakeClient, name: str) -> str | None:
    try:
        obj = await client.get(GIZMO, name, namespace="default")
    except NotFound:
        return None
    return (obj.get("status") or {}).get("phase")


class Fleet:
    """A manager on a fake home cluster whose multi-cluster controller records its requests."""

    def __init__(self) -> None:
        self.home = FakeClient()
        self.metrics = Metrics(CollectorRegistry())
        self.manager = Manager(
            self.home,
            ManagerOptions(
                metrics=self.metrics,
                new_http_server=FakeHttpServer,
                handle_signals=False,
                failure_check_interval=0.05,
                graceful_shutdown_timeout=5.0,
                clusters=ClusterSetOptions(
                    sync_timeout=0.5, probe_period=0.2, probe_timeout=0.1, backoff_max=0.3
                ),
            ),
        )
        self.requests: list[tuple[ClusterRequest, str | None]] = []

        async def reconcile(ctx: Context, request: ClusterRequest) -> None:
            self.requests.append((request, ctx.cluster))
            try:
                await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
            except NotFound:
                return
            patch = MergePatch({"status": {"phase": request.cluster}})
            await ctx.client.patch(
                GIZMO, request.name, patch, namespace=request.namespace, subresource="status"
            )

        self.manager.clusters.controller("gizmo").for_(GIZMO).build(reconcile)
        self.task: asyncio.Task[None] | None = None

    def run(self) -> None:
        self.task = asyncio.create_task(self.manager.run())

    async def close(self) -> None:
        self.manager.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, 10)


@pytest.fixture
async def fleet() -> AsyncIterator[Fleet]:
    made = Fleet()
    yield made
    await made.close()


async def test_members_converge_one_unreachable_member_degrades_only_itself(fleet: Fleet) -> None:
    """Two members, one unreachable: the other converges; the bad one recovers when it can.

    The reconcile of each object receives a ClusterRequest naming its cluster, and ctx.cluster
    agrees; objects with the same name in two clusters are two requests. The unreachable
    member is reported not ready (setpoint_cluster_ready 0) with its error, the manager keeps
    running, and once its API answers again it syncs and converges too.
    """
    east = FakeClient(resources=[Gizmo], objects=[gizmo("a")])
    west = FakeClient(resources=[Gizmo], objects=[gizmo("a")])
    west.faults.fail_next("*", times=None, error=ConnectionFailed)
    clusters = fleet.manager.clusters
    clusters.add("east", client=east)
    clusters.add("west", client=west)
    fleet.run()

    await eventually(lambda: phase(east, "a"), timeout=10, description="east converges")
    assert await phase(east, "a") == "east"
    await eventually(
        lambda: clusters.members["west"].attempts >= 2, timeout=10, description="west retried"
    )
    status = clusters.members["west"]
    assert not status.ready and "ConnectionFailed" in status.error
    assert fleet.metrics.value("setpoint_cluster_ready", cluster="west") == 0
    assert fleet.metrics.value("setpoint_cluster_ready", cluster="east") == 1
    assert fleet.task is not None and not fleet.task.done()

    west.faults.clear()
    await eventually(lambda: phase(west, "a"), timeout=10, description="west recovers")
    assert await phase(west, "a") == "west"
    seen = {(r.cluster, r.namespace, r.name, c) for r, c in fleet.requests}
    assert ("east", "default", "a", "east") in seen
    assert ("west", "default", "a", "west") in seen


async def test_clusters_join_and_leave_while_the_manager_runs(fleet: Fleet) -> None:
    """A member added at runtime starts at once; a removed one stops reconciling."""
    east = FakeClient(resources=[Gizmo], objects=[gizmo("a")])
    clusters = fleet.manager.clusters
    clusters.add("east", client=east)
    fleet.run()
    await eventually(lambda: phase(east, "a"), timeout=10, description="east converges")

    north = FakeClient(resources=[Gizmo], objects=[gizmo("b")])
    clusters.add("north", client=north)
    await eventually(lambda: phase(north, "b"), timeout=10, description="north joins")
    assert await phase(north, "b") == "north"
    assert clusters.members["north"].ready

    assert east.active_watches > 0
    await clusters.remove("east")
    assert "east" not in clusters.members
    # Stopped, not only forgotten: nothing watches east any more, so no change there can
    # reach a reconcile (checked as a fact rather than by sleeping to see that none comes).
    assert east.active_watches == 0, "a removed cluster is still watched"


def test_member_names_and_options_are_checked() -> None:
    """Names must be DNS labels and unique; a probe must fit in its period."""
    fleet = Fleet()
    clusters = fleet.manager.clusters
    with pytest.raises(ValueError, match="must be a DNS label"):
        clusters.add("East_1", client=FakeClient())
    clusters.add("east", client=FakeClient())
    with pytest.raises(ValueError, match="exists already"):
        clusters.add("east", client=FakeClient())
    with pytest.raises(ValueError, match="either config= or client="):
        clusters.add("west")
    with pytest.raises(ValueError, match=r"probe_timeout .* must be shorter than probe_period"):
        ClusterSetOptions(probe_period=1.0, probe_timeout=2.0)
