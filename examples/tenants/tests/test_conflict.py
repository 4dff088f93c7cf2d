"""Two Tenants claiming one namespace: the first keeps it, the second is Degraded."""

from __future__ import annotations

from tenants import TENANT_LABEL

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import TENANT, Operator, Tenants, condition, unique, wait_ready


async def test_a_namespace_claimed_by_another_tenant_is_reported_and_left_alone(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """The second claim on a namespace makes its Tenant Degraded, naming the first Tenant.

    CEL sees one object at a time, so it cannot refuse the second claim; the operator finds
    it through a cache index (namespace -> Tenants). The conflicting namespace keeps the
    first Tenant's label, controller and quota; the second Tenant's other namespace is
    provisioned normally. When the first Tenant is deleted and the garbage collector has
    removed the namespace, the second Tenant takes it over and becomes Ready.
    """
    first, second = unique("first"), unique("second")
    shared, own = f"{first}-shared", f"{second}-own"
    await tenants.create(first, [shared], quota={"pods": 3})
    await wait_ready(k8s, first)
    await tenants.create(second, [shared, own], quota={"pods": 9})

    async def degraded() -> dict | None:
        obj = await k8s.get(TENANT, second)
        found = condition(obj, "Degraded")
        return found if found and found["status"] == "True" else None

    found = await eventually(degraded, timeout=30, description=f"{second} Degraded")
    assert found["reason"] == "NamespaceConflict"
    assert f"already claimed by Tenant {first!r}" in found["message"]
    assert repr(shared) in found["message"]
    obj = await k8s.get(TENANT, second)
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert obj["status"]["namespaces"] == [own]
    entry = await operator.reconciler.directory.get(second)
    assert entry is not None and entry.namespaces == (own,)  # what it got, not what it asked

    namespace = await k8s.get(kinds.Namespace, shared)
    assert namespace["metadata"]["labels"][TENANT_LABEL] == first
    (ref,) = [r for r in namespace["metadata"]["ownerReferences"] if r.get("controller")]
    assert ref["name"] == first
    quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=shared)
    assert quota["spec"]["hard"]["pods"] == "3"
    assert [r["name"] for r in quota["metadata"]["ownerReferences"]] == [first]
    own_quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=own)
    assert own_quota["spec"]["hard"]["pods"] == "9"

    # The first Tenant goes: once its namespace is collected, the second claim wins.
    await k8s.delete(TENANT, first)
    taken = await wait_ready(k8s, second, timeout=180)
    assert taken["status"]["namespaces"] == sorted([shared, own])
    namespace = await k8s.get(kinds.Namespace, shared)
    assert namespace["metadata"]["labels"][TENANT_LABEL] == second
    entry = await operator.reconciler.directory.get(second)
    assert entry is not None and entry.namespaces == tuple(sorted([shared, own]))
