"""The status writer against a real API server: no lost writes, only status, no empty writes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from setpoint.api.conditions import (
    find_condition,
    set_condition,
    set_observed_generation,
)
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.client import Client, Invalid
from setpoint.client.patch import MergePatch
from setpoint.client.safe import (
    MutationScopeError,
    OperationResult,
    RetryOptions,
    apply_status,
    update_status,
)
from tests._support.gizmos import gizmo
from tests._support.kinds import Gizmo
from tests._support.request_log import RequestLog

# Enough writers to contend on every write, few enough entries to stay quick on a loaded
# 2-core machine (20 x 50 took 6 minutes at load 20; the proof needs contention, not volume).
WRITERS = 10
ENTRIES = 20


async def test_concurrent_status_writers_lose_nothing(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """Ten concurrent status writers each append twenty entries; all 200 survive.

    Every writer appends its own distinct entries to one object's
    status.entries list through update_status, all at once. Each write is a
    mutation function, retried on Conflict against a fresh read, so no
    writer's append can overwrite another's: the final list holds exactly the
    200 entries. A writer that resent a stale status would drop entries.
    """
    await k8s.create(gizmo("crowded", namespace, size=1))
    key = ObjectKey(namespace, "crowded")
    mutate_calls = 0
    # Ten writers on one object is far beyond what a controller sees (its work
    # queue runs one reconcile per object at a time), so the retry budget is raised
    # from the default 16 (with twenty writers the worst call needed about 25 attempts).
    retry = RetryOptions(attempts=60)

    async def writer(w: int) -> None:
        nonlocal mutate_calls
        for i in range(ENTRIES):
            entry = f"w{w:02d}-{i:02d}"

            def append(obj: dict[str, Any], entry: str = entry) -> None:
                nonlocal mutate_calls
                mutate_calls += 1
                entries = obj.setdefault("status", {}).setdefault("entries", [])
                if entry not in entries:
                    entries.append(entry)

            result, _ = await update_status(k8s, (gizmo_crd, key), append, retry=retry)
            assert result is OperationResult.UPDATED

    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    final = await k8s.get(gizmo_crd, "crowded", namespace=namespace)
    entries = final["status"]["entries"]
    expected = {f"w{w:02d}-{i:02d}" for w in range(WRITERS) for i in range(ENTRIES)}
    assert len(entries) == WRITERS * ENTRIES
    assert set(entries) == expected
    # The writers really contended: many mutations ran again after a Conflict.
    assert mutate_calls > WRITERS * ENTRIES


async def test_conflict_rereads_and_reapplies_the_mutation(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """A status write that hits Conflict re-reads the object and re-runs the mutation on it.

    The mutation, on its first call, lets another writer change the status
    first, so the first write carries a stale resourceVersion and gets
    Conflict. The second call must see the other writer's phase (proof of
    the re-read), and the final status holds both changes.
    """
    created = await k8s.create(gizmo("raced", namespace, size=1))
    seen_phases: list[str | None] = []

    async def mutate(obj: dict[str, Any]) -> None:
        status = obj.setdefault("status", {})
        seen_phases.append(status.get("phase"))
        if len(seen_phases) == 1:
            await k8s.patch(
                gizmo_crd,
                "raced",
                MergePatch({"status": {"phase": "Busy"}}),
                namespace=namespace,
                subresource="status",
            )
        status["entries"] = ["mine"]

    result, written = await update_status(k8s, created, mutate)
    assert result is OperationResult.UPDATED
    assert seen_phases == [None, "Busy"]
    assert written["status"] == {"phase": "Busy", "entries": ["mine"]}


async def test_status_write_touches_only_status(
    k8s: Client,
    namespace: str,
    gizmo_crd: GroupVersionKind,
    counted: tuple[Client, RequestLog],
) -> None:
    """A status write sends only status, refuses spec changes, and skips writes that change nothing.

    A mutation that changes spec is refused before any request. A status
    write carrying a stale copy of the spec does not revert a spec change
    made meanwhile. Writing the same status twice sends one write, not two.
    """
    client, log = counted
    obj = await client.create(gizmo("scoped", namespace, size=1))

    def grow(o: dict[str, Any]) -> None:
        o["spec"]["size"] = 5

    log.clear()
    with pytest.raises(MutationScopeError, match="spec"):
        await update_status(client, obj, grow)
    assert log.requests == []

    # Someone changes the spec; our stale copy still says size=1.
    await k8s.patch(gizmo_crd, "scoped", MergePatch({"spec": {"size": 3}}), namespace=namespace)

    def ready(o: dict[str, Any]) -> None:
        o.setdefault("status", {})["phase"] = "Ready"

    result, written = await update_status(client, obj, ready)
    assert result is OperationResult.UPDATED
    assert written["spec"]["size"] == 3
    assert written["status"]["phase"] == "Ready"

    log.clear()
    result, again = await update_status(client, written, ready)
    assert result is OperationResult.UNCHANGED
    assert again is written
    assert log.requests == []


async def test_conditions_and_observed_generation(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """Conditions written by the status writer pass the server's metav1.Condition validation.

    lastTransitionTime moves only when the status flips; observedGeneration
    follows metadata.generation. A reason the helpers reject (not CamelCase)
    is rejected by the server's own schema too, so the local check matches
    the API's.
    """
    obj = await k8s.create(gizmo("conditioned", namespace, size=1))
    t0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

    def progressing(now: datetime, reason: str, status: bool):  # type: ignore[no-untyped-def]
        def mutate(o: dict[str, Any]) -> None:
            set_observed_generation(o)
            set_condition(
                o.setdefault("status", {}),
                "Ready",
                status,
                reason,
                "working on it",
                observed_generation=o["metadata"]["generation"],
                now=now,
            )

        return mutate

    _, first = await update_status(k8s, obj, progressing(t0, "Starting", False))
    assert first["status"]["observedGeneration"] == first["metadata"]["generation"]
    cond = find_condition(first["status"], "Ready")
    assert cond is not None and cond.last_transition_time == t0

    # Same status, new reason: the transition time stays.
    _, second = await update_status(
        k8s, first, progressing(t0 + timedelta(minutes=1), "StillStarting", False)
    )
    cond = find_condition(second["status"], "Ready")
    assert cond is not None
    assert (cond.reason, cond.last_transition_time) == ("StillStarting", t0)

    # Status flips: the transition time moves.
    t2 = t0 + timedelta(minutes=2)
    _, third = await update_status(k8s, second, progressing(t2, "Available", True))
    cond = find_condition(third["status"], "Ready")
    assert cond is not None and (cond.status, cond.last_transition_time) == ("True", t2)

    # The server's schema rejects the reason our validation rejects.
    raw = dict(third)
    raw["status"] = dict(third["status"])
    raw["status"]["conditions"] = [dict(third["status"]["conditions"][0], reason="not camel")]
    with pytest.raises(Invalid) as info:
        await k8s.replace_status(raw)
    assert any("reason" in c.field for c in info.value.causes)
    with pytest.raises(ValueError, match="CamelCase"):
        set_condition({}, "Ready", True, "not camel")


async def test_apply_status_with_a_field_manager(
    namespace: str,
    gizmo_crd: GroupVersionKind,
    counted: tuple[Client, RequestLog],
) -> None:
    """Server-side apply of status: applied once, then no request while it already holds.

    A second apply of the same status makes no write; when another writer
    changes the applied field, the next apply restores it.
    """
    client, log = counted
    await client.create(gizmo("applied-status", namespace, size=1))
    desired = {
        "apiVersion": gizmo_crd.api_version,
        "kind": "Gizmo",
        "metadata": {"name": "applied-status", "namespace": namespace},
        "status": {"phase": "Ready"},
    }
    result, written = await apply_status(client, desired, field_manager="gizmo-status")
    assert result is OperationResult.UPDATED
    assert written["status"]["phase"] == "Ready"

    log.clear()
    result, _ = await apply_status(client, desired, field_manager="gizmo-status")
    assert result is OperationResult.UNCHANGED
    assert log.writes() == []

    await client.patch(
        gizmo_crd,
        "applied-status",
        MergePatch({"status": {"phase": "Broken"}}),
        namespace=namespace,
        subresource="status",
        field_manager="someone-else",
    )
    result, restored = await apply_status(client, desired, field_manager="gizmo-status")
    assert result is OperationResult.UPDATED
    assert restored["status"]["phase"] == "Ready"


async def test_typed_objects_and_typed_conditions(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """Typed resources go through the status writer; typed conditions pass the server's schema.

    A typed Gizmo (the test kinds' own class) with a Condition-list status is read, given a Ready
    condition and observedGeneration by a mutation, and written through
    /status; the server's metav1.Condition schema accepts it and the typed
    object read back carries the same condition.
    """
    await k8s.create(gizmo("typed", namespace, size=2))
    typed = await k8s.get(Gizmo, "typed", namespace=namespace)

    def ready(obj: Gizmo) -> None:
        set_observed_generation(obj)
        assert obj.status is not None
        set_condition(obj.status, "Ready", True, "Reconciled", observed_generation=1)

    result, written = await update_status(k8s, typed, ready)
    assert result is OperationResult.UPDATED
    assert isinstance(written, Gizmo)
    again = await k8s.get(Gizmo, "typed", namespace=namespace)
    assert again.status is not None
    assert again.status.observed_generation == again.metadata.generation
    cond = again.status.conditions[0]
    assert (cond.type, cond.status, cond.reason, cond.message) == (
        "Ready",
        "True",
        "Reconciled",
        "",
    )
    result, _ = await update_status(k8s, again, ready)
    assert result is OperationResult.UNCHANGED
