"""Server-side apply, approximated: field ownership per manager, without ``managedFields``.

The real server keeps a ``managedFields`` entry per manager and operation,
computed with the structured-merge-diff library from the OpenAPI schema. The
fake keeps the same *idea* privately, in :class:`Ownership`, and never writes
``metadata.managedFields``. Exactly what it does:

- **Fields** are leaf paths of the JSON object: a path descends into objects
  (an empty object is itself a leaf) and stops at anything else, so every list
  is *atomic* (one owner for the whole list), except two lists whose items
  are owned one by one, as on the server: ``metadata.finalizers`` (a set) and
  ``metadata.ownerReferences`` (keyed by ``uid``). Of ``metadata``, only
  labels, annotations, finalizers and ownerReferences are owned.
- **Ownership** is recorded per ``(manager, operation)``; the operation is
  ``Apply`` for apply patches and ``Update`` for create, update and the other
  patches. A non-apply write makes its manager the owner of every field it
  changed and takes those fields away from the other managers (no conflict),
  as the server does.
- **Apply** by manager *M* with configuration *C*:

  1. A field of *C* whose value differs from the live value and that another
     manager owns is a conflict: 409 Conflict naming the fields and managers,
     unless ``force``, which takes the fields over.
  2. Fields *M* applied last time but left out of *C* are removed from the
     object, unless another manager also owns them.
  3. *C* is merged into the object: objects merge, lists and scalars replace,
     finalizers merge as a set, ownerReferences merge by ``uid``.
  4. *M*'s ``Apply`` ownership becomes exactly the fields of *C*.

What is not modelled: schema-declared list types (``listType=map``/``set``
on other lists), ``x-kubernetes-map-type: atomic``, ownership of ``status``
written through ``replace_status`` versus apply on the status subresource
(both are plain fields here), and version conversion of managed fields.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from setpoint.api.jsonvalues import json_equal
from setpoint.api.meta import JsonObject

__all__ = [
    "ApplyConflict",
    "Ownership",
    "Record",
    "apply_configuration",
    "leaf_paths",
]

Path = tuple[str, ...]
Operation = Literal["Apply", "Update"]

_OWNED_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")


@dataclass(frozen=True, slots=True)
class ApplyConflict:
    """One conflicting field: its path as the server prints it, and the manager that owns it."""

    field: str
    manager: str


def _walk(value: Any, prefix: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from _walk(child, (*prefix, str(key)))
    else:
        yield prefix, value


def leaf_paths(obj: Mapping[str, Any]) -> dict[Path, Any]:
    """The owned fields of ``obj`` and their values (see the module docstring)."""
    out: dict[Path, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata":
            if not isinstance(value, Mapping):
                continue
            for name in _OWNED_METADATA:
                item = value.get(name)
                if item is None:
                    continue
                if name == "finalizers" and isinstance(item, list):
                    for finalizer in item:
                        out[("metadata", "finalizers", f"v:{finalizer}")] = finalizer
                elif name == "ownerReferences" and isinstance(item, list):
                    for ref in item:
                        if isinstance(ref, Mapping):
                            out[("metadata", "ownerReferences", f"k:{ref.get('uid')}")] = ref
                else:
                    out.update(_walk(item, ("metadata", name)))
            continue
        out.update(_walk(value, (str(key),)))
    return out


def format_path(path: Path) -> str:
    """A path as the server prints it in conflicts: ``.spec.a``, ``.metadata.finalizers[="x"]``."""
    text = ""
    for part in path:
        if part.startswith("v:") and text.endswith(".metadata.finalizers"):
            text += f'[="{part[2:]}"]'
        elif part.startswith("k:") and text.endswith(".metadata.ownerReferences"):
            text += f'[uid="{part[2:]}"]'
        else:
            text += f".{part}"
    return text


@dataclass
class Ownership:
    """Which manager owns which field of one object (the private stand-in for managedFields)."""

    owners: dict[tuple[str, Operation], set[Path]] = field(default_factory=dict)

    def copy(self) -> Ownership:
        """An independent copy (used for dry runs)."""
        return Ownership({k: set(v) for k, v in self.owners.items()})

    def record_update(
        self, manager: str, old: Mapping[str, Any] | None, new: Mapping[str, Any]
    ) -> None:
        """A non-apply write by ``manager`` turned ``old`` into ``new``: it owns what changed."""
        before = leaf_paths(old) if old is not None else {}
        after = leaf_paths(new)
        changed = {p for p, v in after.items() if p not in before or not json_equal(before[p], v)}
        for key in self.owners:
            if key != (manager, "Update"):
                self.owners[key] -= changed
        self.owners.setdefault((manager, "Update"), set()).update(changed)
        self.prune(after)

    def prune(self, live: Mapping[Path, Any]) -> None:
        """Forget fields that no longer exist, and managers left owning nothing."""
        for key in list(self.owners):
            self.owners[key] &= live.keys()
            if not self.owners[key]:
                del self.owners[key]

    def owned_by_others(self, manager: str, path: Path) -> list[str]:
        """Managers other than ``manager``'s apply entry that own ``path``."""
        return sorted(
            {
                m
                for (m, op), paths in self.owners.items()
                if path in paths and (m, op) != (manager, "Apply")
            }
        )


def _merge(live: Any, config: Any, path: Path) -> Any:
    if isinstance(config, Mapping) and isinstance(live, Mapping):
        result = dict(live)
        for key, value in config.items():
            result[key] = _merge(live.get(key), value, (*path, str(key)))
        return result
    if path == ("metadata", "finalizers") and isinstance(config, list):
        existing = list(live) if isinstance(live, list) else []
        return existing + [f for f in config if f not in existing]
    if path == ("metadata", "ownerReferences") and isinstance(config, list):
        existing = [r for r in (live or []) if isinstance(r, Mapping)]
        by_uid = {r.get("uid"): i for i, r in enumerate(existing)}
        result_list = list(existing)
        for ref in config:
            index = by_uid.get(ref.get("uid")) if isinstance(ref, Mapping) else None
            if index is None:
                result_list.append(ref)
            else:
                result_list[index] = ref
        return result_list
    return copy.deepcopy(config)


def _remove_path(obj: dict[str, Any], path: Path) -> None:
    if path[:2] == ("metadata", "finalizers") and len(path) == 3:
        meta = obj.get("metadata") or {}
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f"v:{f}" != path[2]]
        if not meta["finalizers"]:
            del meta["finalizers"]
        return
    if path[:2] == ("metadata", "ownerReferences") and len(path) == 3:
        meta = obj.get("metadata") or {}
        refs = [r for r in meta.get("ownerReferences") or [] if f"k:{r.get('uid')}" != path[2]]
        meta["ownerReferences"] = refs
        if not refs:
            del meta["ownerReferences"]
        return
    parents: list[tuple[dict[str, Any], str]] = []
    node: Any = obj
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        parents.append((node, part))
        node = node[part]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    # Drop objects the removal left empty, as the server does for fields only it owned.
    for parent, key in reversed(parents):
        child = parent.get(key)
        if isinstance(child, dict) and not child and key != "metadata":
            del parent[key]
        else:
            break


Part = Literal["main", "status", "all"]
"""Which fields an apply writes: all but status (main resource of a kind with a status
subresource), only status (the status subresource), or all (kinds without one)."""


def _in_part(key: str, part: Part) -> bool:
    if part == "all":
        return True
    return (key == "status") == (part == "status")


def apply_configuration(
    live: Mapping[str, Any],
    config: Mapping[str, Any],
    ownership: Ownership,
    *,
    manager: str,
    force: bool,
    part: Part,
) -> tuple[dict[str, Any], list[ApplyConflict]]:
    """Apply ``config`` by ``manager`` to ``live``; return the result, or the conflicts.

    On conflicts (without ``force``) the object and ``ownership`` are unchanged.
    """
    applied = {p: v for p, v in leaf_paths(config).items() if _in_part(p[0], part)}
    current = leaf_paths(live)
    differing = {p for p, v in applied.items() if p in current and not json_equal(current[p], v)}
    conflicts = [
        ApplyConflict(format_path(p), m)
        for p in sorted(differing)
        for m in ownership.owned_by_others(manager, p)
    ]
    if conflicts and not force:
        return dict(live), conflicts
    for key in ownership.owners:
        if key != (manager, "Apply"):
            ownership.owners[key] -= differing
    result = copy.deepcopy(dict(live))
    previous = ownership.owners.get((manager, "Apply"), set())
    for path in previous - applied.keys():
        if _in_part(path[0], part) and not ownership.owned_by_others(manager, path):
            _remove_path(result, path)
    result = _merge(result, _select(config, part), ())
    ownership.owners[(manager, "Apply")] = set(applied) | {
        p for p in previous if not _in_part(p[0], part)
    }
    ownership.prune(leaf_paths(result))
    return result, []


def _select(config: Mapping[str, Any], part: Part) -> dict[str, Any]:
    out: dict[str, Any] = {}
    meta = config.get("metadata")
    if isinstance(meta, Mapping) and _in_part("metadata", part):
        owned = {k: v for k, v in meta.items() if k in _OWNED_METADATA}
        if owned:
            out["metadata"] = owned
    for key, value in config.items():
        if key not in ("apiVersion", "kind", "metadata") and _in_part(key, part):
            out[key] = value
    return out


@dataclass(slots=True)
class Record:
    """One stored object and the fake's private field-ownership record for it."""

    obj: JsonObject
    ownership: Ownership = field(default_factory=Ownership)
