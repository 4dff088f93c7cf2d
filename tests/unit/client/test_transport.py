"""Transport behaviour against a scripted local HTTP server: retries, timeouts, errors, metrics.

These cover failure paths a healthy kube-apiserver rarely produces on demand:
throttling with Retry-After, 5xx, a server that accepts but never answers, a
closed port, and an expired token.
"""

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from setpoint.client import Client, ClientConfig, TransportOptions
from setpoint.client.client import ClientOptions
from setpoint.client.errors import (
    Conflict,
    ConnectionFailed,
    Invalid,
    NotFound,
    RequestTimeout,
    ServiceUnavailable,
    TooManyRequests,
)
from setpoint.client.transport import Transport

Handler = Callable[[web.Request], web.StreamResponse]


class Scripted:
    """A tiny HTTP server whose responses are a queue of handlers."""

    def __init__(self) -> None:
        self.responses: list[Callable[[web.Request], web.Response | Awaitable[web.Response]]] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.url = ""
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs, dict(request.headers)))
        if not self.responses:
            return web.json_response({"kind": "Status", "code": 500}, status=500)
        result = self.responses.pop(0)(request)
        if isinstance(result, web.Response):
            return result
        return await result


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Scripted]:
    scripted = Scripted()
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
        scripted.release.set()
        await runner.cleanup()


def status(code: int, reason: str, message: str = "", **details: object) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message or reason,
        "details": details,
    }


def transport(url: str, **options: Any) -> Transport:
    opts = TransportOptions(backoff_base=0.01, backoff_cap=0.05, **options)
    return Transport(ClientConfig(server=url, token="t0k"), opts)


async def test_retries_429_honouring_retry_after(server: Scripted) -> None:
    server.responses = [
        lambda r: web.json_response(
            status(429, "TooManyRequests"), status=429, headers={"Retry-After": "1"}
        ),
        lambda r: web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}}),
    ]
    t = transport(server.url)
    started = time.monotonic()
    resp = await t.request("GET", "/api/v1/namespaces/d/configmaps/x")
    elapsed = time.monotonic() - started
    await t.close()
    assert resp.body["metadata"]["name"] == "x"
    assert len(server.requests) == 2
    assert elapsed >= 0.95, "Retry-After: 1 must be honoured"


async def test_throttling_without_retry_after_is_raised_typed(server: Scripted) -> None:
    server.responses = [
        lambda r: web.json_response(status(429, "TooManyRequests", retryAfterSeconds=7), status=429)
    ]
    t = transport(server.url)
    with pytest.raises(TooManyRequests) as info:
        await t.request("GET", "/x")
    await t.close()
    assert info.value.retry_after == 7
    assert len(server.requests) == 1


async def test_5xx_without_retry_after_is_not_retried(server: Scripted) -> None:
    server.responses = [lambda r: web.json_response(status(503, "ServiceUnavailable"), status=503)]
    t = transport(server.url)
    with pytest.raises(ServiceUnavailable):
        await t.request("POST", "/x", body={"a": 1})
    await t.close()
    assert len(server.requests) == 1


async def test_write_is_retried_on_503_with_retry_after(server: Scripted) -> None:
    server.responses = [
        lambda r: web.json_response(
            status(503, "ServiceUnavailable"), status=503, headers={"Retry-After": "0"}
        ),
        lambda r: web.json_response({"ok": True}, status=201),
    ]
    t = transport(server.url)
    resp = await t.request("POST", "/x", body={"a": 1})
    await t.close()
    assert resp.status == 201
    assert [m for m, _, _ in server.requests] == ["POST", "POST"]


def _break_first_request(t: Transport, error: Exception) -> None:
    """Make the first request of ``t``'s session raise ``error`` (as aiohttp would)."""
    original = t._ensure_session
    broken = [error]

    async def ensure() -> Any:
        session = await original()
        real = session.request

        def request(*args: Any, **kwargs: Any) -> Any:
            if broken:
                raise broken.pop()
            return real(*args, **kwargs)

        session.request = request  # type: ignore[method-assign]
        return session

    t._ensure_session = ensure  # type: ignore[method-assign]


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
async def test_a_write_whose_body_never_left_is_sent_again(server: Scripted, method: str) -> None:
    """A body aiohttp could not write (a pooled connection the server had closed) is resent.

    The server answers only after reading the whole body, so it never saw the first try.
    """
    server.responses = [lambda r: web.json_response({"ok": True}, status=200)]
    t = transport(server.url)
    _break_first_request(
        t, aiohttp.ClientOSError(None, f"Can not write request body for {server.url}/x")
    )
    resp = await t.request(method, "/x", body={"a": 1})
    await t.close()
    assert resp.status == 200
    assert [m for m, _, _ in server.requests] == [method]


async def test_a_write_broken_after_its_body_left_is_not_sent_again(server: Scripted) -> None:
    """A connection reset while the answer was awaited may follow an applied write: raised."""
    t = transport(server.url)
    _break_first_request(t, aiohttp.ClientOSError(104, "Connection reset by peer"))
    with pytest.raises(ConnectionFailed, match="not retried: the write may have applied"):
        await t.request("PATCH", "/x", body={"a": 1})
    await t.close()
    assert server.requests == []


async def test_typed_errors_carry_causes(server: Scripted) -> None:
    server.responses = [
        lambda r: web.json_response(
            status(
                422,
                "Invalid",
                'Widget "w" is invalid: spec.size: Invalid value: 0',
                name="w",
                kind="Widget",
                causes=[
                    {"reason": "FieldValueInvalid", "message": "too small", "field": "spec.size"}
                ],
            ),
            status=422,
        ),
        lambda r: web.json_response(
            status(409, "Conflict", "the object has been modified"), status=409
        ),
        lambda r: web.json_response(status(404, "NotFound", 'widgets "w" not found'), status=404),
    ]
    t = transport(server.url)
    with pytest.raises(Invalid) as invalid:
        await t.request("POST", "/w", body={})
    assert invalid.value.causes[0].field == "spec.size"
    assert "spec.size" in str(invalid.value)
    with pytest.raises(Conflict):
        await t.request("PUT", "/w", body={})
    with pytest.raises(NotFound) as nf:
        await t.request("GET", "/w")
    assert "/w" in str(nf.value) and "404" in str(nf.value)
    await t.close()


async def test_server_that_never_answers_times_out_naming_the_url(server: Scripted) -> None:
    async def hang(request: web.Request) -> web.Response:
        await server.release.wait()
        return web.json_response({})

    server.responses = [hang]
    t = transport(server.url, request_timeout=0.5, connect_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as info:
        await t.request("GET", "/slow")
    elapsed = time.monotonic() - started
    await t.close()
    assert elapsed < 2.0
    assert f"{server.url}/slow" in str(info.value)


async def test_closed_port_fails_fast_naming_the_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    t = transport(url, request_timeout=3.0, connect_timeout=1.0, max_retries=2)
    started = time.monotonic()
    with pytest.raises(ConnectionFailed) as info:
        await t.request("GET", "/api")
    elapsed = time.monotonic() - started
    await t.close()
    assert elapsed < 3.5
    assert url in str(info.value)
    assert "3 attempts" in str(info.value)


async def test_unauthorized_refreshes_credentials_once(server: Scripted) -> None:
    server.responses = [
        lambda r: web.json_response(status(401, "Unauthorized"), status=401),
        lambda r: web.json_response({"ok": True}),
    ]
    t = transport(server.url)
    resp = await t.request("GET", "/x")
    await t.close()
    assert resp.body == {"ok": True}
    assert all(h.get("Authorization") == "Bearer t0k" for _, _, h in server.requests)
    assert len(server.requests) == 2


async def test_metrics_hook_counts_every_attempt(server: Scripted) -> None:
    server.responses = [
        lambda r: web.json_response(
            status(429, "TooManyRequests"), status=429, headers={"Retry-After": "0"}
        ),
        lambda r: web.json_response({}),
    ]
    seen: list[tuple[str, str, str]] = []
    t = transport(server.url)
    t.on_request = lambda method, host, code: seen.append((method, host, code))
    await t.request("GET", "/x")
    await t.close()
    host = server.url.removeprefix("http://")
    assert seen == [("GET", host, "429"), ("GET", host, "200")]


async def test_client_rejects_missing_namespace_and_empty_names(server: Scripted) -> None:
    from setpoint.api import kinds
    from setpoint.api.gvk import GroupVersionKind
    from setpoint.api.kinds import BUILTIN_RESOURCES, ResourceInfo

    client = Client(ClientConfig(server=server.url), ClientOptions())

    async def mapping(gvk: GroupVersionKind) -> ResourceInfo:
        return BUILTIN_RESOURCES[gvk]

    client.mapper.mapping = mapping  # type: ignore[method-assign]  # no discovery server here
    with pytest.raises(ValueError, match="namespaced: pass namespace"):
        await client.get(kinds.ConfigMap, "x")
    with pytest.raises(ValueError, match="must not be empty"):
        await client.get(kinds.ConfigMap, "", namespace="d")
    with pytest.raises(ValueError, match=r"no metadata\.name"):
        await client.update({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    with pytest.raises(ValueError, match="no apiVersion/kind"):
        await client.create({"metadata": {"name": "x"}})
    await client.close()
    assert server.requests == []


def test_transport_options_are_validated() -> None:
    with pytest.raises(ValueError, match="connect_timeout must not exceed request_timeout"):
        TransportOptions(request_timeout=1, connect_timeout=5)
    with pytest.raises(ValueError, match="timeouts must be > 0"):
        TransportOptions(request_timeout=0)


def test_proxy_comes_from_the_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    from setpoint.client.transport import _proxy_from_environment

    assert _proxy_from_environment("https://api.example:6443") == "http://proxy.example:3128"
    assert _proxy_from_environment("https://internal.example:6443") is None
    explicit = Transport(
        ClientConfig(server="https://api.example:6443", proxy_url="http://mine:8080")
    )
    assert explicit._request_kwargs()["proxy"] == "http://mine:8080"
    monkeypatch.delenv("HTTPS_PROXY")
    assert _proxy_from_environment("https://api.example:6443") is None


@pytest.mark.parametrize(
    ("no_proxy", "server", "direct"),
    [
        ("10.0.0.0/8", "https://10.1.2.3:6443", True),
        ("10.0.0.0/8", "https://11.1.2.3:6443", False),
        ("fd00::/8", "https://[fd00::1]:6443", True),
        ("", "https://127.0.0.1:6443", True),  # loopback is never proxied (Go)
        ("", "https://localhost:6443", True),
        ("192.168.1.5", "https://192.168.1.5:6443", True),
        ("example.com", "https://api.example.com:6443", True),
        ("example.com", "https://example.com", True),
        (".example.com", "https://example.com", False),
        ("*.example.com", "https://k8s.example.com", True),
        ("example.com:443", "https://example.com", True),
        ("example.com:6443", "https://example.com", False),
        ("*", "https://anything:1", True),
        ("notexample.com", "https://example.com", False),
        (" 10.0.0.0/8 , other ", "https://10.9.9.9", True),
    ],
)
def test_no_proxy_follows_client_go(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str, server: str, direct: bool
) -> None:
    """NO_PROXY CIDR ranges, IPs, domains and ports, and loopback, as Go's httpproxy (item 11)."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", no_proxy)
    from setpoint.client.transport import _proxy_from_environment

    expected = None if direct else "http://proxy.example:3128"
    assert _proxy_from_environment(server) == expected


def test_large_bodies_decode_with_gc_paused_and_restored() -> None:
    import gc

    import orjson

    from setpoint.client.transport import _LARGE_BODY, _decode

    body = orjson.dumps({"items": [{"v": "x" * 100}] * (_LARGE_BODY // 100 + 1)})
    assert len(body) > _LARGE_BODY
    assert gc.isenabled()
    assert len(_decode(body, "application/json")["items"]) == _LARGE_BODY // 100 + 1
    assert gc.isenabled()
    gc.disable()
    try:
        _decode(body, "application/json")
        assert not gc.isenabled(), "a caller's disabled GC must stay disabled"
    finally:
        gc.enable()
