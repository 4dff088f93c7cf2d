"""Owner references: who owns an object, for garbage collection and for "who manages this".

A dependent names its owners in ``metadata.ownerReferences``; when every
owner is gone the garbage collector deletes the dependent (with background or
foreground propagation). At most one owner reference is the *controller*
(``controller: true``): the one object whose controller manages the dependent.

Kubernetes forbids two shapes, and the garbage collector treats them as
dangling (deleting the dependent or ignoring the reference) instead of
failing the write, so these helpers refuse them up front:

- a namespaced owner in another namespace than the dependent;
- a namespaced owner of a cluster-scoped dependent.

A cluster-scoped owner may own anything. Scope comes from, in order: the
``ResourceInfo`` passed in (the client's ``resource_info(kind)`` is the
truth), :data:`setpoint.api.kinds.BUILTIN_RESOURCES`, a typed class's
``resource_info()``, and last from whether the object has a
``metadata.namespace`` (reliable for an owner read from the server, which
must be the case anyway since the reference needs its UID).

All functions are pure and work on JSON dicts and typed resources
(:class:`setpoint.api.resource.Resource`), mutating the dependent in place
and returning whether anything changed.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind, split_api_version
from setpoint.api.kinds import BUILTIN_RESOURCES, ResourceInfo
from setpoint.api.meta import JsonObject, gvk_of, metadata_of
from setpoint.api.types import TypedObject, is_typed

__all__ = [
    "AlreadyOwned",
    "InvalidOwner",
    "NotAdopted",
    "OwnerError",
    "controller_of",
    "is_controlled_by",
    "is_owned_by",
    "owner_reference",
    "owner_references_of",
    "remove_owner_reference",
    "set_controller_reference",
    "set_owner_reference",
]


class OwnerError(SetpointError, ValueError):
    """An owner reference that cannot be set. Subclasses say why."""


class InvalidOwner(OwnerError):
    """The owner/dependent pair is one Kubernetes forbids, or the owner lacks its identity.

    Cross-namespace owners, namespaced owners of cluster-scoped objects, and
    owners without ``metadata.uid`` (not yet read from the server).
    """

    __module__ = "setpoint"


class AlreadyOwned(OwnerError):
    """The dependent already has a different controller; only one controller may own an object."""

    __module__ = "setpoint"

    def __init__(self, message: str, *, owner: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.owner: Mapping[str, Any] = owner
        """The existing controller reference (``apiVersion``, ``kind``, ``name``, ``uid``)."""


class NotAdopted(OwnerError):
    """The dependent exists without a controller, and the caller did not ask to adopt it.

    ``apply_child`` never takes over an object it did not create unless asked
    (``adopt=Adoption.ORPHANS``): an object someone else made under the same name would
    otherwise get this controller's fields, its owner reference, and be deleted with the
    owner.
    """

    __module__ = "setpoint"


# --------------------------------------------------------------------------- identity


def _as_json(obj: Any) -> Mapping[str, Any]:
    return obj.to_object() if is_typed(obj) else obj


def _gvk(obj: Any) -> GroupVersionKind:
    return type(obj).gvk if is_typed(obj) else gvk_of(obj)


def _describe(data: Mapping[str, Any]) -> str:
    m = metadata_of(data)
    where = f"{m.get('namespace')}/" if m.get("namespace") else ""
    return f"{data.get('kind') or 'object'} {where}{m.get('name') or '(unnamed)'}"


def _ref_describe(ref: Mapping[str, Any]) -> str:
    return (
        f"{ref.get('kind')} {ref.get('name')!r} "
        f"(apiVersion {ref.get('apiVersion')}, uid {ref.get('uid')})"
    )


def _group(api_version: Any) -> str:
    try:
        return split_api_version(str(api_version or ""))[0]
    except ValueError:
        return str(api_version or "")


def _same_object(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Same group, kind and name, as controller-runtime compares references.

    The version is ignored (an owner read at another version is the same
    object) and so is the UID, so a reference to a deleted-and-recreated
    owner is replaced rather than duplicated.
    """
    return (
        _group(a.get("apiVersion")) == _group(b.get("apiVersion"))
        and a.get("kind") == b.get("kind")
        and a.get("name") == b.get("name")
    )


def _namespaced(obj: Any, data: Mapping[str, Any], info: ResourceInfo | None) -> bool:
    if info is not None:
        return info.namespaced
    gvk = _gvk(obj)
    known = BUILTIN_RESOURCES.get(gvk)
    if known is not None:
        return known.namespaced
    typed_info = getattr(type(obj), "resource_info", None)
    if callable(typed_info):
        try:
            return bool(typed_info().namespaced)
        except Exception:  # an undeclared class: fall back to the object itself
            pass
    return bool(metadata_of(data).get("namespace"))


def owner_reference(
    owner: JsonObject | TypedObject,
    *,
    controller: bool = False,
    block_owner_deletion: bool = True,
) -> JsonObject:
    """The ``ownerReferences`` entry pointing at ``owner``.

    ``block_owner_deletion`` makes foreground deletion of the owner wait for
    this dependent (the default, as controller-runtime sets for controllers).

    Raises:
        InvalidOwner: ``owner`` has no name or no UID (it must be read from the server).

    """
    data = _as_json(owner)
    m = metadata_of(data)
    gvk = _gvk(owner)
    if not m.get("name") or not m.get("uid"):
        raise InvalidOwner(
            f"owner {_describe(data)} has no metadata.name/uid; an owner reference needs the "
            "owner as read from (or returned by) the API server"
        )
    ref: JsonObject = {
        "apiVersion": gvk.api_version,
        "kind": gvk.kind,
        "name": m["name"],
        "uid": m["uid"],
    }
    if controller:
        ref["controller"] = True
    if block_owner_deletion:
        ref["blockOwnerDeletion"] = True
    return ref


def _check_scope(
    *,
    dependent: Any,
    dep_data: Mapping[str, Any],
    owner: Any,
    owner_data: Mapping[str, Any],
    owner_info: ResourceInfo | None,
    dependent_info: ResourceInfo | None,
) -> None:
    if not _namespaced(owner, owner_data, owner_info):
        return  # a cluster-scoped owner may own namespaced and cluster-scoped objects alike
    owner_ns = str(metadata_of(owner_data).get("namespace") or "")
    if not owner_ns:
        raise InvalidOwner(
            f"owner {_describe(owner_data)} is namespaced but has no metadata.namespace; "
            "pass the owner as read from the API server"
        )
    if not _namespaced(dependent, dep_data, dependent_info):
        raise InvalidOwner(
            f"{_describe(dep_data)} is cluster-scoped and cannot be owned by the namespaced "
            f"{_describe(owner_data)}: Kubernetes forbids namespaced owners of cluster-scoped "
            "objects (the garbage collector would delete it). Use a cluster-scoped owner"
        )
    dep_ns = str(metadata_of(dep_data).get("namespace") or "")
    if not dep_ns:
        raise InvalidOwner(
            f"{_describe(dep_data)} has no metadata.namespace; set it (to {owner_ns!r}) "
            "before setting an owner reference"
        )
    if dep_ns != owner_ns:
        raise InvalidOwner(
            f"{_describe(dep_data)} cannot be owned by {_describe(owner_data)}: "
            "cross-namespace owner references are forbidden by Kubernetes (the garbage "
            f"collector would treat the owner as absent). Create the dependent in {owner_ns!r}"
        )


# --------------------------------------------------------------------------- reading


def owner_references_of(obj: JsonObject | TypedObject) -> list[JsonObject]:
    """A copy of the object's owner references, as JSON dicts."""
    data = _as_json(obj)
    return [
        dict(r) for r in metadata_of(data).get("ownerReferences") or [] if isinstance(r, Mapping)
    ]


def controller_of(obj: JsonObject | TypedObject) -> JsonObject | None:
    """The owner reference marked ``controller: true``, or ``None``."""
    for ref in owner_references_of(obj):
        if ref.get("controller") is True:
            return ref
    return None


def is_owned_by(obj: JsonObject | TypedObject, owner: JsonObject | TypedObject) -> bool:
    """Whether ``obj`` has an owner reference to ``owner`` (same group, kind, name and UID)."""
    target = _identity(owner)
    return any(
        _same_object(ref, target) and ref.get("uid") == target["uid"]
        for ref in owner_references_of(obj)
    )


def is_controlled_by(obj: JsonObject | TypedObject, owner: JsonObject | TypedObject) -> bool:
    """Whether ``owner`` is ``obj``'s controller (same group, kind, name and UID)."""
    ref = controller_of(obj)
    target = _identity(owner)
    return ref is not None and _same_object(ref, target) and ref.get("uid") == target["uid"]


def _identity(owner: JsonObject | TypedObject) -> JsonObject:
    data = _as_json(owner)
    gvk = _gvk(owner)
    m = metadata_of(data)
    return {
        "apiVersion": gvk.api_version,
        "kind": gvk.kind,
        "name": m.get("name"),
        "uid": m.get("uid"),
    }


# --------------------------------------------------------------------------- writing


def _store(dependent: Any, refs: list[JsonObject]) -> None:
    """Write ``refs`` back into the dependent, as dicts or as typed OwnerReference models."""
    if isinstance(dependent, MutableMapping):
        metadata = dependent.setdefault("metadata", {})
        if refs:
            metadata["ownerReferences"] = refs
        else:
            metadata.pop("ownerReferences", None)
        return
    metadata = getattr(dependent, "metadata", None)
    if metadata is None or not hasattr(metadata, "owner_references"):
        raise TypeError(
            f"{type(dependent).__name__} has no metadata.owner_references; owner helpers need a "
            "JSON dict or a setpoint Resource"
        )
    # A typed dependent: pydantic is loaded already. Dict-only operators never import it.
    from setpoint.api.resource import OwnerReference

    metadata.owner_references = [OwnerReference.model_validate(r) for r in refs]


def _upsert(dependent: Any, ref: JsonObject) -> bool:
    refs = owner_references_of(dependent)
    for i, existing in enumerate(refs):
        if _same_object(existing, ref):
            if existing == ref:
                return False
            refs[i] = ref
            _store(dependent, refs)
            return True
    refs.append(ref)
    _store(dependent, refs)
    return True


def set_owner_reference(
    dependent: JsonObject | TypedObject,
    owner: JsonObject | TypedObject,
    *,
    block_owner_deletion: bool = False,
    owner_info: ResourceInfo | None = None,
    dependent_info: ResourceInfo | None = None,
) -> bool:
    """Make ``owner`` an owner (not the controller) of ``dependent``; return whether it changed.

    A reference to the same object (group, kind, name) is replaced, so an
    owner that was deleted and recreated is referenced by its new UID; a
    ``controller`` flag already on that reference is kept. Other owners'
    references are untouched.

    Raises:
        InvalidOwner: cross-namespace owner, namespaced owner of a
            cluster-scoped dependent, or an owner without UID.

    """
    owner_data, dep_data = _as_json(owner), _as_json(dependent)
    _check_scope(
        dependent=dependent,
        dep_data=dep_data,
        owner=owner,
        owner_data=owner_data,
        owner_info=owner_info,
        dependent_info=dependent_info,
    )
    ref = owner_reference(owner, block_owner_deletion=block_owner_deletion)
    for existing in owner_references_of(dependent):
        if _same_object(existing, ref) and existing.get("controller") is True:
            ref["controller"] = True  # never demote a controller by adding it as a plain owner
    return _upsert(dependent, ref)


def set_controller_reference(
    dependent: JsonObject | TypedObject,
    owner: JsonObject | TypedObject,
    *,
    block_owner_deletion: bool = True,
    owner_info: ResourceInfo | None = None,
    dependent_info: ResourceInfo | None = None,
) -> bool:
    """Make ``owner`` the controller of ``dependent``; return whether it changed.

    The reference has ``controller: true`` and, by default,
    ``blockOwnerDeletion: true``, as controller-runtime's
    ``SetControllerReference`` writes it. Setting it again is a no-op.

    Raises:
        AlreadyOwned: another object is already the controller; the message
            names it, and ``.owner`` holds its reference.
        InvalidOwner: cross-namespace owner, namespaced owner of a
            cluster-scoped dependent, or an owner without UID.

    """
    owner_data, dep_data = _as_json(owner), _as_json(dependent)
    _check_scope(
        dependent=dependent,
        dep_data=dep_data,
        owner=owner,
        owner_data=owner_data,
        owner_info=owner_info,
        dependent_info=dependent_info,
    )
    ref = owner_reference(owner, controller=True, block_owner_deletion=block_owner_deletion)
    if type(dependent) is dict and not metadata_of(dependent).get("ownerReferences"):
        # No references yet (a child as its controller describes it, on every apply_child):
        # nothing to compare or replace.
        dependent.setdefault("metadata", {})["ownerReferences"] = [ref]
        return True
    existing = controller_of(dependent)
    if existing is not None and not _same_object(existing, ref):
        raise AlreadyOwned(
            f"{_describe(dep_data)} is already controlled by {_ref_describe(existing)}; "
            f"it cannot also be controlled by {_ref_describe(ref)}. Only one controller may "
            "own an object: remove the other controller reference first, or use "
            "set_owner_reference for a non-controller owner",
            owner=existing,
        )
    return _upsert(dependent, ref)


def remove_owner_reference(
    dependent: JsonObject | TypedObject, owner: JsonObject | TypedObject
) -> bool:
    """Remove every reference to ``owner`` (same group, kind and name); return whether any was."""
    target = _identity(owner)
    refs = owner_references_of(dependent)
    kept = [r for r in refs if not _same_object(r, target)]
    if len(kept) == len(refs):
        return False
    _store(dependent, kept)
    return True
