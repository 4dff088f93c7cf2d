"""The cache: shared informers per kind, a store with indexes, and readers over them.

::

    from setpoint.cache import Cache, CacheOptions
    cache = Cache(client, options=CacheOptions(namespaces=("prod",)))

See :mod:`setpoint.cache.cache` for the cache, :mod:`setpoint.cache.informer` for list/watch
semantics (relist, re-watch, handlers) and :mod:`setpoint.cache.consistency` for
read-after-write (the expectations every informer keeps, the tracking client, the consistent
reader).
"""

from setpoint.cache.cache import Cache, CacheOptions, KindOptions, keep_as_received
from setpoint.cache.consistency import ConsistentReader, Expectations, TrackingClient
from setpoint.cache.errors import (
    CacheError,
    CacheNotStarted,
    CacheSyncTimeout,
    InformerRemoved,
    KindNotServed,
    NotCached,
    ReadAfterWriteTimeout,
    UndecodableObject,
)
from setpoint.cache.informer import (
    FuncHandler,
    HandlerRegistration,
    Informer,
    InformerOptions,
    InformerStats,
    ResourceEventHandler,
    Transform,
    strip_managed_fields,
)
from setpoint.cache.selectors import FieldMatcher, LabelMatcher, SelectorError
from setpoint.cache.store import (
    IndexFunc,
    Store,
    by_controller,
    by_field,
    by_label,
    by_owner_uid,
)

__all__ = [
    "Cache",
    "CacheError",
    "CacheNotStarted",
    "CacheOptions",
    "CacheSyncTimeout",
    "ConsistentReader",
    "Expectations",
    "FieldMatcher",
    "FuncHandler",
    "HandlerRegistration",
    "IndexFunc",
    "Informer",
    "InformerOptions",
    "InformerRemoved",
    "InformerStats",
    "KindNotServed",
    "KindOptions",
    "LabelMatcher",
    "NotCached",
    "ReadAfterWriteTimeout",
    "ResourceEventHandler",
    "SelectorError",
    "Store",
    "TrackingClient",
    "Transform",
    "UndecodableObject",
    "by_controller",
    "by_field",
    "by_label",
    "by_owner_uid",
    "keep_as_received",
    "strip_managed_fields",
]
