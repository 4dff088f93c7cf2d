"""Children the garbage collector cannot own: a label and an annotation that name the owner.

An owner reference works only within one namespace, or from a cluster-scoped owner.
A namespaced owner with children in *other* namespaces (a mirror that copies a Secret
into every team namespace), or with cluster-scoped children (a ClusterRole per tenant
namespace), cannot use one: the garbage collector would treat the reference as dangling.
For those children setpoint offers one convention, used by the ready-made pieces:

- :func:`track_owner` stamps the child with a label :data:`OWNER_UID_LABEL` (the owner's
  UID, for a server-side ``list`` of its children in every namespace) and an annotation
  :data:`OWNER_ANNOTATION` (the owner's kind and key, ``SecretMirror.mirror.example.com
  team-a/copy-db``, so a watch event maps back to the owner without a lookup);
- :func:`tracked_owner` reads the annotation back;
- ``setpoint.controller.enqueue_tracked_owner(Kind)`` is the watch mapper that enqueues the
  owner when a child changes;
- ``setpoint.client.safe.delete_tracked_children`` deletes them, from a finalizer's cleanup
  (nothing else will: the garbage collector does not know they belong to the owner).

All functions here are pure and work on JSON dicts and typed resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from setpoint.api.errors import SetpointError
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import gvk_of, metadata_of
from setpoint.api.types import Kind, TypedObject, is_typed, split_kind

__all__ = [
    "OWNER_ANNOTATION",
    "OWNER_UID_LABEL",
    "AlreadyTracked",
    "TrackingError",
    "owner_selector",
    "track_owner",
    "tracked_owner",
]

OWNER_UID_LABEL: Final = "setpoint.dev/owner-uid"
"""Label on a tracked child: the owner's UID (a UID is a valid label value)."""

OWNER_ANNOTATION: Final = "setpoint.dev/owner"
"""Annotation on a tracked child: ``<Kind>.<group> <namespace>/<name>`` of the owner
(``<Kind>`` alone for the core group, ``<name>`` alone for a cluster-scoped owner)."""


class TrackingError(SetpointError, ValueError):
    """The owner cannot be tracked: it has no UID or name yet (it was never stored)."""

    __module__ = "setpoint"


class AlreadyTracked(TrackingError):
    """The child already names another owner; :func:`track_owner` does not take it over.

    Two owners that both write one child undo each other's label on every reconcile, and
    each write is an event that reconciles the other: a loop with no end and no error. As
    :class:`~setpoint.api.owners.AlreadyOwned` does for controller references, the second
    owner is refused, naming the first.
    """

    __module__ = "setpoint"

    def __init__(self, message: str, *, owner_uid: str, owner: str | None) -> None:
        super().__init__(message)
        self.owner_uid = owner_uid
        """The UID the child's label names."""
        self.owner = owner
        """The owner its annotation names (``<Kind>.<group> <namespace>/<name>``), if any."""


def _json(obj: Any) -> Mapping[str, Any]:
    return obj.to_object() if is_typed(obj) else obj


def _owner_value(owner: Mapping[str, Any]) -> str:
    gvk = gvk_of(owner)
    kind = f"{gvk.kind}.{gvk.group}" if gvk.group else gvk.kind
    m = metadata_of(owner)
    namespace = m.get("namespace") or ""
    return f"{kind} {namespace}/{m['name']}" if namespace else f"{kind} {m['name']}"


def track_owner(
    child: dict[str, Any] | TypedObject, owner: Mapping[str, Any] | TypedObject
) -> bool:
    """Stamp ``child`` with the label and annotation naming ``owner``; return whether it changed.

    Raises:
        TrackingError: ``owner`` has no ``metadata.uid`` or ``metadata.name`` (read it from
            the server first).
        AlreadyTracked: ``child`` already carries another owner's UID label (nothing is
            changed). A recreated owner (same name, new UID) is refused too: the children
            of the deleted one are not adopted.

    """
    data = _json(owner)
    m = metadata_of(data)
    uid, name = m.get("uid"), m.get("name")
    if not uid or not name:
        raise TrackingError(
            f"cannot track {gvk_of(data).kind} {name or '(no name)'} as an owner: it has no "
            "metadata.uid yet; pass the owner as read from the server"
        )
    wanted = {OWNER_UID_LABEL: str(uid)}, {OWNER_ANNOTATION: _owner_value(data)}
    _refuse_another_owner(child, str(uid), wanted[1][OWNER_ANNOTATION])
    if is_typed(child):
        metadata = child.metadata  # type: ignore[attr-defined]  # every Resource has it
        labels = dict(metadata.labels or {})
        annotations = dict(metadata.annotations or {})
        changed = _merge(labels, wanted[0]) | _merge(annotations, wanted[1])
        if changed:
            metadata.labels, metadata.annotations = labels, annotations
        return changed
    metadata = child.setdefault("metadata", {})
    labels = metadata.setdefault("labels", {})
    annotations = metadata.setdefault("annotations", {})
    return _merge(labels, wanted[0]) | _merge(annotations, wanted[1])


def _refuse_another_owner(child: dict[str, Any] | TypedObject, uid: str, owner: str) -> None:
    m = metadata_of(_json(child))
    current = (m.get("labels") or {}).get(OWNER_UID_LABEL)
    if not current or current == uid:
        return
    named = (m.get("annotations") or {}).get(OWNER_ANNOTATION)
    namespace = m.get("namespace")
    where = f"{namespace}/{m.get('name')}" if namespace else str(m.get("name"))
    raise AlreadyTracked(
        f"{gvk_of(_json(child)).kind} {where} is tracked by another owner "
        f"({named or 'unnamed'}, uid {current}); {owner} does not take it over. Two owners "
        "writing one child undo each other's writes forever: give each owner's children "
        "names of their own, or delete the child (or its label "
        f"{OWNER_UID_LABEL}) to hand it over",
        owner_uid=current,
        owner=named if isinstance(named, str) else None,
    )


def _merge(target: dict[str, str], wanted: Mapping[str, str]) -> bool:
    changed = any(target.get(k) != v for k, v in wanted.items())
    target.update(wanted)
    return changed


def tracked_owner(
    obj: Mapping[str, Any] | TypedObject, owner_kind: Kind[object]
) -> ObjectKey | None:
    """The key of the owner of kind ``owner_kind`` that :func:`track_owner` named on ``obj``.

    ``owner_kind`` is a typed class (``SecretMirror``) or a GVK. ``None`` when ``obj``
    carries no such annotation, or it names another kind (any version of ``owner_kind``'s
    group and kind matches).
    """
    gvk, _ = split_kind(owner_kind)
    value = (metadata_of(_json(obj)).get("annotations") or {}).get(OWNER_ANNOTATION)
    if not isinstance(value, str) or " " not in value:
        return None
    kind, _, where = value.partition(" ")
    name_kind, _, group = kind.partition(".")
    if (name_kind, group) != (gvk.kind, gvk.group):
        return None
    namespace, _, name = where.rpartition("/")
    return ObjectKey(namespace, name) if name else None


def owner_selector(owner: Mapping[str, Any] | TypedObject) -> dict[str, str]:
    """The label selector (``labels=``) of ``owner``'s tracked children."""
    uid = metadata_of(_json(owner)).get("uid")
    if not uid:
        raise TrackingError("the owner has no metadata.uid; pass it as read from the server")
    return {OWNER_UID_LABEL: str(uid)}
