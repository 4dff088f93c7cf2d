"""The manager's shared cache: what the manager needs from a cache, and how it builds one.

The manager's own lifecycle depends only on the small :class:`CacheLike` protocol: it
starts caches, waits for their initial sync and reports it on ``/readyz``. Any runnable in
group ``CACHES`` that has ``wait_for_sync`` and ``synced`` is treated this way. The shared
cache itself (``Manager.cache``, built by :data:`CacheFactory` on first use) is a
:class:`setpoint.cache.Cache`, which controllers read through. (The module is not called
``cache`` so that ``setpoint.manager.cache`` is never mistaken for :mod:`setpoint.cache`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from setpoint.api.runnable import Runnable
from setpoint.cache import Cache

if TYPE_CHECKING:
    from setpoint.client.protocols import ApiClient

__all__ = ["CacheFactory", "CacheLike", "default_new_cache"]


@runtime_checkable
class CacheLike(Runnable, Protocol):
    """A runnable (group ``CACHES``) that fills itself from the API and can report when ready."""

    @property
    def synced(self) -> bool:
        """Whether every informer has finished its initial list."""
        ...

    async def wait_for_sync(self, timeout: float) -> None:
        """Return once synced; raise (``TimeoutError`` or a cache error) after ``timeout``."""
        ...


CacheFactory = Callable[["ApiClient"], "Cache"]
"""Builds the shared cache from the manager's client (``ManagerOptions.new_cache``).

It returns a :class:`setpoint.cache.Cache` (or a subclass): controllers and users add
indexes and read through it. The manager itself only relies on :class:`CacheLike`, so a
test may inject any object with that shape."""


def default_new_cache(client: ApiClient) -> Cache:
    """Build ``setpoint.cache.Cache(client)``, the manager's default shared cache."""
    return Cache(client)
