"""Hand-over records (issue 27, finding 5): the gate's decision and the sharder's next step.

A shard label edited by anyone but the sharder must never let a second replica reconcile an
object: a replica acts only on a label its hand-over record confirms, and the sharder gives
an edited object back to the record's owner (decision 0011).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from setpoint.api.keys import ObjectKey
from setpoint.cache.store import Store
from setpoint.manager.sharder import ShardStep, next_step
from setpoint.manager.sharding import (
    Handover,
    drain_label,
    handover_annotation,
    handover_of,
    shard_label,
    verified_shard,
)
from setpoint.manager.shardmember import ShardGate
from tests._support.kinds import GIZMO
from tests._support.virtual_time import settle

RING = "gizmos"
SHARD, DRAIN, RECORD = shard_label(RING), drain_label(RING), handover_annotation(RING)
UID = "0b6c7a52-5f0e-4a53-9a44-1f0d3c1e9e11"
KEY = ObjectKey("ns", "g1")


def obj(
    label: str | None = None,
    record: Handover | str | None = None,
    *,
    drain: bool = False,
    uid: str = UID,
) -> dict[str, Any]:
    """A Gizmo's metadata with the given shard label, record and drain label."""
    labels: dict[str, str] = {}
    if label is not None:
        labels[SHARD] = label
    if drain:
        labels[DRAIN] = "true"
    annotations: dict[str, str] = {}
    if record is not None:
        annotations[RECORD] = record.render() if isinstance(record, Handover) else record
    return {
        "apiVersion": "test.setpoint.dev/v1",
        "kind": "Gizmo",
        "metadata": {
            "name": KEY.name,
            "namespace": KEY.namespace,
            "uid": uid,
            "resourceVersion": "7",
            "labels": labels,
            "annotations": annotations,
        },
    }


def assigned(shard: str, previous: str = "", via: str = "drain") -> Handover:
    return Handover(shard, UID, previous=previous, via=via)


def released(shard: str) -> Handover:
    return Handover(shard, UID, released=True)


# -- the record ------------------------------------------------------------------------------


def test_a_record_round_trips_and_garbage_is_no_record() -> None:
    """Both forms parse back to themselves; anything else (edited, truncated) is no record."""
    for record in (assigned("beta", "alpha", "drain"), assigned("a", via="new"), released("b")):
        assert Handover.parse(record.render()) == record
    good = assigned("beta", "alpha").render()
    for text in (
        None,
        "",
        "beta",
        good + ",x=1",
        good.replace("via=drain", "via=magic"),
        good.replace("shard=beta", "shard=Beta"),
        good.replace(f"uid={UID}", "uid="),
        "released=b,uid=u,uid=v",
        "x" * 600,
        42,
    ):
        assert Handover.parse(text) is None, text


def test_a_record_confirms_only_its_own_label_and_object() -> None:
    """The label counts only when the record names the same shard and the object's UID."""
    assert verified_shard(obj("beta", assigned("beta")), RING) == "beta"
    assert verified_shard(obj("beta", assigned("alpha")), RING) == ""  # label edited
    assert verified_shard(obj("beta"), RING) == ""  # no record
    assert verified_shard(obj("beta", released("beta")), RING) == ""  # a release
    assert verified_shard(obj(None, assigned("beta")), RING) == ""  # label removed
    copied = obj("beta", assigned("beta"), uid="another-object")
    assert verified_shard(copied, RING) == "" and handover_of(copied, RING) is None


# -- the gate --------------------------------------------------------------------------------


@dataclass
class StubMember:
    """What a ShardGate uses of its ShardMember."""

    shard: str = "beta"
    ring: str = RING
    holding: bool = True
    spawned: list[str] = field(default_factory=list)
    patches: list[Any] = field(default_factory=list)

    def spawn(self, work: Any, name: str) -> None:
        work.close()  # not run: the tests look at whether an acknowledgement starts
        self.spawned.append(name)


@dataclass
class StubController:
    enqueued: list[ObjectKey] = field(default_factory=list)
    busy: set[ObjectKey] = field(default_factory=set)
    asked: int = 0
    """How often the gate asked whether a key is held."""

    def holds(self, key: ObjectKey) -> bool:
        self.asked += 1
        return key in self.busy

    def enqueue(self, key: ObjectKey) -> None:
        self.enqueued.append(key)


def gate_with(*objects: dict[str, Any], shard: str = "beta") -> tuple[ShardGate, StubController]:
    store = Store()
    for item in objects:
        store.put(KEY, item)
    controller = StubController()
    gate = ShardGate(StubMember(shard), GIZMO, store, [controller])  # type: ignore[arg-type, list-item]
    return gate, controller


def test_the_gate_admits_only_objects_its_record_confirms() -> None:
    """Confirmed and not draining: admitted; an edited label, no record or a drain: refused."""
    assert gate_with(obj("beta", assigned("beta")))[0].admits(KEY)
    assert not gate_with(obj("beta", assigned("alpha")))[0].admits(KEY)
    assert not gate_with(obj("beta"))[0].admits(KEY)
    assert not gate_with(obj("beta", released("alpha")))[0].admits(KEY)
    assert not gate_with(obj("beta", assigned("beta"), drain=True))[0].admits(KEY)
    lost_lease, _ = gate_with(obj("beta", assigned("beta")))
    lost_lease.member.holding = False  # type: ignore[misc]
    assert not lost_lease.admits(KEY)


def test_an_object_relabelled_in_by_someone_else_leaves_no_tombstone_and_is_never_released() -> (
    None
):
    """Labelled for this shard by someone else (record names alpha), even with a drain label:
    no acknowledgement starts (the record is alpha's to end), and when the sharder takes the
    label back, no tombstone admits a "deletion" reconcile here."""
    foreign = obj("beta", assigned("alpha"), drain=True)
    gate, _ = gate_with(foreign)
    gate.on_add(foreign, is_initial_list=False)
    assert gate.member.spawned == []  # type: ignore[attr-defined]
    gate.store.delete(KEY)
    gate.on_delete(foreign, final_state_unknown=False)
    assert not gate.admits(KEY) and KEY not in gate.tombstones


def test_an_object_of_ours_relabelled_away_is_reconciled_here_as_a_deletion() -> None:
    """Ours, then relabelled by someone else: it leaves this cache like a deletion, so only
    this replica (its last owner) may still reconcile it."""
    ours = obj("beta", assigned("beta"))
    gate, _ = gate_with(ours)
    gate.store.delete(KEY)
    gate.on_delete(ours, final_state_unknown=False)
    assert gate.admits(KEY)


def test_a_repaired_record_queues_the_object_again() -> None:
    """The sharder confirming this shard in place (annotations only) queues the key."""
    before, after = obj("beta", released("alpha")), obj("beta", assigned("beta", "alpha"))
    gate, controller = gate_with(after)
    gate.on_update(before, after)
    assert controller.enqueued == [KEY] and gate.admits(KEY)


def test_a_drain_starts_only_for_confirmed_objects() -> None:
    """The drain label on a confirmed object starts the acknowledgement."""
    draining = obj("beta", assigned("beta"), drain=True)
    gate, _ = gate_with(draining)
    gate.on_update(obj("beta", assigned("beta")), draining)
    assert len(gate.member.spawned) == 1  # type: ignore[attr-defined]


async def test_an_acknowledgement_gives_up_when_the_record_is_edited_while_it_waits() -> None:
    """The owner waits for its in-flight reconcile; meanwhile someone edits the record. It
    must not write a release (which would let the sharder reassign): the sharder repairs
    first, and the acknowledgement starts again then."""

    class Member(StubMember):
        client: Any = None

    member = Member()
    store = Store()
    store.put(KEY, obj("beta", assigned("beta"), drain=True))
    controller = StubController(busy={KEY})
    gate = ShardGate(member, GIZMO, store, [controller])  # type: ignore[arg-type, list-item]
    task = asyncio.create_task(gate._acknowledge(KEY))
    await settle()  # the task starts and finds the key held
    assert controller.asked >= 1 and not task.done(), "waiting for the in-flight reconcile"
    store.put(KEY, obj("beta", None, drain=True))  # record removed by someone else
    controller.busy.clear()
    await asyncio.wait_for(task, 5)  # returns without patching: member.client is None
    assert KEY not in gate.released


# -- the sharder's plan ----------------------------------------------------------------------

ALIVE = frozenset({"alpha", "beta"})


@pytest.mark.parametrize(
    ("state", "desired", "expected"),
    [
        # In line, moving by drain, waiting for the release: as before.
        (obj("alpha", assigned("alpha")), "alpha", ShardStep("none", "alpha")),
        (obj("alpha", assigned("alpha")), "beta", ShardStep("drain", "alpha", {DRAIN: "true"})),
        (obj("alpha", assigned("alpha"), drain=True), "beta", ShardStep("wait", "alpha")),
        # Released by its owner: assign, recording the drain.
        (
            obj(None, released("alpha")),
            "beta",
            ShardStep(
                "assign",
                "beta",
                {SHARD: "beta", DRAIN: None},
                assigned("beta", "alpha", "drain"),
                reason="drain",
            ),
        ),
        # Never assigned: assign.
        (
            obj(),
            "beta",
            ShardStep("assign", "beta", {SHARD: "beta", DRAIN: None}, assigned("beta", via="new")),
        ),
    ],
)
def test_the_plan_of_an_undisturbed_object(
    state: dict[str, Any], desired: str, expected: ShardStep
) -> None:
    """Objects nobody else touched follow decision 0011's drain, then assign."""
    assert next_step(state, ring=RING, desired=desired, alive=ALIVE) == expected


def test_a_label_moved_to_another_live_shard_is_given_back_to_its_owner() -> None:
    """Relabelled alpha -> beta by someone else: back to alpha (with the drain label when it
    should move), never assigned to beta while alpha may still be reconciling."""
    edited = obj("beta", assigned("alpha"))
    assert next_step(edited, ring=RING, desired="alpha", alive=ALIVE) == ShardStep(
        "restore", "alpha", {SHARD: "alpha"}, assigned("alpha")
    )
    assert next_step(edited, ring=RING, desired="beta", alive=ALIVE) == ShardStep(
        "restore", "alpha", {SHARD: "alpha", DRAIN: "true"}, assigned("alpha")
    )


def test_a_removed_label_is_given_back_too() -> None:
    """Unlabelled by someone else (no release record): not "unassigned", but alpha's."""
    step = next_step(obj(None, assigned("alpha")), ring=RING, desired="beta", alive=ALIVE)
    assert step.action == "restore" and step.shard == "alpha"


def test_a_label_moved_during_a_drain_goes_back_with_the_drain() -> None:
    """Mid-drain, someone relabels: back to the owner, still draining, so it releases it."""
    step = next_step(
        obj("beta", assigned("alpha"), drain=True), ring=RING, desired="beta", alive=ALIVE
    )
    assert step == ShardStep("restore", "alpha", {SHARD: "alpha", DRAIN: "true"}, assigned("alpha"))


def test_a_removed_record_remembered_by_the_sharder_is_restored() -> None:
    """The record was stripped (label left, or moved too): the sharder saw it go and puts it
    back for its owner rather than adopting the label."""
    lost = assigned("alpha")
    for label in ("alpha", "beta", None):
        step = next_step(obj(label), ring=RING, desired="alpha", alive=ALIVE, lost=lost)
        assert step == ShardStep("restore", "alpha", {SHARD: "alpha"}, lost), label
    other_object = Handover("alpha", "another-uid", via="new")
    step = next_step(obj("beta"), ring=RING, desired="alpha", alive=ALIVE, lost=other_object)
    assert step.action == "assign" and step.record == assigned("beta", via="adopted")


def test_an_owner_that_died_is_fenced_before_anyone_else_gets_its_object() -> None:
    """The record's owner is dead (whatever the label says): fence it, then assign."""
    for label in ("gamma", "beta", None):
        step = next_step(obj(label, assigned("gamma")), ring=RING, desired="beta", alive=ALIVE)
        assert step == ShardStep(
            "assign",
            "beta",
            {SHARD: "beta", DRAIN: None},
            assigned("beta", "gamma", "fenced"),
            fence="gamma",
            reason="dead",
        ), label


def test_an_unconfirmed_label_is_adopted_by_a_live_shard_or_fenced_from_a_dead_one() -> None:
    """Created with a label, or restored from a backup (the record's UID is another's): the
    labelled shard never reconciled it, so a live one is confirmed in place (and moved by
    drain later); a dead one is fenced first all the same."""
    restored = obj("beta", Handover("beta", "old-uid", via="new"))
    assert next_step(restored, ring=RING, desired="alpha", alive=ALIVE) == ShardStep(
        "assign", "beta", {SHARD: "beta", DRAIN: None}, assigned("beta", via="adopted")
    )
    step = next_step(obj("gamma"), ring=RING, desired="alpha", alive=ALIVE)
    assert step.fence == "gamma" and step.shard == "alpha"
