"""Informer semantics over the fake client: list, watch, re-watch, relist, handlers.

The FakeClient keeps a revision counter and an event history like etcd, and its fault
rules fail or hold back requests, so the tests can break connections, compact history and
hold a re-watch back while they change objects, deterministically. The same semantics are
checked against a real API server in tests/integration/cache.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest

from setpoint.api.keys import ObjectKey
from setpoint.cache import (
    CacheError,
    CacheSyncTimeout,
    FuncHandler,
    Informer,
    InformerOptions,
    KindNotServed,
    keep_as_received,
)
from setpoint.cache.informer import strip_managed_fields
from setpoint.client.errors import ConnectionFailed, ServiceUnavailable, UnknownKind
from setpoint.testing import FakeClient, eventually
from tests._support.widgets import (
    CLUSTER_THING,
    WIDGET,
    WIDGET_CRD,
    connection_reset,
    fake_api,
    hold_next_watch,
    put,
    remove,
    widget,
)

FAST: dict[str, Any] = {"backoff_initial": 0.005, "backoff_max": 0.02}


@pytest.fixture(autouse=True, params=[True, False], ids=["streamed", "paginated"])
def streaming(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Every test runs twice: lists streamed through a watch, and paginated lists."""
    monkeypatch.setitem(FAST, "streaming_list", request.param)
    return bool(request.param)


def list_verb(streaming: bool) -> Literal["watch", "list"]:
    """The request an informer lists with: a watch (streamed) or a list."""
    return "watch" if streaming else "list"


class Recorder:
    """A handler that records every notification as a tuple."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_add(self, obj: dict[str, Any], *, is_initial_list: bool) -> None:
        self.events.append(("add", obj["metadata"]["name"], is_initial_list))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append(
            (
                "update",
                new["metadata"]["name"],
                old["metadata"]["resourceVersion"],
                new["metadata"]["resourceVersion"],
            )
        )

    def on_delete(self, obj: dict[str, Any], *, final_state_unknown: bool) -> None:
        self.events.append(("delete", obj["metadata"]["name"], final_state_unknown))

    def names(self, kind: str) -> list[str]:
        return [e[1] for e in self.events if e[0] == kind]


@pytest.fixture
async def api() -> FakeClient:
    return fake_api()


@contextlib.asynccontextmanager
async def running(api: FakeClient, **options: Any) -> AsyncIterator[Informer]:
    informer = Informer(api, WIDGET, InformerOptions(**{**FAST, **options}))
    await informer.start()
    try:
        yield informer
    finally:
        await informer.stop()


@pytest.fixture
async def informer(api: FakeClient) -> AsyncIterator[Informer]:
    async with running(api) as started:
        yield started


async def test_initial_list_is_delivered_as_initial_adds(api: FakeClient) -> None:
    await put(api, widget("a"))
    await put(api, widget("b"))
    recorder = Recorder()
    async with running(api) as informer:
        informer.add_handler(recorder)
        await informer.wait_for_sync(5)
        assert informer.synced
        assert sorted(recorder.events) == [("add", "a", True), ("add", "b", True)]
        assert {k.name for k in informer.store} == {"a", "b"}
        assert informer.resource_version == api.resource_version


async def test_watch_events_reach_handlers_after_the_store(
    informer: Informer, api: FakeClient
) -> None:
    seen_in_store: list[bool] = []
    recorder = Recorder()

    def check(obj: dict[str, Any], *_: Any) -> None:
        key = ObjectKey(obj["metadata"]["namespace"], obj["metadata"]["name"])
        seen_in_store.append(informer.store.get(key) is not None)

    informer.add_handler(recorder)
    informer.add_handler(FuncHandler(add=check))
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    first = await put(api, widget("a"))
    second = await put(api, widget("a", data={"v": 2}))
    await remove(api, ObjectKey("default", "a"))
    await eventually(lambda: len(recorder.events) == 3, timeout=5, description="3 events")
    assert recorder.events == [
        ("add", "a", False),
        (
            "update",
            "a",
            first["metadata"]["resourceVersion"],
            second["metadata"]["resourceVersion"],
        ),
        ("delete", "a", False),
    ]
    assert seen_in_store == [True]
    assert informer.store.get(ObjectKey("default", "a")) is None
    assert informer.resource_version == api.resource_version  # the DELETED event's version


async def test_bookmarks_advance_the_resource_version(informer: Informer, api: FakeClient) -> None:
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    bookmarks = informer.stats.bookmarks
    for i in range(7):  # writes to another kind: the revision moves on, no Widget events
        api.add(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm{i}", "namespace": "x"},
            }
        )
    api.send_bookmark()
    await eventually(
        lambda: informer.resource_version == api.resource_version, timeout=5, description="bookmark"
    )
    assert informer.stats.bookmarks == bookmarks + 1
    assert informer.stats.events == 0


async def test_dropped_connection_rewatches_from_last_version_without_relist(
    informer: Informer, api: FakeClient
) -> None:
    recorder = Recorder()
    informer.add_handler(recorder)
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    await put(api, widget("a"))
    await eventually(lambda: recorder.events, timeout=5, description="add seen")
    last = informer.resource_version

    gate, _ = hold_next_watch(api)  # hold the re-watch back while objects change
    api.break_watches(connection_reset())
    await eventually(
        lambda: (
            (api.faults.calls[-1].verb, api.faults.calls[-1].resource_version) == ("watch", last)
        ),
        timeout=5,
        description="re-watch from the last version issued",
    )
    await put(api, widget("b"))
    await put(api, widget("a", data={"v": 2}))
    gate.set()
    await eventually(lambda: len(recorder.events) == 3, timeout=5, description="changes seen")
    assert [e[:2] for e in recorder.events] == [("add", "a"), ("add", "b"), ("update", "a")]
    assert informer.stats.lists == 1
    assert informer.stats.relists == 0
    assert informer.stats.rewatches >= 1


async def test_gone_relists_and_reconciles_the_store(informer: Informer, api: FakeClient) -> None:
    """After 410 Gone, the relist emits deletes, updates and adds; never a duplicate add."""
    for name in ("keep", "change", "vanish"):
        await put(api, widget(name))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 3, timeout=5, description="3 stored")
    recorder = Recorder()
    informer.add_handler(recorder)
    recorder.events.clear()

    gate, _ = hold_next_watch(api)
    api.break_watches(connection_reset())
    await eventually(
        lambda: api.faults.calls[-1].verb == "watch", timeout=5, description="re-watch issued"
    )
    await put(api, widget("change", data={"v": 2}))
    await remove(api, ObjectKey("default", "vanish"))
    await put(api, widget("new"))
    api.compact()
    gate.set()

    await eventually(lambda: informer.stats.relists == 1, timeout=5, description="relist")
    await eventually(lambda: len(recorder.events) == 3, timeout=5, description="relist events")
    events = sorted(recorder.events, key=lambda e: e[1])
    assert events[0][:2] == ("update", "change")
    assert events[1] == ("add", "new", False)
    assert events[2] == ("delete", "vanish", True)
    assert recorder.names("add") == ["new"]
    assert {k.name for k in informer.store} == {"keep", "change", "new"}
    assert informer.stats.lists == 2
    # The watch resumes from the relist's version and keeps delivering.
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch reopened")
    await put(api, widget("after"))
    await eventually(lambda: ("add", "after", False) in recorder.events, timeout=5)


async def test_relist_reports_the_last_seen_state_for_vanished_objects(
    informer: Informer, api: FakeClient
) -> None:
    await put(api, widget("x", data={"v": "last-seen"}))
    deleted: list[dict[str, Any]] = []
    informer.add_handler(FuncHandler(delete=lambda obj, unknown: deleted.append(obj)))
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    gate, _ = hold_next_watch(api)
    api.break_watches(connection_reset())
    await eventually(lambda: api.faults.calls[-1].verb == "watch", timeout=5)
    await put(api, widget("x", data={"v": "never-seen"}))
    await remove(api, ObjectKey("default", "x"))
    api.compact()
    gate.set()
    await eventually(lambda: deleted, timeout=5, description="inferred delete")
    assert deleted[0]["data"] == {"v": "last-seen"}


async def test_handler_added_after_sync_gets_a_replay(informer: Informer, api: FakeClient) -> None:
    await put(api, widget("a"))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 1, timeout=5, description="stored")
    recorder = Recorder()
    registration = informer.add_handler(recorder)
    assert recorder.events == [("add", "a", True)]
    assert registration.synced
    registration.remove()
    registration.remove()
    await put(api, widget("b"))
    await eventually(lambda: "b" in {k.name for k in informer.store}, timeout=5)
    assert recorder.events == [("add", "a", True)]


async def test_a_failing_handler_does_not_stop_others(informer: Informer, api: FakeClient) -> None:
    def explode(obj: dict[str, Any], initial: bool) -> None:
        raise RuntimeError("handler bug")

    recorder = Recorder()
    informer.add_handler(FuncHandler(add=explode))
    informer.add_handler(recorder)
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5)
    await put(api, widget("a"))
    await put(api, widget("b"))
    await eventually(lambda: len(recorder.events) == 2, timeout=5, description="both adds")
    assert informer.failure() is None


def test_the_default_transform_strips_managed_fields() -> None:
    """The fake never sends managedFields (the server does: tests/integration/cache), so the
    default transform is checked on its own here."""
    assert InformerOptions().transform is strip_managed_fields
    obj = widget("a", metadata={"managedFields": [{"manager": "kubectl"}], "labels": {"x": "1"}})
    stripped = strip_managed_fields(obj)
    assert "managedFields" not in stripped["metadata"]
    assert stripped["metadata"]["labels"] == {"x": "1"}


async def test_custom_and_failing_transforms(api: FakeClient) -> None:
    await put(api, widget("a"))

    def add_marker(obj: dict[str, Any]) -> dict[str, Any]:
        obj["marker"] = True
        return obj

    async with running(api, transform=add_marker) as informer:
        await informer.wait_for_sync(5)
        stored = informer.store.get(ObjectKey("default", "a"))
        assert stored is not None and stored["marker"] is True

    def broken(obj: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("transform bug")

    async with running(api, transform=broken) as informer:
        await informer.wait_for_sync(5)
        assert informer.store.get(ObjectKey("default", "a")) is not None

    async with running(api, transform=keep_as_received) as informer:
        await informer.wait_for_sync(5)
        stored = informer.store.get(ObjectKey("default", "a"))
        assert stored == api.lookup(WIDGET, "a", namespace="default")


async def test_namespaces_get_one_list_and_watch_each(api: FakeClient, streaming: bool) -> None:
    for namespace in ("a", "b", "c"):
        await put(api, widget("w", namespace=namespace))
    async with running(api, namespaces=("a", "b")) as informer:
        await informer.wait_for_sync(5)
        assert sorted(str(k) for k in informer.store) == ["a/w", "b/w"]
        listed = api.faults.calls_to(list_verb(streaming))
        assert sorted(str(c.namespace) for c in listed) == ["a", "b"]
        assert informer.stats.streamed_lists == (2 if streaming else 0)
        assert informer.covers_namespace("a")
        assert not informer.covers_namespace("c")
        await eventually(lambda: api.active_watches == 2, timeout=5, description="two watches")
        await put(api, widget("x", namespace="c"))
        await put(api, widget("x", namespace="b"))
        await eventually(lambda: ObjectKey("b", "x") in informer.store, timeout=5)
        assert ObjectKey("c", "x") not in informer.store


async def test_cluster_scoped_kinds_ignore_namespaces(api: FakeClient, streaming: bool) -> None:
    thing = {"apiVersion": CLUSTER_THING.api_version, "kind": CLUSTER_THING.kind}
    await put(api, {**thing, "metadata": {"name": "t"}}, kind=CLUSTER_THING)
    informer = Informer(api, CLUSTER_THING, InformerOptions(namespaces=("a",), **FAST))
    await informer.start()
    try:
        await informer.wait_for_sync(5)
        assert informer.namespaced is False
        assert list(informer.store) == [ObjectKey("", "t")]
        assert [c.namespace for c in api.faults.calls_to(list_verb(streaming))] == [None]
    finally:
        await informer.stop()


async def test_label_selector_limits_what_is_stored(api: FakeClient) -> None:
    await put(api, widget("yes", metadata={"labels": {"app": "web"}}))
    await put(api, widget("no", metadata={"labels": {"app": "db"}}))
    async with running(api, labels="app=web") as informer:
        await informer.wait_for_sync(5)
        assert [k.name for k in informer.store] == ["yes"]
        assert informer.matches(widget("z", metadata={"labels": {"app": "web"}}))
        assert not informer.matches(widget("z"))


async def test_unknown_kind_fails_sync_at_once_then_recovers() -> None:
    api = fake_api(widgets=False)
    async with running(api) as informer:
        with pytest.raises(KindNotServed, match="Widget") as caught:
            await informer.wait_for_sync(30)
        assert isinstance(caught.value, UnknownKind)
        assert "CustomResourceDefinition" in str(caught.value)
        await api.create(WIDGET_CRD)  # the CRD gets installed
        await put(api, widget("a"))
        await eventually(lambda: informer.synced, timeout=5, description="synced after install")
        await informer.wait_for_sync(1)


async def test_sync_timeout_names_the_last_error(api: FakeClient) -> None:
    outage = api.faults.fail_next(
        ("list", "watch"), error=ServiceUnavailable("etcd is down", code=503), times=None
    )
    async with running(api) as informer:
        with pytest.raises(CacheSyncTimeout, match="etcd is down"):
            await informer.wait_for_sync(0.2)
        outage.remove()
        await informer.wait_for_sync(5)
        assert informer.stats.errors >= 1


async def test_transient_list_failures_are_retried(api: FakeClient) -> None:
    api.faults.fail_next(
        ("list", "watch"), error=ConnectionFailed("refused", url="https://fake"), times=3
    )
    await put(api, widget("a"))
    async with running(api) as informer:
        await informer.wait_for_sync(5)
        assert informer.stats.errors == 3
        assert len(informer.store) == 1


async def test_watch_errors_back_off_and_recover(informer: Informer, api: FakeClient) -> None:
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5)
    failing = api.faults.fail_next("watch", error=ServiceUnavailable("busy", code=503), times=3)
    api.break_watches(connection_reset())
    await eventually(lambda: failing.hits == 3, timeout=5, description="three re-watches failed")
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch reopened")
    assert informer.stats.errors >= 4
    assert informer.stats.relists == 0
    await put(api, widget("late"))
    await eventually(lambda: ObjectKey("default", "late") in informer.store, timeout=5)


async def test_periodic_resync_sends_updates_with_the_same_object(api: FakeClient) -> None:
    await put(api, widget("a"))
    recorder = Recorder()
    async with running(api, resync_period=0.02) as informer:
        informer.add_handler(recorder)
        await informer.wait_for_sync(5)
        await eventually(lambda: informer.stats.resyncs >= 2, timeout=5, description="resyncs")
        updates = [e for e in recorder.events if e[0] == "update"]
        assert updates
        assert all(e[2] == e[3] for e in updates)


async def test_index_is_maintained_by_events(informer: Informer, api: FakeClient) -> None:
    informer.add_index("color", lambda obj: obj.get("spec", {}).get("color"))
    await put(api, widget("a", spec={"color": "red"}))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 1, timeout=5, description="stored")
    assert informer.store.keys_by_index("color", "red") == {ObjectKey("default", "a")}
    await eventually(lambda: api.active_watches == 1, timeout=5)
    await put(api, widget("a", spec={"color": "blue"}))
    await eventually(
        lambda: informer.store.keys_by_index("color", "blue") == {ObjectKey("default", "a")},
        timeout=5,
    )
    assert informer.store.keys_by_index("color", "red") == set()


async def test_stop_is_idempotent_and_final(api: FakeClient) -> None:
    never_started = Informer(api, WIDGET, InformerOptions(**FAST))
    await never_started.stop()
    informer = Informer(api, WIDGET, InformerOptions(**FAST))
    await informer.start()
    await informer.wait_for_sync(5)
    assert informer.started
    await informer.stop()
    await informer.stop()
    assert not informer.started
    await eventually(lambda: api.active_watches == 0, timeout=5, description="watch closed")
    with pytest.raises(CacheError, match="stopped"):
        await informer.start()


async def test_waiting_for_an_unstarted_informer_is_an_error(api: FakeClient) -> None:
    informer = Informer(api, WIDGET)
    with pytest.raises(CacheError, match="not started"):
        await informer.wait_for_sync(1)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="empty name"):
        InformerOptions(namespaces=("",))
    with pytest.raises(ValueError, match="resync_period"):
        InformerOptions(resync_period=0)
    with pytest.raises(ValueError, match="backoff"):
        InformerOptions(backoff_initial=1, backoff_max=0.5)
    with pytest.raises(ValueError, match="label"):
        InformerOptions(labels="a in (")


async def test_the_store_keeps_objects_encoded_and_handlers_get_decoded_ones(
    api: FakeClient,
) -> None:
    """The store holds each object as JSON bytes (a third of the memory of its dicts); a
    handler's object and every read are decoded, and changing one does not reach the cache."""
    await put(api, widget("a", spec={"color": "red"}))
    received: list[dict[str, Any]] = []
    async with running(api) as informer:
        informer.add_handler(FuncHandler(add=lambda obj, initial: received.append(obj)))
        await informer.wait_for_sync(5)
        key = ObjectKey("default", "a")
        assert isinstance(informer.store.snapshot(key), bytes)
        assert received and received[0] == informer.store.get(key)
        received[0]["spec"]["color"] = "blue"
        stored = informer.store.get(key)
        assert stored is not None
        assert stored["spec"]["color"] == "red"
