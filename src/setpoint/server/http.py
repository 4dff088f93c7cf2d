"""A small hardened HTTP(S) server, behind a seam tests can replace.

Endpoints are plain async functions from :class:`HttpRequest` to :class:`HttpResponse`,
independent of any web framework, so tests call them directly. :class:`Http1Server` serves
one such handler on a :class:`~setpoint.server.address.BindAddress`, over plain HTTP or, with
:attr:`HttpServerOptions.tls`, over HTTPS. The manager's probe and metrics servers are
``Http1Server`` instances in the ``SERVERS`` group; the webhook server is one in the
``WEBHOOKS`` group, serving HTTPS.

Hardening, on every server (the defaults are controller-runtime's where it has one):

- at most :attr:`HttpServerOptions.max_connections` connections are open at once; a new one
  beyond that is closed as soon as it is accepted;
- a connection must finish its TLS handshake and send the headers of its first request
  within :attr:`HttpServerOptions.read_header_timeout` (Go's ``ReadHeaderTimeout``), and a
  kept-alive connection must send its next request within
  :attr:`HttpServerOptions.idle_timeout` (Go's ``IdleTimeout``), or it is closed: a slow or
  silent client cannot hold descriptors;
- a request body larger than its path's limit (:attr:`HttpServerOptions.body_limits`, else
  :attr:`HttpServerOptions.max_body_size`) is refused with 413 before it is read whole, and
  a body that does not arrive within :attr:`HttpServerOptions.body_timeout` with 408;
- one server holds at most :attr:`HttpServerOptions.body_budget` bytes of request bodies at
  once, across its connections: a request whose body would pass it gets 503 at once, so
  clients sending large bodies slowly cannot take the process's memory (issue 27);
- requests are parsed by llhttp, Node.js's parser (through ``httptools``), in its strict
  mode, with setpoint's own limits on top: a request line and each header line of at most
  8190 bytes, at most 100 headers and 64 KiB of them, one ``Host`` on HTTP/1.1; folded or
  malformed lines, bare CR or LF, and the request-smuggling ambiguities
  (``Content-Length`` with ``Transfer-Encoding``, two lengths, a transfer coding but
  ``chunked``) are refused with 400 and the connection closed (decision 0018);
- an answer larger than 256 KiB is written in pieces, one per event-loop callback and only
  while the client reads (the transport's flow control), so one large answer (a converted
  ConversionReview of 20 MB) neither holds the loop while TLS encrypts it nor sits whole in
  the server's buffers; a client that reads none of it for
  :attr:`HttpServerOptions.idle_timeout` is closed;
- an exception in a handler becomes a 500 and a log line, never a dead server or a
  traceback sent to the client;
- responses say ``X-Content-Type-Options: nosniff`` and are never cached
  (``Cache-Control: no-store``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from setpoint.api.clock import Clock, LoopClock
from setpoint.api.runnable import Runnable, RunnableGroup
from setpoint.server.address import BindAddress
from setpoint.server.tls import ServerTLS

if TYPE_CHECKING:
    import socket

    from setpoint.server._http1 import ConnectionGuard

__all__ = [
    "BODY_BUDGET",
    "MAX_BODY_SIZE",
    "SMALL_BODY_SIZE",
    "Http1Server",
    "HttpHandler",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "HttpServerFactory",
    "HttpServerOptions",
]

log = logging.getLogger("setpoint.server")

TEXT_PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """The parts of a request that endpoints read."""

    method: str
    """``GET``, ``POST``, ..."""
    path: str
    """The path, without the query (``/readyz``)."""
    query: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Every value of each query parameter (``?exclude=a&exclude=b``); a bare ``?verbose``
    maps to ``("",)``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Request headers. The server delivers a case-insensitive mapping (a repeated header's
    values joined with ``", "``); a plain dict in a test must use the case it was built with."""
    body: bytes = b""
    """The whole request body (at most its path's limit: ``HttpServerOptions.body_limits``,
    else ``max_body_size``)."""
    remote: str | None = None
    """The client's IP address as the socket reports it (never from a header such as
    ``X-Forwarded-For``); ``None`` when unknown. Endpoints use it to tell local callers
    (``127.0.0.1``, ``::1``) from remote ones."""

    @property
    def is_loopback(self) -> bool:
        """Whether the request came over a loopback address (from this machine or pod)."""
        if not self.remote:
            return False
        try:
            return ipaddress.ip_address(self.remote.split("%", 1)[0]).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A complete response."""

    status: int
    """The HTTP status code."""
    body: bytes
    """The whole body."""
    content_type: str = TEXT_PLAIN
    """The ``Content-Type`` header."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Further headers; the server adds its own hardening headers after these."""

    @classmethod
    def text(cls, status: int, text: str) -> HttpResponse:
        """A ``text/plain`` response."""
        return cls(status, text.encode())


HttpHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]
"""Serves one request."""


@runtime_checkable
class HttpServer(Runnable, Protocol):
    """A runnable HTTP(S) server that reports where it listens."""

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound ``(host, port)`` once started (the real port when asked for port 0)."""
        ...


class HttpServerFactory(Protocol):
    """Builds a server from ``(name, bind address, handler)`` and optional ``options``.

    ``ManagerOptions.new_http_server``; :class:`Http1Server` is the default. The manager
    passes ``options`` for its probe and metrics servers: a small body limit
    (:data:`SMALL_BODY_SIZE`), and HTTPS for secure metrics.
    """

    def __call__(
        self,
        name: str,
        address: BindAddress,
        handler: HttpHandler,
        *,
        options: HttpServerOptions | None = None,
    ) -> HttpServer:
        """A new, not yet started server."""
        ...


MAX_BODY_SIZE = 7 * 1024 * 1024
"""The default request body limit: an AdmissionReview carries an object and its old version,
each up to etcd's 1.5 MiB object limit, plus JSON overhead; 7 MiB leaves room for both."""

BODY_BUDGET = 128 * 1024 * 1024
"""The default :attr:`HttpServerOptions.body_budget`: a quarter of the memory limit that
``setpoint init`` scaffolds for the manager's Pod (512 MiB). It holds one ConversionReview at
the webhook's default cap (64 MiB) beside about twenty AdmissionReviews at the API server's
3 MiB request limit, while clients that hold bodies open (slowly, or many at once) can never
take more than this from the operator's caches and controllers (issue 27, finding 1)."""

SMALL_BODY_SIZE = 4 * 1024
"""The body limit of servers whose endpoints are all GETs (the manager's probe and metrics
servers): kubelet probes and Prometheus scrapes send no body, so anything larger than a few
KiB is not one of them."""


@dataclass(frozen=True, kw_only=True)
class HttpServerOptions:
    """Settings of an :class:`Http1Server`; every default is documented here."""

    tls: ServerTLS | None = None
    """Serve HTTPS with this certificate (which can be swapped while serving, see
    :class:`~setpoint.server.tls.ServerTLS`). ``None``: plain HTTP (probes, metrics)."""

    max_body_size: int = MAX_BODY_SIZE
    """Largest request body accepted, in bytes, on a path without its own entry in
    :attr:`body_limits`; a larger one gets 413 without being read."""

    body_limits: Mapping[str, int] = field(default_factory=dict)
    """Exact request path (as :attr:`HttpRequest.path` reads it, e.g. ``"/convert"``) ->
    largest body accepted on that path, in bytes; other paths fall back to
    :attr:`max_body_size`. A larger body gets 413 without being read. The webhook server
    sizes one per webhook path from what the API server can send there."""

    body_limit_hint: str = ""
    """What the 413 answer to a body over its limit tells the client to change, after the
    path and the limit: a server built on this one names its own options here (the webhook
    server: ``WebhookServerOptions.conversion_max_body_size`` and
    ``admission_max_body_size``), since those are what its user sets. ``""``: this class's
    own, ``(HttpServerOptions.body_limits, else max_body_size)``. One line of text."""

    body_budget: int = BODY_BUDGET
    """Bytes of request bodies this server holds at once, across all its connections: a
    request whose body would take the server past it gets 503 (with ``Retry-After``) at
    once, before its body is read, and its connection is closed. A declared body counts from
    its headers, a chunked one chunk by chunk, until its answer is written. 128 MiB by
    default (:data:`BODY_BUDGET`); it must be at least every body limit, or a request at its
    limit could never be served."""

    body_timeout: float = 30.0
    """Seconds a request body may take to arrive before the request gets 408."""

    read_header_timeout: float = 32.0
    """Seconds from accepting a connection until its TLS handshake is done and the headers
    of its first request have arrived; a slower connection is closed. 32 s, as
    controller-runtime's servers (Go's ``ReadHeaderTimeout``)."""

    idle_timeout: float = 90.0
    """Seconds a kept-alive connection may wait for its next request (until that request's
    headers are in) before it is closed; also how long a client may read none of an answer
    that is being written in pieces (a paused transport) before it is closed. 90 s, as
    controller-runtime's servers (Go's ``IdleTimeout``, matching Go clients' keep-alive)."""

    max_connections: int = 128
    """Connections open at once, counted from accept (TLS handshakes included); a new one
    beyond this is closed at once. Probes and metrics need a handful, and the API server
    reuses its connections to a webhook; the cap keeps a flood of connections from using up
    the process's file descriptors (a container's limit can be as low as 1,024, shared with
    the client's pool and open files). Raise it for a webhook under heavy admission traffic."""

    group: RunnableGroup = RunnableGroup.SERVERS
    """The manager's start group: ``SERVERS`` (probes, metrics: up first) or ``WEBHOOKS``."""

    clock: Clock | None = None
    """Where the connections' deadlines (header, idle, body, linger) are read and set;
    ``None``: the running loop's clock (:class:`~setpoint.api.clock.LoopClock`). Tests pass
    a :class:`~setpoint.api.clock.ManualClock` to move time by hand. The TLS handshake's own
    timeout (``read_header_timeout`` too) is asyncio's and runs on the loop's clock."""

    listen_socket: socket.socket | None = None
    """A socket that listens already, to accept from instead of binding the address: a
    worker of ``ManagerOptions.processes`` serves the webhook socket its supervisor opened
    (one accept queue for every worker; decision 0038). The server closes it when it stops.
    ``None``: bind the address given to the server."""

    shutdown_timeout: float = 1.0
    """Seconds :meth:`Http1Server.stop` lets in-flight requests finish. Short by default:
    probes are answered in well under a second, and a long wait would only delay shutdown
    behind an idle keep-alive connection."""

    def __post_init__(self) -> None:
        if self.max_body_size < 0:
            raise ValueError(
                f"HttpServerOptions.max_body_size={self.max_body_size} must be >= 0 bytes"
            )
        for path, limit in self.body_limits.items():
            if not isinstance(path, str) or not path.startswith("/"):
                raise ValueError(
                    f"HttpServerOptions.body_limits[{path!r}]: the key must be a request path "
                    "starting with '/' (matched exactly against HttpRequest.path)"
                )
            if not isinstance(limit, int) or limit < 0:
                raise ValueError(
                    f"HttpServerOptions.body_limits[{path!r}]={limit!r} must be >= 0 bytes"
                )
        if not isinstance(self.body_limit_hint, str) or any(
            c in self.body_limit_hint for c in "\r\n\0"
        ):
            raise ValueError(
                f"HttpServerOptions.body_limit_hint={self.body_limit_hint!r} must be one line "
                "of text (it is appended to 413 answers)"
            )
        # A copy the caller cannot change under a running server.
        object.__setattr__(self, "body_limits", MappingProxyType(dict(self.body_limits)))
        largest = max([self.max_body_size, *self.body_limits.values()])
        if self.body_budget < largest:
            raise ValueError(
                f"HttpServerOptions.body_budget={self.body_budget} is below the largest body "
                f"limit ({largest} bytes, max_body_size or body_limits): a request at that "
                "limit could never be served; raise body_budget or lower the limit"
            )
        if self.max_connections < 1:
            raise ValueError(
                f"HttpServerOptions.max_connections={self.max_connections} must be >= 1"
            )
        for attr in ("body_timeout", "shutdown_timeout", "read_header_timeout", "idle_timeout"):
            value = getattr(self, attr)
            if not value > 0:
                raise ValueError(
                    f"HttpServerOptions.{attr}={value!r} must be a positive number of seconds"
                )


class Http1Server:
    """Serves one :data:`HttpHandler` over HTTP/1.1, plain or with TLS, on asyncio alone.

    Not leader-only: probes, metrics and webhooks answer in every replica. Handler exceptions
    become a 500 response and a log line; they never stop the server. See the module
    docstring for the limits every request is held to; the protocol itself lives in
    ``setpoint.server._http1`` (no web framework: decision 0012).

    HTTP/2 is not offered: the API server and Prometheus speak HTTP/1.1 to webhooks and
    metrics endpoints happily, and controller-runtime's scaffolding turns HTTP/2 off on its
    webhook server by default (CVE-2023-44487, "Rapid Reset").

    Args:
        name: For logs and errors (``"metrics-server"``, ``"webhook-server"``).
        address: Where to listen; port 0 picks a free port (read :attr:`address` after start).
        handler: Answers every request.
        options: TLS, limits and start group; defaults on :class:`HttpServerOptions`.

    """

    def __init__(
        self,
        name: str,
        address: BindAddress,
        handler: HttpHandler,
        *,
        options: HttpServerOptions | None = None,
    ) -> None:
        self._name = name
        self._bind = address
        self._handler = handler
        self._options = options if options is not None else HttpServerOptions()
        self._listener: asyncio.Server | None = None
        self._guard: ConnectionGuard | None = None
        self._address: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        """The name given at construction (``"metrics-server"``, ``"probe-server"``)."""
        return self._name

    @property
    def group(self) -> RunnableGroup:
        """:attr:`HttpServerOptions.group`: ``SERVERS`` unless configured otherwise."""
        return self._options.group

    @property
    def needs_leader_election(self) -> bool:
        """Every replica serves."""
        return False

    @property
    def options(self) -> HttpServerOptions:
        """The server's options."""
        return self._options

    @property
    def scheme(self) -> str:
        """``"https"`` when serving with TLS, else ``"http"``."""
        return "https" if self._options.tls is not None else "http"

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound ``(host, port)`` after :meth:`start`, else ``None``."""
        return self._address

    async def start(self) -> None:
        """Bind and start accepting connections.

        Raises:
            OSError: the address could not be bound (in use, not a local address); the
                message names the server and the address.

        """
        from setpoint.server._http1 import ConnectionGuard, ConnectionSettings, new_connection

        options = self._options
        tls = options.tls
        guard = ConnectionGuard(
            self._name, max_connections=options.max_connections, body_budget=options.body_budget
        )
        settings = ConnectionSettings(
            guard=guard,
            serve=self._serve,
            tls=(lambda: tls.context) if tls is not None else None,
            max_body=options.max_body_size,
            body_limits=options.body_limits,
            body_limit_hint=options.body_limit_hint,
            clock=options.clock if options.clock is not None else LoopClock(),
            header_timeout=options.read_header_timeout,
            idle_timeout=options.idle_timeout,
            body_timeout=options.body_timeout,
        )
        loop = asyncio.get_running_loop()
        try:
            if options.listen_socket is not None:
                listener = await loop.create_server(
                    new_connection(settings), sock=options.listen_socket, backlog=128
                )
            else:
                listener = await loop.create_server(
                    new_connection(settings),
                    self._bind.host,
                    self._bind.port,
                    reuse_address=True,
                    backlog=128,
                )
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"the {self._name} cannot listen on {self._bind}: {exc.strerror or exc}. "
                "Choose another address (port 0 picks a free port, '0' disables the server)",
            ) from exc
        self._listener = listener
        self._guard = guard
        host, port = listener.sockets[0].getsockname()[:2]
        self._address = (str(host), int(port))
        log.info("%s listening on %s://%s:%s", self._name, self.scheme, host, port)

    async def stop(self, timeout: float) -> None:
        """Stop listening, let requests in flight finish, then close every connection.

        Requests in flight get the shorter of ``timeout`` and
        :attr:`HttpServerOptions.shutdown_timeout`; idle kept-alive connections are closed
        at once.
        """
        listener, guard = self._listener, self._guard
        self._listener = None
        if listener is None or guard is None:
            return
        listener.close()
        guard.close_idle()
        # Answered and idle connections close themselves once their last bytes are out.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.001, min(timeout, self._options.shutdown_timeout))):
                await guard.all_closed()
        if guard.busy():
            log.warning("%s did not finish its requests within %.1fs", self._name, timeout)
        guard.abort_all()

    @property
    def open_connections(self) -> int:
        """Connections open now (0 when not serving); at most ``max_connections``."""
        return len(self._guard.open) if self._guard is not None else 0

    def failure(self) -> BaseException | None:
        """Always ``None``: the server has no background work of its own that can die."""
        return None

    @property
    def body_bytes_in_flight(self) -> int:
        """Bytes of request bodies the server holds now (0 when not serving).

        Counted against :attr:`HttpServerOptions.body_budget`: declared bodies from their
        headers, chunked ones chunk by chunk, each until its answer is written.
        """
        return self._guard.bodies if self._guard is not None else 0

    async def _serve(self, request: HttpRequest) -> HttpResponse:
        try:
            return await self._handler(request)
        except Exception:
            log.exception("%s failed to answer %s %s", self._name, request.method, request.path)
            return HttpResponse.text(500, "internal server error\n")
