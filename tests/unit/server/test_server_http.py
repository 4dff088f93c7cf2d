"""The HTTP server: request bodies, limits and hardening headers, on a real socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from setpoint.api.runnable import RunnableGroup
from setpoint.server import (
    BindAddress,
    Http1Server,
    HttpRequest,
    HttpResponse,
    HttpServerOptions,
)

LOCAL = BindAddress("127.0.0.1", 0)


class Recorder:
    """A handler that answers with the body it got and remembers every request."""

    def __init__(self) -> None:
        self.requests: list[HttpRequest] = []

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        self.requests.append(request)
        return HttpResponse(
            200, request.body, "application/json", headers={"X-Seen": request.method}
        )


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def started(
    handler: Recorder, options: HttpServerOptions | None = None
) -> tuple[Http1Server, str]:
    server = Http1Server("test-server", LOCAL, handler, options=options)
    await server.start()
    assert server.address is not None
    return server, f"http://127.0.0.1:{server.address[1]}"


async def test_a_post_body_reaches_the_handler_whole(http: aiohttp.ClientSession) -> None:
    """The handler gets the whole request body; its own headers are sent with the hardening ones."""
    handler = Recorder()
    server, url = await started(handler)
    try:
        body = b'{"kind":"AdmissionReview"}' * 1000
        async with http.post(f"{url}/validate?timeout=10s", data=body) as resp:
            assert resp.status == 200
            assert await resp.read() == body
            assert resp.headers["Content-Type"] == "application/json"
            assert resp.headers["X-Seen"] == "POST"
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert resp.headers["Cache-Control"] == "no-store"
        [request] = handler.requests
        assert (request.method, request.path, request.query) == (
            "POST",
            "/validate",
            {"timeout": ("10s",)},
        )
    finally:
        await server.stop(1.0)


async def test_a_body_over_the_limit_is_refused_unread(http: aiohttp.ClientSession) -> None:
    """A declared or streamed body over max_body_size gets 413 and never reaches the handler."""
    handler = Recorder()
    server, url = await started(handler, HttpServerOptions(max_body_size=1024))
    try:
        async with http.post(url, data=b"x" * 1025) as resp:
            assert resp.status == 413
            assert "larger than 1024 bytes" in await resp.text()

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(4):
                yield b"y" * 512

        async with http.post(url, data=chunks()) as resp:  # chunked: no Content-Length
            assert resp.status == 413
        async with http.post(url, data=b"z" * 1024) as resp:
            assert resp.status == 200
        assert [len(r.body) for r in handler.requests] == [1024]
    finally:
        await server.stop(1.0)


async def test_a_body_that_never_arrives_gets_408() -> None:
    """A client that declares a body and stalls is answered 408 after body_timeout."""
    handler = Recorder()
    server, _ = await started(handler, HttpServerOptions(body_timeout=0.2))
    assert server.address is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.address[1])
    try:
        writer.write(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly-a-bit")
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        assert status_line.startswith(b"HTTP/1.1 408")
        assert handler.requests == []
    finally:
        writer.close()
        await server.stop(1.0)


async def test_the_group_is_configurable_for_webhook_servers() -> None:
    """A server is in SERVERS by default and in WEBHOOKS when told, never leader-only."""
    handler = Recorder()
    assert Http1Server("a", LOCAL, handler).group is RunnableGroup.SERVERS
    webhooks = Http1Server(
        "b", LOCAL, handler, options=HttpServerOptions(group=RunnableGroup.WEBHOOKS)
    )
    assert webhooks.group is RunnableGroup.WEBHOOKS
    assert webhooks.needs_leader_election is False
    assert webhooks.scheme == "http"


def test_bad_options_are_rejected_with_the_field_named() -> None:
    """HttpServerOptions names the field and the rule it breaks."""
    with pytest.raises(ValueError, match="max_body_size=-1 must be >= 0 bytes"):
        HttpServerOptions(max_body_size=-1)
    with pytest.raises(ValueError, match="body_timeout=0 must be a positive number of seconds"):
        HttpServerOptions(body_timeout=0)
    with pytest.raises(ValueError, match=r"shutdown_timeout=-2\.0 must be a positive"):
        HttpServerOptions(shutdown_timeout=-2.0)
    with pytest.raises(ValueError, match=r"\['convert'\]: the key must be a request path"):
        HttpServerOptions(body_limits={"convert": 10})
    with pytest.raises(ValueError, match=r"body_limits\['/a'\]=-1 must be >= 0 bytes"):
        HttpServerOptions(body_limits={"/a": -1})
    with pytest.raises(ValueError, match=r"body_budget=100 is below the largest body limit \(200"):
        HttpServerOptions(max_body_size=10, body_limits={"/big": 200}, body_budget=100)


def test_body_limits_are_copied_and_read_only() -> None:
    """The options keep their own read-only copy of body_limits."""
    limits = {"/convert": 10}
    options = HttpServerOptions(body_limits=limits)
    limits["/convert"] = 20
    assert options.body_limits == {"/convert": 10}
    with pytest.raises(TypeError):
        options.body_limits["/convert"] = 30  # type: ignore[index]
