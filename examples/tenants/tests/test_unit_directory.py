"""The tenant directory on its own: idempotent writes, the UID guard, failures typed."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from tenants import DirectoryUnavailable, TenantDirectory


@pytest.fixture
def directory(tmp_path: Path) -> TenantDirectory:
    made = TenantDirectory(tmp_path / "directory.db", busy_timeout=0.2)
    yield made
    made.close()


def count(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM tenants").fetchone()[0])
    finally:
        db.close()


async def test_register_is_an_upsert_that_writes_only_changes(directory: TenantDirectory) -> None:
    written = await directory.register(
        name="acme", uid="u1", admin_group="ops", namespaces=["b", "a", "a"]
    )
    again = await directory.register(
        name="acme", uid="u1", admin_group="ops", namespaces=["a", "b"]
    )
    assert (written, again) == (True, False)
    entry = await directory.get("acme")
    assert entry is not None
    assert (entry.uid, entry.admin_group, entry.namespaces) == ("u1", "ops", ("a", "b"))
    registered = entry.registered_at

    changed = await directory.register(name="acme", uid="u1", admin_group="dev", namespaces=["a"])
    assert changed is True
    entry = await directory.get("acme")
    assert entry is not None
    assert (entry.admin_group, entry.namespaces, entry.registered_at) == ("dev", ("a",), registered)
    assert count(directory.path) == 1


async def test_unregister_is_idempotent_and_guarded_by_uid(directory: TenantDirectory) -> None:
    await directory.register(name="acme", uid="new", admin_group="ops", namespaces=["a"])
    assert await directory.unregister(name="acme", uid="old") is False
    assert await directory.get("acme") is not None  # a newer Tenant's row is never removed
    assert await directory.unregister(name="acme", uid="new") is True
    assert await directory.unregister(name="acme", uid="new") is False
    assert await directory.entries() == []


async def test_a_locked_database_raises_directory_unavailable(directory: TenantDirectory) -> None:
    await directory.entries()  # creates the file and the table
    holder = sqlite3.connect(directory.path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(DirectoryUnavailable, match="database is locked") as caught:
            await directory.unregister(name="acme", uid="u1")
        assert str(directory.path) in str(caught.value)
        assert "0.2 s" in str(caught.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert await directory.unregister(name="acme", uid="u1") is False


async def test_start_refuses_a_path_in_a_missing_directory(tmp_path: Path) -> None:
    directory = TenantDirectory(tmp_path / "missing" / "directory.db")
    try:
        with pytest.raises(DirectoryUnavailable, match="does not exist"):
            await directory.start()
    finally:
        directory.close()
