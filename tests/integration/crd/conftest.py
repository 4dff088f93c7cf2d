"""Fixtures for the CRD integration tests: the golden fixture types, installed into the server."""

from __future__ import annotations

import functools
from typing import Any

import pytest_asyncio

from setpoint.api import kinds
from setpoint.client import AlreadyExists, Client
from setpoint.testing.waits import eventually
from tests._support.crd_golden import load_fixtures
from tests._support.crd_server import fixture_crds, is_established


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def installed_crds(k8s: Client) -> dict[str, dict[str, Any]]:
    """Every fixture CRD, created (or replaced) and Established, by name; kinds discoverable."""
    result: dict[str, dict[str, Any]] = {}
    for crd in fixture_crds():
        name = crd["metadata"]["name"]
        try:
            await k8s.create(crd)
        except AlreadyExists:
            # A reused cluster (SETPOINT_USE_EXISTING_CLUSTER) may hold an older generation.
            current = await k8s.get(kinds.CustomResourceDefinition, name)
            version = current["metadata"]["resourceVersion"]
            await k8s.update({**crd, "metadata": {**crd["metadata"], "resourceVersion": version}})

        established = await eventually(
            functools.partial(_established, k8s, name),
            timeout=60,
            description=f"CRD {name} Established",
        )
        assert established is not None
        result[name] = established
    types = load_fixtures()
    for cls in (types.Widget, types.Gadget, types.Thing):
        await eventually(
            functools.partial(k8s.resource_info, cls),
            timeout=30,
            description=f"{cls.__name__} discoverable",
        )
    return result


async def _established(k8s: Client, name: str) -> dict[str, Any] | None:
    got = await k8s.get(kinds.CustomResourceDefinition, name)
    return got if is_established(got) else None
