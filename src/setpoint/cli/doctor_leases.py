"""``setpoint doctor leader-election``: who holds each Lease, how fresh it is, how often it moved.

The on-call questions "who leads?" and "is anybody leading?" are answered by the
``coordination.k8s.io/v1`` Leases that leader election writes (setpoint's managers,
controller-runtime's, kube-controller-manager's). For each Lease: the holder, the age of its
last renewal against ``leaseDurationSeconds`` (``held``, ``expired``, ``released``), the
number of ``leaseTransitions`` (a Lease that changes hands every few minutes means leaders
keep crashing or losing their renewals), when the current holder acquired it, and for a
setpoint manager the finalizers its controllers handle (the ``setpoint.dev/finalizers``
annotation, see :meth:`setpoint.manager.Manager.lease_annotations`).

The node heartbeats in ``kube-node-lease`` are Leases too, one per node, and say nothing
about leaders: they are left out unless ``--include-node-leases``.

Exit status: 0 when the Leases were read (whatever they say), 1 on an error.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from setpoint.api import kinds
from setpoint.api.meta import metadata_of
from setpoint.cli.doctor import (
    add_check,
    epoch_seconds,
    format_duration,
    problem_lines,
    run_check,
    table_lines,
)
from setpoint.client.client import Client
from setpoint.controller.finalizers import parse_owned_finalizers
from setpoint.manager.optional import parse_waiting

__all__ = [
    "LeaseReport",
    "LeaseStatus",
    "diagnose_leases",
    "lease_status",
    "register_checks",
    "render_lease_table",
    "scan_leases",
]

NODE_LEASE_NAMESPACE: Final = "kube-node-lease"
"""Where the kubelets' heartbeats live (not leader election)."""

_FLAPPING_TRANSITIONS: Final = 10
"""More transitions than this on one Lease is worth a look (leaders keep changing)."""


def _ago(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


@dataclass(frozen=True, kw_only=True)
class LeaseStatus:
    """One Lease as the doctor reads it."""

    namespace: str
    """The Lease's namespace."""
    name: str
    """The Lease's name."""
    holder: str
    """``spec.holderIdentity`` (empty when released)."""
    state: str
    """``held`` (renewed within ``leaseDurationSeconds``), ``expired`` (a holder, but not
    renewed in time: no one leads until another candidate takes over) or ``released``
    (no holder: the last leader shut down cleanly, or none ever acquired it)."""
    renewed_seconds_ago: float | None
    """Seconds since ``spec.renewTime`` by this machine's clock (``None``: never renewed)."""
    lease_duration: float | None
    """``spec.leaseDurationSeconds``."""
    acquired_seconds_ago: float | None
    """Seconds since ``spec.acquireTime``: how long the current holder has led."""
    transitions: int
    """``spec.leaseTransitions``: how many times the Lease changed hands."""
    finalizers: dict[str, str] | None = None
    """For a setpoint manager: finalizer -> controller it handles (``None`` otherwise)."""
    waiting: dict[str, list[str]] = field(default_factory=dict)
    """For a setpoint manager: optional controller -> the kinds it waits for (their CRDs not
    served; the ``setpoint.dev/waiting`` annotation, :mod:`setpoint.manager.optional`)."""
    problems: tuple[str, ...] = ()
    """What deserves attention, each with what to do."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (camelCase keys)."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "holder": self.holder,
            "state": self.state,
            "renewedSecondsAgo": _round(self.renewed_seconds_ago),
            "leaseDurationSeconds": self.lease_duration,
            "acquiredSecondsAgo": _round(self.acquired_seconds_ago),
            "transitions": self.transitions,
            "finalizers": self.finalizers,
            "waiting": self.waiting,
            "problems": list(self.problems),
        }


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


@dataclass(kw_only=True)
class LeaseReport:
    """What ``setpoint doctor leader-election`` found."""

    namespace: str | None
    """The namespace read, or ``None`` for all."""
    leases: list[LeaseStatus] = field(default_factory=list)
    """Every Lease, by namespace and name."""
    node_leases: int = 0
    """Node heartbeat Leases left out."""

    @property
    def problems(self) -> list[str]:
        """Every problem of every Lease, prefixed with the Lease."""
        return [f"Lease {s.namespace}/{s.name}: {p}" for s in self.leases for p in s.problems]

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``-o json``."""
        return {
            "namespace": self.namespace,
            "leases": [s.to_json() for s in self.leases],
            "nodeLeasesOmitted": self.node_leases,
            "problems": self.problems,
        }


def lease_status(lease: Mapping[str, Any], now: float) -> LeaseStatus:
    """Judge one Lease at time ``now`` (epoch seconds)."""
    data = metadata_of(lease)
    raw = lease.get("spec")
    spec: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    holder = str(spec.get("holderIdentity") or "")
    duration_raw = spec.get("leaseDurationSeconds")
    duration = float(duration_raw) if isinstance(duration_raw, int | float) else None
    renewed = epoch_seconds(spec.get("renewTime"))
    acquired = epoch_seconds(spec.get("acquireTime"))
    ago = now - renewed if renewed is not None else None
    transitions_raw = spec.get("leaseTransitions")
    transitions = int(transitions_raw) if isinstance(transitions_raw, int) else 0
    problems: list[str] = []
    if not holder:
        state = "released"
    elif ago is not None and duration is not None and ago <= duration:
        state = "held"
    else:
        state = "expired"
        late = f"{_ago(ago - duration)} past its {duration:g}s duration" if ago and duration else ""
        problems.append(
            f"held by {holder} but not renewed {late or 'ever'}: no one leads until another "
            "candidate takes over. Check that the holder's process runs and reaches the API "
            "server (its logs, its readiness probe)"
        )
    if transitions > _FLAPPING_TRANSITIONS:
        problems.append(
            f"changed hands {transitions} times: leaders keep restarting or losing their "
            "renewals; look for restarts (kubectl get pods) and for slow renewals in the "
            "leader's log"
        )
    return LeaseStatus(
        namespace=str(data.get("namespace") or ""),
        name=str(data.get("name") or ""),
        holder=holder,
        state=state,
        renewed_seconds_ago=ago,
        lease_duration=duration,
        acquired_seconds_ago=now - acquired if acquired is not None else None,
        transitions=transitions,
        finalizers=parse_owned_finalizers(lease),
        waiting=parse_waiting(lease),
        problems=tuple(problems),
    )


def diagnose_leases(
    leases: Iterable[Mapping[str, Any]],
    *,
    now: float,
    namespace: str | None = None,
    include_node_leases: bool = False,
) -> LeaseReport:
    """The report for ``leases`` at time ``now``, node heartbeats left out unless asked."""
    report = LeaseReport(namespace=namespace)
    for lease in leases:
        if metadata_of(lease).get("namespace") == NODE_LEASE_NAMESPACE and not include_node_leases:
            report.node_leases += 1
            continue
        report.leases.append(lease_status(lease, now))
    report.leases.sort(key=lambda s: (s.namespace, s.name))
    return report


async def scan_leases(
    client: Client,
    *,
    namespace: str | None = None,
    include_node_leases: bool = False,
    now: float | None = None,
) -> LeaseReport:
    """Read the Leases (of ``namespace``, or all) and judge them."""
    found = await client.list(kinds.Lease, namespace=namespace)
    return diagnose_leases(
        found,
        now=time.time() if now is None else now,
        namespace=namespace,
        include_node_leases=include_node_leases,
    )


def render_lease_table(report: LeaseReport) -> str:
    """The human output: one row per Lease, then the problems."""
    scope = f"namespace {report.namespace}" if report.namespace else "all namespaces"
    if not report.leases:
        lines = [f"No leader election Leases ({scope})."]
    else:
        header = ("NAMESPACE", "NAME", "STATE", "HOLDER", "RENEWED", "DURATION", "LEADING", "MOVES")
        rows = [header]
        for s in report.leases:
            rows.append(
                (
                    s.namespace,
                    s.name,
                    s.state,
                    s.holder or "-",
                    f"{_ago(s.renewed_seconds_ago)} ago"
                    if s.renewed_seconds_ago is not None
                    else "-",
                    f"{s.lease_duration:g}s" if s.lease_duration is not None else "-",
                    _ago(s.acquired_seconds_ago),
                    str(s.transitions),
                )
            )
        lines = table_lines(rows)
        owners = [s for s in report.leases if s.finalizers]
        if owners:
            lines.append("")
            lines.append("setpoint managers and the finalizers they handle:")
            for s in owners:
                assert s.finalizers is not None
                handled = ", ".join(f"{f} ({c})" for f, c in sorted(s.finalizers.items()))
                lines.append(f"  {s.namespace}/{s.name}: {handled}")
        waiting = [s for s in report.leases if s.waiting and s.state == "held"]
        if waiting:
            lines.append("")
            lines.append("Optional controllers waiting for their kinds to be served (CRDs):")
            for s in waiting:
                for controller, kinds_waited in sorted(s.waiting.items()):
                    what = ", ".join(kinds_waited)
                    lines.append(f"  {s.namespace}/{s.name}: {controller} waits for {what}")
    lines.extend(problem_lines(report.problems, "Every Lease with a holder is being renewed."))
    if report.node_leases:
        lines.append(
            f"({report.node_leases} node heartbeat Leases left out; --include-node-leases)"
        )
    return "\n".join(lines)


def _cmd_leases(args: argparse.Namespace) -> int:
    return run_check(
        args,
        lambda client: scan_leases(
            client, namespace=args.namespace, include_node_leases=args.include_node_leases
        ),
        LeaseReport.to_json,
        render_lease_table,
    )


def register_checks(checks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor leader-election`` to the doctor's checks."""
    parser = add_check(
        checks,
        "leader-election",
        help="who holds each leader election Lease, how long ago it was renewed, how often "
        "it changed hands",
        description=(
            "Read every coordination.k8s.io Lease (node heartbeats aside) and show its holder, "
            "the age of its last renewal against its duration, and its transitions."
        ),
        run=_cmd_leases,
    )
    parser.add_argument("-n", "--namespace", default=None, help="only this namespace's Leases")
    parser.add_argument(
        "--include-node-leases",
        action="store_true",
        help=f"also show the kubelets' heartbeats in {NODE_LEASE_NAMESPACE}",
    )
