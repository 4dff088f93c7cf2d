"""The operator killed mid-way (SIGKILL) and restarted: everything converges, nothing twice."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import (
    TENANT,
    OperatorProcess,
    Tenants,
    is_ready,
    unique,
    wait_gone,
    wait_ready,
)


def directory_rows(path: Path) -> list[tuple[str, str]]:
    """(name, uid) of every row, read with plain sqlite3 as another program would."""
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute("SELECT name, uid FROM tenants").fetchall())
    finally:
        db.close()


async def test_a_killed_operator_converges_after_restart_without_duplicates(
    k8s: sp.Client, tenant_crd: sp.GroupVersionKind, kubeconfig_path: Path, tmp_path: Path
) -> None:
    """SIGKILL while six Tenants are converging and one is being deleted; restart; all settle.

    The operator runs as users run it (`python -m setpoint run examples/tenants/tenants`).
    Six Tenants are created; once two are Ready, a seventh (already Ready) is deleted and
    the process is killed at once, so work is cut off in every phase: some Tenants have no
    finalizer yet, some have half their children, the deleted one is waiting for its
    cleanup. After a restart every live Tenant is Ready with all its namespaces, the deleted
    one is gone, and the directory holds exactly one row per live Tenant, with its UID.
    """
    directory = tmp_path / "directory.db"
    process = OperatorProcess(kubeconfig_path, directory, tmp_path / "operator.log")
    tenants = Tenants(k8s)
    process.start()
    try:
        doomed = unique("doomed")
        await tenants.create(doomed, [f"{doomed}-a"])
        await wait_ready(k8s, doomed, timeout=60)

        names = [unique("restart") for _ in range(6)]
        for name in names:
            await tenants.create(name, [f"{name}-a", f"{name}-b"])

        async def two_ready() -> bool:
            ready = [is_ready(await k8s.get(TENANT, n)) for n in names]
            return sum(ready) >= 2

        await eventually(two_ready, timeout=60, description="two Tenants Ready")
        await k8s.delete(TENANT, doomed)
        process.kill()

        process.start()
        for name in names:
            tenant = await wait_ready(k8s, name, timeout=90)
            assert tenant["status"]["namespaces"] == [f"{name}-a", f"{name}-b"]
            for ns in tenant["status"]["namespaces"]:
                await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
        await wait_gone(k8s, TENANT, doomed, timeout=60)

        uids = {n: (await k8s.get(TENANT, n))["metadata"]["uid"] for n in names}
        rows = [row for row in directory_rows(directory) if row[0] in {*names, doomed}]
        assert rows == sorted(uids.items()), process.log_tail()
    finally:
        try:
            await tenants.delete_all()
        finally:
            process.stop()
