"""The three non-apply patch kinds, applied in memory the way the API server applies them.

- :func:`json_patch`: RFC 6902 with the leniencies of the server's
  ``json-patch`` library (checked by the parity suite): ``replace`` of a
  missing object member adds it, ``test`` of a missing path compares against
  ``null``, and negative array indices count from the end.
- :func:`merge_patch`: RFC 7386 (``null`` deletes, lists replace).
- :func:`strategic_merge_patch`: Kubernetes strategic merge, simplified. The
  real server reads the patch strategy of every field from the Go types; the
  fake knows the merge keys of the commonly patched built-in lists
  (:data:`MERGE_KEYS`) and treats every other list as atomic (replaced). The
  directives ``$patch: replace|delete|merge``, ``$deleteFromPrimitiveList``,
  ``$retainKeys`` and ``$setElementOrder`` are honoured (the last one only
  stripped). Merged lists put the patch's items first, then the items only
  the server had, which is the order the server produces when the patch has
  no ``$setElementOrder``.

Every function returns a new document and leaves its inputs untouched. A
patch that cannot be applied raises :class:`PatchError`; the fake answers it
as the server does (422 Invalid for JSON patch, 400 Bad Request otherwise).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from setpoint.api.errors import SetpointError
from setpoint.api.jsonvalues import json_equal

__all__ = [
    "MERGE_KEYS",
    "PRIMITIVE_MERGE_LISTS",
    "PatchError",
    "json_equal",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]


class PatchError(SetpointError, ValueError):
    """A patch the server would refuse; the message says which operation and path failed."""


# ----------------------------------------------------------------------------- JSON patch


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchError(f"path {path!r} is not a string")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(token: str, length: int, *, for_add: bool, path: str) -> int:
    if token == "-" and for_add:
        return length
    try:
        index = int(token)
    except ValueError:
        raise PatchError(f"path {path!r}: {token!r} is not an array index") from None
    if index < 0:
        index += length
    limit = length if for_add else length - 1
    if index < 0 or index > limit:
        raise PatchError(f"path {path!r}: index {token} is out of range (length {length})")
    return index


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for token in parts[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"path {path!r}: {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), for_add=False, path=path)]
        else:
            raise PatchError(f"path {path!r}: cannot descend into a {type(node).__name__}")
    return node


def _get(doc: Any, parts: list[str], path: str) -> tuple[bool, Any]:
    node = doc
    for token in parts:
        if isinstance(node, dict):
            if token not in node:
                return False, None
            node = node[token]
        elif isinstance(node, list):
            try:
                node = node[_index(token, len(node), for_add=False, path=path)]
            except PatchError:
                return False, None
        else:
            return False, None
    return True, node


def _add(doc: Any, parts: list[str], value: Any, path: str, *, replace: bool = False) -> Any:
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    token = parts[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(token, len(parent), for_add=False, path=path)] = value
        else:
            parent.insert(_index(token, len(parent), for_add=True, path=path), value)
    else:
        raise PatchError(f"path {path!r}: the parent is a {type(parent).__name__}, not a container")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> tuple[Any, Any]:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    token = parts[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"path {path!r} does not exist, so it cannot be removed")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(token, len(parent), for_add=False, path=path))
    raise PatchError(f"path {path!r}: the parent is a {type(parent).__name__}, not a container")


def json_patch(doc: Mapping[str, Any], operations: Sequence[Mapping[str, Any]]) -> Any:
    """Apply RFC 6902 ``operations`` to a copy of ``doc``: all of them, or none (PatchError)."""
    result: Any = copy.deepcopy(dict(doc))
    for number, op in enumerate(operations):
        if not isinstance(op, Mapping):
            raise PatchError(f"operation {number} is not an object: {op!r}")
        kind = op.get("op")
        path = op.get("path")
        parts = _pointer(path)
        where = f"operation {number} ({kind} {path})"
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{where} has no 'value'")
        if kind == "add":
            result = _add(result, parts, copy.deepcopy(op["value"]), str(path))
        elif kind == "replace":
            parent = _parent(result, parts, str(path)) if parts else None
            # The server's library adds a missing object member instead of failing.
            is_list = isinstance(parent, list)
            result = _add(result, parts, copy.deepcopy(op["value"]), str(path), replace=is_list)
        elif kind == "remove":
            result, _ = _remove(result, parts, str(path))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from"))
            found, value = _get(result, source, str(op.get("from")))
            if not found:
                raise PatchError(f"{where}: 'from' {op.get('from')!r} does not exist")
            if kind == "move":
                result, value = _remove(result, source, str(op.get("from")))
            result = _add(result, parts, copy.deepcopy(value), str(path))
        elif kind == "test":
            _, value = _get(result, parts, str(path))  # a missing path reads as null
            if not json_equal(value, op["value"]):
                raise PatchError(
                    f"{where} failed: the value is {value!r}, the patch expected {op['value']!r}"
                )
        else:
            raise PatchError(f"operation {number} has an unknown op {kind!r}")
    return result


# ----------------------------------------------------------------------------- merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch to a copy of ``target``."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ----------------------------------------------------------------------------- strategic merge

MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ownerReferences": "uid",
    "conditions": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "ports": "port",  # Service ports; container ports use containerPort (see _merge_key)
}
"""Built-in list fields the fake merges by key in a strategic merge patch (field -> key)."""

PRIMITIVE_MERGE_LISTS: frozenset[str] = frozenset({"finalizers"})
"""Lists of strings a strategic merge patch merges as sets rather than replaces."""


def _merge_key(field: str, items: Sequence[Any]) -> str | None:
    key = MERGE_KEYS.get(field)
    if field == "ports" and any(isinstance(i, Mapping) and "containerPort" in i for i in items):
        return "containerPort"
    return key


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch to a copy of ``target`` (see the module docstring)."""
    result = _smp_map(target if isinstance(target, Mapping) else {}, patch)
    if result is None:
        raise PatchError("a top-level $patch: delete would delete the whole object")
    return result


def _smp_map(target: Mapping[str, Any], patch: Any) -> dict[str, Any] | None:
    if not isinstance(patch, Mapping):
        raise PatchError(f"a strategic merge patch must be an object here, not {patch!r}")
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    plain = {k: v for k, v in patch.items() if not k.startswith("$")}
    if directive == "replace":
        replaced: dict[str, Any] = copy.deepcopy(_strip_directives(plain))
        return replaced
    if directive not in (None, "merge"):
        raise PatchError(f"unknown $patch directive {directive!r}")
    result = copy.deepcopy(dict(target))
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.partition("/")[2]
            if not isinstance(value, list):
                raise PatchError(f"{key} must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]
    for key, value in plain.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping):
            merged = _smp_map(result.get(key) or {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value)
        else:
            result[key] = value
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list) or any(k not in retain for k in plain):
            raise PatchError("invalid patch format of retainKeys")
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _smp_list(field: str, current: Any, patch: list[Any]) -> list[Any]:
    if any(isinstance(i, Mapping) and i.get("$patch") == "replace" for i in patch):
        return [
            copy.deepcopy(_strip_directives(i))
            for i in patch
            if not (isinstance(i, Mapping) and "$patch" in i)
        ]
    existing = list(current) if isinstance(current, list) else []
    if field in PRIMITIVE_MERGE_LISTS:
        if any(isinstance(i, Mapping | list) for i in patch):
            raise PatchError(f"list element types are not identical in {field}")
        merged = [copy.deepcopy(i) for i in patch]
        merged += [i for i in existing if not any(json_equal(i, p) for p in patch)]
        return merged
    key = _merge_key(field, [*existing, *patch])
    if key is None or not all(isinstance(i, Mapping) for i in patch):
        return [copy.deepcopy(_strip_directives(i)) for i in patch]
    by_key = {i.get(key): i for i in existing if isinstance(i, Mapping)}
    deleted = {i.get(key) for i in patch if i.get("$patch") == "delete"}
    merged_items: list[Any] = []
    seen = set()
    for item in patch:
        if item.get("$patch") == "delete":
            continue
        ident = item.get(key)
        if ident is None:
            raise PatchError(f"a {field} item has no merge key {key!r}: {item!r}")
        seen.add(ident)
        base = by_key.get(ident)
        merged_item = _smp_map(base or {}, item)
        if merged_item is not None:
            merged_items.append(merged_item)
    for item in existing:
        ident = item.get(key) if isinstance(item, Mapping) else None
        if ident not in seen and ident not in deleted:
            merged_items.append(item)
    return merged_items
