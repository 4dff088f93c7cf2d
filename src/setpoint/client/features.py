"""What the API server offers: the optional features setpoint uses, probed, not assumed.

setpoint is tested on three Kubernetes releases (docs/compatibility.md). A few features it
can use are not on all of them, or can be switched off by a cluster's operator:

- **StorageVersionMigration** (``storagemigration.k8s.io/v1``, the in-tree storage-version
  migrator): ``setpoint crd migrate-storage`` uses it where served, else rewrites the
  objects itself;
- **ValidatingAdmissionPolicy** (``admissionregistration.k8s.io/v1``): CEL admission
  without a webhook;
- **WatchList** (``sendInitialEvents`` on a watch): the initial state streamed by the
  watch instead of a list.

:func:`probe_server_features` asks the server once (``/version``, discovery and, on request,
one short watch); :meth:`ServerFeatures.degradations` says, one line each, what works
differently where a feature is missing. The manager logs those lines when it connects.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass

from setpoint.api.gvk import GroupVersionKind
from setpoint.client.client import Client
from setpoint.client.errors import ApiError, UnknownKind

__all__ = [
    "STORAGE_VERSION_MIGRATION",
    "VALIDATING_ADMISSION_POLICY",
    "ServerFeatures",
    "probe_server_features",
]

STORAGE_VERSION_MIGRATION = GroupVersionKind(
    "storagemigration.k8s.io", "v1", "StorageVersionMigration"
)
"""The in-tree storage-version migrator's kind (served by default from Kubernetes v1.37)."""

VALIDATING_ADMISSION_POLICY = GroupVersionKind(
    "admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"
)
"""CEL admission policies (GA in Kubernetes v1.30)."""

_NAMESPACE = GroupVersionKind("", "v1", "Namespace")


@dataclass(frozen=True, slots=True)
class ServerFeatures:
    """The optional features one API server offers (see the module docstring)."""

    git_version: str
    """The server's ``gitVersion`` (``v1.36.3``)."""
    minor: int | None
    """The minor release number, when ``/version`` gives one."""
    storage_version_migration: bool
    """``storagemigration.k8s.io/v1`` StorageVersionMigration is served."""
    validating_admission_policy: bool
    """``admissionregistration.k8s.io/v1`` ValidatingAdmissionPolicy is served."""
    watch_list: bool | None
    """A watch with ``sendInitialEvents=true`` is accepted; ``None``: not probed."""

    def degradations(self) -> list[str]:
        """One line per missing feature: what setpoint does instead."""
        lines = []
        where = f"Kubernetes {self.git_version}"
        if not self.storage_version_migration:
            lines.append(
                f"{where} does not serve storagemigration.k8s.io/v1 (the in-tree storage-version "
                "migrator): `setpoint crd migrate-storage` rewrites the objects itself (no-op "
                "writes, rate-limited and resumable)"
            )
        if not self.validating_admission_policy:
            lines.append(
                f"{where} does not serve admissionregistration.k8s.io/v1 "
                "ValidatingAdmissionPolicy: use admission webhooks (sp.CustomValidator) instead"
            )
        if self.watch_list is False:
            lines.append(
                f"{where} refuses watches with sendInitialEvents (WatchList off): informers "
                "list, then watch"
            )
        return lines


async def probe_server_features(
    client: Client, *, watch_list: bool = False, timeout: float = 10.0
) -> ServerFeatures:
    """Ask the server which optional features it offers.

    ``watch_list=True`` also opens one watch on Namespaces with ``sendInitialEvents`` and
    reads its first event (a single short request); without it ``watch_list`` is ``None``.

    Raises:
        ClientError: the server cannot be reached or refuses ``/version`` (the probe does
            not guess: an unreachable server is reported, never taken for an old one).

    """
    version = await client.server_version()
    git_version = str(version.get("gitVersion", "unknown"))
    match = re.match(r"(\d+)", str(version.get("minor", "")))
    minor = int(match.group(1)) if match else None
    return ServerFeatures(
        git_version=git_version,
        minor=minor,
        storage_version_migration=await _served(client, STORAGE_VERSION_MIGRATION),
        validating_admission_policy=await _served(client, VALIDATING_ADMISSION_POLICY),
        watch_list=await _watch_list(client, timeout) if watch_list else None,
    )


async def _served(client: Client, kind: GroupVersionKind) -> bool:
    try:
        await client.resource_info(kind)
    except UnknownKind:
        return False
    return True


async def _watch_list(client: Client, timeout: float) -> bool:
    watch = client.watch(_NAMESPACE, send_initial_events=True, timeout_seconds=max(1, int(timeout)))
    try:
        async with asyncio.timeout(timeout):
            async for _ in watch:
                return True
    except ApiError:
        return False  # 400/422: the server does not take sendInitialEvents
    except TimeoutError:
        return True  # accepted, and nothing sent yet: the stream is open
    finally:
        await watch.aclose()
    return True
