"""``setpoint doctor shards``: the rings of sharded operators, seen from outside.

A setpoint replica that shards controllers (decision 0011) holds a shard Lease labelled
``sharding.setpoint.dev/ring=<ring>``, annotated with the kinds it shards. For every ring
found, the command shows each shard Lease (holder, when it was last renewed, whether it is
alive, the share of the hash space it owns) and how many objects carry each shard's label,
how many are being drained and how many nobody holds yet; and the objects whose shard label
and hand-over record (annotation ``handover.sharding.setpoint.dev/<ring>``) disagree, which
no replica reconciles until the leader's sharder repairs them (someone other than the
sharder edited them).

"Alive" here compares the Lease's ``renewTime`` with this machine's clock (a Lease renewed
within ``leaseDurationSeconds``): good enough to read, while the sharder itself never
compares clocks (it counts from when it saw each renewal). The object counts come from one
metadata-only list per sharded kind.

Exit status: 0 when the scan ran, 1 on an error (unreachable server, bad options).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject, annotations_of, labels_of, metadata_of
from setpoint.cli.doctor import (
    _list_metadata,
    add_check,
    format_duration,
    run_check,
    table_lines,
)
from setpoint.client.client import Client
from setpoint.client.errors import ClientError
from setpoint.manager.resourcelock import LeaderElectionRecord
from setpoint.manager.sharding import (
    ANNOTATION_CONTROLLERS,
    ANNOTATION_KINDS,
    ANNOTATION_VIRTUAL_NODES,
    RING_LABEL,
    SHARDER_HOLDER_PREFIX,
    VIRTUAL_NODES,
    HashRing,
    drain_label,
    handover_annotation,
    handover_of,
    shard_label,
)

__all__ = [
    "Disagreement",
    "RingReport",
    "ShardLease",
    "diagnose_ring",
    "disagreement",
    "parse_kinds",
    "register_checks",
    "render_rings",
    "scan_rings",
]


@dataclass
class ShardLease:
    """One shard Lease of a ring, as the doctor reads it."""

    name: str
    namespace: str
    holder: str
    renewed_seconds_ago: float | None
    lease_duration: int
    kinds: tuple[str, ...]
    controllers: tuple[str, ...]
    virtual_nodes: int = VIRTUAL_NODES
    """The ring points the replica advertises (``ShardingOptions.virtual_nodes``)."""
    alive: bool = False
    share: float = 0.0
    objects: int = 0
    draining: int = 0

    @property
    def state(self) -> str:
        """``alive``, ``expired``, ``released`` or ``taken over`` (by the sharder)."""
        if self.holder.startswith(SHARDER_HOLDER_PREFIX):
            return "taken over"
        if not self.holder:
            return "released"
        return "alive" if self.alive else "expired"

    def to_json(self) -> dict[str, Any]:
        """The lease as JSON (``-o json``)."""
        return {
            "name": self.name,
            "namespace": self.namespace,
            "holder": self.holder,
            "state": self.state,
            "renewedSecondsAgo": self.renewed_seconds_ago,
            "leaseDurationSeconds": self.lease_duration,
            "share": round(self.share, 4),
            "objects": self.objects,
            "draining": self.draining,
            "kinds": list(self.kinds),
            "controllers": list(self.controllers),
            "virtualNodes": self.virtual_nodes,
        }


@dataclass(frozen=True)
class Disagreement:
    """An object whose shard label and hand-over record disagree."""

    object: str
    """``<kind> <namespace>/<name>`` (``<kind> <name>`` when cluster-scoped)."""
    label: str
    """Its shard label (``""``: none)."""
    record: str
    """Its hand-over annotation as found (``""``: none)."""
    why: str
    """What the disagreement means."""

    def to_json(self) -> dict[str, Any]:
        """The disagreement as JSON (``-o json``)."""
        return {"object": self.object, "label": self.label, "record": self.record, "why": self.why}


def disagreement(obj: JsonObject, ring: str) -> str:
    """Why ``obj``'s shard label and hand-over record disagree (``""`` when they agree).

    The sharder writes both in one patch and an owner's release removes the label as it
    writes the release, so outside a foreign edit they never disagree.
    """
    label = labels_of(obj).get(shard_label(ring), "")
    record = handover_of(obj, ring)
    if record is None:
        if not label:
            return ""  # not assigned yet
        if handover_annotation(ring) in annotations_of(obj):
            return (
                f"labelled {label}, but its hand-over record was edited or copied from another "
                "object (no replica reconciles it until the sharder confirms it)"
            )
        return (
            f"labelled {label} without a hand-over record (created with the label, or the "
            "record was removed); no replica reconciles it until the sharder confirms it"
        )
    if record.released:
        if label:
            return (
                f"labelled {label} after {record.shard} released it: the label was set by "
                "someone other than the sharder, which assigns it"
            )
        return ""
    if label == record.shard:
        return ""
    if not label:
        return (
            f"its shard label was removed by someone other than the sharder; it belongs to "
            f"{record.shard}, which the sharder gives it back to"
        )
    return (
        f"labelled {label}, but its hand-over record gives it to {record.shard}: the label was "
        f"changed by someone other than the sharder, which gives it back to {record.shard}"
    )


@dataclass
class RingReport:
    """What the doctor found about one ring."""

    ring: str
    leases: list[ShardLease] = field(default_factory=list)
    kinds: tuple[str, ...] = ()
    objects: int = 0
    unassigned: int = 0
    orphaned: int = 0
    """Objects labelled for a shard that has no Lease at all."""
    disagreeing: list[Disagreement] = field(default_factory=list)
    """Objects whose shard label and hand-over record disagree."""
    errors: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What needs attention, each with what to check (for the bare ``setpoint doctor``)."""
        found: list[str] = []
        live = [lease for lease in self.leases if lease.alive]
        if not live and self.objects:
            found.append(
                f"ring {self.ring}: no live shard, so none of its {self.objects} objects is "
                "reconciled; are the operator's replicas running?"
            )
        for lease in self.leases:
            if lease.state == "expired" and lease.objects:
                found.append(
                    f"ring {self.ring}: shard {lease.name} has expired but still holds "
                    f"{lease.objects} objects; the leader's sharder moves them once it sees the "
                    "Lease expire (is the leader running?)"
                )
        if live and self.unassigned:
            found.append(
                f"ring {self.ring}: {self.unassigned} objects are not assigned to a shard yet "
                "(normal for a moment after they are created; if it persists, check the "
                "leader's log for the sharder)"
            )
        if self.orphaned:
            found.append(
                f"ring {self.ring}: {self.orphaned} objects are labelled for shards that have "
                "no Lease; the leader's sharder reassigns them"
            )
        if self.disagreeing:
            first = self.disagreeing[0]
            found.append(
                f"ring {self.ring}: {len(self.disagreeing)} objects' shard label and hand-over "
                f"record disagree, e.g. {first.object}: {first.why}. Their labels were edited "
                "by someone other than the operator; the leader's sharder repairs them. To "
                "refuse such edits, install the policy of `setpoint generate sharding-policy`"
            )
        found.extend(f"ring {self.ring}: {error}" for error in self.errors)
        return found

    def to_json(self) -> dict[str, Any]:
        """The ring as JSON (``-o json``)."""
        return {
            "ring": self.ring,
            "kinds": list(self.kinds),
            "objects": self.objects,
            "unassigned": self.unassigned,
            "orphaned": self.orphaned,
            "disagreeing": [d.to_json() for d in self.disagreeing],
            "shards": [lease.to_json() for lease in self.leases],
            "errors": self.errors,
        }


_SHOWN = 10
"""Disagreeing objects the table lists (``-o json`` lists all)."""


def parse_kinds(text: str) -> tuple[GroupVersionKind, ...]:
    """The kinds a shard Lease advertises: ``group/version/Kind`` (``version/Kind`` for core)."""
    found = []
    for item in text.split(","):
        parts = item.strip().split("/")
        if len(parts) == 3 and all(parts):
            found.append(GroupVersionKind(parts[0], parts[1], parts[2]))
        elif len(parts) == 2 and all(parts):
            found.append(GroupVersionKind("", parts[0], parts[1]))
    return tuple(found)


def _virtual_nodes(text: object) -> int:
    """A Lease's advertised ring points; :data:`VIRTUAL_NODES` if absent or not a number."""
    try:
        value = int(str(text))
    except ValueError:
        return VIRTUAL_NODES
    return value if value >= 1 else VIRTUAL_NODES


def _renewed_ago(record: LeaderElectionRecord, now: float) -> float | None:
    if record.renew_time is None:
        return None
    return max(0.0, now - record.renew_time.timestamp())


def diagnose_ring(
    ring: str,
    leases: list[JsonObject],
    objects: list[JsonObject],
    *,
    now: float,
    kinds_seen: tuple[str, ...] = (),
) -> RingReport:
    """Put one ring's Leases and its objects (metadata is enough) together."""
    report = RingReport(ring=ring, kinds=kinds_seen)
    for item in leases:
        m = metadata_of(item)
        annotations = m.get("annotations") or {}
        record = LeaderElectionRecord.from_lease_spec(item.get("spec"))
        ago = _renewed_ago(record, now)
        entry = ShardLease(
            name=str(m.get("name") or ""),
            namespace=str(m.get("namespace") or ""),
            holder=record.holder_identity,
            renewed_seconds_ago=ago,
            lease_duration=record.lease_duration_seconds,
            kinds=tuple(k for k in str(annotations.get(ANNOTATION_KINDS, "")).split(",") if k),
            controllers=tuple(
                c for c in str(annotations.get(ANNOTATION_CONTROLLERS, "")).split(",") if c
            ),
            virtual_nodes=_virtual_nodes(annotations.get(ANNOTATION_VIRTUAL_NODES)),
        )
        entry.alive = (
            entry.holder == entry.name and ago is not None and ago < max(entry.lease_duration, 1)
        )
        report.leases.append(entry)
    report.leases.sort(key=lambda lease: lease.name)
    live = [lease for lease in report.leases if lease.alive]
    points = Counter(lease.virtual_nodes for lease in live)
    virtual_nodes = points.most_common(1)[0][0] if points else VIRTUAL_NODES
    if len(points) > 1:
        report.errors.append(
            "live shards advertise different virtual_nodes ("
            + ", ".join(str(p) for p in sorted(points))
            + f"): the ring moves objects whenever leadership moves; give every replica one "
            f"ShardingOptions.virtual_nodes (shares shown for {virtual_nodes})"
        )
    shares = HashRing([lease.name for lease in live], virtual_nodes=virtual_nodes).shares()
    counted: Counter[str] = Counter()
    drains: Counter[str] = Counter()
    key, drain = shard_label(ring), drain_label(ring)
    for obj in objects:
        labels = labels_of(obj)
        shard = labels.get(key, "")
        counted[shard] += 1
        if drain in labels:
            drains[shard] += 1
        why = disagreement(obj, ring)
        if why:
            m = metadata_of(obj)
            where = f"{m.get('namespace')}/{m.get('name')}" if m.get("namespace") else m.get("name")
            report.disagreeing.append(
                Disagreement(
                    f"{obj.get('kind') or 'object'} {where}",
                    shard,
                    str(annotations_of(obj).get(handover_annotation(ring), "")),
                    why,
                )
            )
    names = set()
    for lease in report.leases:
        lease.share = shares.get(lease.name, 0.0)
        lease.objects = counted.get(lease.name, 0)
        lease.draining = drains.get(lease.name, 0)
        names.add(lease.name)
    report.objects = len(objects)
    report.unassigned = counted.get("", 0)
    report.orphaned = sum(n for shard, n in counted.items() if shard and shard not in names)
    return report


async def scan_rings(
    client: Client,
    *,
    namespace: str | None = None,
    ring: str | None = None,
    now: float | None = None,
) -> list[RingReport]:
    """Find the rings (all, or ``ring``) and diagnose each (see the module docstring)."""
    selector = f"{RING_LABEL}={ring}" if ring else RING_LABEL
    leases = list(await client.list(kinds.Lease, namespace=namespace, labels=selector))
    by_ring: dict[str, list[JsonObject]] = {}
    for lease in leases:
        by_ring.setdefault(labels_of(lease).get(RING_LABEL, ""), []).append(lease)
    current = time.time() if now is None else now
    reports = []
    for name in sorted(by_ring):
        ring_leases = by_ring[name]
        wanted: dict[GroupVersionKind, None] = {}
        for lease in ring_leases:
            annotations = metadata_of(lease).get("annotations") or {}
            for kind in parse_kinds(str(annotations.get(ANNOTATION_KINDS, ""))):
                wanted[kind] = None
        objects: list[JsonObject] = []
        errors: list[str] = []
        for kind in wanted:
            try:
                info = await client.resource_info(kind)
                objects.extend(await _list_metadata(client, info, None))
            except ClientError as exc:
                errors.append(f"could not list {kind}: {exc}")
        label = ", ".join(f"{k.kind}.{k.group}" if k.group else k.kind for k in wanted)
        report = diagnose_ring(name, ring_leases, objects, now=current, kinds_seen=(label,))
        report.errors = errors
        reports.append(report)
    return reports


def render_rings(reports: list[RingReport]) -> str:
    """The table ``setpoint doctor shards`` prints."""
    if not reports:
        return (
            "No shard Leases found (label sharding.setpoint.dev/ring): no setpoint replica "
            "shards controllers here, or they run in another namespace (-n)."
        )
    out: list[str] = []
    for report in reports:
        live = sum(1 for lease in report.leases if lease.alive)
        kinds_text = ", ".join(k for k in report.kinds if k) or "no kinds advertised"
        out.append(
            f"RING {report.ring}: {live} live of {len(report.leases)} shard Leases, "
            f"{report.objects} objects ({kinds_text})"
        )
        header = ("SHARD", "HOLDER", "STATE", "RENEWED", "SHARE", "OBJECTS", "DRAINING")
        rows = [header]
        for lease in report.leases:
            ago = lease.renewed_seconds_ago
            rows.append(
                (
                    lease.name,
                    lease.holder or "-",
                    lease.state,
                    f"{format_duration(ago)} ago" if ago is not None else "never",
                    f"{lease.share * 100:.1f}%",
                    str(lease.objects),
                    str(lease.draining),
                )
            )
        rows.append(("(unassigned)", "", "", "", "", str(report.unassigned), ""))
        if report.orphaned:
            rows.append(("(no Lease)", "", "", "", "", str(report.orphaned), ""))
        out.extend(table_lines(rows))
        if report.disagreeing:
            out.append(
                f"{len(report.disagreeing)} objects whose shard label and hand-over record "
                "disagree (edited by someone other than the sharder; not reconciled until "
                "it repairs them):"
            )
            out.extend(f"  {d.object}: {d.why}" for d in report.disagreeing[:_SHOWN])
            if len(report.disagreeing) > _SHOWN:
                out.append(f"  ... and {len(report.disagreeing) - _SHOWN} more (-o json lists all)")
        out.extend(f"error: {error}" for error in report.errors)
        out.append("")
    return "\n".join(out).rstrip()


def _cmd_shards(args: argparse.Namespace) -> int:
    return run_check(
        args,
        lambda client: scan_rings(client, namespace=args.namespace, ring=args.ring),
        lambda reports: [r.to_json() for r in reports],
        render_rings,
    )


def register_checks(checks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor shards`` to the doctor's checks."""
    parser = add_check(
        checks,
        "shards",
        help="show each sharding ring: its shard Leases, which are alive, and how many "
        "objects each shard holds",
        description=(
            "List the shard Leases of setpoint replicas (label sharding.setpoint.dev/ring), "
            "whether each is alive, its share of the ring, and the objects labelled for it "
            "(one metadata-only list per sharded kind), and the objects whose shard label and "
            "hand-over record disagree."
        ),
        run=_cmd_shards,
    )
    parser.add_argument(
        "-n", "--namespace", default=None, help="namespace of the shard Leases (default: all)"
    )
    parser.add_argument("--ring", default=None, help="show only this ring")
