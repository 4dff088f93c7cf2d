"""HTTP/1.1 on asyncio for :class:`~setpoint.server.http.Http1Server`: framing, limits, timers.

Requests are parsed by llhttp (Node.js's HTTP/1.1 parser, fuzzed upstream; through
``httptools``, as uvicorn does on the same ``asyncio.Protocol`` design), in its strict mode:
no dangerous leniency is turned on (decision 0018). Everything around the parser is
setpoint's own, and one :class:`_Connection` per accepted TCP connection does it:

- it is counted by the :class:`ConnectionGuard` from accept (TLS handshake included) until
  it closes; beyond ``max_connections`` a new one is closed at once;
- the TLS handshake (``loop.start_tls``, so that a handshake that never finishes is counted
  and timed like any other connection) and the headers of the first request must arrive
  within ``read_header_timeout`` (Go's ``ReadHeaderTimeout``); the headers of each later
  request on a kept-alive connection within ``idle_timeout`` of the previous answer (Go's
  ``IdleTimeout``); a body within ``body_timeout`` of its headers (408);
- llhttp refuses what RFC 9112 forbids (bare CR or LF, whitespace before a header's colon,
  folded lines, control characters, ``Content-Length`` with ``Transfer-Encoding``, two
  lengths, malformed chunks and trailers); on top of it the connection keeps the checks
  llhttp does not make (:meth:`_Connection._start_message`): a request line and each header
  line of at most 8,190 bytes, at most 100 headers and 64 KiB of them, exactly one space
  between the request line's parts, no empty line before it, HTTP/1.0 or 1.1 only, one
  ``Host`` (required on HTTP/1.1), no transfer coding but ``chunked`` and none on
  HTTP/1.0, a chunk size of at most 16 hex digits, no more than 1,024 chunks plus one per
  256 bytes of data; anything refused gets 400 (or its own status) and the connection is
  closed;
- a body longer than its path's limit (``body_limits``, else ``max_body_size``) is refused
  with 413 before it is read (declared length) or before the chunk that would pass the
  limit is read (chunked); a body that would take the bodies in flight on the whole server
  past ``body_budget`` gets 503 at once; a body is held only as it arrives;
- requests on one connection are answered one at a time, in order; while one is being
  handled (and until its answer is written) the connection stops parsing (pipelined
  requests wait in a buffer, and in the kernel's once that holds 256 KiB);
- an answer is written with one ``transport.write``, unless its body is larger than
  :data:`WRITE_PIECE` (256 KiB): then the head, then the body in slices of that size, each
  from its own loop callback and only while the transport has not paused writing
  (``pause_writing``, past its high-water mark). asyncio's TLS transport encrypts what it
  is given in the callback that gives it: a 22 MB answer written at once held the loop for
  100-200 ms, and a client that does not read would have had the whole answer buffered.
  A client that reads none of an answer for ``idle_timeout`` is closed.

The parser is fed in slices that end where a message's parts end (the head at its blank
line, a declared body at its length, a chunk at its size), so the connection always knows
where one request ends and the next begins, sees each request line and chunk size line as
sent, and never lets llhttp run ahead into a request it has not yet decided to read.

Why not aiohttp's server: its per-request machinery (request objects, multidicts, stream
readers, response objects) cost about 0.35 ms of CPU per request on the webhook's hot path,
more than the conversion itself; this module answers the same requests in a fraction of that
(decisions 0012 and 0018, bench/conversion, bench/http_server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

import httptools

from setpoint.api.clock import Clock, TimerHandle
from setpoint.api.errors import SetpointError
from setpoint.server.http import HttpRequest, HttpResponse

log = logging.getLogger("setpoint.server")

MAX_LINE = 8190
"""Longest request line or header line, in bytes (aiohttp's and nginx's default)."""
MAX_HEADERS = 100
"""Most header lines in one request (Go's server allows more, but only up to 1 MiB of them)."""
MAX_HEAD = 64 * 1024
"""Most bytes from the request line to the blank line that ends the headers (and of a
chunked body's trailers)."""

_WARN_EVERY = 60.0
"""Seconds between two log lines about refused connections (an attack must not flood logs)."""

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name (RFC 9110, 5.6.2): what an answer's header names must be."""
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[^\r\n]*)?\r\n")
"""A chunk size line: at most 16 hex digits (a 64-bit size; Go's limit too), no whitespace,
then extensions (llhttp checks their syntax) and CRLF."""
_DIGITS = re.compile(r"[0-9]{1,18}")
_OWS = ("", " ", "\t")
_SINGLE = frozenset({"host", "content-length", "transfer-encoding"})
"""Headers a request may carry once (RFC 9112 3.2 for Host; the framing headers)."""
_FREE_CHUNKS = 1024
"""Chunks any chunked body may have; beyond them, one more per :data:`_CHUNK_DATA_EACH` bytes
of its data. Each chunk costs a few microseconds of the event loop whatever its size, so a
body of one-byte chunks would otherwise cost seconds (7 MiB of them: about 7 million chunks)."""
_CHUNK_DATA_EACH = 256


class RequestError(SetpointError):
    """A request the server refuses before any handler sees it: the status and why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Headers(Mapping[str, str]):
    """Request headers, looked up without regard to case.

    A repeated header's values are joined with ``", "`` (RFC 9110, 5.3).
    """

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, tuple[str, str]]) -> None:
        self._items = items  # lower-case name -> (name as sent, value)

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()][1]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({dict(self.items())!r})"


def _query(raw: str) -> dict[str, tuple[str, ...]]:
    """Every value of each query parameter; plain ``a=b&c`` without escapes split directly."""
    if "%" in raw or "+" in raw or ";" in raw:
        return {k: tuple(v) for k, v in parse_qs(raw, keep_blank_values=True).items()}
    query: dict[str, tuple[str, ...]] = {}
    for pair in raw.split("&"):
        if pair:
            key, _, value = pair.partition("=")
            query[key] = (*query.get(key, ()), value)
    return query


def _target(method: str, target: str) -> tuple[str, dict[str, tuple[str, ...]]]:
    """The path and query of a request target (RFC 9112, 3.2), or :class:`RequestError`.

    Origin form (``/a?b``), absolute form (``http://host/a?b``) and ``*`` for ``OPTIONS``;
    not the authority form (``host:port``, only for ``CONNECT``, which is not served).
    """
    if target[:1] == "/":
        raw_path, _, raw_query = target.partition("?")
    elif target.startswith(("http://", "https://")):
        split = urlsplit(target)
        raw_path, raw_query = split.path or "/", split.query
    elif target == "*" and method == "OPTIONS":
        raw_path, raw_query = "*", ""
    else:
        raise RequestError(400, "malformed request target")
    raw_path = raw_path.partition("#")[0]
    path = unquote(raw_path) if "%" in raw_path else raw_path
    return path, (_query(raw_query) if raw_query else {})


class ConnectionGuard:
    """Counts one server's connections and request bodies, and holds them to their caps.

    Args:
        name: The server's name, for logs.
        max_connections: Open connections allowed at once.
        body_budget: Bytes of request bodies held at once, across all connections.

    """

    def __init__(self, name: str, *, max_connections: int, body_budget: int) -> None:
        self.name = name
        self._max = max_connections
        self.body_budget = body_budget
        self.open: set[_Connection] = set()
        """Connections accepted and not yet closed."""
        self.refused = 0
        """Connections closed at once because the server was at its cap."""
        self.timed_out = 0
        """Connections closed because a request's headers or body came too late."""
        self.bodies = 0
        """Bytes of request bodies reserved now (declared, or chunks announced), from their
        headers until their answers are written."""
        self.over_budget = 0
        """Requests refused with 503 because their body would have passed the budget."""
        self._last_warning = 0.0
        self._none_open: asyncio.Event | None = None

    def admit(self, connection: _Connection) -> bool:
        """Count ``connection``, or refuse it (``False``) when the server is at its cap."""
        if len(self.open) >= self._max:
            self.refused += 1
            self.warn(
                f"{self.name} is at its limit of {self._max} open connections; closing new "
                f"ones at once ({self.refused} so far). Raise HttpServerOptions."
                "max_connections if the clients are legitimate"
            )
            return False
        self.open.add(connection)
        return True

    def reserve(self, size: int) -> bool:
        """Count ``size`` more bytes of bodies, or refuse (``False``) if that passes the budget."""
        if self.bodies + size > self.body_budget:
            self.over_budget += 1
            self.warn(
                f"{self.name} refused a request with 503: its body would take the bodies in "
                f"flight past HttpServerOptions.body_budget={self.body_budget} bytes "
                f"({self.over_budget} so far). Raise it if the clients are legitimate"
            )
            return False
        self.bodies += size
        return True

    def release(self, size: int) -> None:
        """``size`` bytes of bodies are no longer held."""
        self.bodies -= size

    def forget(self, connection: _Connection) -> None:
        """``connection`` closed."""
        self.open.discard(connection)
        if not self.open and self._none_open is not None:
            self._none_open.set()

    async def all_closed(self) -> None:
        """Return once no connection is open."""
        if self.open:
            self._none_open = asyncio.Event()
            await self._none_open.wait()

    def close_idle(self) -> None:
        """Close every connection that is not handling a request (the server is stopping)."""
        for connection in list(self.open):
            connection.close_when_idle()

    def busy(self) -> int:
        """Connections handling a request now."""
        return sum(1 for c in self.open if c.handling)

    def abort_all(self) -> None:
        """Abort every connection still open."""
        for connection in list(self.open):
            connection.abort()

    def warn(self, message: str) -> None:
        """Log ``message``, at most once a minute."""
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            log.warning("%s", message)


Serve = Callable[[HttpRequest], Awaitable[HttpResponse]]
"""What a connection calls for each complete request."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionSettings:
    """What every connection of one server needs, gathered once."""

    guard: ConnectionGuard
    """Counts the server's connections and bodies."""
    serve: Serve
    """Answers each complete request."""
    tls: Callable[[], ssl.SSLContext] | None
    """The current TLS context (called per connection, so a new certificate applies to new
    connections), or ``None`` for plain HTTP."""
    max_body: int
    """Largest request body accepted on a path without its own limit, in bytes."""
    body_limits: Mapping[str, int]
    """Exact path -> largest request body accepted on it, in bytes."""
    body_limit_hint: str = ""
    """What a 413 answer says to raise (``HttpServerOptions.body_limit_hint``)."""
    clock: Clock
    """Where deadlines are read and set (the loop's clock, or a test's)."""
    header_timeout: float
    """Seconds for the TLS handshake and the first request's headers."""
    idle_timeout: float
    """Seconds a kept-alive connection may wait for its next request's headers."""
    body_timeout: float
    """Seconds a request's body may take after its headers."""


# Connection states. Those below _HANDLING read a request: its head, a declared body, a
# chunk size line, a chunk's data (and its CRLF), the trailers after the last chunk.
_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS, _HANDLING, _DRAINING, _CLOSED = range(8)

_LINGER = 2.0
"""Seconds a refused request's unread body is still read and dropped before the connection
closes, so that the client, still sending, gets to read the refusal (a close while it sends
would reset the connection and lose the answer; Go's server drains too). Nothing read while
lingering is kept."""
_LINGER_BYTES = 64 * 1024 * 1024
"""Most bytes dropped while lingering."""

_HIGH_WATER = 256 * 1024
"""Bytes of pipelined requests buffered while one is handled before the connection stops reading."""

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

WRITE_PIECE = 256 * 1024
"""An answer body larger than this is written in pieces of this size, one per loop callback
and only while the transport takes more (:meth:`_Connection._respond`)."""


class _Connection(asyncio.Protocol):
    """One accepted TCP connection speaking HTTP/1.1 (module docstring).

    It is also the llhttp parser's callback object (``on_url``, ``on_header``, ...): the
    callbacks only record what the parser saw; every decision is taken between two slices
    fed to the parser, in :meth:`_consume`.
    """

    def __init__(self, settings: ConnectionSettings) -> None:
        self._s = settings
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._handshake: asyncio.Task[None] | None = None
        self._timer: TimerHandle | None = None
        self._timer_at = 0.0
        self._deadline: float | None = None
        self._deadline_kind = "head"
        self._buffer = bytearray()
        self._scanned = 0
        self._state = _HEAD
        self._remote: str | None = None
        self._secure = False
        self._handshaking = False
        self._served = 0
        self._stopping = False
        self._paused = False
        self._eof = False
        self._drained = 0
        self._drain_limit = 0
        self._task: asyncio.Task[None] | None = None
        self._reserved = 0
        self._writing_paused = False
        self._out: memoryview | None = None  # the rest of an answer written in pieces
        self._out_at = 0
        self._out_close = False
        self._next_piece: asyncio.Handle | None = None
        self._reset_message()

    def _reset_message(self) -> None:
        """Forget the request just answered (or refused): the next one starts clean."""
        self._url = b""
        self._fields: list[tuple[bytes, bytes]] = []
        self._chunks: list[bytes] = []
        self._headers_done = False
        self._message_done = False
        self._chunk_started = False
        self._chunk_ended = False
        self._upgrade = False
        self._keep_alive = False
        self._version = ""
        self._method = ""
        self._head: tuple[str, str, dict[str, tuple[str, ...]], Headers] | None = None
        self._close_after = False
        self._limit = 0
        self._body_size = 0
        self._left = 0
        self._trailer_bytes = 0
        self._trailer_lines = 0
        self._chunk_count = 0

    @property
    def handling(self) -> bool:
        """Whether a request is being handled now."""
        return self._state == _HANDLING

    # -- llhttp callbacks: record only ---------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        """llhttp: (a piece of) the request target."""
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        """llhttp: one header field (or a trailer field, which is ignored)."""
        if not self._headers_done:
            self._fields.append((name, value))

    def on_headers_complete(self) -> None:
        """llhttp: the head is complete; read what only the parser knows now."""
        self._headers_done = True
        parser = self._parser
        self._keep_alive = parser.should_keep_alive()
        self._version = parser.get_http_version()
        self._method = parser.get_method().decode("ascii")

    def on_body(self, body: bytes) -> None:
        """llhttp: a piece of the body, held as it arrives."""
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        """llhttp: the request is complete."""
        self._message_done = True

    def on_chunk_header(self) -> None:
        """llhttp: a chunk size line was read."""
        self._chunk_started = True

    def on_chunk_complete(self) -> None:
        """llhttp: a chunk's data and its CRLF were read."""
        self._chunk_ended = True

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = transport  # type: ignore[assignment]
        if not self._s.guard.admit(self):
            self._state = _CLOSED
            transport.abort()  # type: ignore[attr-defined]
            return
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Answers go out at once, not when the client's delayed ACK arrives (Go does this too).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self._remote = str(peer[0]) if isinstance(peer, tuple) and peer else None
        self._set_timer(self._s.header_timeout)
        if self._s.tls is not None:
            loop = asyncio.get_running_loop()
            self._handshake = loop.create_task(self._start_tls(self._s.tls()))

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state >= _DRAINING:
            if state == _DRAINING:
                self._drop(len(data))
            return
        if self._buffer or state == _HANDLING or self._handshaking:
            self._buffer += data
            if state == _HANDLING and len(self._buffer) > _HIGH_WATER and not self._paused:
                # A client pipelining far ahead: stop reading until this answer is out.
                self._paused = True
                if self._transport is not None:
                    self._transport.pause_reading()
            # During a TLS handshake, the first request can be decrypted before start_tls()
            # returns the TLS transport: keep it until then.
            if state != _HANDLING and not self._handshaking:
                self._advance()
            return
        used = self._consume(data)  # the common case: nothing buffered, parse in place
        if self._state >= _DRAINING:
            if self._state == _DRAINING:
                self._drop(len(data) - used)
        elif used < len(data):
            self._buffer += memoryview(data)[used:]
            if self._state == _HANDLING and len(self._buffer) > _HIGH_WATER:
                self._paused = True
                if self._transport is not None:
                    self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        # A client that half-closes after sending its requests still gets the answers; then
        # the connection closes (see _answer).
        self._eof = True
        if self._state == _DRAINING:
            self._close()  # the refused body will not come: nothing left to drop
            return None
        if self._state < _HANDLING:
            if self._buffer:
                self._advance()  # a complete request may be buffered behind a handled one
            if self._state == _HEAD and self._buffer:
                self._judge_incomplete_head()
            if self._state < _HANDLING:
                self._close()
                return None
        return None if self._secure else True

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _CLOSED
        self._stop_timer()
        self._release()
        if self._handshake is not None and not self._handshake.done():
            self._handshake.cancel()
        self._drop_answer()
        self._s.guard.forget(self)

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark: write no more pieces for now.

        A client that reads nothing more of the answer for ``idle_timeout`` is closed.
        """
        self._writing_paused = True
        if self._out is not None:
            self._set_timer(self._s.idle_timeout, kind="write")

    def resume_writing(self) -> None:
        """The transport drained below its low-water mark: go on with the answer."""
        self._writing_paused = False
        if self._out is not None:
            self._cancel_timer()
            if self._next_piece is None:
                self._next_piece = asyncio.get_running_loop().call_soon(self._write_piece)

    # -- control -----------------------------------------------------------------------------

    def abort(self) -> None:
        """Close now, dropping anything buffered and cancelling a handler in flight."""
        self._state = _CLOSED
        self._stop_timer()
        self._release()
        self._drop_answer()
        if self._handshake is not None:
            self._handshake.cancel()
        if self._task is not None:
            self._task.cancel()
        if self._transport is not None:
            self._transport.abort()
        self._s.guard.forget(self)

    def close_when_idle(self) -> None:
        """Close now if no request is being handled, else after its answer."""
        self._stopping = True
        if self._state != _HANDLING:
            self._close()

    # -- TLS ---------------------------------------------------------------------------------

    async def _start_tls(self, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        plain = self._transport
        assert plain is not None
        self._secure = True
        self._handshaking = True
        try:
            secure = await loop.start_tls(
                plain,
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=self._s.header_timeout,
            )
        except asyncio.CancelledError:
            plain.abort()
            raise
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            # A client that is not speaking TLS, or gave up: nothing to serve.
            log.debug("%s: TLS handshake failed: %s", self._s.guard.name, exc)
            self._handshake = None  # this task: it ends here
            self.abort()
            plain.abort()
            return
        finally:
            self._handshaking = False
        if self._state == _CLOSED or secure is None:
            with contextlib.suppress(Exception):
                plain.abort()
            return
        self._transport = secure
        if self._buffer:
            self._advance()

    # -- parsing -----------------------------------------------------------------------------

    def _advance(self) -> None:
        """Parse what is buffered (see :meth:`_consume`) and drop what was parsed."""
        buffer = self._buffer
        used = self._consume(buffer)
        if self._state >= _DRAINING:
            if self._state == _DRAINING:
                self._drop(len(buffer) - used)
            buffer.clear()
        elif used:
            del buffer[:used]

    def _consume(self, data: bytes | bytearray) -> int:
        """Feed llhttp up to the end of the next complete request; return the bytes used.

        A complete request starts being handled; the rest of ``data`` waits for more bytes,
        or for the answer.

        Each slice fed ends where a part of the message ends: the head at its blank line,
        a declared body at its length, a chunk size line at its LF, a chunk at its CRLF, a
        trailer line at its LF. A refused request is answered here (``RequestError``).
        """
        pos = 0
        end = len(data)
        try:
            with memoryview(data) as view:
                while pos < end and self._state < _HANDLING:
                    state = self._state
                    if state == _HEAD:
                        size = self._head_size(data, pos)
                        if not size:
                            break
                        self._feed(view[pos : pos + size])
                        pos += size  # a refusal now drains only what follows the head
                        self._start_message(end - pos)
                    elif state == _BODY:
                        take = min(self._left, end - pos)
                        self._feed(view[pos : pos + take])
                        pos += take
                        self._left -= take
                        if not self._left and not self._message_done:
                            raise RequestError(400, "malformed request body")
                    elif state == _CHUNK_DATA:
                        take = min(self._left, end - pos)
                        self._feed(view[pos : pos + take])
                        pos += take
                        self._left -= take
                        if not self._left:
                            if not self._chunk_ended:
                                raise RequestError(400, "malformed chunk")
                            self._state = _CHUNK_SIZE
                    else:
                        line_end = data.find(b"\n", pos, pos + MAX_LINE + 2)
                        if line_end < 0:
                            if end - pos > MAX_LINE:
                                raise RequestError(
                                    431 if state == _TRAILERS else 400,
                                    "a chunk size or trailer line is too long",
                                )
                            break
                        if state == _CHUNK_SIZE:
                            self._start_chunk(data, pos, line_end + 1)
                        else:
                            self._trailer_bytes += line_end + 1 - pos
                            self._trailer_lines += 1
                            if self._trailer_bytes > MAX_HEAD or self._trailer_lines > MAX_HEADERS:
                                raise RequestError(431, "chunked trailers too large")
                        self._feed(view[pos : line_end + 1])
                        pos = line_end + 1
                        if state == _CHUNK_SIZE:
                            self._chunk_fed()
                    if self._message_done:
                        self._handle()
        except RequestError as exc:
            self._refuse(exc.status, exc.reason, unread=self._unread_body())
        return pos

    def _feed(self, piece: memoryview) -> None:
        """Give ``piece`` to llhttp; its refusals become :class:`RequestError`."""
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            # "Connection: upgrade" (or CONNECT): llhttp stops after the head, taking any
            # body for the new protocol's. Nothing is upgraded here; _start_message decides.
            self._upgrade = True
        except httptools.HttpParserError as exc:
            reason = str(exc) or type(exc).__name__
            status = 505 if "HTTP version" in reason else 400
            raise RequestError(status, f"malformed request: {reason}") from None

    def _head_size(self, data: bytes | bytearray, pos: int) -> int:
        """Length of the complete head at ``pos`` (request line to blank line), or 0.

        0 while the head is incomplete; heads over the limits are refused before they are
        parsed.
        """
        if data[pos] in b"\r\n":
            raise RequestError(400, "malformed request: an empty line before the request line")
        blank = data.find(b"\r\n\r\n", pos + self._scanned, pos + MAX_HEAD + 1)
        if blank < 0:
            if len(data) - pos > MAX_HEAD:
                raise RequestError(431, f"request headers larger than {MAX_HEAD} bytes")
            if data.find(b"\r\n", pos, pos + MAX_LINE + 2) < 0 and len(data) - pos > MAX_LINE:
                raise RequestError(414, f"request line longer than {MAX_LINE} bytes")
            self._scanned = max(0, len(data) - pos - 3)
            return 0
        self._scanned = 0
        size = blank + 4 - pos
        if size > MAX_HEAD:
            raise RequestError(431, f"request headers larger than {MAX_HEAD} bytes")
        line_end = data.find(b"\r\n", pos, blank + 2)
        if line_end - pos > MAX_LINE:
            raise RequestError(414, f"request line longer than {MAX_LINE} bytes")
        if data.count(b" ", pos, line_end) != 2:
            raise RequestError(400, "malformed request line (expected: METHOD target HTTP/1.1)")
        if data.count(b"\r\n", line_end, blank) > MAX_HEADERS:
            raise RequestError(431, f"more than {MAX_HEADERS} header lines")
        if size > MAX_LINE and max(map(len, bytes(data[line_end:blank]).split(b"\r\n"))) > MAX_LINE:
            raise RequestError(431, f"a header line is longer than {MAX_LINE} bytes")
        return size

    def _start_message(self, available: int) -> None:
        """The head was parsed: the checks llhttp does not make, then how to read the body.

        ``available``: bytes already received after the head.
        """
        if not self._headers_done:
            raise RequestError(400, "malformed request head")
        self._cancel_timer()  # the header deadline (first request) or the idle one
        version = self._version
        if version not in {"1.1", "1.0"}:
            raise RequestError(505, "only HTTP/1.0 and HTTP/1.1 are served")
        method = self._method
        target = self._url.decode("latin-1")
        path, query = _target(method, target)
        items: dict[str, tuple[str, str]] = {}
        for raw_name, raw_value in self._fields:
            name = raw_name.decode("latin-1")
            key = name.lower()
            value = raw_value.decode("latin-1")
            if value[-1:] in _OWS:  # llhttp drops the whitespace before a value, not after
                value = value.rstrip(" \t")
            prior = items.get(key)
            if prior is None:
                items[key] = (name, value)
            elif key in _SINGLE:
                raise RequestError(400, f"more than one {name} header")
            else:
                items[key] = (prior[0], f"{prior[1]}, {value}")
        if "host" not in items and version == "1.1":
            raise RequestError(400, "an HTTP/1.1 request needs a Host header")
        coding = items.get("transfer-encoding")
        length = items["content-length"][1] if "content-length" in items else ""
        chunked = coding is not None
        if coding is not None:
            # llhttp takes any codings that end in chunked; only chunked alone is served.
            if coding[1].lower() != "chunked":
                raise RequestError(400, "only the chunked transfer coding is accepted")
            if length or version == "1.0":
                raise RequestError(400, "Transfer-Encoding with Content-Length, or on HTTP/1.0")
        if length and not _DIGITS.fullmatch(length):
            raise RequestError(400, "Content-Length is not a non-negative integer")
        declared = int(length) if length else 0
        if self._upgrade and (chunked or declared):
            raise RequestError(400, "a request asking to upgrade the connection has a body")
        self._limit = limit = self._s.body_limits.get(path, self._s.max_body)
        self._close_after = self._upgrade or version == "1.0" or not self._keep_alive
        self._head = (method, path, query, Headers(items))
        if declared:
            self._state = _BODY
            self._left = declared
            if declared > limit:
                raise _too_large(limit, path, self._s.body_limit_hint)
            if not self._s.guard.reserve(declared):
                raise _over_budget(self._s.guard.body_budget)
            self._reserved += declared
        elif chunked:
            self._state = _CHUNK_SIZE
        elif not self._message_done:
            raise RequestError(400, "malformed request head")
        if self._state != _HEAD and (chunked or available < declared):
            expect = items.get("expect")
            if expect is not None and expect[1].lower() == "100-continue":
                assert self._transport is not None
                self._transport.write(_CONTINUE)
            self._set_timer(self._s.body_timeout, kind="body")

    def _start_chunk(self, data: bytes | bytearray, start: int, stop: int) -> None:
        """A chunk size line (LF included) is buffered: check it and count the chunk."""
        match = _CHUNK_LINE.fullmatch(data, start, stop)
        if match is None:
            raise RequestError(400, "malformed chunk size line")
        size = int(match[1], 16)
        self._chunk_started = self._chunk_ended = False
        if size:
            self._body_size += size
            self._chunk_count += 1
            if self._chunk_count > _FREE_CHUNKS + self._body_size // _CHUNK_DATA_EACH:
                raise RequestError(400, "a chunked body of too many small chunks")
            if self._body_size > self._limit:
                self._left = size + 2
                path = self._head[1] if self._head else ""
                raise _too_large(self._limit, path, self._s.body_limit_hint)
            if not self._s.guard.reserve(size):
                raise _over_budget(self._s.guard.body_budget)
            self._reserved += size
            self._left = size + 2  # its data, then CRLF
        else:
            self._left = 0

    def _chunk_fed(self) -> None:
        """A chunk size line was fed: llhttp must agree that a chunk starts."""
        if not self._chunk_started:
            raise RequestError(400, "malformed chunk size line")
        self._state = _CHUNK_DATA if self._left else _TRAILERS

    def _judge_incomplete_head(self) -> None:
        """The client half-closed in the middle of a head: 400 if it is malformed already.

        Else the connection just closes (a request cut short).
        """
        try:
            with memoryview(self._buffer) as view:
                self._feed(view)
        except RequestError as exc:
            self._refuse(exc.status, exc.reason)
        self._buffer.clear()

    # -- answering ---------------------------------------------------------------------------

    def _handle(self) -> None:
        head = self._head
        if head is None:  # llhttp ended a message whose head was not checked
            raise RequestError(400, "malformed request")
        chunks = self._chunks
        body = (chunks[0] if len(chunks) == 1 else b"".join(chunks)) if chunks else b""
        self._chunks = []
        request = HttpRequest(*head, body, self._remote)
        self._cancel_timer()
        self._state = _HANDLING
        self._task = asyncio.get_running_loop().create_task(self._answer(request))

    async def _answer(self, request: HttpRequest) -> None:
        try:
            response = await self._s.serve(request)
        except Exception:  # the server's serve() answers 500 itself; this is a last resort
            log.exception(
                "%s failed to answer %s %s", self._s.guard.name, request.method, request.path
            )
            response = HttpResponse.text(500, "internal server error\n")
        self._task = None
        self._served += 1
        if self._state == _CLOSED:
            return
        self._respond(request.method, response, close=self._close_after or self._stopping)

    def _respond(self, method: str, response: HttpResponse, *, close: bool) -> None:
        """Write ``response``, then go on with the connection (:meth:`_answered`).

        A body of at most :data:`WRITE_PIECE` bytes goes out with its head in one write.
        A larger one is written as memoryview slices of that size, the first now and each
        next one from its own loop callback (:meth:`_write_piece`), only while the transport
        has not paused writing: the loop serves other connections and tasks between two
        pieces, asyncio's TLS transport encrypts one piece per callback, and a client that
        reads slowly holds the server to what the transport buffers. The connection stays in
        its handling state until the last piece is out, so a pipelined request waits for
        it, and a close comes after it.
        """
        transport = self._transport
        self._release()  # the request's body is no longer held
        if transport is None or transport.is_closing():
            self._close()
            return
        body = response.body if method != "HEAD" else b""
        head = self._head_of(response, len(response.body), close=close)
        if len(body) <= WRITE_PIECE:
            transport.write(head + body if body else head)
            self._answered(close)
            return
        transport.write(head)
        self._out = memoryview(body)
        self._out_at = 0
        self._out_close = close
        self._write_piece()

    def _write_piece(self) -> None:
        """Write the next piece of the answer, unless the transport paused (or closed)."""
        self._next_piece = None
        out = self._out
        transport = self._transport
        if out is None:
            return
        if self._state == _CLOSED or transport is None or transport.is_closing():
            self._drop_answer()
            return
        if self._writing_paused:  # since an earlier answer: resume_writing() calls again
            self._set_timer(self._s.idle_timeout, kind="write")
            return
        at = self._out_at
        end = at + WRITE_PIECE
        transport.write(out[at:end])  # may pause writing, synchronously
        if end < len(out):
            self._out_at = end
            if not self._writing_paused:
                self._next_piece = asyncio.get_running_loop().call_soon(self._write_piece)
            return
        self._out = None
        self._answered(self._out_close)

    def _drop_answer(self) -> None:
        """Forget the rest of an answer being written in pieces (the connection is gone)."""
        self._out = None
        if self._next_piece is not None:
            self._next_piece.cancel()
            self._next_piece = None

    def _answered(self, close: bool) -> None:
        """The answer is written: close, or read and handle the next request."""
        if self._state == _CLOSED:
            return
        if close or self._stopping:
            self._close()
            return
        self._state = _HEAD
        self._reset_message()
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        if self._buffer:
            self._advance()
        if self._state == _HEAD:
            if self._eof:
                if self._buffer:
                    self._judge_incomplete_head()
                self._close()  # the client sent all it will send, and has every answer
                return
            self._set_timer(self._s.idle_timeout)

    def _head_of(self, response: HttpResponse, length: int, *, close: bool) -> bytes:
        """The status line and headers of ``response``, whose body is ``length`` bytes."""
        status = response.status
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = "Status"
        lines = [f"HTTP/1.1 {status} {phrase}"]
        for name, value in response.headers.items():
            if _unsafe_header(name, value):
                log.error(
                    "%s: dropped response header %r (not a valid header)", self._s.guard.name, name
                )
                continue
            lines.append(f"{name}: {value}")
        lines.append(f"Content-Type: {response.content_type}")
        lines.append(f"Content-Length: {length}")
        lines.append("X-Content-Type-Options: nosniff")
        lines.append("Cache-Control: no-store")
        lines.append(f"Date: {_http_date()}")
        if close:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _refuse(self, status: int, reason: str, *, unread: int = 0) -> None:
        """Answer a request the server will not hand to its handler, and close.

        ``unread``: bytes of its body still on the way (-1: unknown). They are read and
        dropped (never kept) for up to ``_LINGER`` seconds first, so the client can read the
        answer. What the caller had buffered is dropped by the caller.
        """
        headers = {"Retry-After": "1"} if status == 503 else {}
        response = HttpResponse(status, (reason + "\n").encode(), headers=headers)
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(self._head_of(response, len(response.body), close=True) + response.body)
        self._release()
        self._chunks = []
        if unread == 0:
            self._close()
            return
        self._state = _DRAINING
        self._drained = 0
        self._drain_limit = _LINGER_BYTES if unread < 0 else min(unread, _LINGER_BYTES)
        self._set_timer(_LINGER, kind="drain")

    def _drop(self, size: int) -> None:
        """``size`` more bytes of a refused body were read while lingering."""
        self._drained += size
        if self._drained >= self._drain_limit:
            self._close()

    def _unread_body(self) -> int:
        """Bytes of the current request's body not yet received (-1: unknown)."""
        if self._state == _BODY:
            return self._left
        if self._state in (_CHUNK_SIZE, _CHUNK_DATA, _TRAILERS):
            return -1
        return 0

    def _release(self) -> None:
        """Give the body bytes this connection reserved back to the server's budget."""
        if self._reserved:
            self._s.guard.release(self._reserved)
            self._reserved = 0

    def _close(self) -> None:
        self._state = _CLOSED
        self._stop_timer()
        self._release()
        if self._transport is not None:
            self._transport.close()

    # -- timers ------------------------------------------------------------------------------
    # One deadline at a time: the headers' (first request, or the next on a kept-alive
    # connection) or the body's, on the server's Clock. Setting or clearing it is an
    # attribute write; the timer is re-armed lazily when it fires early, so a busy connection
    # does not schedule and cancel a timer per request.

    def _set_timer(self, seconds: float, *, kind: str = "head") -> None:
        clock = self._s.clock
        self._deadline = deadline = clock.now() + seconds
        self._deadline_kind = kind
        timer = self._timer
        if timer is None or self._timer_at > deadline:
            if timer is not None:
                timer.cancel()
            self._timer_at = deadline
            self._timer = clock.call_at(deadline, self._deadline_passed)

    def _cancel_timer(self) -> None:
        self._deadline = None

    def _stop_timer(self) -> None:
        self._deadline = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline_passed(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        clock = self._s.clock
        if clock.now() < deadline:
            self._timer_at = deadline
            self._timer = clock.call_at(deadline, self._deadline_passed)
            return
        self._deadline = None
        if self._deadline_kind == "body":
            self._body_too_late()
        elif self._deadline_kind == "drain":
            self._close()
        elif self._deadline_kind == "write":
            self._answer_not_read()
        else:
            self._headers_too_late()

    def _headers_too_late(self) -> None:
        if self._state != _HEAD:
            return
        if self._served == 0 or self._buffer:
            # A first request (or handshake) that never completed, or a half-sent later one;
            # an idle kept-alive connection simply ends.
            guard = self._s.guard
            guard.timed_out += 1
            guard.warn(
                f"{guard.name} closed a connection that did not send its request headers in "
                f"time ({guard.timed_out} so far)"
            )
        self.abort()

    def _answer_not_read(self) -> None:
        if self._out is None or not self._writing_paused:
            return
        guard = self._s.guard
        guard.timed_out += 1
        guard.warn(
            f"{guard.name} closed a connection that read none of its answer for "
            f"{self._s.idle_timeout:g}s (HttpServerOptions.idle_timeout; {guard.timed_out} "
            "connections timed out so far)"
        )
        self.abort()

    def _body_too_late(self) -> None:
        if self._state not in (_BODY, _CHUNK_SIZE, _CHUNK_DATA, _TRAILERS):
            return
        self._s.guard.timed_out += 1
        self._buffer.clear()
        self._refuse(408, "request body not received in time", unread=self._unread_body())


def _too_large(limit: int, path: str, hint: str) -> RequestError:
    option = f"; {hint}" if hint else " (HttpServerOptions.body_limits, else max_body_size)"
    return RequestError(413, f"request body larger than {limit} bytes, the limit on {path}{option}")


def _over_budget(budget: int) -> RequestError:
    return RequestError(
        503,
        f"the server holds too many request bodies at once (HttpServerOptions.body_budget="
        f"{budget} bytes); retry later",
    )


def _unsafe_header(name: str, value: str) -> bool:
    return not _TOKEN.fullmatch(name.encode("latin-1", "replace")) or any(
        c in value for c in "\r\n\0"
    )


class _DateHeader:
    """The ``Date`` header's value, formatted at most once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._text = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._text = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now))
        return self._text


_http_date = _DateHeader()


def new_connection(settings: ConnectionSettings) -> Callable[[], asyncio.Protocol]:
    """The protocol factory for ``loop.create_server``: one connection per accept."""
    return lambda: _Connection(settings)
