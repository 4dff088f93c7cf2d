"""Drift of the tenant directory: a row edited behind the operator's back shows in status."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from tenants import TenantsSettings
from tenants.drift import DIRECTORY_IN_SYNC, DRIFT_CONTROLLER, POLL_PERIOD_ENV

import setpoint as sp
from setpoint.testing import eventually

from .tenants_support import TENANT, Operator, Tenants, condition, running_operator, unique
from .tenants_support import wait_ready as wait_tenant_ready

POLL_PERIOD = 0.5


@pytest.fixture
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The directory polled every half second (30 s by default)."""
    monkeypatch.setenv(POLL_PERIOD_ENV, str(POLL_PERIOD))
    yield


@pytest_asyncio.fixture(loop_scope="session")
async def operator(
    fast_poll: None,
    tenant_crd: sp.GroupVersionKind,
    kubeconfig_path: Path,
    settings: TenantsSettings,
) -> AsyncIterator[Operator]:
    """The operator, started after the poll period is set."""
    async with running_operator(kubeconfig_path, settings) as running:
        yield running


def edit_row(path: Path, sql: str, *params: str) -> None:
    """Change the directory file as another program would, through its own connection."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        assert db.execute(sql, params).rowcount == 1
    finally:
        db.close()


def row(path: Path, name: str) -> tuple[Any, ...] | None:
    db = sqlite3.connect(path)
    try:
        found: tuple[Any, ...] | None = db.execute(
            "SELECT admin_group FROM tenants WHERE name = ?", (name,)
        ).fetchone()
        return found
    finally:
        db.close()


async def in_sync_states(
    k8s: sp.Client, name: str, resource_version: str, seen: list[tuple[str, str, str]]
) -> None:
    """Record each (status, reason, message) of DirectoryInSync the Tenant's watch shows."""
    async with k8s.watch(TENANT, resource_version=resource_version) as events:
        async for event in events:
            obj = event.object
            if event.type == "BOOKMARK" or obj["metadata"]["name"] != name:
                continue
            found = condition(obj, DIRECTORY_IN_SYNC)
            if found is not None:
                state = (found["status"], found["reason"], found["message"])
                if not seen or seen[-1] != state:
                    seen.append(state)


def reported_then_in_sync(seen: list[tuple[str, str, str]], reason: str) -> bool:
    """Whether the watch showed ``reason`` and, after it, the condition True again."""
    reasons = [state[1] for state in seen]
    return reason in reasons and seen[-1][0] == "True"


async def test_a_directory_row_edited_by_hand_is_reported_then_restored(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """The poller notices a changed or deleted row; status says so; the row is restored.

    The directory is polled every 0.5 s by a PollingSource of the tenant-directory-drift
    controller. Once the Tenant is Ready its DirectoryInSync condition is True (Matches).
    Another program then sets the row's admin group to "intruders": the Tenant's watch shows
    DirectoryInSync False (AdminGroupDiffers, the message naming "intruders"), the main
    controller, reconciling the status change, writes the row back, and the condition
    returns to True. Deleting the row goes the same way through NotRegistered. Nothing in
    Kubernetes changes meanwhile: only the poll can see these edits.
    """
    name = unique("drift")
    await tenants.create(name, [f"{name}-a"])
    await wait_tenant_ready(k8s, name)

    async def in_sync() -> dict[str, Any] | None:
        obj = await k8s.get(TENANT, name)
        found = condition(obj, DIRECTORY_IN_SYNC)
        return obj if found is not None and found["status"] == "True" else None

    tenant = await eventually(in_sync, timeout=30, description="DirectoryInSync True")
    assert (condition(tenant, DIRECTORY_IN_SYNC) or {}).get("reason") == "Matches"
    path = operator.directory_path
    original = row(path, name)
    assert original is not None

    for sql, reason in (
        ("UPDATE tenants SET admin_group = 'intruders' WHERE name = ?", "AdminGroupDiffers"),
        ("DELETE FROM tenants WHERE name = ?", "NotRegistered"),
    ):
        start = (await k8s.get(TENANT, name))["metadata"]["resourceVersion"]
        seen: list[tuple[str, str, str]] = []
        watching = asyncio.create_task(in_sync_states(k8s, name, start, seen))
        try:
            edit_row(path, sql, name)
            await eventually(
                functools.partial(reported_then_in_sync, seen, reason),
                timeout=30,
                description=f"{reason} reported, then in sync again",
            )
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        drifted = next(s for s in seen if s[1] == reason)
        assert drifted[0] == "False"
        if reason == "AdminGroupDiffers":
            assert "'intruders'" in drifted[2]
        assert row(path, name) == original  # repaired by the main controller
    polls = operator.metrics.value("setpoint_source_polls_total", controller=DRIFT_CONTROLLER)
    assert polls >= 2
