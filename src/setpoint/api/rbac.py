"""RBAC rules declared in Python, next to the controller that needs them.

The equivalent of kubebuilder's ``+kubebuilder:rbac`` markers: decorate the
reconciler (function or class) with the permissions it uses, and
``setpoint generate rbac`` collects them into ``config/rbac/role.yaml``::

    @sp.rbac(groups=["demo.setpoint.dev"], resources=["widgets"],
             verbs=["get", "list", "watch", "update", "patch"])
    @sp.rbac(groups=["demo.setpoint.dev"], resources=["widgets/status"],
             verbs=["get", "update", "patch"])
    @sp.rbac.for_kind(kinds.ConfigMap, verbs=["get", "list", "watch", "create"])
    async def reconcile(ctx, request): ...

A rule with ``namespace=`` lands in a Role in that namespace instead of the
ClusterRole. The decorator returns the object unchanged; the rules are
attached to it (:func:`rbac_rules_of`) and recorded with the module that
declared them (:func:`declared_rbac_rules`), so generation only has to import
the modules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import BUILTIN_RESOURCES, ResourceInfo
from setpoint.api.validation import is_dns1123_label

__all__ = ["PolicyRule", "declared_rbac_rules", "rbac", "rbac_rules_of"]

_T = TypeVar("_T")
_VERB = re.compile(r"[a-z]+|\*")

# (declaring module, rule) in declaration order; read by declared_rbac_rules.
_DECLARED: list[tuple[str, PolicyRule]] = []


@dataclass(frozen=True, kw_only=True)
class PolicyRule:
    """One RBAC permission: verbs on resources of API groups, or on non-resource URLs.

    Apply it as a decorator (``@sp.rbac(...)``) to declare that the decorated
    controller needs it.
    """

    groups: Sequence[str] = ()
    """API groups of the resources; ``""`` is the core group. Required with ``resources``."""
    resources: Sequence[str] = ()
    """Plural lower-case resource names, optionally with a subresource: ``deployments/status``."""
    verbs: Sequence[str]
    """Verbs: get, list, watch, create, update, patch, delete, deletecollection, or ``*``."""
    resource_names: Sequence[str] = ()
    """Restrict the rule to objects with these names. Default: all objects."""
    urls: Sequence[str] = ()
    """Non-resource URLs such as ``/metrics`` (ClusterRole only). Default: none."""
    namespace: str | None = None
    """Grant the rule in this namespace only (a Role). Default: cluster-wide (the ClusterRole)."""

    def __post_init__(self) -> None:
        for name in ("groups", "resources", "verbs", "resource_names", "urls"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"PolicyRule.{name} must be a list of strings, not {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.verbs:
            raise ValueError("PolicyRule.verbs is empty: list what the controller may do")
        for verb in self.verbs:
            if not _VERB.fullmatch(verb):
                raise ValueError(f"PolicyRule verb {verb!r} must be lower-case letters or '*'")
        if bool(self.resources) == bool(self.urls):
            raise ValueError(
                "PolicyRule needs either resources= (with groups=) or urls=, not both or neither"
            )
        if self.resources and not self.groups:
            raise ValueError(
                f"PolicyRule for {list(self.resources)} needs groups=; use [''] for the core "
                "group (pods, configmaps, ...)"
            )
        if self.urls and (self.groups or self.resource_names):
            raise ValueError("PolicyRule with urls= cannot also set groups= or resource_names=")
        if self.urls and self.namespace is not None:
            raise ValueError(
                "non-resource URLs are cluster-wide: drop namespace= from the rule for "
                f"{list(self.urls)}"
            )
        for url in self.urls:
            if not url.startswith("/"):
                raise ValueError(f"non-resource URL {url!r} must start with '/'")
        for resource in self.resources:
            if not resource or resource != resource.lower() or resource.count("/") > 1:
                raise ValueError(
                    f"resource {resource!r} must be a lower-case plural name, optionally "
                    "'name/subresource'"
                )
        if self.namespace is not None and not is_dns1123_label(self.namespace):
            raise ValueError(f"namespace {self.namespace!r} is not a valid namespace name")

    @classmethod
    def for_kind(
        cls,
        kind: GroupVersionKind | type[Any],
        *,
        verbs: Sequence[str],
        subresources: Sequence[str] = (),
        resource_names: Sequence[str] = (),
        namespace: str | None = None,
    ) -> PolicyRule:
        """A rule for a kind, by type instead of by spelled-out group and plural.

        ``kind`` is a built-in kind constant from :mod:`setpoint.api.kinds` or a
        typed class with ``resource_info()`` (a :class:`setpoint.Resource`).
        ``subresources=["status"]`` grants the verbs on those subresources
        instead of the main resource.
        """
        info = _resource_info(kind)
        resources = [f"{info.plural}/{sub}" for sub in subresources] or [info.plural]
        return cls(
            groups=[info.gvk.group],
            resources=resources,
            verbs=verbs,
            resource_names=resource_names,
            namespace=namespace,
        )

    def __call__(self, target: _T) -> _T:
        """Declare that ``target`` (a reconciler function or class) needs this rule."""
        own: tuple[PolicyRule, ...] = getattr(target, "__setpoint_rbac__", ())
        try:
            # Decorators apply bottom-up; prepending keeps the rules in source order.
            target.__setpoint_rbac__ = (self, *own)  # type: ignore[attr-defined]
        except (AttributeError, TypeError) as exc:
            raise TypeError(
                f"@rbac cannot annotate {target!r}: decorate a function or a class"
            ) from exc
        module = getattr(target, "__module__", None) or "__main__"
        _DECLARED.append((module, self))
        return target


rbac = PolicyRule
"""Declare an RBAC rule: ``@sp.rbac(groups=[...], resources=[...], verbs=[...])``.

An alias of :class:`PolicyRule`, whose attributes document every argument;
``sp.rbac.for_kind(Kind, verbs=[...])`` derives group and plural from a kind."""


def _resource_info(kind: GroupVersionKind | type[Any]) -> ResourceInfo:
    if isinstance(kind, GroupVersionKind):
        info = BUILTIN_RESOURCES.get(kind)
        if info is None:
            raise ValueError(
                f"{kind} is not a built-in kind setpoint knows the plural of; pass its typed "
                "class, or spell out groups= and resources="
            )
        return info
    get_info = getattr(kind, "resource_info", None)
    if get_info is None:
        raise TypeError(
            f"{kind!r} has no resource_info(); pass a setpoint Resource class or a kind constant"
        )
    info = get_info()
    if not isinstance(info, ResourceInfo):
        raise TypeError(f"{kind!r}.resource_info() did not return a ResourceInfo")
    return info


def rbac_rules_of(target: object) -> tuple[PolicyRule, ...]:
    """The rules declared on a decorated function or class (in source order)."""
    return tuple(getattr(target, "__setpoint_rbac__", ()))


def declared_rbac_rules(modules: Iterable[str] | None = None) -> list[PolicyRule]:
    """Rules declared so far by the given modules (and their submodules), or by all modules.

    Only modules already imported have declared anything: import them first
    (``setpoint generate rbac`` does).
    """
    if modules is None:
        return [rule for _, rule in _DECLARED]
    prefixes = tuple(modules)
    return [
        rule
        for module, rule in _DECLARED
        if any(module == p or module.startswith(p + ".") for p in prefixes)
    ]
