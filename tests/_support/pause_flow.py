"""Pause scenarios (``setpoint.dev/paused``) on a running controller, fake or real server.

Each scenario runs a real Controller over a ``Backend`` of tests/_support/finalizer_flow.py:
the fake client (tests/unit/controller/test_pause.py) or, in
tests/integration/controller/test_pause.py, both the fake and the real control plane. The
scenarios are plain coroutines taking a backend; the test modules wrap them.
"""

from __future__ import annotations

from typing import Any

import setpoint as sp
from setpoint.api.conditions import find_condition
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, generation_of
from setpoint.cli.doctor_paused import scan_paused
from setpoint.client.patch import MergePatch
from setpoint.controller import Builder
from setpoint.controller.pause import (
    PAUSED_ANNOTATION,
    PAUSED_CONDITION,
    PAUSED_DELETION_ANNOTATION,
    PAUSED_REASON,
)
from setpoint.controller.predicates import GenerationChanged
from setpoint.testing import eventually
from tests._support.finalizer_flow import FIN, FOREIGN, Backend, Operator, has_finalizers, running
from tests._support.kinds import DOODAD, GIZMO


async def annotate(backend: Backend, kind: GroupVersionKind, name: str, **values: Any) -> None:
    """Merge ``values`` (``None`` removes one) into the object's annotations."""
    patch = MergePatch({"metadata": {"annotations": values}})
    await backend.client.patch(kind, name, patch, namespace=backend.namespace)


async def paused_condition(backend: Backend, name: str) -> sp.Condition | None:
    obj = await backend.read(GIZMO, name)
    return None if obj is None else find_condition(obj.get("status") or {}, PAUSED_CONDITION)


def reasons(op: Operator) -> list[str]:
    return [reason for _, _, reason, _ in op.recorder.events]


def gizmo_controller(op: Operator) -> Builder:
    """A controller that filters on generation (a pause must pass it) with a finalizer."""
    return (
        Builder(op.name)
        .for_(GIZMO, predicates=[GenerationChanged()])
        .finalizer(FIN, op.cleanup(FIN), deadline=5)
    )


async def idle(op: Operator) -> None:
    assert op.controller is not None
    await op.controller.wait_idle(timeout=20, settle=0.5)


# -- the scenarios ------------------------------------------------------------------------------


async def paused_object_is_left_alone_then_resumes(backend: Backend) -> None:
    """Paused: no reconcile, one condition and one Event; resumed: reconciled, condition gone."""
    async with running(backend, gizmo_controller) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: op.journal.reconciled, timeout=20, description="reconciled")
        await idle(op)

        await annotate(backend, GIZMO, "w1", **{PAUSED_ANNOTATION: "true"})
        await eventually(
            lambda: paused_condition(backend, "w1"), timeout=20, description="Paused condition"
        )
        condition = await paused_condition(backend, "w1")
        assert condition is not None
        assert (condition.status, condition.reason) == ("True", PAUSED_REASON)
        assert PAUSED_ANNOTATION in condition.message
        await idle(op)
        before = len(op.journal.reconciled)

        # A spec change (a new generation) while paused: not reconciled, reported no more.
        stored = await backend.read(GIZMO, "w1")
        assert stored is not None
        stored["spec"]["size"] = 7
        await backend.client.update(stored)
        await idle(op)
        assert len(op.journal.reconciled) == before
        assert reasons(op).count("Paused") == 1
        assert op.controller is not None
        op.controller.enqueue(ObjectKey(backend.namespace, "w1"))  # a requeue: skipped
        await idle(op)
        assert len(op.journal.reconciled) == before

        # Resume: GenerationChanged would drop the annotation's removal; it passes.
        await annotate(backend, GIZMO, "w1", **{PAUSED_ANNOTATION: None})

        def reconciled_new_spec() -> bool:
            return any(o["spec"].get("size") == 7 for o in op.journal.reconciled[before:])

        await eventually(reconciled_new_spec, timeout=20, description="reconciled after resume")
        await eventually(
            lambda: _no(paused_condition(backend, "w1")), timeout=20, description="condition gone"
        )
        assert reasons(op).count("Paused") == 1
        assert reasons(op).count("Resumed") == 1
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")


async def paused_object_being_deleted_still_runs_its_cleanup(backend: Backend) -> None:
    """Deleting a paused object runs its finalizer cleanup; reconcile stays skipped."""
    async with running(backend, gizmo_controller) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: has_finalizers(backend, GIZMO, "w1", FIN), timeout=20)
        await eventually(lambda: op.journal.reconciled, timeout=20, description="reconciled")
        await annotate(backend, GIZMO, "w1", **{PAUSED_ANNOTATION: "true"})
        await eventually(lambda: paused_condition(backend, "w1"), timeout=20)
        await idle(op)
        before = len(op.journal.reconciled)
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        assert op.journal.finished == [(FIN, "w1")]
        assert len(op.journal.reconciled) == before


async def paused_deletion_holds_the_cleanup_until_the_pause_ends(backend: Backend) -> None:
    """With ``paused-deletion: "true"`` the cleanup waits; ending the pause lets it run."""
    async with running(backend, gizmo_controller) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: has_finalizers(backend, GIZMO, "w1", FIN), timeout=20)
        await annotate(
            backend,
            GIZMO,
            "w1",
            **{PAUSED_ANNOTATION: "true", PAUSED_DELETION_ANNOTATION: "true"},
        )
        await eventually(lambda: paused_condition(backend, "w1"), timeout=20)
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await idle(op)
        held = await backend.read(GIZMO, "w1")
        assert held is not None and held["metadata"].get("deletionTimestamp")
        assert op.journal.cleanups == []

        await annotate(backend, GIZMO, "w1", **{PAUSED_ANNOTATION: None})
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        assert op.journal.finished == [(FIN, "w1")]


async def pause_names_controllers(backend: Backend) -> None:
    """A list of names pauses those controllers only; ``"false"`` pauses nothing."""
    async with running(backend, lambda op: Builder(op.name).for_(GIZMO)) as op:
        for name, value in (("other", "dns, billing"), ("off", "False"), ("mine", "dns,widgets")):
            await backend.client.create(
                backend.obj(GIZMO, name, annotations={PAUSED_ANNOTATION: value})
            )
        await idle(op)
        names = {o["metadata"]["name"] for o in op.journal.reconciled}
        assert names == {"other", "off"}
        assert await paused_condition(backend, "mine") is not None
        assert await paused_condition(backend, "other") is None
        assert reasons(op) == ["Paused"]
        assert 'setpoint.dev/paused="dns,widgets"' in op.recorder.events[0][3]


async def kind_without_status_gets_the_event_once(backend: Backend) -> None:
    """Without a status subresource the pause is an Event, once, and no condition."""
    async with running(backend, lambda op: Builder(op.name).for_(DOODAD)) as op:
        await backend.client.create(
            backend.obj(DOODAD, "d1", annotations={PAUSED_ANNOTATION: "true"})
        )
        await idle(op)
        stored = await backend.read(DOODAD, "d1")
        assert stored is not None
        assert generation_of(stored) == 1
        stored["spec"]["size"] = 2
        await backend.client.update(stored)
        await idle(op)
        assert op.journal.reconciled == []
        assert reasons(op) == ["Paused"]
        assert "status" not in (await _read(backend, DOODAD, "d1"))
        await annotate(backend, DOODAD, "d1", **{PAUSED_ANNOTATION: "false"})
        await eventually(lambda: op.journal.reconciled, timeout=20, description="resumed")
        assert reasons(op) == ["Paused", "Resumed"]


async def _read(backend: Backend, kind: GroupVersionKind, name: str) -> JsonObject:
    obj = await backend.read(kind, name)
    assert obj is not None
    return obj


async def _no(value: Any) -> bool:
    return await value is None


async def the_doctor_lists_paused_objects(backend: Backend) -> None:
    """``scan_paused`` over a real listing (the fake serves no metadata-only lists)."""
    await backend.client.create(backend.obj(GIZMO, "plain"))
    await backend.client.create(backend.obj(GIZMO, "all", annotations={PAUSED_ANNOTATION: "true"}))
    await backend.client.create(
        backend.obj(
            GIZMO,
            "some",
            finalizers=[FOREIGN],
            annotations={PAUSED_ANNOTATION: "dns,widgets", PAUSED_DELETION_ANNOTATION: "true"},
        )
    )
    report = await scan_paused(backend.client, namespace=backend.namespace, kinds_wanted=["gizmos"])
    assert [(p.name, p.controllers) for p in report.paused] == [
        ("all", None),
        ("some", ("dns", "widgets")),
    ]
    assert report.problems == []
    await backend.client.delete(GIZMO, "some", namespace=backend.namespace)
    report = await scan_paused(backend.client, namespace=backend.namespace, kinds_wanted=["gizmos"])
    assert len(report.problems) == 1 and "some" in report.problems[0]
    await backend.release(GIZMO, "some", FOREIGN)
