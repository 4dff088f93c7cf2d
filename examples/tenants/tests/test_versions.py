"""Tenant v1alpha1 beside v1: the operator's conversion webhook, and the kustomize layout for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio
import yaml
from tenants import Tenant, TenantV1Alpha1

import setpoint as sp
from setpoint.api.conversion import CONVERSION_DATA_ANNOTATION
from setpoint.migrate.install import apply_crd
from setpoint.testing import find_binaries

from .tenants_support import (
    CONFIG_DIR,
    Operator,
    Tenants,
    install_converting_crd,
    load_yaml,
    unique,
    wait_ready,
)

V1ALPHA1 = TenantV1Alpha1.gvk


@pytest_asyncio.fixture(loop_scope="session")
async def converting(k8s: sp.Client, operator: Operator) -> AsyncIterator[Operator]:
    """The Tenant CRD pointed at this operator's webhook (loopback URL, its test CA)."""
    await install_converting_crd(k8s, operator)
    try:
        yield operator
    finally:
        # Back to the generated CRD (in-cluster Service config), replacing the URL config.
        (generated,) = load_yaml(CONFIG_DIR / "crd" / "bases" / "tenants.setpoint.dev_tenants.yaml")
        await apply_crd(k8s, generated)


async def test_a_tenant_written_at_v1alpha1_converges_and_reads_at_v1(
    k8s: sp.Client, converting: Operator, tenants: Tenants
) -> None:
    """A v1alpha1 client's Tenant is converted by the operator's webhook and reconciled.

    The Tenant is created at v1alpha1 (admins, flat quota fields, network Open); the
    operator, which reads v1 only, makes it Ready, and reading it at v1 shows adminGroup,
    the quota object and isolated=false. The ResourceQuota it made has the v1alpha1 quota.
    """
    name = unique("old")
    await k8s.create(
        {
            "apiVersion": V1ALPHA1.api_version,
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {
                "namespaces": [name],
                "admins": "old-admins",
                "cpuQuota": "1",
                "memoryQuota": "1Gi",
                "podQuota": 3,
                "network": "Open",
            },
        }
    )
    tenants.created.append(name)
    await wait_ready(k8s, name)
    hub = await k8s.get(Tenant, name)
    assert hub.spec.admin_group == "old-admins"
    assert (hub.spec.quota.cpu, hub.spec.quota.memory, hub.spec.quota.pods) == ("1", "1Gi", 3)
    assert hub.spec.isolated is False
    quota = await k8s.get(sp.kinds.ResourceQuota, "tenant-quota", namespace=name)
    assert quota["spec"]["hard"]["pods"] == "3"
    assert "/convert" in converting.running.manager.webhook_server.paths


async def test_a_v1alpha1_update_keeps_what_only_v1_can_say(
    k8s: sp.Client, converting: Operator, tenants: Tenants
) -> None:
    """containerDefaults (v1 only) survive a v1alpha1 client's read-modify-write.

    A Tenant created at v1 with custom container defaults is read at v1alpha1 (the hub's
    data in the conversion annotation), its podQuota changed and written back at v1alpha1;
    at v1 the pods quota changed and the container defaults are still the custom ones.
    """
    name = unique("keep")
    await tenants.create(name, [name], container_defaults={"cpu": "250m", "memory": "128Mi"})
    await wait_ready(k8s, name)
    await converting.quiescent()
    for _ in range(5):  # the operator's status writes may race the read-modify-write
        old = await k8s.get(TenantV1Alpha1, name)
        assert CONVERSION_DATA_ANNOTATION in old.metadata.annotations
        old.spec.pod_quota = 11
        try:
            await k8s.update(old)
            break
        except sp.Conflict:
            continue
    hub = await k8s.get(Tenant, name)
    assert hub.spec.quota.pods == 11
    assert (hub.spec.container_defaults.cpu, hub.spec.container_defaults.memory) == (
        "250m",
        "128Mi",
    )
    assert CONVERSION_DATA_ANNOTATION not in hub.metadata.annotations


async def test_the_kustomize_layout_wires_the_crd_to_the_webhook_service() -> None:
    """kubectl kustomize config/default: the CRD's webhook Service follows the renames.

    The conversion clientConfig names tenants-webhook-service in tenants-system on /convert;
    that Service exists and targets the manager's webhook-server port (9443), which the
    Deployment exposes. (Where the certificate comes from is test_kustomize_layouts.py's.)
    """
    kubectl = find_binaries().kubectl
    assert kubectl is not None
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        "kustomize",
        str(CONFIG_DIR / "default"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}
    crd = docs[("CustomResourceDefinition", "tenants.tenants.setpoint.dev")]
    service_ref = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert service_ref == {
        "name": "tenants-webhook-service",
        "namespace": "tenants-system",
        "path": "/convert",
        "port": 443,
    }
    service = docs[("Service", "tenants-webhook-service")]
    assert service["metadata"]["namespace"] == "tenants-system"
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "protocol": "TCP", "targetPort": "webhook-server"}
    ]
    deployment = docs[("Deployment", "tenants-controller-manager")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "webhook-server", "containerPort": 9443, "protocol": "TCP"} in container[
        "ports"
    ]
    assert "--webhook-bind-address=:9443" in container["args"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
