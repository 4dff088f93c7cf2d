"""kstatus conditions on the real server, judged by the kstatus library itself.

The verdicts come from ``sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute`` (the program in
scripts/kstatus, built once into ~/.cache/setpoint/kstatus by scripts/build_kstatus.py, about
30 s of CPU), not from a reimplementation of its rules.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import setpoint as sp
from setpoint.api.conditions import find_condition
from setpoint.client import Client
from setpoint.client.patch import MergePatch
from setpoint.crd.generator import crd_for
from setpoint.migrate.install import apply_crd
from setpoint.testing import eventually, run_operator
from tests._support.kinds import GIZMO, Gizmo

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def kstatus_binary() -> Path:
    """The kstatus checker, built from Go modules on first use; without Go the test fails.

    Go is needed for the local control plane anyway (``.ci/run`` refuses to start without
    it), so a missing toolchain is a broken machine, never a reason to skip.
    """
    if shutil.which("go") is None:
        pytest.fail("Go is not installed: the kstatus checker is built from Go modules")
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_kstatus.py")],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(built.stdout.strip().splitlines()[-1])


async def kstatus(binary: Path, obj: dict[str, Any]) -> dict[str, str]:
    """kstatus' verdict on ``obj``: ``{"status": ..., "message": ...}``."""
    process = await asyncio.create_subprocess_exec(
        str(binary),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate(json.dumps(obj).encode() + b"\n")
    verdict: dict[str, str] = json.loads(out)
    assert "error" not in verdict, verdict
    return verdict


def operator() -> Any:
    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        gizmo = await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
        color = gizmo.spec.color if gizmo.spec is not None else None
        if color == "fail":
            raise sp.ReconcileError("color fail: the backend is unreachable")
        if color == "bad":
            raise sp.TerminalError("color bad: no such color")

    def setup(manager: sp.Manager) -> None:
        manager.controller("gizmo-health").for_(Gizmo).kstatus_conditions().build(reconcile)

    return setup


@pytest.mark.usefixtures("gizmo_crd")
async def test_kstatus_reads_ready_reconciling_and_stalled(
    k8s: Client, namespace: str, kubeconfig_path: Path, kstatus_binary: Path
) -> None:
    """kstatus reads setpoint's conditions as Current, InProgress and Failed, in turn.

    A Gizmo that reconciles cleanly is Current with Ready True and observedGeneration set; a
    spec whose reconcile fails with a retryable error is InProgress because of Reconciling
    (kstatus' message is the error); a terminal error is Failed (Stalled); a spec change
    not yet reconciled (the object paused) is InProgress by its generation alone; and the
    next clean reconcile is Current again, with Reconciling and Stalled gone.
    """
    binary = kstatus_binary

    async def get() -> dict[str, Any]:
        return await k8s.get(GIZMO, "g", namespace=namespace)

    async def update(color: str, paused: bool | None = None) -> None:
        # A merge patch: the controller's own status writes must not make it a Conflict.
        patch: dict[str, Any] = {"spec": {"color": color}}
        if paused is not None:
            value = "true" if paused else None
            patch["metadata"] = {"annotations": {"setpoint.dev/paused": value}}
        await k8s.patch(GIZMO, "g", MergePatch(patch), namespace=namespace)

    async def verdict_is(status: str, says: str = "") -> bool:
        verdict = await kstatus(binary, await get())
        return verdict["status"] == status and says in verdict["message"]

    async with run_operator(operator(), kubeconfig=kubeconfig_path):
        await k8s.create(
            {
                "apiVersion": GIZMO.api_version,
                "kind": "Gizmo",
                "metadata": {"name": "g", "namespace": namespace},
                "spec": {"color": "ok"},
            }
        )

        async def ready_for_generation() -> bool:
            obj = await get()
            status = obj.get("status") or {}
            ready = find_condition(status, "Ready")
            return (
                ready is not None
                and ready.status == "True"
                and status.get("observedGeneration") == obj["metadata"]["generation"]
            )

        await eventually(ready_for_generation, timeout=30, description="Ready True")
        assert await verdict_is("Current")

        await update("fail")
        await eventually(
            lambda: verdict_is("InProgress", "color fail"), timeout=30, description="InProgress"
        )
        reconciling = find_condition((await get())["status"], "Reconciling")
        assert reconciling is not None and reconciling.reason == "ProgressingWithRetry"

        await update("bad")
        await eventually(
            lambda: verdict_is("Failed", "color bad"), timeout=30, description="Failed"
        )
        assert find_condition((await get())["status"], "Reconciling") is None

        await update("ok", paused=True)
        await eventually(
            lambda: verdict_is("InProgress", "latest observed generation"),
            timeout=30,
            description="InProgress by generation",
        )

        await update("ok", paused=False)
        await eventually(lambda: verdict_is("Current"), timeout=30, description="Current")
        final = (await get())["status"]
        assert find_condition(final, "Stalled") is None
        assert find_condition(final, "Reconciling") is None
        ready = find_condition(final, "Ready")
        assert ready is not None and (ready.status, ready.reason) == ("True", "Succeeded")


class BareStatus(sp.Model):
    """A status schema without observedGeneration: the server prunes it."""

    conditions: list[sp.Condition] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["type"]
    )
    """Conditions."""


@sp.resource(group="kstatus.test.setpoint.dev", version="v1")
class Bare(sp.Resource):
    """A kind whose status schema cannot hold observedGeneration."""

    spec: dict[str, Any] | None = sp.field(default=None, preserve_unknown_fields=True)
    status: BareStatus | None = None


@pytest.fixture
async def bare_crd(k8s: Client) -> None:
    await apply_crd(k8s, crd_for(Bare))


@pytest.mark.usefixtures("bare_crd")
async def test_a_status_schema_that_prunes_the_fields_stops_the_writes(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """A status schema that drops observedGeneration gets one status write, then none.

    The server prunes status.observedGeneration from the controller's first write; the
    controller sees the written object lacks it, warns and stops writing the conditions.
    Three later reconciles (label changes) send no status request; without the check each
    would see a transition again and send a write the server prunes.
    """
    calls: list[str] = []

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        calls.append(request.name)

    def setup(manager: sp.Manager) -> None:
        manager.controller("bare-health").for_(Bare).kstatus_conditions().build(reconcile)

    async with run_operator(setup, kubeconfig=kubeconfig_path) as op:

        def status_writes() -> float:
            return op.metrics.value("rest_client_requests_total", method="PUT")

        await k8s.create(
            {
                "apiVersion": Bare.gvk.api_version,
                "kind": "Bare",
                "metadata": {"name": "b", "namespace": namespace},
                "spec": {"x": 1},
            }
        )

        async def written() -> bool:
            obj = await k8s.get(Bare.gvk, "b", namespace=namespace)
            return find_condition(obj.get("status") or {}, "Ready") is not None

        await eventually(written, timeout=30, description="the first status write")
        await op.wait_idle(timeout=30, settle=1.0)
        obj = await k8s.get(Bare.gvk, "b", namespace=namespace)
        assert "observedGeneration" not in obj["status"]
        assert status_writes() == 1
        for n in range(3):
            target = len(calls) + 1

            def reconciled(target: int = target) -> bool:
                return len(calls) >= target

            await k8s.patch(
                Bare.gvk,
                "b",
                MergePatch({"metadata": {"labels": {"n": str(n)}}}),
                namespace=namespace,
            )
            await eventually(reconciled, timeout=30, description="a reconcile")
        await op.wait_idle(timeout=30, settle=1.0)
        assert status_writes() == 1
