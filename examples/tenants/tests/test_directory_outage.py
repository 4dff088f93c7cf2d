"""The tenant directory failing: visible, retried, and never skipped."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from tenants import FINALIZER

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import TENANT, Operator, Tenants, condition, unique, wait_gone, wait_ready


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an EXCLUSIVE lock on the SQLite file: every other connection gets "locked"."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")
        db.close()


def failures(operator: Operator) -> float:
    counter = operator.metrics.finalizer_cleanup_failures_total.labels("tenant", FINALIZER)
    return float(counter.get())


async def test_deletion_waits_for_the_directory_and_reports_why(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """While the directory is locked, the finalizer holds the Tenant and the failure shows.

    The test holds an EXCLUSIVE lock on the SQLite file and deletes the Tenant. The cleanup
    (DELETE ... WHERE) fails with "database is locked" after the 0.5 s busy timeout; the
    Tenant stays (deletionTimestamp set, finalizer present), a CleanupFailed condition and a
    Warning Event carry the error, and setpoint_finalizer_cleanup_failures_total counts the
    retries. Once the lock is released, the next retry unregisters the Tenant and it goes.
    """
    name = unique("outage")
    await tenants.create(name, [f"{name}-a"])
    await wait_ready(k8s, name)
    directory = operator.directory_path
    assert await operator.reconciler.directory.get(name) is not None

    with exclusive_lock(directory):
        await k8s.delete(TENANT, name)
        await eventually(
            lambda: failures(operator) >= 2, timeout=30, description="two failed cleanups"
        )
        tenant = await k8s.get(TENANT, name)
        assert tenant["metadata"]["deletionTimestamp"]
        assert FINALIZER in tenant["metadata"]["finalizers"]
        failed = condition(tenant, f"{FINALIZER}.CleanupFailed")
        assert failed is not None and failed["status"] == "True"
        assert "database is locked" in failed["message"]

        async def warning() -> bool:
            events = await k8s.list(kinds.Event, namespace="default")
            return any(
                e["type"] == "Warning"
                and e["regarding"].get("name") == name
                and "database is locked" in (e.get("note") or "")
                for e in events.items
            )

        await eventually(warning, timeout=30, description="a Warning Event about the Tenant")

    await wait_gone(k8s, TENANT, name, timeout=120)
    assert await operator.reconciler.directory.get(name) is None


async def test_a_failing_directory_degrades_a_tenant_until_it_recovers(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """Registration failing makes the Tenant Degraded (DirectoryUnavailable), then Ready.

    The namespaces are provisioned anyway (they do not depend on the directory); the
    reconcile is retried with backoff, and once the lock is gone the Tenant is registered
    and Ready.
    """
    name = unique("degraded")
    ns = f"{name}-a"
    directory = operator.directory_path
    # Make sure the file and its table exist, so the lock below holds the real database.
    await operator.reconciler.directory.entries()
    with exclusive_lock(directory):
        await tenants.create(name, [ns])

        async def degraded() -> dict | None:
            found = condition(await k8s.get(TENANT, name), "Degraded")
            return found if found and found["status"] == "True" else None

        found = await eventually(degraded, timeout=30, description="Degraded")
        assert found["reason"] == "DirectoryUnavailable"
        assert "database is locked" in found["message"]
        await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
    await wait_ready(k8s, name, timeout=60)
    assert await operator.reconciler.directory.get(name) is not None
