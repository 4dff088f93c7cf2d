"""Drive the client's HTTP/1.1 connection, and h11's client, over the same answer bytes.

No sockets: the bytes go straight into ``setpoint.client._http._Connection`` through a fake
transport, as a server's reads would arrive, so a corpus case or a fuzz example costs
microseconds. :func:`setpoint_reads` and :func:`h11_reads` return what a caller would
observe for each request, as :data:`Outcome` values that compare equal when the two
clients agree. Used by ``test_http_differential.py`` and ``test_http_fuzz.py``.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Sequence
from typing import Any

import h11

from setpoint.client._http import (
    MAX_HEAD,
    ConnectionBroken,
    HttpPool,
    ProtocolError,
    RawResponse,
    _Connection,
    _Exchange,
)

Outcome = tuple[Any, ...]
"""``("answer", status, headers, body)``, ``("refused",)`` (a protocol error), or
``("unanswered",)`` (no answer: the connection ended, or could not carry the request)."""

REFUSED: Outcome = ("refused",)
UNANSWERED: Outcome = ("unanswered",)


def compare(ours: Sequence[Outcome], theirs: Sequence[Outcome]) -> str:
    """``"same"`` or ``"stricter"`` (setpoint gave no answer first where h11 gave one).

    Refused and unanswered are one verdict here: the caller gets no answer either way
    (h11 calls a body cut by the close a protocol error, setpoint a broken connection).

    Raises:
        AssertionError: setpoint answered where h11 did not (laxer), or answered
            differently (another status, header or body: another message boundary).

    """
    for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        if mine[0] != "answer" and other[0] != "answer":
            return "same"
        if mine == other:
            continue
        if mine[0] != "answer":
            return "stricter"
        raise AssertionError(f"request {index + 1}: setpoint read {mine!r}, h11 read {other!r}")
    return "same"


REQUEST = b"GET / HTTP/1.1\r\nHost: api\r\n\r\n"


class FakeTransport(asyncio.Transport):
    """Records what the protocol does to its transport; writes go nowhere."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False
        self.paused = False

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
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def _headers_of(pairs: Sequence[tuple[str, str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        # h11 hands Transfer-Encoding over lower-cased
        grouped.setdefault(name, []).append(value.lower() if name == "transfer-encoding" else value)
    return tuple((name, tuple(values)) for name, values in grouped.items())


def _answer(response: RawResponse) -> Outcome:
    pairs = [(name, value) for name in response.headers for value in response.headers.getall(name)]
    return ("answer", response.status, _headers_of(pairs), response.body)


def _deliver(connection: _Connection, transport: FakeTransport, data: bytes, piece: int) -> None:
    for start in range(0, len(data), piece):
        if transport.closing:
            return
        connection.data_received(data[start : start + piece])


def setpoint_reads(
    answers: Sequence[bytes],
    *,
    eof: bool = False,
    piece: int = 1 << 30,
    max_body: int | None = None,
) -> tuple[list[Outcome], _Connection]:
    """What setpoint's client makes of ``answers``, each sent after its own request.

    Request ``i`` is written (when the connection can still carry it) and then
    ``answers[i]`` arrives, in reads of ``piece`` bytes; ``eof`` closes the stream after
    the last answer. A request whose answer is incomplete when its bytes are in is
    abandoned (the deadline's job), as is every later one.
    """
    loop = asyncio.new_event_loop()
    try:
        connection = _Connection(HttpPool("http://127.0.0.1:1", ssl_context=None))
        transport = FakeTransport()
        connection.connection_made(transport)
        outcomes: list[Outcome] = []
        for index, data in enumerate(answers):
            if not connection.usable:
                outcomes.append(UNANSWERED)
                continue
            exchange = _Exchange(loop, streaming=False, head_only=False, max_body=max_body)
            connection.send(REQUEST, exchange)
            _deliver(connection, transport, data, piece)
            if eof and index == len(answers) - 1 and not transport.closing:
                connection.eof_received()
                connection.connection_lost(None)
            if not exchange.done.done():
                connection.abort()
            error = exchange.done.exception()
            if error is None:
                outcomes.append(_answer(exchange.done.result()))
            elif isinstance(error, ProtocolError):
                outcomes.append(REFUSED)
            else:
                assert isinstance(error, ConnectionBroken), repr(error)
                outcomes.append(UNANSWERED)
        return outcomes, connection
    finally:
        loop.close()


def setpoint_reads_at_once(answers: Sequence[bytes]) -> tuple[Outcome, _Connection]:
    """What setpoint makes of the first request's answer when all of ``answers`` arrive in
    one read (a server that sent answers ahead of their requests), and its connection."""
    outcomes, connection = setpoint_reads([b"".join(answers)])
    return outcomes[0], connection


def h11_reads(answers: Sequence[bytes], *, eof: bool = False) -> list[Outcome]:
    """What h11's client makes of ``answers``, each received after its own request.

    h11 is given the same head limit as setpoint (:data:`MAX_HEAD`, instead of its 16 KiB
    default). A gzip body is decompressed, as setpoint's client does.
    """
    connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
    outcomes: list[Outcome] = []
    for index, data in enumerate(answers):
        if index:
            if (
                outcomes[-1][0] != "answer"
                or connection.our_state is not h11.DONE
                or connection.their_state is not h11.DONE
            ):
                outcomes.append(UNANSWERED)
                continue
            connection.start_next_cycle()
        connection.send(h11.Request(method="GET", target="/", headers=[("Host", "api")]))
        connection.send(h11.EndOfMessage())
        connection.receive_data(data)
        if eof and index == len(answers) - 1:
            connection.receive_data(b"")
        outcomes.append(_h11_answer(connection))
        if outcomes[-1] != UNANSWERED and outcomes[-1][0] != "answer":
            break
    outcomes.extend([UNANSWERED] * (len(answers) - len(outcomes)))
    return outcomes


def _h11_answer(connection: h11.Connection) -> Outcome:
    response: h11.Response | None = None
    body: list[bytes] = []
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return UNANSWERED
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                return UNANSWERED
    except h11.RemoteProtocolError:
        return REFUSED
    assert response is not None
    pairs = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in response.headers]
    data = b"".join(body)
    if any(n == "content-encoding" and v.lower() == "gzip" for n, v in pairs):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return REFUSED  # a corrupt body: no answer for a client that decompresses
    return ("answer", response.status_code, _headers_of(pairs), data)
