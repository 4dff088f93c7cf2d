"""The tenant directory: an external system Kubernetes cannot garbage-collect.

Many organisations keep a registry of tenants outside the cluster (billing, a CMDB, an
identity provider). Here it is a SQLite database file, real enough to fail in the ways such
systems fail: it can be locked by another writer, read-only, or missing. The operator
registers every Tenant in it and, through a finalizer, unregisters a Tenant before Kubernetes
may forget it.

Contract
--------
- ``register`` is an UPSERT keyed by the Tenant's name: running it twice, or after a crash
  between the write and the status update, leaves exactly one row. It writes only when the
  row differs, so reconciling an unchanged Tenant does not take a write lock.
- ``unregister`` is ``DELETE ... WHERE name = ? AND uid = ?``: running it again after it
  succeeded deletes nothing and succeeds, and it never removes the row of a newer Tenant
  that reuses the name.
- Every sqlite3 call runs in a small dedicated thread pool, never on the event loop, and waits
  at most ``busy_timeout`` for another connection's lock. Failures raise
  :class:`DirectoryUnavailable` (a ``ReconcileError``: the controller retries with backoff).

Schema (one table, created on first use)::

    CREATE TABLE tenants (
        name          TEXT PRIMARY KEY,  -- the Tenant's metadata.name
        uid           TEXT NOT NULL,     -- its metadata.uid
        admin_group   TEXT NOT NULL,
        namespaces    TEXT NOT NULL,     -- JSON array, sorted
        registered_at TEXT NOT NULL,     -- ISO 8601, UTC
        updated_at    TEXT NOT NULL
    )
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import setpoint as sp
from setpoint.api.runnable import RunnableGroup

__all__ = ["DirectoryEntry", "DirectoryUnavailable", "TenantDirectory"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    name          TEXT PRIMARY KEY,
    uid           TEXT NOT NULL,
    admin_group   TEXT NOT NULL,
    namespaces    TEXT NOT NULL,
    registered_at TEXT NOT NULL,
    updated_at    TEXT NOT NULL
)
"""

_UPSERT = """
INSERT INTO tenants (name, uid, admin_group, namespaces, registered_at, updated_at)
VALUES (:name, :uid, :admin_group, :namespaces, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    uid = excluded.uid,
    admin_group = excluded.admin_group,
    namespaces = excluded.namespaces,
    updated_at = excluded.updated_at
"""


class DirectoryUnavailable(sp.ReconcileError):
    """The directory could not be read or written (locked, read-only, missing directory...).

    An expected failure: the reconcile (or the finalizer's cleanup) is retried with backoff.
    """


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """One registered tenant, as stored."""

    name: str
    """The Tenant's name (the key)."""
    uid: str
    """The Tenant's UID when it was last registered."""
    admin_group: str
    """Its admin group."""
    namespaces: tuple[str, ...]
    """Its namespaces, sorted."""
    registered_at: str
    """When the row was first written (ISO 8601, UTC)."""
    updated_at: str
    """When the row last changed."""


class TenantDirectory:
    """Async access to the tenant directory file (see the module docstring for the contract).

    Args:
        path: The SQLite database file; its directory must exist. The table is created on
            first use.
        busy_timeout: Seconds a call waits for a lock held by another connection.
        max_threads: Threads running sqlite3 calls; bounds how many calls can be blocked on
            a lock at once without touching the event loop's default executor.

    """

    def __init__(self, path: Path | str, *, busy_timeout: float = 5.0, max_threads: int = 2):
        if busy_timeout <= 0:
            raise ValueError("TenantDirectory busy_timeout must be a positive number of seconds")
        self.path = Path(path)
        """The database file."""
        self.busy_timeout = busy_timeout
        """Seconds one call waits for another connection's lock."""
        self._executor = ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="tenant-directory"
        )

    # -- public, async --------------------------------------------------------------------

    async def register(
        self, *, name: str, uid: str, admin_group: str, namespaces: Iterable[str]
    ) -> bool:
        """Make the directory hold this tenant (UPSERT); return whether a row was written.

        Raises:
            DirectoryUnavailable: the file could not be read or written.

        """
        listed = json.dumps(sorted(set(namespaces)))
        return await self._run(
            "register", name, lambda db: self._register(db, name, uid, admin_group, listed)
        )

    async def unregister(self, *, name: str, uid: str) -> bool:
        """Remove this tenant's row (only if it still has ``uid``); return whether one went.

        Raises:
            DirectoryUnavailable: the file could not be written.

        """
        return await self._run("unregister", name, lambda db: self._unregister(db, name, uid))

    async def get(self, name: str) -> DirectoryEntry | None:
        """The entry of tenant ``name``, if registered."""
        rows = await self._run("read", name, lambda db: self._select(db, name))
        return rows[0] if rows else None

    async def entries(self) -> list[DirectoryEntry]:
        """Every entry, by name."""
        return await self._run("read", "*", lambda db: self._select(db, None))

    def close(self) -> None:
        """Stop the worker threads once the calls in flight finish."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- a Runnable, so the manager checks the path at start and stops the threads ------------

    @property
    def name(self) -> str:
        """``tenant-directory`` (in the manager's logs and errors)."""
        return "tenant-directory"

    @property
    def group(self) -> RunnableGroup:
        """Started with the other background parts, before the controllers."""
        return RunnableGroup.OTHERS

    @property
    def needs_leader_election(self) -> bool:
        """No: it holds no state and does nothing by itself."""
        return False

    async def start(self) -> None:
        """Fail fast on a path whose directory does not exist (a configuration mistake).

        A locked or read-only database does not fail the start: those are outages the
        controller rides out with retries, and they show up in the Tenants' conditions.
        """
        parent = self.path.resolve().parent
        if not parent.is_dir():
            raise DirectoryUnavailable(
                f"tenant directory {self.path}: the directory {parent} does not exist; create "
                "it or point TENANTS_DIRECTORY_PATH at a file in an existing directory"
            )

    async def stop(self, timeout: float) -> None:
        """Let calls in flight finish (each is bounded by the busy timeout), then stop."""
        self.close()

    def failure(self) -> BaseException | None:
        """Never fails in the background: it has no background work."""
        return None

    # -- executor plumbing ----------------------------------------------------------------

    async def _run(self, what: str, name: str, work: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            db = self._connect()
            try:
                return work(db)
            finally:
                db.close()

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, call)
        except sqlite3.Error as exc:
            hint = ""
            if "locked" in str(exc) or "busy" in str(exc):
                hint = f" (another connection held the lock for more than {self.busy_timeout:g} s)"
            raise DirectoryUnavailable(
                f"tenant directory {self.path}: {what} of tenant {name!r} failed: {exc}{hint}; "
                "it is retried with backoff"
            ) from exc

    def _connect(self) -> sqlite3.Connection:
        # A connection per call: sqlite3 connections belong to the thread that made them, and
        # opening a local file costs microseconds. isolation_level=None: we issue BEGIN
        # ourselves, so no implicit transaction outlives a call. timeout= is the busy timeout.
        db = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        db.execute(_SCHEMA)
        return db

    # -- the SQL, run in a worker thread -----------------------------------------------------

    @staticmethod
    def _register(
        db: sqlite3.Connection, name: str, uid: str, admin_group: str, namespaces: str
    ) -> bool:
        row = db.execute(
            "SELECT uid, admin_group, namespaces FROM tenants WHERE name = ?", (name,)
        ).fetchone()
        if row == (uid, admin_group, namespaces):
            return False  # already as wanted: no write lock taken
        now = datetime.now(UTC).isoformat(timespec="seconds")
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                _UPSERT,
                {
                    "name": name,
                    "uid": uid,
                    "admin_group": admin_group,
                    "namespaces": namespaces,
                    "now": now,
                },
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return True

    @staticmethod
    def _unregister(db: sqlite3.Connection, name: str, uid: str) -> bool:
        cursor = db.execute("DELETE FROM tenants WHERE name = ? AND uid = ?", (name, uid))
        return cursor.rowcount > 0

    @staticmethod
    def _select(db: sqlite3.Connection, name: str | None) -> list[DirectoryEntry]:
        query = "SELECT name, uid, admin_group, namespaces, registered_at, updated_at FROM tenants"
        params: tuple[str, ...] = ()
        if name is not None:
            query += " WHERE name = ?"
            params = (name,)
        rows = db.execute(query + " ORDER BY name", params).fetchall()
        return [
            DirectoryEntry(
                name=r[0],
                uid=r[1],
                admin_group=r[2],
                namespaces=tuple(json.loads(r[3])),
                registered_at=r[4],
                updated_at=r[5],
            )
            for r in rows
        ]
