"""The operator runs with exactly the RBAC in config/rbac, and that is enough."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from tenants import TENANT_LABEL, TenantsSettings

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import (
    CONFIG_DIR,
    TENANT,
    Tenants,
    load_yaml,
    running_operator,
    unique,
    wait_gone,
    wait_ready,
)

POLICY_USERNAME = "system:serviceaccount:tenants-system:tenants-controller-manager"
"""The operator's username as config/policy spells it (config/default's namespace and prefix)."""

RBAC_FILES = (
    "service_account.yaml",
    "role.yaml",
    "role_binding.yaml",
    "leader_election_role.yaml",
    "leader_election_role_binding.yaml",
)


def customize(doc: dict[str, Any], *, prefix: str, namespace: str) -> dict[str, Any]:
    """What ``kustomize`` does with config/default: a name prefix and the operator namespace.

    Names get ``prefix`` (cluster-wide objects must not collide with other tests'), every
    namespaced object and service-account subject moves to ``namespace``, and role
    references follow the renamed roles.
    """
    doc = dict(doc)
    metadata = dict(doc["metadata"])
    metadata["name"] = prefix + metadata["name"]
    if "namespace" in metadata and not doc["kind"].startswith("ValidatingAdmissionPolicy"):
        metadata["namespace"] = namespace
    doc["metadata"] = metadata
    if "roleRef" in doc:
        doc["roleRef"] = {**doc["roleRef"], "name": prefix + doc["roleRef"]["name"]}
    if "subjects" in doc:
        doc["subjects"] = [
            {**s, "name": prefix + s["name"], "namespace": namespace} for s in doc["subjects"]
        ]
    return doc


def policy_for(prefix: str, namespace: str, account: str) -> list[dict[str, Any]]:
    """config/policy renamed as kustomize would, matching service account ``account``."""
    docs = []
    for loaded in load_yaml(CONFIG_DIR / "policy" / "operator_writes_policy.yaml"):
        doc = customize(loaded, prefix=prefix, namespace=namespace)
        if doc["kind"] == "ValidatingAdmissionPolicy":
            (condition,) = doc["spec"]["matchConditions"]
            assert POLICY_USERNAME in condition["expression"]
            condition["expression"] = condition["expression"].replace(
                POLICY_USERNAME, f"system:serviceaccount:{namespace}:{account}"
            )
        else:
            doc["spec"] = {**doc["spec"], "policyName": prefix + doc["spec"]["policyName"]}
        docs.append(doc)
    return docs


async def test_a_full_cycle_passes_with_the_generated_role_only(
    k8s: sp.Client,
    control_plane: Any,
    tenant_crd: sp.GroupVersionKind,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Create, update and delete Tenants as the operator's service account, nothing more.

    The service account, the generated ClusterRole (role.yaml), its binding and the
    leader-election Role come from config/rbac, renamed and moved into the test namespace
    as kustomize would. The operator authenticates with a bound token from the TokenRequest
    API on the RBAC-enforcing control plane, campaigns for its Lease there, and runs a full
    cycle: create (namespaces, the four children, the RoleBinding to "admin" that needs the
    bind verb, Events), update (quota change, a namespace removed and deleted, isolation off
    deleting the NetworkPolicies), delete (finalizer cleanup, garbage collection). Any
    missing permission fails a request, so the cycle never converges.
    """
    prefix = f"{namespace[:20]}-".replace("--", "-")
    created: list[tuple[sp.GroupVersionKind, str, str | None]] = []
    for file in RBAC_FILES:
        for doc in load_yaml(CONFIG_DIR / "rbac" / file):
            obj = await k8s.create(customize(doc, prefix=prefix, namespace=namespace))
            gvk = sp.meta.gvk_of(obj)
            created.append((gvk, obj["metadata"]["name"], obj["metadata"].get("namespace")))
    account = prefix + "controller-manager"

    async def token() -> dict[str, Any]:
        return await k8s.create_subresource(
            kinds.ServiceAccount,
            account,
            "token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 3600},
            },
            namespace=namespace,
        )

    issued = await eventually(token, timeout=30, description="a service account token")
    kubeconfig = control_plane.kubeconfig_for_token(
        issued["status"]["token"], name=f"{namespace}-operator"
    )
    # The admission policy of config/policy, for this service account (its username is the
    # one thing kustomize cannot rewrite), so the cycle below also proves it lets the
    # operator do its work.
    for doc in policy_for(prefix, namespace, account):
        obj = await k8s.create(doc)
        created.append((sp.meta.gvk_of(obj), obj["metadata"]["name"], None))
    settings = TenantsSettings(directory_path=tmp_path / "directory.db", directory_busy_timeout=0.5)
    tenants = Tenants(k8s)
    try:
        async with running_operator(
            kubeconfig,
            settings,
            leader_election="tenants-least-privilege",
            leader_election_namespace=namespace,
        ) as operator:
            name = unique("rbac")
            a, b = f"{name}-a", f"{name}-b"
            await tenants.create(name, [a, b])
            tenant = await wait_ready(k8s, name)
            assert tenant["status"]["namespaces"] == [a, b]

            async def event_recorded() -> bool:
                events = await k8s.list(kinds.Event, namespace="default")
                return any(
                    e["reason"] == "NamespaceCreated" and e["regarding"].get("name") == name
                    for e in events.items
                )

            await eventually(event_recorded, timeout=30, description="a NamespaceCreated Event")

            await k8s.patch(
                TENANT,
                name,
                sp.MergePatch(
                    {"spec": {"namespaces": [a], "quota": {"pods": 4}, "isolated": False}}
                ),
            )
            tenant = await wait_ready(k8s, name)
            assert tenant["status"]["namespaces"] == [a]
            quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=a)
            assert quota["spec"]["hard"]["pods"] == "4"
            await wait_gone(k8s, kinds.NetworkPolicy, "tenant-isolation", namespace=a, timeout=30)

            async def b_deleted() -> bool:
                try:
                    ns = await k8s.get(kinds.Namespace, b)
                except sp.NotFound:
                    return True
                return bool(ns["metadata"].get("deletionTimestamp"))

            await eventually(b_deleted, timeout=30, description=f"namespace {b} deleted")

            await tenants.delete_all()
            assert await operator.reconciler.directory.get(name) is None
            await wait_gone(k8s, kinds.Namespace, a, timeout=120)
    finally:
        await tenants.abandon_all()
        for gvk, obj_name, obj_namespace in reversed(created):
            with contextlib.suppress(sp.NotFound):
                await k8s.delete(gvk, obj_name, namespace=obj_namespace)


def role_binding(namespace: str, role: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tenant-admins", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }


async def test_the_admission_policy_confines_the_operator_to_tenant_namespaces(
    k8s: sp.Client,
    control_plane: Any,
    tenant_crd: sp.GroupVersionKind,
    namespace: str,
) -> None:
    """config/policy: what the operator's cluster-wide RBAC allows, the policy refuses.

    As the operator's service account (RBAC from config/rbac, policy from config/policy):
    a RoleBinding to admin in a namespace without the tenant label, labelling such a
    namespace (claiming it), deleting it, and binding admin to a system: group in a tenant
    namespace are all refused; the same RoleBinding to the tenant's group is not. (Binding
    any other role is refused by RBAC itself: the operator may bind only admin.)
    Every write is a dry run, so nothing is changed if the policy were missing (issue 18,
    item 9).
    """
    prefix = f"{namespace[:18]}-p-".replace("--", "-")
    created: list[tuple[sp.GroupVersionKind, str, str | None]] = []
    account = prefix + "controller-manager"
    outsider, tenant_ns = f"{namespace}-outsider", f"{namespace}-tenant"
    try:
        for file in RBAC_FILES[:3]:
            for doc in load_yaml(CONFIG_DIR / "rbac" / file):
                obj = await k8s.create(customize(doc, prefix=prefix, namespace=namespace))
                created.append(
                    (sp.meta.gvk_of(obj), obj["metadata"]["name"], obj["metadata"].get("namespace"))
                )
        for name, labels in ((outsider, {}), (tenant_ns, {TENANT_LABEL: "acme"})):
            await k8s.create(
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels},
                }
            )
            created.append((kinds.Namespace, name, None))
        for doc in policy_for(prefix, namespace, account):
            obj = await k8s.create(doc)
            created.append((sp.meta.gvk_of(obj), obj["metadata"]["name"], None))
        issued = await k8s.create_subresource(
            kinds.ServiceAccount,
            account,
            "token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            namespace=namespace,
        )
        path = control_plane.kubeconfig_for_token(issued["status"]["token"], name=account)
        async with sp.Client.from_kubeconfig(path) as operator:

            async def refused_outside() -> str | None:
                try:
                    await operator.create(role_binding(outsider, "admin", "acme"), dry_run=True)
                except sp.ApiError as exc:
                    return str(exc)
                return None  # the policy is not in force yet

            message = await eventually(refused_outside, timeout=60, description="policy active")
            assert "only in namespaces that carry the tenants.setpoint.dev/tenant label" in message

            claim = sp.MergePatch({"metadata": {"labels": {TENANT_LABEL: "acme"}}})
            with pytest.raises(sp.ApiError, match="only namespaces that carry"):
                await operator.patch(kinds.Namespace, outsider, claim, dry_run=True)
            with pytest.raises(sp.ApiError, match="only namespaces that carry"):
                await operator.delete(kinds.Namespace, outsider, dry_run=True)
            with pytest.raises(sp.ApiError, match="only bind the admin ClusterRole"):
                await operator.create(
                    role_binding(tenant_ns, "admin", "system:authenticated"), dry_run=True
                )
            allowed = await operator.create(role_binding(tenant_ns, "admin", "acme"), dry_run=True)
            assert allowed["roleRef"]["name"] == "admin"
            # Other users are not affected: the admin may still write outside tenant namespaces.
            await k8s.create(role_binding(outsider, "admin", "acme"), dry_run=True)
    finally:
        for gvk, obj_name, obj_namespace in reversed(created):
            with contextlib.suppress(sp.NotFound):
                await k8s.delete(gvk, obj_name, namespace=obj_namespace)
