"""Metadata-only kinds: the Metadata kind, its own informer in the cache, read-after-write.

The fake answers metadata-only reads as the server does (PartialObjectMetadata); the
comparison with a real API server is tests/integration/cache/test_metadata_only.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.metadata import (
    METADATA_ACCEPT,
    METADATA_LIST_ACCEPT,
    Metadata,
    is_metadata,
    partial_metadata,
)
from setpoint.cache import Cache, CacheOptions, FuncHandler
from setpoint.client import Client
from setpoint.client.config import ClientConfig
from setpoint.client.errors import NotFound, UnknownKind
from setpoint.client.transport import Response
from setpoint.testing import FakeClient, eventually
from tests._support.kinds import Widget
from tests._support.virtual_time import settle
from tests._support.widgets import WIDGET, fake_api, put, remove, widget

PARTIAL = {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata"}


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    await put(fake, widget("a", metadata={"labels": {"app": "web"}}, spec={"color": "red"}))
    await put(fake, widget("b", spec={"color": "blue"}))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


def test_metadata_names_one_kind_however_it_is_given() -> None:
    assert Metadata(WIDGET) == Metadata(Widget)
    assert hash(Metadata(WIDGET)) == hash(Metadata(Widget))
    keys: set[object] = {Metadata(WIDGET), WIDGET}  # a cache keeps the two apart
    assert len(keys) == 2
    assert Metadata(WIDGET).gvk == WIDGET
    assert is_metadata(Metadata(WIDGET)) and not is_metadata(WIDGET)
    with pytest.raises(TypeError, match="wrap it twice"):
        Metadata(Metadata(WIDGET))
    with pytest.raises(TypeError, match="not-a-kind"):
        Metadata("not-a-kind")


def test_a_whole_object_is_cut_down_to_its_metadata() -> None:
    whole = widget("a", metadata={"labels": {"x": "1"}}, spec={"color": "red"})
    cut = partial_metadata(whole)
    assert cut == {**PARTIAL, "metadata": whole["metadata"]}
    # What the server sent as PartialObjectMetadata already is kept as it is.
    assert partial_metadata(cut) is cut


async def test_metadata_reads_return_partial_objects_from_an_informer_of_their_own(
    cache: Cache,
) -> None:
    one = await cache.get(Metadata(WIDGET), "a", namespace="default")
    assert {k: one[k] for k in ("apiVersion", "kind")} == PARTIAL
    assert set(one) == {"apiVersion", "kind", "metadata"}
    assert one["metadata"]["labels"] == {"app": "web"}
    listed = await cache.list(Metadata(WIDGET), namespace="default", labels="app=web")
    assert [o["metadata"]["name"] for o in listed] == ["a"]
    assert all("spec" not in o for o in listed)
    informer = cache.informer(Metadata(WIDGET))
    assert informer.metadata_only and informer.kind == WIDGET
    # The store itself holds no spec: the cache keeps less, not just hands out less.
    stored = informer.store.get(next(iter(informer.store.keys())))
    assert stored is not None and "spec" not in stored
    # The full informer is another one, and a full read still has the spec.
    assert cache.informer(WIDGET) is not informer
    full = await cache.get(WIDGET, "a", namespace="default")
    assert full["spec"] == {"color": "red"}
    assert cache.informer(Metadata(Widget)) is informer
    assert "Widget(metadata)" in repr(cache)
    with pytest.raises(NotFound, match='"nope" not found'):
        await cache.get(Metadata(WIDGET), "nope", namespace="default")


async def test_handlers_of_a_metadata_informer_see_partial_objects(
    cache: Cache, api: FakeClient
) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    cache.informer(Metadata(WIDGET)).add_handler(
        FuncHandler(
            add=lambda o, _: seen.append(("add", o)),
            update=lambda _, n: seen.append(("update", n)),
            delete=lambda o, _: seen.append(("delete", o)),
        )
    )
    await cache.wait_for_sync(5)
    await put(api, widget("a", metadata={"labels": {"app": "db"}}, spec={"color": "green"}))
    await remove(api, ObjectKey("default", "b"))
    await eventually(lambda: len(seen) == 4, timeout=5, description="four events")
    assert [e for e, _ in seen] == ["add", "add", "update", "delete"]
    assert all(set(o) == {"apiVersion", "kind", "metadata"} for _, o in seen)
    assert seen[2][1]["metadata"]["labels"] == {"app": "db"}


async def test_a_metadata_read_waits_for_this_process_s_own_write(
    cache: Cache, api: FakeClient
) -> None:
    reader = cache.reader(read_after_write_timeout=5)
    await reader.get(Metadata(WIDGET), "a", namespace="default")
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    api.hold_watch_events()
    written = await put(api, widget("a", metadata={"labels": {"app": "v2"}}))
    cache.expect_written(WIDGET, written)  # what the tracking client does after a write

    pending = asyncio.create_task(reader.get(Metadata(WIDGET), "a", namespace="default"))
    await settle()
    assert not pending.done()
    stale = await cache.get(Metadata(WIDGET), "a", namespace="default")
    assert stale["metadata"]["labels"] == {"app": "web"}
    api.release_watch_events()
    fresh = await asyncio.wait_for(pending, 5)
    assert fresh["metadata"]["labels"] == {"app": "v2"}
    assert fresh["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


async def test_narrowing_a_kind_narrows_its_metadata_informer_too(api: FakeClient) -> None:
    cache = Cache(api, options=CacheOptions())
    cache.narrow(WIDGET, "app=web")
    await cache.start()
    try:
        listed = await cache.list(Metadata(WIDGET))
        assert [o["metadata"]["name"] for o in listed] == ["a"]
    finally:
        await cache.stop(5)


async def test_the_fake_answers_metadata_reads_and_watches(api: FakeClient) -> None:
    got = await api.get(Metadata(WIDGET), "b", namespace="default")
    assert set(got) == {"apiVersion", "kind", "metadata"}
    listed = await api.list(Metadata(WIDGET), namespace="default")
    assert [(o["kind"], o["metadata"]["name"]) for o in listed] == [
        ("PartialObjectMetadata", "a"),
        ("PartialObjectMetadata", "b"),
    ]
    async with api.watch(Metadata(WIDGET), namespace="default", timeout_seconds=1) as watch:
        async for event in watch:
            if event.type == "BOOKMARK":
                break
            assert event.object["kind"] == "PartialObjectMetadata"
            assert "spec" not in event.object


# -- the live client asks the server for PartialObjectMetadata ---------------------------------


class RecordingTransport:
    """Records the Accept header of each request and answers with ``reply``."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.accepts: list[str] = []

    async def request(self, method: str, path: str, **kwargs: Any) -> Response:
        self.accepts.append(kwargs.get("accept", "application/json"))
        return Response(200, {}, self.reply)


class Mapper:
    async def mapping(self, gvk: GroupVersionKind) -> ResourceInfo:
        return ResourceInfo(gvk, "widgets", True)


def live(transport: RecordingTransport) -> Client:
    client = Client(ClientConfig(server="https://fake.invalid"))
    client.transport = transport  # type: ignore[assignment]
    client.mapper = Mapper()  # type: ignore[assignment]
    return client


async def test_the_live_client_asks_for_partial_object_metadata() -> None:
    item = {**PARTIAL, "metadata": {"name": "a", "namespace": "default"}}
    transport = RecordingTransport({**PARTIAL, "metadata": item["metadata"]})
    client = live(transport)
    got = await client.get(Metadata(WIDGET), "a", namespace="default")
    assert got == item
    transport.reply = {"kind": "PartialObjectMetadataList", "metadata": {}, "items": [item]}
    listed = await client.list(Metadata(WIDGET), namespace="default")
    assert listed.items == [item]
    await client.get(WIDGET, "a", namespace="default")
    assert transport.accepts == [METADATA_ACCEPT, METADATA_LIST_ACCEPT, "application/json"]
    # A server that ignores ``as=`` sends the whole object: the client cuts it down.
    transport.reply = widget("a", spec={"color": "red"})
    cut = await client.get(Metadata(WIDGET), "a", namespace="default")
    assert set(cut) == {"apiVersion", "kind", "metadata"} and cut["kind"] == PARTIAL["kind"]


async def test_a_metadata_object_cannot_be_written_back(api: FakeClient) -> None:
    partial = await api.get(Metadata(WIDGET), "a", namespace="default")
    with pytest.raises(UnknownKind, match="PartialObjectMetadata"):
        await api.update(partial)
    assert (await api.get(WIDGET, "a", namespace="default"))["spec"] == {"color": "red"}
