"""Read-after-write: readers wait for this process's own writes; the tracking client records them.

The fake client can hold watch events back (``hold_watch_events``/``release_watch_events``),
which is exactly a lagging cache: the write has happened on the server, the informer has not
seen it yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.cache import (
    Cache,
    ConsistentReader,
    Informer,
    InformerOptions,
    ReadAfterWriteTimeout,
    TrackingClient,
)
from setpoint.cache.consistency import ExpectedWrite
from setpoint.client import Client
from setpoint.client import _apply as apply_module
from setpoint.client.config import ClientConfig
from setpoint.client.errors import NotFound
from setpoint.client.patch import MergePatch
from setpoint.client.protocols import Reader, StatusWriter, Writer
from setpoint.client.safe import OperationResult, apply_child
from setpoint.client.transport import Response
from setpoint.testing import FakeClient, eventually
from tests._support.stored import stored as stored_in
from tests._support.virtual_time import settle
from tests._support.widgets import (
    WIDGET,
    connection_reset,
    fake_api,
    hold_next_watch,
    put,
    remove,
    widget,
)

KEY = ObjectKey("default", "a")


def expected(informer: Informer, key: ObjectKey) -> ExpectedWrite:
    write = informer.expectations.get(key)
    assert write is not None, f"no write of {key} recorded"
    return write


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    await put(fake, widget("a", data={"v": 1}))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    c.informer(WIDGET)
    await c.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    try:
        yield c
    finally:
        await c.stop(5)


async def test_a_read_waits_for_the_cache_to_catch_up_with_our_write(
    cache: Cache, api: FakeClient
) -> None:
    reader = cache.reader(read_after_write_timeout=5)
    api.hold_watch_events()
    written = await put(api, widget("a", data={"v": 2}))
    cache.expect_written(WIDGET, written)

    pending = asyncio.create_task(reader.get(WIDGET, "a", namespace="default"))
    await settle()
    assert not pending.done()
    # Without the wait, the cache hands out the version before our write: the stale read.
    stale = await cache.get(WIDGET, "a", namespace="default")
    assert stale["data"] == {"v": 1}

    api.release_watch_events()
    fresh = await asyncio.wait_for(pending, 5)
    assert fresh["data"] == {"v": 2}
    assert cache.informer(WIDGET).expectations.pending() == []


async def test_the_cache_knows_a_child_is_absent_only_when_nothing_is_on_its_way(
    cache: Cache, api: FakeClient
) -> None:
    """known_absent: synced, in scope, not stored, and no write of ours still to be seen."""
    assert cache.known_absent(WIDGET, widget("b"))
    assert not cache.known_absent(WIDGET, widget("a"))  # stored
    unwatched = GroupVersionKind(WIDGET.group, "v2", WIDGET.kind)
    assert not cache.known_absent(unwatched, widget("b"))  # no informer for that version
    api.hold_watch_events()
    tracking = cache.tracking_client()
    created, was_created = await tracking.apply_outcome(widget("b"), field_manager="me")
    assert was_created
    assert created["metadata"]["name"] == "b"
    # Created by us, event held back: not absent (apply_child must not create it again).
    assert not cache.known_absent(WIDGET, widget("b"))
    again = await tracking.apply_outcome(widget("b", data={"v": 3}), field_manager="me")
    assert not again.created
    api.release_watch_events()
    await eventually(lambda: "b" in [k.name for k in cache.informer(WIDGET).store], timeout=5)
    assert not cache.known_absent(WIDGET, widget("b"))


async def test_apply_child_waits_for_its_own_write_instead_of_a_get(
    cache: Cache, api: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's event can overtake the child's: the next apply_child waits, then answers.

    The child's create is on the server and its watch event is held back. A second
    apply_child of the same desired child neither GETs nor applies: it waits for the event
    and answers UNCHANGED from the cache. When the event does not come within the wait, it
    falls back to the GET (and the managedFields comparison), as before.
    """
    tracking = cache.tracking_client()
    api.hold_watch_events()
    first, _ = await apply_child(tracking, widget("c", data={"v": 1}), field_manager="me")
    assert first is OperationResult.CREATED
    api.faults.calls.clear()
    second = asyncio.create_task(
        apply_child(tracking, widget("c", data={"v": 1}), field_manager="me")
    )
    await settle()
    assert not second.done()  # waiting for the event, not asking the server
    api.release_watch_events()
    result, _ = await asyncio.wait_for(second, 5)
    assert result is OperationResult.UNCHANGED
    assert api.faults.calls == []

    monkeypatch.setattr(apply_module, "_OWN_WRITE_WAIT", 0.05)
    api.hold_watch_events()
    updated, _ = await apply_child(tracking, widget("c", data={"v": 2}), field_manager="me")
    assert updated is OperationResult.UPDATED
    api.faults.calls.clear()
    late, _ = await apply_child(tracking, widget("c", data={"v": 2}), field_manager="me")
    assert late is OperationResult.UNCHANGED  # the server's object already matches
    assert [c.verb for c in api.faults.calls][:1] == ["get"]  # asked the server after the wait
    api.release_watch_events()


async def test_nothing_to_wait_for_reads_at_once(cache: Cache) -> None:
    reader = cache.reader()
    assert isinstance(reader, ConsistentReader)
    assert reader.timeout == cache.options.read_after_write_timeout
    obj = await asyncio.wait_for(reader.get(WIDGET, "a", namespace="default"), 1)
    assert obj["data"] == {"v": 1}


async def test_a_lagging_cache_fails_the_read_instead_of_returning_stale_data(
    cache: Cache, api: FakeClient
) -> None:
    reader = cache.reader(read_after_write_timeout=0.05)
    api.hold_watch_events()
    written = await put(api, widget("a", data={"v": 2}))
    cache.expect_written(WIDGET, written)
    with pytest.raises(ReadAfterWriteTimeout) as caught:
        await reader.get(WIDGET, "a", namespace="default")
    message = str(caught.value)
    assert "default/a" in message
    assert written["metadata"]["resourceVersion"] in message
    assert isinstance(caught.value, TimeoutError)
    api.release_watch_events()


async def test_a_read_waits_for_our_delete(cache: Cache, api: FakeClient) -> None:
    reader = cache.reader(read_after_write_timeout=5)
    uid = stored_in(api, WIDGET, "a", namespace="default")["metadata"]["uid"]
    api.hold_watch_events()
    await remove(api, KEY)
    cache.expect_deleted(WIDGET, KEY, uid=uid)
    pending = asyncio.create_task(reader.get(WIDGET, "a", namespace="default"))
    await settle()
    assert not pending.done()
    api.release_watch_events()
    with pytest.raises(NotFound):
        await asyncio.wait_for(pending, 5)


async def test_a_delete_of_an_object_the_cache_never_saw(cache: Cache, api: FakeClient) -> None:
    """Created and deleted while the cache lagged: reads say NotFound, before and after."""
    reader = cache.reader(read_after_write_timeout=5)
    api.hold_watch_events()
    created = await put(api, widget("short-lived"))
    await remove(api, ObjectKey("default", "short-lived"))
    cache.expect_deleted(
        WIDGET, ObjectKey("default", "short-lived"), uid=created["metadata"]["uid"]
    )
    with pytest.raises(NotFound):
        await asyncio.wait_for(reader.get(WIDGET, "short-lived", namespace="default"), 1)
    informer = cache.informer(WIDGET)
    api.release_watch_events()
    await eventually(
        lambda: ObjectKey("default", "short-lived") not in informer.expectations,
        timeout=5,
        description="expectation settled by the DELETED event",
    )
    with pytest.raises(NotFound):
        await reader.get(WIDGET, "short-lived", namespace="default")


async def test_a_list_waits_for_every_write_in_its_namespace(cache: Cache, api: FakeClient) -> None:
    reader = cache.reader(read_after_write_timeout=5)
    api.hold_watch_events()
    cache.expect_written(WIDGET, await put(api, widget("b")))
    cache.expect_written(WIDGET, await put(api, widget("c", namespace="elsewhere")))
    in_default = asyncio.create_task(reader.list(WIDGET, namespace="default"))
    everywhere = asyncio.create_task(reader.list(WIDGET))
    await settle()
    assert not in_default.done()
    assert not everywhere.done()
    api.release_watch_events()
    names = [o["metadata"]["name"] for o in await asyncio.wait_for(in_default, 5)]
    assert names == ["a", "b"]
    assert len(await asyncio.wait_for(everywhere, 5)) == 3


async def test_other_namespaces_do_not_block_a_list(cache: Cache, api: FakeClient) -> None:
    reader = cache.reader(read_after_write_timeout=5)
    api.hold_watch_events()
    cache.expect_written(WIDGET, await put(api, widget("c", namespace="elsewhere")))
    listing = await asyncio.wait_for(reader.list(WIDGET, namespace="default"), 1)
    assert [o["metadata"]["name"] for o in listing] == ["a"]
    api.release_watch_events()


async def test_a_bookmark_past_our_write_settles_it(cache: Cache, api: FakeClient) -> None:
    """The watermark: once every event up to our version is applied, the store reflects it."""
    informer = cache.informer(WIDGET)
    for i in range(5):  # writes to another kind: the revision moves on, no Widget events
        api.add(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"c{i}", "namespace": "x"},
            }
        )
    # A write the informer will see no event for (say, it left the informer's selector).
    cache.expect_written(WIDGET, widget("a", metadata={"resourceVersion": api.resource_version}))
    assert informer.expectations.pending() == [KEY]
    api.send_bookmark()
    await asyncio.wait_for(informer.expectations.wait_caught_up(KEY, 5), 5)
    assert informer.expectations.pending() == []


async def test_a_relist_settles_expectations(cache: Cache, api: FakeClient) -> None:
    informer = cache.informer(WIDGET)
    api.hold_watch_events()
    written = await put(api, widget("a", data={"v": 3}))
    cache.expect_written(WIDGET, written)
    gate, _ = hold_next_watch(api)
    api.break_watches(connection_reset())
    await eventually(lambda: api.faults.calls[-1].verb == "watch", timeout=5)
    api.compact()
    api.release_watch_events()
    gate.set()
    reader = cache.reader(read_after_write_timeout=5)
    obj = await reader.get(WIDGET, "a", namespace="default")
    assert obj["data"] == {"v": 3}
    assert informer.stats.relists == 1


async def test_an_older_write_never_lowers_the_expectation(cache: Cache, api: FakeClient) -> None:
    informer = cache.informer(WIDGET)
    api.hold_watch_events()
    first = await put(api, widget("a", data={"v": 2}))
    second = await put(api, widget("a", data={"v": 3}))
    cache.expect_written(WIDGET, second)
    cache.expect_written(WIDGET, first)  # a racing writer reports late
    assert expected(informer, KEY).resource_version == second["metadata"]["resourceVersion"]
    api.release_watch_events()
    obj = await cache.reader(read_after_write_timeout=5).get(WIDGET, "a", namespace="default")
    assert obj["data"] == {"v": 3}


async def test_writes_outside_the_informers_scope_are_not_tracked(api: FakeClient) -> None:
    cache = Cache(api)
    await cache.start()
    try:
        informer = cache.informer(WIDGET)
        await cache.wait_for_sync(5)
        filtered = Informer(api, WIDGET, InformerOptions(labels="app=web"))
        filtered.expect_written(widget("x", metadata={"resourceVersion": "999"}))
        assert filtered.expectations.pending() == []
        # A kind without an informer records nothing (a later informer lists after the write).
        cache.expect_written(
            WIDGET.__class__("other.dev", "v1", "Other"),
            widget("a", metadata={"resourceVersion": "1"}),
        )
        assert informer.expectations.pending() == []
    finally:
        await cache.stop(5)


async def test_non_integer_versions_compare_by_equality() -> None:
    api = fake_api(resource_version_prefix="v")
    await put(api, widget("a", data={"v": 1}))
    cache = Cache(api)
    await cache.start()
    try:
        informer = cache.informer(WIDGET)
        await cache.wait_for_sync(5)
        await eventually(lambda: api.active_watches == 1, timeout=5)
        api.hold_watch_events()
        written = await put(api, widget("a", data={"v": "opaque"}))
        assert written["metadata"]["resourceVersion"].startswith("v")
        cache.expect_written(WIDGET, written)
        # An unrelated bookmark cannot settle an opaque version.
        api.send_bookmark()
        pending = asyncio.create_task(
            cache.reader(read_after_write_timeout=5).get(WIDGET, "a", namespace="default")
        )
        await settle()
        assert not pending.done()
        api.release_watch_events()
        assert (await asyncio.wait_for(pending, 5))["data"] == {"v": "opaque"}
        assert informer.expectations.pending() == []
    finally:
        await cache.stop(5)


async def test_expectations_expire(api: FakeClient) -> None:
    informer = Informer(api, WIDGET, InformerOptions(expectation_ttl=0.01))
    await informer.start()
    try:
        await informer.wait_for_sync(5)
        informer.expect_written(widget("a", metadata={"resourceVersion": "100000"}))

        async def unblocked() -> bool:
            await asyncio.wait_for(informer.expectations.wait_caught_up(KEY, 5), 0.5)
            return True

        await eventually(unblocked, timeout=5, description="expired expectation no longer blocks")
        assert KEY not in informer.expectations
    finally:
        await informer.stop()


async def test_stopping_releases_waiting_readers(api: FakeClient) -> None:
    informer = Informer(api, WIDGET)
    await informer.start()
    await informer.wait_for_sync(5)
    informer.expect_written(widget("a", metadata={"resourceVersion": "100000"}))
    waiting = asyncio.create_task(informer.expectations.wait_caught_up(KEY, 30))
    await settle()
    await informer.stop()
    with pytest.raises(Exception, match="stopped"):
        await asyncio.wait_for(waiting, 5)


# -- the tracking client ----------------------------------------------------------------------


class FakeTransport:
    """Answers requests from a script; records what was sent."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.sent: list[tuple[str, str, Any]] = []
        self.closed = False

    async def request(self, method: str, path: str, **kwargs: Any) -> Response:
        self.sent.append((method, path, kwargs.get("body")))
        reply = self.replies.pop(0) if self.replies else kwargs.get("body")
        return Response(200, {}, reply)

    async def close(self) -> None:
        self.closed = True


class FakeMapper:
    async def mapping(self, gvk: Any) -> ResourceInfo:
        return ResourceInfo(gvk, gvk.kind.lower() + "s", True, frozenset({"status", "scale"}))


@pytest.fixture
def transport() -> FakeTransport:
    return FakeTransport()


@pytest.fixture
def live(transport: FakeTransport) -> Client:
    client = Client(ClientConfig(server="https://fake.invalid"))
    client.transport = transport  # type: ignore[assignment]
    client.mapper = FakeMapper()  # type: ignore[assignment]
    return client


@contextlib.asynccontextmanager
async def tracked(api: FakeClient, live: Client) -> AsyncIterator[tuple[TrackingClient, Informer]]:
    cache = Cache(api)
    await cache.start()
    informer = cache.informer(WIDGET)
    await cache.wait_for_sync(5)
    try:
        yield cache.tracking_client(live), informer
    finally:
        await cache.stop(5)


def stored(name: str, rv: str, **meta: Any) -> dict[str, Any]:
    return widget(name, metadata={"resourceVersion": rv, "uid": f"uid-{name}", **meta})


async def test_tracking_client_records_creates_updates_and_patches(
    api: FakeClient, live: Client, transport: FakeTransport
) -> None:
    async with tracked(api, live) as (client, informer):
        assert isinstance(client, Reader)
        assert isinstance(client, Writer)
        assert isinstance(client, StatusWriter)
        assert client.wrapped is live
        assert client.config is live.config  # everything else is the wrapped client's
        transport.replies = [stored("new", "500")]
        await client.create(widget("new"))
        assert expected(informer, ObjectKey("default", "new")).resource_version == "500"
        transport.replies = [stored("a", "501")]
        await client.replace_status(stored("a", "101"))
        assert expected(informer, KEY).resource_version == "501"
        assert transport.sent[-1][1].endswith("/widgets/a/status")
        transport.replies = [stored("a", "502")]
        await client.patch(WIDGET, "a", MergePatch({"data": {}}), namespace="default")
        assert expected(informer, KEY).resource_version == "502"
        transport.replies = [stored("a", "503")]
        await client.apply(widget("a"), field_manager="me")
        assert expected(informer, KEY).resource_version == "503"
        transport.replies = [{"kind": "Scale", "apiVersion": "autoscaling/v1",
                              "metadata": {"name": "a", "namespace": "default",
                                           "resourceVersion": "504"}}]  # fmt: skip
        await client.set_scale(WIDGET, "a", 3, namespace="default")
        assert expected(informer, KEY).resource_version == "504"


async def test_tracking_client_ignores_dry_runs(
    api: FakeClient, live: Client, transport: FakeTransport
) -> None:
    async with tracked(api, live) as (client, informer):
        transport.replies = [stored("new", "500")]
        await client.create(widget("new"), dry_run=True)
        transport.replies = [{"kind": "Status", "status": "Success"}]
        await client.delete(WIDGET, "a", namespace="default", dry_run=True)
        assert len(informer.expectations) == 0


async def test_tracking_client_records_deletes(
    api: FakeClient, live: Client, transport: FakeTransport
) -> None:
    async with tracked(api, live) as (client, informer):
        # Gone at once: the server answers with a Status naming the uid.
        transport.replies = [{"kind": "Status", "status": "Success",
                              "details": {"name": "a", "uid": "uid-a"}}]  # fmt: skip
        await client.delete(WIDGET, "a", namespace="default")
        expectation = expected(informer, KEY)
        assert expectation.deleted
        assert expectation.uid == "uid-a"

        # Still there, held by a finalizer: a write of the marked object.
        transport.replies = [
            stored("b", "600", deletionTimestamp="2024-01-01T00:00:00Z", finalizers=["x/y"])
        ]
        await client.delete(WIDGET, "b", namespace="default")
        held = expected(informer, ObjectKey("default", "b"))
        assert not held.deleted
        assert held.resource_version == "600"


async def test_closing_the_tracking_client_keeps_the_pool(
    api: FakeClient, live: Client, transport: FakeTransport
) -> None:
    async with tracked(api, live) as (client, _):
        await client.close()
        assert not transport.closed


async def test_removing_the_last_finalizer_is_recorded_as_a_delete(
    api: FakeClient, live: Client, transport: FakeTransport
) -> None:
    """A patch that strips a deleting object's last finalizer deletes it.

    The server answers at the object's old resourceVersion and sends DELETED later at a
    newer one, so "this version or newer" would accept the stale cached copy (finalizer
    included) and a finalizer cleanup would run twice. The write must be recorded as a
    deletion instead.
    """
    async with tracked(api, live) as (client, informer):
        transport.replies = [
            stored("b", "700", deletionTimestamp="2024-01-01T00:00:00Z", finalizers=[])
        ]
        await client.patch(
            WIDGET, "b", MergePatch({"metadata": {"finalizers": None}}), namespace="default"
        )
        expectation = expected(informer, ObjectKey("default", "b"))
        assert expectation.deleted

        # A deleting object that still holds another finalizer is an ordinary write.
        transport.replies = [
            stored("c", "701", deletionTimestamp="2024-01-01T00:00:00Z", finalizers=["x/y"])
        ]
        await client.patch(
            WIDGET, "c", MergePatch({"metadata": {"finalizers": ["x/y"]}}), namespace="default"
        )
        assert not expected(informer, ObjectKey("default", "c")).deleted
