"""Fixtures of the controller integration tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest_asyncio

from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cache"))
from gizmos import GIZMO, install_crd


@pytest_asyncio.fixture(loop_scope="session")
async def gizmo_crd(k8s: Client) -> GroupVersionKind:
    """The Gizmo CRD (status subresource), installed and served."""
    await install_crd(k8s)
    return GIZMO
