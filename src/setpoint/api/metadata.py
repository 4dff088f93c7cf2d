"""Metadata-only kinds: read, list and watch a kind's objects without their spec, data or status.

``Metadata(kinds.Secret)`` is a :class:`~setpoint.api.types.Kind` like any other: pass it
to ``get``, ``list`` or ``watch`` of the live client, the cache, a controller's
``ctx.reader`` or the testing fake, and the objects come back as the API server's
``PartialObjectMetadata``: ``apiVersion: meta.k8s.io/v1``, ``kind: PartialObjectMetadata``
and the object's whole ``metadata`` (name, namespace, uid, resourceVersion, labels,
annotations, ownerReferences, finalizers, deletionTimestamp...), nothing else. The server
sends only that (the live client asks with ``Accept:
application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1``), so a watch of 10,000
Secrets neither carries nor caches their data.

This is what controller-runtime's ``WatchesMetadata`` / ``metav1.PartialObjectMetadata`` and
kube-rs's ``metadata_watcher`` / ``PartialObjectMeta<K>`` do. The objects keep the server's
``PartialObjectMetadata`` type on purpose (controller-runtime writes the real kind back):
an object without its data must not look like the whole object, or an ``update`` or
``apply`` of it would erase the data.

A cache keeps a kind's full and metadata-only informers apart: ``Metadata(kinds.Secret)``
and ``kinds.Secret`` are two informers, each with its own store, and reading one never
answers from the other. Both see this process's writes (read-after-write holds for both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject

__all__ = [
    "METADATA_ACCEPT",
    "METADATA_LIST_ACCEPT",
    "PARTIAL_OBJECT_METADATA",
    "Metadata",
    "is_metadata",
    "partial_metadata",
]

PARTIAL_OBJECT_METADATA = "PartialObjectMetadata"
"""The ``kind`` of a metadata-only object (``apiVersion: meta.k8s.io/v1``)."""

METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
"""The ``Accept`` header of a metadata-only GET and watch (each event is one object), as
client-go's metadata client sends it (without protobuf). The plain ``application/json`` at
the end lets a server that cannot convert answer with whole objects, which
:func:`partial_metadata` then cuts down."""

METADATA_LIST_ACCEPT = (
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
"""The ``Accept`` header of a metadata-only list (``PartialObjectMetadataList``)."""


@dataclass(frozen=True, slots=True, init=False)
class Metadata:
    """The metadata-only view of a kind: ``Metadata(kinds.Secret)``, ``Metadata(Tenant)``.

    A ``Kind[JsonObject]`` whose objects are ``PartialObjectMetadata`` dicts (see the
    module docstring). Two ``Metadata`` of one kind are equal, whether made from its GVK or
    its typed class. Writes take whole objects: pass the real kind to ``create``,
    ``update``, ``patch`` and ``apply``; ``delete`` accepts either.

    Args:
        kind: The kind (a GVK or a typed class) to read metadata-only.

    Raises:
        TypeError: ``kind`` is not a kind, or is a ``Metadata`` already.

    """

    of: GroupVersionKind
    """The kind whose metadata this reads."""

    def __init__(self, kind: Any) -> None:
        if isinstance(kind, Metadata):
            raise TypeError(f"{kind!r} is metadata-only already; do not wrap it twice")
        gvk = kind if isinstance(kind, GroupVersionKind) else getattr(kind, "gvk", None)
        if not isinstance(gvk, GroupVersionKind):
            raise TypeError(
                f"Metadata({kind!r}): pass a GroupVersionKind or a typed class with a 'gvk' "
                "class attribute (a setpoint Resource)"
            )
        object.__setattr__(self, "of", gvk)

    @property
    def gvk(self) -> GroupVersionKind:
        """The kind's own GVK (the one its URLs and discovery use)."""
        return self.of

    def from_object(self, obj: JsonObject, /) -> JsonObject:
        """``obj`` as a metadata-only object (see :func:`partial_metadata`)."""
        return partial_metadata(obj)

    def __repr__(self) -> str:
        return f"Metadata({self.of})"


def is_metadata(kind: object) -> bool:
    """Whether ``kind`` is a metadata-only kind (a :class:`Metadata`)."""
    return isinstance(kind, Metadata)


def partial_metadata(obj: JsonObject) -> JsonObject:
    """``obj`` as the API server's ``PartialObjectMetadata``: its metadata, nothing else.

    An object the server sent as ``PartialObjectMetadata`` already is returned as it is; a
    whole object (a server that ignored the ``as=`` parameter, or the testing fake) becomes
    ``{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": ...}``,
    sharing ``obj``'s metadata dict.
    """
    if not isinstance(obj, dict) or obj.get("kind") == PARTIAL_OBJECT_METADATA:
        return obj
    return {
        "kind": PARTIAL_OBJECT_METADATA,
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }
