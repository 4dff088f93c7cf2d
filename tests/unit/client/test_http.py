"""setpoint's HTTP/1.1 client (``setpoint.client._http``) against scripted local servers.

Framing (length, chunked, to the end of the stream, gzip, interim answers), strict refusals
of answers whose framing is ambiguous, keep-alive and the connection limit, streaming with
a read timeout, TLS verification, and the three kinds of proxy (CONNECT, absolute form,
SOCKS5).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import ssl
from collections.abc import AsyncIterator

import pytest

from setpoint.client._http import (
    DEADLINE_TICK,
    ConnectError,
    ConnectionBroken,
    HttpPool,
    ProtocolError,
    UntrustedCertificate,
)
from setpoint.server import (
    BindAddress,
    Http1Server,
    HttpRequest,
    HttpResponse,
    HttpServerOptions,
    ServerTLS,
)
from setpoint.testing.waits import eventually
from setpoint.tls.certs import CertificateAuthority
from tests._support.proxies import Proxy
from tests._support.raw_http import Raw, answering, never_answers, read_request
from tests._support.virtual_time import RecordingClock


def ok(body: bytes = b'{"ok":true}', *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"".join(
        e + b"\r\n" for e in extra
    )
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


@pytest.fixture
async def pools() -> AsyncIterator[list[HttpPool]]:
    made: list[HttpPool] = []
    yield made
    for pool in made:
        await pool.close()


def pool_for(pools: list[HttpPool], url: str, **kwargs: object) -> HttpPool:
    kwargs.setdefault("ssl_context", None)
    pool = HttpPool(url, **kwargs)  # type: ignore[arg-type]
    pools.append(pool)
    return pool


async def test_requests_in_turn_share_one_kept_alive_connection(pools: list[HttpPool]) -> None:
    """Three requests one after another travel on one connection."""
    server = await Raw(answering(ok(), ok(b"[1]"), ok(b"[2]"))).start()
    pool = pool_for(pools, server.url)
    bodies = [(await pool.request("GET", f"/{i}", [])).body for i in range(3)]
    server.close()
    assert bodies == [b'{"ok":true}', b"[1]", b"[2]"]
    assert server.accepted == 1


@pytest.mark.parametrize(
    ("answer", "body"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n"
            b"Trailer: t\r\n\r\n",
            b"abcde",
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
            % len(gzip.compress(b"zipped" * 100))
            + gzip.compress(b"zipped" * 100),
            b"zipped" * 100,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"".join(
                b"%x\r\n%s\r\n" % (len(m), m)
                for m in (gzip.compress(b"one member\n"), gzip.compress(b"and another\n"))
            )
            + b"0\r\n\r\n",
            b"one member\nand another\n",
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
        (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", b"until the end"),
    ],
    ids=["chunked", "interim-100", "gzip", "gzip-members", "no-content", "to-the-end"],
)
async def test_answers_are_framed_as_they_say(
    pools: list[HttpPool], answer: bytes, body: bytes
) -> None:
    """Each way HTTP/1.1 frames an answer's body yields the body the server meant."""
    to_the_end = (
        b"Content-Length" not in answer and b"chunked" not in answer and b"204" not in answer
    )
    server = await Raw(answering(answer, then_close=to_the_end)).start()
    pool = pool_for(pools, server.url)
    response = await pool.request("GET", "/", [])
    server.close()
    assert response.body == body


async def test_a_to_the_end_answer_is_not_reused(pools: list[HttpPool]) -> None:
    """An answer framed by the end of the stream costs its connection: the next opens another."""
    server = await Raw(answering(b"HTTP/1.0 200 OK\r\n\r\nx", then_close=True)).start()
    pool = pool_for(pools, server.url)
    assert (await pool.request("GET", "/", [])).body == b"x"
    assert (await pool.request("GET", "/", [])).body == b"x"
    server.close()
    assert server.accepted == 2


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            "can't be present",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", "Duplicate"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "transfer coding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nab", "header field char"),
        (b"HTTP/1.1 200 OK\r\n folded\r\n\r\n", "space after start line"),
        (b"HTTP/2 200\r\n\r\n", "Expected dot"),
        (b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", "HTTP version 2.0"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "status code"),
        ("HTTP/1.1 ¹00 OK\r\n\r\n".encode("latin-1"), "status code"),  # found by the fuzz test
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 0\r\n\r\n", "coding"),
    ],
)
async def test_ambiguous_answers_are_refused(
    pools: list[HttpPool], answer: bytes, reason: str
) -> None:
    """An answer whose framing could be read two ways is an error, and its connection closed."""
    server = await Raw(answering(answer)).start()
    pool = pool_for(pools, server.url)
    with pytest.raises(ProtocolError, match=reason):
        await pool.request("GET", "/", [])
    server.close()
    assert pool._open == 0, "the connection is closed, not pooled"


PROBE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nprobe"
"""A second answer sent right behind a forged one: it must never be read as that one's body."""


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nX: a\nContent-Length: 3\r\n\r\n",  # bare LF in a value
        b"HTTP/1.1 200 OK\nContent-Length: 3\r\n\r\n",  # bare LF in the status line
        b"HTTP/1.1 200 OK\r\nX\x00Y: 1\r\nContent-Length: 3\r\n\r\n",  # NUL in a name
        b"HTTP/1.1 200 OK\r\nX Y: 1\r\nContent-Length: 3\r\n\r\n",  # space in a name
        b"HTTP/1.1 200 OK\r\nX\x0bY: 1\r\nContent-Length: 3\r\n\r\n",  # VT in a name
        b"HTTP/1.1 200 OK\r\nX: a\rContent-Length: 3\r\n\r\n",  # bare CR in a value
        b"HTTP/1.1 200 O\x00K\r\nContent-Length: 3\r\n\r\n",  # NUL in the reason
    ],
    ids=[
        "lf-in-value",
        "lf-in-status-line",
        "nul-in-name",
        "space-in-name",
        "vt-in-name",
        "cr-in-value",
        "nul-in-reason",
    ],
)
async def test_forged_header_bytes_are_refused(pools: list[HttpPool], head: bytes) -> None:
    """Finding 8 of issue 27: bytes that hide a header are refused, never read around.

    ``X: a\nContent-Length: 3`` once made the length part of X's value, so the answer was
    read to the end of the stream and the next answer became its body. Each forged head
    now fails the request with ProtocolError and closes the connection.
    """
    server = await Raw(answering(head + b"abc" + PROBE, then_close=True)).start()
    pool = pool_for(pools, server.url)
    with pytest.raises(ProtocolError):
        await pool.request("GET", "/", [])
    server.close()
    assert pool._open == 0, "the connection is closed, not pooled"


async def test_a_server_that_hangs_up_without_answering(pools: list[HttpPool]) -> None:
    """No answer before the close: ConnectionBroken (the request may have been read)."""
    server = await Raw(
        answering(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", then_close=True)
    ).start()
    pool = pool_for(pools, server.url)
    with pytest.raises(ConnectionBroken, match="closed the connection"):
        await pool.request("GET", "/", [])
    server.close()


async def test_the_limit_bounds_open_connections(pools: list[HttpPool]) -> None:
    """Six requests at once through a pool of two use two connections, and all are answered."""
    release = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            await release.wait()
            writer.write(ok())
            await writer.drain()

    server = await Raw(slow).start()
    pool = pool_for(pools, server.url, limit=2)
    requests = [asyncio.create_task(pool.request("GET", f"/{i}", [])) for i in range(6)]
    await eventually(lambda: server.accepted == 2, timeout=5, interval=0.01)
    await asyncio.sleep(0.05)
    assert server.accepted == 2, "no third connection while two are busy"
    release.set()
    answers = await asyncio.gather(*requests)
    server.close()
    assert [a.status for a in answers] == [200] * 6
    assert server.most_open == 2


async def test_a_cancelled_request_gives_its_slot_back(pools: list[HttpPool]) -> None:
    """A request abandoned mid-answer closes its connection and frees its place in the pool."""

    server = await Raw(never_answers).start()
    pool = pool_for(pools, server.url, limit=1)
    for accepted in (1, 2):  # the second request gets a connection: the slot is free again
        task = asyncio.create_task(pool.request("GET", "/", []))
        await eventually(lambda: any(c._exchange for c in pool._all), timeout=5, interval=0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool._open == 0
        assert server.accepted == accepted
    server.close()


async def test_a_deadline_ends_a_request_without_an_answer(pools: list[HttpPool]) -> None:
    """A request past its deadline fails with TimeoutError and its connection is closed.

    Time is the pool's clock: the request waits while the clock stands still, is alive just
    before its deadline and fails within one deadline check (DEADLINE_TICK) after it.
    """
    clock = RecordingClock()
    server = await Raw(never_answers).start()
    pool = pool_for(pools, server.url, clock=clock)
    task = asyncio.create_task(pool.request("GET", "/", [], deadline=clock.now() + 0.2))
    await eventually(lambda: bool(pool._deadlines), timeout=5, interval=0.01)
    clock.advance(0.19)
    await asyncio.sleep(0)
    assert not task.done(), "no timeout before the deadline"
    clock.advance(DEADLINE_TICK + 0.01)
    with pytest.raises(TimeoutError):
        await task
    server.close()
    assert pool._open == 0 and not pool._deadlines


async def test_a_stream_delivers_chunks_as_they_arrive(pools: list[HttpPool]) -> None:
    """A chunked answer is read piece by piece; silence longer than read_timeout is a timeout."""
    sent = asyncio.Event()
    go_on = asyncio.Event()

    async def watch(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        sent.set()
        await go_on.wait()
        writer.write(b"6\r\nsecond\r\n")
        await writer.drain()
        await reader.read()

    clock = RecordingClock()
    server = await Raw(watch).start()
    pool = pool_for(pools, server.url, clock=clock)
    stream = await pool.stream("GET", "/watch", [], read_timeout=30)
    chunks = stream.chunks()
    assert await anext(chunks) == b"first"
    clock.advance(29)  # quiet, but not for read_timeout
    go_on.set()
    assert await anext(chunks) == b"second"
    clock.advance(29)  # 29 s since "second" arrived, not since "first"
    third = asyncio.ensure_future(anext(chunks))
    await asyncio.sleep(0)
    assert not third.done()
    clock.advance(1)
    with pytest.raises(TimeoutError):
        await third
    stream.close()
    server.close()
    assert pool._open == 0, "a stream stopped mid-body closes its connection"


async def test_a_large_stream_arrives_whole(pools: list[HttpPool]) -> None:
    """More than the high-water mark of body bytes pauses and resumes reading, losing nothing."""
    blob = bytes(range(256)) * (40 * 1024)  # 10 MiB

    async def big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(blob))
        for start in range(0, len(blob), 1 << 20):
            writer.write(blob[start : start + (1 << 20)])
            await writer.drain()
        await reader.read()

    server = await Raw(big).start()
    pool = pool_for(pools, server.url)
    stream = await pool.stream("GET", "/", [], read_timeout=5)
    await eventually(lambda: stream._connection._paused, timeout=10, interval=0.01)
    received = await stream.read()
    stream.close()
    server.close()
    assert received == blob
    assert pool._open == 1, "a stream read to its end leaves its connection pooled"


def test_a_header_with_a_line_break_is_refused() -> None:
    """A credential holding CR or LF would inject headers: refused before anything is sent."""
    pool = HttpPool("http://127.0.0.1:1", ssl_context=None)
    with pytest.raises(ValueError, match=r"Authorization header .* line break"):
        pool.head_for("GET", "/", [("Authorization", "Bearer x\r\nX-Evil: 1")], None)


async def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse.text(200, f"hello {request.path}\n")


async def https_server(ca: CertificateAuthority) -> tuple[Http1Server, int]:
    server = Http1Server(
        "test-https",
        BindAddress("127.0.0.1", 0),
        hello,
        options=HttpServerOptions(tls=ServerTLS(ca.serving_cert("api", ("127.0.0.1",)))),
    )
    await server.start()
    assert server.address is not None
    return server, server.address[1]


async def test_tls_verifies_the_server(pools: list[HttpPool]) -> None:
    """A server certificate signed by the trusted CA is accepted; one from another CA is not."""
    ca = CertificateAuthority("test-ca")
    server, port = await https_server(ca)
    trusting = ssl.create_default_context(cadata=ca.cert_pem.decode())
    other = ssl.create_default_context(cadata=CertificateAuthority("other").cert_pem.decode())
    try:
        good = pool_for(pools, f"https://127.0.0.1:{port}", ssl_context=trusting)
        assert (await good.request("GET", "/tls", [])).body == b"hello /tls\n"
        bad = pool_for(pools, f"https://127.0.0.1:{port}", ssl_context=other)
        with pytest.raises(UntrustedCertificate) as info:
            await bad.request("GET", "/tls", [])
        assert info.value.certificate_error.verify_message
    finally:
        await server.stop(timeout=1)


async def test_https_through_a_connect_proxy(pools: list[HttpPool]) -> None:
    """An https server through an HTTP proxy: CONNECT with the proxy URL's credentials, then TLS."""
    ca = CertificateAuthority("test-ca")
    server, port = await https_server(ca)
    proxy = await Proxy("connect").start()
    trusting = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        pool = pool_for(pools, f"https://127.0.0.1:{port}", ssl_context=trusting, proxy=proxy.url())
        assert (await pool.request("GET", "/tunnelled", [])).body == b"hello /tunnelled\n"
        wrong = pool_for(
            pools, f"https://127.0.0.1:{port}", ssl_context=trusting, proxy=proxy.url("wrong")
        )
        with pytest.raises(ConnectError, match=r"407 .*user and password"):
            await wrong.request("GET", "/", [])
    finally:
        proxy.close()
        await server.stop(timeout=1)
    assert proxy.tunnels == [("127.0.0.1", port)]
    assert proxy.logins == ["u:p", "u:wrong"]


async def test_http_through_a_proxy_names_the_whole_url(pools: list[HttpPool]) -> None:
    """A plain-http server behind an HTTP proxy gets requests in absolute form, with credentials."""
    seen: list[bytes] = []

    async def forward_proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(ok())
        await writer.drain()
        await reader.read()

    proxy = await Raw(forward_proxy).start()
    pool = pool_for(pools, "http://api.example:8080", proxy=f"http://u:p@127.0.0.1:{proxy.port}")
    assert (await pool.request("GET", "/api?x=1", [])).status == 200
    proxy.close()
    assert seen[0].startswith(b"GET http://api.example:8080/api?x=1 HTTP/1.1\r\n")
    assert b"Host: api.example:8080\r\n" in seen[0]
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"u:p") in seen[0]


async def test_a_socks5_proxy_with_a_user_and_password(pools: list[HttpPool]) -> None:
    """socks5:// proxies (kubeconfig's proxy-url allows them): RFC 1929 login, then CONNECT.

    The server's name goes to the proxy unresolved; a wrong password is a ConnectError.
    """
    target = await Raw(answering(ok(b"[42]"))).start()
    proxy = await Proxy(
        "socks5", user="me", password="secret", hosts={"target.example": "127.0.0.1"}
    ).start()
    url = f"http://target.example:{target.port}"
    pool = pool_for(pools, url, proxy=proxy.url())
    assert (await pool.request("GET", "/", [])).body == b"[42]"
    wrong = pool_for(pools, url, proxy=proxy.url("nope"))
    with pytest.raises(ConnectError, match="refused the user name and password"):
        await wrong.request("GET", "/", [])
    proxy.close()
    target.close()
    assert proxy.tunnels == [("target.example", target.port)]
    assert proxy.logins == ["me:secret", "me:nope"]


def test_an_unsupported_proxy_is_named() -> None:
    """A proxy scheme the client cannot speak is a clear error, without the proxy's password."""
    with pytest.raises(ValueError, match="only http://, https:// and socks5://") as info:
        HttpPool("https://api:6443", ssl_context=None, proxy="socks4://u:pw@proxy:1080")
    assert "pw" not in str(info.value)


async def test_a_pooled_connection_on_a_high_descriptor_is_reused(pools: list[HttpPool]) -> None:
    """The check of an idle connection works past descriptor 1023 (where select() cannot look).

    A process with many files or sockets open gets high descriptor numbers; the check must
    not call such a connection closed, or every request would open a new one.
    """
    import os

    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server = await Raw(answering(ok(), ok())).start()
        pool = pool_for(pools, server.url)
        await pool.request("GET", "/", [])
        (connection,) = pool._idle
        assert connection.transport is not None
        assert connection.transport.get_extra_info("socket").fileno() > 1023
        await pool.request("GET", "/", [])
        server.close()
        assert server.accepted == 1
    finally:
        for fd in filler:
            os.close(fd)


async def test_a_head_answer_has_no_body_and_closes_its_connection(pools: list[HttpPool]) -> None:
    """A HEAD answer's Content-Length announces no body: the answer ends with its head.

    httptools cannot tell llhttp that an answer to HEAD has no body, so the connection is
    closed after it rather than parsed on: the next request opens another.
    """
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
    server = await Raw(answering(head)).start()
    pool = pool_for(pools, server.url)
    response = await pool.request("HEAD", "/", [])
    assert (response.status, response.body) == (200, b"")
    assert response.headers["content-length"] == "11"
    assert pool._open == 0, "not pooled"
    server.close()
