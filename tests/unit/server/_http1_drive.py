"""Drive one request byte stream through setpoint's server connection and through h11.

Both sides report what a client would observe: the requests the server handled, in order,
each as ``(method, path, body)``. A refused request is one that is never handled (setpoint
answers 4xx/5xx and closes; h11 raises ``RemoteProtocolError``), so the list carries both
every verdict and every message boundary. ``test_server_http1_differential.py`` compares the
two on a corpus, ``test_server_http1_differential_fuzz.py`` on generated streams.

setpoint's side is the real connection protocol (``setpoint.server._http1``) on a fake
transport: the bytes arrive in the pieces given, as ``data_received`` calls would, the
client half-closes at the end, and the answers are the bytes the protocol writes.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import h11

from setpoint.api.clock import LoopClock
from setpoint.server import BODY_BUDGET, MAX_BODY_SIZE, HttpRequest, HttpResponse
from setpoint.server._http1 import (
    MAX_HEAD,
    ConnectionGuard,
    ConnectionSettings,
    new_connection,
)

Served = tuple[str, str, bytes]
"""One handled request: method, path (percent-decoded, no query), body."""


@dataclass
class Observed:
    """What a client sees of one stream."""

    served: list[Served] = field(default_factory=list)
    """The requests handled, in order."""
    statuses: list[int] = field(default_factory=list)
    """Every status written (setpoint's side only; 100 Continue excluded)."""
    error: str = ""
    """Why the stream was refused, if it was (h11's error, or setpoint's refusal text)."""


class _Transport(asyncio.Transport):
    """Collects what the protocol writes; closing it tells the protocol, as asyncio would."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.paused = False
        self.protocol: asyncio.Protocol | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "written after close"
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            assert self.protocol is not None
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def pieces_of(stream: bytes, cuts: Sequence[int] = ()) -> list[bytes]:
    """``stream`` cut at the given offsets (as TCP may deliver it)."""
    points = sorted({c for c in cuts if 0 < c < len(stream)})
    edges = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(edges) if b > a]


async def setpoint_serves(pieces: Sequence[bytes], *, max_body: int = MAX_BODY_SIZE) -> Observed:
    """Feed ``pieces`` to one server connection, half-close, and wait for it to close."""
    observed = Observed()

    async def handler(request: HttpRequest) -> HttpResponse:
        observed.served.append((request.method, request.path, request.body))
        return HttpResponse.text(200, "ok")

    guard = ConnectionGuard("differential", max_connections=1, body_budget=BODY_BUDGET)
    settings = ConnectionSettings(
        guard=guard,
        serve=handler,
        tls=None,
        max_body=max_body,
        body_limits={},
        clock=LoopClock(),
        header_timeout=30.0,
        idle_timeout=30.0,
        body_timeout=30.0,
    )
    protocol = new_connection(settings)()
    transport = _Transport()
    transport.protocol = protocol
    protocol.connection_made(transport)
    for piece in pieces:
        for _ in range(10_000):  # a paused connection reads again once its answer is out
            if not transport.paused or transport.closed:
                break
            await asyncio.sleep(0)
        if transport.closed:
            break
        protocol.data_received(piece)
        await asyncio.sleep(0)
    if not transport.closed and not protocol.eof_received():
        transport.close()
    for _ in range(10_000):
        if transport.closed and not guard.open:
            break
        await asyncio.sleep(0)
    assert transport.closed, "the connection never closed after the client's EOF"
    assert guard.bodies == 0, "body bytes still reserved after the connection closed"
    answers = bytes(transport.written).replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
    observed.statuses = [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)]
    refusal = [code for code in observed.statuses if code != 200]
    if refusal:
        observed.error = f"{refusal[0]}: " + answers.rsplit(b"\r\n\r\n", 1)[-1].decode().strip()
    return observed


def _path(target: bytes) -> str:
    """The path setpoint's handler would see for ``target`` (h11 hands over the raw target)."""
    text = target.decode("latin-1")
    if text.startswith(("http://", "https://")):
        path = urlsplit(text).path or "/"
    else:
        path = text.partition("?")[0].partition("#")[0]
    return unquote(path) if "%" in path else path


def h11_serves(pieces: Sequence[bytes]) -> Observed:
    """Feed ``pieces`` to h11's server side, answering each request with 200, then EOF.

    h11's head limit is set to setpoint's (64 KiB; h11's default is 16 KiB): a limit, not
    a parsing rule.
    """
    observed = Observed()
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    queue = list(pieces)
    ended = False
    method, target, body = b"", b"", bytearray()
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                if queue:
                    connection.receive_data(queue.pop(0))
                elif not ended:
                    connection.receive_data(b"")
                    ended = True
                else:
                    break
            elif isinstance(event, h11.Request):
                method, target, body = event.method, event.target, bytearray()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                observed.served.append((method.decode("latin-1"), _path(target), bytes(body)))
                status = 405 if method == b"CONNECT" else 200  # 2xx to CONNECT switches
                connection.send(h11.Response(status_code=status, headers=[("Content-Length", "0")]))
                connection.send(h11.EndOfMessage())
                if connection.our_state is h11.MUST_CLOSE:
                    break  # HTTP/1.0, Connection: close: the rest is never read
                connection.start_next_cycle()
            else:  # ConnectionClosed, PAUSED
                break
    except h11.RemoteProtocolError as exc:
        observed.error = str(exc)
    return observed
