"""The desired state of a Tenant's children, as plain functions of the Tenant.

Each function returns a typed model of the child (``setpoint.api.kinds``) holding exactly
the fields the operator wants to own, as server-side apply expects: a field never set is
never sent, so nothing the server defaults and nothing another tool may want to add. Values are
spelled the way the API server stores them (quantities as strings), so an unchanged child
compares equal and is not re-applied on every reconcile.
"""

from __future__ import annotations

import setpoint as sp
from setpoint.api.kinds import core_v1, meta_v1, networking_v1, rbac_v1

from .api import TENANT_LABEL, Tenant

__all__ = [
    "ADMIN_BINDING",
    "ISOLATION_POLICY",
    "LIMIT_RANGE",
    "RESOURCE_QUOTA",
    "Child",
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

Child = (
    core_v1.ResourceQuota | core_v1.LimitRange | rbac_v1.RoleBinding | networking_v1.NetworkPolicy
)
"""The typed children applied in each tenant namespace (the Namespace itself aside)."""


def _quantity(value: int | str) -> str:
    # The quota and limit APIs store quantities as strings; an int from the Tenant (cpu: 2)
    # must be sent as "2" or it would differ from what the server keeps.
    return str(value)


def namespace(tenant: Tenant, name: str) -> core_v1.Namespace:
    """The Namespace ``name``, labelled with its tenant (the label the isolation policy uses)."""
    return core_v1.Namespace(
        metadata=sp.ObjectMeta(name=name, labels={TENANT_LABEL: _name(tenant)})
    )


def resource_quota(tenant: Tenant, ns: str) -> core_v1.ResourceQuota:
    """The namespace's ResourceQuota: requested CPU and memory, and the pod count."""
    quota = tenant.spec.quota
    return core_v1.ResourceQuota(
        metadata=sp.ObjectMeta(name=RESOURCE_QUOTA, namespace=ns),
        spec=core_v1.ResourceQuotaSpec(
            hard={
                "requests.cpu": _quantity(quota.cpu),
                "requests.memory": _quantity(quota.memory),
                "pods": str(quota.pods),
            }
        ),
    )


def limit_range(tenant: Tenant, ns: str) -> core_v1.LimitRange:
    """The namespace's LimitRange: default limits (and requests) for containers.

    ``defaultRequest`` is spelled out although the server would default it to ``default``:
    ``spec.limits`` is an atomic list in server-side apply, so the operator owns the whole
    list, and a server-filled value it did not send would differ on every comparison.
    """
    defaults = {
        "cpu": _quantity(tenant.spec.container_defaults.cpu),
        "memory": _quantity(tenant.spec.container_defaults.memory),
    }
    return core_v1.LimitRange(
        metadata=sp.ObjectMeta(name=LIMIT_RANGE, namespace=ns),
        spec=core_v1.LimitRangeSpec(
            limits=[
                core_v1.LimitRangeItem(
                    type="Container", default=defaults, default_request=dict(defaults)
                )
            ]
        ),
    )


def admin_binding(tenant: Tenant, ns: str) -> rbac_v1.RoleBinding:
    """The RoleBinding giving the tenant's admin group the ``admin`` ClusterRole in ``ns``."""
    return rbac_v1.RoleBinding(
        metadata=sp.ObjectMeta(name=ADMIN_BINDING, namespace=ns),
        role_ref=rbac_v1.RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=ADMIN_CLUSTER_ROLE
        ),
        subjects=[
            rbac_v1.Subject(
                api_group="rbac.authorization.k8s.io", kind="Group", name=tenant.spec.admin_group
            )
        ],
    )


def isolation_policy(tenant: Tenant, ns: str) -> networking_v1.NetworkPolicy:
    """A default-deny ingress NetworkPolicy admitting only the tenant's own namespaces.

    ``podSelector: {}`` selects every pod of the namespace (an empty selector, set, is sent
    as ``{}``); with ``policyTypes: [Ingress]`` they accept only what an ingress rule allows,
    and the one rule allows pods in namespaces labelled with this tenant's name.
    """
    return networking_v1.NetworkPolicy(
        metadata=sp.ObjectMeta(name=ISOLATION_POLICY, namespace=ns),
        spec=networking_v1.NetworkPolicySpec(
            pod_selector=meta_v1.LabelSelector(),
            policy_types=["Ingress"],
            ingress=[
                networking_v1.NetworkPolicyIngressRule(
                    from_=[
                        networking_v1.NetworkPolicyPeer(
                            namespace_selector=meta_v1.LabelSelector(
                                match_labels={TENANT_LABEL: _name(tenant)}
                            )
                        )
                    ]
                )
            ],
        ),
    )


def _name(tenant: Tenant) -> str:
    name = tenant.metadata.name
    if not name:
        raise ValueError("the Tenant has no metadata.name; pass the object read from the server")
    return name
