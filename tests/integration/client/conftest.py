"""Fixtures shared by the client integration tests."""

import pytest_asyncio

from setpoint.api.gvk import GroupVersionKind
from tests._support.kinds import WIDGET


@pytest_asyncio.fixture(loop_scope="session")
async def widget_crd(test_crds: None) -> GroupVersionKind:
    """The Widget kind (status and scale subresources, strict schema), installed and served."""
    return WIDGET
