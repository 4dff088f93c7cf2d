"""The manager's small HTTP servers (probes, metrics), behind a seam tests can replace.

The manager's endpoints are plain async functions from :class:`HttpRequest` to
:class:`HttpResponse`, independent of any web framework. :class:`AiohttpServer` serves such a
handler on a bind address; ``ManagerOptions.new_http_server`` can swap it for a fake, and tests
can call the handlers directly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from aiohttp import web

from setpoint.api.runnable import Runnable, RunnableGroup
from setpoint.manager.options import BindAddress

__all__ = [
    "AiohttpServer",
    "HttpHandler",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "HttpServerFactory",
]

log = logging.getLogger("setpoint.manager")

TEXT_PLAIN = "text/plain; charset=utf-8"


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """The parts of a request the manager's endpoints read."""

    method: str
    path: str
    query: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Every value of each query parameter (``?exclude=a&exclude=b``); a bare ``?verbose``
    maps to ``("",)``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Request headers; look them up with the exact case the server delivers (aiohttp's
    mapping is case-insensitive)."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A complete response."""

    status: int
    body: bytes
    content_type: str = TEXT_PLAIN

    @classmethod
    def text(cls, status: int, text: str) -> HttpResponse:
        """A ``text/plain`` response."""
        return cls(status, text.encode())


HttpHandler = Callable[[HttpRequest], Awaitable[HttpResponse]]
"""Serves one request."""


@runtime_checkable
class HttpServer(Runnable, Protocol):
    """A runnable HTTP server (group ``SERVERS``) that reports where it listens."""

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound ``(host, port)`` once started (the real port when asked for port 0)."""
        ...


HttpServerFactory = Callable[[str, BindAddress, HttpHandler], HttpServer]
"""Builds a server from ``(name, bind address, handler)`` (``ManagerOptions.new_http_server``)."""


class AiohttpServer:
    """Serves one :data:`HttpHandler` with aiohttp's low-level server.

    Not leader-only: probes and metrics answer in every replica. Handler exceptions become a
    500 response and a log line; they never stop the server.
    """

    def __init__(self, name: str, address: BindAddress, handler: HttpHandler) -> None:
        self._name = name
        self._bind = address
        self._handler = handler
        self._runner: web.ServerRunner | None = None
        self._address: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        """``"metrics-server"`` or ``"probe-server"``."""
        return self._name

    @property
    def group(self) -> RunnableGroup:
        """Servers start first, so a starting process is observable."""
        return RunnableGroup.SERVERS

    @property
    def needs_leader_election(self) -> bool:
        """Every replica serves probes and metrics."""
        return False

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
        server = web.Server(self._serve, access_log=None)
        # Probes are answered in well under a second; a long shutdown_timeout would only
        # delay the manager's shutdown behind an idle keep-alive connection.
        runner = web.ServerRunner(server, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self._bind.host, self._bind.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                exc.errno,
                f"the {self._name} cannot listen on {self._bind}: {exc.strerror or exc}. "
                "Choose another address in ManagerOptions (port 0 picks a free port, '0' "
                "disables the server)",
            ) from exc
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._address = (str(host), int(port))
        log.info("%s listening on %s:%s", self._name, host, port)

    async def stop(self, timeout: float) -> None:
        """Stop listening and close connections, within ``timeout`` seconds."""
        runner = self._runner
        self._runner = None
        if runner is None:
            return
        try:
            await asyncio.wait_for(runner.cleanup(), timeout=max(timeout, 0.001))
        except TimeoutError:
            log.warning("%s did not close its connections within %.1fs", self._name, timeout)

    def failure(self) -> BaseException | None:
        """Always ``None``: the server has no background work of its own that can die."""
        return None

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        query: dict[str, tuple[str, ...]] = {}
        for key in request.query:
            query.setdefault(key, tuple(request.query.getall(key)))
        try:
            response = await self._handler(
                HttpRequest(request.method, request.path, query, request.headers)
            )
        except Exception:
            log.exception("%s failed to answer %s %s", self._name, request.method, request.path)
            response = HttpResponse.text(500, "internal server error\n")
        return web.Response(
            status=response.status,
            body=response.body,
            headers={"Content-Type": response.content_type, "X-Content-Type-Options": "nosniff"},
        )
