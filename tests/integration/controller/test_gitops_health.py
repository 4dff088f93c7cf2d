"""`setpoint generate gitops` output, run by Argo CD's own libraries on real objects.

The health check runs in gopher-lua and the ignoreDifferences in gojq, as Argo CD runs them
(the program in scripts/argocd, built once into ~/.cache/setpoint/argocd by
scripts/build_argocd.py); each verdict is compared with kstatus' (scripts/kstatus) on the
same object, which the real plane's controller wrote.
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
import yaml

import setpoint as sp
from setpoint.api import kinds
from setpoint.client import Client
from setpoint.client.patch import MergePatch
from setpoint.testing import eventually, run_operator
from tests._support.kinds import GIZMO, Gizmo

ROOT = Path(__file__).resolve().parents[3]


def _build(script: str) -> Path:
    if shutil.which("go") is None:
        pytest.fail("Go is not installed: the checkers are built from Go modules")
    built = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script)],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def checkers() -> tuple[Path, Path]:
    """(kstatus, argocd) binaries, built from Go modules on first use; no Go fails the test."""
    return _build("build_kstatus.py"), _build("build_argocd.py")


@pytest.fixture
def argocd_cm(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The data of the argocd-cm `setpoint generate gitops` writes, and Gizmo's script file."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "setpoint",
            "generate",
            "gitops",
            str(ROOT / "tests" / "_support" / "kinds.py"),
            "--output-dir",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    document = yaml.safe_load((tmp_path / "gitops" / "argocd-cm.yaml").read_text())
    data: dict[str, str] = document["data"]
    script = tmp_path / "gizmo.lua"
    script.write_text(data["resource.customizations.health.test.setpoint.dev_Gizmo"])
    return data, script


async def _run(binary: Path, args: list[str], obj: dict[str, Any]) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        str(binary), *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate(json.dumps(obj).encode() + b"\n")
    answer: dict[str, Any] = json.loads(out)
    assert "error" not in answer, answer
    return answer


def operator() -> Any:
    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        gizmo = await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
        color = gizmo.spec.color if gizmo.spec is not None else None
        if color == "fail":
            raise sp.ReconcileError("color fail: the backend is unreachable")
        if color == "bad":
            raise sp.TerminalError("color bad: no such color")
        await sp.apply_child(
            ctx.client,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"{request.name}-child",
                    "namespace": request.namespace,
                    "annotations": {"team": "gizmos"},
                },
                "data": {"color": color or ""},
            },
            owner=gizmo,
            field_manager="gizmo-health",
        )

    def setup(manager: sp.Manager) -> None:
        (
            manager.controller("gizmo-health")
            .for_(Gizmo)
            .owns(kinds.ConfigMap)
            .kstatus_conditions()
            .build(reconcile)
        )

    return setup


@pytest.mark.usefixtures("gizmo_crd")
async def test_argocd_reads_the_generated_health_check_as_kstatus_does(
    k8s: Client,
    namespace: str,
    kubeconfig_path: Path,
    checkers: tuple[Path, Path],
    argocd_cm: tuple[dict[str, str], Path],
) -> None:
    """Argo CD's Lua VM reads the generated check as kstatus reads the conditions.

    On one Gizmo the real controller takes through each state: not reconciled yet
    (Progressing; kstatus says Current, the documented difference), Ready (Healthy and
    Current), a retried error (Progressing and InProgress, both with the error), a terminal
    error (Degraded and Failed), paused with a new spec (Suspended; InProgress), the same
    object without the pause annotation (Progressing and InProgress by generation), resumed
    (Healthy and Current). The generated ignoreDifferences, run by gojq as Argo CD's
    normalizer runs them, remove the setpoint.dev/applied-* annotation from the live child
    and nothing else. Fails without the health key for Gizmo, or with a script that needs a
    Lua library Argo CD does not open.
    """
    kstatus_binary, argocd_binary = checkers
    data, script = argocd_cm

    async def get() -> dict[str, Any]:
        return await k8s.get(GIZMO, "g", namespace=namespace)

    async def verdicts(obj: dict[str, Any] | None = None) -> tuple[str, str, str]:
        obj = obj if obj is not None else await get()
        argo = await _run(argocd_binary, ["health", str(script)], obj)
        kstatus = await _run(kstatus_binary, [], obj)
        return argo["status"], kstatus["status"], argo["message"]

    async def reads(argo: str, kstatus: str, says: str = "") -> bool:
        got = await verdicts()
        return got[:2] == (argo, kstatus) and says in got[2]

    async def update(color: str, paused: bool | None = None) -> None:
        patch: dict[str, Any] = {"spec": {"color": color}}
        if paused is not None:
            patch["metadata"] = {"annotations": {"setpoint.dev/paused": "true" if paused else None}}
        await k8s.patch(GIZMO, "g", MergePatch(patch), namespace=namespace)

    await k8s.create(
        {
            "apiVersion": GIZMO.api_version,
            "kind": "Gizmo",
            "metadata": {"name": "g", "namespace": namespace},
            "spec": {"color": "ok"},
        }
    )
    assert (await verdicts())[:2] == ("Progressing", "Current")

    async with run_operator(operator(), kubeconfig=kubeconfig_path):
        await eventually(lambda: reads("Healthy", "Current"), timeout=30, description="Healthy")

        await update("fail")
        await eventually(
            lambda: reads("Progressing", "InProgress", "color fail"),
            timeout=30,
            description="Progressing",
        )

        await update("bad")
        await eventually(
            lambda: reads("Degraded", "Failed", "color bad"), timeout=30, description="Degraded"
        )

        await update("ok", paused=True)
        await eventually(
            lambda: reads("Suspended", "InProgress"), timeout=30, description="Suspended"
        )
        unpaused = await get()
        del unpaused["metadata"]["annotations"]["setpoint.dev/paused"]
        argo, kstatus, message = await verdicts(unpaused)
        assert (argo, kstatus) == ("Progressing", "InProgress")
        assert "is not observed yet" in message

        await update("ok", paused=False)
        await eventually(lambda: reads("Healthy", "Current"), timeout=30, description="Healthy")

    child = await k8s.get(kinds.ConfigMap, "g-child", namespace=namespace)
    annotations = child["metadata"]["annotations"]
    assert any(key.startswith("setpoint.dev/applied-") for key in annotations)
    expressions = yaml.safe_load(data["resource.customizations.ignoreDifferences.all"])
    normalized = await _run(argocd_binary, ["ignore", *expressions["jqPathExpressions"]], child)
    assert normalized["metadata"]["annotations"] == {"team": "gizmos"}
    assert normalized["data"] == child["data"]


async def test_argocd_ignores_the_ca_bundles_setpoint_injects(
    k8s: Client, namespace: str, checkers: tuple[Path, Path], argocd_cm: tuple[dict[str, str], Path]
) -> None:
    """The generated ignoreDifferences drop injected caBundles from live objects, nothing else.

    A ValidatingWebhookConfiguration stored by the real API server with a caBundle in each of
    its two webhooks, and a CRD with a conversion webhook's caBundle (as generate crd writes it
    with --webhook-ca-file), are normalized by gojq with the expressions of the generated
    argocd-cm, as Argo CD's diff normalizer does: the caBundles are gone and the rest of each
    object is unchanged. Fails if a path misses the field or an expression cannot run on an
    object that lacks it (the CRD of a kind without conversion).
    """
    _, argocd_binary = checkers
    data, _ = argocd_cm
    bundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="

    def expressions(suffix: str) -> list[str]:
        key = f"resource.customizations.ignoreDifferences.{suffix}"
        found: list[str] = yaml.safe_load(data[key])["jqPathExpressions"]
        return found

    def webhook(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "clientConfig": {"url": f"https://127.0.0.1:1/{name}", "caBundle": bundle},
            "rules": [
                {
                    "apiGroups": ["nothing.test.setpoint.dev"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["nothings"],
                }
            ],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }

    name = f"gitops-{namespace}"
    await k8s.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [webhook("a.test.setpoint.dev"), webhook("b.test.setpoint.dev")],
        }
    )
    try:
        live = await k8s.get(kinds.ValidatingWebhookConfiguration, name)
    finally:
        await k8s.delete(kinds.ValidatingWebhookConfiguration, name)
    normalized = await _run(
        argocd_binary,
        ["ignore", *expressions("admissionregistration.k8s.io_ValidatingWebhookConfiguration")],
        live,
    )
    for hook in normalized["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]
        hook["clientConfig"]["caBundle"] = bundle
    assert normalized == live

    crd_expressions = expressions("apiextensions.k8s.io_CustomResourceDefinition")
    crd = await k8s.get(kinds.CustomResourceDefinition, f"gizmos.{GIZMO.group}")
    assert await _run(argocd_binary, ["ignore", *crd_expressions], crd) == crd
    converting = {
        **crd,
        "spec": {
            **crd["spec"],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": "https://127.0.0.1:1/convert", "caBundle": bundle},
                    "conversionReviewVersions": ["v1"],
                },
            },
        },
    }
    normalized = await _run(argocd_binary, ["ignore", *crd_expressions], converting)
    assert normalized["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:1/convert"
    }
