"""Parity: watch event sequences."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from setpoint.api import kinds
from setpoint.client.patch import MergePatch
from setpoint.testing.waits import eventually

if TYPE_CHECKING:
    from tests._support.parity import Api


async def _collect(watch: Any, count: int, *, timeout: float = 10.0) -> list[tuple[str, Any]]:
    """Read events until ``count`` arrived (or the timeout passed), then close the watch."""
    events: list[tuple[str, Any]] = []
    try:
        async with asyncio.timeout(timeout):
            async for event in watch:
                events.append((event.type, event))
                if len(events) >= count:
                    break
    except TimeoutError:
        pass
    finally:
        await watch.aclose()
    return events


def _summary(events: list[tuple[str, Any]]) -> list[tuple[str, str | None]]:
    return [(kind, e.object["metadata"].get("name")) for kind, e in events]


async def test_watch_from_a_resource_version(api: Api) -> None:
    """A watch from a resourceVersion replays every later change in order.

    ADDED, MODIFIED (twice) and DELETED arrive with increasing
    resourceVersions; the DELETED event carries the object's last state at the
    deletion's own, newer resourceVersion. A no-op update makes no event.
    """
    c, ns = api.client, api.namespace
    start = (await c.create(api.cm("before")))["metadata"]["resourceVersion"]
    made = await c.create(dict(api.cm("w", labels={"seq": "yes"}), data={"v": "1"}))
    made["data"] = {"v": "2"}
    second = await c.update(made)
    await c.update(second)  # no-op: no event
    second["data"] = {"v": "3"}
    third = await c.update(second)
    await c.delete(kinds.ConfigMap, "w", namespace=ns)
    events = await _collect(
        c.watch(kinds.ConfigMap, namespace=ns, resource_version=start, labels="seq"), 4, timeout=5
    )
    assert _summary(events) == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]
    versions = [int(e.resource_version) for _, e in events]
    assert versions == sorted(versions) and len(set(versions)) == 4
    deleted = events[-1][1]
    assert deleted.object["data"] == {"v": "3"}
    assert int(deleted.resource_version) > int(third["metadata"]["resourceVersion"])
    assert deleted.object["metadata"]["resourceVersion"] == deleted.resource_version


async def test_watch_without_a_version_starts_with_the_current_state(api: Api) -> None:
    """A watch without resourceVersion starts with ADDED for what exists, then a BOOKMARK.

    The bookmark (annotated k8s.io/initial-events-end) carries the version the
    initial state was read at; later changes follow it.
    """
    c, ns = api.client, api.namespace
    await c.create(api.cm("old", labels={"watch": "initial"}))
    watch = c.watch(kinds.ConfigMap, namespace=ns, labels="watch=initial")
    events: list[tuple[str, Any]] = []

    async def consume() -> None:
        async for event in watch:
            events.append((event.type, event))
            if len(events) == 3:
                return

    task = asyncio.create_task(consume())

    async def bookmarked() -> bool:
        return any(kind == "BOOKMARK" for kind, _ in events)

    await eventually(bookmarked, timeout=10, description="initial-events bookmark")
    await c.create(api.cm("new", labels={"watch": "initial"}))
    await asyncio.wait_for(task, 10)
    await watch.aclose()
    assert [k for k, _ in events] == ["ADDED", "BOOKMARK", "ADDED"]
    assert events[0][1].object["metadata"]["name"] == "old"
    bookmark = events[1][1]
    assert bookmark.object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert events[2][1].object["metadata"]["name"] == "new"
    assert int(events[2][1].resource_version) > int(bookmark.resource_version)


async def test_label_selector_changes_become_added_and_deleted(api: Api) -> None:
    """For a selecting watch, an object leaving the selection is DELETED and one entering is ADDED.

    Changes outside the selection make no events; the real deletion of a
    selected object is DELETED.
    """
    c, ns = api.client, api.namespace
    start = (await c.create(api.cm("anchor")))["metadata"]["resourceVersion"]
    obj = await c.create(api.cm("mover", labels={"app": "x"}))
    for labels in ({"app": "y"}, {"other": "y"}, {"other": "z"}, {"app": "z"}):
        obj["metadata"]["labels"] = labels
        obj = await c.update(obj)
    await c.delete(kinds.ConfigMap, "mover", namespace=ns)

    exists = await _collect(
        c.watch(kinds.ConfigMap, namespace=ns, resource_version=start, labels="app"), 5, timeout=5
    )
    assert [k for k, _ in exists] == ["ADDED", "MODIFIED", "DELETED", "ADDED", "DELETED"]
    equal = await _collect(
        c.watch(kinds.ConfigMap, namespace=ns, resource_version=start, labels="app=x"),
        2,
        timeout=5,
    )
    assert [k for k, _ in equal] == ["ADDED", "DELETED"]
    # Leaving the selection: the previous (matching) content at the new version.
    left = equal[1][1]
    assert left.object["metadata"]["labels"] == {"app": "x"}
    assert int(left.resource_version) > int(equal[0][1].resource_version)
    assert left.object["metadata"]["resourceVersion"] == left.resource_version
    by_name = await _collect(
        c.watch(
            kinds.ConfigMap, namespace=ns, resource_version=start, fields="metadata.name=mover"
        ),
        6,
        timeout=5,
    )
    assert [k for k, _ in by_name] == [
        "ADDED",
        "MODIFIED",
        "MODIFIED",
        "MODIFIED",
        "MODIFIED",
        "DELETED",
    ]


async def test_finalizer_release_events(crds: Api) -> None:
    """Deleting an object with a finalizer is MODIFIED; releasing the finalizer is DELETED.

    The DELETED event shows the last stored state (finalizer still listed) at a
    newer resourceVersion than the one the releasing patch returned.
    """
    c, ns = crds.client, crds.namespace
    made = await c.create(
        crds.obj(crds.gizmo, "fin", metadata={"finalizers": ["parity.setpoint.dev/x"]}, spec={})
    )
    await c.delete(crds.gizmo, "fin", namespace=ns)
    released = await c.patch(
        crds.gizmo, "fin", MergePatch({"metadata": {"finalizers": None}}), namespace=ns
    )
    events = await _collect(
        c.watch(crds.gizmo, namespace=ns, resource_version=made["metadata"]["resourceVersion"]),
        2,
        timeout=5,
    )
    assert [k for k, _ in events] == ["MODIFIED", "DELETED"]
    marked, deleted = events[0][1], events[1][1]
    assert marked.object["metadata"]["deletionTimestamp"]
    assert deleted.object["metadata"]["finalizers"] == ["parity.setpoint.dev/x"]
    assert marked.resource_version == released["metadata"]["resourceVersion"]
    assert int(deleted.resource_version) > int(released["metadata"]["resourceVersion"])
