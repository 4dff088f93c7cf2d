"""The HTTP/1.1 protocol of Http1Server: framing, strict parsing, limits (decision 0012).

Raw sockets send exactly the bytes under test (an HTTP client library would refuse to send
most of them), and read what the server answers. test_server_http1_fuzz.py throws
arbitrary and mutated requests at a live server.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from setpoint.server import BindAddress, Http1Server, HttpRequest, HttpResponse, HttpServerOptions
from setpoint.server._http1 import MAX_HEADERS, MAX_LINE

LOCAL = BindAddress("127.0.0.1", 0)


async def echo(request: HttpRequest) -> HttpResponse:
    """Answers with what it saw: method, path, query, body length and one header."""
    text = (
        f"{request.method} {request.path} {sorted(request.query.items())} "
        f"len={len(request.body)} body={request.body[:20]!r} "
        f"x-test={request.headers.get('X-Test')}"
    )
    return HttpResponse.text(200, text)


async def exchange(raw: bytes, *, options: HttpServerOptions | None = None) -> bytes:
    """Send ``raw`` on one connection to a fresh server; everything it answers until close."""
    server = Http1Server("test-server", LOCAL, echo, options=options)
    await server.start()
    try:
        assert server.address is not None
        reader, writer = await asyncio.open_connection(*server.address)
        writer.write(raw)
        writer.write_eof()  # all sent: the server answers what is complete, then closes
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
        writer.close()
        return answer
    finally:
        await server.stop(1.0)


def statuses(answer: bytes) -> list[int]:
    """The status codes of every response in ``answer``, in order (status lines can follow
    a body directly: no separator comes between pipelined answers)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)]


CLOSE = b"Connection: close\r\n"


async def test_a_request_is_answered_with_the_hardening_headers() -> None:
    """A plain GET: 200, Content-Length, nosniff, no-store, Date, and the parsed request."""
    answer = await exchange(
        b"GET /a%20b?x=1&x=2&y HTTP/1.1\r\nHost: h\r\nX-TEST: v\r\n" + CLOSE + b"\r\n"
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"X-Content-Type-Options: nosniff" in head
    assert b"Cache-Control: no-store" in head
    assert b"Date: " in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert body.startswith(b"GET /a b [('x', ('1', '2')), ('y', ('',))] len=0")
    assert body.endswith(b"x-test=v")


async def test_keep_alive_and_pipelined_requests_are_answered_in_order() -> None:
    """Three requests in one write, on one connection: three answers, in order."""
    raw = (
        b"POST /1 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /2 HTTP/1.1\r\nHost: h\r\n\r\n"
        b"POST /3 HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n" + CLOSE + b"\r\nz"
    )
    answer = await exchange(raw)
    assert statuses(answer) == [200, 200, 200]
    assert answer.index(b"POST /1") < answer.index(b"GET /2") < answer.index(b"POST /3")
    assert b"body=b'abc'" in answer
    assert b"body=b'z'" in answer


async def test_a_chunked_body_is_reassembled() -> None:
    """Transfer-Encoding: chunked, with an extension and a trailer: the handler gets the body."""
    raw = (
        b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n" + CLOSE + b"\r\n"
        b"3;ext=1\r\nabc\r\n"
        b"A\r\n0123456789\r\n"
        b"0\r\nX-Trailer: t\r\n\r\n"
    )
    answer = await exchange(raw)
    assert statuses(answer) == [200]
    assert b"len=13 body=b'abc0123456789'" in answer


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        # request smuggling: both framings, two lengths, an unknown coding, a bad length
        (
            b"POST / HTTP/1.1\r\nHost: h\r\n"
            b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400),
        # whitespace before the colon, a folded line, a control character
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\x00\r\n\r\n", 400),
        # the request line
        (b"GET /\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\n\r\n", 400),
        (b"G(T / HTTP/1.1\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET nohost HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        # a bad chunk
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n", 400),
    ],
)
async def test_malformed_requests_get_an_error_and_a_close(raw: bytes, status: int) -> None:
    """Each ambiguity or malformation: its status code, then the server closes."""
    answer = await exchange(raw)
    assert statuses(answer) == [status], answer
    assert b"Connection: close" in answer


async def test_limits_on_lines_headers_and_bodies() -> None:
    """A long request line 414, a long header line or too many headers 431, a big body 413."""
    long_target = b"/" + b"a" * (MAX_LINE + 10)
    assert statuses(await exchange(b"GET " + long_target + b" HTTP/1.1\r\n\r\n")) == [414]
    long_header = b"X-A: " + b"b" * (MAX_LINE + 10)
    assert statuses(await exchange(b"GET / HTTP/1.1\r\n" + long_header + b"\r\n\r\n")) == [431]
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
    assert statuses(await exchange(b"GET / HTTP/1.1\r\n" + many + b"\r\n")) == [431]
    small = HttpServerOptions(max_body_size=10)
    declared = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n" + b"x" * 11
    assert statuses(await exchange(declared, options=small)) == [413]
    chunked = (
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"6\r\nabcdef\r\n6\r\nabcdef\r\n"
    )
    assert statuses(await exchange(chunked, options=small)) == [413]


async def test_expect_100_continue_and_head_and_http_1_0() -> None:
    """Expect: 100-continue gets the interim answer; HEAD gets no body; HTTP/1.0 closes."""
    server = Http1Server("test-server", LOCAL, echo)
    await server.start()
    try:
        assert server.address is not None
        reader, writer = await asyncio.open_connection(*server.address)
        writer.write(
            b"POST /e HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        async with asyncio.timeout(10):
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            writer.write(b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: " in head
            writer.write(b"GET /old HTTP/1.0\r\n\r\n")
            rest = await reader.read()  # HEAD sent no body; HTTP/1.0 then closed the connection
        assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(b"len=0 body=b'' x-test=None")
        writer.close()
    finally:
        await server.stop(1.0)


async def test_a_refused_body_is_drained_so_the_client_reads_the_refusal() -> None:
    """A client still sending a body over the limit reads the 413 instead of a reset."""
    server = Http1Server("test-server", LOCAL, echo, options=HttpServerOptions(max_body_size=1024))
    await server.start()
    try:
        assert server.address is not None
        reader, writer = await asyncio.open_connection(*server.address)
        size = 4 * 1024 * 1024
        writer.write(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        async with asyncio.timeout(10):
            await writer.drain()
            answer = await reader.read()
        assert statuses(answer) == [413]
        writer.close()
    finally:
        await server.stop(1.0)


async def test_stop_lets_a_request_in_flight_finish() -> None:
    """stop() closes idle connections at once and answers the request being handled."""
    release, entered = asyncio.Event(), asyncio.Event()

    async def slow(request: HttpRequest) -> HttpResponse:
        entered.set()
        await release.wait()
        return HttpResponse.text(200, "late")

    server = Http1Server("test-server", LOCAL, slow, options=HttpServerOptions(shutdown_timeout=5))
    await server.start()
    assert server.address is not None
    idle_reader, idle_writer = await asyncio.open_connection(*server.address)
    reader, writer = await asyncio.open_connection(*server.address)
    writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(10):
        await entered.wait()
    assert server.open_connections == 2
    stopping = asyncio.create_task(server.stop(5.0))
    async with asyncio.timeout(10):
        assert await idle_reader.read() == b""  # closed at once
        release.set()
        answer = await reader.read()
        await stopping
    assert statuses(answer) == [200] and answer.endswith(b"late")
    assert b"Connection: close" in answer
    idle_writer.close()
    writer.close()


async def test_headers_are_case_insensitive_and_repeated_values_join() -> None:
    """The handler's headers: any case finds a header; a repeated one reads as its values
    joined; trailing whitespace is not part of a value."""
    seen: list[HttpRequest] = []

    async def record(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse.text(200, "ok")

    server = Http1Server("test-server", LOCAL, record)
    await server.start()
    try:
        assert server.address is not None
        reader, writer = await asyncio.open_connection(*server.address)
        writer.write(
            b"GET / HTTP/1.1\r\nHost: h\r\nX-Many: a\r\nx-many:  b \t\r\n"
            b"Content-Type: t\r\nConnection: close\r\n\r\n"
        )
        async with asyncio.timeout(10):
            assert statuses(await reader.read()) == [200]
        writer.close()
    finally:
        await server.stop(1.0)
    [request] = seen
    headers = request.headers
    assert headers["x-many"] == headers["X-MANY"] == "a, b"
    assert "content-type" in headers and "nope" not in headers
    assert dict(headers) == {
        "Host": "h",
        "X-Many": "a, b",
        "Content-Type": "t",
        "Connection": "close",
    }


CHUNKED = b"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
PROBE = b"GET /probe HTTP/1.1\r\nHost: h\r\n\r\n"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(CHUNKED + b" 5\r\nhello\r\n0\r\n\r\n" + PROBE, id="space-before-chunk-size"),
        pytest.param(CHUNKED + b"5;a\nb\r\nhello\r\n0\r\n\r\n" + PROBE, id="bare-lf-in-extension"),
        pytest.param(
            CHUNKED + b"5\r\nhello\r\n0\r\nX: t\nY: u\r\n\r\n" + PROBE, id="bare-lf-trailer"
        ),
        pytest.param(CHUNKED + b"5\r\nhello\r\n0\r\ngarbage\r\n\r\n" + PROBE, id="garbage-trailer"),
        pytest.param(
            CHUNKED + b"5\r\nhello\r\n0\r\n\nGET /hidden HTTP/1.1\r\nHost: h\r\n\r\n" + PROBE,
            id="request-hidden-as-trailers",
        ),
        pytest.param(b"GET /nohost HTTP/1.1\r\n\r\n" + PROBE, id="http-1.1-without-host"),
    ],
)
async def test_issue_27_finding_7_lenient_inputs_are_refused(raw: bytes) -> None:
    """Inputs llhttp and h11 both refuse get 400 and a close: no handler sees any of them or
    what follows (after ``0\\r\\n\\n`` the next request must not be swallowed as trailers)."""
    answer = await exchange(raw)
    assert statuses(answer) == [400], answer
    assert b"Connection: close" in answer
    assert b"/hidden" not in answer and b"/probe" not in answer and b"/nohost" not in answer


async def test_far_pipelined_requests_are_all_answered_in_order() -> None:
    """3,000 requests in one write (about 300 KiB: past the 256 KiB at which the connection
    stops reading while it answers): every one is answered, in order, on one connection."""
    raw = b"".join(
        b"GET /%d HTTP/1.1\r\nHost: h\r\nX-Test: %d\r\n\r\n" % (i, i) for i in range(3000)
    )
    answer = await exchange(raw + b"GET /last HTTP/1.1\r\nHost: h\r\n" + CLOSE + b"\r\n")
    assert statuses(answer) == [200] * 3001
    seen = re.findall(rb"GET /(\d+|last) ", answer)
    assert seen == [b"%d" % i for i in range(3000)] + [b"last"]
