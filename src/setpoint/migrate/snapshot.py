"""Snapshots of live objects as normalized documents, and their differences (``setpoint snapshot``).

An upgrade (a new CRD, new converters, a storage migration, a new operator)
should leave the objects users wrote as they were, or change them exactly as
intended. :func:`take_snapshot` captures every object of the chosen kinds as
a *normalized* document: keys sorted, and what changes on every write or is
owned by the server stripped, so that two snapshots of the same data compare
equal:

* ``metadata.resourceVersion``, ``uid``, ``generation``, ``managedFields``,
  ``selfLink``, ``creationTimestamp``;
* every timestamp: a string value in RFC 3339 form under a key ending in
  ``Time`` or ``Timestamp`` (condition ``lastTransitionTime``, ...).

:func:`diff_snapshots` compares two snapshots object by object (keyed by
group, kind, namespace and name, so a snapshot taken at another version of
the same kind still lines up) and lists each field that differs.
``setpoint snapshot KIND...`` writes a snapshot file; ``setpoint snapshot
diff A B`` prints the differences and exits 1 when there are any.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.client.errors import UnknownKind

__all__ = [
    "SNAPSHOT_API_VERSION",
    "Difference",
    "SnapshotError",
    "diff_snapshots",
    "discover_kind",
    "normalize",
    "take_snapshot",
]

SNAPSHOT_API_VERSION = "snapshot.setpoint.dev/v1"
"""The ``apiVersion`` of a snapshot document (``kind: Snapshot``)."""

_STRIPPED_METADATA = (
    "resourceVersion",
    "uid",
    "generation",
    "managedFields",
    "selfLink",
    "creationTimestamp",
)
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class SnapshotError(SetpointError, ValueError):
    """A kind cannot be resolved, or a file is not a snapshot; the message says which."""


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One field that differs between two snapshots (or an object only in one of them)."""

    key: str
    """``group/Kind namespace/name`` of the object."""
    path: str
    """The field (``.spec.replicas``), or ``.`` for a whole object added or removed."""
    before: Any
    """The value in the first snapshot (``None`` when absent)."""
    after: Any
    """The value in the second snapshot (``None`` when absent)."""
    change: str
    """``added``, ``removed`` or ``changed``."""

    def __str__(self) -> str:
        if self.path == "." and self.change != "changed":
            return f"{self.key}: object {self.change}"
        return f"{self.key} {self.path}: {self.change} {_show(self.before)} -> {_show(self.after)}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def normalize(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object with server-owned and per-write fields stripped and keys sorted."""
    out = _sorted(obj)
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        for key in _STRIPPED_METADATA:
            metadata.pop(key, None)
    stripped = _strip_timestamps(out)
    assert isinstance(stripped, dict)
    return stripped


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _sorted(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def _strip_timestamps(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_timestamps(v)
            for k, v in value.items()
            if not (
                (k.endswith("Time") or k.endswith("Timestamp"))
                and isinstance(v, str)
                and _TIMESTAMP.match(v)
            )
        }
    if isinstance(value, list):
        return [_strip_timestamps(v) for v in value]
    return value


async def discover_kind(client: Client, name: str) -> GroupVersionKind:
    """The kind the server's discovery serves under a name (``widgets``, ``Widget.demo.io``).

    The name is a plural, kind or short name, as a user types it on the command line.

    The version is the one the server prefers, unless given as ``group/version/Kind``.

    Raises:
        SnapshotError: nothing, or several groups, match.

    """
    if "/" in name:  # group/version/Kind
        try:
            group, version, kind = name.split("/")
        except ValueError:
            raise SnapshotError(f"{name!r}: write group/version/Kind, or a plural") from None
        return GroupVersionKind(group, version, kind)
    matches = await client.mapper.lookup(name)
    kinds = {(m.gvk.group, m.gvk.kind) for m in matches}
    if not kinds:
        raise SnapshotError(f"{name!r}: no such kind on the server")
    if len(kinds) > 1:
        names = sorted(f"{k}.{g}" for g, k in kinds)
        raise SnapshotError(f"{name!r} matches {names}; qualify it as plural.group")
    ((group, kind),) = kinds
    try:
        version = await client.mapper.preferred_version(group, kind)
    except UnknownKind as exc:
        raise SnapshotError(str(exc)) from None
    return GroupVersionKind(group, version, kind)


async def take_snapshot(
    client: Client,
    kinds: Sequence[GroupVersionKind],
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A snapshot document of every object of ``kinds`` (in ``namespace``, or everywhere).

    Objects are read at the version each ``GroupVersionKind`` names, normalized
    (:func:`normalize`) and sorted by group, kind, namespace and name.
    """
    objects: list[dict[str, Any]] = []
    for gvk in kinds:
        token: str | None = None
        while True:
            page = await client.list_page(gvk, namespace=namespace, limit=500, continue_token=token)
            objects.extend(normalize(o) for o in page.items)
            token = page.continue_token
            if not token:
                break
    objects.sort(key=_key)
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": "Snapshot",
        "kinds": [f"{g.group}/{g.version}/{g.kind}" for g in kinds],
        "namespace": namespace,
        "objects": objects,
    }


def _key(obj: Mapping[str, Any]) -> str:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    meta = obj.get("metadata") or {}
    return f"{group}/{obj.get('kind')} {meta.get('namespace') or ''}/{meta.get('name')}"


def _objects(snapshot: Mapping[str, Any], what: str) -> dict[str, Mapping[str, Any]]:
    if snapshot.get("apiVersion") != SNAPSHOT_API_VERSION or not isinstance(
        snapshot.get("objects"), list
    ):
        raise SnapshotError(f"{what} is not a setpoint snapshot ({SNAPSHOT_API_VERSION})")
    return {_key(o): o for o in snapshot["objects"] if isinstance(o, Mapping)}


def diff_snapshots(
    before: Mapping[str, Any], after: Mapping[str, Any], *, ignore: Iterable[str] = ()
) -> list[Difference]:
    """Every field that differs between two snapshots, ordered by object and path.

    ``apiVersion`` is not compared (a snapshot at another version of the kind
    lines up); ``ignore`` lists field paths (``.metadata.annotations``) to skip,
    with everything under them.

    Raises:
        SnapshotError: either document is not a snapshot.

    """
    old, new = _objects(before, "the first snapshot"), _objects(after, "the second snapshot")
    skip = tuple(ignore)
    out: list[Difference] = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            out.append(Difference(key=key, path=".", before=old[key], after=None, change="removed"))
        elif key not in old:
            out.append(Difference(key=key, path=".", before=None, after=new[key], change="added"))
        else:
            a = {k: v for k, v in old[key].items() if k != "apiVersion"}
            b = {k: v for k, v in new[key].items() if k != "apiVersion"}
            _diff_values(key, "", a, b, out, skip=skip)
    return out


def _diff_values(
    key: str, path: str, a: Any, b: Any, out: list[Difference], *, skip: tuple[str, ...]
) -> None:
    if path and _skipped(path, skip):
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}"
            if k not in b:
                if not _skipped(sub, skip):
                    out.append(
                        Difference(key=key, path=sub, before=a[k], after=None, change="removed")
                    )
            elif k not in a:
                if not _skipped(sub, skip):
                    out.append(
                        Difference(key=key, path=sub, before=None, after=b[k], change="added")
                    )
            else:
                _diff_values(key, sub, a[k], b[k], out, skip=skip)
        return
    if a != b:
        out.append(Difference(key=key, path=path or ".", before=a, after=b, change="changed"))


def _skipped(path: str, skip: tuple[str, ...]) -> bool:
    return any(path == s or path.startswith(s + ".") or path.startswith(s + "[") for s in skip)
