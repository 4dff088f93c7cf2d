"""HTTP/1.1 for the client, on asyncio: :class:`HttpPool` (one per API server).

The client keeps its own connections, as setpoint's servers do (decisions 0012 and 0016):
one :class:`_Connection` protocol per TCP (or TLS) connection, a pool of kept-alive
connections per server, requests written in one ``write``. Answers are parsed by llhttp
(Node.js's parser, through ``httptools``, decision 0018): setpoint decides what to feed it
and what an answer may be, llhttp reads the bytes.

What the pool does, all of it here:

- keep-alive: an answered connection goes back to the pool (last in, first out) unless the
  server said ``Connection: close``, answered with HTTP/1.0, the body ran to the end of the
  stream, or the connection has been idle for :data:`IDLE_TIMEOUT` (shorter than the API
  server's 90 s, so the client, not the server, ends idle connections); a connection the
  server closed while it was idle is dropped before anything is written to it;
- at most ``limit`` connections at once (HTTP/1.1 carries one request at a time per
  connection); later requests wait for one to be released, in order;
- TLS with the context it is given (the API server's CA, client certificates), with
  ``server_hostname`` when the certificate names another host than the URL;
- proxies: ``http://`` and ``https://`` proxies (``CONNECT`` for an ``https`` server,
  the absolute URL for an ``http`` one, ``Proxy-Authorization`` from the proxy URL's user
  and password) and ``socks5://`` proxies (RFC 1928, the host name resolved by the proxy,
  RFC 1929 user and password);
- answers framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or the end of the
  stream, ``gzip`` (any number of members) and ``deflate`` bodies decompressed with a
  bound on what comes out (:class:`_Inflater`), interim ``1xx`` answers skipped;
- a cap on each whole answer's body (``max_body`` of :meth:`HttpPool.request`), counted as
  sent and after decompression: past it the request fails with :class:`BodyTooLarge`;
- streaming answers (watches) read piece by piece, with the connection paused while more
  than :data:`STREAM_HIGH_WATER` bytes wait for the reader; a compressed stream is
  decompressed as the reader takes it, never ahead of it.

What llhttp checks (strict: none of its leniency flags is set): the status line, header
names (tokens: no NUL, space, VT or other separators) and values (no NUL, CR or other
control characters), CRLF line ends everywhere (a bare LF or a bare CR is an error),
folded lines, ``Content-Length`` (digits only, not twice, not with ``Transfer-Encoding``),
chunk sizes (hex digits only, no whitespace, no overflow), chunk extensions and trailers.
What setpoint checks on top (see :meth:`_Connection.on_headers_complete` and
:meth:`_Connection._feed`): the HTTP version is 1.0 or 1.1; the status code is 100 or
more and not 101; the reason phrase holds no control character; ``Transfer-Encoding`` is
exactly ``chunked`` (once); the content coding is one it can decode; the status line and
headers (interim answers included) fit in :data:`MAX_HEAD` bytes, and trailers and chunk
framing without data too; no empty line comes before a status line; and nothing follows
an answer on its connection (the answer stands, the connection is closed). Any of these
raise :class:`ProtocolError` and close the connection.

Errors say how far the request got, which is what decides whether it may be sent again
(the transport's rule, :mod:`setpoint.client.transport`): :class:`ConnectError` (and its
:class:`UntrustedCertificate`) mean nothing was sent; :class:`ConnectionBroken` means the
request may have reached the server; :class:`BodyTooLarge` means the answer came and was
too large. A timeout is :class:`TimeoutError`.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import ipaddress
import select
import ssl
import struct
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Final, cast
from urllib.parse import unquote, urlsplit

import httptools

from setpoint.api.clock import Clock, LoopClock, TimerHandle, clock_timeout
from setpoint.api.errors import SetpointError

__all__ = [
    "BodyTooLarge",
    "ConnectError",
    "ConnectionBroken",
    "HttpError",
    "HttpPool",
    "ProtocolError",
    "ProxyLoginRefused",
    "RawResponse",
    "ResponseHeaders",
    "StreamResponse",
    "UntrustedCertificate",
]

MAX_HEAD: Final = 64 * 1024
"""Most bytes of an answer's status lines and headers (interim answers included), and of
the chunk framing and trailers that may come between two pieces of a chunked body."""
IDLE_TIMEOUT: Final = 60.0
"""Seconds a pooled connection may stay idle before the pool closes it (kube-apiserver closes
them after 90 s; ending them first keeps a request from racing the server's close)."""
DEADLINE_TICK: Final = 0.05
"""Seconds between two checks of the deadlines of requests in flight (while there are any):
a request's deadline is kept to within this."""
STREAM_HIGH_WATER: Final = 4 * 1024 * 1024
"""Bytes a streaming answer may buffer for its reader before the connection pauses."""
STREAM_PIECE: Final = 256 * 1024
"""Most decompressed bytes a compressed stream hands its reader at once."""
_PIECE_MIN: Final = 512
_PIECE_MAX: Final = 256 * 1024
"""Bounds of the compressed bytes given to zlib per call (see :class:`_Inflater`); the
upper one is asyncio's TLS read size, so one read of a single-member body is one call."""


class HttpError(SetpointError, OSError):
    """A request that got no complete HTTP answer. Subclasses say how far it got.

    The transport turns each into the client's typed error
    (:class:`~setpoint.client.errors.ClientError`); should one escape it, it is still a
    :class:`~setpoint.SetpointError` and an ``OSError``.
    """


class ConnectError(HttpError):
    """No connection could be opened (or no tunnel through the proxy): nothing was sent.

    ``os_error`` is the operating system's error, when there was one.
    """

    def __init__(self, message: str, os_error: BaseException | None = None) -> None:
        super().__init__(message)
        self.os_error = os_error

    def __str__(self) -> str:
        return self.args[0] if self.args else "connection failed"


class UntrustedCertificate(ConnectError):
    """The server's TLS certificate failed verification; ``certificate_error`` says why.

    The transport reports it as :class:`~setpoint.client.errors.TLSVerificationFailed`;
    bad certificate input of setpoint's own is :class:`setpoint.tls.pem.CertificateError`.
    """

    def __init__(self, message: str, certificate_error: ssl.SSLCertVerificationError) -> None:
        super().__init__(message, certificate_error)
        self.certificate_error = certificate_error


class ProxyLoginRefused(ConnectError):
    """The proxy refused the user and password of its URL: sending again cannot help."""


class ConnectionBroken(HttpError):
    """The connection failed after the request was (or may have been) written."""

    def __str__(self) -> str:
        return self.args[0] if self.args else "connection broken"


class ProtocolError(ConnectionBroken):
    """The server's answer broke HTTP/1.1's framing; the connection was closed."""


class BodyTooLarge(HttpError):
    """An answer's body passed the request's ``max_body``; the connection was closed.

    ``limit`` is the cap in bytes; ``decompressed`` says whether the body passed it after
    decompression (else as sent). Not a :class:`ConnectionBroken`: the server answered,
    and sending the request again would bring the same answer.
    """

    def __init__(self, limit: int, *, decompressed: bool, declared: int | None = None) -> None:
        if declared is not None:
            message = f"the answer declares a body of {declared} bytes, more than {limit}"
        elif decompressed:
            message = f"the answer's body exceeds {limit} bytes once decompressed"
        else:
            message = f"the answer's body exceeds {limit} bytes"
        super().__init__(message)
        self.limit = limit
        self.decompressed = decompressed

    def __str__(self) -> str:
        return str(self.args[0])


class ResponseHeaders(Mapping[str, str]):
    """An answer's headers, looked up without regard to case.

    A header sent several times maps to its values joined by ``", "``; :meth:`getall`
    returns them one by one (``Warning`` values hold commas of their own).
    """

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, list[str]]) -> None:
        self._values = values  # lower-case name -> values in the order sent

    def __getitem__(self, key: str) -> str:
        return ", ".join(self._values[key.lower()])

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        """The header's value, or ``default`` when the answer did not send it."""
        values = self._values.get(key.lower())
        return default if values is None else ", ".join(values)

    def getall(self, key: str, default: Sequence[str] = ()) -> Sequence[str]:
        """Every value of the header, in the order sent (``default`` when there is none)."""
        return self._values.get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"ResponseHeaders({dict(self.items())!r})"


class RawResponse:
    """A whole answer: status, headers and the (decompressed) body bytes."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: ResponseHeaders, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def content_type(self) -> str:
        """The media type of the body, without parameters (``""`` when not sent)."""
        return _content_type(self.headers)


def _content_type(headers: ResponseHeaders) -> str:
    value = headers.get("content-type") or ""
    return value.partition(";")[0].strip().lower()


class StreamResponse:
    """An answer whose body is read as it arrives (a watch). Close it when done."""

    def __init__(
        self,
        status: int,
        headers: ResponseHeaders,
        *,
        exchange: _Exchange,
        connection: _Connection,
        pool: HttpPool,
        read_timeout: float | None,
    ) -> None:
        self.status = status
        self.headers = headers
        self._exchange = exchange
        self._connection = connection
        self._pool = pool
        self._clock = pool.clock
        self._read_timeout = read_timeout
        self._closed = False
        self._timer: TimerHandle | None = None
        if read_timeout is not None:
            self._timer = self._clock.call_at(self._clock.now() + read_timeout, self._check_silence)

    @property
    def content_type(self) -> str:
        """The media type of the body, without parameters (``""`` when not sent)."""
        return _content_type(self.headers)

    def _check_silence(self) -> None:
        """Fail the stream if nothing arrived for ``read_timeout`` seconds.

        Checked lazily: one timer per ``read_timeout`` of silence at most, instead of one
        armed and cancelled per chunk (a watch's steady-state cost).
        """
        self._timer = None
        exchange = self._exchange
        if self._closed or exchange.finished or self._read_timeout is None:
            return
        now = self._clock.now()
        silent = now - exchange.last_arrival
        if silent < self._read_timeout or exchange.pending:
            # Bytes came since (or wait for a slow reader, which is not the server's silence).
            wait = (
                self._read_timeout - silent if silent < self._read_timeout else self._read_timeout
            )
            self._timer = self._clock.call_at(now + wait, self._check_silence)
            return
        exchange.fail(TimeoutError(f"nothing arrived for {self._read_timeout:.0f}s"))
        self._connection.abort()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (decompressed), until it ends.

        Raises:
            TimeoutError: nothing arrived for ``read_timeout`` seconds.
            ConnectionBroken: the connection broke or the framing was wrong; nothing more
                comes (a closed response ends quietly instead).

        """
        exchange = self._exchange
        while True:
            try:
                data = exchange.take()
            except HttpError:
                self.close()
                raise
            if data:
                yield data
                # Not kept while waiting for more: the reader is done with it, and a watch
                # that went quiet after a burst must not hold the burst's last piece.
                data = b""
                continue
            if exchange.finished:
                if exchange.error is not None and not self._closed:
                    raise exchange.error
                self._release()
                return
            await exchange.wait()

    async def read(self, max_body: int | None = None) -> bytes:
        """The whole (remaining) body; more than ``max_body`` bytes raise :class:`BodyTooLarge`."""
        parts: list[bytes] = []
        size = 0
        async for chunk in self.chunks():
            size += len(chunk)
            if max_body is not None and size > max_body:
                self.close()
                raise BodyTooLarge(max_body, decompressed=self._exchange.compressed)
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Stop reading: the connection is closed (it cannot carry another request)."""
        if not self._closed:
            self._closed = True
            if not self._exchange.finished:
                self._connection.abort()
            self._release()

    def _release(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pool.release(self._connection)


# -- decompression -----------------------------------------------------------------------


class _Inflater:
    """A ``gzip`` (any number of members) or ``deflate`` body, decompressed with bounded work.

    Expected Flow:
        1. The connection creates one when an answer's ``Content-Encoding`` asks for it.
        2. :meth:`push` queues compressed body bytes as they arrive (no copy).
        3. :meth:`pull` decompresses queued bytes into a list, stopping once ``max_out``
           bytes came out; the exchange calls it at once for a whole answer (with what is
           left of its cap plus one, so that passing the cap is seen) and as the reader
           takes pieces for a stream.
        4. :meth:`finish` checks that the body ended where a compressed stream ends.

    Guarantees:
        - Output is bounded by ``max_out`` per call: zlib is called with ``max_length``, so
          a small body that inflates to gigabytes costs no more than the cap (finding 4 of
          issue 27: 254 KiB inflated to 781 MiB).
        - Work is linear in the bytes received, however many gzip members they hold
          (kube-apiserver may send each watch event as its own member). Each member needs
          a new decompressor, and zlib copies what follows a member's end into
          ``unused_data``; the compressed bytes given to zlib per call are bounded by twice
          the size of the last member (between :data:`_PIECE_MIN` and :data:`_PIECE_MAX`),
          so that copy stays proportional to the member, and the rest of the input is
          sliced from a ``memoryview``, never joined or copied.
        - Output pieces are collected in a list and joined once, by the caller.

    Caveats:
        - Decompression runs on the event loop; the caps bound how long one answer can
          hold it (zlib inflates a few hundred MiB per second).
        - Bytes after a ``deflate`` body's end, or anything after a gzip member that is not
          another member, are a :class:`ProtocolError` (a corrupt body), not ignored.

    Errors:
        :class:`ProtocolError` for a corrupt or truncated compressed body.
    """

    __slots__ = ("_decoder", "_gzip", "_member_in", "_pending", "_piece", "pending_bytes")

    def __init__(self, *, gzip: bool) -> None:
        self._gzip = gzip
        self._decoder = self._new()
        self._pending: collections.deque[memoryview] = collections.deque()
        self.pending_bytes = 0
        """Compressed bytes queued and not yet decompressed."""
        self._piece = _PIECE_MAX
        self._member_in = 0

    def _new(self) -> zlib._Decompress:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)

    def push(self, data: bytes) -> None:
        """Queue compressed bytes (kept by reference until decompressed)."""
        if data:
            self._pending.append(memoryview(data))
            self.pending_bytes += len(data)

    def pull(self, max_out: int, out: list[bytes]) -> int:
        """Decompress queued bytes into ``out`` until none are left or ``max_out`` came out.

        Returns how many bytes were appended (at most ``max_out``).
        """
        produced = 0
        pending = self._pending
        decoder = self._decoder
        while pending and produced < max_out:
            buffer = pending[0]
            piece = buffer[: self._piece]
            try:
                data = decoder.decompress(piece, max_out - produced)
            except zlib.error as exc:
                raise ProtocolError(f"the answer's compressed body is corrupt: {exc}") from None
            if data:
                out.append(data)
                produced += len(data)
            if decoder.eof:
                left = len(decoder.unused_data)
                used = len(piece) - left
                member = self._member_in + used
                self._member_in = 0
                if not self._gzip and (left or len(buffer) > len(piece) or len(pending) > 1):
                    raise ProtocolError("the answer's deflate body has bytes after its end")
                self._piece = max(_PIECE_MIN, min(_PIECE_MAX, 2 * member))
                decoder = self._decoder = self._new()
            else:
                used = len(piece) - len(decoder.unconsumed_tail)
                self._member_in += used
                if used == len(piece):
                    self._piece = min(_PIECE_MAX, 2 * self._piece)
            self.pending_bytes -= used
            if used == len(buffer):
                pending.popleft()
            else:
                pending[0] = buffer[used:]
        return produced

    def finish(self) -> None:
        """Check that the body ended at the end of a compressed stream (and not inside one)."""
        if self._member_in and not self._decoder.eof:
            raise ProtocolError("the answer's compressed body ends before its compressed data")


# -- one exchange: the answer to one request, as the connection parses it ---------------


class _Exchange:
    """The answer to one request on one connection: its head and body, as they arrive.

    A whole (non-streaming) exchange resolves ``done`` with a :class:`RawResponse`, its body
    capped at ``max_body`` bytes as sent and once decompressed; a streaming one resolves
    ``head`` once the headers are in and then hands out body bytes through
    :meth:`take`/:meth:`wait`, decompressing them as they are taken.
    """

    __slots__ = (
        "_buffered",
        "_clock",
        "_inflater",
        "_parts",
        "_size",
        "_waiter",
        "_wire",
        "connection",
        "done",
        "error",
        "finished",
        "head",
        "head_only",
        "headers",
        "last_arrival",
        "max_body",
        "status",
        "streaming",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        streaming: bool,
        head_only: bool,
        max_body: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.streaming = streaming
        self.head_only = head_only
        self.max_body = max_body
        self.done: asyncio.Future[RawResponse] = loop.create_future()
        self.head: asyncio.Future[None] | None = loop.create_future() if streaming else None
        self.status = 0
        self.headers: ResponseHeaders | None = None
        self.finished = False
        self.error: BaseException | None = None
        self.connection: _Connection | None = None
        self._parts: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._wire = 0
        self._size = 0
        self._inflater: _Inflater | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._clock = clock
        self.last_arrival = clock.now() if clock is not None else 0.0
        """When body bytes last arrived (streams: on ``clock``, which a stream must have)."""

    @property
    def pending(self) -> bool:
        """Whether body bytes wait for the reader."""
        return bool(self._parts) or bool(self._inflater and self._inflater.pending_bytes)

    @property
    def compressed(self) -> bool:
        """Whether the body is decompressed as it is read."""
        return self._inflater is not None

    def started(
        self, status: int, headers: ResponseHeaders, inflater: _Inflater | None, length: int
    ) -> None:
        """The final answer's head is in; ``length`` is its Content-Length (-1: none)."""
        limit = self.max_body
        if limit is not None and length > limit and not self.head_only:
            raise BodyTooLarge(limit, decompressed=False, declared=length)
        self.status = status
        self.headers = headers
        self._inflater = inflater
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def feed(self, data: bytes) -> None:
        """Body bytes as they arrived on the connection (still compressed, when they are)."""
        inflater = self._inflater
        if self.streaming:
            assert self._clock is not None
            self.last_arrival = self._clock.now()
            self._buffered += len(data)
            if inflater is None:
                self._parts.append(data)
            else:
                inflater.push(data)
            self._wake()
            if self._buffered > STREAM_HIGH_WATER and self.connection is not None:
                self.connection.pause()
            return
        limit = self.max_body
        self._wire += len(data)
        if limit is not None and self._wire > limit:
            raise BodyTooLarge(limit, decompressed=False)
        if inflater is None:
            self._parts.append(data)
            return
        inflater.push(data)
        room = (limit - self._size + 1) if limit is not None else 1 << 62
        out: list[bytes] = []
        self._size += inflater.pull(room, out)
        self._parts.extend(out)
        if limit is not None and self._size > limit:
            raise BodyTooLarge(limit, decompressed=True)

    def complete(self) -> None:
        """The body ended: check what the decompressor holds (a whole answer's only)."""
        if self._inflater is not None and not self.streaming:
            self._inflater.finish()

    def finish(self) -> None:
        self.finished = True
        if self.streaming:
            self._wake()
            return
        if not self.done.done():
            assert self.headers is not None
            self.done.set_result(RawResponse(self.status, self.headers, b"".join(self._parts)))
            self._parts.clear()

    def fail(self, exc: BaseException) -> None:
        if self.finished:
            return
        self.finished = True
        self.error = exc
        for future in (self.head, self.done):
            if future is not None and not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: a caller that went away must not log it
        self._wake()

    def take(self) -> bytes:
        """The oldest piece of body that arrived (decompressed), or b"" when none waits.

        Pieces are handed out one by one, not joined: a burst (a watch's initial events)
        is never copied into one large bytes object. A compressed stream is decompressed
        here, at most :data:`STREAM_PIECE` bytes at a time, as the reader asks for it.

        Raises:
            ProtocolError: the compressed body is corrupt or ends inside compressed data.

        """
        parts = self._parts
        inflater = self._inflater
        if not parts and inflater is not None and self.streaming:
            before = inflater.pending_bytes
            out: list[bytes] = []
            while not out and inflater.pending_bytes:
                inflater.pull(STREAM_PIECE, out)
            self._buffered -= before - inflater.pending_bytes
            if not out:
                if self.finished and self.error is None:
                    inflater.finish()
                self._resume_if_drained()
                return b""
            data = b"".join(out) if len(out) > 1 else out[0]
            self._resume_if_drained()
            return data
        if not parts:
            return b""
        data = parts.popleft()
        self._buffered -= len(data)
        self._resume_if_drained()
        return data

    def _resume_if_drained(self) -> None:
        if self._buffered <= STREAM_HIGH_WATER // 2 and self.connection is not None:
            self.connection.resume()

    def wait(self) -> asyncio.Future[None]:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        return waiter

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


_IDLE, _HEAD, _LENGTH, _CHUNKED, _TO_EOF = range(5)
"""Where a connection is in an answer; it decides how far llhttp is fed at once."""

_CONTROL: Final = bytes(range(0x20)).replace(b"\t", b"") + b"\x7f"
"""Bytes a reason phrase may not hold (llhttp lets them through; RFC 9112 and h11 do not)."""


class _Connection(asyncio.Protocol):
    """One connection to the server: writes requests, has llhttp parse their answers in order.

    The connection feeds llhttp (``httptools.HttpResponseParser``, whose callbacks are the
    ``on_*`` methods here) only as far as the current answer may reach: up to the end of
    each head (the first blank line), the last byte a ``Content-Length`` owes, and each
    blank line of a chunked body (where its last chunk and trailers end). After each piece
    it knows whether the answer ended there, so bytes after an answer are never parsed as
    the next one; they close the connection.
    """

    def __init__(self, pool: HttpPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        """When the connection last went back to the pool (on the pool's clock)."""
        self._parser = httptools.HttpResponseParser(self)
        self._phase = _IDLE
        self._exchange: _Exchange | None = None
        self._keep_alive = True
        self._owed = 0
        self._tail = b""
        self._head_room = MAX_HEAD
        self._line_start = False
        self._interim = False
        self._values: dict[str, list[str]] = {}
        self._framing = 0
        self._progress = False
        self._paused = False
        self._lost: asyncio.Future[None] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports implement asyncio.Transport
        # without subclassing it. asyncio and uvloop set TCP_NODELAY on TCP sockets themselves.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._phase == _IDLE:
            # Nothing was asked: a server talking out of turn (or closing with a 408).
            self.abort()
            return
        try:
            self._feed(data)
        except (ProtocolError, BodyTooLarge) as exc:
            self._failed(exc)

    def eof_received(self) -> bool | None:
        self._ended(None)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._ended(exc)
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def _ended(self, exc: Exception | None) -> None:
        """The stream ended (``exc`` None: cleanly): ends a to-the-end body, fails the rest."""
        if self._exchange is not None and self._phase == _TO_EOF and exc is None:
            try:
                self._finish()
            except ProtocolError as error:
                self._closed(error)
                return
        self._closed(
            ConnectionBroken(f"the connection to the server was lost: {exc}")
            if exc is not None
            else ConnectionBroken("the server closed the connection before answering")
        )

    # -- requests ----------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """Whether another request may be written to this connection now."""
        transport = self.transport
        return (
            not self.closed
            and transport is not None
            and not transport.is_closing()
            and self._phase == _IDLE
        )

    def still_open(self) -> bool:
        """Whether an idle connection is still open, asking the socket itself.

        The server may have closed it while the event loop was busy (a restarted API
        server), before asyncio read the end of the stream: the socket is then readable.
        An idle HTTP/1.1 connection has nothing to read, so a readable one is closed or
        holds bytes nobody asked for; either way it must not carry a request.
        """
        if not self.usable:
            return False
        assert self.transport is not None
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return True
        poller = select.poll()  # not select.select: it cannot watch descriptors past 1023
        try:
            poller.register(sock.fileno(), select.POLLIN)
            readable = poller.poll(0)
        except (OSError, ValueError):
            return False
        return not readable

    def send(self, data: bytes, exchange: _Exchange) -> None:
        """Write one whole request; its answer goes to ``exchange``."""
        assert self.transport is not None and self._phase == _IDLE
        exchange.connection = self
        self._exchange = exchange
        self._phase = _HEAD
        self._keep_alive = True
        self._tail = b""
        self._head_room = MAX_HEAD
        self._line_start = True
        self._interim = False
        self.transport.write(data)

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        """Close the connection at once (an abandoned or broken request)."""
        self.closed = True
        transport = self.transport
        if transport is not None:
            transport.abort()
        self._closed(ConnectionBroken("the request was abandoned"))

    async def aclose(self) -> None:
        """Close the connection and wait (briefly) until the transport is gone."""
        transport = self.transport
        self.closed = True
        if transport is None:
            return
        self._lost = asyncio.get_running_loop().create_future()
        transport.close()
        with contextlib.suppress(TimeoutError):
            await clock_timeout(self._pool.clock, self._lost, 1.0)
        if self.transport is not None:
            self.transport.abort()

    # -- feeding llhttp ------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        """Give ``data`` to llhttp, piece by piece, never past the end of the answer."""
        size = len(data)
        pos = 0
        view: memoryview | None = None
        while pos < size:
            phase = self._phase
            if phase == _LENGTH:
                end = min(size, pos + self._owed)
                self._owed -= end - pos
            elif phase == _TO_EOF:
                end = size
            elif phase == _IDLE:
                self._beyond()
                return
            else:  # a head, or a chunked body: up to and including the next blank line
                if self._line_start:
                    if data[pos] in (0x0D, 0x0A):
                        raise ProtocolError("the answer has an empty line before its status line")
                    self._line_start = False
                end = self._blank_line_end(data, pos)
                reach = size if end < 0 else end
                if phase == _HEAD:
                    self._head_room -= reach - pos
                    if self._head_room < 0:
                        raise ProtocolError(f"the answer's headers exceed {MAX_HEAD} bytes")
                if end < 0:
                    self._tail = (self._tail + data[max(pos, size - 3) :])[-3:]
                    end = size
                else:
                    self._tail = b""
            if pos == 0 and end == size:
                piece: bytes | memoryview = data
            else:
                if view is None:
                    view = memoryview(data)
                piece = view[pos:end]
            self._execute(piece, phase)
            pos = end

    def _blank_line_end(self, data: bytes, pos: int) -> int:
        """The index just past the next CRLFCRLF from ``pos``, or -1.

        The last bytes of the previous piece of this phase count: a blank line may be split
        between two reads.
        """
        tail = self._tail
        if tail:
            found = (tail + data[pos : pos + 3]).find(b"\r\n\r\n")
            if found >= 0:
                return pos + found + 4 - len(tail)
        found = data.find(b"\r\n\r\n", pos)
        return -1 if found < 0 else found + 4

    def _execute(self, piece: bytes | memoryview, phase: int) -> None:
        """One ``feed_data`` call; llhttp's verdicts become :class:`ProtocolError`."""
        self._progress = False
        try:
            self._parser.feed_data(piece)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, BaseException):
                raise cause from None
            raise ProtocolError(f"the answer breaks HTTP/1.1 ({exc})") from None
        except httptools.HttpParserUpgrade:
            raise ProtocolError("the server switched protocols, which was not asked for") from None
        except httptools.HttpParserError as exc:
            raise ProtocolError(f"the answer breaks HTTP/1.1 ({exc})") from None
        if phase == _CHUNKED and self._phase == _CHUNKED:
            # Chunk-size lines, extensions and trailers carry no body: bound them as a head.
            self._framing = 0 if self._progress else self._framing + len(piece)
            if self._framing > MAX_HEAD:
                raise ProtocolError(
                    f"the answer's chunked body sent {self._framing} bytes of framing and "
                    f"trailers without data (more than {MAX_HEAD})"
                )

    # -- llhttp's callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        """llhttp: a status line starts."""
        if self._phase != _HEAD:
            raise ProtocolError("the server sent more than the answer it was asked for")
        self._values = {}

    def on_status(self, reason: bytes) -> None:
        """llhttp: (a piece of) the reason phrase."""
        if reason.translate(None, _CONTROL) != reason:
            raise ProtocolError("the answer's reason phrase holds a control character")

    def on_header(self, name: bytes, value: bytes) -> None:
        """llhttp: one header (or trailer) line, checked by llhttp."""
        if self._phase != _HEAD:  # a trailer: bounded by _execute's framing count, dropped
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").rstrip(" \t")
        found = self._values.get(key)
        if found is None:
            self._values[key] = [text]
        else:
            found.append(text)

    def on_headers_complete(self) -> None:
        """llhttp: the head is complete. Setpoint's own checks, then the body's framing."""
        parser = self._parser
        status = parser.get_status_code()
        version = parser.get_http_version()
        values, self._values = self._values, {}
        if version not in ("1.1", "1.0"):
            raise ProtocolError(f"the answer's HTTP version {version} is not 1.1 or 1.0")
        if status < 100:
            raise ProtocolError(f"the answer's status code {status:03d} is below 100")
        transfer = values.get("transfer-encoding")
        if transfer is not None:
            codings = [c.strip().lower() for v in transfer for c in v.split(",")]
            if codings != ["chunked"]:
                raise ProtocolError(f"the answer's transfer coding {transfer!r} is not supported")
        if status < 200:
            if status == 101:
                raise ProtocolError("the server switched protocols, which was not asked for")
            self._interim = True  # 100 Continue, 103 Early Hints: the real answer follows
            return
        exchange = self._exchange
        assert exchange is not None
        inflater = None
        encoding = values.get("content-encoding")
        if encoding is not None:
            coding = encoding[-1].strip().lower()
            if coding in ("gzip", "x-gzip"):
                inflater = _Inflater(gzip=True)
            elif coding == "deflate":
                inflater = _Inflater(gzip=False)
            elif coding not in ("", "identity"):
                raise ProtocolError(f"the answer's content coding {coding!r} is not supported")
        self._keep_alive = version == "1.1" and parser.should_keep_alive()
        length = values.get("content-length")
        declared = -1
        if status in (204, 304):
            self._phase, self._owed = _LENGTH, 0  # no body, whatever the headers say
        elif transfer is not None:
            self._phase = _CHUNKED
            self._framing = 0
        elif length is not None:
            declared = self._owed = int(length[0])  # llhttp checked: digits, one value
            self._phase = _LENGTH
        else:
            self._phase = _TO_EOF
            self._keep_alive = False
        exchange.started(status, ResponseHeaders(values), inflater, declared)
        if exchange.head_only:
            # A HEAD answer has no body, but httptools cannot tell llhttp so (its callback
            # cannot return llhttp's "skip the body"): the connection is not reused.
            self._keep_alive = False
            self._finish()

    def on_body(self, body: bytes) -> None:
        """llhttp: a piece of the body (chunk framing removed)."""
        self._progress = True
        assert self._exchange is not None
        self._exchange.feed(body)

    def on_message_complete(self) -> None:
        """llhttp: the answer (or an interim one) ended."""
        if self._interim:
            self._interim = False
            self._line_start = True
            return
        if self._exchange is not None and self._phase != _IDLE:
            self._finish()

    # -- the end of an answer ------------------------------------------------------------

    def _finish(self) -> None:
        exchange = self._exchange
        assert exchange is not None
        exchange.complete()
        self._exchange = None
        self._phase = _IDLE
        if not self._keep_alive:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        exchange.finish()

    def _beyond(self) -> None:
        """Bytes arrived after a complete answer: the connection cannot be trusted any more."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _failed(self, exc: BaseException) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._closed(exc)

    def _closed(self, exc: BaseException) -> None:
        self.closed = True
        exchange, self._exchange = self._exchange, None
        self._phase = _IDLE
        if exchange is not None:
            exchange.fail(exc)


class _HeadReader:
    """Stops llhttp at the end of a proxy's answer head (to CONNECT): its status is read."""

    def on_headers_complete(self) -> None:
        """llhttp: the head is complete (its body, if any, is not read)."""
        raise _HeadRead


class _HeadRead(Exception):
    """Stops llhttp once a proxy's head is read."""


def _proxy_status(head: bytes) -> int:
    """The status code of a proxy's answer head (``head`` without its blank line)."""
    reader = _HeadReader()
    parser = httptools.HttpResponseParser(reader)
    try:
        parser.feed_data(head + b"\r\n\r\n")
    except httptools.HttpParserCallbackError as exc:
        if isinstance(exc.__context__, _HeadRead):
            return parser.get_status_code()
        raise ProtocolError(f"a malformed answer ({exc})") from None
    except httptools.HttpParserError as exc:
        raise ProtocolError(f"a malformed answer ({exc})") from None
    raise ProtocolError("a malformed answer (its head does not end)")


# -- the pool --------------------------------------------------------------------------


class _Proxy:
    """A proxy URL, taken apart once."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https", "socks5", "socks5h"):
            raise ValueError(
                f"proxy {url.rpartition('@')[2]!r}: only http://, https:// and socks5:// proxies "
                "are supported"
            )
        self.scheme = scheme
        self.host = parts.hostname or ""
        try:
            port = parts.port
        except ValueError:
            port = None
        self.port = port or {"http": 80, "https": 443}.get(scheme, 1080)
        self.username = unquote(parts.username) if parts.username is not None else None
        self.password = unquote(parts.password) if parts.password is not None else None
        self.authorization: str | None = None
        if self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            self.authorization = "Basic " + base64.b64encode(pair).decode("ascii")


class HttpPool:
    """Kept-alive HTTP/1.1 connections to one server (see the module docstring).

    Create and use it inside one event loop. ``target`` of a request is its path and query,
    already encoded.

    Args:
        server: The server's base URL (``https://host:port``); its path is ignored.
        ssl_context: The TLS context for an ``https`` server (ignored for ``http``).
        server_hostname: The name to verify the certificate against, when not the URL's.
        proxy: A proxy URL, or ``None`` for a direct connection.
        limit: The most connections open at once.
        connect_timeout: Seconds to open a connection (TCP, proxy tunnel and TLS).
        clock: Where every deadline, timeout and idle time is read and timed
            (``LoopClock`` by default; tests pass a ``ManualClock``).

    """

    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        proxy: str | None = None,
        limit: int = 100,
        connect_timeout: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock if clock is not None else LoopClock()
        """The pool's time: deadlines are on it, and every timer is set through it."""
        parts = urlsplit(server)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or ""
        try:
            port = parts.port
        except ValueError:
            port = None
        self._port = port or (443 if self._tls else 80)
        self._host_header = parts.netloc.rpartition("@")[2]
        self._origin = f"{parts.scheme}://{self._host_header}"
        self._ssl = ssl_context if self._tls else None
        self._server_hostname = server_hostname or self._host
        self._proxy = _Proxy(proxy) if proxy else None
        self._absolute_form = (
            self._proxy is not None and not self._tls and self._proxy.scheme.startswith("http")
        )
        self._proxy_authorization = (
            f"Proxy-Authorization: {self._proxy.authorization}\r\n"
            if self._absolute_form and self._proxy is not None and self._proxy.authorization
            else ""
        )
        """The header line an HTTP proxy reads on each request it forwards (else empty)."""
        self._limit = limit
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._all: set[_Connection] = set()
        self._closed = False
        self._deadlines: dict[_Exchange, float] = {}
        self._ticker: TimerHandle | None = None

    def head_for(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes | None
    ) -> bytes:
        """The bytes of a request's line and headers (and its body, when it has one)."""
        if self._absolute_form:  # a plain http server behind an HTTP proxy: the whole URL
            target = self._origin + target
        lines = [f"{method} {target} HTTP/1.1\r\nHost: {self._host_header}\r\n"]
        for name, value in headers:
            if "\n" in value or "\r" in value:
                raise ValueError(f"the {name} header of {method} {target} holds a line break")
            lines.append(f"{name}: {value}\r\n")
        if self._proxy_authorization:
            lines.append(self._proxy_authorization)
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n\r\n")
            return "".join(lines).encode("latin-1") + body
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    async def request(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | None = None,
        *,
        deadline: float | None = None,
        max_body: int | None = None,
    ) -> RawResponse:
        """Send one request and return its whole answer.

        ``deadline`` (on the pool's :attr:`clock`) bounds everything: waiting for a
        connection, opening it, and the answer (checked every :data:`DEADLINE_TICK` seconds
        by one timer for all requests, not one timer per request). A cancelled request
        closes its connection too. ``max_body`` caps the answer's body, as sent and once
        decompressed (``None``: no cap; the transport always sets one).

        Raises:
            ConnectError: no connection could be opened; nothing was sent.
            ConnectionBroken: the connection failed after the request was written.
            BodyTooLarge: the answer's body passed ``max_body``.
            TimeoutError: the deadline passed, or opening the connection took longer than
                ``connect_timeout``.

        """
        data = self.head_for(method, target, headers, body)
        idle = self._take_idle() if not self._waiters else None
        if idle is not None:
            connection = idle
        elif deadline is None:
            connection = await self._acquire()
        else:
            connection = await clock_timeout(
                self.clock, self._acquire(), deadline - self.clock.now()
            )
        loop = asyncio.get_running_loop()
        exchange = _Exchange(loop, streaming=False, head_only=method == "HEAD", max_body=max_body)
        if deadline is not None:
            self._bound(exchange, deadline)
        try:
            connection.send(data, exchange)
            response = await exchange.done
        except BaseException:
            connection.abort()
            self.release(connection)
            raise
        finally:
            if deadline is not None:
                self._deadlines.pop(exchange, None)
        self.release(connection)
        return response

    def _bound(self, exchange: _Exchange, deadline: float) -> None:
        """Fail ``exchange`` with TimeoutError (closing its connection) once ``deadline`` passes."""
        self._deadlines[exchange] = deadline
        if self._ticker is None:
            self._ticker = self.clock.call_at(self.clock.now() + DEADLINE_TICK, self._tick)

    def _tick(self) -> None:
        now = self.clock.now()
        late = [exchange for exchange, deadline in self._deadlines.items() if deadline <= now]
        for exchange in late:
            del self._deadlines[exchange]
            connection = exchange.connection
            exchange.fail(TimeoutError("no complete answer before the request's deadline"))
            if connection is not None:
                connection.abort()
        self._ticker = (
            self.clock.call_at(now + DEADLINE_TICK, self._tick) if self._deadlines else None
        )

    async def stream(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        *,
        read_timeout: float | None,
    ) -> StreamResponse:
        """Send one request and return its answer once the headers are in.

        Read the body from :meth:`StreamResponse.chunks` and close the answer when done.
        Raises what :meth:`request` raises.
        """
        data = self.head_for(method, target, headers, None)
        connection = await self._acquire()
        loop = asyncio.get_running_loop()
        exchange = _Exchange(loop, streaming=True, head_only=False, clock=self.clock)
        try:
            connection.send(data, exchange)
            assert exchange.head is not None
            if read_timeout is None:
                await exchange.head
            else:
                await clock_timeout(self.clock, exchange.head, read_timeout)
        except BaseException:
            connection.abort()
            self.release(connection)
            raise
        assert exchange.headers is not None
        return StreamResponse(
            exchange.status,
            exchange.headers,
            exchange=exchange,
            connection=connection,
            pool=self,
            read_timeout=read_timeout,
        )

    # -- connections -------------------------------------------------------------------

    def _take_idle(self) -> _Connection | None:
        """A pooled connection still open, or None (dropping the ones that are not)."""
        if self._closed:
            return None
        idle = self._idle
        now = self.clock.now()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < IDLE_TIMEOUT and connection.still_open():
                return connection
            self._forget(connection)
        return None

    async def _acquire(self) -> _Connection:
        if self._closed:
            raise ConnectError("the connection pool is closed")
        connection = self._take_idle()
        if connection is not None:
            return connection
        while self._open >= self._limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on the slot this waiter was given
                raise
            if self._closed:
                raise ConnectError("the connection pool is closed")
            connection = self._take_idle()
            if connection is not None:
                return connection
        self._open += 1
        try:
            connection = await self._connect()
        except BaseException:
            self._open -= 1
            self._wake_one()
            raise
        self._all.add(connection)
        return connection

    def release(self, connection: _Connection) -> None:
        """Give a connection back after its request: pooled when it can carry another."""
        if connection not in self._all:
            return
        if connection.usable and not self._closed:
            connection.idle_since = self.clock.now()
            self._idle.append(connection)
        else:
            self._forget(connection)
        self._wake_one()

    def _forget(self, connection: _Connection) -> None:
        if connection in self._all:
            self._all.discard(connection)
            self._open -= 1
        if not connection.closed or connection.transport is not None:
            connection.abort()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def retire(self) -> None:
        """Take no new requests; close idle connections now and busy ones when released.

        For a pool replaced by another (a rotated client certificate): requests in flight
        finish on their connections, requests still waiting for one fail with ConnectError.
        """
        self._stop_taking()
        idle, self._idle = self._idle, []
        for connection in idle:
            self._forget(connection)

    def _stop_taking(self) -> None:
        """Refuse new requests; wake the waiting ones, which then fail with ConnectError."""
        self._closed = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def close(self) -> None:
        """Close every connection; requests still waiting for one fail with ConnectError."""
        self._stop_taking()
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        connections = list(self._all)
        self._idle.clear()
        self._all.clear()
        self._open = 0
        for connection in connections:
            if connection._exchange is not None:
                connection.abort()
        await asyncio.gather(*(c.aclose() for c in connections), return_exceptions=True)

    async def _connect(self) -> _Connection:
        connection = _Connection(self)
        where = [f"{self._host}:{self._port}"]  # what is being reached, for the errors
        try:
            return await clock_timeout(
                self.clock, self._dial(connection, where), self._connect_timeout
            )
        except ssl.SSLCertVerificationError as exc:
            raise UntrustedCertificate(
                f"the certificate of {where[0]} failed verification: {exc}", exc
            ) from exc
        except TimeoutError:
            raise
        except ConnectError:
            raise
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(f"cannot connect to {where[0]}: {exc}", exc) from exc

    async def _dial(self, connection: _Connection, where: list[str]) -> _Connection:
        """Open ``connection``: TCP (through the proxy, if any), then TLS.

        ``where[0]`` is set to what is being reached at each step, for the caller's errors.
        """
        loop = asyncio.get_running_loop()
        proxy = self._proxy
        if proxy is None:
            await loop.create_connection(
                lambda: connection,
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._server_hostname if self._ssl else None,
            )
            return connection
        where[0] = f"the proxy {proxy.host}:{proxy.port}"
        proxy_ssl = ssl.create_default_context() if proxy.scheme == "https" else None
        handshake = _Handshake()
        transport, _ = await loop.create_connection(
            lambda: handshake,
            proxy.host,
            proxy.port,
            ssl=proxy_ssl,
            server_hostname=proxy.host if proxy_ssl else None,
        )
        try:
            if proxy.scheme.startswith("socks5"):
                await _socks5(handshake, proxy, self._host, self._port)
            elif self._tls:
                await _connect_tunnel(handshake, proxy, self._host_for_connect())
            else:  # an http server through an HTTP proxy: requests in absolute form
                handshake.hand_over(connection)
                return connection
            if self._ssl is not None:
                where[0] = f"{self._host}:{self._port} (through the proxy)"
                tls = await loop.start_tls(
                    transport,
                    connection,
                    self._ssl,
                    server_hostname=self._server_hostname,
                )
                if tls is None:
                    raise ConnectError(f"TLS could not start with {where[0]}")
                connection.connection_made(tls)
            else:
                handshake.hand_over(connection)
        except BaseException:
            transport.abort()
            raise
        return connection

    def _host_for_connect(self) -> str:
        host = self._host
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(host).version == 6:
                host = f"[{host}]"
        return f"{host}:{self._port}"


# -- proxy handshakes --------------------------------------------------------------------


class _Handshake(asyncio.Protocol):
    """Reads a proxy's replies before the connection is handed to HTTP (or TLS)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._wake()

    def eof_received(self) -> bool | None:
        self._error = ConnectError("the proxy closed the connection during its handshake")
        self._wake()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._error = ConnectError(f"the proxy closed the connection during its handshake: {exc}")
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            await self._more()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def read_head(self) -> bytes:
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self._buffer[:end])
                del self._buffer[: end + 4]
                return head
            if len(self._buffer) > MAX_HEAD:
                raise ConnectError("the proxy's answer to CONNECT is too long")
            await self._more()

    async def _more(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = asyncio.get_running_loop().create_future()
        await self._waiter
        if self._error is not None and not self._buffer:
            raise self._error

    def hand_over(self, protocol: _Connection) -> None:
        """Give the connection to ``protocol`` (no TLS on top): it sees it as new."""
        assert self.transport is not None
        if self._buffer:
            raise ConnectError("the proxy sent bytes nobody asked for after its handshake")
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)


async def _connect_tunnel(handshake: _Handshake, proxy: _Proxy, authority: str) -> None:
    lines = [f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}\r\n")
    lines.append("\r\n")
    handshake.write("".join(lines).encode("latin-1"))
    head = await handshake.read_head()
    try:
        status = _proxy_status(head)
    except ProtocolError as exc:
        raise ConnectError(f"the proxy answered CONNECT with {exc}") from None
    if status == 407:
        raise ProxyLoginRefused(
            f"the proxy refused to open a tunnel to {authority}: 407 (check the proxy URL's "
            "user and password)"
        )
    if status != 200:
        raise ConnectError(f"the proxy refused to open a tunnel to {authority}: {status}")


_SOCKS_ERRORS: Final = {
    1: "general failure",
    2: "connection not allowed by ruleset",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}


async def _socks5(handshake: _Handshake, proxy: _Proxy, host: str, port: int) -> None:
    """RFC 1928 CONNECT to ``host:port`` (RFC 1929 user and password when the URL has them)."""
    methods = b"\x00\x02" if proxy.username is not None else b"\x00"
    handshake.write(b"\x05" + bytes([len(methods)]) + methods)
    version, method = await handshake.read_exactly(2)
    if version != 5:
        raise ConnectError("the proxy does not speak SOCKS5")
    if method == 2:
        user = (proxy.username or "").encode()
        password = (proxy.password or "").encode()
        if len(user) > 255 or len(password) > 255:
            raise ConnectError("the SOCKS5 user name and password are limited to 255 bytes")
        handshake.write(b"\x01" + bytes([len(user)]) + user + bytes([len(password)]) + password)
        _, status = await handshake.read_exactly(2)
        if status != 0:
            raise ProxyLoginRefused(
                "the SOCKS5 proxy refused the user name and password (check the proxy URL's "
                "user and password)"
            )
    elif method != 0:
        raise ProxyLoginRefused(
            "the SOCKS5 proxy accepts none of the offered authentication methods (does it "
            "want a user and password in the proxy URL?)"
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = host.encode("idna")
        target = b"\x03" + bytes([len(name)]) + name
    else:
        target = (b"\x01" if address.version == 4 else b"\x04") + address.packed
    handshake.write(b"\x05\x01\x00" + target + struct.pack("!H", port))
    version, reply, _, kind = await handshake.read_exactly(4)
    if reply != 0:
        reason = _SOCKS_ERRORS.get(reply, f"error {reply}")
        raise ConnectError(f"the SOCKS5 proxy could not connect to {host}:{port}: {reason}")
    if kind == 1:
        await handshake.read_exactly(4 + 2)
    elif kind == 4:
        await handshake.read_exactly(16 + 2)
    elif kind == 3:
        (size,) = await handshake.read_exactly(1)
        await handshake.read_exactly(size + 2)
    else:
        raise ConnectError("the SOCKS5 proxy answered with an unknown address type")
