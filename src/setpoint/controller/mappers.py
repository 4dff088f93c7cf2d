"""Ready-made ``watches`` mappers: which owner to reconcile when a watched object changes.

``owns(Kind)`` maps a child to its controlling owner through its owner reference. Children
that cannot carry one (in another namespace than their owner, or cluster-scoped under a
namespaced owner; see :mod:`setpoint.api.tracking`) name their owner otherwise, and these
mappers read that back::

    (manager.controller("mirror")
        .for_(SecretMirror)
        .watches(kinds.Secret, enqueue_tracked_owner(SecretMirror))   # copies, any namespace
        .watches(kinds.Namespace, enqueue_all(SecretMirror))          # a namespace came or went
        .build(reconcile))

Each returns a mapper function; objects that name no owner map to nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from setpoint.api.keys import ObjectKey
from setpoint.api.meta import metadata_of
from setpoint.api.tracking import tracked_owner
from setpoint.api.types import Kind, is_typed, split_kind

if TYPE_CHECKING:
    from setpoint.client.protocols import IndexReader

__all__ = [
    "enqueue_all",
    "enqueue_from_annotation",
    "enqueue_from_label",
    "enqueue_tracked_owner",
]


def _metadata(obj: Any) -> Mapping[str, Any]:
    return metadata_of(obj.to_object() if is_typed(obj) else obj)


def enqueue_tracked_owner(owner_kind: Kind[object]) -> Callable[[Any], list[ObjectKey]]:
    """Map a child stamped by :func:`~setpoint.api.tracking.track_owner` to its owner.

    Only owners of ``owner_kind`` count (any version of its group and kind).
    """
    gvk, _ = split_kind(owner_kind)

    def mapper(obj: Any) -> list[ObjectKey]:
        key = tracked_owner(obj.to_object() if is_typed(obj) else obj, gvk)
        return [] if key is None else [key]

    return mapper


def _parse_key(value: object) -> ObjectKey | None:
    if not isinstance(value, str) or not value.strip():
        return None
    namespace, _, name = value.strip().rpartition("/")
    return ObjectKey(namespace, name) if name else None


def enqueue_from_annotation(annotation: str) -> Callable[[Any], list[ObjectKey]]:
    """Map an object to the owner its ``annotation`` names: ``namespace/name``, or ``name``.

    ``name`` alone names a cluster-scoped owner.
    """

    def mapper(obj: Any) -> list[ObjectKey]:
        key = _parse_key((_metadata(obj).get("annotations") or {}).get(annotation))
        return [] if key is None else [key]

    return mapper


def enqueue_from_label(
    name_label: str, *, namespace_label: str | None = None
) -> Callable[[Any], list[ObjectKey]]:
    """Map an object to the owner whose name its label ``name_label`` holds.

    The owner's namespace is the value of ``namespace_label``; without one, the owner is
    cluster-scoped. (A label value holds at most 63 characters: a longer owner name needs
    an annotation, :func:`enqueue_from_annotation`.)
    """

    def mapper(obj: Any) -> list[ObjectKey]:
        labels = _metadata(obj).get("labels") or {}
        name = labels.get(name_label)
        if not name:
            return []
        namespace = labels.get(namespace_label, "") if namespace_label else ""
        return [ObjectKey(namespace, name)] if namespace or not namespace_label else []

    return mapper


def enqueue_all(
    owner_kind: Kind[object], *, namespace: str | None = None
) -> Callable[[Any, IndexReader], Any]:
    """Map any event to every cached object of ``owner_kind`` (in ``namespace``, or all).

    For inputs that concern owners in a way no label records: a Namespace that appears
    or changes its labels may enter any mirror's namespace selector. Every owner is
    reconciled, from the controller's cache (the mapper receives its reader).
    """
    gvk, _ = split_kind(owner_kind)

    async def mapper(obj: Any, reader: IndexReader) -> Iterable[ObjectKey]:
        listed = await reader.list(gvk, namespace=namespace)
        keys = []
        for item in listed.items:
            m = metadata_of(item)
            keys.append(ObjectKey(str(m.get("namespace") or ""), str(m["name"])))
        return keys

    return mapper
