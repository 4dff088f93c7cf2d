"""Install or replace a CRD on a live cluster and wait until its versions are served.

:func:`apply_crd` is what the migration tools (and the upgrade test helper
in :mod:`setpoint.testing`) use to put a CRD on a server: create it, or
replace the existing one guarded by its resourceVersion, then wait for
``Established`` and for every served version to appear in discovery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from setpoint.api import kinds
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import AlreadyExists, Client
from setpoint.client.errors import NotFound, UnknownKind

__all__ = [
    "CRDNotReady",
    "StoredVersionInUse",
    "apply_crd",
    "dropped_stored_versions",
    "served_kinds",
]


class CRDNotReady(SetpointError, TimeoutError):
    """A CRD did not become Established (or its versions discoverable) in time.

    The message names the CRD and the last condition the server reported.
    """


class StoredVersionInUse(SetpointError, ValueError):
    """A CRD would drop a version objects may still be stored at (``status.storedVersions``).

    The message names the CRD and the versions, and says to run
    ``setpoint crd migrate-storage`` first.
    """


def dropped_stored_versions(live: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Versions in the live CRD's ``status.storedVersions`` that ``new`` no longer declares."""
    declared = {str(v.get("name")) for v in new.get("spec", {}).get("versions") or ()}
    stored = live.get("status", {}).get("storedVersions") or ()
    return [str(v) for v in stored if v not in declared]


def stored_version_message(name: str, dropped: list[str]) -> str:
    """What to tell a user whose new CRD drops versions still stored."""
    return (
        f"CRD {name} would drop version(s) {dropped}, still listed in status.storedVersions: "
        f"objects may be stored at them. Run `setpoint crd migrate-storage {name}` first; it "
        "rewrites every object at the storage version and then removes the old versions from "
        "storedVersions"
    )


def served_kinds(crd: Mapping[str, Any]) -> list[GroupVersionKind]:
    """The group/version/kind of every version the CRD serves."""
    spec = crd["spec"]
    return [
        GroupVersionKind(spec["group"], v["name"], spec["names"]["kind"])
        for v in spec["versions"]
        if v.get("served", True)
    ]


async def apply_crd(
    client: Client, crd: Mapping[str, Any], *, timeout: float = 60.0
) -> dict[str, Any]:
    """Create ``crd``, or replace the one of that name; return it once Established and served.

    A replace carries the live object's resourceVersion, so it fails with
    :class:`~setpoint.client.Conflict` rather than overwrite a change made
    meanwhile. A CRD of that name still being deleted is waited out, then
    created anew. A replace that would drop a version still listed in
    ``status.storedVersions`` is refused before it is sent. The server may still reject the CRD
    (:class:`~setpoint.client.Invalid`, e.g. when it drops a stored version).

    Caveat: on a replace, the API server swaps the CRD's conversion settings asynchronously,
    and no condition says when: for a moment after this returns, a request at a non-storage
    version may still be converted with the previous ``spec.conversion``. Code that changes
    the webhook's clientConfig and writes at once should retry that first write (a
    server-side dry run of it works as a probe).

    Raises:
        StoredVersionInUse: the new CRD drops a version still in storedVersions.
        CRDNotReady: not Established, or a served version not discoverable, within
            ``timeout`` seconds.

    """
    name = str(crd["metadata"]["name"])
    body = dict(crd)
    body.pop("status", None)
    deadline = time.monotonic() + timeout
    await _create_or_replace(client, body, name, deadline)
    last = "no status yet"
    while True:
        live = await client.get(kinds.CustomResourceDefinition, name)
        conditions = {c.get("type"): c for c in live.get("status", {}).get("conditions") or ()}
        established = conditions.get("Established", {})
        if established.get("status") == "True":
            missing = await _undiscovered(client, live)
            if not missing:
                return dict(live)
            last = f"versions {missing} not discoverable yet"
        else:
            last = f"Established={established.get('status')} ({established.get('message', '')})"
        if time.monotonic() >= deadline:
            raise CRDNotReady(f"CRD {name} was not ready within {timeout:.0f}s: {last}")
        await asyncio.sleep(0.2)


async def _create_or_replace(
    client: Client, body: dict[str, Any], name: str, deadline: float
) -> None:
    """Create, or replace the live CRD; wait out one that is still being deleted."""
    while True:
        try:
            await client.create(body)
            return
        except AlreadyExists:
            pass
        try:
            current = await client.get(kinds.CustomResourceDefinition, name)
        except NotFound:
            continue  # deleted in between: create again
        if current["metadata"].get("deletionTimestamp"):
            if time.monotonic() >= deadline:
                raise CRDNotReady(f"CRD {name} is still being deleted; try again when it is gone")
            await asyncio.sleep(0.2)
            continue
        dropped = dropped_stored_versions(current, body)
        if dropped:
            raise StoredVersionInUse(stored_version_message(name, dropped))
        metadata = {**body.get("metadata", {})}
        metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        await client.update({**body, "metadata": metadata})
        return


async def _undiscovered(client: Client, crd: Mapping[str, Any]) -> list[str]:
    missing = []
    for gvk in served_kinds(crd):
        try:
            await client.resource_info(gvk)
        except UnknownKind:
            missing.append(gvk.version)
    if missing:
        await client.mapper.refresh()
    return missing
