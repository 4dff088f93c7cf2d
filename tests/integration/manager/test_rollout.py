"""A side-by-side rollout on the real server: two operator versions, objects moved by a label."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

import setpoint as sp
from setpoint.cache import CacheOptions
from setpoint.cli.doctor_rollout import INCUMBENT, scan_rollout
from setpoint.client import Client
from setpoint.client.errors import NotFound
from setpoint.client.patch import MergePatch
from setpoint.manager.rollout import Rollout, move_to
from setpoint.testing import eventually, run_operator
from tests._support.kinds import GIZMO, Gizmo


def version(name: str, seen: list[tuple[str, str, str]]) -> Any:
    """An operator version that records (version, object, color) for each reconcile it does."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        try:
            gizmo = await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
        except NotFound:
            return  # gone, or moved to another version: not ours any more
        color = gizmo.spec.color if gizmo.spec is not None else ""
        seen.append((name, request.name, color or ""))

    def setup(manager: sp.Manager) -> None:
        manager.controller(f"gizmo-{name}").for_(Gizmo).build(reconcile)

    return setup


@pytest.mark.usefixtures("gizmo_crd")
async def test_objects_move_between_two_operator_versions_by_label(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """Each object is reconciled by exactly the version its label names, and moves back.

    Two managers run in one process against the real API server: v1 yields to v2
    (selector ``setpoint.dev/operator-version notin (v2)``), v2 is the candidate
    (``=v2``). Three unlabelled Gizmos are v1's. Labelling one for v2 makes v2 reconcile
    it; a spec change of each then reaches only its own version (v1 never sees b's new
    color, v2 never sees a's). `setpoint doctor rollout` counts one object for v2 and two
    for the incumbent. Removing the label moves b back to v1. Fails if either selector
    lets the other version's objects through.
    """
    seen: list[tuple[str, str, str]] = []
    scope = CacheOptions(namespaces=(namespace,))
    v1 = Rollout(version="v1", kinds=(Gizmo,), yields_to=("v2",))
    v2 = Rollout(version="v2", kinds=(Gizmo,), candidate=True)

    for name in ("a", "b", "c"):
        await k8s.create(
            {
                "apiVersion": GIZMO.api_version,
                "kind": "Gizmo",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"color": "red"},
            }
        )

    async def recolor(name: str, color: str) -> None:
        await k8s.patch(GIZMO, name, MergePatch({"spec": {"color": color}}), namespace=namespace)

    def reconciled(who: str, name: str, color: str) -> bool:
        return (who, name, color) in seen

    async with (
        run_operator(
            version("v1", seen),
            kubeconfig=kubeconfig_path,
            options=sp.ManagerOptions(new_cache=v1.new_cache(scope)),
        ),
        run_operator(
            version("v2", seen),
            kubeconfig=kubeconfig_path,
            options=sp.ManagerOptions(new_cache=v2.new_cache(scope)),
        ) as second,
    ):
        for name in ("a", "b", "c"):
            await eventually(
                functools.partial(reconciled, "v1", name, "red"),
                timeout=30,
                description=f"v1 reconciles {name}",
            )
        await second.wait_idle(timeout=30, settle=0.5)
        assert not [s for s in seen if s[0] == "v2"]

        await move_to(k8s, GIZMO, ["b"], version="v2", namespace=namespace)
        await eventually(lambda: reconciled("v2", "b", "red"), timeout=30, description="v2 takes b")
        await recolor("b", "blue")
        await recolor("a", "green")
        await eventually(lambda: reconciled("v2", "b", "blue"), timeout=30, description="v2: b")
        await eventually(lambda: reconciled("v1", "a", "green"), timeout=30, description="v1: a")
        report = await scan_rollout(k8s, namespace=namespace, kinds_wanted=["gizmos"])
        assert report.kinds == {
            "Gizmo.test.setpoint.dev": {
                INCUMBENT: [f"{namespace}/a", f"{namespace}/c"],
                "v2": [f"{namespace}/b"],
            }
        }

        before_return = list(seen)
        await move_to(k8s, GIZMO, ["b"], version=None, namespace=namespace)
        await eventually(lambda: reconciled("v1", "b", "blue"), timeout=30, description="back")
        await recolor("b", "white")
        await eventually(lambda: reconciled("v1", "b", "white"), timeout=30, description="v1: b")
        await second.wait_idle(timeout=30, settle=0.5)

    assert ("v1", "b", "blue") not in before_return
    assert [s for s in seen if s[0] == "v2" and s[1] != "b"] == []
    assert ("v2", "b", "white") not in seen
    assert ("v2", "a", "green") not in seen
