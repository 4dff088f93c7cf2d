"""Connection limits for :class:`~setpoint.server.http.AiohttpServer`: a cap and a header deadline.

aiohttp's low-level server keeps a connection open for as long as a client likes while it
sends half a request (the keep-alive default is 3,630 s) and accepts every connection it is
offered. 300 half-sent requests then exhaust a 256-descriptor limit, and the process can no
longer open sockets or files. This module sits between the listening socket and aiohttp:

- every accepted TCP connection is counted from the moment it is accepted, through the TLS
  handshake, until it closes; beyond ``max_connections`` a new one is closed at once;
- a connection must complete the TLS handshake (when serving HTTPS) and the headers of its
  first request within ``read_header_timeout`` seconds of being accepted, or it is closed
  (Go's ``http.Server.ReadHeaderTimeout``, which controller-runtime sets);
- later requests on a kept-alive connection are bounded by aiohttp's keep-alive timeout,
  which the server sets to ``idle_timeout`` (Go's ``IdleTimeout``).

TLS is done here with ``loop.start_tls`` rather than by the listening socket, so that a
connection that never finishes its handshake is counted and closed like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

log = logging.getLogger("setpoint.server")

_WARN_EVERY = 60.0
"""Seconds between two log lines about refused connections (an attack must not flood logs)."""


class ConnectionGuard:
    """Counts the connections of one server and holds them to the cap and the deadline.

    Args:
        name: The server's name, for logs.
        server: The aiohttp low-level server that speaks HTTP on accepted connections.
        max_connections: Open connections allowed at once.
        read_header_timeout: Seconds from accept to the first request's headers.
        tls: A function returning the listening TLS context, or ``None`` for plain HTTP.

    """

    def __init__(
        self,
        name: str,
        server: web.Server,
        *,
        max_connections: int,
        read_header_timeout: float,
        tls: Callable[[], ssl.SSLContext] | None,
    ) -> None:
        self._name = name
        self._server = server
        self._max = max_connections
        self._header_timeout = read_header_timeout
        self._tls = tls
        self._open: set[_Connection] = set()
        self._by_handler: dict[object, _Connection] = {}
        self.refused = 0
        """Connections closed at once because the server was at its cap."""
        self.timed_out = 0
        """Connections closed because their first request's headers came too late."""
        self._last_warning = 0.0

    @property
    def open(self) -> int:
        """Connections open now (accepted and not yet closed)."""
        return len(self._open)

    def __call__(self) -> asyncio.Protocol:
        """The protocol factory handed to ``loop.create_server``: one call per accept."""
        return _Connection(self)

    def request_started(self, handler: object) -> None:
        """Called by the server when a request's headers have arrived on ``handler``."""
        connection = self._by_handler.get(handler)
        if connection is not None:
            connection.headers_arrived()

    def close_all(self) -> None:
        """Abort every connection still open (after the server stopped serving)."""
        for connection in list(self._open):
            connection.abort()

    def _admit(self, connection: _Connection) -> bool:
        if len(self._open) >= self._max:
            self.refused += 1
            self._warn(
                f"{self._name} is at its limit of {self._max} open connections; closing new "
                f"ones at once ({self.refused} so far). Raise HttpServerOptions."
                "max_connections if the clients are legitimate"
            )
            return False
        self._open.add(connection)
        return True

    def _attach(self, connection: _Connection, handler: object) -> None:
        self._by_handler[handler] = connection

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        if connection.handler is not None:
            self._by_handler.pop(connection.handler, None)

    def _expired(self) -> None:
        self.timed_out += 1
        self._warn(
            f"{self._name} closed a connection that did not send its request headers within "
            f"{self._header_timeout:g} s ({self.timed_out} so far)"
        )

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= _WARN_EVERY:
            self._last_warning = now
            log.warning("%s", message)


class _Connection(asyncio.Protocol):
    """One accepted TCP connection: counted, timed, and forwarding to aiohttp's protocol."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self.handler: asyncio.Protocol | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._handshake: asyncio.Task[None] | None = None
        self._early: list[bytes] = []  # decrypted data that came before the handler existed
        self._closed = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        if not self._guard._admit(self):
            self._closed = True
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._guard._header_timeout, self._headers_too_late)
        tls = self._guard._tls
        if tls is None:
            self._start_http(transport)
        else:
            self._handshake = loop.create_task(self._start_tls(transport, tls()))

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)
        elif not self._closed:
            # TLS: the first request can be decrypted before start_tls() returns to us.
            self._early.append(data)

    def eof_received(self) -> bool | None:
        if self.handler is not None:
            return self.handler.eof_received()
        return None

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()
        if self.handler is not None:
            self.handler.connection_lost(exc)

    # -- ours ------------------------------------------------------------------------------

    def headers_arrived(self) -> None:
        """The first request's headers are in: the header deadline no longer applies."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def abort(self) -> None:
        """Close the connection now, without waiting for buffered data."""
        if self._handshake is not None:
            self._handshake.cancel()
        if self._transport is not None:
            self._transport.abort()
        self._finish()

    def _start_http(self, transport: asyncio.Transport) -> None:
        handler = self._guard._server()
        self.handler = handler
        self._guard._attach(self, handler)
        handler.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            handler.data_received(data)

    async def _start_tls(self, transport: asyncio.Transport, context: ssl.SSLContext) -> None:
        loop = asyncio.get_running_loop()
        try:
            secure = await loop.start_tls(
                transport,
                self,
                context,
                server_side=True,
                ssl_handshake_timeout=self._guard._header_timeout,
            )
        except asyncio.CancelledError:
            transport.abort()
            self._finish()
            raise
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            # A client that is not speaking TLS, or gave up: nothing to serve.
            log.debug("%s: TLS handshake failed: %s", self._guard._name, exc)
            transport.abort()
            self._finish()
            return
        if self._closed or secure is None:
            with contextlib.suppress(Exception):
                transport.abort()
            self._finish()
            return
        self._transport = secure
        self._start_http(secure)

    def _headers_too_late(self) -> None:
        self._deadline = None
        if self._closed:
            return
        self._guard._expired()
        self.abort()

    def _finish(self) -> None:
        if self._closed and self not in self._guard._open:
            return
        self._closed = True
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._guard._forget(self)


class GuardedSite(web.BaseSite):
    """An aiohttp site that listens on ``host:port`` through a :class:`ConnectionGuard`."""

    __slots__ = ("_guard", "_host", "_port")

    def __init__(
        self, runner: web.BaseRunner, host: str | None, port: int, guard: ConnectionGuard
    ) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        """``host:port`` as given."""
        return f"{self._host or '*'}:{self._port}"

    async def start(self) -> None:
        """Listen; TLS, if any, is started per connection by the guard."""
        await super().start()
        loop = asyncio.get_running_loop()
        kwargs: dict[str, Any] = {"reuse_address": True}
        self._server = await loop.create_server(
            self._guard, self._host, self._port, backlog=self._backlog, **kwargs
        )
