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
"""

from __future__ import annotations

import functools
import ssl
import sys
import threading
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

__all__ = ["aiohttp"]
