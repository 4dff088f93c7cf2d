"""FakeClient watches: replay, initial events, selectors, bookmarks, expiry and endings."""

import asyncio
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.declaration import resource
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.resource import Model, Resource
from setpoint.client.errors import BadRequest, ConnectionFailed, Expired, Gone, UnknownKind
from setpoint.testing.fake import FakeClient, FakeOptions
from setpoint.testing.waits import eventually
from tests._support.stored import stored


def cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
    }


async def drain(watch: Any, count: int) -> list[Any]:
    """Take ``count`` events (failing after a second if they do not come), then close."""
    events = []
    async with asyncio.timeout(1):
        async for event in watch:
            events.append(event)
            if len(events) == count:
                break
    await watch.aclose()
    return events


async def test_replay_from_a_resource_version() -> None:
    fake = FakeClient()
    start = (await fake.create(cm("before")))["metadata"]["resourceVersion"]
    made = await fake.create(cm("w"))
    made["data"] = {"v": "1"}
    await fake.update(made)
    await fake.delete(kinds.ConfigMap, "w", namespace="ns")
    watch = fake.watch(kinds.ConfigMap, namespace="ns", resource_version=start)
    events = await drain(watch, 3)
    assert [(e.type, e.resource_version) for e in events] == [
        ("ADDED", "2"),
        ("MODIFIED", "3"),
        ("DELETED", "4"),
    ]
    assert events[2].object["data"] == {"v": "1"}
    assert watch.resource_version == "4"
    assert fake.active_watches == 0


async def test_initial_events_then_live_changes() -> None:
    fake = FakeClient()
    await fake.create(cm("old", app="x"))
    await fake.create(cm("other", app="y"))
    watch = fake.watch(kinds.ConfigMap, labels="app=x")
    events: list[Any] = []

    async def consume() -> None:
        async for event in watch:
            events.append(event)

    task = asyncio.create_task(consume())
    await eventually(
        lambda: len(events) == 2, timeout=1, interval=0.001, description="initial events"
    )
    assert [e.type for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1].object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert events[1].resource_version == "2"
    await fake.create(cm("new", app="x"))
    await eventually(lambda: len(events) == 3, timeout=1, interval=0.001, description="live event")
    assert events[2].object["metadata"]["name"] == "new"
    fake.send_bookmark()
    await eventually(lambda: len(events) == 4, timeout=1, interval=0.001, description="bookmark")
    assert events[3].type == "BOOKMARK" and events[3].resource_version == "3"
    assert "annotations" not in events[3].object["metadata"]
    await watch.aclose()  # from another task than the one iterating
    await asyncio.wait_for(task, 1)
    assert fake.active_watches == 0


async def test_no_bookmarks_when_not_allowed() -> None:
    fake = FakeClient()
    await fake.create(cm("a"))
    watch = fake.watch(kinds.ConfigMap, allow_bookmarks=False, resource_version="0")
    first = await watch.__anext__()
    fake.send_bookmark()
    await fake.create(cm("b"))
    second = await watch.__anext__()
    await watch.aclose()
    assert [first.type, second.type] == ["ADDED", "ADDED"]


async def test_selector_transitions() -> None:
    fake = FakeClient()
    start = (await fake.create(cm("anchor")))["metadata"]["resourceVersion"]
    obj = await fake.create(cm("m", app="x"))
    for labels in ({"app": "y"}, {"other": "1"}, {"app": "z"}):
        obj["metadata"]["labels"] = labels
        obj = await fake.update(obj)
    await fake.delete(kinds.ConfigMap, "m", namespace="ns")
    events = await drain(fake.watch(kinds.ConfigMap, resource_version=start, labels="app"), 5)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED", "ADDED", "DELETED"]
    left = events[2]
    assert left.object["metadata"]["labels"] == {"app": "y"}  # the content that matched
    assert left.object["metadata"]["resourceVersion"] == left.resource_version == "4"
    names = await drain(
        fake.watch(kinds.ConfigMap, resource_version=start, fields="metadata.name=m"), 5
    )
    assert [e.type for e in names] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]


async def test_namespace_and_kind_filtering() -> None:
    fake = FakeClient()
    await fake.create({**cm("a"), "metadata": {"name": "a", "namespace": "elsewhere"}})
    await fake.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}}
    )
    await fake.create(cm("b"))
    events = await drain(fake.watch(kinds.ConfigMap, namespace="ns", resource_version="1"), 1)
    assert [e.object["metadata"]["name"] for e in events] == ["b"]


class GadgetSpec(Model):
    """Desired gadget."""

    size: int = 1
    """How big."""


@resource(group="watch.setpoint.dev", version="v1")
class Gadget(Resource):
    """A typed custom resource."""

    spec: GadgetSpec


async def test_typed_watch_decodes_objects() -> None:
    fake = FakeClient()
    await fake.create(Gadget(metadata={"name": "g", "namespace": "ns"}, spec=GadgetSpec(size=2)))
    events = await drain(fake.watch(Gadget, namespace="ns"), 2)
    assert isinstance(events[0].object, Gadget)
    assert events[0].object.spec.size == 2
    assert events[1].type == "BOOKMARK" and isinstance(events[1].object, dict)


async def test_compacted_versions_expire() -> None:
    fake = FakeClient()
    await fake.create(cm("a"))
    await fake.create(cm("b"))
    fake.compact()
    with pytest.raises(Expired, match="too old resource version: 1"):
        await drain(fake.watch(kinds.ConfigMap, resource_version="1"), 1)
    with pytest.raises(Expired):
        await fake.list_page(kinds.ConfigMap, resource_version="1", resource_version_match="Exact")
    watch = fake.watch(kinds.ConfigMap, resource_version=fake.resource_version)
    await fake.create(cm("c"))
    assert [e.object["metadata"]["name"] for e in await drain(watch, 1)] == ["c"]


async def test_history_limit_compacts_old_events() -> None:
    fake = FakeClient(options=FakeOptions(history=2))
    for name in "abcd":
        await fake.create(cm(name))
    with pytest.raises(Gone):
        await drain(fake.watch(kinds.ConfigMap, resource_version="1"), 1)
    recent = await drain(fake.watch(kinds.ConfigMap, resource_version="2"), 2)
    assert [e.object["metadata"]["name"] for e in recent] == ["c", "d"]


async def test_continue_token_expires_after_compaction() -> None:
    fake = FakeClient()
    for name in "abc":
        await fake.create(cm(name))
    page = await fake.list_page(kinds.ConfigMap, limit=1)
    await fake.create(cm("d"))
    fake.compact()
    with pytest.raises(Expired, match="continue parameter is too old"):
        await fake.list_page(kinds.ConfigMap, continue_token=page.continue_token)


async def test_endings_and_breaks() -> None:
    fake = FakeClient()
    ended = fake.watch(kinds.ConfigMap, resource_version="0")
    broken = fake.watch(kinds.ConfigMap, resource_version="0")
    custom = fake.watch(kinds.ConfigMap, resource_version="0")
    assert (await ended.__anext__()).type == "BOOKMARK"
    assert (await broken.__anext__()).type == "BOOKMARK"
    assert (await custom.__anext__()).type == "BOOKMARK"
    fake.end_watches()
    with pytest.raises(StopAsyncIteration):
        await ended.__anext__()
    with pytest.raises(StopAsyncIteration):
        await broken.__anext__()
    with pytest.raises(StopAsyncIteration):
        await custom.__anext__()

    again = fake.watch(kinds.ConfigMap, resource_version="0")
    other = fake.watch(kinds.ConfigMap, resource_version="0")
    await again.__anext__()
    await other.__anext__()
    fake.break_watches()
    with pytest.raises(Expired):
        await again.__anext__()
    await other.aclose()
    last = fake.watch(kinds.ConfigMap, resource_version="0")
    await last.__anext__()
    fake.break_watches(ConnectionFailed("gone", url="fake://"))
    with pytest.raises(ConnectionFailed):
        await last.__anext__()
    async with fake.watch(kinds.ConfigMap) as closing:
        await closing.__anext__()
        assert fake.active_watches == 1
    assert fake.active_watches == 0
    with pytest.raises(StopAsyncIteration):
        await closing.__anext__()


async def test_timeout_seconds_ends_the_watch() -> None:
    fake = FakeClient()
    await fake.create(cm("a"))
    watch = fake.watch(kinds.ConfigMap, allow_bookmarks=False, timeout_seconds=0.01)
    assert (await watch.__anext__()).type == "ADDED"
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(watch.__anext__(), 1)


async def test_watch_errors() -> None:
    fake = FakeClient()
    with pytest.raises(BadRequest):
        await drain(fake.watch(kinds.ConfigMap, labels="bad selector!"), 1)
    with pytest.raises(BadRequest):
        await drain(fake.watch(kinds.ConfigMap, resource_version="abc"), 1)
    with pytest.raises(UnknownKind):
        await drain(fake.watch(GroupVersionKind("x.example.com", "v1", "X")), 1)
    assert fake.active_watches == 0


# -- a lagging watch stream, opaque resourceVersions, what a watch asked for -----------------


async def test_held_watch_events_arrive_in_order_on_release() -> None:
    fake = FakeClient()
    start = (await fake.create(cm("before")))["metadata"]["resourceVersion"]
    watch = fake.watch(kinds.ConfigMap, namespace="ns", resource_version=start)
    first = asyncio.ensure_future(watch.__anext__())
    await eventually(lambda: fake.active_watches == 1, timeout=1)
    fake.hold_watch_events()
    made = await fake.create(cm("a"))
    made["data"] = {"v": "2"}
    await fake.update(made)
    fake.send_bookmark()
    # The writes happened: reads see them; the watch has not.
    assert stored(fake, kinds.ConfigMap, "a", namespace="ns")["data"] == {"v": "2"}
    await asyncio.sleep(0)
    assert not first.done()
    fake.release_watch_events()
    events = [await asyncio.wait_for(first, 1), *await drain(watch, 2)]
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "BOOKMARK"]
    assert events[2].resource_version == fake.resource_version


async def test_breaking_a_watch_is_not_held() -> None:
    fake = FakeClient()
    await fake.create(cm("before"))
    watch = fake.watch(kinds.ConfigMap, namespace="ns", resource_version=fake.resource_version)
    pending = asyncio.ensure_future(watch.__anext__())
    await eventually(lambda: fake.active_watches == 1, timeout=1)
    fake.hold_watch_events()
    await fake.create(cm("held"))
    fake.break_watches(ConnectionFailed("reset", url="https://fake"))
    with pytest.raises(ConnectionFailed):
        await asyncio.wait_for(pending, 1)
    fake.release_watch_events()  # the broken watch gets nothing more
    assert fake.active_watches == 0


async def test_a_resource_version_prefix_makes_versions_opaque() -> None:
    fake = FakeClient(options=FakeOptions(resource_version_prefix="v"))
    made = await fake.create(cm("a"))
    rv = made["metadata"]["resourceVersion"]
    assert rv.startswith("v") and rv[1:].isdigit()
    assert fake.resource_version == rv
    listing = await fake.list(kinds.ConfigMap, namespace="ns")
    assert listing.resource_version == rv
    made["data"] = {"v": "2"}
    updated = await fake.update(made)  # the version it issued is accepted back
    watch = fake.watch(kinds.ConfigMap, namespace="ns", resource_version=rv)
    [event] = await drain(watch, 1)
    assert event.resource_version == updated["metadata"]["resourceVersion"]
    with pytest.raises(BadRequest):
        await fake.list_page(kinds.ConfigMap, namespace="ns", resource_version="17")


def test_the_resource_version_prefix_is_validated() -> None:
    with pytest.raises(ValueError, match="letters only"):
        FakeOptions(resource_version_prefix="v1")


async def test_calls_record_where_a_list_or_watch_starts() -> None:
    fake = FakeClient()
    await fake.create(cm("a"))
    rv = fake.resource_version
    await fake.list(kinds.ConfigMap, namespace="ns", resource_version=rv)
    await drain(fake.watch(kinds.ConfigMap, namespace="ns", resource_version="0"), 1)
    list_call, watch_call = fake.faults.calls_to("list")[0], fake.faults.calls_to("watch")[0]
    assert (list_call.namespace, list_call.resource_version) == ("ns", rv)
    assert watch_call.resource_version == "0"
