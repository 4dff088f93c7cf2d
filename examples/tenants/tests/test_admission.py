"""The validating webhook refuses bad Tenants at ``kubectl`` time, and warns about risky ones."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest_asyncio
import tenants.webhooks
from tenants import TenantV1Alpha1

import setpoint as sp
from setpoint import kinds
from setpoint.crd import (
    WebhookClientConfig,
    find_admission_webhooks,
    webhook_configurations,
)
from setpoint.migrate.install import apply_crd
from setpoint.testing import eventually
from setpoint.testing.controlplane import find_binaries

from .tenants_support import (
    CONFIG_DIR,
    Operator,
    Tenants,
    install_converting_crd,
    load_yaml,
    tenant_manifest,
    unique,
)


@pytest_asyncio.fixture(loop_scope="session")
async def validating(operator: Operator, k8s: sp.Client) -> AsyncIterator[str]:
    """The generated ValidatingWebhookConfiguration, pointed at the in-process operator."""
    config = operator.running.webhook_client_config()
    (configuration,) = webhook_configurations(
        find_admission_webhooks([tenants.webhooks]),
        client_config=WebhookClientConfig(url=config.url, ca_bundle=config.ca_bundle),
        validating_name=unique("tenants-validating"),
    )
    name = configuration["metadata"]["name"]
    await k8s.create(configuration)
    try:

        async def in_effect() -> bool:
            # The API server picks configurations up asynchronously: wait for a refusal.
            try:
                await k8s.create(tenant_manifest(unique("probe"), ["kube-probe"]), dry_run=True)
            except sp.ApiError as exc:
                return "belongs to the cluster" in str(exc)
            return False

        await eventually(in_effect, timeout=60, description="the Tenant webhook in effect")
        yield name
    finally:
        with contextlib.suppress(sp.NotFound):
            await k8s.delete(kinds.ValidatingWebhookConfiguration, name)


async def kubectl(kubeconfig: Path, *args: str, stdin: bytes) -> tuple[int, str, str]:
    """The plane's kubectl, in a thread: ``(exit code, stdout, stderr)``."""
    binary = find_binaries().kubectl
    assert binary is not None
    done = await asyncio.to_thread(
        subprocess.run,
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_reserved_and_claimed_namespaces_are_refused_with_a_reason(
    validating: str, k8s: sp.Client, kubeconfig_path: Path
) -> None:
    """kube-system is refused by kubectl; a namespace another Tenant has names that Tenant."""
    bad = orjson.dumps(tenant_manifest(unique("greedy"), ["kube-system"]))
    code, _, stderr = await kubectl(kubeconfig_path, "create", "-f", "-", stdin=bad)
    assert code == 1
    assert (
        'admission webhook "vtenant-v1.tenants.setpoint.dev" denied the request: '
        "spec.namespaces: 'kube-system' belongs to the cluster"
    ) in stderr

    owners = Tenants(k8s)
    first, namespace = unique("first"), unique("shared")
    try:
        await owners.create(first, [namespace])
        second = tenant_manifest(unique("second"), [unique("own"), namespace])
        try:
            await k8s.create(second)
        except sp.ApiError as exc:
            refused = str(exc)
        else:
            raise AssertionError("the second claim on a namespace was accepted")
        assert f"spec.namespaces: {namespace!r} is already claimed by Tenant {first!r}" in refused
    finally:
        await owners.delete_all()


async def test_risky_changes_pass_with_warnings_kubectl_prints(
    validating: str, k8s: sp.Client, kubeconfig_path: Path
) -> None:
    """An open Tenant, and an update dropping a namespace, are accepted with warnings."""
    owners = Tenants(k8s)
    name, keep, drop = unique("open"), unique("keep"), unique("drop")
    try:
        manifest = tenant_manifest(name, [keep, drop], isolated=False)
        code, _, stderr = await kubectl(
            kubeconfig_path, "create", "-f", "-", stdin=orjson.dumps(manifest)
        )
        owners.created.append(name)
        assert code == 0, stderr
        assert "Warning: spec.isolated is false" in stderr
        manifest["spec"]["namespaces"] = [keep]
        manifest["spec"]["isolated"] = True
        code, _, stderr = await kubectl(
            kubeconfig_path, "apply", "-f", "-", stdin=orjson.dumps(manifest)
        )
        assert code == 0, stderr
        assert f"Warning: spec.namespaces: {drop} will be deleted, with everything in them" in (
            stderr
        )
    finally:
        await owners.delete_all()


async def test_a_v1alpha1_client_is_told_about_the_hubs_fields(
    validating: str, k8s: sp.Client, operator: Operator, kubeconfig_path: Path
) -> None:
    """A v1alpha1 request is validated as v1: the warning names v1's field, not the client's.

    The webhook is registered for v1 (the hub) with matchPolicy Equivalent, so the API
    server converts a v1alpha1 Tenant with network Open to v1 first, and kubectl shows its
    client the warning about spec.isolated, a field that client never wrote. The webhooks
    guide tells validator authors to word such messages for every version's clients.
    """
    await install_converting_crd(k8s, operator)
    try:
        name = unique("old-client")
        old = {
            "apiVersion": TenantV1Alpha1.gvk.api_version,
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {"namespaces": [name], "admins": "ops", "network": "Open"},
        }
        code, stdout, stderr = await kubectl(
            kubeconfig_path, "create", "--dry-run=server", "-f", "-", stdin=orjson.dumps(old)
        )
        assert code == 0, stderr
        assert "created (server dry run)" in stdout
        assert "Warning: spec.isolated is false" in stderr, stderr
        assert "network" not in stderr
    finally:
        (generated,) = load_yaml(CONFIG_DIR / "crd" / "bases" / "tenants.setpoint.dev_tenants.yaml")
        await apply_crd(k8s, generated)
