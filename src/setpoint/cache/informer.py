"""One shared informer per kind: list, then watch, and keep a store in step with the server.

Expected flow
-------------
An :class:`Informer` resolves its kind with the server (discovery), then, per watched scope
(all namespaces, or each configured namespace):

1. **List** every object (a consistent read), fill the store and tell handlers about each
   object as an *add* with ``is_initial_list=True``. Where the server supports it (the
   WatchList feature; v1.35 to v1.37 accept it), the list is *streamed*: one watch
   with ``sendInitialEvents=true`` sends every object as an ``ADDED`` event, then a
   bookmark marked ``k8s.io/initial-events-end`` that carries the list's resourceVersion,
   and goes on as the watch of step 2. Neither the API server nor the informer ever holds
   the whole list as one response. Where it does not (the server refuses the parameter, or
   an older one ignores it and sends a plain bookmark first), the informer falls back to a
   paginated list for good (``InformerOptions.streaming_list``).
2. **Watch** from the list's resourceVersion, with bookmarks, applying each event to the
   store and telling handlers (*add*, *update(old, new)*, *delete*). Bookmarks only advance
   the resourceVersion, so a later re-watch starts close to now.
3. When a watch ends (its server-side timeout) or its connection breaks, **re-watch from the
   last resourceVersion** seen; nothing is missed and nothing is replayed.
4. When the server answers 410 Gone/Expired (the resourceVersion was compacted away, for
   example after an API server restart), **relist** and *reconcile the store with the list*:
   objects that vanished meanwhile are deleted (handlers get ``final_state_unknown=True``
   with the last state seen), changed ones are updated (``old`` is the last state seen),
   new ones are added (``is_initial_list=False``), and unchanged ones produce no event. An
   object is never added twice.

Errors other than Gone are retried with exponential backoff (0.2 s doubling to 30 s, with
jitter) forever: an informer never dies. A kind the server does not serve (a CRD that is not
installed) makes :meth:`Informer.wait_for_sync` fail at once with
:class:`~setpoint.cache.errors.KindNotServed` rather than hang; the informer keeps trying, so
it syncs when the CRD appears.

Guarantees
----------
- Handlers see the events of one key in order, and the store already holds the new state
  when a handler runs.
- Handlers are called synchronously on the event loop and must not block; one that raises
  is logged and the others still run.
- Objects are stored after the transform (stripping ``metadata.managedFields`` by default),
  encoded as JSON (see :mod:`setpoint.cache.store`). Handlers receive the decoded event
  object, the same one for every handler of an event: they must not mutate it (the store
  keeps its own copy, but the next handler would see the change).

Read-after-write
----------------
Each informer owns an :class:`~setpoint.cache.consistency.Expectations` table of this
process's writes its store does not reflect yet, and tells it what it applies and how far
each scope has got. Everything about read-after-write lives in
:mod:`setpoint.cache.consistency`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import (
    JsonObject,
    key_of,
    labels_of,
    metadata_of,
    resource_version_of,
)
from setpoint.api.metadata import Metadata
from setpoint.api.types import Kind
from setpoint.cache.consistency import Expectations
from setpoint.cache.errors import CacheError, CacheSyncTimeout, KindNotServed
from setpoint.cache.selectors import FieldMatcher, LabelMatcher
from setpoint.cache.store import IndexFunc, Store, parse_resource_version
from setpoint.client.errors import (
    BadRequest,
    ClientError,
    Forbidden,
    Gone,
    Invalid,
    MalformedResponse,
    UnknownKind,
)
from setpoint.client.objects import WatchEvent
from setpoint.client.protocols import ListWatcher
from setpoint.observability.logging import get_logger
from setpoint.observability.recording import active_recorder

__all__ = [
    "FuncHandler",
    "HandlerRegistration",
    "Informer",
    "InformerOptions",
    "InformerStats",
    "KeyFilter",
    "ResourceEventHandler",
    "Transform",
    "strip_managed_fields",
]

Transform = Callable[[JsonObject], JsonObject]
"""Rewrites an object before it is stored (may mutate and return its argument)."""

KeyFilter = Callable[[ObjectKey], bool]
"""Whether an informer holds the object with this key (:meth:`Informer.narrow`'s ``keys``)."""


def strip_managed_fields(obj: JsonObject) -> JsonObject:
    """The default transform: drop ``metadata.managedFields``.

    Server-side apply bookkeeping is often the largest part of an object and controllers
    rarely read it; dropping it typically halves the memory a cached object takes.
    """
    m = obj.get("metadata")
    if isinstance(m, dict):
        m.pop("managedFields", None)
    return obj


@runtime_checkable
class ResourceEventHandler(Protocol):
    """Receives an informer's notifications. Every method must return quickly (no I/O).

    Objects are the event's objects as stored (JSON form, after the transform), shared by
    every handler of the event: do not mutate them.
    """

    def on_add(self, obj: JsonObject, *, is_initial_list: bool) -> None:
        """An object appeared: from the initial list (``is_initial_list``), or created later."""

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        """An object changed from ``old`` to ``new`` (the same object on a periodic resync)."""

    def on_delete(self, obj: JsonObject, *, final_state_unknown: bool) -> None:
        """An object was deleted; ``obj`` is its last state.

        ``final_state_unknown`` is true when the deletion was inferred from a relist: ``obj``
        is then the last state this informer saw, which may be older than the real final one.
        """


@dataclass(slots=True)
class FuncHandler:
    """A :class:`ResourceEventHandler` from plain functions; missing ones ignore the event."""

    add: Callable[[JsonObject, bool], None] | None = None
    """Called as ``add(obj, is_initial_list)``."""
    update: Callable[[JsonObject, JsonObject], None] | None = None
    """Called as ``update(old, new)``."""
    delete: Callable[[JsonObject, bool], None] | None = None
    """Called as ``delete(obj, final_state_unknown)``."""

    def on_add(self, obj: JsonObject, *, is_initial_list: bool) -> None:
        """Forward to ``add``."""
        if self.add is not None:
            self.add(obj, is_initial_list)

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        """Forward to ``update``."""
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: JsonObject, *, final_state_unknown: bool) -> None:
        """Forward to ``delete``."""
        if self.delete is not None:
            self.delete(obj, final_state_unknown)


class HandlerRegistration:
    """A handler added to an informer; :meth:`remove` stops its notifications."""

    __slots__ = ("_informer", "_synced", "handler", "removed")

    def __init__(self, informer: Informer, handler: ResourceEventHandler) -> None:
        self._informer = informer
        self.handler = handler
        """The registered handler."""
        self.removed = False
        """Whether :meth:`remove` was called."""
        self._synced = False

    @property
    def synced(self) -> bool:
        """Whether this handler has been told about every object of the initial list."""
        return self._synced

    def remove(self) -> None:
        """Stop notifying the handler (idempotent). Events already dispatched are not undone."""
        if not self.removed:
            self.removed = True
            self._informer._remove(self)


@dataclass(frozen=True, kw_only=True)
class InformerOptions:
    """What one informer watches and how. Every default is documented on its attribute."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (one list/watch each); empty means all namespaces. Ignored for
    cluster-scoped kinds."""

    labels: str | None = None
    """Server-side label selector: only matching objects are listed, watched and stored.
    ``None``: no filter. An object that stops matching is seen as deleted."""

    fields: str | None = None
    """Server-side field selector (only the fields the server supports for this kind).
    ``None``: no filter."""

    transform: Transform | None = strip_managed_fields
    """Applied to every object before it is stored and handed to handlers. Default:
    :func:`strip_managed_fields`. ``None`` stores objects as received."""

    resync_period: float | None = None
    """Every this many seconds (±10 % jitter), call ``on_update(obj, obj)`` for every stored
    object, so level-based handlers re-check everything. ``None`` (default): never. Resyncs
    cost no API calls."""

    metadata_only: bool = False
    """List and watch the kind's ``PartialObjectMetadata`` only (metadata, no spec, data
    or status: :mod:`setpoint.api.metadata`): the server sends less, and the store holds
    less. The stored objects are ``PartialObjectMetadata`` dicts. Default: whole objects."""

    streaming_list: bool = True
    """List through a watch (``sendInitialEvents=true``, the WatchList feature) where the
    server supports it, falling back to a paginated list where it does not. ``False``:
    always a paginated list. Both keep the same guarantees (consistent read, relist on 410,
    read-after-write); streaming keeps the API server and this process from building the
    whole list in memory at once."""

    backoff_initial: float = 0.2
    """First delay, in seconds, after a failed list or watch; doubles per failure."""

    backoff_max: float = 30.0
    """Longest delay, in seconds, between attempts after repeated failures."""

    expectation_ttl: float = 300.0
    """Seconds a read-after-write expectation is kept at most. Normally one is met within
    milliseconds; this bounds memory if the informer cannot catch up (a long outage)."""

    def __post_init__(self) -> None:
        if any(not ns for ns in self.namespaces):
            raise ValueError(
                "InformerOptions.namespaces must not contain an empty name; leave the tuple "
                "empty to watch all namespaces"
            )
        if self.resync_period is not None and self.resync_period <= 0:
            raise ValueError(
                "InformerOptions.resync_period must be > 0 seconds, or None to disable resyncs"
            )
        if self.backoff_initial <= 0 or self.backoff_max < self.backoff_initial:
            raise ValueError(
                "InformerOptions: backoff_initial must be > 0 and backoff_max >= backoff_initial"
            )
        if self.expectation_ttl <= 0:
            raise ValueError("InformerOptions.expectation_ttl must be > 0 seconds")
        # Parse now, so a malformed selector fails at construction, not in the background.
        LabelMatcher.parse(self.labels)
        FieldMatcher.parse(self.fields)


@dataclass(slots=True)
class InformerStats:
    """Counters describing what an informer has done (for diagnostics and tests)."""

    lists: int = 0
    """Completed lists (the initial one per scope, plus relists), streamed or paginated."""
    streamed_lists: int = 0
    """Of :attr:`lists`, those streamed through a watch (``sendInitialEvents``)."""
    relists: int = 0
    """Lists made because a watch answered 410 Gone/Expired."""
    watches: int = 0
    """Watch requests opened."""
    rewatches: int = 0
    """Watches re-opened from the last resourceVersion after one ended or broke."""
    events: int = 0
    """Watch events applied (bookmarks excluded)."""
    bookmarks: int = 0
    """Bookmarks received."""
    resyncs: int = 0
    """Periodic resyncs performed."""
    errors: int = 0
    """Failed lists and watches (each followed by a backoff), Gone excluded."""
    last_error: str = ""
    """The most recent failure, for error messages."""


@dataclass(slots=True)
class _Stream:
    """One list/watch scope: all namespaces (``namespace is None``) or one namespace."""

    namespace: str | None
    rv: str = ""
    rv_int: int | None = None
    listed: bool = False
    generation: int = 0
    """Lists completed so far (a list streamed through a watch completes mid-stream)."""


class Informer:
    """Lists and watches one kind into a :class:`~setpoint.cache.store.Store`.

    See the module docstring for the flow and guarantees. Usually obtained from
    :meth:`setpoint.cache.Cache.informer`, which shares one informer per kind.

    Args:
        client: The live client to list and watch with.
        kind: The kind to watch (objects are stored in JSON form).
        options: Scope, transform and timing; defaults documented on :class:`InformerOptions`.

    """

    def __init__(
        self,
        client: ListWatcher,
        kind: GroupVersionKind,
        options: InformerOptions | None = None,
    ) -> None:
        self._client = client
        self._kind = kind
        self._options = options if options is not None else InformerOptions()
        # What the list and watch ask the server for: the kind, or its metadata only.
        self._source: Kind[JsonObject] = Metadata(kind) if self._options.metadata_only else kind
        self._labels = LabelMatcher.parse(self._options.labels)
        self._fields = FieldMatcher.parse(self._options.fields)
        self._keys: tuple[KeyFilter, ...] = ()
        self._store = Store()
        self._handlers: list[HandlerRegistration] = []
        self._streams: dict[str | None, _Stream] = {}
        self._info: ResourceInfo | None = None
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Event()
        self._sync_failed: BaseException | None = None
        self._sync_failed_event = asyncio.Event()
        self._failure: BaseException | None = None
        self._stopped = False
        self._streaming = self._options.streaming_list
        self._expectations = Expectations(kind, self._store, ttl=self._options.expectation_ttl)
        self.stats = InformerStats()
        """What this informer has done so far."""
        self._log = get_logger("setpoint.cache", gvk=str(kind))

    # -- introspection -------------------------------------------------------------------

    @property
    def kind(self) -> GroupVersionKind:
        """The kind this informer watches."""
        return self._kind

    @property
    def options(self) -> InformerOptions:
        """The informer's options."""
        return self._options

    @property
    def metadata_only(self) -> bool:
        """Whether the informer lists and watches ``PartialObjectMetadata`` only."""
        return self._options.metadata_only

    @property
    def store(self) -> Store:
        """The store (read it, never write it; each read decodes an object the reader owns)."""
        return self._store

    @property
    def synced(self) -> bool:
        """Whether every scope has completed its initial list."""
        return self._synced.is_set()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called (and :meth:`stop` was not)."""
        return self._task is not None and not self._stopped

    @property
    def resource_info(self) -> ResourceInfo | None:
        """How the server serves the kind (known once the informer has resolved it)."""
        return self._info

    @property
    def namespaced(self) -> bool | None:
        """Whether the kind is namespaced; ``None`` until the server has been asked."""
        return None if self._info is None else self._info.namespaced

    @property
    def resource_version(self) -> str:
        """The resourceVersion the store is known to reflect (the lowest across scopes)."""
        streams = list(self._streams.values())
        if not streams or not all(s.listed for s in streams):
            return ""
        if len(streams) == 1:
            return streams[0].rv
        numbers = [s.rv_int for s in streams]
        if all(n is not None for n in numbers):
            return str(min(n for n in numbers if n is not None))
        return streams[0].rv

    def covers_namespace(self, namespace: str) -> bool:
        """Whether objects in ``namespace`` are within this informer's scope."""
        namespaces = self._options.namespaces
        if not namespaces or self.namespaced is False:
            return True
        return namespace in namespaces

    def matches(self, obj: JsonObject) -> bool:
        """Whether ``obj`` is within this informer's scope (namespace and selectors)."""
        namespace = str(metadata_of(obj).get("namespace") or "")
        if not self.covers_namespace(namespace):
            return False
        if not self._labels.empty and not self._labels.matches(labels_of(obj)):
            return False
        if self._keys and not self._keeps(key_of(obj)):
            return False
        return self._fields.empty or self._fields.matches(obj)

    def failure(self) -> BaseException | None:
        """The error that ended the informer unexpectedly.

        The informer retries every API error, so this is ``None`` unless there is a bug.
        """
        return self._failure

    # -- handlers and indexes --------------------------------------------------------------

    def add_handler(self, handler: ResourceEventHandler) -> HandlerRegistration:
        """Register ``handler``; it is told about every object already stored, at once.

        Objects already stored are delivered now as adds with ``is_initial_list=True``;
        objects of an initial list still in progress follow as they arrive. The
        registration's ``synced`` turns true once the handler has seen the whole initial
        list.
        """
        registration = HandlerRegistration(self, handler)
        for obj in list(self._store.values()):
            self._call(registration, "on_add", obj, True)
        registration._synced = self.synced
        self._handlers.append(registration)
        return registration

    @property
    def handler_count(self) -> int:
        """Handlers registered and not removed (a controller's sources register one each)."""
        return len(self._handlers)

    def _remove(self, registration: HandlerRegistration) -> None:
        with contextlib.suppress(ValueError):
            self._handlers.remove(registration)

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Add a secondary index to the store (built at once over what is stored).

        Raises:
            ValueError: an index with this name exists.

        """
        self._store.add_index(name, fn)

    def narrow(self, labels: str = "", *, keys: KeyFilter | None = None) -> None:
        """Narrow what the informer holds, before it starts: labels, keys, or both (ANDed).

        ``labels`` are added to the selector the server filters by. Sharding's hook
        (decision 0011): a replica's informer for a sharded kind selects only its own
        shard's label, ``shard.sharding.setpoint.dev/<ring>=<shard>``.

        ``keys`` filters here, for what no selector can express: an object whose key it
        refuses is dropped as it arrives (listed or watched), before the transform, the
        store and the handlers, so it costs its decoding only. A key never changes, so an
        object is either always held or never. The workers of ``--processes`` split a
        kind this way (decision 0038).

        Raises:
            CacheError: the informer has started (its list and watch already use the old
                scope).
            SelectorError: ``labels`` is not a label selector.

        """
        if self._task is not None:
            raise CacheError(
                f"the informer for {self._kind} has started; narrow it "
                f"({labels!r}{', by key' if keys is not None else ''}) before the cache "
                "starts (build sharded controllers before running the manager)"
            )
        LabelMatcher.parse(labels)
        if labels:
            combined = ",".join(part for part in (self._options.labels, labels) if part)
            self._options = replace(self._options, labels=combined)
            self._labels = LabelMatcher.parse(combined)
        if keys is not None:
            self._keys = (*self._keys, keys)

    def _keeps(self, key: ObjectKey) -> bool:
        return all(keep(key) for keep in self._keys)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Start listing and watching in a background task; returns at once."""
        self._start_task()

    def _start_task(self) -> None:
        # Synchronous, so the cache can start an informer created inside a plain method.
        if self._task is not None:
            return
        if self._stopped:
            raise CacheError(
                f"the informer for {self._kind} was stopped; create a new one to watch again"
            )
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"informer {self._kind}"
        )

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop the background work (idempotent) and fail read-after-write waiters."""
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), timeout)
        self._expectations.close()

    async def release(self, error: CacheError, timeout: float = 5.0) -> None:
        """Stop (as :meth:`stop`), then drop the store, its indexes and every handler.

        For an informer removed from its cache: the watch is closed, the objects are no
        longer referenced from here, and whoever waits for the informer to sync, or calls
        :meth:`wait_for_sync` later, gets ``error`` at once.
        """
        self._fail_sync(error)
        await self.stop(timeout)
        self._fail_sync(error)  # in case the task got as far as resolving the kind meanwhile
        for registration in self._handlers:
            registration.removed = True
        self._handlers.clear()
        self._streams.clear()
        self._store.clear()

    def _fail_sync(self, error: CacheError) -> None:
        self._synced.clear()
        self._sync_failed = error
        self._sync_failed_event.set()

    async def wait_for_sync(self, timeout: float) -> None:
        """Wait until the initial list of every scope is stored.

        Raises:
            KindNotServed: the server does not serve the kind (raised as soon as known).
            CacheSyncTimeout: not synced within ``timeout`` seconds; names the last error.

        """
        if self.synced:
            return
        if self._sync_failed is not None:
            raise self._sync_failed
        if self._task is None:
            raise CacheError(
                f"the informer for {self._kind} is not started; start the cache (or the "
                "informer) before waiting for it to sync"
            )
        synced = asyncio.ensure_future(self._synced.wait())
        failed = asyncio.ensure_future(self._sync_failed_event.wait())
        try:
            await asyncio.wait({synced, failed}, timeout=timeout, return_when="FIRST_COMPLETED")
        finally:
            synced.cancel()
            failed.cancel()
        if self.synced:
            return
        if self._sync_failed is not None:
            raise self._sync_failed
        detail = f"; last error: {self.stats.last_error}" if self.stats.last_error else ""
        raise CacheSyncTimeout(
            f"the informer for {self._kind} did not sync within {timeout:.1f}s{detail}. "
            "Check that the API server is reachable and that RBAC allows list and watch"
        )

    # -- the list/watch loop -----------------------------------------------------------------

    async def _run(self) -> None:
        try:
            self._info = await self._resolve()
            namespaces: Iterable[str | None] = (
                self._options.namespaces
                if self._info.namespaced and self._options.namespaces
                else (None,)
            )
            self._streams = {ns: _Stream(ns) for ns in namespaces}
            self._expectations.watch_scopes(self._streams)
            tasks = [
                asyncio.create_task(
                    self._run_stream(s), name=f"informer {self._kind} {s.namespace}"
                )
                for s in self._streams.values()
            ]
            if self._options.resync_period is not None:
                tasks.append(asyncio.create_task(self._resync_loop(self._options.resync_period)))
            try:
                await asyncio.gather(*tasks)
            finally:
                for task in tasks:
                    task.cancel()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: record it so the cache reports it
            self._failure = exc
            self._log.exception("Informer stopped by an unexpected error")
            raise

    def _backoff(self, failures: int) -> float:
        ceiling = min(
            self._options.backoff_max, self._options.backoff_initial * 2 ** min(failures, 30)
        )
        return random.uniform(ceiling / 2, ceiling)

    def _record_error(self, exc: BaseException) -> None:
        self.stats.errors += 1
        self.stats.last_error = f"{type(exc).__name__}: {exc}"

    async def _resolve(self) -> ResourceInfo:
        failures = 0
        while True:
            try:
                info = await self._client.resource_info(self._kind)
            except UnknownKind as exc:
                self._record_error(exc)
                if self._sync_failed is None:
                    self._sync_failed = KindNotServed(
                        f"the cache cannot watch {self._kind.kind} ({self._kind}): {exc}"
                    )
                    self._sync_failed_event.set()
                    self._log.error("Kind not served; retrying with backoff", error=str(exc))
            except ClientError as exc:
                self._record_error(exc)
                self._log.warning("Cannot resolve kind; retrying", error=str(exc))
            else:
                if self._sync_failed is not None:
                    self._log.info("Kind is served now")
                self._sync_failed = None
                self._sync_failed_event.clear()
                return info
            await asyncio.sleep(self._backoff(failures))
            failures += 1

    async def _run_stream(self, stream: _Stream) -> None:
        failures = 0
        need_list = True
        log = self._log.bind(namespace=stream.namespace or "")
        while True:
            generation = stream.generation
            try:
                events_before = self.stats.events + self.stats.bookmarks
                started = time.monotonic()
                if need_list and self._streaming:
                    # Lists, then goes on watching on the same stream until it ends.
                    await self._stream_list(stream)
                    if stream.generation == generation:
                        # The stream ended before the end of its initial events: list again.
                        failures += 1
                        await asyncio.sleep(self._backoff(failures))
                        continue
                    need_list = False
                    failures = 0
                else:
                    if need_list:
                        await self._list(stream)
                        need_list = False
                        failures = 0
                        events_before = self.stats.events + self.stats.bookmarks
                        started = time.monotonic()
                    await self._watch(stream)
                # The server ended the watch (its timeout): re-watch from where it stopped.
                # A watch that ended at once with nothing in it counts as a failure, so a
                # server that keeps closing streams is not hammered.
                self.stats.rewatches += 1
                if (
                    self.stats.events + self.stats.bookmarks == events_before
                    and time.monotonic() - started < 1.0
                ):
                    failures += 1
                    await asyncio.sleep(self._backoff(failures))
                else:
                    failures = 0
            except asyncio.CancelledError:
                raise
            except _StreamingUnsupported as exc:
                # Not a failure: this server lists the old way. No backoff, no retry.
                log.info("Streaming lists not supported; listing with pages", reason=str(exc))
                self._streaming = False
            except Gone as exc:
                # The resourceVersion was compacted away: only a fresh list can tell what
                # happened meanwhile. Relist at once; back off only if it keeps happening.
                log.info("Watch expired; relisting", error=str(exc), resource_version=stream.rv)
                self.stats.relists += 1
                need_list = True
                if failures:
                    await asyncio.sleep(self._backoff(failures))
                failures += 1
            except UnknownKind as exc:
                # The CRD was removed (or never installed): keep trying, it may come back.
                self._record_error(exc)
                if not self.synced and self._sync_failed is None:
                    self._sync_failed = KindNotServed(
                        f"the cache cannot watch {self._kind.kind} ({self._kind}): {exc}"
                    )
                    self._sync_failed_event.set()
                log.warning("Kind not served; retrying", error=str(exc))
                failures += 1
                await asyncio.sleep(self._backoff(failures))
            except MalformedResponse as exc:
                # A line that was not a watch event, or a list that would page forever:
                # an event may have been lost, so relist after the backoff.
                self._record_error(exc)
                log.warning("Malformed response; relisting after backoff", error=str(exc))
                need_list = True
                failures += 1
                await asyncio.sleep(self._backoff(failures))
            except ClientError as exc:
                # Connection refused/reset, timeouts, 5xx, 403, ...: keep the store and
                # re-watch from the last resourceVersion after a backoff (relist if the
                # initial list never completed).
                self._record_error(exc)
                level = log.error if isinstance(exc, Forbidden) else log.warning
                level(
                    "List/watch failed; retrying",
                    error=str(exc),
                    resource_version=stream.rv,
                    attempt=failures + 1,
                )
                if stream.generation != generation:
                    need_list = False  # a streamed list completed before its watch broke
                need_list = need_list or not stream.listed
                failures += 1
                await asyncio.sleep(self._backoff(failures))
                if stream.listed and not need_list:
                    self.stats.rewatches += 1
            except Exception as exc:
                # Not an API failure (a transform bug, a malformed event): the store may be
                # out of step, so relist after the backoff.
                self._record_error(exc)
                log.exception("Unexpected error in list/watch; relisting after backoff")
                need_list = True
                failures += 1
                await asyncio.sleep(self._backoff(failures))

    async def _list(self, stream: _Stream) -> None:
        listing = await self._client.list(
            self._source,
            namespace=stream.namespace,
            labels=self._options.labels,
            fields=self._options.fields,
        )
        initial = not stream.listed
        seen: set[ObjectKey] = set()
        for raw in listing.items:
            seen.add(self._list_item(raw, initial))
        self._listed(stream, seen, listing.resource_version)

    def _list_item(self, raw: JsonObject, initial: bool) -> ObjectKey:
        """Apply one listed object to the store (an add, an update, or nothing); its key."""
        key = key_of(raw)
        if self._keys and not self._keeps(key):
            return key  # narrowed away (never stored, so nothing to drop either)
        obj = self._prepare(raw)
        old = self._store.get(key)
        if old is None:
            self._store.put(key, obj)
            self._dispatch_add(obj, initial)
        elif resource_version_of(old) != resource_version_of(obj):
            self._store.put(key, obj)
            self._dispatch_update(old, obj)
        # Unchanged: keep the stored object and say nothing (no duplicate add).
        return key

    def _listed(self, stream: _Stream, seen: set[ObjectKey], resource_version: str) -> None:
        """A list of the scope is complete: drop what it no longer holds, record its version."""
        self.stats.lists += 1
        scope = (
            set(self._store.keys())
            if stream.namespace is None
            else self._store.keys_in_namespace(stream.namespace)
        )
        for key in scope - seen:
            old = self._store.delete(key)
            if old is not None:
                self._dispatch_delete(old, final_state_unknown=True)
        stream.rv = resource_version
        stream.rv_int = parse_resource_version(stream.rv)
        stream.listed = True
        stream.generation += 1
        self._expectations.listed(stream.namespace, stream.rv)
        if not self.synced and all(s.listed for s in self._streams.values()):
            self._synced.set()
            for registration in self._handlers:
                registration._synced = True
            self._log.debug("Informer synced", objects=len(self._store))

    async def _stream_list(self, stream: _Stream) -> None:
        """List through a watch (``sendInitialEvents``), then keep watching on it.

        The watch starts with no resourceVersion and ``resourceVersionMatch=NotOlderThan``:
        the server first brings its watch cache up to date with etcd (a consistent read, as
        a list is), sends the state as ``ADDED`` events, then a bookmark annotated
        ``k8s.io/initial-events-end`` at the resourceVersion of that state. Until then the
        events are applied as a list's items; after it, as watch events.

        Raises:
            _StreamingUnsupported: the server refused ``sendInitialEvents`` (400/422), or
                sent a bookmark without the end annotation before the end (a server that
                ignores the parameter).

        """
        self.stats.watches += 1
        initial = not stream.listed
        seen: set[ObjectKey] = set()
        listing = True
        try:
            async with self._client.watch(
                self._source,
                namespace=stream.namespace,
                resource_version=None,
                labels=self._options.labels,
                fields=self._options.fields,
                allow_bookmarks=True,
                send_initial_events=True,
            ) as watch:
                async for event in watch:
                    if not listing:
                        self._apply_event(stream, event)
                    elif event.type == "BOOKMARK":
                        self.stats.bookmarks += 1
                        if not _ends_initial_events(event.object):
                            raise _StreamingUnsupported(
                                "the server sent a bookmark before the end of the initial "
                                "events (it ignores sendInitialEvents)"
                            )
                        self.stats.streamed_lists += 1
                        self._listed(stream, seen, event.resource_version)
                        listing = False
                        seen = set()  # its table would stay as large as the list
                    elif event.type == "ADDED":
                        self.stats.events += 1
                        seen.add(self._list_item(event.object, initial))
                    else:  # not sent before the end marker; apply it as it says
                        key = key_of(event.object)
                        self._apply_event(stream, event, advance=False)
                        if event.type == "DELETED":
                            seen.discard(key)
                        else:
                            seen.add(key)
        except (BadRequest, Invalid) as exc:
            if listing and not seen:
                raise _StreamingUnsupported(f"the server refused sendInitialEvents: {exc}") from exc
            raise

    async def _watch(self, stream: _Stream) -> None:
        self.stats.watches += 1
        async with self._client.watch(
            self._source,
            namespace=stream.namespace,
            resource_version=stream.rv or None,
            labels=self._options.labels,
            fields=self._options.fields,
            allow_bookmarks=True,
        ) as watch:
            async for event in watch:
                self._apply_event(stream, event)

    def _apply_event(
        self, stream: _Stream, event: WatchEvent[Any], *, advance: bool = True
    ) -> None:
        """Apply one watch event to the store, tell handlers and expectations.

        ``advance=False`` (an event inside a streamed list's initial state) leaves the
        scope's resourceVersion alone: the list's end bookmark sets it.
        """
        if event.type == "BOOKMARK":
            self.stats.bookmarks += 1
            if advance:
                self._advance(stream, event.resource_version)
            return
        self.stats.events += 1
        key = key_of(event.object)
        if self._keys and not self._keeps(key):
            if advance:  # narrowed away; the scope still moves past it
                self._advance(stream, event.resource_version)
            return
        obj = self._prepare(event.object)
        if event.type == "DELETED":
            old = self._store.delete(key)
            if advance:
                self._advance(stream, event.resource_version)
            if old is not None:
                self._dispatch_delete(obj, final_state_unknown=False)
            self._expectations.observed(key, deleted=obj)
            return
        old = self._store.get(key)
        if old is not None and _is_older(obj, old):
            return  # a replayed event: the store already has something newer
        self._store.put(key, obj)
        if advance:
            self._advance(stream, event.resource_version)
        if old is None:
            self._dispatch_add(obj, False)
        else:
            self._dispatch_update(old, obj)
        self._expectations.observed(key)

    def _prepare(self, obj: JsonObject) -> JsonObject:
        transform = self._options.transform
        if transform is not None:
            try:
                obj = transform(obj)
            except Exception:
                # Store it untransformed rather than lose it; the transform has a bug.
                self._log.exception("Transform failed; storing the object as received")
        return obj

    async def _resync_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period * random.uniform(0.9, 1.1))
            if not self.synced:
                continue
            self.stats.resyncs += 1
            for obj in list(self._store.values()):
                self._dispatch_update(obj, obj)

    # -- dispatch ------------------------------------------------------------------------------

    def _call(self, registration: HandlerRegistration, method: str, *args: Any) -> None:
        handler = registration.handler
        try:
            if method == "on_add":
                handler.on_add(args[0], is_initial_list=args[1])
            elif method == "on_update":
                handler.on_update(args[0], args[1])
            else:
                handler.on_delete(args[0], final_state_unknown=args[1])
        except Exception:
            self._failed(registration, method)

    def _failed(self, registration: HandlerRegistration, method: str) -> None:
        self._log.exception(
            "Event handler failed; other handlers still run",
            handler=repr(registration.handler),
            event=method,
        )

    # The three dispatchers call the handlers directly rather than through _call: they run
    # for every event, once per handler.

    def _dispatch_add(self, obj: JsonObject, initial: bool) -> None:
        recorder = active_recorder()
        if recorder is not None:
            recorder.event(str(self._kind), "add", obj)
        for registration in tuple(self._handlers):
            if not registration.removed:
                try:
                    registration.handler.on_add(obj, is_initial_list=initial)
                except Exception:
                    self._failed(registration, "on_add")

    def _dispatch_update(self, old: JsonObject, new: JsonObject) -> None:
        recorder = active_recorder()
        if recorder is not None:
            recorder.event(str(self._kind), "update", new)
        for registration in tuple(self._handlers):
            if not registration.removed:
                try:
                    registration.handler.on_update(old, new)
                except Exception:
                    self._failed(registration, "on_update")

    def _dispatch_delete(self, obj: JsonObject, *, final_state_unknown: bool) -> None:
        recorder = active_recorder()
        if recorder is not None:
            recorder.event(str(self._kind), "delete", obj)
        for registration in tuple(self._handlers):
            if not registration.removed:
                try:
                    registration.handler.on_delete(obj, final_state_unknown=final_state_unknown)
                except Exception:
                    self._failed(registration, "on_delete")

    def _advance(self, stream: _Stream, rv: str) -> None:
        if not rv:
            return
        stream.rv = rv
        stream.rv_int = parse_resource_version(rv)
        self._expectations.advanced(stream.namespace, rv)

    # -- read-after-write -----------------------------------------------------------------------

    @property
    def expectations(self) -> Expectations:
        """The writes of this process the store does not reflect yet, and the waits for them."""
        return self._expectations

    def expect_written(self, obj: JsonObject) -> None:
        """Record that this process wrote ``obj`` (see :meth:`Expectations.expect_written`).

        Objects outside the informer's scope that it does not hold are ignored: it will
        never see them, and a read would not find them anyway.
        """
        if not self.matches(obj) and key_of(obj) not in self._store:
            return
        self._expectations.expect_written(obj)

    def expect_deleted(self, key: ObjectKey, *, uid: str = "", resource_version: str = "") -> None:
        """Record that this process deleted ``key`` (see :meth:`Expectations.expect_deleted`)."""
        if not self.covers_namespace(key.namespace):
            return
        self._expectations.expect_deleted(key, uid=uid, resource_version=resource_version)


INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a streamed list's initial events."""


class _StreamingUnsupported(Exception):
    """The server cannot stream a list: fall back to paginated lists (not an API failure)."""


def _ends_initial_events(bookmark: Any) -> bool:
    annotations = metadata_of(bookmark).get("annotations") if isinstance(bookmark, dict) else None
    return isinstance(annotations, dict) and annotations.get(INITIAL_EVENTS_END) == "true"


def _is_older(new: JsonObject, old: JsonObject) -> bool:
    new_rv = parse_resource_version(resource_version_of(new))
    old_rv = parse_resource_version(resource_version_of(old))
    return new_rv is not None and old_rv is not None and new_rv < old_rv
