"""One manager across several real control planes (decision 0011, multi-cluster)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client, MergePatch, NotFound, load_kubeconfig
from setpoint.controller import ClusterRequest, Context
from setpoint.manager import (
    ClusterSetOptions,
    LeaderElectionOptions,
    Manager,
    ManagerOptions,
)
from setpoint.manager.clusters import CLUSTER_LABEL
from setpoint.observability.metrics import Metrics
from setpoint.testing import ControlPlane, ControlPlaneOptions
from setpoint.testing.waits import eventually
from tests._support.kinds import CRDS, GIZMO

FLEET_NS = "fleet"


def gizmo(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": GIZMO.api_version,
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": namespace},
    }


async def phase(client: Client, name: str, namespace: str) -> str | None:
    try:
        obj = await client.get(GIZMO, name, namespace=namespace)
    except NotFound:
        return None
    return (obj.get("status") or {}).get("phase")


class Plane:
    """An extra local control plane with the test CRDs, and a client on it."""

    def __init__(self) -> None:
        self.plane = ControlPlane(ControlPlaneOptions(controller_manager=False, crds=CRDS))
        self.client: Client | None = None

    async def start(self) -> Client:
        await asyncio.to_thread(self.plane.start)
        self.client = Client(load_kubeconfig(str(self.plane.kubeconfig_path)))
        await self.client.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FLEET_NS}}
        )
        return self.client

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        await asyncio.to_thread(self.plane.stop)

    def kubeconfig_secret(self, name: str, namespace: str, cluster: str) -> dict[str, Any]:
        content = Path(self.plane.kubeconfig_path).read_bytes()
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": {CLUSTER_LABEL: cluster}},
            "data": {"value": base64.b64encode(content).decode()},
        }


@pytest.fixture
async def planes() -> AsyncIterator[list[Plane]]:
    made: list[Plane] = []
    yield made
    for plane in made:
        with contextlib.suppress(Exception):
            await plane.stop()


async def test_one_manager_two_planes_one_stopped_a_third_joined(
    k8s: Client,
    kubeconfig_path: Path,
    namespace: str,
    gizmo_crd: GroupVersionKind,
    planes: list[Plane],
) -> None:
    """A manager reconciles Gizmos in two control planes, survives one stopping, adopts a third.

    The home plane (the session's) holds the leader Lease and the Secrets describing members;
    it is itself a member from its kubeconfig. "east" is a second local plane, joined from a
    Secret (restricted kubeconfig). Objects in both converge, each reconciled with a request
    naming its cluster. Stopping east's API server leaves the manager running and home's new
    objects converging, while east is reported not ready. A third plane, "north", joined at
    runtime by creating its Secret, is picked up and converges too.
    """
    east, north = Plane(), Plane()
    planes.extend((east, north))
    # North's plane starts now, beside east's (a plane start is most of this test's time);
    # it joins the manager only later, when its Secret is created.
    east_client, north_client = await asyncio.gather(east.start(), north.start())
    await east_client.create(gizmo("e1", FLEET_NS))
    await k8s.create(gizmo("h1", namespace))
    await k8s.create(east.kubeconfig_secret("east-kubeconfig", namespace, "east"))

    metrics = Metrics.isolated()
    home_client = Client(load_kubeconfig(str(kubeconfig_path)))
    manager = Manager(
        home_client,
        ManagerOptions(
            leader_election=LeaderElectionOptions(
                name="fleet",
                namespace=namespace,
                lease_duration=4,
                renew_deadline=3,
                retry_period=1,
                release_on_cancel=True,
            ),
            metrics=metrics,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            handle_signals=False,
            clusters=ClusterSetOptions(sync_timeout=20, probe_period=1, probe_timeout=0.8),
        ),
    )
    seen: set[tuple[str, str, str]] = set()

    async def reconcile(ctx: Context, request: ClusterRequest) -> None:
        seen.add((request.cluster, request.namespace, request.name))
        try:
            await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
        except NotFound:
            return
        await ctx.client.patch(
            GIZMO,
            request.name,
            MergePatch({"status": {"phase": request.cluster}}),
            namespace=request.namespace,
            subresource="status",
        )

    clusters = manager.clusters
    clusters.controller("gizmo").for_(GIZMO).build(reconcile)
    clusters.add("home", load_kubeconfig(str(kubeconfig_path)))
    clusters.watch_secrets(namespace)
    run = asyncio.create_task(manager.run())
    try:
        await eventually(lambda: phase(k8s, "h1", namespace), timeout=60, description="home")
        await eventually(lambda: phase(east_client, "e1", FLEET_NS), timeout=60, description="east")
        assert await phase(k8s, "h1", namespace) == "home"
        assert await phase(east_client, "e1", FLEET_NS) == "east"
        assert ("east", FLEET_NS, "e1") in seen and ("home", namespace, "h1") in seen

        await east.stop()
        await k8s.create(gizmo("h2", namespace))
        await eventually(
            lambda: phase(k8s, "h2", namespace), timeout=30, description="home goes on"
        )
        await eventually(
            lambda: not clusters.members["east"].ready, timeout=30, description="east not ready"
        )
        assert metrics.value("setpoint_cluster_ready", cluster="east") == 0
        assert metrics.value("setpoint_cluster_ready", cluster="home") == 1
        assert not run.done(), "a stopped member must not stop the manager"

        await north_client.create(gizmo("n1", FLEET_NS))
        await k8s.create(north.kubeconfig_secret("north-kubeconfig", namespace, "north"))
        await eventually(
            lambda: phase(north_client, "n1", FLEET_NS), timeout=60, description="north joins"
        )
        assert await phase(north_client, "n1", FLEET_NS) == "north"
        assert clusters.members["north"].source == f"Secret {namespace}/north-kubeconfig"

        await k8s.delete(kinds.Secret, "north-kubeconfig", namespace=namespace)
        await eventually(
            lambda: "north" not in clusters.members, timeout=30, description="north leaves"
        )
    finally:
        manager.stop()
        await asyncio.wait_for(run, 60)
        await home_client.close()
