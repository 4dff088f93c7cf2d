"""Large answers are written in pieces, each from its own loop callback, under flow control.

asyncio's TLS transport encrypts what it is given in the callback that writes it: an answer
of 22 MB (a 16 MiB ConversionReview converted) written at once held the event loop for
100-200 ms (issue 27, finding 2; bench/conversion/loop_lag.py). The connection writes an
answer larger than ``WRITE_PIECE`` as slices of it, one per loop callback, and only while
the transport has not paused writing (``pause_writing``/``resume_writing``), so a slow
reader does not make the server buffer (or encrypt) the whole answer either.

Structural tests on a fake transport (which writes, when, what the connection did between
them) and a real TLS connection for the bytes end to end. No wall time is measured.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from setpoint.api.clock import Clock, LoopClock, ManualClock
from setpoint.server import (
    BindAddress,
    Http1Server,
    HttpRequest,
    HttpResponse,
    HttpServerOptions,
    ServerTLS,
)
from setpoint.server._http1 import (
    WRITE_PIECE,
    ConnectionGuard,
    ConnectionSettings,
    new_connection,
)
from setpoint.tls.certs import CertificateAuthority
from tests._support.virtual_time import settle

BIG = bytes(range(256)) * (12 * WRITE_PIECE // 256 + 7)
"""An answer of 12 pieces and a bit, every byte position recognisable."""


class Ticker:
    """Counts loop iterations: a callback that reschedules itself with ``call_soon``."""

    def __init__(self) -> None:
        self.ticks = 0
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


class Transport(asyncio.Transport):
    """Records every write (its size and the ticker's count then); pauses like a real one.

    With ``high_water`` set, it calls the protocol's ``pause_writing`` once more than that
    many bytes wait unread, as asyncio's transports do; :meth:`read` plays the client
    reading them, and resumes the protocol once they fall to ``high_water // 4``.
    """

    def __init__(self, ticker: Ticker, high_water: int | None = None) -> None:
        super().__init__()
        self.ticker = ticker
        self.high_water = high_water
        self.written = bytearray()
        self.writes: list[tuple[int, int]] = []
        """(bytes, ticker count) per write call."""
        self.unread = 0
        self.paused_writing = False
        self.closed = False
        self.protocol: Any = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "written after close"
        self.written += data
        self.writes.append((len(data), self.ticker.ticks))
        self.unread += len(data)
        high = self.high_water
        if high is not None and self.unread > high and not self.paused_writing:
            self.paused_writing = True
            self.protocol.pause_writing()

    def read(self, size: int) -> None:
        """The client reads ``size`` bytes; writing resumes below the low-water mark."""
        self.unread = max(0, self.unread - size)
        assert self.high_water is not None
        if self.paused_writing and self.unread <= self.high_water // 4:
            self.paused_writing = False
            self.protocol.resume_writing()

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


def connection(
    handler: Handler,
    transport: Transport,
    *,
    clock: Clock | None = None,
    idle_timeout: float = 30.0,
) -> tuple[Any, ConnectionGuard]:
    """One server connection on ``transport``, made as the server makes it."""
    guard = ConnectionGuard("answers", max_connections=4, body_budget=1 << 20)
    settings = ConnectionSettings(
        guard=guard,
        serve=handler,
        tls=None,
        max_body=1 << 20,
        body_limits={},
        clock=clock or LoopClock(),
        header_timeout=30.0,
        idle_timeout=idle_timeout,
        body_timeout=30.0,
    )
    protocol = new_connection(settings)()
    transport.protocol = protocol
    protocol.connection_made(transport)
    return protocol, guard


async def big(request: HttpRequest) -> HttpResponse:
    """``BIG`` for /big, a short text for anything else."""
    if request.path == "/big":
        return HttpResponse(200, BIG, "application/octet-stream")
    return HttpResponse.text(200, f"small {request.path}")


def answers(raw: bytes | bytearray) -> list[tuple[int, bytes]]:
    """Each answer's status and body, in order (parsed by Content-Length)."""
    out: list[tuple[int, bytes]] = []
    data = bytes(raw)
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        found = re.search(rb"Content-Length: (\d+)", head)
        assert found is not None, head
        length = int(found[1])
        out.append((status, rest[:length]))
        data = rest[length:]
    return out


async def until(check: Callable[[], bool], rounds: int = 5000) -> None:
    """Let the loop run until ``check`` holds (a bounded number of iterations, no time)."""
    for _ in range(rounds):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


GET = b"GET %s HTTP/1.1\r\nHost: h\r\n%s\r\n"


async def test_a_large_answer_is_written_in_pieces_one_per_loop_callback() -> None:
    """12+ pieces of at most WRITE_PIECE bytes, each written after the loop ran another
    callback (the ticker moved between any two), and the body arrives whole and in order.
    Before: one write of head + body, in the callback that finished the handler."""
    ticker = Ticker()
    ticker.start()
    transport = Transport(ticker)
    protocol, _ = connection(big, transport)
    protocol.data_received(GET % (b"/big", b""))
    await until(lambda: len(transport.written) >= len(BIG))
    ticker.stop()
    ((status, body),) = answers(transport.written)
    assert status == 200 and body == BIG
    body_writes = transport.writes[1:]  # the head goes first, alone
    assert len(body_writes) >= len(BIG) // WRITE_PIECE
    assert all(size <= WRITE_PIECE for size, _ in body_writes)
    ticks = [tick for _, tick in body_writes]
    assert all(b > a for a, b in itertools.pairwise(ticks)), ticks


async def test_a_small_answer_keeps_the_one_write_path() -> None:
    ticker = Ticker()
    transport = Transport(ticker)
    protocol, _ = connection(big, transport)
    protocol.data_received(GET % (b"/small", b""))
    await until(lambda: bool(transport.written))
    await settle()
    assert len(transport.writes) == 1
    assert answers(transport.written) == [(200, b"small /small")]


async def test_a_slow_reader_pauses_the_answer_until_it_reads() -> None:
    """While the transport has paused writing, no piece is written however long the loop
    runs; each read below the low-water mark lets the next piece out. The server never holds
    more than a piece past the high-water mark in the transport. Before: the whole answer
    was handed to the transport at once."""
    ticker = Ticker()
    high = 2 * WRITE_PIECE
    transport = Transport(ticker, high_water=high)
    protocol, _ = connection(big, transport)
    protocol.data_received(GET % (b"/big", b""))
    await until(lambda: transport.paused_writing)
    written = len(transport.written)
    assert written < len(BIG)
    await settle(200)
    assert len(transport.written) == written, "written while paused"
    assert transport.unread <= high + WRITE_PIECE
    while len(transport.written) < len(BIG):
        transport.read(transport.unread)
        await until(lambda: transport.paused_writing or len(transport.written) >= len(BIG))
        assert transport.unread <= high + WRITE_PIECE
    ((status, body),) = answers(transport.written)
    assert status == 200 and body == BIG


async def test_the_next_pipelined_request_waits_for_the_last_piece() -> None:
    """Two requests in one read: the second is handled only once the first's last piece is
    written; both answers arrive whole, in order, on the kept-alive connection."""
    ticker = Ticker()
    transport = Transport(ticker)
    handled_after: list[int] = []

    async def handler(request: HttpRequest) -> HttpResponse:
        handled_after.append(len(transport.written))
        return await big(request)

    protocol, _ = connection(handler, transport)
    protocol.data_received(GET % (b"/big", b"") + GET % (b"/next", b""))
    await until(lambda: len(handled_after) == 2 and len(transport.written) > len(BIG))
    await settle()
    assert handled_after[0] == 0
    assert handled_after[1] > len(BIG), "the second request was handled mid-answer"
    assert answers(transport.written) == [(200, BIG), (200, b"small /next")]
    assert not transport.closed


async def test_connection_close_closes_after_the_last_piece() -> None:
    """``Connection: close``: the connection closes once the last piece is written, not
    before (the fake transport refuses a write after close)."""
    ticker = Ticker()
    transport = Transport(ticker)
    protocol, guard = connection(big, transport)
    protocol.data_received(GET % (b"/big", b"Connection: close\r\n"))
    await until(lambda: transport.closed)
    ((status, body),) = answers(transport.written)
    assert status == 200 and body == BIG
    await until(lambda: not guard.open)


async def test_a_reader_that_never_reads_is_closed_after_the_idle_timeout() -> None:
    """Paused with pieces left and no read for ``idle_timeout`` (on the server's clock): the
    connection is aborted and counted, never held forever with its answer."""
    clock = ManualClock()
    ticker = Ticker()
    transport = Transport(ticker, high_water=WRITE_PIECE)
    protocol, guard = connection(big, transport, clock=clock, idle_timeout=90.0)
    protocol.data_received(GET % (b"/big", b""))
    await until(lambda: transport.paused_writing)
    clock.advance(89.0)
    await settle()
    assert not transport.closed
    transport.read(transport.unread)  # progress: the deadline starts again
    await until(lambda: transport.paused_writing)
    clock.advance(89.0)
    await settle()
    assert not transport.closed
    clock.advance(2.0)
    await settle()
    assert transport.closed
    assert guard.timed_out == 1
    assert len(transport.written) < len(BIG)


async def test_a_transport_paused_before_a_large_answer_holds_it_and_times_out() -> None:
    """The transport paused on a small answer and the client pipelined a large request: no
    piece goes out until it reads, and the idle timeout still applies."""
    clock = ManualClock()
    transport = Transport(Ticker(), high_water=64)
    protocol, guard = connection(big, transport, clock=clock, idle_timeout=90.0)
    protocol.data_received(GET % (b"/small", b"") + GET % (b"/big", b""))
    await until(lambda: len(answers_heads(transport.written)) == 2)
    await settle(50)
    assert transport.paused_writing
    assert len(transport.written) < 1024, "a piece was written while paused"
    clock.advance(91.0)
    await settle()
    assert transport.closed and guard.timed_out == 1


def answers_heads(raw: bytes | bytearray) -> list[bytes]:
    """The status lines written so far."""
    return re.findall(rb"HTTP/1\.1 \d{3} ", bytes(raw))


async def test_an_abort_mid_answer_stops_the_pieces() -> None:
    ticker = Ticker()
    transport = Transport(ticker, high_water=WRITE_PIECE)
    protocol, _ = connection(big, transport)
    protocol.data_received(GET % (b"/big", b""))
    await until(lambda: transport.paused_writing)
    protocol.abort()
    transport.read(transport.unread)  # a late resume after the abort writes nothing
    await settle(50)
    assert transport.closed
    assert len(transport.written) < len(BIG)


# --------------------------------------------------------------------------- over TLS


@pytest.fixture
def tls() -> tuple[ServerTLS, ssl.SSLContext]:
    ca = CertificateAuthority("answers-test-ca")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    return ServerTLS(ca.serving_cert("answers", ("127.0.0.1",))), client


async def test_large_pipelined_answers_over_tls_to_a_slow_reader(
    tls: tuple[ServerTLS, ssl.SSLContext],
) -> None:
    """Over real TLS, a client that reads 16 KiB at a time gets both large answers byte for
    byte, then the small one, in order, then the close it asked for."""
    server_tls, client = tls
    server = Http1Server(
        "answers", BindAddress("127.0.0.1", 0), big, options=HttpServerOptions(tls=server_tls)
    )
    await server.start()
    try:
        assert server.address is not None
        reader, writer = await asyncio.open_connection(*server.address, ssl=client)
        writer.write(
            GET % (b"/big", b"") + GET % (b"/big", b"") + GET % (b"/last", b"Connection: close\r\n")
        )
        await writer.drain()
        received = bytearray()
        async with asyncio.timeout(60):
            while chunk := await reader.read(16 * 1024):
                received += chunk
                await asyncio.sleep(0)
        writer.close()
        assert answers(received) == [(200, BIG), (200, BIG), (200, b"small /last")]
    finally:
        await server.stop(1.0)
