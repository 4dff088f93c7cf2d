"""Fixtures of the controller integration tests."""

from __future__ import annotations

import pytest_asyncio

from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from tests._support.gizmos import GIZMO, install_crd


@pytest_asyncio.fixture(loop_scope="session")
async def gizmo_crd(k8s: Client) -> GroupVersionKind:
    """The Gizmo CRD (status subresource), installed and served."""
    await install_crd(k8s)
    return GIZMO
