"""Typed errors of the cache. Each message names the kind (and object) and what to do."""

from __future__ import annotations

from setpoint.api.errors import SetpointError
from setpoint.client.errors import UnknownKind

__all__ = [
    "CacheError",
    "CacheNotStarted",
    "CacheSyncTimeout",
    "KindNotServed",
    "NotCached",
    "ReadAfterWriteTimeout",
]


class CacheError(SetpointError):
    """Base of every error the cache raises."""


class CacheNotStarted(CacheError):
    """A read reached the cache before :meth:`~setpoint.cache.Cache.start`.

    The manager starts the cache before any controller; standalone code must do the same.
    """


class CacheSyncTimeout(CacheError, TimeoutError):
    """Informers did not finish their initial list in time. Names the kinds and last errors."""

    __module__ = "setpoint"


class KindNotServed(UnknownKind, CacheError):
    """The API server does not serve a kind the cache was asked to watch.

    For a custom resource this means its CustomResourceDefinition is not installed (or not
    yet Established). It is an :class:`~setpoint.client.errors.UnknownKind`, so code that
    handles the client's error handles this one too. The informer keeps retrying with
    backoff, so it syncs once the CRD appears.
    """

    __module__ = "setpoint"


class NotCached(CacheError):
    """A read asked for objects outside the cache's scope (a namespace it does not watch)."""

    __module__ = "setpoint"


class ReadAfterWriteTimeout(CacheError, TimeoutError):
    """The cache did not catch up with this process's own write of an object in time.

    Raised by the read-after-write reader instead of returning a version older than one
    this process wrote. A reconcile that raises it is retried with backoff.
    """

    __module__ = "setpoint"
