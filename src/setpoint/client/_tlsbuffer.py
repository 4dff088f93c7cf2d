"""The TLS read buffer of setpoint's client connections, paid for as it is used.

See :func:`read_buffer_on_demand`; the HTTP client (:mod:`setpoint.client._http`) makes its TLS
connections with asyncio, so asyncio's ``SSLProtocol`` allocates their read buffers.
"""

from __future__ import annotations

import asyncio.sslproto
import functools
import mmap
import ssl
import weakref
from typing import Any

__all__ = ["read_buffer_on_demand"]

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
