"""Built-in Kubernetes kinds, and what the REST API knows about each.

Each constant is a :class:`GroupVersionKind` usable wherever setpoint takes a
kind: ``await client.get(kinds.ConfigMap, "name", namespace="ns")``.

:data:`BUILTIN_RESOURCES` holds the plural name, scope and subresources of
these kinds. The live client still asks the server (discovery is the truth);
the table serves the fake client and offline tools, and the parity suite
checks it against a real server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from setpoint.api.gvk import GroupVersionKind, GroupVersionResource

__all__ = [
    "BUILTIN_RESOURCES",
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "CustomResourceDefinition",
    "Deployment",
    "Event",
    "Lease",
    "LimitRange",
    "MutatingWebhookConfiguration",
    "Namespace",
    "NetworkPolicy",
    "Pod",
    "ResourceInfo",
    "ResourceQuota",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "ServiceAccount",
    "ValidatingWebhookConfiguration",
]


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """How one kind is served: its GVK, plural resource name, scope and subresources."""

    gvk: GroupVersionKind
    plural: str
    namespaced: bool
    subresources: frozenset[str] = field(default_factory=frozenset)
    singular: str = ""
    short_names: tuple[str, ...] = ()

    @property
    def gvr(self) -> GroupVersionResource:
        """The :class:`GroupVersionResource` that addresses this kind's REST collection."""
        return GroupVersionResource(self.gvk.group, self.gvk.version, self.plural)


ConfigMap = GroupVersionKind("", "v1", "ConfigMap")
Secret = GroupVersionKind("", "v1", "Secret")
Namespace = GroupVersionKind("", "v1", "Namespace")
Pod = GroupVersionKind("", "v1", "Pod")
Service = GroupVersionKind("", "v1", "Service")
ServiceAccount = GroupVersionKind("", "v1", "ServiceAccount")
ResourceQuota = GroupVersionKind("", "v1", "ResourceQuota")
LimitRange = GroupVersionKind("", "v1", "LimitRange")
Event = GroupVersionKind("events.k8s.io", "v1", "Event")
Deployment = GroupVersionKind("apps", "v1", "Deployment")
Lease = GroupVersionKind("coordination.k8s.io", "v1", "Lease")
Role = GroupVersionKind("rbac.authorization.k8s.io", "v1", "Role")
RoleBinding = GroupVersionKind("rbac.authorization.k8s.io", "v1", "RoleBinding")
ClusterRole = GroupVersionKind("rbac.authorization.k8s.io", "v1", "ClusterRole")
ClusterRoleBinding = GroupVersionKind("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding")
NetworkPolicy = GroupVersionKind("networking.k8s.io", "v1", "NetworkPolicy")
CustomResourceDefinition = GroupVersionKind(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition"
)
ValidatingWebhookConfiguration = GroupVersionKind(
    "admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"
)
MutatingWebhookConfiguration = GroupVersionKind(
    "admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"
)

_STATUS = frozenset({"status"})

BUILTIN_RESOURCES: dict[GroupVersionKind, ResourceInfo] = {
    info.gvk: info
    for info in (
        ResourceInfo(ConfigMap, "configmaps", True, singular="configmap", short_names=("cm",)),
        ResourceInfo(Secret, "secrets", True, singular="secret"),
        ResourceInfo(
            Namespace,
            "namespaces",
            False,
            frozenset({"status", "finalize"}),
            singular="namespace",
            short_names=("ns",),
        ),
        ResourceInfo(
            Pod,
            "pods",
            True,
            frozenset({"status", "binding", "eviction", "log", "ephemeralcontainers", "resize"}),
            singular="pod",
            short_names=("po",),
        ),
        ResourceInfo(Service, "services", True, _STATUS, singular="service", short_names=("svc",)),
        ResourceInfo(
            ServiceAccount,
            "serviceaccounts",
            True,
            frozenset({"token"}),
            singular="serviceaccount",
            short_names=("sa",),
        ),
        ResourceInfo(
            ResourceQuota,
            "resourcequotas",
            True,
            _STATUS,
            singular="resourcequota",
            short_names=("quota",),
        ),
        ResourceInfo(
            LimitRange, "limitranges", True, singular="limitrange", short_names=("limits",)
        ),
        ResourceInfo(Event, "events", True, singular="event", short_names=("ev",)),
        ResourceInfo(
            Deployment,
            "deployments",
            True,
            frozenset({"status", "scale"}),
            singular="deployment",
            short_names=("deploy",),
        ),
        ResourceInfo(Lease, "leases", True, singular="lease"),
        ResourceInfo(Role, "roles", True, singular="role"),
        ResourceInfo(RoleBinding, "rolebindings", True, singular="rolebinding"),
        ResourceInfo(ClusterRole, "clusterroles", False, singular="clusterrole"),
        ResourceInfo(
            ClusterRoleBinding, "clusterrolebindings", False, singular="clusterrolebinding"
        ),
        ResourceInfo(
            NetworkPolicy,
            "networkpolicies",
            True,
            singular="networkpolicy",
            short_names=("netpol",),
        ),
        ResourceInfo(
            CustomResourceDefinition,
            "customresourcedefinitions",
            False,
            _STATUS,
            singular="customresourcedefinition",
            short_names=("crd", "crds"),
        ),
        ResourceInfo(
            ValidatingWebhookConfiguration,
            "validatingwebhookconfigurations",
            False,
            singular="validatingwebhookconfiguration",
        ),
        ResourceInfo(
            MutatingWebhookConfiguration,
            "mutatingwebhookconfigurations",
            False,
            singular="mutatingwebhookconfiguration",
        ),
    )
}
