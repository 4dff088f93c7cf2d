"""``setpoint doctor shards``: reading shard Leases and object labels into a ring report."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.cli.doctor_shards import diagnose_ring, parse_kinds, render_rings
from setpoint.manager.sharding import (
    ANNOTATION_CONTROLLERS,
    ANNOTATION_KINDS,
    ANNOTATION_VIRTUAL_NODES,
    RING_LABEL,
    Handover,
    HashRing,
    drain_label,
    handover_annotation,
    shard_label,
)

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC).timestamp()


def lease(name: str, holder: str, renewed_ago: float, duration: int = 15) -> dict[str, object]:
    renewed = datetime.fromtimestamp(NOW - renewed_ago, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {
            "name": name,
            "namespace": "ops",
            "labels": {RING_LABEL: "widgets"},
            "annotations": {
                ANNOTATION_KINDS: "test.setpoint.dev/v1/Gizmo",
                ANNOTATION_CONTROLLERS: "gizmo",
            },
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renewed},
    }


def obj(
    name: str, shard: str | None = None, *, drain: bool = False, record: str | None = None
) -> dict[str, object]:
    """An object labelled for ``shard``, with the sharder's record for ``record`` (default:
    the same shard, as the sharder writes them)."""
    labels = {}
    annotations = {}
    uid = f"uid-{name}"
    if shard:
        labels[shard_label("widgets")] = shard
    if record or shard:
        annotations[handover_annotation("widgets")] = Handover(
            record or str(shard), uid, via="new"
        ).render()
    if drain:
        labels[drain_label("widgets")] = "true"
    return {
        "kind": "Gizmo",
        "metadata": {
            "name": name,
            "namespace": "a",
            "uid": uid,
            "labels": labels,
            "annotations": annotations,
        },
    }


def test_a_ring_report_counts_objects_per_shard_and_tells_live_from_dead() -> None:
    """Live, expired, taken-over and released Leases; counts, drains, unassigned, orphans."""
    leases = [
        lease("alpha", "alpha", 2),
        lease("beta", "beta", 40),  # not renewed for longer than 15 s
        lease("gamma", "sharder:leader-1", 1),
        lease("delta", "", 1),
    ]
    objects = [
        obj("1", "alpha"),
        obj("2", "alpha", drain=True),
        obj("3", "beta"),
        obj("4"),
        obj("5", "zeta"),
    ]
    report = diagnose_ring("widgets", leases, objects, now=NOW, kinds_seen=("Gizmo",))
    states = {lease.name: lease.state for lease in report.leases}
    assert states == {
        "alpha": "alive",
        "beta": "expired",
        "gamma": "taken over",
        "delta": "released",
    }
    by_name = {lease.name: lease for lease in report.leases}
    assert (by_name["alpha"].objects, by_name["alpha"].draining) == (2, 1)
    assert by_name["alpha"].share == pytest.approx(1.0)  # the only live shard owns it all
    assert by_name["beta"].objects == 1 and by_name["beta"].share == 0.0
    assert (report.objects, report.unassigned, report.orphaned) == (5, 1, 1)
    assert report.leases[0].controllers == ("gizmo",)
    table = render_rings([report])
    assert "RING widgets: 1 live of 4 shard Leases, 5 objects (Gizmo)" in table
    assert "(unassigned)" in table and "(no Lease)" in table
    assert report.to_json()["shards"][0]["state"] == "alive"


def test_shares_use_the_virtual_nodes_the_leases_advertise() -> None:
    """The shares are those of the sharder's ring: the points its replicas advertise."""

    def advertising(name: str, points: str | None) -> dict[str, object]:
        item = lease(name, name, 1)
        if points is not None:
            item["metadata"]["annotations"][ANNOTATION_VIRTUAL_NODES] = points  # type: ignore[index]
        return item

    names = ["alpha", "beta"]
    report = diagnose_ring("widgets", [advertising(n, "1000") for n in names], [], now=NOW)
    expected = HashRing(names, virtual_nodes=1000).shares()
    assert expected != HashRing(names).shares()
    assert {lease.name: lease.share for lease in report.leases} == pytest.approx(expected)
    assert report.to_json()["shards"][0]["virtualNodes"] == 1000
    assert report.problems() == []
    older = diagnose_ring("widgets", [advertising(n, None) for n in names], [], now=NOW)
    assert {lease.name: lease.share for lease in older.leases} == pytest.approx(
        HashRing(names).shares()
    )
    mixed = [advertising("alpha", "1000"), advertising("beta", "100"), advertising("gamma", "1000")]
    problems = diagnose_ring("widgets", mixed, [], now=NOW).problems()
    assert len(problems) == 1 and "different virtual_nodes (100, 1000)" in problems[0]


def test_parse_kinds_reads_what_the_lease_advertises() -> None:
    """``group/version/Kind`` and ``version/Kind`` (core); malformed items are skipped."""
    assert parse_kinds("test.setpoint.dev/v1/Gizmo,v1/ConfigMap,broken,") == (
        GroupVersionKind("test.setpoint.dev", "v1", "Gizmo"),
        GroupVersionKind("", "v1", "ConfigMap"),
    )


def test_no_rings_says_where_to_look() -> None:
    """Without shard Leases the output says so and suggests -n."""
    assert "No shard Leases found" in render_rings([])


def test_problems_name_the_ring_and_what_to_check() -> None:
    """Expired shards still holding objects, unassigned and orphaned objects are problems."""
    leases = [lease("alpha", "alpha", 2), lease("beta", "beta", 40)]
    objects = [obj("1", "alpha"), obj("2", "beta"), obj("3"), obj("4", "zeta")]
    problems = diagnose_ring("widgets", leases, objects, now=NOW).problems()
    assert len(problems) == 3
    assert "shard beta has expired but still holds 1 objects" in problems[0]
    assert "1 objects are not assigned" in problems[1]
    assert "labelled for shards that have no Lease" in problems[2]
    dead = diagnose_ring("widgets", [lease("beta", "beta", 40)], objects, now=NOW).problems()
    assert "no live shard" in dead[0]
    healthy = diagnose_ring("widgets", leases[:1], objects[:1], now=NOW)
    assert healthy.problems() == []


def test_objects_whose_label_and_record_disagree_are_listed_with_why() -> None:
    """Issue 27, finding 5: a label edited by someone other than the sharder (moved, removed,
    set without a record) is shown per object, in the table, the JSON and the problems."""
    leases = [lease("alpha", "alpha", 2), lease("beta", "beta", 2)]
    bare = obj("4", "beta")
    bare["metadata"]["annotations"] = {}  # type: ignore[index]
    objects = [
        obj("1", "alpha"),
        obj("2", "beta", record="alpha"),  # moved alpha -> beta by someone else
        obj("3", None, record="alpha"),  # label removed
        bare,  # labelled without a record
        obj("5"),  # not assigned yet: no disagreement
    ]
    report = diagnose_ring("widgets", leases, objects, now=NOW)
    assert [(d.object, d.label) for d in report.disagreeing] == [
        ("Gizmo a/2", "beta"),
        ("Gizmo a/3", ""),
        ("Gizmo a/4", "beta"),
    ]
    assert "gives it to alpha" in report.disagreeing[0].why
    assert "removed" in report.disagreeing[1].why
    assert "without a hand-over record" in report.disagreeing[2].why
    table = render_rings([report])
    assert "3 objects whose shard label and hand-over record disagree" in table
    assert "Gizmo a/2: labelled beta, but its hand-over record gives it to alpha" in table
    assert report.to_json()["disagreeing"][0]["record"].startswith("shard=alpha,")
    (problem,) = [p for p in report.problems() if "disagree" in p]
    assert "setpoint generate sharding-policy" in problem
