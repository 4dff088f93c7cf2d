"""The upgrade test helper on a real plane: version N -> N+1 of a CRD and its operator."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import setpoint as sp
from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.cli.main import main
from setpoint.client import Client
from setpoint.client.errors import NotFound
from setpoint.testing import UpgradeCheck, run_operator
from tests.integration.migrate.test_migrate_storage import dial_crd

GROUP = "upgrade.migrate.setpoint.dev"
DIAL_V1 = GroupVersionKind(GROUP, "v1", "Dial")
DIAL_V2 = GroupVersionKind(GROUP, "v2", "Dial")


def dial_crd_with_status(
    versions: tuple[str, ...], storage: str, group: str = GROUP
) -> dict[str, Any]:
    crd = dial_crd(group, versions=versions, storage=storage)
    for version in crd["spec"]["versions"]:
        props = version["schema"]["openAPIV3Schema"]["properties"]
        props["status"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        version["subresources"] = {"status": {}}
    return crd


def operator(
    namespace: str, *, double: bool, kind: GroupVersionKind
) -> Callable[[sp.Manager], None]:
    """Version N copies spec.level to status.level; N+1 also writes status.double."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        dial = await ctx.reader.get(kind, request.name, namespace=request.namespace)
        level = dial["spec"]["level"]
        status = {"level": level, **({"double": 2 * level} if double else {})}
        if dial.get("status") != status:
            await ctx.client.patch(
                kind,
                request.name,
                sp.MergePatch({"status": status}),
                namespace=request.namespace,
                subresource="status",
            )

    def setup(manager: sp.Manager) -> None:
        manager.controller("dials").for_(
            kind, predicates=[lambda event: sp.meta.namespace_of(event.object) == namespace]
        ).build(reconcile)

    return setup


async def test_upgrade_keeps_every_object_and_changes_only_what_is_expected(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """N -> N+1: objects read at every version, converge, and differ only as N+1 intends.

    Version N serves v1; N+1 adds v2 as the storage version and an operator that
    also writes status.double. After the upgrade every object reads back at v1
    and v2, the new operator converges them, the storage migration moves them to
    v2, and the snapshot diff is exactly the status.double fields it added.
    """
    check = UpgradeCheck(k8s, kinds=[DIAL_V1], namespace=namespace)
    await check.install([dial_crd_with_status(("v1",), "v1")])
    try:
        await upgrade(check, k8s, namespace, kubeconfig_path)
    finally:
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, f"dials.{GROUP}")


async def upgrade(check: UpgradeCheck, k8s: Client, namespace: str, kubeconfig_path: Path) -> None:
    async with run_operator(
        operator(namespace, double=False, kind=DIAL_V1), kubeconfig=kubeconfig_path
    ):
        for i in range(3):
            await k8s.create(
                {
                    "apiVersion": DIAL_V1.api_version,
                    "kind": "Dial",
                    "metadata": {"name": f"d{i}", "namespace": namespace},
                    "spec": {"level": i},
                }
            )
        await check.converged(lambda d: d.get("status", {}).get("level") == d["spec"]["level"])
    before = await check.snapshot()

    await check.install([dial_crd_with_status(("v1", "v2"), "v2")])
    async with run_operator(
        operator(namespace, double=True, kind=DIAL_V2), kubeconfig=kubeconfig_path
    ):
        await check.converged(lambda d: "double" in d.get("status", {}))
        await check.readable_at_every_version()
        (result,) = await check.migrate_storage()
        assert result.stored_versions_after == ("v2",)
    after = await check.snapshot()

    check.assert_diff(
        before,
        after,
        expected=[
            f"{GROUP}/Dial {namespace}/d{i} .status.double: added None -> {2 * i}" for i in range(3)
        ],
    )
    with pytest.raises(AssertionError, match=r"\+ .*d0 \.status\.double: added"):
        check.assert_diff(before, after, expected=[])
    check.assert_diff(before, after, ignore=[".status.double"])


async def test_cli_snapshot_of_live_objects(
    k8s: Client,
    namespace: str,
    kubeconfig_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`setpoint snapshot KIND -n NS -o FILE` captures normalized objects; diff of two is empty."""
    group = f"snapshot.{GROUP}"
    dial = GroupVersionKind(group, "v1", "Dial")
    check = UpgradeCheck(k8s, kinds=[dial], namespace=namespace)
    await check.install([dial_crd_with_status(("v1",), "v1", group)])
    await k8s.create(
        {
            "apiVersion": dial.api_version,
            "kind": "Dial",
            "metadata": {"name": "only", "namespace": namespace},
            "spec": {"level": 7},
        }
    )
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    base = ["snapshot", f"dials.{group}", "-n", namespace, "--kubeconfig", str(kubeconfig_path)]
    try:
        assert await asyncio.to_thread(main, [*base, "-o", str(first)]) == 0
        await k8s.patch(
            dial, "only", sp.MergePatch({"metadata": {"labels": {"x": "y"}}}), namespace=namespace
        )
        assert await asyncio.to_thread(main, [*base, "-o", str(second)]) == 0
    finally:
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, f"dials.{group}")
    doc = yaml.safe_load(first.read_text())
    assert [o["metadata"] for o in doc["objects"]] == [{"name": "only", "namespace": namespace}]
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["snapshot", "diff", str(first), str(second)])
    # The label added in between, and nothing else (not the new resourceVersion).
    assert code == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{group}/Dial {namespace}/only .metadata.labels: added None -> {{'x': 'y'}}",
        "1 difference(s)",
    ]
