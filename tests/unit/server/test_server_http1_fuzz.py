"""Fuzzed requests against a live Http1Server (decision 0012).

Mutated good requests (bytes flipped, cut, repeated, inserted) and random bytes, with or
without the client half-closing: each gets valid status lines and/or a close within the
server's deadlines, never a 500 or a hang, and the server keeps serving.
SETPOINT_FUZZ_EXAMPLES sets the number of examples (small in CI; ``make fuzz`` runs
thousands).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.server import Http1Server, HttpServerOptions
from tests._support.mutations import mutated

from .test_server_http1 import LOCAL, echo, statuses

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "150"))


GOOD = [
    b"GET /a?b=c HTTP/1.1\r\nHost: h\r\n\r\n",
    b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
]


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A good request with bytes flipped, cut, repeated or inserted, or any bytes at all."""
    return mutated(draw, GOOD)


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[tuple[Http1Server, asyncio.AbstractEventLoop]]:
    """One server on its own loop thread, with short deadlines, for every fuzzed request."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzzed-http1", daemon=True)
    thread.start()
    options = HttpServerOptions(read_header_timeout=0.2, body_timeout=0.2, idle_timeout=0.2)
    server = Http1Server("fuzz-server", LOCAL, echo, options=options)
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    yield server, loop
    asyncio.run_coroutine_threadsafe(server.stop(1.0), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=requests(), half_close=st.integers(0, 9).map(lambda n: n > 0))
def test_fuzzed_requests_get_an_answer_or_a_close(
    fuzz_server: tuple[Http1Server, asyncio.AbstractEventLoop], raw: bytes, half_close: bool
) -> None:
    """Any bytes: the server answers (valid status lines) and/or closes within its deadlines."""
    server, _ = fuzz_server
    assert server.address is not None

    async def send() -> bytes:
        reader, writer = await asyncio.open_connection(*server.address)  # type: ignore[misc]
        writer.write(raw)
        if half_close:
            writer.write_eof()  # else the server's deadlines (0.2 s) must end it
        await writer.drain()
        async with asyncio.timeout(5):  # deadlines are 0.2 s: a hang fails here
            try:
                answer = await reader.read()
            except ConnectionError:
                answer = b""
        writer.close()
        return answer

    answer = asyncio.run(send())
    if answer:
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]
        assert all(100 <= code <= 599 for code in statuses(answer))
        assert 500 not in statuses(answer), answer[:300]
