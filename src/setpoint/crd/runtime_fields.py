"""Spec fields that look like observed state: the warning of ``generate crd`` and ``crd diff``.

``spec`` is what the user asks for; what the operator observes belongs in ``status``. A spec
field named like observed state (``lastSyncTime``, ``creationTimestamp``,
``observedGeneration``, ``phase``, ``conditions``) is usually a status field in the wrong
place: the operator then writes the spec, bumping ``metadata.generation`` (every
``GenerationChanged`` filter lets the write through, the object reconciles again) and
fighting GitOps tools that hold the spec in Git. The Kubernetes API conventions say so; no
tool checked it.

:func:`runtime_field_warnings` walks each version's ``spec`` schema of a CRD and returns one
:class:`RuntimeFieldWarning` per such field. A field that is desired state despite its name
(a schedule's ``startTime``) opts out with the marker ``+setpoint:desired-state`` on a line
of its own in its docstring (its description): the marker travels with the CRD, so
``crd diff`` on YAML files or a live CRD sees it as ``generate crd`` does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DESIRED_STATE_MARKER",
    "RuntimeFieldWarning",
    "looks_like_observed_state",
    "runtime_field_warnings",
]

DESIRED_STATE_MARKER: Final = "+setpoint:desired-state"
"""A line of a spec field's description that silences the warning for that field."""

_NAMES: Final = frozenset({"observedGeneration", "phase", "conditions", "time", "timestamp"})
_SUFFIX: Final = re.compile(r"[a-z0-9](Time|Timestamp)$")


def looks_like_observed_state(json_name: str) -> bool:
    """Whether a field's JSON name reads as observed state (``*Time``, ``*Timestamp``, ...)."""
    return json_name in _NAMES or _SUFFIX.search(json_name) is not None


@dataclass(frozen=True)
class RuntimeFieldWarning:
    """One spec field whose name looks like observed state."""

    crd: str
    """The CRD's name."""
    version: str
    """The version whose schema has the field."""
    path: str
    """The field's path from the object's root, e.g. ``.spec.backup.lastRunTime``."""

    def __str__(self) -> str:
        return (
            f"{self.crd} {self.version} {self.path}: the name looks like observed state; "
            "observed values belong in status (a spec write bumps the generation and fights "
            f"GitOps). If it is desired state, put {DESIRED_STATE_MARKER} on a line of its "
            "docstring"
        )


def _opted_out(schema: Mapping[str, Any]) -> bool:
    description = schema.get("description")
    if not isinstance(description, str):
        return False
    return any(line.strip() == DESIRED_STATE_MARKER for line in description.splitlines())


def _walk(schema: Any, path: str) -> Iterator[str]:
    if not isinstance(schema, Mapping):
        return
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name in sorted(properties):
            child = properties[name]
            child_path = f"{path}.{name}"
            if looks_like_observed_state(name) and not (
                isinstance(child, Mapping) and _opted_out(child)
            ):
                yield child_path
            yield from _walk(child, child_path)
    items = schema.get("items")
    if isinstance(items, Mapping):
        yield from _walk(items, f"{path}[*]")
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        yield from _walk(additional, f"{path}.*")


def runtime_field_warnings(
    crds: Iterable[Mapping[str, Any]], *, known: Iterable[Mapping[str, Any]] = ()
) -> list[RuntimeFieldWarning]:
    """The spec fields of these CRDs that look like observed state, in a stable order.

    With ``known`` (the CRDs before a change, for ``crd diff``), a field path any version
    of the same CRD in ``known`` already had is left out: renaming a served field is a
    breaking change, so only new fields are worth the warning (ratcheting, as the diff's
    unbounded-field checks do).
    """
    before: dict[str, set[str]] = {}
    for crd in known:
        name = crd.get("metadata", {}).get("name", "")
        before.setdefault(name, set()).update(path for _, path in _fields(crd))
    warnings = []
    for crd in crds:
        name = crd.get("metadata", {}).get("name", "")
        for version, path in _fields(crd):
            if path not in before.get(name, set()):
                warnings.append(RuntimeFieldWarning(name, version, path))
    return warnings


def _fields(crd: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for version in crd.get("spec", {}).get("versions") or []:
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        spec = (schema.get("properties") or {}).get("spec")
        for path in _walk(spec, ".spec"):
            yield version.get("name", ""), path
