"""Finalizer patches against a real API server: nobody's finalizer is ever dropped."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.client import Client, NotFound
from setpoint.client.safe import (
    FinalizerOutcome,
    add_finalizer,
    has_finalizer,
    remove_finalizer,
)
from setpoint.testing.waits import eventually
from tests._support.request_log import RequestLog

ROUNDS = 25


def cm(name: str, namespace: str, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


async def test_two_controllers_never_drop_each_others_finalizer(
    k8s: Client, namespace: str
) -> None:
    """Two controllers add and remove their own finalizers concurrently; neither loses its own.

    Each controller adds its finalizer, holds it for a few reads, and removes
    it, 25 times, while the other does the same on the same object. A watch
    records every version of the finalizer list. Every add must report ADDED
    and every remove REMOVED (a dropped finalizer would make the remove find
    it ALREADY_ABSENT), and every version between a controller's add and its
    remove must list its finalizer.
    """
    await k8s.create(cm("shared", namespace))
    key = ObjectKey(namespace, "shared")
    # resourceVersion -> finalizers at that version. Comparing resourceVersions as
    # integers is valid for this test's own etcd-backed server, not in general.
    versions: dict[int, list[str]] = {}
    holds: dict[str, list[tuple[int, int]]] = {"a.example.com/f": [], "b.example.com/f": []}
    first = await k8s.get(kinds.ConfigMap, "shared", namespace=namespace)
    watch = k8s.watch(
        kinds.ConfigMap,
        namespace=namespace,
        fields={"metadata.name": "shared"},
        resource_version=first["metadata"]["resourceVersion"],
    )

    async def record() -> None:
        async for event in watch:
            if event.type in ("ADDED", "MODIFIED"):
                versions[int(event.resource_version)] = list(
                    event.object["metadata"].get("finalizers") or []
                )

    recorder = asyncio.create_task(record())

    async def controller(finalizer: str) -> None:
        for _ in range(ROUNDS):
            outcome, obj = await add_finalizer(k8s, (kinds.ConfigMap, key), finalizer)
            assert outcome is FinalizerOutcome.ADDED, outcome
            added_at = int(obj["metadata"]["resourceVersion"])
            for _ in range(2):
                live = await k8s.get(kinds.ConfigMap, "shared", namespace=namespace)
                assert has_finalizer(live, finalizer)
            outcome, obj = await remove_finalizer(k8s, (kinds.ConfigMap, key), finalizer)
            assert outcome is FinalizerOutcome.REMOVED, outcome
            holds[finalizer].append((added_at, int(obj["metadata"]["resourceVersion"])))

    try:
        await asyncio.gather(*(controller(f) for f in holds))
        last = max(end for spans in holds.values() for _, end in spans)

        async def caught_up() -> bool:
            return max(versions, default=0) >= last

        await eventually(caught_up, timeout=30, description="watch saw the last write")
    finally:
        recorder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recorder
        await watch.aclose()

    checked = 0
    for finalizer, spans in holds.items():
        assert len(spans) == ROUNDS
        for start, end in spans:
            for rv, present in versions.items():
                if start <= rv < end:
                    assert finalizer in present, (finalizer, rv, present)
                    checked += 1
    # The two controllers really interleaved: versions written by the other one fall
    # inside each controller's holding spans.
    assert checked > 2 * ROUNDS
    assert (await k8s.get(kinds.ConfigMap, "shared", namespace=namespace))["metadata"].get(
        "finalizers"
    ) is None


async def test_no_finalizer_is_added_to_a_deleting_object(
    k8s: Client, namespace: str, counted: tuple[Client, RequestLog]
) -> None:
    """Adding a finalizer to an object being deleted is refused with DELETING; removal still works.

    Seen locally (deletionTimestamp set) the helper sends no request. Given a
    stale copy from before the delete, the server refuses the patch (422, no
    new finalizers on a deleting object); the helper re-reads and also
    answers DELETING. Removing the last finalizer lets the deletion finish;
    removing again answers GONE.
    """
    client, log = counted
    before = await client.create(cm("doomed", namespace, ["keep.example.com/f"]))
    await client.delete(kinds.ConfigMap, "doomed", namespace=namespace)
    deleting = await client.get(kinds.ConfigMap, "doomed", namespace=namespace)
    assert deleting["metadata"].get("deletionTimestamp")

    log.clear()
    outcome, obj = await add_finalizer(client, deleting, "late.example.com/f")
    assert outcome is FinalizerOutcome.DELETING
    assert obj is deleting
    assert log.requests == []

    # A stale copy without the deletionTimestamp: the server refuses, the helper re-reads.
    outcome, obj = await add_finalizer(client, before, "late.example.com/f")
    assert outcome is FinalizerOutcome.DELETING
    assert [m for m, _ in log.requests] == ["PATCH", "GET"]
    assert log.requests[0][1] == "422"
    assert obj["metadata"]["finalizers"] == ["keep.example.com/f"]

    outcome, _ = await remove_finalizer(client, deleting, "keep.example.com/f")
    assert outcome is FinalizerOutcome.REMOVED
    with pytest.raises(NotFound):
        await client.get(kinds.ConfigMap, "doomed", namespace=namespace)
    outcome, obj = await remove_finalizer(client, deleting, "keep.example.com/f")
    assert outcome is FinalizerOutcome.GONE
    assert obj is None


async def test_add_and_remove_are_idempotent(
    namespace: str, counted: tuple[Client, RequestLog]
) -> None:
    """Adding a present finalizer or removing an absent one sends no request.

    The first add creates the finalizers list (it was absent); a second add
    reports ALREADY_PRESENT without a request; other finalizers keep their
    order through the remove.
    """
    client, log = counted
    obj = await client.create(cm("idem", namespace, ["other.example.com/f"]))
    outcome, obj = await add_finalizer(client, obj, "mine.example.com/f")
    assert outcome is FinalizerOutcome.ADDED
    assert obj["metadata"]["finalizers"] == ["other.example.com/f", "mine.example.com/f"]
    log.clear()
    outcome, _ = await add_finalizer(client, obj, "mine.example.com/f")
    assert outcome is FinalizerOutcome.ALREADY_PRESENT
    assert log.requests == []
    outcome, obj = await remove_finalizer(client, obj, "mine.example.com/f")
    assert outcome is FinalizerOutcome.REMOVED
    assert obj["metadata"]["finalizers"] == ["other.example.com/f"]
    log.clear()
    outcome, _ = await remove_finalizer(client, obj, "mine.example.com/f")
    assert outcome is FinalizerOutcome.ALREADY_ABSENT
    assert log.requests == []

    bare = await client.create(cm("bare", namespace))
    outcome, bare = await add_finalizer(client, bare, "mine.example.com/f")
    assert outcome is FinalizerOutcome.ADDED
    assert bare["metadata"]["finalizers"] == ["mine.example.com/f"]
