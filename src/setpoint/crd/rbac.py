"""Declared RBAC rules -> ``config/rbac/role.yaml`` (a ClusterRole, and Roles for namespaced rules).

Rules are normalized the way controller-gen does it: duplicates merge, the
verbs for the same group/resource/names accumulate, a ``*`` verb absorbs the
others, and resources sharing a group, verbs and names share one rule. The
output is sorted, so it does not depend on import or declaration order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from setpoint.api.rbac import PolicyRule
from setpoint.crd.manifests import Manifest

__all__ = ["DEFAULT_ROLE_NAME", "generate_rbac", "normalize_rules"]

DEFAULT_ROLE_NAME = "manager-role"
"""The role name kubebuilder scaffolds bindings for."""

_RBAC_API = "rbac.authorization.k8s.io/v1"


def _verbs(verbs: set[str]) -> tuple[str, ...]:
    return ("*",) if "*" in verbs else tuple(sorted(verbs))


def normalize_rules(rules: Iterable[PolicyRule]) -> list[dict[str, Any]]:
    """Merge and sort rules into the ``rules`` of a Role or ClusterRole (namespaces ignored)."""
    resource_verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    url_verbs: dict[str, set[str]] = {}
    for rule in rules:
        names = tuple(sorted(set(rule.resource_names)))
        for group in rule.groups:
            for resource in rule.resources:
                resource_verbs.setdefault((group, resource, names), set()).update(rule.verbs)
        for url in rule.urls:
            url_verbs.setdefault(url, set()).update(rule.verbs)

    grouped: dict[tuple[str, tuple[str, ...], tuple[str, ...]], set[str]] = {}
    for (group, resource, names), verbs in resource_verbs.items():
        grouped.setdefault((group, names, _verbs(verbs)), set()).add(resource)
    out: list[dict[str, Any]] = []
    for (group, names, verb_list), resources in grouped.items():
        entry: dict[str, Any] = {"apiGroups": [group], "resources": sorted(resources)}
        if names:
            entry["resourceNames"] = list(names)
        entry["verbs"] = list(verb_list)
        out.append(entry)
    url_grouped: dict[tuple[str, ...], set[str]] = {}
    for url, verbs in url_verbs.items():
        url_grouped.setdefault(_verbs(verbs), set()).add(url)
    for verb_list, urls in url_grouped.items():
        out.append({"nonResourceURLs": sorted(urls), "verbs": list(verb_list)})
    out.sort(
        key=lambda r: (
            "nonResourceURLs" in r,  # resource rules first, then URL rules
            r.get("apiGroups", []),
            r.get("resources", []),
            r.get("resourceNames", []),
            r.get("nonResourceURLs", []),
            r["verbs"],
        )
    )
    return out


def generate_rbac(
    rules: Iterable[PolicyRule],
    *,
    role_name: str = DEFAULT_ROLE_NAME,
    namespace: str | None = None,
) -> Manifest:
    """The ``rbac/role.yaml`` manifest for the declared rules.

    Cluster-wide rules go into a ClusterRole named ``role_name``. Rules
    declared with ``namespace=`` go into a Role of the same name in that
    namespace. Passing ``namespace`` makes the whole operator namespaced: the
    cluster-wide rules then form a Role in that namespace instead, and
    non-resource URLs (which only a ClusterRole can grant) are an error.

    Raises:
        ValueError: for non-resource URL rules when ``namespace`` is given.

    """
    cluster: list[PolicyRule] = []
    by_namespace: dict[str, list[PolicyRule]] = {}
    for rule in dict.fromkeys(rules):
        target_ns = rule.namespace or namespace
        if target_ns is None:
            cluster.append(rule)
        else:
            if rule.urls:
                raise ValueError(
                    f"rule for non-resource URLs {list(rule.urls)} cannot go into the Role in "
                    f"namespace {target_ns!r}; only a ClusterRole grants URLs (generate without "
                    "a namespace)"
                )
            by_namespace.setdefault(target_ns, []).append(rule)
    documents: list[dict[str, Any]] = []
    if namespace is None:
        documents.append(
            {
                "apiVersion": _RBAC_API,
                "kind": "ClusterRole",
                "metadata": {"name": role_name},
                "rules": normalize_rules(cluster),
            }
        )
    for ns in sorted(by_namespace):
        documents.append(
            {
                "apiVersion": _RBAC_API,
                "kind": "Role",
                "metadata": {"name": role_name, "namespace": ns},
                "rules": normalize_rules(by_namespace[ns]),
            }
        )
    if not documents:
        # A namespaced operator without rules still gets its (empty) Role, so the
        # RoleBinding that kustomize scaffolds has something to bind.
        documents.append(
            {
                "apiVersion": _RBAC_API,
                "kind": "Role",
                "metadata": {"name": role_name, "namespace": namespace},
                "rules": [],
            }
        )
    return Manifest("rbac/role.yaml", tuple(documents))
