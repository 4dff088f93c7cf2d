"""The four patch kinds the API server accepts, as explicit types.

Choosing a patch kind is a correctness decision, so each is its own type:

- :class:`JsonPatch` (RFC 6902): a list of operations. With a ``test``
  operation it is a compare-and-swap, which is how setpoint changes finalizers
  and owner references without dropping another writer's entries.
- :class:`MergePatch` (RFC 7386): a partial object; lists are replaced whole,
  so never use it for lists that other writers share (``finalizers``).
- :class:`StrategicMergePatch`: merges lists by their patch keys; built-in
  kinds only (custom resources answer 415 Unsupported Media Type).
- :class:`ApplyPatch`: server-side apply; the server tracks which manager owns
  which field. Needs a field manager; ``force`` takes over conflicting fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from setpoint.api.jsonvalues import json_equal

__all__ = [
    "ApplyPatch",
    "JsonPatch",
    "MergePatch",
    "Patch",
    "StrategicMergePatch",
    "json_patch_diff",
    "json_pointer",
]


def json_pointer(*parts: str | int) -> str:
    """Build an RFC 6901 pointer, escaping ``~`` and ``/`` in each part.

    ``json_pointer("metadata", "labels", "app.kubernetes.io/name")`` gives
    ``/metadata/labels/app.kubernetes.io~1name``.
    """
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def json_patch_diff(old: Any, new: Any, *, guard_values: bool) -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn ``old`` into ``new`` (both JSON objects).

    Objects are diffed key by key; lists and scalars are replaced whole
    (index-wise list edits would apply to the wrong items if the list changed
    meanwhile). With ``guard_values`` every operation is preceded by a
    ``test`` that the target still holds the value it was computed from, a
    ``null`` test for a key being added (the API server's JSON patch treats a
    missing member as ``null`` in ``test``), so the patch applies only if
    nobody changed those very fields meanwhile, and fails whole otherwise.
    """
    ops: list[dict[str, Any]] = []
    _diff((), old, new, ops, guard_values)
    return ops


def _diff(
    path: tuple[str, ...], old: Any, new: Any, ops: list[dict[str, Any]], guard: bool
) -> None:
    if json_equal(old, new):
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in old:
            if key not in new:
                pointer = json_pointer(*path, key)
                if guard:
                    ops.append({"op": "test", "path": pointer, "value": old[key]})
                ops.append({"op": "remove", "path": pointer})
        for key, value in new.items():
            if key not in old:
                pointer = json_pointer(*path, key)
                if guard:
                    ops.append({"op": "test", "path": pointer, "value": None})
                ops.append({"op": "add", "path": pointer, "value": value})
            else:
                _diff((*path, key), old[key], value, ops, guard)
        return
    pointer = json_pointer(*path)
    if guard:
        ops.append({"op": "test", "path": pointer, "value": old})
    ops.append({"op": "replace", "path": pointer, "value": new})


@dataclass(frozen=True, slots=True)
class JsonPatch:
    """An RFC 6902 JSON patch: ``[{"op": "test", "path": ..., "value": ...}, ...]``.

    The server applies all operations or none; a failed ``test`` answers 422
    Invalid (client-go reports it as such, and so does setpoint).
    """

    operations: Sequence[Mapping[str, Any]]
    content_type: str = field(default="application/json-patch+json", init=False)

    def body(self) -> Any:
        """The request body."""
        return list(self.operations)


@dataclass(frozen=True, slots=True)
class MergePatch:
    """An RFC 7386 JSON merge patch: a partial object; ``None`` deletes a key; lists replace."""

    patch: Mapping[str, Any]
    content_type: str = field(default="application/merge-patch+json", init=False)

    def body(self) -> Any:
        """The request body."""
        return self.patch


@dataclass(frozen=True, slots=True)
class StrategicMergePatch:
    """A Kubernetes strategic merge patch (built-in kinds only)."""

    patch: Mapping[str, Any]
    content_type: str = field(default="application/strategic-merge-patch+json", init=False)

    def body(self) -> Any:
        """The request body."""
        return self.patch


@dataclass(frozen=True, slots=True)
class ApplyPatch:
    """A server-side apply configuration: the fields this manager wants to own, with values.

    ``obj`` must have ``apiVersion``, ``kind`` and ``metadata.name``; it should
    hold only the fields the manager cares about, since every field sent
    becomes owned by it.
    """

    obj: Mapping[str, Any]
    force: bool = False
    """Take ownership of fields another manager owns instead of failing with Conflict."""
    content_type: str = field(default="application/apply-patch+yaml", init=False)

    def body(self) -> Any:
        """The request body (JSON is valid YAML, and the server accepts it as such)."""
        return self.obj


Patch = JsonPatch | MergePatch | StrategicMergePatch | ApplyPatch
"""Any of the four patch kinds."""
