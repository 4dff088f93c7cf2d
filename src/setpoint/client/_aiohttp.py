"""aiohttp, imported without reading the system's CA bundle twice before it is needed.

aiohttp (3.10 and later) builds two default TLS contexts while its ``connector`` module is
imported, one verifying and one not, and each reads the system's CA bundle
(``set_default_verify_paths``): on a Debian-like system about 140 certificates, 0.24 G
instructions and 1.5 MB of memory each, about a third of everything an operator imports.
setpoint's client never uses them: it verifies the API server against the CA of its
kubeconfig or service account (:meth:`setpoint.client.config.ClientConfig.ssl_context`).
An application's own aiohttp sessions may use them, so they are kept; only the reading of
the CA bundle is moved from import time to their first use.

Expected Flow:
    1. :mod:`setpoint.client.transport` imports aiohttp through this module.
    2. If ``aiohttp.connector`` is not imported yet, it is imported while
       ``ssl.SSLContext.set_default_verify_paths`` only notes which contexts asked for it.
       The original method is put back before the import returns, in every case.
    3. Each context that asked gets per-instance wrappers of ``wrap_bio``,
       ``wrap_socket``, ``get_ca_certs`` and ``cert_store_stats``: the first call of any
       of them reads the CA bundle (the original method), removes the wrappers and goes on.

Guarantees:
    - A context never verifies a peer before its CA bundle is read: every TLS
      connection asyncio or uvloop makes goes through ``wrap_bio`` (and blocking sockets
      through ``wrap_socket``), which read it first. Its verify mode, hostname checking
      and ALPN protocols are aiohttp's, set at import as before.
    - What the bundle holds is read when first used (``SSL_CERT_FILE``/``SSL_CERT_DIR`` then,
      not at import); the contexts are otherwise those aiohttp made.
    - Nothing changes when aiohttp's connector was imported before setpoint's client,
      or when aiohttp stops building contexts at import: then no context asks.

Caveats:
    - Contexts made by other threads during the import window are deferred the same way
      (the same guarantee holds for them).
    - The first TLS connection through such a context pays the read (about 50 ms) instead
      of the import.

Errors:
    Whatever importing aiohttp raises; reading the bundle at first use raises what
    ``set_default_verify_paths`` would have raised at import (in practice nothing: a missing
    bundle is not an error to OpenSSL).

The module also makes the TLS read buffer of setpoint's client connections cost memory
only as it is used: see :func:`read_buffer_on_demand`.
"""

from __future__ import annotations

import asyncio.sslproto
import functools
import mmap
import ssl
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

_DEFERRED_METHODS = ("wrap_bio", "wrap_socket", "get_ca_certs", "cert_store_stats")
_lock = threading.Lock()


def _defer_default_verify_paths(context: ssl.SSLContext, read: Callable[[], None]) -> None:
    """Make ``context`` call ``read`` (once) before any of :data:`_DEFERRED_METHODS` runs."""
    done = False

    def read_once() -> None:
        nonlocal done
        with _lock:
            if done:
                return
            read()
            done = True
            for name in _DEFERRED_METHODS:
                context.__dict__.pop(name, None)

    for name in _DEFERRED_METHODS:
        method = getattr(context, name)

        def first_use(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            read_once()
            return _method(*args, **kwargs)

        setattr(context, name, first_use)


def _import_connector() -> None:
    """Import ``aiohttp.connector`` with its default contexts' CA bundle read deferred."""
    asked: list[ssl.SSLContext] = []

    def note(self: ssl.SSLContext) -> None:
        asked.append(self)

    original = ssl.SSLContext.set_default_verify_paths
    ssl.SSLContext.set_default_verify_paths = note  # type: ignore[method-assign]
    try:
        import aiohttp.connector  # noqa: F401  (imported for its side effect here)
    finally:
        # SSLContext's own class does not define the method (_ssl._SSLContext does):
        # deleting the patch restores it.
        del ssl.SSLContext.set_default_verify_paths
    for context in asked:
        _defer_default_verify_paths(context, functools.partial(original, context))


if "aiohttp.connector" not in sys.modules and "set_default_verify_paths" not in vars(
    ssl.SSLContext
):
    _import_connector()

import aiohttp  # noqa: E402

_ON_DEMAND: weakref.WeakSet[ssl.SSLContext] = weakref.WeakSet()


def read_buffer_on_demand(context: ssl.SSLContext) -> ssl.SSLContext:
    """Give the TLS connections made with ``context`` a read buffer paid for as it is used.

    asyncio gives every TLS connection a 256 KiB read buffer (``SSLProtocol.max_size``),
    a zero-filled ``bytearray``: 256 KiB of memory per connection from its first byte, on
    the watches and pooled connections of an idle operator too (four of them: 1 MiB, a
    fortieth of its memory). For connections made with ``context`` the buffer is an
    anonymous private memory map of the same size instead: the kernel supplies its pages
    when a read first fills them, so a connection that never receives more than a few
    kilobytes at once holds a few kilobytes. The transport passes its contexts here.

    Expected Flow:
        1. The transport builds its context (:meth:`ClientConfig.ssl_context`) and passes
           it here; it is remembered in a weak set and returned unchanged.
        2. asyncio's ``SSLProtocol.__init__`` (wrapped once, when this module is imported)
           sees a remembered context: it lets asyncio allocate an empty buffer instead of
           256 KiB, then installs a ``max_size`` memory map and its ``memoryview``.
        3. Reads fill the map from its start (``recv_into``), as they filled the array;
           read sizes and copies are asyncio's own, unchanged.

    Guarantees:
        - Connections made with any other context (the application's, the webhook
          server's) keep asyncio's buffer, untouched.
        - The buffer has asyncio's size: a connection reads as much per call as before,
          so bulk transfers (lists, initial events) cost the same CPU.
        - The map is private to the process (``MAP_PRIVATE``): a forked child gets a
          copy on write, as with a ``bytearray``.

    Caveats:
        - The pages a burst touched stay resident for the connection's life (as the whole
          array did); they are returned when the connection closes and the map is freed.
        - Under uvloop, or an asyncio whose ``SSLProtocol`` has no ``bytearray`` buffer, the
          wrapper changes nothing (the protocol keeps whatever it allocated).

    Errors:
        None of its own: ``mmap`` failing to map 256 KiB (out of memory) raises ``OSError``
        from the connection attempt, where the ``bytearray`` would have raised
        ``MemoryError``.
    """
    _ON_DEMAND.add(context)
    return context


def _wrap_ssl_protocol_init() -> None:
    """Wrap ``asyncio.sslproto.SSLProtocol.__init__`` for :func:`read_buffer_on_demand`."""
    protocol = asyncio.sslproto.SSLProtocol
    original = protocol.__init__
    if (
        getattr(original, "_setpoint_on_demand", False)
        or not isinstance(getattr(protocol, "max_size", None), int)
        or not hasattr(mmap, "MAP_PRIVATE")  # not a POSIX system
    ):
        return

    @functools.wraps(original)
    def init(
        self: Any, loop: Any, app_protocol: Any, sslcontext: Any, *args: Any, **kw: Any
    ) -> None:
        if sslcontext is None or sslcontext not in _ON_DEMAND:
            original(self, loop, app_protocol, sslcontext, *args, **kw)
            return
        size = self.max_size
        self.max_size = 0  # asyncio allocates bytearray(self.max_size): make that empty
        try:
            original(self, loop, app_protocol, sslcontext, *args, **kw)
        finally:
            del self.max_size  # reads use the class's size again
        if type(self._ssl_buffer) is bytearray and not self._ssl_buffer:
            buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
            self._ssl_buffer = buffer
            self._ssl_buffer_view = memoryview(buffer)

    init._setpoint_on_demand = True  # type: ignore[attr-defined]
    protocol.__init__ = init  # type: ignore[method-assign]


_wrap_ssl_protocol_init()

__all__ = ["aiohttp", "read_buffer_on_demand"]
