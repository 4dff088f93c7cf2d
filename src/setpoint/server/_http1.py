"""HTTP/1.1 on asyncio for :class:`~setpoint.server.http.Http1Server`: parsing, limits, timers.

One :class:`_Connection` per accepted TCP connection does everything the server promises,
in one place and with no web framework underneath:

- it is counted by the :class:`ConnectionGuard` from accept (TLS handshake included) until
  it closes; beyond ``max_connections`` a new one is closed at once;
- the TLS handshake (``loop.start_tls``, so that a handshake that never finishes is counted
  and timed like any other connection) and the headers of the first request must arrive
  within ``read_header_timeout`` (Go's ``ReadHeaderTimeout``); the headers of each later
  request on a kept-alive connection within ``idle_timeout`` of the previous answer (Go's
  ``IdleTimeout``); a body within ``body_timeout`` of its headers (408);
- requests are parsed strictly (RFC 9112): a request line and each header line of at most
  8,190 bytes, at most 100 headers and 64 KiB of them; no whitespace before a header's colon,
  no folded lines, no control characters; ``Content-Length`` and ``Transfer-Encoding``
  together, two different lengths, or a transfer coding other than ``chunked`` are refused
  with 400 and the connection is closed (the classic request-smuggling ambiguities);
- a body longer than ``max_body_size`` is refused with 413 before it is read (declared
  length) or as soon as it grows past the limit (chunked), and the connection is closed;
- requests on one connection are answered one at a time, in order; while one is being
  handled the connection stops reading (pipelined requests wait in the kernel's buffer).

Why not aiohttp's server: its per-request machinery (request objects, multidicts, stream
readers, response objects) cost about 0.35 ms of CPU per request on the webhook's hot path,
more than the conversion itself; this module answers the same requests in a fraction of that
(decision 0012, bench/conversion).
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
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    from setpoint.server.http import HttpRequest, HttpResponse

log = logging.getLogger("setpoint.server")

MAX_LINE = 8190
"""Longest request line or header line, in bytes (aiohttp's and nginx's default)."""
MAX_HEADERS = 100
"""Most header lines in one request (Go's server allows more, but only up to 1 MiB of them)."""
MAX_HEAD = 64 * 1024
"""Most bytes from the request line to the blank line that ends the headers."""

_WARN_EVERY = 60.0
"""Seconds between two log lines about refused connections (an attack must not flood logs)."""

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name or method (RFC 9110, 5.6.2)."""
_BAD_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""What a header value or the request target may not hold."""
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_TOKEN_TEXT = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_IN_TEXT = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_HEADER_LINE = re.compile(
    r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*"
)
"""``name: value`` (RFC 9112, 5): a token, a colon right after it, optional whitespace
around a value without control characters (tab allowed)."""
_DIGITS = re.compile(r"[0-9]{1,18}")


class RequestError(Exception):
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


class ParsedHead:
    """The request line and headers of one request, checked."""

    __slots__ = (
        "chunked",
        "close",
        "content_length",
        "expect_continue",
        "headers",
        "method",
        "path",
        "query",
    )

    def __init__(self, head: bytes) -> None:
        # latin-1 maps every byte to one character: checks on the text are checks on bytes.
        lines = head.decode("latin-1").split("\r\n")
        if len(lines) - 1 > MAX_HEADERS:
            raise RequestError(431, f"more than {MAX_HEADERS} header lines")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise RequestError(400, "malformed request line (expected: METHOD target HTTP/1.1)")
        method, target, version = parts
        if not _TOKEN_TEXT.fullmatch(method):
            raise RequestError(400, "malformed request method")
        if version not in {"HTTP/1.1", "HTTP/1.0"}:
            if version.startswith("HTTP/"):
                raise RequestError(505, "only HTTP/1.0 and HTTP/1.1 are served")
            raise RequestError(400, "malformed request line (expected: METHOD target HTTP/1.1)")
        if not target or _BAD_IN_TEXT.search(target) or "\t" in target:
            raise RequestError(400, "malformed request target")
        self.method = method
        if target[0] == "/":
            raw_path, _, raw_query = target.partition("?")
        elif target.startswith(("http://", "https://")):  # absolute form (RFC 9112, 3.2.2)
            split = urlsplit(target)
            raw_path, raw_query = split.path or "/", split.query
        elif target == "*" and method == "OPTIONS":
            raw_path, raw_query = "*", ""
        else:
            raise RequestError(400, "malformed request target")
        raw_path = raw_path.partition("#")[0]
        self.path = unquote(raw_path) if "%" in raw_path else raw_path
        self.query = _query(raw_query) if raw_query else {}
        items: dict[str, tuple[str, str]] = {}
        lengths: set[str] = set()
        codings: list[str] = []
        for line in lines[1:]:
            if len(line) > MAX_LINE:
                raise RequestError(431, f"a header line is longer than {MAX_LINE} bytes")
            match = _HEADER_LINE.fullmatch(line)
            if match is None:
                # A name that is not a token, no colon, whitespace before the colon, a folded
                # line (starts with whitespace), or a control character in the value.
                raise RequestError(400, "malformed header line")
            name, value = match.groups()
            key = name.lower()
            if key == "content-length":
                lengths.update(v.strip() for v in value.split(","))
            elif key == "transfer-encoding":
                codings.extend(c.strip().lower() for c in value.split(",") if c.strip())
            if key in items:
                items[key] = (items[key][0], f"{items[key][1]}, {value}")
            else:
                items[key] = (name, value)
        self.headers = Headers(items)
        self.chunked = False
        self.content_length = 0
        if codings:
            if lengths:
                raise RequestError(400, "both Content-Length and Transfer-Encoding are set")
            if codings != ["chunked"] or version == "HTTP/1.0":
                raise RequestError(400, "only the chunked transfer coding is accepted")
            self.chunked = True
        elif lengths:
            if len(lengths) != 1:
                raise RequestError(400, "Content-Length values differ")
            (length,) = lengths
            if not _DIGITS.fullmatch(length):
                raise RequestError(400, "Content-Length is not a non-negative integer")
            self.content_length = int(length)
        connection = items["connection"][1].lower() if "connection" in items else ""
        if version == "HTTP/1.1":
            self.close = "close" in connection
        else:
            self.close = "keep-alive" not in connection
        self.expect_continue = "expect" in items and items["expect"][1].lower() == "100-continue"


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


class ConnectionGuard:
    """Counts one server's connections and holds them to the cap.

    Args:
        name: The server's name, for logs.
        max_connections: Open connections allowed at once.

    """

    def __init__(self, name: str, *, max_connections: int) -> None:
        self.name = name
        self._max = max_connections
        self.open: set[_Connection] = set()
        """Connections accepted and not yet closed."""
        self.refused = 0
        """Connections closed at once because the server was at its cap."""
        self.timed_out = 0
        """Connections closed because a request's headers or body came too late."""
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


Serve = Callable[["ParsedHead", bytes, "str | None"], Awaitable["HttpResponse"]]
"""What a connection calls for each complete request: the head, the body, the peer address."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionSettings:
    """What every connection of one server needs, gathered once."""

    guard: ConnectionGuard
    """Counts the server's connections."""
    serve: Serve
    """Answers each complete request."""
    tls: Callable[[], ssl.SSLContext] | None
    """The current TLS context (called per connection, so a new certificate applies to new
    connections), or ``None`` for plain HTTP."""
    max_body: int
    """Largest request body accepted, in bytes."""
    header_timeout: float
    """Seconds for the TLS handshake and the first request's headers."""
    idle_timeout: float
    """Seconds a kept-alive connection may wait for its next request's headers."""
    body_timeout: float
    """Seconds a request's body may take after its headers."""


_HEAD, _BODY, _CHUNKED, _HANDLING, _DRAINING, _CLOSED = range(6)

_LINGER = 2.0
"""Seconds a refused request's unread body is still read and dropped before the connection
closes, so that the client, still sending, gets to read the refusal (a close while it sends
would reset the connection and lose the answer; Go's server drains up to 256 KiB)."""
_LINGER_BYTES = 64 * 1024 * 1024
"""Most bytes dropped while lingering."""

_HIGH_WATER = 256 * 1024
"""Bytes of pipelined requests buffered while one is handled before the connection stops reading."""


class _Connection(asyncio.Protocol):
    """One accepted TCP connection speaking HTTP/1.1 (module docstring)."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self._s = settings
        self._transport: asyncio.Transport | None = None
        self._handshake: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline: float | None = None
        self._deadline_kind = "head"
        self._buffer = bytearray()
        self._state = _HEAD
        self._head: ParsedHead | None = None
        self._chunks: list[bytes] = []
        self._chunked_size = 0
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

    @property
    def handling(self) -> bool:
        """Whether a request is being handled now."""
        return self._state == _HANDLING

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
        if self._state >= _DRAINING:
            if self._state == _DRAINING:
                self._drained += len(data)
                if self._drained >= self._drain_limit:
                    self._close()
            return
        self._buffer += data
        if self._state == _HANDLING and len(self._buffer) > _HIGH_WATER and not self._paused:
            # A client pipelining far ahead: stop reading until this answer is out.
            self._paused = True
            if self._transport is not None:
                self._transport.pause_reading()
        # During a TLS handshake, the first request can be decrypted before start_tls()
        # returns the TLS transport: keep it until then.
        if self._state != _HANDLING and not self._handshaking:
            self._advance()

    def eof_received(self) -> bool | None:
        # A client that half-closes after sending its requests still gets the answers; then
        # the connection closes (see _answer).
        self._eof = True
        if self._state != _HANDLING:
            if self._state in (_HEAD, _BODY, _CHUNKED) and self._buffer:
                self._advance()  # a complete request may be buffered behind a handled one
            if self._state != _HANDLING:
                self._close()
                return None
        return None if self._secure else True

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _CLOSED
        self._stop_timer()
        if self._handshake is not None and not self._handshake.done():
            self._handshake.cancel()
        self._s.guard.forget(self)

    # -- control -----------------------------------------------------------------------------

    def abort(self) -> None:
        """Close now, dropping anything buffered and cancelling a handler in flight."""
        self._state = _CLOSED
        self._stop_timer()
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
        """Parse what is buffered; start handling a request once one is complete."""
        try:
            if self._state == _HEAD and not self._read_head():
                return
            if self._state == _BODY:
                head = self._head
                assert head is not None
                if len(self._buffer) < head.content_length:
                    return
                body = bytes(self._buffer[: head.content_length])
                del self._buffer[: head.content_length]
            elif self._state == _CHUNKED:
                chunked = self._read_chunks()
                if chunked is None:
                    return
                body = chunked
            else:
                return
        except RequestError as exc:
            self._refuse(exc.status, exc.reason, unread=self._unread_body())
            return
        self._handle(body)

    def _read_head(self) -> bool:
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD:
                raise RequestError(431, f"request headers larger than {MAX_HEAD} bytes")
            first = buffer.find(b"\r\n")
            if (first < 0 and len(buffer) > MAX_LINE) or first > MAX_LINE:
                raise RequestError(414, f"request line longer than {MAX_LINE} bytes")
            return False
        if end > MAX_HEAD:
            raise RequestError(431, f"request headers larger than {MAX_HEAD} bytes")
        if buffer.find(b"\r\n", 0, end + 2) > MAX_LINE:
            raise RequestError(414, f"request line longer than {MAX_LINE} bytes")
        head = ParsedHead(bytes(buffer[:end]))
        del buffer[: end + 4]
        self._head = head
        self._cancel_timer()  # the header deadline (first request) or the idle one
        if head.content_length > self._s.max_body:
            self._state = _BODY  # its body is on the way: _refuse() drains it
            raise RequestError(413, f"request body larger than {self._s.max_body} bytes")
        if head.chunked:
            self._state = _CHUNKED
            self._chunks = []
            self._chunked_size = 0
        else:
            self._state = _BODY
        if head.chunked or len(buffer) < head.content_length:
            if head.expect_continue and self._transport is not None:
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self._set_timer(self._s.body_timeout, kind="body")
        return True

    def _read_chunks(self) -> bytes | None:
        """The whole chunked body once its last chunk is in, else ``None`` (RFC 9112, 7.1)."""
        buffer = self._buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                if len(buffer) > MAX_LINE:
                    raise RequestError(400, "malformed chunk size line")
                return None
            size_text = bytes(buffer[:line_end]).partition(b";")[0].strip(b" \t")
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise RequestError(400, "malformed chunk size line")
            size = int(size_text, 16)
            if size == 0:
                trailers_end = buffer.find(b"\r\n\r\n", line_end)
                if trailers_end == line_end:  # no trailers: "0\r\n\r\n"
                    del buffer[: line_end + 4]
                    return b"".join(self._chunks)
                if trailers_end < 0:
                    if len(buffer) > MAX_HEAD:
                        raise RequestError(431, "chunked trailers too large")
                    return None
                del buffer[: trailers_end + 4]  # trailers are read and ignored
                return b"".join(self._chunks)
            if self._chunked_size + size > self._s.max_body:
                raise RequestError(413, f"request body larger than {self._s.max_body} bytes")
            start = line_end + 2
            if len(buffer) < start + size + 2:
                return None
            if buffer[start + size : start + size + 2] != b"\r\n":
                raise RequestError(400, "a chunk is not followed by CRLF")
            self._chunks.append(bytes(buffer[start : start + size]))
            self._chunked_size += size
            del buffer[: start + size + 2]

    # -- answering ---------------------------------------------------------------------------

    def _handle(self, body: bytes) -> None:
        head = self._head
        assert head is not None and self._transport is not None
        self._cancel_timer()
        self._state = _HANDLING
        self._task = asyncio.get_running_loop().create_task(self._answer(head, body))

    async def _answer(self, head: ParsedHead, body: bytes) -> None:
        try:
            response = await self._s.serve(head, body, self._remote)
        except Exception:  # the server's serve() answers 500 itself; this is a last resort
            log.exception("%s failed to answer %s %s", self._s.guard.name, head.method, head.path)
            from setpoint.server.http import HttpResponse

            response = HttpResponse.text(500, "internal server error\n")
        self._task = None
        self._served += 1
        if self._state == _CLOSED:
            return
        close = head.close or self._stopping
        self._write(head.method, response.status, response, close=close)
        if close:
            self._close()
            return
        self._state = _HEAD
        self._head = None
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        if self._buffer:
            self._advance()
        if self._state == _HEAD:
            if self._eof:
                self._close()  # the client sent all it will send, and has every answer
                return
            self._set_timer(self._s.idle_timeout)

    def _write(self, method: str, status: int, response: HttpResponse, *, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        body = response.body
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
        lines.append(f"Content-Length: {len(body)}")
        lines.append("X-Content-Type-Options: nosniff")
        lines.append("Cache-Control: no-store")
        lines.append(f"Date: {_http_date()}")
        if close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        transport.write(head + body if method != "HEAD" else head)

    def _refuse(self, status: int, reason: str, *, unread: int = 0) -> None:
        """Answer a request the server will not hand to its handler, and close.

        ``unread``: bytes of its body still on the way (-1: unknown). They are read and
        dropped for up to ``_LINGER`` seconds first, so the client can read the answer.
        """
        from setpoint.server.http import HttpResponse

        self._write("GET", status, HttpResponse.text(status, reason + "\n"), close=True)
        if unread == 0:
            self._close()
            return
        self._state = _DRAINING
        self._buffer.clear()
        self._drained = 0
        self._drain_limit = _LINGER_BYTES if unread < 0 else min(unread, _LINGER_BYTES)
        self._set_timer(_LINGER, kind="drain")

    def _unread_body(self) -> int:
        """Bytes of the current request's body not yet received (-1: unknown)."""
        head = self._head
        if self._state == _BODY and head is not None:
            return max(0, head.content_length - len(self._buffer))
        if self._state == _CHUNKED:
            return -1
        return 0

    def _close(self) -> None:
        self._state = _CLOSED
        self._stop_timer()
        if self._transport is not None:
            self._transport.close()

    # -- timers ------------------------------------------------------------------------------
    # One deadline at a time: the headers' (first request, or the next on a kept-alive
    # connection) or the body's. Setting or clearing it is an attribute write; the timer is
    # re-armed lazily when it fires early, so a busy connection does not schedule and cancel
    # a TimerHandle per request.

    def _set_timer(self, seconds: float, *, kind: str = "head") -> None:
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + seconds
        self._deadline_kind = kind
        timer = self._timer
        if timer is None or timer.when() > self._deadline:
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(self._deadline, self._deadline_passed)

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
        loop = asyncio.get_running_loop()
        if loop.time() < deadline:
            self._timer = loop.call_at(deadline, self._deadline_passed)
            return
        self._deadline = None
        if self._deadline_kind == "body":
            self._body_too_late()
        elif self._deadline_kind == "drain":
            self._close()
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

    def _body_too_late(self) -> None:
        if self._state not in (_BODY, _CHUNKED):
            return
        self._s.guard.timed_out += 1
        self._refuse(408, "request body not received in time", unread=self._unread_body())


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


def request_from(head: ParsedHead, body: bytes, remote: str | None) -> HttpRequest:
    """The :class:`HttpRequest` endpoints see."""
    from setpoint.server.http import HttpRequest

    return HttpRequest(head.method, head.path, head.query, head.headers, body, remote)
