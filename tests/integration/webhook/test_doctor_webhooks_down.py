"""A webhook that is down: the API server's error, and what ``setpoint doctor webhooks`` prints."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client, NotFound
from setpoint.testing import free_port
from setpoint.testing.controlplane import find_binaries
from setpoint.testing.waits import eventually
from setpoint.tls.certs import CertificateAuthority
from tests._support.cert_targets import crd_with_webhook, validating_configuration

DOCTOR = (sys.executable, "-m", "setpoint", "doctor", "webhooks")


async def run(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command in a thread (the event loop stays free), capturing its output."""
    return await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
async def dead_webhooks(k8s: Client) -> AsyncIterator[dict[str, Any]]:
    """A CRD and a validating webhook (failurePolicy Fail) pointing at a port nobody serves."""
    group = f"down-{uuid.uuid4().hex[:8]}.test.setpoint.dev"
    port = free_port()
    ca = base64.b64encode(CertificateAuthority("doctor-test-ca").cert_pem).decode()
    crd = crd_with_webhook(group)
    crd["spec"]["conversion"]["webhook"]["clientConfig"] = {
        "url": f"https://127.0.0.1:{port}/convert",
        "caBundle": ca,
    }
    hooks = validating_configuration(f"down-{group}", group)
    hook = hooks["webhooks"][0]
    hook["failurePolicy"] = "Fail"
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/validate", "caBundle": ca}
    await k8s.create(crd)
    await k8s.create(hooks)
    probe = GroupVersionKind(group, "v1", "Probe")

    async def served() -> bool:
        await k8s.list(probe, namespace="default")
        return True

    await eventually(served, timeout=60, description="Probes served")
    try:
        yield {"group": group, "port": port, "crd": crd, "hooks": hooks, "probe": probe}
    finally:
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.ValidatingWebhookConfiguration, hooks["metadata"]["name"])
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, crd["metadata"]["name"])


async def test_a_webhook_that_is_down_is_named_by_the_api_server_and_the_doctor(
    dead_webhooks: dict[str, Any], kubeconfig_path: Path, namespace: str, tmp_path: Path
) -> None:
    """kubectl shows "connection refused" for the webhook; the doctor says which, and what to do."""
    group, port = dead_webhooks["group"], dead_webhooks["port"]
    manifest = tmp_path / "probe.json"
    manifest.write_bytes(
        orjson.dumps(
            {
                "apiVersion": f"{group}/v1",
                "kind": "Probe",
                "metadata": {"name": "p1", "namespace": namespace},
            }
        )
    )
    kubectl = find_binaries().kubectl
    assert kubectl is not None
    refused = await run(
        str(kubectl), "--kubeconfig", str(kubeconfig_path), "create", "-f", str(manifest)
    )
    assert refused.returncode == 1
    webhook = dead_webhooks["hooks"]["webhooks"][0]["name"]
    assert f'failed calling webhook "{webhook}"' in refused.stderr
    assert f"127.0.0.1:{port}: connect: connection refused" in refused.stderr

    doctor = await run(*DOCTOR, "--kubeconfig", str(kubeconfig_path))
    assert doctor.returncode == 0, doctor.stderr
    rows = {line.split()[0]: line.split() for line in doctor.stdout.splitlines() if line.strip()}
    crd_name = dead_webhooks["crd"]["metadata"]["name"]
    assert rows[crd_name][1:4] == ["conversion", f"https://127.0.0.1:{port}/convert", "NO"]
    assert rows[webhook][1:4] == ["validating", f"https://127.0.0.1:{port}/validate", "NO"]
    assert f"- {webhook} (ValidatingWebhookConfiguration down-{group}):" in doctor.stdout
    assert (
        f"https://127.0.0.1:{port}/validate does not answer (connection refused: nothing "
        f"listens on 127.0.0.1:{port}): the webhook server is not running there"
    ) in doctor.stdout

    as_json = await run(*DOCTOR, "--kubeconfig", str(kubeconfig_path), "-o", "json")
    report = orjson.loads(as_json.stdout)
    assert report["healthy"] is False
    ours = {
        w["webhook"]: w for w in report["webhooks"] if group in w["source"] or group in w["webhook"]
    }
    assert ours[webhook]["answers"] is False
    assert ours[webhook]["answer"] == f"connection refused: nothing listens on 127.0.0.1:{port}"
    assert ours["conversion"]["caBundleExpires"] is not None
