"""``setpoint doctor paused``: the objects setpoint's controllers leave alone, and for whom.

An object annotated ``setpoint.dev/paused`` is not reconciled by the controllers the value
names (every one for ``"true"``; see :mod:`setpoint.controller.pause`). A pause is easy to
forget: the object looks healthy and stops following its spec. This check lists every
paused object with the annotation's value, the controllers it pauses, and whether its
deletion is held too (``setpoint.dev/paused-deletion``), which keeps a deleted object in
place until the pause ends.

It reads the same metadata-only listing as ``setpoint doctor finalizers`` (one LIST per
resource type, :func:`setpoint.cli.doctor.list_objects`), and the bare ``setpoint doctor``
runs both checks over one listing. A pause is not a problem in itself: the summary line
counts paused objects and says ``ok``; the objects held in deletion by a pause are the
problems it names.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from setpoint.api.meta import metadata_of
from setpoint.cli.doctor import (
    CheckSummary,
    ObjectListing,
    add_check,
    add_scope_options,
    list_objects,
    problem_lines,
    run_check,
    table_lines,
)
from setpoint.client.client import Client
from setpoint.controller.pause import PAUSED_DELETION_ANNOTATION, pause_of

__all__ = [
    "PausedObject",
    "PausedReport",
    "find_paused",
    "paused_summary",
    "register_checks",
    "render_paused",
    "scan_paused",
]


@dataclass(frozen=True, kw_only=True)
class PausedObject:
    """One object paused by ``setpoint.dev/paused``."""

    api_version: str
    """Its apiVersion."""
    kind: str
    """Its kind."""
    namespace: str
    """Its namespace (empty when cluster-scoped)."""
    name: str
    """Its name."""
    value: str
    """The annotation's value, as written."""
    controllers: tuple[str, ...] | None
    """The controllers it pauses, sorted; ``None``: every controller."""
    hold_deletion: bool
    """Whether ``setpoint.dev/paused-deletion`` holds its finalizer cleanups too."""
    deleting: bool
    """Whether it has a ``deletionTimestamp``."""

    @property
    def deletion_held(self) -> bool:
        """Deleted, and the pause keeps its cleanups (so the object) waiting."""
        return self.deleting and self.hold_deletion

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "value": self.value,
            "controllers": list(self.controllers) if self.controllers is not None else None,
            "holdDeletion": self.hold_deletion,
            "deleting": self.deleting,
        }

    def describe(self) -> str:
        """``Kind namespace/name``."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


@dataclass(kw_only=True)
class PausedReport:
    """What ``setpoint doctor paused`` found."""

    namespace: str | None
    """The namespace scanned, or ``None`` for all."""
    paused: list[PausedObject] = field(default_factory=list)
    """Paused objects, by kind, namespace and name."""
    resources_scanned: int = 0
    """Resource types listed."""
    objects_scanned: int = 0
    """Objects seen in those lists."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(resource, why)`` for resources that could not be listed."""

    @property
    def problems(self) -> list[str]:
        """Deleted objects a pause holds, with what to do."""
        return [
            f"{p.describe()} is being deleted, but {PAUSED_DELETION_ANNOTATION}=true holds its "
            "finalizer cleanups until the pause ends: remove setpoint.dev/paused (or that "
            "annotation) to let it go"
            for p in self.paused
            if p.deletion_held
        ]

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``-o json``."""
        return {
            "namespace": self.namespace,
            "paused": [p.to_json() for p in self.paused],
            "problems": self.problems,
            "resourcesScanned": self.resources_scanned,
            "objectsScanned": self.objects_scanned,
            "skipped": [{"resource": r, "reason": why} for r, why in self.skipped],
        }


def find_paused(objects: Iterable[Mapping[str, Any]]) -> list[PausedObject]:
    """The objects among ``objects`` (JSON or metadata-only) that a pause annotation pauses."""
    found: list[PausedObject] = []
    for obj in objects:
        pause = pause_of(obj)
        if pause is None:
            continue
        data = metadata_of(obj)
        found.append(
            PausedObject(
                api_version=str(obj.get("apiVersion") or ""),
                kind=str(obj.get("kind") or ""),
                namespace=str(data.get("namespace") or ""),
                name=str(data.get("name") or ""),
                value=pause.value,
                controllers=tuple(sorted(pause.controllers))
                if pause.controllers is not None
                else None,
                hold_deletion=pause.hold_deletion,
                deleting=bool(data.get("deletionTimestamp")),
            )
        )
    found.sort(key=lambda p: (p.kind, p.api_version, p.namespace, p.name))
    return found


async def scan_paused(
    client: Client,
    *,
    namespace: str | None = None,
    kinds_wanted: Sequence[str] = (),
    listing: ObjectListing | None = None,
) -> PausedReport:
    """List the paused objects (see the module doc); ``listing`` reuses a listing made."""
    if listing is None:
        listing = await list_objects(client, namespace=namespace, kinds_wanted=kinds_wanted)
    return PausedReport(
        namespace=namespace,
        paused=find_paused(listing.objects),
        resources_scanned=listing.resources_scanned,
        objects_scanned=len(listing.objects),
        skipped=list(listing.skipped),
    )


def render_paused(report: PausedReport) -> str:
    """The human-readable report: one row per paused object, then the problems."""
    scope = f"namespace {report.namespace}" if report.namespace else "all namespaces"
    lines: list[str] = []
    if not report.paused:
        lines.append(f"No paused objects ({scope}).")
    else:
        header = ("KIND", "NAMESPACE", "NAME", "PAUSES", "DELETION")
        rows = [
            (
                f"{p.kind}.{p.api_version.rpartition('/')[0]}".rstrip("."),
                p.namespace or "-",
                p.name,
                "every controller" if p.controllers is None else ",".join(p.controllers),
                "held" if p.deletion_held else "held if deleted" if p.hold_deletion else "runs",
            )
            for p in report.paused
        ]
        lines.extend(table_lines([header, *rows], gap=3))
        lines.extend(problem_lines(report.problems, "No deletion is held by a pause."))
    lines.append("")
    lines.append(
        f"Scanned {report.objects_scanned} objects of {report.resources_scanned} resource types "
        f"({scope}; metadata-only lists; narrow with --kind / -n)."
    )
    if report.skipped:
        lines.append(f"Skipped {len(report.skipped)} resource types that could not be listed:")
        lines.extend(f"  {resource}: {why}" for resource, why in report.skipped)
    return "\n".join(lines)


def paused_summary(report: PausedReport) -> CheckSummary:
    """The bare ``setpoint doctor`` line: paused objects counted, held deletions as problems."""
    problems = report.problems
    return CheckSummary(
        check="paused",
        ok=not problems,
        summary=(
            f"{len(report.paused)} paused object(s), {len(problems)} deletion(s) held "
            f"({report.objects_scanned} objects scanned)"
        ),
        problems=tuple(problems),
    )


def _cmd_paused(args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else args.namespace
    return run_check(
        args,
        lambda client: scan_paused(client, namespace=namespace, kinds_wanted=args.kind or ()),
        PausedReport.to_json,
        render_paused,
    )


def register_checks(checks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor paused`` to the doctor's checks."""
    parser = add_check(
        checks,
        "paused",
        help="list objects annotated setpoint.dev/paused, the controllers each pauses and "
        "whether its deletion is held",
        description=(
            "List every object whose setpoint.dev/paused annotation pauses a controller. "
            "Every resource type the server serves is listed once, metadata only (narrow "
            "with --kind and -n)."
        ),
        run=_cmd_paused,
    )
    add_scope_options(parser)
