"""Field paths: JSON-patch diffs, and server-side-apply field ownership (``FieldsV1``).

Two questions the safe writes ask of two JSON objects:

- *What JSON patch turns ``old`` into ``new``*, with every operation guarded by
  a ``test`` of the value it replaces (:func:`json_patch_diff`).
- *Does the object already hold what this field manager applies*, looking
  only at the fields the manager owns (:func:`apply_is_noop`).

``FieldsV1`` is the server's encoding of a set of field paths, a trie of JSON
objects whose keys are path elements:

- ``f:<name>``: a field of an object (``f:spec``, ``f:replicas``);
- ``k:<json>``: an item of an associative list, by its key fields
  (``k:{"name":"web"}``, ``k:{"containerPort":80,"protocol":"TCP"}``);
- ``v:<json>``: an item of a set list, by value (``v:"a"``);
- ``i:<n>``: an item by index (rare in persisted sets);
- ``.``: the element itself (the list item as a whole) is in the set.

A leaf (``{}``) is a field owned as a whole: a scalar, or an atomic list or
map (``f:selector: {}``, ``f:args: {}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from setpoint.api.jsonvalues import scalar_equal
from setpoint.client.patch import json_patch_diff

__all__ = [
    "IDENTITY_METADATA",
    "SERVER_METADATA",
    "apply_is_noop",
    "json_patch_diff",
    "managed_fields_of",
    "strip_for_compare",
]

SERVER_METADATA = frozenset(
    {
        "resourceVersion",
        "managedFields",
        "generation",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    }
)
"""Metadata the server owns; a client write never changes it, so diffs ignore it."""

IDENTITY_METADATA = frozenset({"name", "namespace", "generateName"})
"""Metadata that identifies the object rather than describing it; never in a field set."""


def strip_for_compare(obj: Mapping[str, Any], *, drop: frozenset[str] = frozenset()) -> Any:
    """A copy of ``obj`` without server-owned metadata and without the top-level fields ``drop``."""
    out = {k: v for k, v in obj.items() if k not in drop}
    metadata = out.get("metadata")
    if isinstance(metadata, Mapping):
        out["metadata"] = {k: v for k, v in metadata.items() if k not in SERVER_METADATA}
    return out


# --------------------------------------------------------------------------- managed fields


def managed_fields_of(
    obj: Mapping[str, Any], manager: str, *, subresource: str = ""
) -> dict[str, Any] | None:
    """The ``FieldsV1`` set that ``manager`` owns by *applying* (operation ``Apply``).

    ``subresource`` selects the entry for ``status`` writes. ``None`` when the
    manager has applied nothing to this object (so it owns nothing yet).
    """
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    for entry in entries:
        if (
            isinstance(entry, Mapping)
            and entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and (entry.get("subresource") or "") == subresource
        ):
            fields = entry.get("fieldsV1")
            return dict(fields) if isinstance(fields, Mapping) else {}
    return None


def apply_is_noop(current: Mapping[str, Any], desired: Mapping[str, Any], owned: Any) -> bool:
    """Whether applying ``desired`` would change nothing: no value and no ownership.

    True when the fields in ``desired`` are exactly the fields the manager
    owns (``owned``, a ``FieldsV1`` trie) and ``current`` holds the desired
    value in each of them. Fields outside the set (server defaults, other
    managers' labels) are never looked at, which is what keeps a controller
    from fighting over them or rewriting the object on every reconcile.

    Any doubt answers False: an unneeded apply is harmless (the server makes
    no change), a skipped needed one leaves drift.
    """
    if not isinstance(owned, Mapping):
        return False
    return _match_object(current, desired, owned)


def _children(owned: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in owned.items() if k != "."}


def _match_object(current: Any, desired: Any, owned: Mapping[str, Any]) -> bool:
    if not isinstance(current, Mapping) or not isinstance(desired, Mapping):
        return False
    children = _children(owned)
    if not children:
        # Owned as a whole (an atomic map or struct), or an empty granular map:
        # compare values. Keys the server defaulted inside are not the manager's concern.
        return _contains(current, desired)
    wanted = {f"f:{k}" for k in desired}
    if wanted != set(children):
        return False  # the manager would gain or drop fields
    return all(
        _match_value(current.get(name), value, children[f"f:{name}"])
        for name, value in desired.items()
    )


def _match_value(current: Any, desired: Any, owned: Any) -> bool:
    if not isinstance(owned, Mapping):
        return False
    if isinstance(desired, Mapping):
        return _match_object(current, desired, owned)
    if isinstance(desired, list):
        return _match_list(current, desired, owned)
    return scalar_equal(current, desired)


def _match_list(current: Any, desired: list[Any], owned: Mapping[str, Any]) -> bool:
    if not isinstance(current, list):
        return False
    children = _children(owned)
    if not children:
        # An atomic list (or an empty one): the manager owns it whole.
        return len(current) == len(desired) and all(
            _contains(c, d) for c, d in zip(current, desired, strict=True)
        )
    kinds = {name[:2] for name in children}
    if kinds == {"k:"}:
        return _match_associative(current, desired, children)
    if kinds == {"v:"}:
        wanted = {"v:" + orjson.dumps(item).decode() for item in desired}
        return (
            len(wanted) == len(desired)
            and wanted == {_canonical_v(name) for name in children}
            and all(any(scalar_equal(c, d) for c in current) for d in desired)
        )
    if kinds == {"i:"}:
        if {f"i:{i}" for i in range(len(desired))} != set(children) or len(current) < len(desired):
            return False
        return all(
            _match_value(current[i], item, children[f"i:{i}"]) for i, item in enumerate(desired)
        )
    return False


def _canonical_v(name: str) -> str:
    try:
        return "v:" + orjson.dumps(orjson.loads(name[2:])).decode()
    except orjson.JSONDecodeError:
        return name


def _match_associative(current: list[Any], desired: list[Any], owned: Mapping[str, Any]) -> bool:
    entries: list[tuple[dict[str, Any], Any]] = []
    for name, subtree in owned.items():
        try:
            key = orjson.loads(name[2:])
        except orjson.JSONDecodeError:
            return False
        if not isinstance(key, dict):
            return False
        entries.append((key, subtree))
    if len(entries) != len(desired):
        return False  # the manager would gain or drop list items
    unused = list(range(len(entries)))
    for item in desired:
        if not isinstance(item, Mapping):
            return False
        # Key fields the applier left out were defaulted by the server (a port's
        # protocol): match on the key fields the desired item does give.
        match = next(
            (
                i
                for i in unused
                if any(f in item for f in entries[i][0])
                and all(scalar_equal(item[f], v) for f, v in entries[i][0].items() if f in item)
            ),
            None,
        )
        if match is None:
            return False
        unused.remove(match)
        key, subtree = entries[match]
        live = next(
            (
                c
                for c in current
                if isinstance(c, Mapping) and all(scalar_equal(c.get(f), v) for f, v in key.items())
            ),
            None,
        )
        if live is None or not _match_value(live, item, subtree):
            return False
    return True


def _contains(current: Any, desired: Any) -> bool:
    """Whether ``current`` holds everything ``desired`` says (extra keys in current are fine)."""
    if isinstance(desired, Mapping):
        return isinstance(current, Mapping) and all(
            k in current and _contains(current[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(current) == len(desired)
            and all(_contains(c, d) for c, d in zip(current, desired, strict=True))
        )
    return scalar_equal(current, desired)
