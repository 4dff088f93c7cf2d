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
from setpoint.testing import eventually, run_operator
from tests._support.kinds import GIZMO, Gizmo

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def kstatus_binary() -> Path:
    """The kstatus checker, built from Go modules on first use (skipped without Go)."""
    if shutil.which("go") is None:
        pytest.skip("Go is not installed: the kstatus checker is built from Go modules")
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

    async def update(color: str, annotations: dict[str, str] | None = None) -> None:
        live = await get()
        live["spec"] = {"color": color}
        if annotations is not None:
            live["metadata"]["annotations"] = annotations
        await k8s.update(live)

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

        await update("ok", {"setpoint.dev/paused": "true"})
        await eventually(
            lambda: verdict_is("InProgress", "latest observed generation"),
            timeout=30,
            description="InProgress by generation",
        )

        await update("ok", {})
        await eventually(lambda: verdict_is("Current"), timeout=30, description="Current")
        final = (await get())["status"]
        assert find_condition(final, "Stalled") is None
        assert find_condition(final, "Reconciling") is None
        ready = find_condition(final, "Ready")
        assert ready is not None and (ready.status, ready.reason) == ("True", "Succeeded")
