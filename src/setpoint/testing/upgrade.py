"""The upgrade test: install version N, create objects, upgrade to N+1, check nothing was lost.

The handbooks' upgrade test, as a helper over the real control plane::

    check = UpgradeCheck(k8s, kinds=[WIDGET_V1], namespace=namespace)
    await check.install(crds_n)                       # CRD version N
    async with run_operator(operator_n.setup, kubeconfig=kubeconfig_path) as op:
        await k8s.create(widget("a"))                 # objects users wrote under N
        await check.converged(lambda w: w["status"].get("ready") is True)
    before = await check.snapshot()

    await check.install(crds_n_plus_1)                # new CRD (and converters)
    async with run_operator(operator_n_plus_1.setup, kubeconfig=kubeconfig_path):
        await check.converged(lambda w: w["status"].get("ready") is True)
        await check.readable_at_every_version()
        await check.migrate_storage()                 # optional: retire the old storage
    after = await check.snapshot()
    check.assert_diff(before, after, expected=[])     # lossless: nothing changed

Every step raises ``AssertionError`` with the objects and fields that failed,
so the test reads as the upgrade runbook it checks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from setpoint.api import kinds as builtin_kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client.client import Client
from setpoint.migrate.install import apply_crd
from setpoint.migrate.snapshot import diff_snapshots, take_snapshot
from setpoint.migrate.storage import StorageMigrationResult, migrate_storage

__all__ = ["UpgradeCheck"]


class UpgradeCheck:
    """Checks for one upgrade of the given kinds, in one namespace or cluster-wide.

    ``kinds`` name the version to snapshot and compare at (usually the one
    users read); the other served versions are found from each kind's CRD.
    """

    def __init__(
        self,
        client: Client,
        *,
        kinds: Sequence[GroupVersionKind],
        namespace: str | None = None,
    ) -> None:
        self.client = client
        self.kinds = list(kinds)
        self.namespace = namespace

    async def install(self, crds: Iterable[Mapping[str, Any]]) -> None:
        """Install (or replace) each CRD and wait until all its versions are served.

        A CRD that would drop a version still in ``status.storedVersions`` is
        refused (:class:`~setpoint.migrate.install.StoredVersionInUse`): run
        :meth:`migrate_storage` first.
        """
        for crd in crds:
            await apply_crd(self.client, crd)

    async def snapshot(self) -> dict[str, Any]:
        """A normalized snapshot of every object of the kinds (see ``setpoint snapshot``)."""
        return await take_snapshot(self.client, self.kinds, namespace=self.namespace)

    async def _crd_for(self, kind: GroupVersionKind) -> dict[str, Any]:
        for crd in await self.client.list(builtin_kinds.CustomResourceDefinition):
            spec = crd["spec"]
            if spec["group"] == kind.group and spec["names"]["kind"] == kind.kind:
                return dict(crd)
        raise AssertionError(f"no CRD serves {kind.group}/{kind.kind}")

    async def readable_at_every_version(self) -> None:
        """Every object lists and reads back at every served version of its kind.

        Raises:
            AssertionError: naming each object and version that failed (a
                conversion error, or objects missing at one version).

        """
        failures: list[str] = []
        for kind in self.kinds:
            crd = await self._crd_for(kind)
            served = [v["name"] for v in crd["spec"]["versions"] if v.get("served", True)]
            names_by_version: dict[str, set[str]] = {}
            for version in served:
                gvk = GroupVersionKind(kind.group, version, kind.kind)
                try:
                    listed = await self.client.list(gvk, namespace=self.namespace)
                except Exception as exc:
                    failures.append(f"{gvk.api_version} {kind.kind}: list failed: {exc}")
                    continue
                names = set()
                for obj in listed:
                    meta = obj["metadata"]
                    names.add(f"{meta.get('namespace') or ''}/{meta['name']}")
                    try:
                        await self.client.get(gvk, meta["name"], namespace=meta.get("namespace"))
                    except Exception as exc:
                        failures.append(f"{gvk.api_version} {kind.kind} {meta['name']}: {exc}")
                names_by_version[version] = names
            every = set().union(*names_by_version.values()) if names_by_version else set()
            for version, names in names_by_version.items():
                missing = sorted(every - names)
                if missing:
                    failures.append(f"{kind.group}/{version} {kind.kind}: missing {missing}")
        if failures:
            raise AssertionError(
                "objects do not read back at every served version:\n  " + "\n  ".join(failures)
            )

    async def converged(
        self,
        condition: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 60.0,
        interval: float = 0.5,
    ) -> None:
        """Wait until ``condition(obj)`` holds for every object of every kind.

        Raises:
            AssertionError: after ``timeout`` seconds, naming the objects that
                have not converged.

        """
        deadline = time.monotonic() + timeout
        while True:
            pending: list[str] = []
            for kind in self.kinds:
                for obj in await self.client.list(kind, namespace=self.namespace):
                    if not condition(obj):
                        meta = obj["metadata"]
                        pending.append(f"{kind.kind} {meta.get('namespace') or ''}/{meta['name']}")
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"not converged within {timeout:.0f}s: {', '.join(sorted(pending)[:20])}"
                )
            await asyncio.sleep(interval)

    async def migrate_storage(self) -> list[StorageMigrationResult]:
        """Move every object of each kind to its storage version and clean storedVersions."""
        results = []
        for kind in self.kinds:
            crd = await self._crd_for(kind)
            results.append(await migrate_storage(self.client, crd["metadata"]["name"]))
        return results

    def assert_diff(
        self,
        before: Mapping[str, Any],
        after: Mapping[str, Any],
        *,
        expected: Iterable[str] = (),
        ignore: Iterable[str] = (),
    ) -> None:
        """The snapshots differ exactly by ``expected`` (lines as ``snapshot diff`` prints them).

        Raises:
            AssertionError: listing unexpected differences and expected ones that did
                not happen.

        """
        found = {str(d) for d in diff_snapshots(before, after, ignore=ignore)}
        wanted = set(expected)
        unexpected, missing = sorted(found - wanted), sorted(wanted - found)
        if unexpected or missing:
            lines = [f"+ {d}" for d in unexpected] + [f"- (expected) {d}" for d in missing]
            raise AssertionError(
                "the upgrade changed objects unexpectedly:\n  " + "\n  ".join(lines)
            )
