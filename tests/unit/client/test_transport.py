"""Transport behaviour against a scripted local HTTP server: retries, timeouts, errors, metrics.

These cover failure paths a healthy kube-apiserver rarely produces on demand:
throttling with Retry-After, 5xx, a server that accepts but never answers, a
closed port, and an expired token.
"""

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from setpoint.client import Client, ClientConfig, TransportOptions
from setpoint.client._http import DEADLINE_TICK
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
from setpoint.testing.waits import eventually
from tests._support.proxies import Proxy
from tests._support.raw_http import Raw, read_request
from tests._support.virtual_time import RecordingClock, run_timers

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
    clock = RecordingClock()
    t = transport(server.url, clock=clock)
    task = asyncio.create_task(t.request("GET", "/api/v1/namespaces/d/configmaps/x"))
    waited = await run_timers(clock, task)
    await t.close()
    assert task.result().body["metadata"]["name"] == "x"
    assert len(server.requests) == 2
    assert 1.0 in clock.delays, "the retry waits Retry-After: 1 on the transport's clock"
    assert waited >= 1.0


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


_OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class _AnswerOnceServer(threading.Thread):
    """A server thread answering one request per connection, then hanging up.

    It runs outside the event loop, so its close reaches the socket even while the loop is
    busy (as a restarted API server's does).
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.seen: list[bytes] = []
        self.accepted = 0
        self.closed = threading.Event()

    def run(self) -> None:
        with self.listener:
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    return
                self.accepted += 1
                with conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    while len(body) < length:
                        body += conn.recv(65536)
                    self.seen.append(head)
                    conn.sendall(_OK)
                self.closed.set()

    def stop(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
@pytest.mark.parametrize("loop_saw_close", [True, False])
async def test_a_pooled_connection_the_server_closed_is_not_written_to(
    method: str, loop_saw_close: bool
) -> None:
    """A kept-alive connection the server closed while idle is dropped, not written to.

    The server answers one request per connection (without ``Connection: close``) and hangs
    up; the next request, a write of any verb, goes out once on a new connection: whether
    the event loop has already read the close (``loop_saw_close``) or is still busy and the
    socket alone knows it.
    """
    server = _AnswerOnceServer()
    server.start()
    t = transport(server.url)
    try:
        assert (await t.request("GET", "/first")).body == {"ok": True}
        pool = t._pool
        assert pool is not None
        if loop_saw_close:
            assert await asyncio.to_thread(server.closed.wait, 5)
            await eventually(
                lambda: not any(c.usable for c in pool._idle), timeout=5, interval=0.01
            )
        else:
            # Wait without running the loop: the close reaches the socket, not asyncio.
            assert server.closed.wait(5)
            time.sleep(0.05)  # noqa: ASYNC251 (the FIN's way through the kernel)
            assert all(c.usable for c in pool._idle), "the loop has not read the close yet"
        resp = await t.request(method, "/x", body={"a": 1})
    finally:
        await t.close()
        server.stop()
    assert resp.status == 200
    assert [r.split(b" ")[0].decode() for r in server.seen] == ["GET", method]
    assert server.accepted == 2


@pytest.mark.parametrize(("method", "sent"), [("PATCH", 1), ("GET", 2)])
async def test_a_connection_broken_after_the_request_left(method: str, sent: int) -> None:
    """A connection lost after the request was written: a write is not sent again, a read is."""
    seen: list[bytes] = []

    async def drop_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        if len(seen) > 1:
            writer.write(_OK)
            await writer.drain()
        # else: hang up without an answer, after reading the whole request

    raw = await Raw(drop_first).start()
    server, url = raw, raw.url
    t = transport(url)
    try:
        if method == "GET":
            assert (await t.request(method, "/x")).body == {"ok": True}
        else:
            with pytest.raises(ConnectionFailed, match="not retried: the write may have applied"):
                await t.request(method, "/x", body={"a": 1})
    finally:
        await t.close()
        server.close()
    assert len(seen) == sent


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
    clock = RecordingClock()
    t = transport(server.url, request_timeout=0.5, connect_timeout=0.5, clock=clock)
    started = clock.now()
    with pytest.raises(RequestTimeout) as info:
        await run_timers(clock, asyncio.create_task(t.request("GET", "/slow")))
    await t.close()
    assert 0.5 <= clock.now() - started <= 0.5 + DEADLINE_TICK + 1e-6
    assert f"{server.url}/slow" in str(info.value)


async def test_closed_port_fails_fast_naming_the_server() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    clock = RecordingClock()
    t = transport(url, request_timeout=3.0, connect_timeout=1.0, max_retries=2, clock=clock)
    started = clock.now()
    with pytest.raises(ConnectionFailed) as info:
        await run_timers(clock, asyncio.create_task(t.request("GET", "/api")))
    await t.close()
    assert clock.now() - started < 0.2, "only the backoffs between attempts (0.01-0.05 s)"
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
    assert explicit._proxy == "http://mine:8080"
    monkeypatch.delenv("HTTPS_PROXY")
    assert _proxy_from_environment("https://api.example:6443") is None


def test_proxy_variables_are_read_as_go_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upper case wins over lower case, empty counts as unset, no http proxy under CGI (Go)."""
    from setpoint.client.transport import _proxy_from_environment

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("REQUEST_METHOD", raising=False)
    monkeypatch.setenv("https_proxy", "http://lower:1")
    assert _proxy_from_environment("https://api.example") == "http://lower:1"
    monkeypatch.setenv("HTTPS_PROXY", "http://upper:1")
    assert _proxy_from_environment("https://api.example") == "http://upper:1"
    monkeypatch.setenv("HTTPS_PROXY", "")
    assert _proxy_from_environment("https://api.example") == "http://lower:1"
    assert _proxy_from_environment("http://api.example") is None  # https_proxy is not for http
    monkeypatch.setenv("http_proxy", "http://plain:1")
    assert _proxy_from_environment("http://api.example") == "http://plain:1"
    monkeypatch.setenv("REQUEST_METHOD", "GET")
    assert _proxy_from_environment("http://api.example") is None
    assert _proxy_from_environment("https://api.example") == "http://lower:1"
    monkeypatch.setenv("no_proxy", "api.example")
    assert _proxy_from_environment("https://api.example") is None


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


async def test_a_proxy_that_refuses_the_login_is_not_asked_again() -> None:
    """A 407 from the proxy fails the request at once, naming the fix, without retries."""
    proxy = await Proxy("connect").start()
    t = Transport(
        ClientConfig(server="https://127.0.0.1:1", token="t0k", proxy_url=proxy.url("wrong")),
        TransportOptions(backoff_base=0.01, backoff_cap=0.05),
    )
    with pytest.raises(ConnectionFailed, match="user and password") as info:
        await t.request("GET", "/api")
    await t.close()
    proxy.close()
    assert proxy.logins == ["u:wrong"]
    assert "wrong" not in str(info.value)


def test_targets_quote_what_needs_quoting_and_keep_names_as_they_are() -> None:
    """The fast path for plain names gives what urllib's quote gives, and odd names are quoted."""
    from urllib.parse import quote, urlencode

    from setpoint.client.transport import _query, quote_segment

    for name in ("web-1", "a.b_c~d", "x y", "a/b", "ü", "50%", "q?x", ""):
        assert quote_segment(name) == quote(name, safe="")
    transport = Transport(ClientConfig(server="https://api.example:6443/prefix"))
    assert transport._target("/api/v1/namespaces/ns/pods/p-1", None) == (
        "/prefix/api/v1/namespaces/ns/pods/p-1"
    )
    assert transport._target("/api/v1/pods/a b", {"labelSelector": "app in (a,b)"}) == (
        "/prefix/api/v1/pods/a%20b?" + urlencode({"labelSelector": "app in (a,b)"})
    )
    params = {"fieldManager": "ctl", "force": "true"}
    assert _query(params) == urlencode(params)
    assert _query(params) == "fieldManager=ctl&force=true"  # answered from the kept strings
    assert _query({"watch": "1", "limit": 5}) == "watch=1&limit=5"  # type: ignore[dict-item]
