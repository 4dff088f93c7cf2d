"""`setpoint crd migrate-storage` on a real plane: objects re-encoded, storedVersions cleaned.

Each test installs a kind at v1, creates objects (stored as v1 in etcd), adds
v2 as the storage version and migrates. etcd itself is read to prove every
object is stored at v2 afterwards. CI uses a small N
(``SETPOINT_STORAGE_OBJECTS``, default 120); the 2,000-object run is
``make bench-storage`` (numbers in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.cli.main import main
from setpoint.client import Client
from setpoint.client.errors import NotFound
from setpoint.client.features import probe_server_features
from setpoint.migrate.install import StoredVersionInUse, apply_crd
from setpoint.migrate.storage import (
    MigrationProgress,
    StorageMigrationError,
    StorageMigrationOptions,
    migrate_storage,
)
from setpoint.testing.controlplane import ControlPlane

N = int(os.environ.get("SETPOINT_STORAGE_OBJECTS", "120"))


def dial_crd(group: str, *, versions: tuple[str, ...], storage: str) -> dict[str, Any]:
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"level": {"type": "integer"}}}
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"dials.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Dial", "plural": "dials"},
            "versions": [
                {
                    "name": v,
                    "served": True,
                    "storage": v == storage,
                    "schema": copy.deepcopy(schema),
                }
                for v in versions
            ],
        },
    }


@dataclass
class Dials:
    group: str
    namespace: str
    names: list[str]

    @property
    def crd_name(self) -> str:
        return f"dials.{self.group}"

    def stored_versions(self, plane: ControlPlane) -> set[str | None]:
        return {
            plane.stored_api_version(f"{self.group}/dials/{self.namespace}/{name}")
            for name in self.names
        }


async def make_dials(k8s: Client, namespace: str, group: str, n: int) -> Dials:
    """n Dials stored at v1, then v2 added as the storage version: storedVersions [v1, v2]."""
    await apply_crd(k8s, dial_crd(group, versions=("v1",), storage="v1"))
    gvk = GroupVersionKind(group, "v1", "Dial")
    names = [f"d{i:05d}" for i in range(n)]
    for start in range(0, n, 50):
        await asyncio.gather(
            *(
                k8s.create(
                    {
                        "apiVersion": gvk.api_version,
                        "kind": "Dial",
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": {"level": i},
                    }
                )
                for i, name in enumerate(names[start : start + 50], start)
            )
        )
    await apply_crd(k8s, dial_crd(group, versions=("v1", "v2"), storage="v2"))
    crd = await k8s.get(kinds.CustomResourceDefinition, f"dials.{group}")
    assert crd["status"]["storedVersions"] == ["v1", "v2"]
    return Dials(group, namespace, names)


@contextlib.asynccontextmanager
async def dials(k8s: Client, namespace: str, group: str, n: int) -> AsyncIterator[Dials]:
    made = await make_dials(k8s, namespace, group, n)
    try:
        yield made
    finally:
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, made.crd_name)


async def test_writes_move_every_object_and_clean_stored_versions(
    k8s: Client, namespace: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The no-op-write method re-encodes every object at v2 and sets storedVersions to [v2]."""
    async with dials(k8s, namespace, "writes.storage.migrate.setpoint.dev", N) as made:
        assert made.stored_versions(control_plane) == {f"{made.group}/v1"}
        seen: list[MigrationProgress] = []
        result = await migrate_storage(
            k8s,
            made.crd_name,
            options=StorageMigrationOptions(
                method="writes", page_size=50, qps=500, checkpoint_dir=tmp_path
            ),
            progress=seen.append,
        )
        assert (result.method, result.objects) == ("writes", N)
        assert result.stored_versions_after == ("v2",)
        assert made.stored_versions(control_plane) == {f"{made.group}/v2"}
        crd = await k8s.get(kinds.CustomResourceDefinition, made.crd_name)
        assert crd["status"]["storedVersions"] == ["v2"]
        assert seen[-1].done == N and seen[-1].total == N
        assert [p.done for p in seen] == sorted(p.done for p in seen)
        assert files_in(tmp_path) == []  # the checkpoint is gone once finished


def files_in(directory: Path) -> list[Path]:
    return list(directory.iterdir())


class Interrupt(Exception):
    pass


async def test_interrupted_migration_resumes_and_finishes(
    k8s: Client, namespace: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A run stopped after two pages resumes from its checkpoint, skipping the finished pages."""
    async with dials(k8s, namespace, "resume.storage.migrate.setpoint.dev", N) as made:
        options = StorageMigrationOptions(
            method="writes", page_size=30, qps=500, checkpoint_dir=tmp_path
        )

        def stop_after_two_pages(progress: MigrationProgress) -> None:
            if progress.done >= 60:
                raise Interrupt

        with pytest.raises(Interrupt):
            await migrate_storage(
                k8s, made.crd_name, options=options, progress=stop_after_two_pages
            )
        crd = await k8s.get(kinds.CustomResourceDefinition, made.crd_name)
        assert crd["status"]["storedVersions"] == ["v1", "v2"]  # not cleaned halfway
        assert len(files_in(tmp_path)) == 1
        stored = made.stored_versions(control_plane)
        assert stored == {f"{made.group}/v1", f"{made.group}/v2"}
        result = await migrate_storage(k8s, made.crd_name, options=options)
        assert result.resumed
        assert result.objects == N  # counted over both runs
        assert result.stored_versions_after == ("v2",)
        assert made.stored_versions(control_plane) == {f"{made.group}/v2"}


async def test_a_crd_changed_meanwhile_keeps_its_stored_versions(
    k8s: Client, namespace: str, tmp_path: Path
) -> None:
    """If the CRD changes during the migration, storedVersions is left alone and it says so."""
    async with dials(k8s, namespace, "guard.storage.migrate.setpoint.dev", 40) as made:
        changed = False

        async def touch_crd() -> None:
            crd = await k8s.get(kinds.CustomResourceDefinition, made.crd_name)
            crd["metadata"].setdefault("labels", {})["touched"] = "yes"
            await k8s.update(crd)

        def change_once(progress: MigrationProgress) -> None:
            nonlocal changed
            if not changed:
                changed = True
                asyncio.get_running_loop().create_task(touch_crd())

        with pytest.raises(StorageMigrationError, match="changed during the migration"):
            await migrate_storage(
                k8s,
                made.crd_name,
                options=StorageMigrationOptions(
                    method="writes", page_size=10, qps=20, checkpoint_dir=tmp_path
                ),
                progress=change_once,
            )
        crd = await k8s.get(kinds.CustomResourceDefinition, made.crd_name)
        assert crd["status"]["storedVersions"] == ["v1", "v2"]


async def test_in_tree_storage_version_migration(
    k8s: Client,
    namespace: str,
    control_plane: ControlPlane,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where the plane serves storagemigration.k8s.io/v1, the in-tree migrator does the work.

    On a release that does not serve it (before v1.37), ``auto`` says so in one log line
    and migrates with no-op writes, to the same end state.
    """
    served = (await probe_server_features(k8s)).storage_version_migration
    async with dials(k8s, namespace, "intree.storage.migrate.setpoint.dev", 20) as made:
        with caplog.at_level(logging.INFO, logger="setpoint.migrate"):
            result = await migrate_storage(
                k8s,
                made.crd_name,
                options=StorageMigrationOptions(
                    method="auto", timeout=240, checkpoint_dir=tmp_path
                ),
            )
        assert result.method == ("in-tree" if served else "writes"), result.notes
        fallback = [r.getMessage() for r in caplog.records if "no-op writes" in r.getMessage()]
        assert len(fallback) == (0 if served else 1), fallback
        assert result.objects == 20
        assert result.stored_versions_after == ("v2",)
        assert made.stored_versions(control_plane) == {f"{made.group}/v2"}


async def test_dropping_a_stored_version_is_refused(k8s: Client, namespace: str) -> None:
    """Applying a CRD without a version still in storedVersions says to run the migration."""
    async with dials(k8s, namespace, "refuse.storage.migrate.setpoint.dev", 1) as made:
        only_v2 = dial_crd(made.group, versions=("v2",), storage="v2")
        with pytest.raises(StoredVersionInUse, match="setpoint crd migrate-storage dials"):
            await apply_crd(k8s, only_v2)


async def test_cli_migrate_storage_reports_progress(
    k8s: Client, namespace: str, kubeconfig_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`setpoint crd migrate-storage KIND` prints progress, the result, and exits 0."""
    async with dials(k8s, namespace, "cli.storage.migrate.setpoint.dev", 5) as made:
        argv = [
            "crd",
            "migrate-storage",
            made.crd_name,
            "--method",
            "writes",
            "--kubeconfig",
            str(kubeconfig_path),
        ]
        assert await asyncio.to_thread(main, argv) == 0
        captured = capsys.readouterr()
        assert f"{made.crd_name}: 5/5 objects migrated (100%, writes)" in captured.err
        assert "storedVersions ['v1', 'v2'] -> ['v2']" in captured.out
        assert await asyncio.to_thread(main, argv) == 0
        assert "nothing to migrate" in capsys.readouterr().out


async def test_generate_crd_warns_when_it_would_drop_a_stored_version(
    k8s: Client,
    namespace: str,
    kubeconfig_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`generate crd --against-cluster` warns that v1 is still stored and names the migration."""
    group = "generate.storage.migrate.setpoint.dev"
    async with dials(k8s, namespace, group, 1):
        module = tmp_path / "dials_v2_only.py"
        module.write_text(
            "import setpoint as sp\n\n"
            "class DialSpec(sp.Model):\n"
            "    level: int | None = None\n\n"
            f"@sp.resource(group={group!r}, version='v2')\n"
            "class Dial(sp.Resource):\n"
            "    spec: DialSpec | None = None\n"
        )
        argv = [
            "generate",
            "crd",
            str(module),
            "--output-dir",
            str(tmp_path / "config"),
            "--against-cluster",
            "--kubeconfig",
            str(kubeconfig_path),
        ]
        assert await asyncio.to_thread(main, argv) == 0
        err = capsys.readouterr().err
        assert f"setpoint: warning: CRD dials.{group} would drop version(s) ['v1']" in err
        assert f"setpoint crd migrate-storage dials.{group}" in err
