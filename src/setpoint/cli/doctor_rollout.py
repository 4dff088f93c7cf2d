"""``setpoint doctor rollout``: during a side-by-side rollout, which version reconciles what.

A rollout (:mod:`setpoint.manager.rollout`) moves objects from the running operator version
to a new one by the label ``setpoint.dev/operator-version``: a labelled object belongs to
the version its label names, an unlabelled one to the incumbent. This check lists, per kind
that has at least one labelled object, how many objects each version holds and which they
are (``-o json`` for every name). It reads the metadata-only listing every doctor check
shares (:func:`setpoint.cli.doctor.list_objects`); kinds where no object carries the label
are not under a rollout and are left out.
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
    run_check,
    table_lines,
)
from setpoint.client.client import Client
from setpoint.manager.rollout import ROLLOUT_LABEL, version_of

__all__ = [
    "INCUMBENT",
    "RolloutReport",
    "find_rollouts",
    "register_checks",
    "render_rollout",
    "rollout_summary",
    "scan_rollout",
]

INCUMBENT = "(incumbent)"
"""The row of the unlabelled objects: the version that yields runs them."""

_SHOWN = 5


@dataclass(kw_only=True)
class RolloutReport:
    """What ``setpoint doctor rollout`` found."""

    namespace: str | None
    """The namespace scanned, or ``None`` for all."""
    kinds: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Per kind (``Kind.group``) under a rollout: per version (or :data:`INCUMBENT`), the
    objects (``namespace/name``), sorted."""
    objects_scanned: int = 0
    """Objects seen in the listing."""
    resources_scanned: int = 0
    """Resource types listed."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``-o json``."""
        return {
            "namespace": self.namespace,
            "label": ROLLOUT_LABEL,
            "kinds": self.kinds,
            "objectsScanned": self.objects_scanned,
            "resourcesScanned": self.resources_scanned,
        }


def find_rollouts(objects: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """Group objects by kind and version, for the kinds where any object carries the label."""
    by_kind: dict[str, dict[str, list[str]]] = {}
    labelled: set[str] = set()
    for obj in objects:
        group = str(obj.get("apiVersion") or "").rpartition("/")[0]
        kind = f"{obj.get('kind')}.{group}".rstrip(".")
        data = metadata_of(obj)
        where = f"{data.get('namespace')}/{data.get('name')}" if data.get("namespace") else ""
        version = version_of(obj)
        if version is not None:
            labelled.add(kind)
        versions = by_kind.setdefault(kind, {})
        versions.setdefault(version or INCUMBENT, []).append(where or str(data.get("name")))
    return {
        kind: {version: sorted(names) for version, names in sorted(by_kind[kind].items())}
        for kind in sorted(labelled)
    }


async def scan_rollout(
    client: Client,
    *,
    namespace: str | None = None,
    kinds_wanted: Sequence[str] = (),
    listing: ObjectListing | None = None,
) -> RolloutReport:
    """Count the objects per kind and version (see the module doc)."""
    if listing is None:
        listing = await list_objects(client, namespace=namespace, kinds_wanted=kinds_wanted)
    return RolloutReport(
        namespace=namespace,
        kinds=find_rollouts(listing.objects),
        objects_scanned=len(listing.objects),
        resources_scanned=listing.resources_scanned,
    )


def render_rollout(report: RolloutReport) -> str:
    """One row per kind and version: the count and the first few objects."""
    scope = f"namespace {report.namespace}" if report.namespace else "all namespaces"
    if not report.kinds:
        lines = [f"No object is labelled {ROLLOUT_LABEL} ({scope}): no rollout in progress."]
    else:
        rows = [("KIND", "VERSION", "OBJECTS", "FIRST")]
        for kind, versions in report.kinds.items():
            for version, names in versions.items():
                first = ", ".join(names[:_SHOWN]) + (", ..." if len(names) > _SHOWN else "")
                rows.append((kind, version, str(len(names)), first))
        lines = table_lines(rows, gap=3)
        lines.append("")
        lines.append(
            f"{INCUMBENT}: objects without the label, reconciled by the version that yields "
            "(Rollout(yields_to=...)); move one with "
            f"`kubectl label KIND NAME {ROLLOUT_LABEL}=VERSION`."
        )
    lines.append(
        f"Scanned {report.objects_scanned} objects of {report.resources_scanned} resource "
        f"types ({scope}; metadata-only lists; narrow with --kind / -n)."
    )
    return "\n".join(lines)


def rollout_summary(report: RolloutReport) -> CheckSummary:
    """The bare ``setpoint doctor`` line: objects per version for each kind under a rollout.

    A rollout is not a problem: the line is informational and always ``ok``.
    """
    parts = [
        f"{kind}: " + ", ".join(f"{version} {len(names)}" for version, names in versions.items())
        for kind, versions in report.kinds.items()
    ]
    summary = "; ".join(parts) if parts else "no rollout in progress"
    return CheckSummary(check="rollout", ok=True, summary=summary)


def _cmd_rollout(args: argparse.Namespace) -> int:
    namespace = None if args.all_namespaces else args.namespace
    return run_check(
        args,
        lambda client: scan_rollout(client, namespace=namespace, kinds_wanted=args.kind or ()),
        RolloutReport.to_json,
        render_rollout,
    )


def register_checks(checks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor rollout`` to the doctor's checks."""
    parser = add_check(
        checks,
        "rollout",
        help=f"during a side-by-side rollout: which operator version ({ROLLOUT_LABEL}) "
        "reconciles which objects",
        description=(
            f"Count, per kind with objects labelled {ROLLOUT_LABEL}, the objects each "
            "operator version reconciles (unlabelled ones: the incumbent's)."
        ),
        run=_cmd_rollout,
    )
    add_scope_options(parser)
