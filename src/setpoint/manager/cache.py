"""What the manager needs from a cache, and how it builds its default one.

The manager depends on the small :class:`CacheLike` protocol, not on ``setpoint.cache``
itself: it starts caches, waits for their initial sync and reports it on ``/readyz``. Any
runnable in group ``CACHES`` that has ``wait_for_sync`` and ``synced`` is treated this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from setpoint.api.runnable import Runnable

if TYPE_CHECKING:
    from setpoint.cache import Cache
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
    """Build ``setpoint.cache.Cache(client)``, the manager's default shared cache.

    Imported when first needed, so a manager without controllers never loads the cache.
    """
    from setpoint.cache import Cache

    return Cache(client)
