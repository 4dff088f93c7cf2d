"""A Tenant's life: created, changed, deleted, with everything it owns following it."""

from __future__ import annotations

import time
from typing import Any

from tenants import TENANT_LABEL, Tenant

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import TENANT, Operator, Tenants, unique, wait_gone, wait_ready

CHILDREN = (
    (kinds.ResourceQuota, "tenant-quota"),
    (kinds.LimitRange, "tenant-limits"),
    (kinds.RoleBinding, "tenant-admins"),
    (kinds.NetworkPolicy, "tenant-isolation"),
)


def controlled_by(obj: dict[str, Any], tenant: dict[str, Any]) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(
        r.get("controller") is True
        and r["kind"] == "Tenant"
        and r["uid"] == tenant["metadata"]["uid"]
        for r in refs
    )


async def test_a_tenant_gets_its_namespaces_and_children(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """A new Tenant converges: namespaces, their four children, the directory entry, status.

    Each namespace carries the tenant label and a controller reference to the Tenant. In
    each, the ResourceQuota holds the spec's quota, the LimitRange the container defaults,
    the RoleBinding gives the admin group the admin ClusterRole, and the NetworkPolicy
    denies ingress except from namespaces with the tenant's label; all are controlled by the
    Tenant. The directory holds exactly one entry with the spec's namespaces, and status
    reports Ready, Degraded=False, the observed generation and the namespaces.
    """
    name = unique("life")
    namespaces = [f"{name}-a", f"{name}-b"]
    await tenants.create(
        name, namespaces, admin_group="team-a", quota={"cpu": 2, "memory": "3Gi", "pods": 7}
    )
    tenant = await wait_ready(k8s, name)

    for ns in namespaces:
        namespace = await k8s.get(kinds.Namespace, ns)
        assert namespace["metadata"]["labels"][TENANT_LABEL] == name
        assert controlled_by(namespace, tenant)
        for kind, child_name in CHILDREN:
            child = await k8s.get(kind, child_name, namespace=ns)
            assert controlled_by(child, tenant), f"{kind.kind} {ns}/{child_name}"
        quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
        assert quota["spec"]["hard"] == {
            "requests.cpu": "2",
            "requests.memory": "3Gi",
            "pods": "7",
        }
        limits = await k8s.get(kinds.LimitRange, "tenant-limits", namespace=ns)
        assert limits["spec"]["limits"][0]["default"] == {"cpu": "500m", "memory": "512Mi"}
        binding = await k8s.get(kinds.RoleBinding, "tenant-admins", namespace=ns)
        assert binding["roleRef"]["name"] == "admin"
        assert binding["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-a"}
        ]
        policy = await k8s.get(kinds.NetworkPolicy, "tenant-isolation", namespace=ns)
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert policy["spec"]["podSelector"] == {}
        assert policy["spec"]["ingress"] == [
            {"from": [{"namespaceSelector": {"matchLabels": {TENANT_LABEL: name}}}]}
        ]

    entry = await operator.reconciler.directory.get(name)
    assert entry is not None
    assert entry.uid == tenant["metadata"]["uid"]
    assert entry.namespaces == tuple(sorted(namespaces))
    assert entry.admin_group == "team-a"

    status = tenant["status"]
    assert status["namespaces"] == sorted(namespaces)
    assert status["observedGeneration"] == tenant["metadata"]["generation"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False"
    assert Tenant.from_object(tenant).metadata.finalizers == ["tenants.setpoint.dev/directory"]


async def test_three_tenants_converge(k8s: sp.Client, operator: Operator, tenants: Tenants) -> None:
    """Three Tenants with two namespaces each all become Ready; the time it takes is printed.

    The figure (creation of the first Tenant to the last one Ready) is the README's
    "time to converge 3 tenants".
    """
    names = [unique("three") for _ in range(3)]
    started = time.monotonic()
    for name in names:
        await tenants.create(name, [f"{name}-x", f"{name}-y"])
    for name in names:
        await wait_ready(k8s, name)
    elapsed = time.monotonic() - started
    print(f"\n3 tenants (6 namespaces, 24 children) converged in {elapsed:.2f} s")
    entries = {e.name for e in await operator.reconciler.directory.entries()}
    assert set(names) <= entries


async def test_changes_to_quota_namespaces_and_isolation_are_applied(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """Changing a Tenant's spec reshapes what it owns, and removed namespaces are deleted.

    The quota change reaches every ResourceQuota; a namespace added to the spec is created
    with its children; a namespace removed from the spec is deleted (the other stays); the
    admin group change rewrites the RoleBindings; turning isolation off deletes the
    NetworkPolicies; the directory entry follows the spec.
    """
    name = unique("change")
    a, b, c = f"{name}-a", f"{name}-b", f"{name}-c"
    await tenants.create(name, [a, b])
    await wait_ready(k8s, name)

    await k8s.patch(
        TENANT,
        name,
        sp.MergePatch(
            {
                "spec": {
                    "namespaces": [b, c],
                    "adminGroup": "team-b",
                    "quota": {"pods": 3},
                    "isolated": False,
                }
            }
        ),
    )
    tenant = await wait_ready(k8s, name)
    assert tenant["status"]["namespaces"] == [b, c]

    for ns in (b, c):
        quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
        assert quota["spec"]["hard"]["pods"] == "3"
        binding = await k8s.get(kinds.RoleBinding, "tenant-admins", namespace=ns)
        assert binding["subjects"][0]["name"] == "team-b"
        await wait_gone(k8s, kinds.NetworkPolicy, "tenant-isolation", namespace=ns, timeout=30)

    async def a_deleted() -> bool:
        try:
            ns = await k8s.get(kinds.Namespace, a)
        except sp.NotFound:
            return True
        return bool(ns["metadata"].get("deletionTimestamp"))

    await eventually(a_deleted, timeout=30, description=f"namespace {a} deleted")
    entry = await operator.reconciler.directory.get(name)
    assert entry is not None
    assert entry.namespaces == (b, c)
    assert entry.admin_group == "team-b"


async def test_deleting_a_tenant_unregisters_it_and_collects_its_namespaces(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """Deleting a Tenant runs the finalizer, then the garbage collector takes its namespaces.

    The finalizer's cleanup removes the directory entry before the Tenant disappears; then
    the namespaces (owned by the Tenant) are deleted by kube-controller-manager's garbage
    collector, and their content with them.
    """
    name = unique("gone")
    namespaces = [f"{name}-a", f"{name}-b"]
    await tenants.create(name, namespaces)
    await wait_ready(k8s, name)
    assert await operator.reconciler.directory.get(name) is not None

    await k8s.delete(TENANT, name)
    await wait_gone(k8s, TENANT, name, timeout=60)
    assert await operator.reconciler.directory.get(name) is None
    for ns in namespaces:
        await wait_gone(k8s, kinds.Namespace, ns, timeout=120)
