"""Drift of the tenant directory: rows edited behind the operator's back, shown in status.

The directory is a SQLite file anyone with access can edit; Kubernetes sends no event when
a row changes. A :class:`setpoint.PollingSource` reads every row each ``period`` seconds
and queues the Tenants whose row appeared, changed or vanished since the last poll, for a
second, small controller (``tenant-directory-drift``): it compares the Tenant with its row
and sets the ``DirectoryInSync`` condition:

- ``True``/``Matches`` when the row holds the Tenant's UID, admin group and namespaces;
- ``False`` with ``NotRegistered``, ``RegisteredForAnotherTenant``, ``AdminGroupDiffers`` or
  ``NamespacesDiffer``, the message saying what the row holds.

The condition write is an update of the Tenant, which reconciles it in the main controller:
its ``register`` (an UPSERT written only when the row differs) restores the row, and the
next poll sees it back and turns the condition ``True`` again. Drift is repaired within
two poll periods, and the status keeps a record of it (``lastTransitionTime``, and an Event
``DirectoryDrift``).

The period is ``TENANTS_DIRECTORY_POLL_PERIOD`` seconds (default 30).
"""

from __future__ import annotations

import os
from typing import Any

import setpoint as sp

from .api import Tenant, TenantStatus
from .directory import DirectoryEntry, DirectoryUnavailable, TenantDirectory
from .settings import SettingsError

__all__ = [
    "DIRECTORY_IN_SYNC",
    "DRIFT_CONTROLLER",
    "POLL_PERIOD_ENV",
    "DirectoryDrift",
    "add_drift_controller",
]

DRIFT_CONTROLLER = "tenant-directory-drift"
"""The drift controller's name (metrics, logs, Events)."""

DIRECTORY_IN_SYNC = "DirectoryInSync"
"""The condition the drift controller sets on each Tenant."""

POLL_PERIOD_ENV = "TENANTS_DIRECTORY_POLL_PERIOD"
"""Seconds between two polls of the directory (default 30)."""


def poll_period() -> float:
    """The poll period from :data:`POLL_PERIOD_ENV` (default 30 s)."""
    raw = os.environ.get(POLL_PERIOD_ENV, "30")
    try:
        period = float(raw)
    except ValueError:
        period = -1.0
    if not period > 0:
        raise SettingsError(f"{POLL_PERIOD_ENV}={raw!r}: give a number of seconds > 0")
    return period


class DirectoryDrift:
    """Compares each Tenant with its directory row; reports it in ``DirectoryInSync``.

    Args:
        directory: The tenant directory.
        period: Seconds between two polls of every row.

    """

    def __init__(self, directory: TenantDirectory, *, period: float) -> None:
        self.directory = directory
        """The tenant directory."""
        self.source: sp.PollingSource[DirectoryEntry] = sp.PollingSource(
            "directory", self.poll, period=period
        )
        """The polling source: every row, keyed by the Tenant it registers."""

    async def poll(self) -> dict[sp.ObjectKey, DirectoryEntry]:
        """Every row of the directory, by the key of its Tenant (cluster-scoped)."""
        return {sp.ObjectKey("", entry.name): entry for entry in await self.directory.entries()}

    async def reconcile(self, ctx: sp.Context, request: sp.Request) -> sp.Result | None:
        """Set ``DirectoryInSync`` from the Tenant and its row, read now."""
        try:
            tenant = await ctx.reader.get(Tenant, request.name)
        except sp.NotFound:
            return None
        if tenant.metadata.deletion_timestamp is not None:
            return None  # the finalizer unregisters it
        observed = tenant.status.observed_generation if tenant.status is not None else None
        if observed != tenant.metadata.generation:
            # The main controller has not acted on this spec yet: its register will rewrite
            # the row, and the poll after that brings the Tenant back here.
            return None
        try:
            entry = await self.directory.get(request.name)
        except DirectoryUnavailable as exc:
            ctx.log.info("The directory could not be read; retrying", error=str(exc))
            raise
        reason, message = compare(tenant, entry)
        in_sync = reason == "Matches"

        def write(obj: Tenant) -> None:
            if obj.status is None:
                obj.status = TenantStatus()
            sp.set_condition(
                obj.status,
                DIRECTORY_IN_SYNC,
                in_sync,
                reason,
                message,
                observed_generation=obj.metadata.generation,
            )

        result, _ = await sp.update_status(ctx.client, tenant, write)
        if result is not sp.OperationResult.UNCHANGED and not in_sync:
            ctx.log.warning("The directory row drifted", reason=reason, detail=message)
            if ctx.recorder is not None:
                ctx.recorder.event(tenant, "Warning", "DirectoryDrift", message)
        return None


def compare(tenant: Tenant, entry: DirectoryEntry | None) -> tuple[str, str]:
    """``(reason, message)`` of a Tenant against its row (``"Matches"`` when they agree)."""
    if entry is None:
        return "NotRegistered", "the directory holds no row for this tenant"
    if entry.uid != str(tenant.metadata.uid):
        return (
            "RegisteredForAnotherTenant",
            f"the directory row has UID {entry.uid}, not this tenant's",
        )
    if entry.admin_group != tenant.spec.admin_group:
        return (
            "AdminGroupDiffers",
            f"the directory says admin group {entry.admin_group!r}, the spec "
            f"{tenant.spec.admin_group!r}",
        )
    granted: Any = tenant.status.namespaces if tenant.status is not None else None
    if granted is not None and tuple(sorted(granted)) != entry.namespaces:
        return (
            "NamespacesDiffer",
            f"the directory lists namespaces {list(entry.namespaces)}, the tenant has "
            f"{sorted(granted)}",
        )
    return "Matches", "the directory row matches the tenant"


def add_drift_controller(manager: sp.Manager, directory: TenantDirectory) -> DirectoryDrift:
    """Add the drift controller and its polling source to ``manager``; return the reconciler."""
    drift = DirectoryDrift(directory, period=poll_period())
    (
        manager.controller(DRIFT_CONTROLLER)
        # Spec changes and the initial list; status writes (its own included) do not count.
        .for_(Tenant, predicates=[sp.GenerationChanged()])
        .watches_source(drift.source)
        .build(drift)
    )
    return drift
