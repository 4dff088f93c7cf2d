"""Fuzzed answers fed to the client's HTTP/1.1 connection (decision 0016).

Mutated good answers (bytes flipped, cut, repeated, inserted) and random bytes, delivered in
random pieces and followed or not by the end of the stream: the request ends with an answer
or with ``ConnectionBroken`` (``ProtocolError`` included), never another exception, and an
answer that ended cleanly leaves nothing unread behind it on a connection kept for reuse.
No sockets: the bytes go straight into the protocol, so thousands of examples run in
seconds. SETPOINT_FUZZ_EXAMPLES sets the number of examples (small in CI; ``make fuzz``
runs thousands).
"""

from __future__ import annotations

import asyncio
import gzip
import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from setpoint.client._http import ConnectionBroken, HttpPool, RawResponse, _Connection, _Exchange
from tests._support.mutations import mutated

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

GOOD = [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\nuntil the end",
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 23\r\n\r\n"
    + gzip.compress(b"abc", mtime=0),
]


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A good answer with bytes flipped, cut, repeated or inserted, or any bytes at all."""
    return mutated(draw, GOOD)


class _Transport(asyncio.Transport):
    """Records what the protocol does to its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@settings(max_examples=EXAMPLES, deadline=None)
@given(answer=answers(), cuts=st.lists(st.integers(1, 40), max_size=6), eof=st.booleans())
def test_any_answer_ends_in_a_response_or_connection_broken(
    answer: bytes, cuts: list[int], eof: bool
) -> None:
    """Whatever the server sends, the request ends typed: a response or ConnectionBroken."""
    loop = asyncio.new_event_loop()
    try:
        connection = _Connection(HttpPool("http://127.0.0.1:1", ssl_context=None))
        transport = _Transport()
        connection.connection_made(transport)
        exchange = _Exchange(loop, streaming=False, head_only=False)
        connection.send(b"GET / HTTP/1.1\r\n\r\n", exchange)
        rest = answer
        for size in cuts:
            if not rest or transport.closing:
                break
            connection.data_received(rest[:size])
            rest = rest[size:]
        if rest and not transport.closing:
            connection.data_received(rest)
        if eof and not transport.closing:
            connection.eof_received()
            connection.connection_lost(None)
        if not exchange.done.done():
            # Incomplete and the stream still open: the request would wait for more (its
            # deadline ends it); closing the connection must end it typed.
            connection.abort()
        assert exchange.done.done()
        error = exchange.done.exception()
        if error is not None:
            assert isinstance(error, ConnectionBroken), repr(error)
        else:
            assert isinstance(exchange.done.result(), RawResponse)
            if connection.usable:
                assert not connection._buffer, "a reused connection starts with nothing unread"
    finally:
        loop.close()
