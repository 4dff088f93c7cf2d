"""The desired state of a Tenant's children, as plain functions of the Tenant.

Each function returns exactly the fields the operator wants to own, as server-side apply
expects: nothing the server defaults, nothing another tool may want to add. Values are
spelled the way the API server stores them (quantities as strings), so an unchanged child
compares equal and is not re-applied on every reconcile.
"""

from __future__ import annotations

from typing import Any

from .api import TENANT_LABEL, Tenant

__all__ = [
    "ADMIN_BINDING",
    "ISOLATION_POLICY",
    "LIMIT_RANGE",
    "RESOURCE_QUOTA",
    "admin_binding",
    "isolation_policy",
    "limit_range",
    "namespace",
    "resource_quota",
]

RESOURCE_QUOTA = "tenant-quota"
"""Name of the ResourceQuota in every tenant namespace."""
LIMIT_RANGE = "tenant-limits"
"""Name of the LimitRange in every tenant namespace."""
ADMIN_BINDING = "tenant-admins"
"""Name of the RoleBinding granting the admin group the ``admin`` ClusterRole."""
ISOLATION_POLICY = "tenant-isolation"
"""Name of the default-deny NetworkPolicy (present only while ``spec.isolated``)."""

ADMIN_CLUSTER_ROLE = "admin"
"""The built-in ClusterRole the admin group gets in each namespace."""


def _quantity(value: int | str) -> str:
    # The quota and limit APIs store quantities as strings; an int from the Tenant (cpu: 2)
    # must be sent as "2" or it would differ from what the server keeps.
    return str(value)


def namespace(tenant: Tenant, name: str) -> dict[str, Any]:
    """The Namespace ``name``, labelled with its tenant (the label the isolation policy uses)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {TENANT_LABEL: _name(tenant)}},
    }


def resource_quota(tenant: Tenant, ns: str) -> dict[str, Any]:
    """The namespace's ResourceQuota: requested CPU and memory, and the pod count."""
    quota = tenant.spec.quota
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": RESOURCE_QUOTA, "namespace": ns},
        "spec": {
            "hard": {
                "requests.cpu": _quantity(quota.cpu),
                "requests.memory": _quantity(quota.memory),
                "pods": str(quota.pods),
            }
        },
    }


def limit_range(tenant: Tenant, ns: str) -> dict[str, Any]:
    """The namespace's LimitRange: default limits (and requests) for containers.

    ``defaultRequest`` is spelled out although the server would default it to ``default``:
    ``spec.limits`` is an atomic list in server-side apply, so the operator owns the whole
    list, and a server-filled value it did not send would differ on every comparison.
    """
    defaults = {
        "cpu": _quantity(tenant.spec.container_defaults.cpu),
        "memory": _quantity(tenant.spec.container_defaults.memory),
    }
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": LIMIT_RANGE, "namespace": ns},
        "spec": {
            "limits": [{"type": "Container", "default": defaults, "defaultRequest": dict(defaults)}]
        },
    }


def admin_binding(tenant: Tenant, ns: str) -> dict[str, Any]:
    """The RoleBinding giving the tenant's admin group the ``admin`` ClusterRole in ``ns``."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": ADMIN_BINDING, "namespace": ns},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": ADMIN_CLUSTER_ROLE,
        },
        "subjects": [
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Group",
                "name": tenant.spec.admin_group,
            }
        ],
    }


def isolation_policy(tenant: Tenant, ns: str) -> dict[str, Any]:
    """A default-deny ingress NetworkPolicy admitting only the tenant's own namespaces.

    ``podSelector: {}`` selects every pod of the namespace; with ``policyTypes: [Ingress]``
    they accept only what an ingress rule allows, and the one rule allows pods in namespaces
    labelled with this tenant's name.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": ISOLATION_POLICY, "namespace": ns},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {TENANT_LABEL: _name(tenant)}}}]}
            ],
        },
    }


def _name(tenant: Tenant) -> str:
    name = tenant.metadata.name
    if not name:
        raise ValueError("the Tenant has no metadata.name; pass the object read from the server")
    return name
