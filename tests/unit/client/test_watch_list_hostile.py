"""A server that sends hostile watch streams and list pages (issue 18, items 6 and 7).

A scripted HTTP server stands in for the API server: it answers a watch with lines of the
wrong shape or of unbounded length, and a list with a continue token that never changes.
The client must fail with a documented, typed error, without hanging or quoting the data.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import BUILTIN_RESOURCES, ResourceInfo
from setpoint.client import Client, ClientConfig, ClientOptions
from setpoint.client._watchdecode import MAX_WATCH_LINE, WatchDecoder
from setpoint.client.errors import Gone, InternalError, MalformedResponse

SECRET = "c2VjcmV0LXZhbHVl"  # what a Secret's data looks like; must never reach a message


class Api:
    """Answers watches with ``watch_lines`` and lists with ``pages`` (repeating the last)."""

    def __init__(self) -> None:
        self.watch_chunks: list[bytes] = []
        self.pages: list[dict[str, Any]] = []
        self.list_calls = 0
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            response.content_type = "application/json"
            await response.prepare(request)
            for chunk in self.watch_chunks:
                await response.write(chunk)
            await response.write_eof()
            return response
        self.list_calls += 1
        page = self.pages[min(self.list_calls, len(self.pages)) - 1]
        return web.json_response(page)


@pytest_asyncio.fixture
async def api() -> AsyncIterator[Api]:
    scripted = Api()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", scripted.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    scripted.url = f"http://127.0.0.1:{port}"
    try:
        yield scripted
    finally:
        await runner.cleanup()


def client_for(api: Api, **options: Any) -> Client:
    client = Client(ClientConfig(server=api.url), ClientOptions(**options))

    async def mapping(gvk: GroupVersionKind) -> ResourceInfo:
        return BUILTIN_RESOURCES[gvk]

    client.mapper.mapping = mapping  # type: ignore[method-assign]  # no discovery server here
    return client


async def watch_error(api: Api, **options: Any) -> BaseException:
    client = client_for(api, **options)
    try:
        async with asyncio.timeout(20):
            with pytest.raises(Exception) as info:
                async with client.watch(kinds.ConfigMap, namespace="d") as watch:
                    async for _ in watch:
                        pass
    finally:
        await client.close()
    return info.value


def cm(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "d", "resourceVersion": "5"},
        "data": {"k": SECRET},
    }


@pytest.mark.parametrize(
    "line",
    [
        b"[]",
        b"1",
        b"null",
        b'"ADDED"',
        b'{"object": "x"}',
        b'{"type": 3, "object": {}}',
        b'{"type": "ADDED", "object": "' + SECRET.encode() + b'"}',
        b'{"type": "ADDED", "object": [1]}',
        b'{"type": "ADDED", "object": {"metadata": "' + SECRET.encode() + b'"}}',
        b'{"type": "ERROR", "object": {"code": "five hundred"}}',
        b'{"type": "ERROR", "object": {"code": 1.5}}',
        b"{not json " + SECRET.encode(),
    ],
)
async def test_watch_line_of_the_wrong_shape_is_a_typed_error(api: Api, line: bytes) -> None:
    """Each wrong shape: MalformedResponse naming the URL, never AttributeError or ValueError."""
    good = json.dumps({"type": "ADDED", "object": cm("a")}).encode()
    api.watch_chunks = [good + b"\n", line + b"\n"]
    error = await watch_error(api)
    assert isinstance(error, MalformedResponse), repr(error)
    assert "/api/v1/namespaces/d/configmaps" in str(error)
    assert SECRET not in str(error)


async def test_watch_error_events_keep_their_types(api: Api) -> None:
    """ERROR events: 410 is Gone, a missing or absurd code is a 500."""
    api.watch_chunks = [b'{"type": "ERROR", "object": {"code": 410, "message": "too old"}}\n']
    assert isinstance(await watch_error(api), Gone)
    api.watch_chunks = [b'{"type": "ERROR", "object": {"code": 99999}}\n']
    assert isinstance(await watch_error(api), InternalError)
    api.watch_chunks = [b'{"type": "ERROR", "object": {"message": ["x"]}}\n']
    assert isinstance(await watch_error(api), InternalError)


async def test_watch_line_over_the_limit_fails_before_it_is_buffered(api: Api) -> None:
    """A line that never ends fails once it passes max_watch_line, not at the end of memory."""
    api.watch_chunks = [b'{"type": "ADDED", "object": {"data": "'] + [b"x" * 4096] * 64
    error = await watch_error(api, max_watch_line=100_000)
    assert isinstance(error, MalformedResponse)
    assert "longer than 100000 bytes" in str(error)


async def test_list_with_a_repeating_continue_token_stops(api: Api) -> None:
    """A server that always returns the same continue token: a typed error, not a loop."""
    page = {
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "7", "continue": "same-token"},
        "items": [cm("a")],
    }
    api.pages = [page]
    client = client_for(api, page_size=1)
    try:
        async with asyncio.timeout(20):
            with pytest.raises(MalformedResponse, match="continue token it had returned before"):
                await client.list(kinds.ConfigMap, namespace="d")
    finally:
        await client.close()
    assert api.list_calls == 2


async def test_list_with_distinct_tokens_still_pages(api: Api) -> None:
    """Real paging is unaffected: distinct tokens, then none."""
    api.pages = [
        {"metadata": {"resourceVersion": "7", "continue": "t1"}, "items": [cm("a")]},
        {"metadata": {"continue": "t2"}, "items": [cm("b")]},
        {"metadata": {}, "items": [cm("c")]},
    ]
    client = client_for(api, page_size=1)
    try:
        listing = await client.list(kinds.ConfigMap, namespace="d")
    finally:
        await client.close()
    assert [o["metadata"]["name"] for o in listing.items] == ["a", "b", "c"]


# --- the decoder alone ----------------------------------------------------------------------


def test_decoder_joins_lines_across_chunks_and_skips_blank_lines() -> None:
    """Lines split anywhere, several per chunk, and blank keep-alive lines."""
    lines = b"".join(
        json.dumps({"type": "ADDED", "object": cm(n)}).encode() + b"\n\n" for n in "abc"
    )
    for size in (1, 3, 7, 64, len(lines)):
        decoder = WatchDecoder("u")
        events = []
        for i in range(0, len(lines), size):
            events.extend(decoder.feed(lines[i : i + size]))
        assert [e.object["metadata"]["name"] for e in events] == ["a", "b", "c"]
        assert decoder.pending == 0


def test_decoder_long_line_in_small_chunks() -> None:
    """A long line in 4 KiB chunks decodes whole (bench/watch_decode.py measures the time)."""
    body = b'{"type": "ADDED", "object": {"data": {"k": "' + b"x" * (4 << 20) + b'"}}}\n'
    decoder = WatchDecoder("u")
    events = []
    for i in range(0, len(body), 4096):
        events.extend(decoder.feed(body[i : i + 4096]))
        assert decoder.pending <= MAX_WATCH_LINE
    assert len(events) == 1
    assert len(events[0].object["data"]["k"]) == 4 << 20
