"""Fixtures for the safe-write integration tests (the Gizmo kind: tests/integration/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from setpoint.client import Client, load_kubeconfig
from tests._support.request_log import RequestLog


@pytest_asyncio.fixture(loop_scope="session")
async def counted(kubeconfig_path: Path) -> AsyncIterator[tuple[Client, RequestLog]]:
    """A separate admin client whose requests are recorded, for "no write" assertions."""
    log = RequestLog()
    client = Client(load_kubeconfig(str(kubeconfig_path)), on_request=log)
    try:
        yield client, log
    finally:
        await client.close()
