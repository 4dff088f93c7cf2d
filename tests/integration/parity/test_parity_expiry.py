"""Parity: versions older than the retained history are 410 (Gone/Expired)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.client import Client, load_kubeconfig
from setpoint.client.errors import Expired
from setpoint.testing import ControlPlane
from setpoint.testing.fake import FakeClient
from setpoint.testing.waits import eventually


@dataclass
class Expiring:
    """A backend whose history can be dropped: ``forget()`` compacts it."""

    make_client: Callable[[], Any]
    forget: Callable[[], None]


@pytest.fixture(params=["fake", "real"])
def expiring(request: pytest.FixtureRequest) -> Expiring:
    """The fake (``compact()``), or the spare plane (etcd compaction + API server restart)."""
    if request.param == "fake":
        fake = FakeClient()
        return Expiring(lambda: fake, fake.compact)
    plane: ControlPlane = request.getfixturevalue("spare_plane")

    def forget() -> None:
        plane.compact_etcd()
        plane.restart_apiserver()  # the watch cache restarts after the compacted revision

    return Expiring(lambda: Client(load_kubeconfig(str(plane.kubeconfig_path))), forget)


async def test_compacted_versions_are_gone(expiring: Expiring) -> None:
    """After compaction, a watch or an Exact list from an older version is 410 Expired.

    That is the signal for an informer to relist and for a pager to start
    over; the current state is still readable. (The real backend is the spare
    control plane: making versions expire needs an etcd compaction and an API
    server restart, which the session's plane must not suffer.)
    """
    client = expiring.make_client()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "expiry"}}
    try:
        await client.create(namespace)
        for i in range(3):
            made = await client.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"e{i}", "namespace": "expiry"},
                }
            )
        stale = made["metadata"]["resourceVersion"]
        made["data"] = {"changed": "yes"}
        await client.update(made)
        await asyncio.to_thread(expiring.forget)

        async def ready() -> Any:
            return await client.list(kinds.ConfigMap, namespace="expiry")

        current = await eventually(ready, timeout=60, description="API server back")
        assert {"e0", "e1", "e2"} <= {o["metadata"]["name"] for o in current}
        with pytest.raises(Expired) as watch_info:
            async with client.watch(
                kinds.ConfigMap, namespace="expiry", resource_version=stale
            ) as watch:
                await asyncio.wait_for(anext(watch), 30)
        assert watch_info.value.code == 410
        assert watch_info.value.status["message"].startswith(f"too old resource version: {stale} (")
        with pytest.raises(Expired) as list_info:
            await client.list_page(
                kinds.ConfigMap,
                namespace="expiry",
                resource_version=stale,
                resource_version_match="Exact",
            )
        assert list_info.value.status["message"] == (
            "The resourceVersion for the provided list is too old."
        )
    finally:
        await client.close()
