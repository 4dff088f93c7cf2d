"""``setpoint doctor crds``: the conditions and stored versions of every CustomResourceDefinition.

An operator whose kind is not served cannot start (its informer never syncs), and a CRD can
be installed and still not served. For each CRD the doctor reads what the API server says
about it:

- ``Established``: the kind is served. ``False`` right after creation (a second or two) or
  when the names clash with another CRD.
- ``NamesAccepted``: the plural, singular, short names and kind are unique in the group;
  ``False`` means another CRD took one of them (the message names it).
- ``NonStructuralSchema``: the schema is not structural; the server refuses new fields
  features (defaults, pruning) for it. Fix the schema (``setpoint crd check``).
- ``Terminating``: the CRD is being deleted and waits for its objects to go.
- ``KubernetesAPIApprovalPolicyConformant`` (``*.k8s.io`` groups only) and any other
  condition that is not in its healthy state.
- ``status.storedVersions``: the versions objects may still be stored at in etcd. A
  version listed there but no longer in ``spec.versions`` means objects at a version the
  server cannot read any more: migrate them (``setpoint crd migrate-storage``) before
  removing a version. More than one stored version is a migration not finished yet.

Exit status: 0 when the CRDs were read (whatever they say), 1 on an error.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from setpoint.api import kinds
from setpoint.api.meta import metadata_of
from setpoint.cli.doctor import add_check, problem_lines, run_check, table_lines
from setpoint.client.client import Client

__all__ = [
    "CrdReport",
    "CrdStatus",
    "crd_status",
    "diagnose_crds",
    "register_checks",
    "render_crd_table",
    "scan_crds",
]

_HEALTHY: Final[Mapping[str, str]] = {
    "Established": "True",
    "NamesAccepted": "True",
    "NonStructuralSchema": "False",
    "Terminating": "False",
    "KubernetesAPIApprovalPolicyConformant": "True",
}
"""The healthy status of each condition the server sets; any other condition type is
reported only when its status is ``True`` and its type names a problem."""

_ADVICE: Final[Mapping[str, str]] = {
    "Established": "the kind is not served yet: wait a few seconds after creating it, or "
    "fix what NamesAccepted reports",
    "NamesAccepted": "another CRD uses one of these names: rename the plural, singular, "
    "short names or kind, or remove the other CRD",
    "NonStructuralSchema": "the schema is not structural, so defaulting and pruning are "
    "off: fix it (setpoint crd check shows where)",
    "Terminating": "the CRD is being deleted and waits for its objects (and their "
    "finalizers: setpoint doctor finalizers)",
    "KubernetesAPIApprovalPolicyConformant": "a *.k8s.io group needs the "
    "api-approved.kubernetes.io annotation",
}


@dataclass(frozen=True, kw_only=True)
class CrdStatus:
    """One CRD as the doctor reads it."""

    name: str
    """The CRD's name (``<plural>.<group>``)."""
    kind: str
    """``spec.names.kind``."""
    served: tuple[str, ...]
    """The versions in ``spec.versions`` that are served."""
    storage: str
    """The storage version (the one with ``storage: true``)."""
    stored_versions: tuple[str, ...]
    """``status.storedVersions``."""
    conditions: dict[str, str]
    """Condition type -> status, as the server reports them."""
    problems: tuple[str, ...] = ()
    """What deserves attention, each with what to do."""
    notes: tuple[str, ...] = ()
    """What is worth knowing but not wrong (a storage migration in progress)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (camelCase keys)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "served": list(self.served),
            "storage": self.storage,
            "storedVersions": list(self.stored_versions),
            "conditions": dict(self.conditions),
            "problems": list(self.problems),
            "notes": list(self.notes),
        }


@dataclass(kw_only=True)
class CrdReport:
    """What ``setpoint doctor crds`` found."""

    crds: list[CrdStatus] = field(default_factory=list)
    """Every CRD read, by name."""

    @property
    def problems(self) -> list[str]:
        """Every problem, prefixed with its CRD."""
        return [f"CRD {c.name}: {p}" for c in self.crds for p in c.problems]

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``-o json``."""
        return {"crds": [c.to_json() for c in self.crds], "problems": self.problems}


def crd_status(crd: Mapping[str, Any]) -> CrdStatus:
    """Judge one CustomResourceDefinition from its spec and status."""
    raw_spec = crd.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    raw_status = crd.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    versions = [v for v in spec.get("versions") or () if isinstance(v, dict)]
    declared = [str(v.get("name")) for v in versions]
    served = tuple(str(v.get("name")) for v in versions if v.get("served"))
    storage = next((str(v.get("name")) for v in versions if v.get("storage")), "")
    stored = tuple(str(v) for v in status.get("storedVersions") or ())
    conditions: dict[str, str] = {}
    messages: dict[str, str] = {}
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type"):
            kind = str(condition["type"])
            conditions[kind] = str(condition.get("status") or "Unknown")
            messages[kind] = str(condition.get("message") or condition.get("reason") or "")
    problems: list[str] = []
    notes: list[str] = []
    for kind in ("Established", "NamesAccepted"):
        if conditions.get(kind) != "True":
            said = f" ({messages[kind]})" if messages.get(kind) else ""
            shown = conditions.get(kind, "missing")
            problems.append(f"{kind} is {shown}{said}: {_ADVICE[kind]}")
    for kind, value in conditions.items():
        if kind in ("Established", "NamesAccepted"):
            continue
        healthy = _HEALTHY.get(kind)
        if (healthy is not None and value != healthy) or (healthy is None and value == "True"):
            said = f" ({messages[kind]})" if messages.get(kind) else ""
            advice = _ADVICE.get(kind, "see the condition's message")
            problems.append(f"{kind} is {value}{said}: {advice}")
    gone = [v for v in stored if v not in declared]
    if gone:
        problems.append(
            f"storedVersions lists {', '.join(gone)}, no longer in spec.versions: objects may "
            "still be stored at a version the server cannot read; put the version back, "
            "migrate the objects (setpoint crd migrate-storage) and only then remove it"
        )
    if len(stored) > 1:
        notes.append(
            f"objects are stored at {len(stored)} versions ({', '.join(stored)}): a storage "
            f"migration to {storage or 'the storage version'} is unfinished "
            "(setpoint crd migrate-storage)"
        )
    names = spec.get("names")
    return CrdStatus(
        name=str(metadata_of(crd).get("name") or ""),
        kind=str(names.get("kind") or "") if isinstance(names, dict) else "",
        served=served,
        storage=storage,
        stored_versions=stored,
        conditions=conditions,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def diagnose_crds(crds: Iterable[Mapping[str, Any]], *, group: str | None = None) -> CrdReport:
    """The report for ``crds``, only those of ``group`` (and its subgroups) when given."""
    report = CrdReport()
    for crd in crds:
        raw = crd.get("spec")
        crd_group = str(raw.get("group") or "") if isinstance(raw, dict) else ""
        if group and crd_group != group and not crd_group.endswith("." + group):
            continue
        report.crds.append(crd_status(crd))
    report.crds.sort(key=lambda c: c.name)
    return report


async def scan_crds(client: Client, *, group: str | None = None) -> CrdReport:
    """Read every CRD and judge it."""
    return diagnose_crds(await client.list(kinds.CustomResourceDefinition), group=group)


def render_crd_table(report: CrdReport) -> str:
    """The human output: one row per CRD, then the problems and notes."""
    if not report.crds:
        return "No CustomResourceDefinitions."
    header = ("NAME", "KIND", "SERVED", "STORAGE", "STORED", "CONDITIONS")
    rows = [header]
    for c in report.crds:
        unhealthy = [
            f"{k}={v}"
            for k, v in sorted(c.conditions.items())
            if _HEALTHY.get(k) is not None and v != _HEALTHY[k]
        ]
        rows.append(
            (
                c.name,
                c.kind,
                ",".join(c.served) or "-",
                c.storage or "-",
                ",".join(c.stored_versions) or "-",
                "; ".join(unhealthy) if unhealthy else "ok",
            )
        )
    lines = table_lines(rows)
    lines.extend(
        problem_lines(
            report.problems,
            "Every CRD is established, its names accepted and its schema structural.",
        )
    )
    for c in report.crds:
        lines.extend(f"note: CRD {c.name}: {n}" for n in c.notes)
    return "\n".join(lines)


def _cmd_crds(args: argparse.Namespace) -> int:
    return run_check(
        args,
        lambda client: scan_crds(client, group=args.group),
        CrdReport.to_json,
        render_crd_table,
    )


def register_checks(checks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor crds`` to the doctor's checks."""
    parser = add_check(
        checks,
        "crds",
        help="the conditions (Established, NamesAccepted, NonStructuralSchema, ...) and "
        "stored versions of every CRD",
        description=(
            "Read every CustomResourceDefinition and report conditions that are not healthy "
            "and stored versions the CRD no longer declares."
        ),
        run=_cmd_crds,
    )
    parser.add_argument("--group", default=None, help="only CRDs of this API group (and subgroups)")
