"""Streamed lists: an informer lists through a watch (sendInitialEvents) and falls back to pages.

The same informer semantics run in both modes in test_informer.py; these tests cover what
only streaming has: one request that lists and then watches, the end-of-initial-events
bookmark, and the fallbacks for servers that refuse or ignore ``sendInitialEvents``. The real
server's side is in tests/integration/cache/test_cache_streaming.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint.api.keys import ObjectKey
from setpoint.cache import FuncHandler, Informer, InformerOptions
from setpoint.client.errors import Invalid
from setpoint.client.objects import WatchEvent
from setpoint.testing import FakeClient, eventually
from tests._support.widgets import WIDGET, fake_api, put, widget

FAST: dict[str, Any] = {"backoff_initial": 0.005, "backoff_max": 0.02, "streaming_list": True}


@pytest.fixture
async def api() -> FakeClient:
    return fake_api()


@contextlib.asynccontextmanager
async def running(client: Any, **options: Any) -> AsyncIterator[Informer]:
    informer = Informer(client, WIDGET, InformerOptions(**{**FAST, **options}))
    await informer.start()
    try:
        yield informer
    finally:
        await informer.stop()


class ScriptedWatch:
    """A watch that sends the given events, then ends (as a server closing the stream)."""

    def __init__(self, events: list[WatchEvent[Any]]) -> None:
        self._events = list(events)

    async def __aenter__(self) -> ScriptedWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __aiter__(self) -> ScriptedWatch:
        return self

    async def __anext__(self) -> WatchEvent[Any]:
        if not self._events:
            raise StopAsyncIteration
        return self._events.pop(0)


class Scripted:
    """The fake, except that the next streamed-list watches answer from a script."""

    def __init__(self, fake: FakeClient, *scripts: list[WatchEvent[Any]]) -> None:
        self.fake = fake
        self.scripts = list(scripts)
        self.streamed = 0

    def watch(self, kind: Any, *, send_initial_events: bool = False, **kwargs: Any) -> Any:
        if send_initial_events:
            self.streamed += 1
            if self.scripts:
                return ScriptedWatch(self.scripts.pop(0))
        return self.fake.watch(kind, send_initial_events=send_initial_events, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)


def bookmark(resource_version: str, *, end: bool) -> WatchEvent[Any]:
    """A BOOKMARK event, with or without the end-of-initial-events annotation."""
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return WatchEvent("BOOKMARK", {"kind": "Widget", "metadata": metadata}, resource_version)


async def test_a_streamed_list_keeps_watching_on_the_same_stream(api: FakeClient) -> None:
    """One watch request lists (ADDED events up to the end bookmark) and then watches."""
    written = await put(api, widget("a"))
    added: list[tuple[str, bool]] = []
    async with running(api) as informer:
        informer.add_handler(
            FuncHandler(add=lambda obj, initial: added.append((obj["metadata"]["name"], initial)))
        )
        await informer.wait_for_sync(5)
        assert added == [("a", True)]
        assert informer.resource_version == written["metadata"]["resourceVersion"]
        await put(api, widget("b"))
        await eventually(lambda: ObjectKey("default", "b") in informer.store, timeout=5)
        assert [c.verb for c in api.faults.calls if c.verb in ("list", "watch")] == ["watch"]
        assert informer.stats.streamed_lists == informer.stats.lists == 1


async def test_a_server_that_refuses_streamed_lists_gets_paginated_lists(api: FakeClient) -> None:
    """422 to sendInitialEvents (WatchList off): list with pages from then on, no error."""
    await put(api, widget("a"))
    api.faults.fail_next(
        "watch", error=Invalid("sendInitialEvents is forbidden", code=422), times=1
    )
    async with running(api) as informer:
        await informer.wait_for_sync(5)
        assert [k.name for k in informer.store] == ["a"]
        assert informer.stats.streamed_lists == 0
        assert informer.stats.errors == 0
        assert len(api.faults.calls_to("list")) == 1
        await put(api, widget("b"))
        await eventually(lambda: ObjectKey("default", "b") in informer.store, timeout=5)


async def test_a_server_that_ignores_streamed_lists_gets_paginated_lists(api: FakeClient) -> None:
    """A plain bookmark before the end marker (an old server): fall back to pages."""
    await put(api, widget("a"))
    old = Scripted(api, [bookmark("1", end=False)])
    async with running(old) as informer:
        await informer.wait_for_sync(5)
        assert [k.name for k in informer.store] == ["a"]
        assert old.streamed == 1
        assert informer.stats.streamed_lists == 0
        assert len(api.faults.calls_to("list")) == 1


async def test_a_stream_that_ends_before_the_end_marker_is_listed_again(api: FakeClient) -> None:
    """Half a streamed list is never taken for a whole one: the informer streams again."""
    await put(api, widget("a"))
    await put(api, widget("b"))
    a = api.lookup(WIDGET, "a", namespace="default")
    assert a is not None
    cut = Scripted(api, [WatchEvent("ADDED", a, a["metadata"]["resourceVersion"])])
    async with running(cut) as informer:
        await informer.wait_for_sync(5)
        assert sorted(k.name for k in informer.store) == ["a", "b"]
        assert cut.streamed == 2
        assert informer.stats.streamed_lists == informer.stats.lists == 1
