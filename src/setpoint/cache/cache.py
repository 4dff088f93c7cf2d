"""The cache: one shared informer per kind, indexes, and a reader over them.

::

    cache = Cache(client, options=CacheOptions(namespaces=("prod",)))
    await cache.start()
    await cache.wait_for_sync(timeout=60)
    cm = await cache.get(kinds.ConfigMap, "settings", namespace="prod")

The :class:`Cache` is a :class:`~setpoint.api.runnable.Runnable` in the ``CACHES`` group: the
manager starts it before any controller and waits for it to sync. It satisfies the
:class:`~setpoint.client.protocols.Reader` protocol, like the live client: ``get`` raises the
same :class:`~setpoint.client.errors.NotFound`, and typed kinds return typed objects.

Informers are created on first use (:meth:`Cache.informer`, or a read of a kind not seen
before) and shared by every controller. What each watches is set per kind
(:class:`KindOptions`) over cache-wide defaults (:class:`CacheOptions`): namespaces, label
and field selectors, the transform applied before storing (stripping
``metadata.managedFields`` by default) and an optional periodic resync.

Reads return objects the caller owns and may mutate: the store keeps objects encoded and
every read decodes a new one (:mod:`setpoint.cache.store`). For reads
that must see this process's own writes, use :meth:`Cache.reader` together with
:meth:`Cache.tracking_client` (controllers do this for you; see
:mod:`setpoint.cache.consistency`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, key_of
from setpoint.api.metadata import Metadata
from setpoint.api.runnable import RunnableGroup
from setpoint.api.types import Kind, split_kind
from setpoint.cache.consistency import ConsistentReader, Expectations, TrackingClient
from setpoint.cache.errors import (
    CacheError,
    CacheNotStarted,
    CacheSyncTimeout,
    InformerRemoved,
    NotCached,
    ReadAfterWriteTimeout,
    UndecodableObject,
)
from setpoint.cache.informer import (
    Informer,
    InformerOptions,
    KeyFilter,
    Transform,
    strip_managed_fields,
)
from setpoint.cache.selectors import FieldMatcher, LabelMatcher
from setpoint.cache.store import IndexFunc, mark_read
from setpoint.client.client import Selector
from setpoint.client.errors import NotFound
from setpoint.client.objects import ObjectList
from setpoint.client.protocols import ApiClient, ListWatcher

__all__ = [
    "Cache",
    "CacheOptions",
    "KindOptions",
    "decode_typed",
    "keep_as_received",
]

T = TypeVar("T")


def keep_as_received(obj: JsonObject) -> JsonObject:
    """A transform that keeps objects exactly as the server sent them (managedFields too)."""
    return obj


def _selector_text(value: Selector | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return ",".join(f"{k}={v}" for k, v in sorted(value.items()))


@dataclass(frozen=True, kw_only=True)
class KindOptions:
    """Per-kind overrides of :class:`CacheOptions`; ``None`` means "use the cache default"."""

    namespaces: tuple[str, ...] | None = None
    """Namespaces to watch for this kind; ``()`` means all. ``None``: the cache default."""

    labels: Selector | None = None
    """Label selector for this kind; ``""`` means none. ``None``: the cache default."""

    fields: Selector | None = None
    """Field selector for this kind; ``""`` means none. ``None``: the cache default."""

    transform: Transform | None = None
    """Transform for this kind (:func:`keep_as_received` to store objects as received).
    ``None``: the cache default."""

    resync_period: float | None = None
    """Resync period in seconds for this kind. ``None``: the cache default."""

    def __post_init__(self) -> None:
        if self.resync_period is not None and self.resync_period <= 0:
            raise ValueError("KindOptions.resync_period must be > 0 seconds (or None to inherit)")
        LabelMatcher.parse(self.labels)
        FieldMatcher.parse(self.fields)


@dataclass(frozen=True, kw_only=True)
class CacheOptions:
    """Settings of a :class:`Cache`. Every default is documented on its attribute."""

    namespaces: tuple[str, ...] = ()
    """Namespaces every informer watches (one list/watch per namespace); ``()`` (default):
    all namespaces. Cluster-scoped kinds ignore it."""

    labels: Selector | None = None
    """Label selector applied to every kind (server-side). Default ``None``: none."""

    fields: Selector | None = None
    """Field selector applied to every kind (server-side). Default ``None``: none."""

    transform: Transform | None = strip_managed_fields
    """Applied to each object before it is stored. Default: strip ``metadata.managedFields``."""

    resync_period: float | None = None
    """Periodic resync (``on_update(obj, obj)`` for every object) in seconds, ±10 % jitter.
    Default ``None``: none; level-based controllers rarely need it."""

    by_kind: Mapping[Kind[object], KindOptions] = field(default_factory=dict)
    """Overrides per kind (GVK or typed class). Default: none."""

    sync_timeout: float = 120.0
    """Seconds a read of a kind seen for the first time waits for its informer to sync."""

    copy_on_read: bool = True
    """No effect any more, accepted so existing options still construct: the store keeps
    objects encoded, so every read decodes a new object the caller may mutate, which costs
    less than the copy this option used to make (``False`` used to return the stored
    objects themselves)."""

    read_after_write_timeout: float = 10.0
    """Seconds :meth:`Cache.reader` waits for the cache to catch up with this process's own
    write of an object before failing the read (:class:`ReadAfterWriteTimeout`)."""

    backoff_max: float = 30.0
    """Longest delay, in seconds, between an informer's attempts after repeated list or watch
    failures (the first is 0.2 s, doubling). Lower it to recover sooner after an outage, at
    the cost of more requests to a struggling server."""

    streaming_list: bool = True
    """Informers list through a watch (``sendInitialEvents=true``, the WatchList feature)
    where the server supports it, and fall back to paginated lists where it does not
    (:attr:`InformerOptions.streaming_list`). ``False``: always paginated lists."""

    def __post_init__(self) -> None:
        if any(not ns for ns in self.namespaces):
            raise ValueError(
                "CacheOptions.namespaces must not contain an empty name; use () for all"
            )
        if self.resync_period is not None and self.resync_period <= 0:
            raise ValueError("CacheOptions.resync_period must be > 0 seconds, or None")
        if self.backoff_max <= 0:
            raise ValueError("CacheOptions.backoff_max must be > 0 seconds")
        if self.sync_timeout <= 0 or self.read_after_write_timeout <= 0:
            raise ValueError(
                "CacheOptions: sync_timeout and read_after_write_timeout must be > 0 seconds"
            )
        LabelMatcher.parse(self.labels)
        FieldMatcher.parse(self.fields)
        normalized: dict[GroupVersionKind, KindOptions] = {}
        for kind, options in self.by_kind.items():
            if not isinstance(options, KindOptions):
                raise TypeError(
                    f"CacheOptions.by_kind[{kind!r}] must be a KindOptions, "
                    f"not {type(options).__name__}"
                )
            normalized[split_kind(kind)[0]] = options
        object.__setattr__(self, "by_kind", normalized)

    def informer_options(
        self, kind: GroupVersionKind, *, metadata_only: bool = False
    ) -> InformerOptions:
        """The effective informer options for ``kind`` (overrides over defaults).

        ``metadata_only``: for the kind's metadata-only informer (``Metadata(kind)``); the
        kind's overrides apply to it too.
        """
        over = self.by_kind.get(kind) or KindOptions()
        return InformerOptions(
            metadata_only=metadata_only,
            namespaces=over.namespaces if over.namespaces is not None else self.namespaces,
            labels=_selector_text(over.labels if over.labels is not None else self.labels) or None,
            fields=_selector_text(over.fields if over.fields is not None else self.fields) or None,
            transform=over.transform if over.transform is not None else self.transform,
            resync_period=(
                over.resync_period if over.resync_period is not None else self.resync_period
            ),
            backoff_initial=min(0.2, self.backoff_max),
            backoff_max=self.backoff_max,
            streaming_list=self.streaming_list,
        )


class Cache:
    """Shared informers per kind and a :class:`~setpoint.client.protocols.Reader` over them.

    See the module docstring. The manager constructs exactly ``Cache(client, options=...)``.

    Args:
        client: The live client the informers list and watch with.
        options: Scope, transforms and timing; defaults on :class:`CacheOptions`.

    """

    def __init__(self, client: ListWatcher, *, options: CacheOptions | None = None) -> None:
        self._client = client
        self._options = options if options is not None else CacheOptions()
        # One informer per GVK, and one per Metadata(GVK): a kind's full and metadata-only
        # informers are two, with two stores, never mixed.
        self._informers: dict[GroupVersionKind | Metadata, Informer] = {}
        self._narrowed: dict[GroupVersionKind, builtins.list[str]] = {}
        self._key_filters: dict[GroupVersionKind, builtins.list[KeyFilter]] = {}
        # Informers that have synced, by the kind a read named (an informer syncs once and
        # is never replaced): a read's lookup is then one dict access.
        self._ready: dict[Kind[object], Informer] = {}
        # Kinds whose informer was removed (remove_informer) and not added again: reads of
        # them fail with InformerRemoved instead of starting a watch behind the remover's back.
        self._removed: set[GroupVersionKind | Metadata] = set()
        # Indexes added with add_index, rebuilt on an informer added again after a removal.
        self._indexes: dict[GroupVersionKind | Metadata, dict[str, IndexFunc]] = {}
        self._started = False
        self._stopped = False

    # -- Runnable ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"cache"``."""
        return "cache"

    @property
    def group(self) -> RunnableGroup:
        """:attr:`RunnableGroup.CACHES`."""
        return RunnableGroup.CACHES

    @property
    def needs_leader_election(self) -> bool:
        """``False``: every replica keeps a warm cache, so a new leader starts at once."""
        return False

    @property
    def options(self) -> CacheOptions:
        """The cache's options."""
        return self._options

    @property
    def client(self) -> ListWatcher:
        """The live client the informers use."""
        return self._client

    async def start(self) -> None:
        """Start every informer created so far (later ones start when created); returns at once.

        Raises:
            CacheError: the cache was stopped (a stopped cache cannot restart).

        """
        if self._stopped:
            raise CacheError("this cache was stopped; create a new Cache to start again")
        if self._started:
            return
        self._started = True
        for informer in self._informers.values():
            await informer.start()

    async def stop(self, timeout: float) -> None:
        """Stop every informer (idempotent); waits at most ``timeout`` seconds in all."""
        self._stopped = True
        informers = list(self._informers.values())
        if not informers:
            return
        per = max(0.1, timeout / 2)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(i.stop(per) for i in informers))

    def failure(self) -> BaseException | None:
        """The first informer's unexpected failure, if any (informers retry API errors)."""
        for informer in self._informers.values():
            failure = informer.failure()
            if failure is not None:
                return failure
        return None

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called and :meth:`stop` was not."""
        return self._started and not self._stopped

    @property
    def synced(self) -> bool:
        """Whether the cache is started and every informer created so far has synced."""
        return self.started and all(i.synced for i in self._informers.values())

    async def wait_for_sync(self, timeout: float) -> None:
        """Wait until every informer created so far has completed its initial list.

        Raises:
            CacheNotStarted: :meth:`start` was not called.
            KindNotServed: a kind is not served (its CRD is not installed); raised as soon
                as the server says so, naming the kind.
            CacheSyncTimeout: some informers did not sync in ``timeout`` seconds; the
                message names each and its last error.

        """
        if not self.started:
            raise CacheNotStarted(
                "wait_for_sync() was called before Cache.start(); start the cache first "
                "(the manager does this)"
            )
        informers = [i for i in self._informers.values() if not i.synced]
        if not informers:
            return
        results = await asyncio.gather(
            *(i.wait_for_sync(timeout) for i in informers), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        for error in errors:
            if not isinstance(error, CacheSyncTimeout):
                raise error
        if errors:
            lines = "; ".join(str(e) for e in errors)
            raise CacheSyncTimeout(
                f"{len(errors)} of {len(self._informers)} informers did not sync within "
                f"{timeout:.1f}s: {lines}"
            )

    # -- informers and indexes ------------------------------------------------------------------

    def informer(self, kind: Kind[object]) -> Informer:
        """The shared informer for ``kind``, created (and started, if the cache is) on first use.

        A typed class and its GVK share one informer: objects are stored in JSON form.
        ``Metadata(kind)`` (:mod:`setpoint.api.metadata`) has an informer of its own, which
        lists and watches ``PartialObjectMetadata`` only; it never shares the store of the
        kind's full informer.

        This is also how an informer is added at run time, and added again after
        :meth:`remove_informer`: it starts at once in a started cache (wait for it with
        ``await cache.informer(kind).wait_for_sync(timeout)``), with the indexes
        :meth:`add_index` declared for the kind.
        """
        key = _informer_key(kind)
        informer = self._informers.get(key)
        if informer is None:
            gvk = key.gvk
            metadata_only = isinstance(key, Metadata)
            options = self._options.informer_options(gvk, metadata_only=metadata_only)
            informer = Informer(self._client, gvk, options)
            for labels in self._narrowed.get(gvk, ()):
                informer.narrow(labels)
            for keys in self._key_filters.get(gvk, ()):
                informer.narrow(keys=keys)
            for name, fn in self._indexes.get(key, {}).items():
                informer.add_index(name, fn)
            self._removed.discard(key)
            self._informers[key] = informer
            if self.started:
                informer._start_task()
        return informer

    async def remove_informer(self, kind: Kind[object], *, timeout: float = 5.0) -> bool:
        """Remove ``kind``'s informer: stop its watch, drop its store, indexes and handlers.

        The counterpart of :meth:`informer` at run time (controller-runtime's
        ``RemoveInformer``), for kinds that stop being served (a deleted CRD) or are no
        longer needed: the watch connection is closed, and the objects, their indexes and
        the handlers are released, so the memory the kind took goes back. Afterwards a read
        of ``kind`` raises :class:`InformerRemoved`, as does a read that was waiting for the
        informer to sync, until :meth:`informer` adds it again (the indexes declared with
        :meth:`add_index` are then rebuilt). Handlers registered on it get no more events:
        remove an informer only when no controller watches the kind any more.

        ``kind`` names one informer: a GVK (or typed class), or ``Metadata(kind)`` for the
        metadata-only one. Waits at most ``timeout`` seconds for the watch to stop.

        Returns:
            Whether there was an informer to remove.

        """
        key = _informer_key(kind)
        informer = self._informers.pop(key, None)
        self._removed.add(key)
        if informer is None:
            return False
        for read_as, ready in list(self._ready.items()):
            if ready is informer:
                del self._ready[read_as]
        error = InformerRemoved(
            f"the cache's informer for {_describe(key)} was removed (Cache.remove_informer), "
            "usually because its CustomResourceDefinition was deleted; add it again with "
            "cache.informer(kind), or read it with the live client"
        )
        await informer.release(error, timeout)
        return True

    def narrow(
        self, kind: Kind[object], labels: str = "", *, keys: KeyFilter | None = None
    ) -> None:
        """Narrow ``kind``'s informer before start: label requirements, a key filter, or both.

        Every reader of ``kind`` in this cache then sees only what remains. ``labels`` are
        ANDed with the selector the server filters by: the manager uses it for sharded kinds
        (each replica caches its own shard only, decision 0011). ``keys`` drops the objects
        whose key it refuses as they arrive, before they are stored (see
        :meth:`Informer.narrow`): the workers of ``--processes`` split a kind this way
        (decision 0038). It applies to the informers of this exact version, full and
        metadata-only (``Metadata(kind)``); narrowing twice adds both.

        Raises:
            CacheError: ``kind``'s informer has started already.
            SelectorError: ``labels`` is not a label selector.

        """
        gvk = _informer_key(kind).gvk
        LabelMatcher.parse(labels)
        for key in (gvk, Metadata(gvk)):  # the kind's metadata-only informer too
            informer = self._informers.get(key)
            if informer is not None:
                informer.narrow(labels, keys=keys)
        if labels:
            self._narrowed.setdefault(gvk, []).append(labels)
        if keys is not None:
            self._key_filters.setdefault(gvk, []).append(keys)

    def narrowed(self, kind: Kind[object]) -> tuple[str, ...]:
        """The label requirements :meth:`narrow` added to ``kind``'s informer."""
        return tuple(self._narrowed.get(_informer_key(kind).gvk, ()))

    def informers(self) -> builtins.list[Informer]:
        """Every informer created so far."""
        return list(self._informers.values())

    def add_index(self, kind: Kind[object], name: str, fn: IndexFunc) -> None:
        """Add index ``name`` to ``kind``'s store; ``fn`` maps an object to its index values.

        May be called before or after start: the index is built over what is stored. Name an
        index ``"field:<path>"`` (with :func:`~setpoint.cache.store.by_field`) and
        ``list(fields=...)`` on that path uses it.

        Raises:
            ValueError: ``kind`` already has an index called ``name``.

        """
        self.informer(kind).add_index(name, fn)
        self._indexes.setdefault(_informer_key(kind), {})[name] = fn

    async def _ready_informer(self, kind: Kind[object]) -> Informer:
        try:
            ready = self._ready.get(kind)
        except TypeError:  # not hashable, so not a kind: split_kind below says so
            ready = None
        if ready is not None and self._started and not self._stopped:
            return ready
        if not self.started:
            raise CacheNotStarted(
                f"read of {split_kind(kind)[0].kind} before the cache was started; start it "
                "first (the manager starts it before any controller)"
            )
        key = _informer_key(kind)
        if key in self._removed:
            raise InformerRemoved(
                f"read of {_describe(key)}, whose informer was removed from the cache "
                "(Cache.remove_informer, usually because its CustomResourceDefinition was "
                "deleted); add it again with cache.informer(kind), or read it with the live "
                "client"
            )
        informer = self.informer(kind)
        if not informer.synced:
            await informer.wait_for_sync(self._options.sync_timeout)
        self._ready[kind] = informer
        return informer

    # -- Reader ---------------------------------------------------------------------------------

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object from the cache.

        Raises:
            NotFound: the cache holds no such object (same type as the live client's).
            NotCached: ``namespace`` is outside the cache's scope for this kind.
            KindNotServed: the server does not serve the kind.
            ValueError: a namespace is missing for a namespaced kind, or given for a
                cluster-scoped one.

        """
        gvk, _ = split_kind(kind)
        informer = await self._ready_informer(kind)
        key = _object_key(informer, gvk, name, namespace)
        mark_read()
        obj = informer.store.get(key)
        if obj is None:
            raise _not_found(informer, gvk, key)
        # ``obj`` was decoded from the store for this read: the caller's own already.
        return decode_typed(kind, obj)

    async def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[T]:
        """List cached objects, by namespace, label selector and field selector.

        Selectors use the API server's syntax (:mod:`setpoint.cache.selectors`); field
        selectors may name any dotted path, and use a ``"field:<path>"`` index when there is
        one. Items are sorted by namespace and name; ``resource_version`` is the version the
        cache reflects.

        Raises:
            NotCached: ``namespace`` is outside the cache's scope for this kind.
            SelectorError: a selector is malformed.

        """
        gvk, _ = split_kind(kind)
        label_selector = LabelMatcher.parse(labels)
        field_selector = FieldMatcher.parse(fields)
        informer = await self._ready_informer(kind)
        store = informer.store
        mark_read()
        if namespace:
            if informer.namespaced is False:
                raise ValueError(
                    f"{gvk.kind} is cluster-scoped: do not pass a namespace ({namespace!r}) "
                    "when listing it"
                )
            _check_covered(informer, gvk, namespace)
            keys: set[ObjectKey] | None = store.keys_in_namespace(namespace)
        else:
            keys = None
        for requirement in field_selector.requirements:
            index = f"field:{requirement.path}"
            if not requirement.negated and store.has_index(index):
                found = store.keys_by_index(index, requirement.value)
                keys = found if keys is None else keys & found
        candidates = (
            [store.get(k) for k in sorted(keys)]
            if keys is not None
            else [obj for _, obj in sorted(store.items(), key=lambda kv: kv[0])]
        )
        items = [
            decode_typed(kind, obj)
            for obj in candidates
            if obj is not None
            and label_selector.matches_object(obj)
            and field_selector.matches(obj)
        ]
        return ObjectList(items, informer.resource_version)

    async def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        """List the cached objects of ``kind`` whose index ``index`` includes ``value``.

        Raises:
            KeyError: ``kind`` has no index called ``index`` (add it with :meth:`add_index`).

        """
        gvk, _ = split_kind(kind)
        informer = await self._ready_informer(kind)
        store = informer.store
        mark_read()
        try:
            keys = store.keys_by_index(index, value)
        except KeyError:
            raise KeyError(
                f"{gvk.kind} has no cache index {index!r}; add it first with "
                f"cache.add_index({gvk.kind}, {index!r}, fn)"
            ) from None
        items = [decode_typed(kind, obj) for k in sorted(keys) if (obj := store.get(k))]
        return ObjectList(items, informer.resource_version)

    # -- read-after-write ---------------------------------------------------------------------

    def expect_written(self, kind: GroupVersionKind, obj: JsonObject) -> None:
        """Tell informers of ``kind``'s group/kind that this process wrote ``obj``.

        Called by :class:`~setpoint.cache.consistency.TrackingClient` after each write. Only
        existing informers record it: an informer created later lists after the write.
        """
        for informer in self._informers_of(kind):
            informer.expect_written(obj)

    def peek(self, kind: GroupVersionKind, key: ObjectKey) -> JsonObject | None:
        """The stored object, or ``None`` when it is absent or ``kind`` is not watched yet.

        Never creates an informer and never waits; the object is decoded for the caller,
        who may change it. For fast paths that fall back to the API server when the cache cannot
        answer, such as :func:`~setpoint.client.safe.apply_child` skipping a GET.
        """
        informer = self._informers.get(kind)
        if informer is None or not informer.synced:
            return None
        if key.namespace and not informer.covers_namespace(key.namespace):
            return None
        mark_read()
        return informer.store.get(key)

    def known_absent(self, kind: GroupVersionKind, obj: JsonObject) -> bool:
        """Whether the cache knows that no object with ``obj``'s key exists (see below).

        True when the informer of ``kind`` has synced, ``obj`` is within its scope
        (namespace and selectors), its store holds nothing under the key, and no write of
        this process to the key is waiting to be seen (a create this process made is not
        "absent" just because its event is still on the way). Never creates an informer
        and never waits. :func:`~setpoint.client.safe.apply_child` relies on it to skip the
        GET before a child's first apply.
        """
        informer = self._informers.get(kind)
        if informer is None or not informer.synced or not informer.matches(obj):
            return False
        key = key_of(obj)
        return key not in informer.store and key not in informer.expectations

    async def wait_for_own_write(
        self, kind: GroupVersionKind, key: ObjectKey, timeout: float
    ) -> bool:
        """Wait (at most ``timeout`` seconds) until the store holds this process's write of ``key``.

        True when a write of ours was on its way and the informer of ``kind`` has now seen
        it; False at once when nothing is on its way or the informer is missing or not
        synced, and False when the event did not arrive in time. Never creates an informer
        and never asks the server. :func:`~setpoint.client.safe.apply_child` waits here
        rather than GET a child whose own last write is still on its way.
        """
        informer = self._informers.get(kind)
        if informer is None or not informer.synced or key not in informer.expectations:
            return False
        try:
            await informer.expectations.wait_caught_up(key, timeout)
        except ReadAfterWriteTimeout:
            return False
        return True

    def expect_deleted(
        self, kind: GroupVersionKind, key: ObjectKey, *, uid: str = "", resource_version: str = ""
    ) -> None:
        """Tell informers of ``kind``'s group/kind that this process deleted object ``key``."""
        for informer in self._informers_of(kind):
            informer.expect_deleted(key, uid=uid, resource_version=resource_version)

    def _informers_of(self, kind: GroupVersionKind) -> builtins.list[Informer]:
        # Versions of one group/kind share resourceVersions (one etcd key), so a write
        # through any version is an expectation for the informers of all of them.
        # The kind's metadata-only informers too: they hold the same objects' metadata.
        return [
            i
            for i in self._informers.values()
            if i.kind.group == kind.group and i.kind.kind == kind.kind
        ]

    async def expectations(self, kind: Kind[object]) -> Expectations:
        """The read-after-write expectations of ``kind``'s informer, once it has synced.

        What :class:`~setpoint.cache.consistency.ConsistentReader` waits on before it reads.

        Raises:
            CacheNotStarted: the cache is not started.
            KindNotServed, CacheSyncTimeout: as :meth:`wait_for_sync`.

        """
        return (await self._ready_informer(kind)).expectations

    def reader(self, *, read_after_write_timeout: float | None = None) -> ConsistentReader:
        """A reader over this cache that never returns data older than this process's writes.

        Writes must go through :meth:`tracking_client` (or call :meth:`expect_written`).
        """
        return ConsistentReader(
            self,
            timeout=(
                read_after_write_timeout
                if read_after_write_timeout is not None
                else self._options.read_after_write_timeout
            ),
        )

    def tracking_client(self, client: ApiClient | None = None) -> TrackingClient:
        """``client`` (default: the cache's own) wrapped to record each write in this cache.

        The :class:`~setpoint.cache.consistency.TrackingClient` has the client's methods and
        shares the wrapped client's connection pool.

        Raises:
            TypeError: no ``client`` is given and the cache's own only lists and watches
                (a :class:`~setpoint.client.protocols.ListWatcher` that cannot write).

        """
        if client is None:
            if not isinstance(self._client, ApiClient):
                raise TypeError(
                    f"the cache's client {self._client!r} only lists and watches; pass the "
                    "client to write with: cache.tracking_client(client)"
                )
            client = self._client
        return TrackingClient(client, self)

    def __repr__(self) -> str:
        kinds = ", ".join(
            f"{i.kind.kind}{'(metadata)' if i.metadata_only else ''}{'' if i.synced else '*'}"
            for i in self._informers.values()
        )
        return f"<Cache started={self.started} informers=[{kinds}]>"


def _informer_key(kind: Kind[object]) -> GroupVersionKind | Metadata:
    """What :class:`Cache` keeps ``kind``'s informer under: its GVK, or ``Metadata(gvk)``."""
    if isinstance(kind, Metadata):
        return kind
    return split_kind(kind)[0]


def _describe(key: GroupVersionKind | Metadata) -> str:
    """``Gizmo (test.setpoint.dev/v1)``, with ``metadata-only`` for a ``Metadata`` key."""
    gvk = key.gvk
    version = f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version
    only = ", metadata-only" if isinstance(key, Metadata) else ""
    return f"{gvk.kind} ({version}{only})"


def _object_key(
    informer: Informer, gvk: GroupVersionKind, name: str, namespace: str | None
) -> ObjectKey:
    if not name:
        raise ValueError(f"{gvk.kind}: an object name must not be empty")
    if informer.namespaced:
        if not namespace:
            raise ValueError(
                f"{gvk.kind} is namespaced: pass namespace= when reading {gvk.kind} {name!r}"
            )
        _check_covered(informer, gvk, namespace)
        return ObjectKey(namespace, name)
    if namespace:
        raise ValueError(
            f"{gvk.kind} is cluster-scoped: do not pass a namespace ({namespace!r}) for "
            f"{gvk.kind} {name!r}"
        )
    return ObjectKey("", name)


def _check_covered(informer: Informer, gvk: GroupVersionKind, namespace: str) -> None:
    if not informer.covers_namespace(namespace):
        raise NotCached(
            f"the cache watches {gvk.kind} only in namespaces "
            f"{', '.join(informer.options.namespaces)}, not {namespace!r}; add it to "
            "CacheOptions.namespaces (or KindOptions.namespaces), or read it with the live client"
        )


def _not_found(informer: Informer, gvk: GroupVersionKind, key: ObjectKey) -> NotFound:
    info = informer.resource_info
    resource = info.plural if info is not None else gvk.kind.lower()
    qualified = f"{resource}.{gvk.group}" if gvk.group else resource
    message = f'{qualified} "{key.name}" not found'
    where = f" in namespace {key.namespace!r}" if key.namespace else ""
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": "NotFound",
        "details": {"name": key.name, "group": gvk.group, "kind": resource},
        "code": 404,
    }
    return NotFound(
        f"{message}{where} (read from the cache)", code=404, reason="NotFound", status=status
    )


if TYPE_CHECKING:
    from setpoint.cache.consistency import ConsistentSource, WriteTracker
    from setpoint.client.protocols import IndexReader

    def _conforms(cache: Cache) -> tuple[IndexReader, ConsistentSource, WriteTracker]:
        # Checked by mypy only: the cache is what the consistency module's readers and
        # tracking clients expect, and a reader with indexes.
        return cache, cache, cache


def decode_typed(kind: Kind[T], obj: JsonObject) -> T:
    """``kind.from_object(obj)``, raising :class:`UndecodableObject` when ``kind`` refuses it.

    The one place a stored object becomes a typed one for controllers (cache reads, typed
    ``watches`` mappers, finalizer cleanups), so a refusal always names the object and the
    fields, and a reconcile of that object treats it as terminal.

    A GVK gives ``obj`` itself (it never refuses); a typed class parses it.

    Raises:
        UndecodableObject: ``kind`` refuses the object (pydantic's error is its cause).

    """
    try:
        return kind.from_object(obj)
    except ValueError as exc:  # pydantic's ValidationError
        raise _undecodable(kind, obj, exc) from exc


def _undecodable(kind: Kind[object], obj: JsonObject, exc: ValueError) -> UndecodableObject:
    """The error for a stored object that ``kind`` refuses: which object, which fields."""
    typed = kind if isinstance(kind, type) else type(kind)
    key = key_of(obj)
    gvk = GroupVersionKind.from_api_version(
        str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    )
    where = f"{gvk.kind} {key.namespace}/{key.name}" if key.namespace else f"{gvk.kind} {key.name}"
    listed = getattr(exc, "errors", None)  # pydantic's per-field errors, when it is one
    errors = listed() if callable(listed) else None
    if isinstance(errors, list) and errors:
        details = "; ".join(
            f"{'.'.join(str(part) for part in e.get('loc', ())) or '(object)'}: {e.get('msg', '')}"
            for e in errors[:5]
        )
    else:
        details = str(exc)
    return UndecodableObject(
        f"{where} as stored does not fit the class {typed.__module__}.{typed.__qualname__} "
        f"({details}). "
        "The API server holds data the Python type refuses (stored before the schema was "
        "tightened, or the type checks more than the CRD): fix the object, or relax the type; "
        "retrying does not help",
        gvk=gvk,
        key=key,
    )
