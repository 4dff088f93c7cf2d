"""Typed errors of the cache. Each message names the kind (and object) and what to do."""

from __future__ import annotations

from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.client.errors import UnknownKind

__all__ = [
    "CacheError",
    "CacheNotStarted",
    "CacheSyncTimeout",
    "InformerRemoved",
    "KindNotServed",
    "NotCached",
    "ReadAfterWriteTimeout",
    "UndecodableObject",
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


class InformerRemoved(CacheError):
    """A read named a kind whose informer was removed from the cache.

    See :meth:`~setpoint.cache.Cache.remove_informer`.

    The cache does not start watching the kind again behind the caller's back (its CRD was
    deleted, usually, and a new watch would only fail): add the informer again with
    :meth:`~setpoint.cache.Cache.informer` first, or read with the live client. A read
    waiting for the informer to sync when it was removed fails with it too.
    """


class NotCached(CacheError):
    """A read asked for objects outside the cache's scope (a namespace it does not watch)."""

    __module__ = "setpoint"


class ReadAfterWriteTimeout(CacheError, TimeoutError):
    """The cache did not catch up with this process's own write of an object in time.

    Raised by the read-after-write reader instead of returning a version older than one
    this process wrote. A reconcile that raises it is retried with backoff.
    """

    __module__ = "setpoint"


class UndecodableObject(CacheError, ValueError):
    """A cached object does not fit the typed class it was read as.

    The API server stored it before the schema was tightened, or the class checks more in
    Python than the CRD does on the server (a fake client checks nothing). Retrying cannot
    fix it: only a change to the object (or to the class) can. A reconcile that fails with
    it *for the object it reconciles* is therefore terminal for that object
    (:func:`setpoint.controller.terminal.terminal_reason`). It is a ``ValueError``, as
    pydantic's ``ValidationError`` (its ``__cause__``) is.

    Attributes:
        gvk: the object's kind.
        key: the object's namespace and name.

    """

    __module__ = "setpoint"

    def __init__(self, message: str, *, gvk: GroupVersionKind, key: ObjectKey) -> None:
        super().__init__(message)
        self.gvk = gvk
        self.key = key
