"""The client's caps on answer bodies (issue 27, finding 4).

A server that controls an answer (a kubeconfig's server or proxy URL in multi-cluster mode,
or a compromised API server) once made the client inflate 254 KiB of gzip into hundreds of
MiB, and join many gzip members in quadratic time, all on the event loop. Every answer's
body is now capped, as sent and once decompressed, separately for lists and single objects
(``TransportOptions.max_list_body``, ``max_object_body``) and for one watch event
(``ClientOptions.max_watch_line``); decompression stops at the cap, and its work is linear
in the bytes received however many members they hold.
"""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint.client import ClientConfig, TransportOptions
from setpoint.client._http import HttpPool
from setpoint.client._watchdecode import WatchDecoder
from setpoint.client.errors import MalformedResponse, ResponseTooLarge
from setpoint.client.transport import Transport
from tests._support.raw_http import Raw, read_request
from tests.unit.client._http_drive import setpoint_reads

MiB = 1024 * 1024


def _bomb(inflated: int) -> bytes:
    """One gzip member of ``inflated`` zero bytes (deflate reaches ~1030:1 on zeros)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    parts = [packer.compress(block) for _ in range(inflated // MiB)]
    parts.append(packer.flush())
    return b"".join(parts)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """254 KiB of gzip that inflates to 254 MiB: the review's 254 KiB (which cost +781 MiB
    of memory through the old client's copies)."""
    data = _bomb(254 * MiB)
    assert 240 * 1024 < len(data) < 270 * 1024
    return data


async def _serve(answer_head: bytes, body: bytes) -> Raw:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer_head)
        for start in range(0, len(body), 64 * 1024):
            writer.write(body[start : start + 64 * 1024])
            await writer.drain()
        await reader.read()

    return await Raw(script).start()


@pytest.fixture
async def transports() -> AsyncIterator[list[Transport]]:
    made: list[Transport] = []
    yield made
    for transport in made:
        await transport.close()


def _transport(made: list[Transport], url: str, **options: Any) -> Transport:
    transport = Transport(ClientConfig(server=url, token="t"), TransportOptions(**options))
    made.append(transport)
    return transport


async def test_a_gzip_bomb_fails_at_the_cap_with_bounded_memory(
    bomb: bytes, transports: list[Transport]
) -> None:
    """254 KiB inflating to 254 MiB: the request fails with ResponseTooLarge at the object cap.

    The error names the request, the limit and the setting that raises it; the client never
    holds much more than the cap (16 MiB by default for one object).
    """
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
    server = await _serve(head + b"Content-Length: %d\r\n\r\n" % len(bomb), bomb)
    transport = _transport(transports, server.url)
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLarge) as info:
            await transport.request("GET", "/api/v1/namespaces/d/configmaps/x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        server.close()
    error = info.value
    assert isinstance(error, MalformedResponse)
    assert error.limit == TransportOptions().max_object_body == 16 * MiB
    assert error.setting == "TransportOptions.max_object_body"
    message = str(error)
    assert "GET" in message and "/api/v1/namespaces/d/configmaps/x" in message
    assert "16777216" in message and "max_object_body" in message and "decompressed" in message
    assert peak < 2 * error.limit + 8 * MiB, f"peak {peak / MiB:.0f} MiB"


class _CountingZlib:
    """Stands in for the ``zlib`` module in ``setpoint.client._http``: counts the compressed
    bytes handed to zlib, the work (and the copies of what follows a member) it is given."""

    MAX_WBITS = zlib.MAX_WBITS
    error = zlib.error

    def __init__(self) -> None:
        self.given = 0

    def decompressobj(self, *args: Any, **kwargs: Any) -> _CountingDecompress:
        return _CountingDecompress(self, zlib.decompressobj(*args, **kwargs))


class _CountingDecompress:
    def __init__(self, counter: _CountingZlib, inner: Any) -> None:
        self._counter = counter
        self._inner = inner

    def decompress(self, data: Any, max_length: int = 0) -> bytes:
        self._counter.given += len(data)
        return bytes(self._inner.decompress(data, max_length))

    def flush(self, *args: Any) -> bytes:
        return bytes(self._inner.flush(*args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


EVENT = b'{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a"}}}\n'


def _work_for(members: int, monkeypatch: pytest.MonkeyPatch) -> int:
    body = gzip.compress(EVENT, mtime=0) * members
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )
    counter = _CountingZlib()
    monkeypatch.setattr("setpoint.client._http.zlib", counter)
    (outcome,), _ = setpoint_reads([answer])  # the whole body in one read
    monkeypatch.undo()
    assert outcome[0] == "answer" and outcome[3] == EVENT * members
    return counter.given


def test_many_gzip_members_cost_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 gzip members cost about ten times the work of 1,000, not a hundred times.

    The work is what zlib is given (bytes per call: its input and the copy of what follows
    each member's end), counted, not timed.
    """
    small = _work_for(1_000, monkeypatch)
    large = _work_for(10_000, monkeypatch)
    assert large / small < 12, f"{small} -> {large} bytes given to zlib"
    assert large < 40 * len(gzip.compress(EVENT, mtime=0)) * 10_000


async def test_lists_and_objects_have_separate_caps(transports: list[Transport]) -> None:
    """A body over the object cap passes for a list and fails for one object, and vice versa."""
    body = b'{"items":[' + b'"x",' * 1200 + b'"x"]}'  # ~5 KB
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    answer = head + b"Content-Length: %d\r\n\r\n" % len(body)

    async def twice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer + body)
            await writer.drain()

    server = await Raw(twice).start()
    transport = _transport(transports, server.url, max_object_body=1000, max_list_body=10_000)
    listed = await transport.request("GET", "/apis/example.com/v1/namespaces/d/widgets")
    assert len(listed.body["items"]) == 1201
    with pytest.raises(ResponseTooLarge, match=r"max_object_body") as info:
        await transport.request("GET", "/apis/example.com/v1/namespaces/d/widgets/w")
    assert info.value.limit == 1000
    small = _transport(transports, server.url, max_object_body=10_000, max_list_body=1000)
    with pytest.raises(ResponseTooLarge, match=r"max_list_body"):
        await small.request("GET", "/api/v1/pods")
    server.close()


async def test_a_declared_length_over_the_cap_fails_before_the_body(
    transports: list[Transport],
) -> None:
    """A Content-Length past the cap fails at once: no waiting for (or holding) the body."""
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n"
    server = await _serve(head, b"")
    transport = _transport(transports, server.url, request_timeout=60, connect_timeout=5)
    async with asyncio.timeout(10):  # a guard only: the answer's head is all that comes
        with pytest.raises(ResponseTooLarge, match="declares a body of 999999999999 bytes"):
            await transport.request("GET", "/api/v1/namespaces/d/configmaps/x")
    server.close()


async def test_a_compressed_stream_is_inflated_piece_by_piece(bomb: bytes) -> None:
    """A watch sent as a gzip bomb reaches its reader in bounded pieces, never whole.

    The reader (the watch decoder) then refuses the first event longer than its cap.
    """
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    framed = b"".join(
        b"%x\r\n%s\r\n" % (len(bomb[i : i + 65536]), bomb[i : i + 65536])
        for i in range(0, len(bomb), 65536)
    )
    server = await _serve(head, framed + b"0\r\n\r\n")
    pool = HttpPool(server.url, ssl_context=None)
    decoder = WatchDecoder("GET /watch", max_line=4 * MiB)
    largest = 0
    tracemalloc.start()
    try:
        stream = await pool.stream("GET", "/watch", [], read_timeout=30)
        with pytest.raises(ResponseTooLarge, match=r"ClientOptions\.max_watch_line"):
            async for chunk in stream.chunks():
                largest = max(largest, len(chunk))
                decoder.feed(chunk)
        stream.close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        await pool.close()
        server.close()
    assert largest <= 256 * 1024
    assert peak < 32 * MiB, f"peak {peak / MiB:.0f} MiB"


async def test_the_error_answer_to_a_watch_is_capped(transports: list[Transport]) -> None:
    """A watch refused with a body over the object cap fails with ResponseTooLarge."""
    body = b'{"kind":"Status","message":"' + b"x" * 5000 + b'"}'
    head = b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
    server = await _serve(head + b"Content-Length: %d\r\n\r\n" % len(body), body)
    transport = _transport(transports, server.url, max_object_body=1000)
    with pytest.raises(ResponseTooLarge, match="max_object_body"):
        async with transport.stream("GET", "/api/v1/pods", read_timeout=30):
            pass
    server.close()


def test_a_watch_event_over_its_cap_names_the_setting() -> None:
    """One watch line past ``max_line``: ResponseTooLarge (still a MalformedResponse)."""
    decoder = WatchDecoder("https://api/api/v1/pods?watch=true", max_line=100)
    with pytest.raises(ResponseTooLarge) as info:
        decoder.feed(b'{"type":"ADDED","object":{' + b" " * 200)
    assert isinstance(info.value, MalformedResponse)
    assert info.value.limit == 100 and info.value.setting == "ClientOptions.max_watch_line"
    assert "https://api/api/v1/pods?watch=true" in str(info.value)


def test_caps_must_be_positive() -> None:
    """A cap of zero or less is refused when the options are made, naming the setting."""
    with pytest.raises(ValueError, match="max_list_body"):
        TransportOptions(max_list_body=0)
    with pytest.raises(ValueError, match="max_object_body"):
        TransportOptions(max_object_body=-1)
