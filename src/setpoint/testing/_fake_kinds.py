"""What the fake API server knows about each kind: scope, subresources, generation, fields.

A :class:`KindRules` holds the per-kind behaviour the server's registry strategies
implement (custom or built-in, status subresource, which changes bump
``metadata.generation``, which field selectors are supported); :func:`rules_for` derives it
from a :class:`~setpoint.api.kinds.ResourceInfo`, and :func:`crd_resources` reads the kinds
a CustomResourceDefinition serves. :func:`path_of` spells a request's REST path for error
messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject

__all__ = [
    "BUILTIN_GROUPS",
    "KindRules",
    "crd_resources",
    "generation_relevant",
    "path_of",
    "rules_for",
    "storage_key",
]

BUILTIN_GROUPS: frozenset[str] = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)
"""API groups served by kube-apiserver itself; every other group is a custom resource."""

# Built-in kinds whose strategy bumps metadata.generation, and on what.
_SPEC_GENERATION = frozenset(
    {
        ("", "Pod"),
        ("", "ReplicationController"),
        ("apps", "StatefulSet"),
        ("apps", "DaemonSet"),
        ("apps", "ReplicaSet"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("networking.k8s.io", "NetworkPolicy"),
        ("networking.k8s.io", "Ingress"),
        ("policy", "PodDisruptionBudget"),
        ("autoscaling", "HorizontalPodAutoscaler"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    }
)
# Deployments also bump on annotation changes: annotations are copied to ReplicaSets.
_SPEC_AND_ANNOTATIONS_GENERATION = frozenset({("apps", "Deployment")})

_BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_EXTRA_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("", "Pod"): frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    ("", "Secret"): frozenset({"type"}),
    ("", "Namespace"): frozenset({"status.phase"}),
    ("", "Node"): frozenset({"spec.unschedulable"}),
    ("", "Event"): frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
}


@dataclass(frozen=True, slots=True)
class KindRules:
    """How the server treats one kind: custom or built-in, status subresource, generation."""

    info: ResourceInfo
    custom: bool
    status: bool
    generation: Literal["none", "spec", "spec+annotations", "all"]
    fields: frozenset[str]

    @property
    def group_kind(self) -> tuple[str, str]:
        """The storage identity: objects are shared between versions of a kind."""
        return (self.info.gvk.group, self.info.gvk.kind)

    @property
    def resource(self) -> str:
        """``plural`` or ``plural.group``, as the server names the resource in messages."""
        gvk = self.info.gvk
        return f"{self.info.plural}.{gvk.group}" if gvk.group else self.info.plural

    @property
    def qualified_kind(self) -> str:
        """``Kind`` or ``Kind.group``, as the server names the kind in validation messages."""
        gvk = self.info.gvk
        return f"{gvk.kind}.{gvk.group}" if gvk.group else gvk.kind


def rules_for(info: ResourceInfo) -> KindRules:
    """The server's rules for the kind ``info`` describes."""
    gvk = info.gvk
    custom = gvk.group not in BUILTIN_GROUPS
    key = (gvk.group, gvk.kind)
    generation: Literal["none", "spec", "spec+annotations", "all"]
    if custom:
        generation = "all"
    elif key in _SPEC_AND_ANNOTATIONS_GENERATION:
        generation = "spec+annotations"
    elif key in _SPEC_GENERATION:
        generation = "spec"
    else:
        generation = "none"
    return KindRules(
        info=info,
        custom=custom,
        status="status" in info.subresources,
        generation=generation,
        fields=_BASE_FIELDS | _EXTRA_FIELDS.get(key, frozenset()),
    )


def generation_relevant(rules: KindRules, obj: JsonObject) -> Any:
    """The part of ``obj`` whose change bumps ``metadata.generation`` for this kind."""
    if rules.generation == "all":
        return {
            k: v
            for k, v in obj.items()
            if k not in ("metadata", "apiVersion", "kind") and not (k == "status" and rules.status)
        }
    if rules.generation == "spec+annotations":
        return [obj.get("spec"), (obj.get("metadata") or {}).get("annotations") or {}]
    return obj.get("spec")


def storage_key(namespace: str, name: str) -> str:
    """Where an object is kept within its kind: ``namespace/name``, or ``name``."""
    # etcd orders keys as strings, so "a-b/x" sorts before "a/x"; lists follow that order.
    return f"{namespace}/{name}" if namespace else name


def path_of(
    info: ResourceInfo, namespace: str | None, name: str | None = None, sub: str = ""
) -> str:
    """The REST path of a request, for error messages: ``/api/v1/namespaces/ns/configmaps/x``."""
    gvk = info.gvk
    path = f"/apis/{gvk.group}/{gvk.version}" if gvk.group else f"/api/{gvk.version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{info.plural}"
    if name:
        path += f"/{name}"
    if sub:
        path += f"/{sub}"
    return path


def crd_resources(crd: Mapping[str, Any]) -> list[ResourceInfo]:
    """The kinds a CustomResourceDefinition serves, one :class:`ResourceInfo` per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = set((version.get("subresources") or {}).keys())
        out.append(
            ResourceInfo(
                gvk=GroupVersionKind(group, version.get("name", ""), names.get("kind", "")),
                plural=names.get("plural", ""),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                subresources=frozenset(subresources),
                singular=names.get("singular", "") or "",
                short_names=tuple(names.get("shortNames") or ()),
            )
        )
    return out
