"""Quota usage in the Tenant's status comes from the ResourceQuota's status.used."""

from __future__ import annotations

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import TENANT, Operator, Tenants, unique, wait_ready


async def test_a_pod_in_a_tenant_namespace_shows_in_the_tenant_status(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """A Pod object counts against the quota, and the Tenant's status reports it.

    There is no kubelet: the Pod is only stored, but kube-apiserver's quota admission and
    kube-controller-manager's quota controller count it. The Pod declares no resources, so
    the LimitRange's defaults (500m CPU, 512Mi memory) are what the quota counts. The
    namespace's default ServiceAccount must exist before a Pod can be created (the
    ServiceAccount admission plugin requires it), so the test waits for it first.
    """
    name = unique("usage")
    ns = f"{name}-a"
    await tenants.create(name, [ns], quota={"pods": 2})
    await wait_ready(k8s, name)

    async def service_account() -> bool:
        await k8s.get(kinds.ServiceAccount, "default", namespace=ns)
        return True

    await eventually(service_account, timeout=60, description="the default ServiceAccount")
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": ns},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
        }
    )

    async def counted() -> dict | None:
        tenant = await k8s.get(TENANT, name)
        usage = (tenant.get("status") or {}).get("usage") or []
        entry = next((u for u in usage if u["namespace"] == ns), None)
        return entry if entry and entry.get("pods") == "1" else None

    entry = await eventually(counted, timeout=60, description="pods used = 1 in status")
    assert entry["cpu"] == "500m"
    assert entry["memory"] == "512Mi"
