"""setpoint.server: the hardened HTTP(S) server every endpoint of an operator is served by.

::

    from setpoint.server import Http1Server, BindAddress, HttpServerOptions, ServerTLS

    server = Http1Server("webhook-server", BindAddress(None, 9443), handler,
                           options=HttpServerOptions(tls=ServerTLS.from_files(crt, key)))

- :mod:`setpoint.server.http`: requests and responses as plain data, the handler type, the
  :class:`HttpServer` runnable protocol and :class:`Http1Server`, with its limits.
- :mod:`setpoint.server.tls`: :class:`ServerTLS`, a serving certificate that can be swapped
  while the server runs.
- :mod:`setpoint.server.address`: :class:`BindAddress` and controller-runtime's ``host:port``
  syntax.

The manager serves probes and metrics with it; the webhook server serves admission and
conversion webhooks with it. Certificates themselves are made and read by
:mod:`setpoint.tls.certs`. The layer sits beside :mod:`setpoint.client` (see
``docs/architecture.md``): only these two packages speak HTTP, each with its own HTTP/1.1
protocol on asyncio (decisions 0012 and 0016), parsing with llhttp (decision 0018).
"""

from setpoint.server.address import DISABLED, BindAddress, free_port, parse_bind_address
from setpoint.server.http import (
    BODY_BUDGET,
    MAX_BODY_SIZE,
    SMALL_BODY_SIZE,
    Http1Server,
    HttpHandler,
    HttpRequest,
    HttpResponse,
    HttpServer,
    HttpServerFactory,
    HttpServerOptions,
)
from setpoint.server.tls import ServerTLS

__all__ = [
    "BODY_BUDGET",
    "DISABLED",
    "MAX_BODY_SIZE",
    "SMALL_BODY_SIZE",
    "BindAddress",
    "Http1Server",
    "HttpHandler",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "HttpServerFactory",
    "HttpServerOptions",
    "ServerTLS",
    "free_port",
    "parse_bind_address",
]
