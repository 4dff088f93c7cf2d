"""Helpers over objects in their JSON form (``dict[str, Any]``).

setpoint passes objects at the edges as JSON-compatible dicts, exactly as the
API server sends them. Typed models (:mod:`setpoint.api.resource`) convert to
and from this form. These helpers read the common ``metadata`` fields without
each caller repeating ``obj.get("metadata", {}).get(...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey

__all__ = [
    "JsonObject",
    "annotations_of",
    "deletion_timestamp_of",
    "describe",
    "finalizers_of",
    "generation_of",
    "gvk_of",
    "key_of",
    "labels_of",
    "metadata_of",
    "name_of",
    "namespace_of",
    "resource_version_of",
    "uid_of",
]

JsonObject: TypeAlias = dict[str, Any]
"""An API object as decoded JSON: ``{"apiVersion": ..., "kind": ..., "metadata": {...}, ...}``."""

_EMPTY: Mapping[str, Any] = {}


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's ``metadata`` mapping, or an empty mapping when there is none."""
    m = obj.get("metadata")
    if type(m) is dict:  # decoded JSON: skip the (slower) abstract Mapping check
        return m
    return m if isinstance(m, Mapping) else _EMPTY


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name``, or ``""`` when unset (for example before ``generateName``)."""
    return str(metadata_of(obj).get("name") or "")


def namespace_of(obj: Mapping[str, Any]) -> str:
    """``metadata.namespace``, or ``""`` for cluster-scoped objects."""
    return str(metadata_of(obj).get("namespace") or "")


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """The object's :class:`ObjectKey` (namespace and name)."""
    # namespace_of and name_of in one body: the runtime takes keys of every event and write.
    m = obj.get("metadata")
    if type(m) is not dict:
        m = m if isinstance(m, Mapping) else _EMPTY
    return ObjectKey(str(m.get("namespace") or ""), str(m.get("name") or ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    """``metadata.uid``, or ``""`` before the server assigned one."""
    return str(metadata_of(obj).get("uid") or "")


def resource_version_of(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion``, or ``""`` when unset."""
    return str(metadata_of(obj).get("resourceVersion") or "")


def generation_of(obj: Mapping[str, Any]) -> int:
    """``metadata.generation``, or ``0`` when the server does not track it for this kind."""
    value = metadata_of(obj).get("generation")
    return int(value) if isinstance(value, int) else 0


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels`` (read-only view; empty when unset)."""
    labels = metadata_of(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.annotations`` (read-only view; empty when unset)."""
    annotations = metadata_of(obj).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def deletion_timestamp_of(obj: Mapping[str, Any]) -> str | None:
    """``metadata.deletionTimestamp`` (RFC 3339), or ``None`` when the object is not being deleted.

    Its presence is what "being deleted" means: the object stays until its
    finalizers are gone.
    """
    value = metadata_of(obj).get("deletionTimestamp")
    return str(value) if value else None


def finalizers_of(obj: Mapping[str, Any]) -> list[str]:
    """A copy of ``metadata.finalizers`` (empty when unset)."""
    return list(metadata_of(obj).get("finalizers") or [])


def gvk_of(obj: Mapping[str, Any]) -> GroupVersionKind:
    """The object's type from its ``apiVersion`` and ``kind`` fields.

    Raises:
        ValueError: naming the object when either field is missing, because the
            client cannot tell where to send an object without them.

    """
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not kind:
        raise ValueError(
            f"object {describe(obj)} has no apiVersion/kind: set both "
            "(for example apiVersion='v1', kind='ConfigMap') before sending it"
        )
    return GroupVersionKind.from_api_version(api_version, kind)


def describe(obj: Mapping[str, Any]) -> str:
    """A short human name for error messages: ``ConfigMap ns/name``."""
    kind = obj.get("kind") or "object"
    key = key_of(obj)
    return f"{kind} {key}" if key.name else f"{kind} (unnamed)"
