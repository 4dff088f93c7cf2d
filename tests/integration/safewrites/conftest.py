"""Fixtures for the safe-write integration tests: a CRD with a status subresource."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import AlreadyExists, Client, load_kubeconfig
from setpoint.testing.waits import eventually
from tests._support.safewrites import GIZMO, GIZMO_CRD, RequestLog


@pytest_asyncio.fixture(loop_scope="session")
async def gizmo_crd(k8s: Client) -> GroupVersionKind:
    """The Gizmo CRD (status subresource, metav1.Condition schema), installed and Established."""
    with contextlib.suppress(AlreadyExists):
        await k8s.create(GIZMO_CRD)

    async def established() -> bool:
        got = await k8s.get(kinds.CustomResourceDefinition, "gizmos.safewrites.setpoint.dev")
        conditions = got.get("status", {}).get("conditions", [])
        ready = any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        if ready:
            await k8s.resource_info(GIZMO)  # discovery knows it too
        return ready

    await eventually(established, timeout=30, description="gizmos CRD established")
    return GIZMO


@pytest_asyncio.fixture(loop_scope="session")
async def counted(kubeconfig_path: Path) -> AsyncIterator[tuple[Client, RequestLog]]:
    """A separate admin client whose requests are recorded, for "no write" assertions."""
    log = RequestLog()
    client = Client(load_kubeconfig(str(kubeconfig_path)), on_request=log)
    try:
        yield client, log
    finally:
        await client.close()
