"""Informer semantics against a scripted API: list, watch, re-watch, relist, handlers.

The fake API (fakeapi.py) keeps a revision counter and an event history like etcd, so the
tests can break connections, compact history and hold a re-watch back while they change
objects, deterministically. The same semantics are checked against a real API server in
tests/integration/cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

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
from setpoint.client.errors import ConnectionFailed, ServiceUnavailable, UnknownKind
from setpoint.testing import eventually
from tests._support.cache_fakeapi import CLUSTER_THING, WIDGET, FakeApi, widget

FAST = {"backoff_initial": 0.005, "backoff_max": 0.02}


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
async def api() -> FakeApi:
    return FakeApi()


@contextlib.asynccontextmanager
async def running(api: FakeApi, **options: Any) -> AsyncIterator[Informer]:
    informer = Informer(api, WIDGET, InformerOptions(**{**FAST, **options}))  # type: ignore[arg-type]
    await informer.start()
    try:
        yield informer
    finally:
        await informer.stop()


@pytest.fixture
async def informer(api: FakeApi) -> AsyncIterator[Informer]:
    async with running(api) as started:
        yield started


async def test_initial_list_is_delivered_as_initial_adds(api: FakeApi) -> None:
    api.put(widget("a"))
    api.put(widget("b"))
    recorder = Recorder()
    async with running(api) as informer:
        informer.add_handler(recorder)
        await informer.wait_for_sync(5)
        assert informer.synced
        assert sorted(recorder.events) == [("add", "a", True), ("add", "b", True)]
        assert {k.name for k in informer.store} == {"a", "b"}
        assert informer.resource_version == str(api.revision)


async def test_watch_events_reach_handlers_after_the_store(
    informer: Informer, api: FakeApi
) -> None:
    seen_in_store: list[bool] = []
    recorder = Recorder()

    def check(obj: dict[str, Any], *_: Any) -> None:
        key = ObjectKey(obj["metadata"]["namespace"], obj["metadata"]["name"])
        seen_in_store.append(informer.store.get(key) is not None)

    informer.add_handler(recorder)
    informer.add_handler(FuncHandler(add=check))
    await informer.wait_for_sync(5)
    await eventually(lambda: api.open_watches == 1, timeout=5, description="watch open")
    first = api.put(widget("a"))
    second = api.put(widget("a", data={"v": 2}))
    removed = api.remove(ObjectKey("default", "a"))
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
    assert informer.resource_version == removed["metadata"]["resourceVersion"]


async def test_bookmarks_advance_the_resource_version(informer: Informer, api: FakeApi) -> None:
    await informer.wait_for_sync(5)
    await eventually(lambda: api.open_watches == 1, timeout=5, description="watch open")
    api.advance(7)
    api.bookmark()
    await eventually(
        lambda: informer.resource_version == str(api.revision), timeout=5, description="bookmark"
    )
    assert informer.stats.bookmarks == 1
    assert informer.stats.events == 0


async def test_dropped_connection_rewatches_from_last_version_without_relist(
    informer: Informer, api: FakeApi
) -> None:
    recorder = Recorder()
    informer.add_handler(recorder)
    await informer.wait_for_sync(5)
    await eventually(lambda: api.open_watches == 1, timeout=5, description="watch open")
    api.put(widget("a"))
    await eventually(lambda: recorder.events, timeout=5, description="add seen")
    last = informer.resource_version

    api.watch_gate = asyncio.Event()  # hold the re-watch back while objects change
    api.break_watches()
    await eventually(
        lambda: api.calls[-1] == f"watch None {last}", timeout=5, description="re-watch issued"
    )
    api.put(widget("b"))
    api.put(widget("a", data={"v": 2}))
    api.watch_gate.set()
    await eventually(lambda: len(recorder.events) == 3, timeout=5, description="changes seen")
    assert [e[:2] for e in recorder.events] == [("add", "a"), ("add", "b"), ("update", "a")]
    assert informer.stats.lists == 1
    assert informer.stats.relists == 0
    assert informer.stats.rewatches >= 1


async def test_gone_relists_and_reconciles_the_store(informer: Informer, api: FakeApi) -> None:
    """After 410 Gone, the relist emits deletes, updates and adds; never a duplicate add."""
    for name in ("keep", "change", "vanish"):
        api.put(widget(name))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 3, timeout=5, description="3 stored")
    recorder = Recorder()
    informer.add_handler(recorder)
    recorder.events.clear()

    api.watch_gate = asyncio.Event()
    api.break_watches()
    await eventually(
        lambda: api.calls[-1].startswith("watch"), timeout=5, description="re-watch issued"
    )
    api.put(widget("change", data={"v": 2}))
    api.remove(ObjectKey("default", "vanish"))
    api.put(widget("new"))
    api.compact()
    api.watch_gate.set()

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
    await eventually(lambda: api.open_watches == 1, timeout=5, description="watch reopened")
    api.put(widget("after"))
    await eventually(lambda: ("add", "after", False) in recorder.events, timeout=5)


async def test_relist_reports_the_last_seen_state_for_vanished_objects(
    informer: Informer, api: FakeApi
) -> None:
    api.put(widget("x", data={"v": "last-seen"}))
    deleted: list[dict[str, Any]] = []
    informer.add_handler(FuncHandler(delete=lambda obj, unknown: deleted.append(obj)))
    await informer.wait_for_sync(5)
    await eventually(lambda: api.open_watches == 1, timeout=5, description="watch open")
    api.watch_gate = asyncio.Event()
    api.break_watches()
    await eventually(lambda: api.calls[-1].startswith("watch"), timeout=5)
    api.put(widget("x", data={"v": "never-seen"}))
    api.remove(ObjectKey("default", "x"))
    api.compact()
    api.watch_gate.set()
    await eventually(lambda: deleted, timeout=5, description="inferred delete")
    assert deleted[0]["data"] == {"v": "last-seen"}


async def test_handler_added_after_sync_gets_a_replay(informer: Informer, api: FakeApi) -> None:
    api.put(widget("a"))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 1, timeout=5, description="stored")
    recorder = Recorder()
    registration = informer.add_handler(recorder)
    assert recorder.events == [("add", "a", True)]
    assert registration.synced
    registration.remove()
    registration.remove()
    api.put(widget("b"))
    await eventually(lambda: "b" in {k.name for k in informer.store}, timeout=5)
    assert recorder.events == [("add", "a", True)]


async def test_a_failing_handler_does_not_stop_others(informer: Informer, api: FakeApi) -> None:
    def explode(obj: dict[str, Any], initial: bool) -> None:
        raise RuntimeError("handler bug")

    recorder = Recorder()
    informer.add_handler(FuncHandler(add=explode))
    informer.add_handler(recorder)
    await informer.wait_for_sync(5)
    await eventually(lambda: api.open_watches == 1, timeout=5)
    api.put(widget("a"))
    api.put(widget("b"))
    await eventually(lambda: len(recorder.events) == 2, timeout=5, description="both adds")
    assert informer.failure() is None


async def test_default_transform_strips_managed_fields(informer: Informer, api: FakeApi) -> None:
    api.put(widget("a", metadata={"managedFields": [{"manager": "kubectl"}], "labels": {"x": "1"}}))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 1, timeout=5, description="stored")
    stored = informer.store.get(ObjectKey("default", "a"))
    assert stored is not None
    assert "managedFields" not in stored["metadata"]
    assert stored["metadata"]["labels"] == {"x": "1"}


async def test_custom_and_failing_transforms(api: FakeApi) -> None:
    api.put(widget("a", metadata={"managedFields": [{"manager": "m"}]}))

    def add_marker(obj: dict[str, Any]) -> dict[str, Any]:
        obj["marker"] = True
        return obj

    async with running(api, transform=add_marker) as informer:
        await informer.wait_for_sync(5)
        stored = informer.store.get(ObjectKey("default", "a"))
        assert stored is not None and stored["marker"] is True
        assert stored["metadata"]["managedFields"] == [{"manager": "m"}]

    def broken(obj: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("transform bug")

    async with running(api, transform=broken) as informer:
        await informer.wait_for_sync(5)
        assert informer.store.get(ObjectKey("default", "a")) is not None

    async with running(api, transform=keep_as_received) as informer:
        await informer.wait_for_sync(5)
        stored = informer.store.get(ObjectKey("default", "a"))
        assert stored is not None and "managedFields" in stored["metadata"]


async def test_namespaces_get_one_list_and_watch_each(api: FakeApi) -> None:
    for namespace in ("a", "b", "c"):
        api.put(widget("w", namespace=namespace))
    async with running(api, namespaces=("a", "b")) as informer:
        await informer.wait_for_sync(5)
        assert sorted(str(k) for k in informer.store) == ["a/w", "b/w"]
        assert sorted(c for c in api.calls if c.startswith("list")) == ["list a", "list b"]
        assert informer.covers_namespace("a")
        assert not informer.covers_namespace("c")
        await eventually(lambda: api.open_watches == 2, timeout=5, description="two watches")
        api.put(widget("x", namespace="c"))
        api.put(widget("x", namespace="b"))
        await eventually(lambda: ObjectKey("b", "x") in informer.store, timeout=5)
        assert ObjectKey("c", "x") not in informer.store


async def test_cluster_scoped_kinds_ignore_namespaces(api: FakeApi) -> None:
    api.put({"apiVersion": CLUSTER_THING.api_version, "kind": "ClusterThing",
             "metadata": {"name": "t"}}, kind=CLUSTER_THING)  # fmt: skip
    informer = Informer(api, CLUSTER_THING, InformerOptions(namespaces=("a",), **FAST))  # type: ignore[arg-type]
    await informer.start()
    try:
        await informer.wait_for_sync(5)
        assert informer.namespaced is False
        assert list(informer.store) == [ObjectKey("", "t")]
        assert "list None" in api.calls
    finally:
        await informer.stop()


async def test_label_selector_limits_what_is_stored(api: FakeApi) -> None:
    api.put(widget("yes", metadata={"labels": {"app": "web"}}))
    api.put(widget("no", metadata={"labels": {"app": "db"}}))
    async with running(api, labels="app=web") as informer:
        await informer.wait_for_sync(5)
        assert [k.name for k in informer.store] == ["yes"]
        assert informer.matches(widget("z", metadata={"labels": {"app": "web"}}))
        assert not informer.matches(widget("z"))


async def test_unknown_kind_fails_sync_at_once_then_recovers(api: FakeApi) -> None:
    del api.kinds[WIDGET]
    async with running(api) as informer:
        with pytest.raises(KindNotServed, match="Widget") as caught:
            await informer.wait_for_sync(30)
        assert isinstance(caught.value, UnknownKind)
        assert "CustomResourceDefinition" in str(caught.value)
        api.kinds[WIDGET] = True  # the CRD gets installed
        api.put(widget("a"))
        await eventually(lambda: informer.synced, timeout=5, description="synced after install")
        await informer.wait_for_sync(1)


async def test_sync_timeout_names_the_last_error(api: FakeApi) -> None:
    api.list_failures = [ServiceUnavailable("etcd is down", code=503)] * 1000
    async with running(api) as informer:
        with pytest.raises(CacheSyncTimeout, match="etcd is down"):
            await informer.wait_for_sync(0.2)
        api.list_failures.clear()
        await informer.wait_for_sync(5)
        assert informer.stats.errors >= 1


async def test_transient_list_failures_are_retried(api: FakeApi) -> None:
    api.list_failures = [ConnectionFailed("refused", url="https://fake")] * 3
    api.put(widget("a"))
    async with running(api) as informer:
        await informer.wait_for_sync(5)
        assert informer.stats.errors == 3
        assert len(informer.store) == 1


async def test_watch_errors_back_off_and_recover(informer: Informer, api: FakeApi) -> None:
    await informer.wait_for_sync(5)
    await eventually(lambda: api.open_watches == 1, timeout=5)
    api.watch_failures = [ServiceUnavailable("busy", code=503)] * 3
    api.break_watches()
    await eventually(lambda: api.open_watches == 1, timeout=5, description="watch reopened")
    assert informer.stats.errors >= 4
    assert informer.stats.relists == 0
    api.put(widget("late"))
    await eventually(lambda: ObjectKey("default", "late") in informer.store, timeout=5)


async def test_periodic_resync_sends_updates_with_the_same_object(api: FakeApi) -> None:
    api.put(widget("a"))
    recorder = Recorder()
    async with running(api, resync_period=0.02) as informer:
        informer.add_handler(recorder)
        await informer.wait_for_sync(5)
        await eventually(lambda: informer.stats.resyncs >= 2, timeout=5, description="resyncs")
        updates = [e for e in recorder.events if e[0] == "update"]
        assert updates
        assert all(e[2] == e[3] for e in updates)


async def test_index_is_maintained_by_events(informer: Informer, api: FakeApi) -> None:
    informer.add_index("color", lambda obj: obj.get("spec", {}).get("color"))
    api.put(widget("a", spec={"color": "red"}))
    await informer.wait_for_sync(5)
    await eventually(lambda: len(informer.store) == 1, timeout=5, description="stored")
    assert informer.store.keys_by_index("color", "red") == {ObjectKey("default", "a")}
    await eventually(lambda: api.open_watches == 1, timeout=5)
    api.put(widget("a", spec={"color": "blue"}))
    await eventually(
        lambda: informer.store.keys_by_index("color", "blue") == {ObjectKey("default", "a")},
        timeout=5,
    )
    assert informer.store.keys_by_index("color", "red") == set()


async def test_stop_is_idempotent_and_final(api: FakeApi) -> None:
    never_started = Informer(api, WIDGET, InformerOptions(**FAST))  # type: ignore[arg-type]
    await never_started.stop()
    informer = Informer(api, WIDGET, InformerOptions(**FAST))  # type: ignore[arg-type]
    await informer.start()
    await informer.wait_for_sync(5)
    assert informer.started
    await informer.stop()
    await informer.stop()
    assert not informer.started
    await eventually(lambda: api.open_watches == 0, timeout=5, description="watch closed")
    with pytest.raises(CacheError, match="stopped"):
        await informer.start()


async def test_waiting_for_an_unstarted_informer_is_an_error(api: FakeApi) -> None:
    informer = Informer(api, WIDGET)  # type: ignore[arg-type]
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
