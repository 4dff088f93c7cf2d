"""The Tenant API: one cluster-scoped object per tenant, declared as Python types.

``setpoint generate crd`` turns these classes into the CustomResourceDefinition in
``config/crd/bases/``. Every constraint below is enforced by the API server (OpenAPI schema
and CEL rules), so a bad spec is refused at ``kubectl apply`` time with a message naming the
field; the operator never sees it.

Two versions are served. ``v1`` (:class:`Tenant`) is the storage version and the hub; the
operator reads and writes only it. ``v1alpha1`` (:class:`TenantV1Alpha1`) is the older,
deprecated shape, still served for clients that use it: the admin group was called
``admins``, the quota was three flat fields, network isolation was a mode instead of a bool,
and there were no container defaults. Its two converters say how each maps to ``v1``; the
operator's webhook server runs them for the API server (``docs/guide/evolving-an-api.md``).
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

import setpoint as sp

__all__ = [
    "GROUP",
    "TENANT_LABEL",
    "ContainerDefaults",
    "NamespaceUsage",
    "Tenant",
    "TenantQuota",
    "TenantSpec",
    "TenantSpecV1Alpha1",
    "TenantStatus",
    "TenantV1Alpha1",
]

GROUP = "tenants.setpoint.dev"
"""The API group of the Tenant kind."""

TENANT_LABEL = f"{GROUP}/tenant"
"""Label on every namespace a Tenant owns; its value is the Tenant's name. The isolation
NetworkPolicy admits traffic from namespaces carrying the same value."""

_DNS_LABEL = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

NamespaceName = Annotated[
    str,
    sp.field(
        max_length=63,
        rules=[
            sp.Rule(
                f"self.matches('{_DNS_LABEL}')",
                message=(
                    "must be a valid namespace name (a DNS label): lower-case letters, digits "
                    "and '-', starting and ending with a letter or digit, at most 63 characters"
                ),
            )
        ],
    ),
]
"""A namespace name: a DNS label (RFC 1123), as the API server requires for Namespaces."""


def _non_negative(what: str) -> sp.Rule:
    # The quantity pattern admits a sign; the Kubernetes CEL quantity library compares values
    # exactly ("-0.5", "-1Ki" and "-1e3" are all negative), which a regex cannot do readably.
    # string(self) because an int-or-string arrives in CEL as either. (kube-apiserver 1.37
    # has no Quantity.sign() overload for CRD rules: it fails to compile.)
    return sp.Rule(
        "!isQuantity(string(self)) || !quantity(string(self)).isLessThan(quantity('0'))",
        message=f"{what} must not be negative",
    )


_NOT_A_SYSTEM_GROUP = sp.Rule(
    "!self.startsWith('system:')",
    message=(
        "must not be a 'system:' group (system:authenticated, system:serviceaccounts, "
        "system:masters, ...): those name every user or cluster components, not a team"
    ),
)
"""The admin group gets 'admin' in every tenant namespace: a group such as
``system:authenticated`` would hand that to every user of the cluster."""


class TenantQuota(sp.Model):
    """The tenant's resource quota, applied to each of its namespaces (a ResourceQuota)."""

    cpu: sp.Quantity = sp.field(default="4", rules=[_non_negative("cpu")])
    """CPU requests all pods of one namespace may add up to ('requests.cpu'), e.g. '2'
    or '500m'."""
    memory: sp.Quantity = sp.field(default="8Gi", rules=[_non_negative("memory")])
    """Memory requests all pods of one namespace may add up to ('requests.memory'), e.g.
    '4Gi'."""
    pods: int = sp.field(default=20, minimum=0)
    """How many pods one namespace may hold ('pods')."""


class ContainerDefaults(sp.Model):
    """Limits given to containers that declare none (a LimitRange in each namespace).

    The API server also uses them as the containers' default requests, which is what the
    quota counts.
    """

    cpu: sp.Quantity = sp.field(default="500m", rules=[_non_negative("cpu")])
    """Default CPU limit (and request) of a container."""
    memory: sp.Quantity = sp.field(default="512Mi", rules=[_non_negative("memory")])
    """Default memory limit (and request) of a container."""


class TenantSpec(sp.Model):
    """What a tenant gets: namespaces, who administers them, and how much they may use."""

    namespaces: list[NamespaceName] = sp.field(min_items=1, max_items=32, unique_items=True)
    """The tenant's namespaces. The operator creates them and deletes the ones removed from
    this list (only those it created for this Tenant). A namespace another Tenant already
    claims is left alone and reported in the Degraded condition."""
    admin_group: str = sp.field(min_length=1, max_length=253, rules=[_NOT_A_SYSTEM_GROUP])
    """The group (as the cluster's authenticator names it) that gets the 'admin'
    ClusterRole in every namespace of the tenant; never a ``system:`` group."""
    quota: TenantQuota = sp.field(default_factory=TenantQuota)
    """Resource quota per namespace."""
    container_defaults: ContainerDefaults = sp.field(default_factory=ContainerDefaults)
    """Default container limits per namespace."""
    isolated: bool = True
    """Isolate the tenant's network: pods in its namespaces accept traffic only from pods in
    the tenant's own namespaces (a default-deny NetworkPolicy in each)."""


class NamespaceUsage(sp.Model):
    """How much of its quota one namespace uses, as the ResourceQuota's status reports it."""

    namespace: str
    """The namespace."""
    cpu: str | None = None
    """CPU requests in use ('requests.cpu')."""
    memory: str | None = None
    """Memory requests in use ('requests.memory')."""
    pods: str | None = None
    """Pods in use ('pods'), as the quantity string the quota reports."""


class TenantStatus(sp.Model):
    """What the operator observed last."""

    observed_generation: int | None = None
    """The 'metadata.generation' this status describes."""
    conditions: list[sp.Condition] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["type"], max_items=8
    )
    """'Ready': every namespace and its children are in place. 'Degraded': something
    needs attention (a namespace claimed by another Tenant, the tenant directory failing);
    the reason and message say what."""
    namespaces: list[str] = sp.field(default_factory=list, max_items=32)
    """The tenant's namespaces that exist now, sorted."""
    usage: list[NamespaceUsage] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["namespace"], max_items=32
    )
    """Quota usage per namespace, from each ResourceQuota's 'status.used' (filled in by
    kube-controller-manager, so it lags pod creation by up to its sync period)."""


@sp.resource(
    group=GROUP,
    version="v1",
    storage=True,
    scope="Cluster",
    short_names=["tn"],
    printer_columns=[
        sp.PrinterColumn(name="Ready", json_path='.status.conditions[?(@.type=="Ready")].status'),
        sp.PrinterColumn(name="Reason", json_path='.status.conditions[?(@.type=="Ready")].reason'),
        sp.PrinterColumn(name="Admin", json_path=".spec.adminGroup"),
        sp.PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),
    ],
)
class Tenant(sp.Resource):
    """A tenant of the cluster: its namespaces, their quota, limits, access and isolation."""

    spec: TenantSpec
    status: TenantStatus | None = None


# --------------------------------------------------------------------------- v1alpha1


class TenantSpecV1Alpha1(sp.Model):
    """What a tenant got in v1alpha1: flat quota fields and a network mode."""

    namespaces: list[NamespaceName] = sp.field(min_items=1, max_items=32, unique_items=True)
    """The tenant's namespaces (as in v1)."""
    admins: str = sp.field(min_length=1, max_length=253, rules=[_NOT_A_SYSTEM_GROUP])
    """The group that administers the tenant's namespaces (v1: ``adminGroup``)."""
    cpu_quota: sp.Quantity = sp.field(default="4", rules=[_non_negative("cpuQuota")])
    """CPU requests per namespace (v1: ``quota.cpu``)."""
    memory_quota: sp.Quantity = sp.field(default="8Gi", rules=[_non_negative("memoryQuota")])
    """Memory requests per namespace (v1: ``quota.memory``)."""
    pod_quota: int = sp.field(default=20, minimum=0)
    """Pods per namespace (v1: ``quota.pods``)."""
    network: Literal["Isolated", "Open"] = "Isolated"
    """``Isolated``: only the tenant's own namespaces may reach its pods (v1: ``isolated:
    true``); ``Open``: no NetworkPolicy. v1alpha1 cannot say what v1's ``containerDefaults``
    says: a v1alpha1 client keeps it untouched (see the class docstring)."""


@sp.resource(
    group=GROUP,
    version="v1alpha1",
    kind="Tenant",
    deprecated=True,
    deprecation_warning=f"{GROUP}/v1alpha1 Tenant is deprecated; use {GROUP}/v1",
    printer_columns=[
        sp.PrinterColumn(name="Ready", json_path='.status.conditions[?(@.type=="Ready")].status'),
        sp.PrinterColumn(name="Admins", json_path=".spec.admins"),
        sp.PrinterColumn(name="Network", json_path=".spec.network"),
        sp.PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),
    ],
)
class TenantV1Alpha1(sp.Resource, sp.Convertible[Tenant]):
    """A tenant, as v1alpha1 clients see it. Converted to and from :class:`Tenant` (the hub).

    What v1alpha1 cannot hold (``containerDefaults``) survives a round trip through it: it is
    kept in the ``setpoint.dev/conversion-data`` annotation of the v1alpha1 object and
    restored when the object comes back to v1.
    """

    spec: TenantSpecV1Alpha1
    status: TenantStatus | None = None

    def to_hub(self) -> Tenant:
        """Return this tenant as v1."""
        spec = self.spec
        return Tenant(
            metadata=self.metadata,
            spec=TenantSpec(
                namespaces=spec.namespaces,
                admin_group=spec.admins,
                quota=TenantQuota(
                    cpu=spec.cpu_quota, memory=spec.memory_quota, pods=spec.pod_quota
                ),
                isolated=spec.network == "Isolated",
            ),
            status=self.status,
        )

    @classmethod
    def from_hub(cls, hub: Tenant) -> Self:
        """The v1 tenant ``hub`` as v1alpha1."""
        spec = hub.spec
        return cls(
            metadata=hub.metadata,
            spec=TenantSpecV1Alpha1(
                namespaces=spec.namespaces,
                admins=spec.admin_group,
                cpu_quota=spec.quota.cpu,
                memory_quota=spec.quota.memory,
                pod_quota=spec.quota.pods,
                network="Isolated" if spec.isolated else "Open",
            ),
            status=hub.status,
        )
