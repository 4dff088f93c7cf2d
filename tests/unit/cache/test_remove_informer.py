"""Cache.remove_informer: informers added and removed at run time (controller-runtime#1179)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint.api.metadata import Metadata
from setpoint.cache import Cache, CacheOptions, InformerRemoved, by_field
from setpoint.testing import FakeClient, eventually
from tests._support.widgets import WIDGET, fake_api, put, widget


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    await put(fake, widget("a", metadata={"labels": {"color": "red"}}))
    await put(fake, widget("b", metadata={"labels": {"color": "blue"}}))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


async def test_remove_stops_the_watch_and_drops_store_handlers_and_reads(
    cache: Cache, api: FakeClient
) -> None:
    informer = cache.informer(WIDGET)
    events: list[str] = []

    class Handler:
        def on_add(self, obj: Any, *, is_initial_list: bool) -> None:
            events.append(f"add {obj['metadata']['name']}")

        def on_update(self, old: Any, new: Any) -> None:
            events.append("update")

        def on_delete(self, obj: Any, *, final_state_unknown: bool) -> None:
            events.append("delete")

    registration = informer.add_handler(Handler())
    await informer.wait_for_sync(5)
    await eventually(lambda: api.active_watches == 1, timeout=5, description="watch open")
    assert len(informer.store) == 2

    assert await cache.remove_informer(WIDGET) is True

    assert api.active_watches == 0
    assert len(informer.store) == 0
    assert informer.handler_count == 0
    assert registration.removed
    assert informer not in cache.informers()
    await put(api, widget("c"))
    await asyncio.sleep(0.05)
    assert events == ["add a", "add b"]  # nothing after the removal
    with pytest.raises(InformerRemoved, match=r"Widget \(test.setpoint.dev/v1\).*cache.informer"):
        await cache.get(WIDGET, "a", namespace="default")
    with pytest.raises(InformerRemoved):
        await cache.list(WIDGET)
    assert cache.peek(WIDGET, widget_key("a")) is None
    assert await cache.remove_informer(WIDGET) is False  # idempotent


async def test_the_removed_informer_is_collected(cache: Cache) -> None:
    informer = cache.informer(WIDGET)
    await cache.get(WIDGET, "a", namespace="default")
    ref = weakref.ref(informer)
    del informer
    await cache.remove_informer(WIDGET)
    gc.collect()
    assert ref() is None


async def test_adding_again_lists_afresh_with_the_declared_indexes(
    cache: Cache, api: FakeClient
) -> None:
    path = "metadata.labels.color"
    cache.add_index(WIDGET, f"field:{path}", by_field(path))
    assert len(await cache.list(WIDGET, fields=f"{path}=red")) == 1
    await cache.remove_informer(WIDGET)
    await put(api, widget("c", metadata={"labels": {"color": "red"}}))

    again = cache.informer(WIDGET)
    await again.wait_for_sync(5)
    assert again.store.has_index(f"field:{path}")
    names = [o["metadata"]["name"] for o in await cache.list(WIDGET, fields=f"{path}=red")]
    assert names == ["a", "c"]
    assert api.active_watches == 1


async def test_a_read_waiting_for_sync_fails_when_the_informer_is_removed(
    cache: Cache, api: FakeClient
) -> None:
    gate = asyncio.Event()
    original = api.list

    async def held_list(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await original(*args, **kwargs)

    api.list = held_list  # type: ignore[method-assign]
    cache_streaming_off = Cache(api, options=CacheOptions(streaming_list=False))
    await cache_streaming_off.start()
    try:
        read = asyncio.ensure_future(cache_streaming_off.get(WIDGET, "a", namespace="default"))
        await asyncio.sleep(0.05)
        assert not read.done()
        await cache_streaming_off.remove_informer(WIDGET)
        with pytest.raises(InformerRemoved, match="was removed"):
            await asyncio.wait_for(read, 5)
    finally:
        gate.set()
        await cache_streaming_off.stop(5)


async def test_metadata_only_and_full_informers_are_removed_separately(cache: Cache) -> None:
    await cache.list(WIDGET)
    await cache.list(Metadata(WIDGET))
    await cache.remove_informer(Metadata(WIDGET))
    assert [i.metadata_only for i in cache.informers()] == [False]
    assert len(await cache.list(WIDGET)) == 2
    with pytest.raises(InformerRemoved, match="metadata-only"):
        await cache.list(Metadata(WIDGET))


def widget_key(name: str) -> Any:
    from setpoint.api.keys import ObjectKey

    return ObjectKey("default", name)
