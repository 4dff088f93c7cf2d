"""The operator runs with exactly the RBAC in config/rbac, and that is enough."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from tenants import TenantsSettings

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
    if "namespace" in metadata:
        metadata["namespace"] = namespace
    doc["metadata"] = metadata
    if "roleRef" in doc:
        doc["roleRef"] = {**doc["roleRef"], "name": prefix + doc["roleRef"]["name"]}
    if "subjects" in doc:
        doc["subjects"] = [
            {**s, "name": prefix + s["name"], "namespace": namespace} for s in doc["subjects"]
        ]
    return doc


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
