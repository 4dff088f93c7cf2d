"""Group, version, kind and resource names.

A kind (``ConfigMap``) is what an object *is*; a resource (``configmaps``) is
where it lives in the REST API. The client's RESTMapper translates between
them; everything else in setpoint names types by :class:`GroupVersionKind`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["GroupVersionKind", "GroupVersionResource", "split_api_version"]


def split_api_version(api_version: str) -> tuple[str, str]:
    """Split ``"apps/v1"`` into ``("apps", "v1")`` and ``"v1"`` into ``("", "v1")``.

    Raises:
        ValueError: if ``api_version`` is empty or has more than one ``/``.

    """
    if not api_version or api_version.count("/") > 1:
        raise ValueError(
            f"apiVersion {api_version!r} is not of the form 'version' or 'group/version'"
        )
    group, _, version = api_version.rpartition("/")
    if not version:
        raise ValueError(f"apiVersion {api_version!r} has an empty version")
    return group, version


_KNOWN: dict[tuple[str, str], GroupVersionKind] = {}
_KNOWN_LIMIT = 1024


@dataclass(frozen=True, slots=True, order=True)
class GroupVersionKind:
    """The type of an object: API group (``""`` for the core group), version and kind."""

    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` field value: ``"v1"`` for the core group, else ``"group/version"``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @classmethod
    def from_api_version(cls, api_version: str, kind: str) -> GroupVersionKind:
        """Build a GVK from an object's ``apiVersion`` and ``kind`` fields.

        GVKs are immutable, so the few a process meets are built once and shared (the
        runtime asks for the GVK of an object several times per reconcile).
        """
        key = (api_version, kind)
        known = _KNOWN.get(key)
        if known is not None and type(known) is cls:
            return known
        group, version = split_api_version(api_version)
        made = cls(group, version, kind)
        if len(_KNOWN) >= _KNOWN_LIMIT:  # bounded: apiVersion and kind come from outside
            _KNOWN.clear()
        _KNOWN[key] = made
        return made

    @property
    def group_kind(self) -> str:
        """``Kind.group`` (or just ``Kind`` for the core group), as kubectl prints it."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def __str__(self) -> str:
        return f"{self.api_version}, Kind={self.kind}"

    # As a kind handle (setpoint.api.types.Kind): a GVK names a kind whose objects are the
    # JSON dicts the server sends, so every reader and writer has one signature for it and
    # for typed classes.

    @property
    def gvk(self) -> GroupVersionKind:
        """Itself (``Kind.gvk``): the kind handle's group, version and kind."""
        return self

    def from_object(self, obj: dict[str, Any], /) -> dict[str, Any]:
        """``obj`` itself (``Kind.from_object``): objects of a kind named by a GVK are dicts.

        This does not read a GVK *from* an object; that is
        :func:`setpoint.api.meta.gvk_of`.
        """
        return obj


@dataclass(frozen=True, slots=True, order=True)
class GroupVersionResource:
    """Where a type lives in the REST API: group, version and plural resource name."""

    group: str
    version: str
    resource: str

    @property
    def api_version(self) -> str:
        """``"v1"`` for the core group, else ``"group/version"``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return (
            f"{self.resource}.{self.version}.{self.group}"
            if self.group
            else (f"{self.resource}.{self.version}")
        )
