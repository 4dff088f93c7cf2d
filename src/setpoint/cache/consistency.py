"""Read-after-write: a reconcile never reads an object older than its own last write of it.

The problem
-----------
A controller writes an object (say, a status update at resourceVersion 812) and the write
produces a watch event, but the cache receives it a few milliseconds later. If the object is
reconciled again meanwhile (another event enqueued it), a plain cached read returns version
811. The reconcile then writes based on stale data and gets a 409 Conflict, or, worse,
creates a child a second time. controller-runtime users meet this as conflict loops.

The design
----------
Three pieces, all in this module, joined by the :class:`~setpoint.cache.Cache`:

- :class:`Expectations`: one per informer, the table of this process's writes its store has
  not reflected yet ("key K written at resourceVersion R", "object K with UID U deleted").
  The informer tells it what it applies (:meth:`Expectations.observed`) and how far each
  list/watch scope has got (:meth:`Expectations.listed`, :meth:`Expectations.advanced`); a
  write is reflected once the store holds R or newer, or the scope has applied every event
  up to R (so a later change, including a deletion, is already reflected), or the recorded
  deletion is visible.
- :class:`TrackingClient` wraps a :class:`~setpoint.client.Client` and, after every successful
  write (create, update, status update, patch, apply, delete, scale), records the
  resourceVersion the server returned in the expectations of the informers of that
  group/kind (through the cache's ``expect_written``/``expect_deleted``). For a delete that
  removed the object, it records the deletion (and the object's UID).
- :class:`ConsistentReader` reads from the cache, but first waits on the kind's
  :class:`Expectations` until the write of the key it reads is reflected. A list waits for
  every recorded write of its namespace. The wait is event-driven (no polling) and bounded:
  after ``timeout`` seconds it raises :class:`~setpoint.cache.errors.ReadAfterWriteTimeout`
  rather than return stale data.

The module knows the cache and the informer only through two small protocols
(:class:`WriteTracker`, :class:`ConsistentSource`), so it imports neither.

Assumptions
-----------
resourceVersions are opaque by the API contract, but kube-apiserver uses etcd revisions:
one counter for all objects of a resource. Versions are compared as integers when both
parse; otherwise only equality is used (a write is then reflected once the store holds
exactly the written version, or the object's deletion is seen). Decision 0004 records this.

Caveats
-------
- Only writes made through a :class:`TrackingClient` of the same cache are tracked.
  ``delete_collection`` and ``create_subresource`` (evictions, tokens) are not.
- Objects outside an informer's scope (another namespace, not matching its selectors) are
  not tracked unless the informer holds them: it will never see them.
- Expectations expire after ``InformerOptions.expectation_ttl`` (300 s), so a broken watch
  cannot grow memory without bound; reads then return what the cache has.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import (
    JsonObject,
    finalizers_of,
    gvk_of,
    key_of,
    metadata_of,
    resource_version_of,
    uid_of,
)
from setpoint.api.types import Kind, Obj, is_typed, kind_of
from setpoint.cache.errors import CacheError, ReadAfterWriteTimeout
from setpoint.cache.store import Store, parse_resource_version
from setpoint.client.client import (
    Preconditions,
    PropagationPolicy,
    Selector,
)
from setpoint.client.errors import NotFound
from setpoint.client.objects import Applied, ObjectList
from setpoint.client.patch import Patch
from setpoint.client.protocols import ApiClient, CacheView, Reader, WatchStream
from setpoint.client.server_warnings import FieldValidation

__all__ = [
    "ConsistentReader",
    "ConsistentSource",
    "Expectations",
    "ExpectedWrite",
    "TrackingClient",
    "WriteTracker",
]

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# The expectation table of one informer


@dataclass(frozen=True, slots=True)
class ExpectedWrite:
    """One recorded write, as :meth:`Expectations.get` shows it."""

    key: ObjectKey
    """The object written."""
    resource_version: str
    """The version the server returned (``""`` when a delete response carried none)."""
    _: KW_ONLY
    deleted: bool
    """The write deleted the object: reads wait until it is gone."""
    uid: str
    """The object's UID, when known (a deletion waits for this object, not a namesake)."""


@dataclass(slots=True)
class _Expectation:
    key: ObjectKey
    rv: str
    rv_int: int | None
    deleted: bool
    uid: str
    recorded: float
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


@dataclass(slots=True)
class _Scope:
    """How far one list/watch scope of the informer has got."""

    listed: bool = False
    rv_int: int | None = None
    # (rv, seq, key): version expectations of keys in this scope, popped as the watermark
    # passes them. Items are hints; the expectation table is the truth.
    heap: list[tuple[int, int, ObjectKey]] = field(default_factory=list)


class Expectations:
    """One informer's writes-not-yet-seen, and the waits for them. See the module docstring.

    Expected flow:
        The informer creates it over its store and calls :meth:`watch_scopes` once it knows
        its list/watch scopes (all namespaces, or each configured namespace). After each
        list it calls :meth:`listed`; for each watch event or bookmark :meth:`advanced`,
        then, for an event that changed the store, :meth:`observed`. Writers record with
        :meth:`expect_written` / :meth:`expect_deleted`; readers call
        :meth:`wait_caught_up` (one key) or :meth:`wait_scope_caught_up` (a namespace).

    Guarantees:
        A wait returns only once the store reflects the write (or the expectation expired,
        or was superseded by a newer write of the same key); it never polls. Two racing
        writers of one key leave the expectation at the newer version. A recorded deletion
        is kept until the deletion itself is seen (or a relist settles it), so the doomed
        object is never served after a read waited for its deletion.

    Caveats:
        Expectations are held at most ``ttl`` seconds, so a broken watch cannot grow memory
        without bound; after that a read returns what the store has. Callers filter out
        objects the informer will never see (another namespace, selectors) before recording.

    Errors:
        :class:`~setpoint.cache.errors.ReadAfterWriteTimeout` from the waits;
        :class:`~setpoint.cache.errors.CacheError` to waiters when :meth:`close` is called.
    """

    def __init__(self, kind: GroupVersionKind, store: Store, *, ttl: float) -> None:
        self._kind = kind
        self._store = store
        self._ttl = ttl
        self._table: dict[ObjectKey, _Expectation] = {}
        self._scopes: dict[str | None, _Scope] = {}
        self._seq = 0

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def __len__(self) -> int:
        return len(self._table)

    def get(self, key: ObjectKey) -> ExpectedWrite | None:
        """What a read of ``key`` waits for, or ``None`` when nothing is recorded for it."""
        e = self._table.get(key)
        return None if e is None else ExpectedWrite(e.key, e.rv, deleted=e.deleted, uid=e.uid)

    # -- what the informer reports ----------------------------------------------------------

    def watch_scopes(self, scopes: Iterable[str | None]) -> None:
        """Start tracking these list/watch scopes (``None``: all namespaces), none listed yet."""
        self._scopes = {scope: _Scope() for scope in scopes}

    def listed(self, scope: str | None, resource_version: str) -> None:
        """The scope's list was applied to the store, at ``resource_version``.

        A list is a consistent read taken after every write this process has made so far to
        the scope: every expectation in it is settled (met, or deleted meanwhile), except
        versions newer than the list, which the watch will bring.
        """
        state = self._scopes.setdefault(scope, _Scope())
        state.listed = True
        state.rv_int = parse_resource_version(resource_version)
        state.heap.clear()
        for key in [k for k in self._table if scope is None or k.namespace == scope]:
            expectation = self._table[key]
            if expectation.deleted:
                if self._satisfied(expectation):
                    del self._table[key]
                    self._release(expectation)
            else:
                self.observed(key)
                if key in self._table and expectation.rv_int is not None:
                    self._seq += 1
                    heapq.heappush(state.heap, (expectation.rv_int, self._seq, key))

    def advanced(self, scope: str | None, resource_version: str) -> None:
        """The scope has applied every event up to ``resource_version`` (an event or bookmark)."""
        if not resource_version:
            return
        state = self._scopes.setdefault(scope, _Scope())
        state.rv_int = parse_resource_version(resource_version)
        if state.rv_int is None:
            return
        heap = state.heap
        while heap and heap[0][0] <= state.rv_int:
            _, _, key = heapq.heappop(heap)
            self.observed(key)

    def observed(self, key: ObjectKey, *, deleted: JsonObject | None = None) -> None:
        """Settle ``key``'s expectation if the store now reflects it.

        ``deleted`` is the final state from a DELETED event for ``key`` just applied.
        """
        expectation = self._table.get(key)
        if expectation is None:
            return
        same_object = deleted is not None and (
            not expectation.uid or uid_of(deleted) == expectation.uid
        )
        if same_object and not expectation.deleted and expectation.rv_int is None:
            # Opaque versions cannot be ordered, but the object we wrote has now been
            # deleted: every version of it is behind us. (Integer versions are settled by
            # the watermark, which the DELETED event just advanced.)
            del self._table[key]
            self._release(expectation)
            return
        if not self._satisfied(expectation):
            return
        # A deletion seen as "absent" may only mean the informer has not seen the object
        # yet; keep that expectation until the deletion event (or a relist) confirms it, so
        # a later add of the doomed object is still waited out. Reads meanwhile proceed.
        if expectation.deleted and not same_object:
            self._release(expectation, keep=True)
            return
        del self._table[key]
        self._release(expectation)

    def close(self) -> None:
        """Fail every waiting read (the informer stopped) and forget every expectation."""
        for expectation in self._table.values():
            for waiter in expectation.waiters:
                if not waiter.done():
                    waiter.set_exception(
                        CacheError(f"the informer for {self._kind} stopped while a read waited")
                    )
        self._table.clear()

    # -- what writers record ------------------------------------------------------------------

    def expect_written(self, obj: JsonObject) -> None:
        """Record that this process wrote ``obj`` (as the server returned it)."""
        rv = resource_version_of(obj)
        key = key_of(obj)
        if not rv or not key.name:
            return
        self._record(
            _Expectation(key, rv, parse_resource_version(rv), False, uid_of(obj), time.monotonic())
        )

    def expect_deleted(self, key: ObjectKey, *, uid: str = "", resource_version: str = "") -> None:
        """Record that this process deleted the object ``key`` (with ``uid``, if known).

        ``resource_version`` is the object's version as the delete response returned it, if
        it did.
        """
        if not key.name:
            return
        self._record(
            _Expectation(
                key,
                resource_version,
                parse_resource_version(resource_version) if resource_version else None,
                True,
                uid,
                time.monotonic(),
            )
        )

    # -- what readers wait for ----------------------------------------------------------------

    def pending(self, namespace: str | None = None) -> list[ObjectKey]:
        """Keys with a write the store does not reflect yet (in ``namespace``, or all)."""
        return [
            k
            for k, e in self._table.items()
            if (namespace is None or k.namespace == namespace) and not self._satisfied(e)
        ]

    async def wait_caught_up(self, key: ObjectKey, timeout: float) -> None:
        """Wait until the store reflects this process's last write of ``key`` (if any).

        Returns at once when there is nothing to wait for.

        Raises:
            ReadAfterWriteTimeout: the store did not catch up within ``timeout`` seconds.

        """
        expectation = self._table.get(key)
        if expectation is None:
            return
        if time.monotonic() - expectation.recorded >= self._ttl:
            self._table.pop(key, None)
            self._release(expectation)
            return
        if self._satisfied(expectation):
            self.observed(key)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        expectation.waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            current = self._store.get(key)
            have = resource_version_of(current) if current is not None else "nothing"
            wanted = (
                f"the deletion of uid {expectation.uid or '?'}"
                if expectation.deleted
                else f"resourceVersion {expectation.rv}"
            )
            raise ReadAfterWriteTimeout(
                f"the cache of {self._kind.kind} did not catch up with this process's write of "
                f"{key} within {timeout:.1f}s: it holds {have}, waiting for {wanted}. The "
                "watch may be lagging or broken; the reconcile is retried with backoff"
            ) from None
        finally:
            if waiter in expectation.waiters:
                expectation.waiters.remove(waiter)

    async def wait_scope_caught_up(self, namespace: str | None, timeout: float) -> None:
        """Wait until every write of this process in ``namespace`` (or anywhere) is reflected.

        Raises:
            ReadAfterWriteTimeout: not within ``timeout`` seconds.

        """
        deadline = time.monotonic() + timeout
        for key in self.pending(namespace):
            await self.wait_caught_up(key, max(0.0, deadline - time.monotonic()))

    # -- internals ----------------------------------------------------------------------------

    def _scope_of(self, namespace: str) -> _Scope | None:
        state = self._scopes.get(None)
        return state if state is not None else self._scopes.get(namespace)

    def _record(self, new: _Expectation) -> None:
        self._expire(new.recorded)
        old = self._table.get(new.key)
        if old is not None:
            if (
                not new.deleted
                and not old.deleted
                and old.rv_int is not None
                and new.rv_int is not None
                and new.rv_int < old.rv_int
            ):
                return  # two writers raced; wait for the newer version
            new.waiters = old.waiters
        self._table[new.key] = new
        if not new.deleted and new.rv_int is not None:
            state = self._scope_of(new.key.namespace)
            if state is not None:
                self._seq += 1
                heapq.heappush(state.heap, (new.rv_int, self._seq, new.key))
        self.observed(new.key)

    def _expire(self, now: float) -> None:
        ttl = self._ttl
        if len(self._table) < 64:
            oldest = min((e.recorded for e in self._table.values()), default=now)
            if now - oldest < ttl:
                return
        for key in [k for k, e in self._table.items() if now - e.recorded >= ttl]:
            self._release(self._table.pop(key))

    def _satisfied(self, expectation: _Expectation) -> bool:
        if not expectation.deleted and self._passed(expectation):
            return True  # settled by the scope's watermark, without decoding the object
        current = self._store.get(expectation.key)
        if expectation.deleted:
            if current is None:
                return True
            if expectation.uid and uid_of(current) != expectation.uid:
                return True  # a new object with the same name
            current_rv = parse_resource_version(resource_version_of(current))
            return (
                expectation.rv_int is not None
                and current_rv is not None
                and current_rv > expectation.rv_int
            )
        if current is not None:
            current_rv_text = resource_version_of(current)
            if expectation.rv_int is None:
                if current_rv_text == expectation.rv:
                    return True
            else:
                current_rv = parse_resource_version(current_rv_text)
                if current_rv is not None and current_rv >= expectation.rv_int:
                    return True
        return False

    def _passed(self, expectation: _Expectation) -> bool:
        """Whether the scope has applied every event up to the written (integer) version."""
        state = self._scope_of(expectation.key.namespace)
        return (
            expectation.rv_int is not None
            and state is not None
            and state.listed
            and state.rv_int is not None
            and state.rv_int >= expectation.rv_int
        )

    @staticmethod
    def _release(expectation: _Expectation, *, keep: bool = False) -> None:
        for waiter in expectation.waiters:
            if not waiter.done():
                waiter.set_result(None)
        expectation.waiters = [] if keep else expectation.waiters


# --------------------------------------------------------------------------------------------
# The protocols this module needs from the cache


class WriteTracker(CacheView, Protocol):
    """Where a :class:`TrackingClient` records writes (the :class:`~setpoint.cache.Cache`).

    It is also a :class:`~setpoint.client.protocols.CacheView`, so the tracking client is a
    :class:`~setpoint.client.protocols.CachedClient` (``apply_child`` peeks at it).
    """

    def expect_written(self, kind: GroupVersionKind, obj: JsonObject) -> None:
        """Record that this process wrote ``obj`` of ``kind``'s group/kind."""
        ...

    def expect_deleted(
        self, kind: GroupVersionKind, key: ObjectKey, *, uid: str = "", resource_version: str = ""
    ) -> None:
        """Record that this process deleted object ``key`` of ``kind``'s group/kind."""
        ...


class ConsistentSource(Reader, Protocol):
    """What a :class:`ConsistentReader` reads through (the :class:`~setpoint.cache.Cache`)."""

    async def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        """List the cached objects whose index ``index`` includes ``value``."""
        ...

    async def expectations(self, kind: Kind[object]) -> Expectations:
        """The expectations of ``kind``'s informer, once it has synced."""
        ...


def _json(result: Any) -> JsonObject | None:
    data = result.to_object() if is_typed(result) else result
    if not isinstance(data, dict) or data.get("kind") == "Status":
        return None
    return data


class TrackingClient:
    """A client whose writes the cache's consistent readers wait for. See the module docstring.

    It wraps a live client (or the testing fake client) and has the same methods and
    signatures, so it satisfies the same protocols (``Reader``, ``Writer``,
    ``StatusWriter``, the safe-write helpers' ``SafeClient``). Writes go through the wrapped
    client and are recorded; reads (``get``, ``list``, ``watch``) go to the API server as
    with any client. Dry-run writes are not recorded. Closing it does nothing: the
    connection pool belongs to the wrapped client. Attributes it does not define are read
    from the wrapped client.

    Args:
        client: The client to send requests with.
        cache: Where the writes are recorded (the cache whose informers will see them).

    """

    def __init__(self, client: ApiClient, cache: WriteTracker) -> None:
        self._wrapped = client
        self._cache = cache

    @property
    def wrapped(self) -> ApiClient:
        """The client this one sends its requests through."""
        return self._wrapped

    @property
    def cache(self) -> WriteTracker:
        """The cache that records this client's writes."""
        return self._cache

    def __getattr__(self, name: str) -> Any:
        # Everything not about writes (config, mapper, transport, server_version, ...) is
        # the wrapped client's.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._wrapped, name)

    async def close(self) -> None:
        """Do nothing: the connection pool belongs to the wrapped client."""

    def _record(self, kind: Kind[object] | None, result: object) -> None:
        data = _json(result)
        if data is None:
            return
        if kind is None:
            try:
                gvk = gvk_of(data)
            except ValueError:
                return
        else:
            gvk = kind.gvk
        if metadata_of(data).get("deletionTimestamp") and not _still_exists(data):
            # This write removed the last finalizer of a deleting object. The server
            # answers at the old resourceVersion and deletes the object right after, so
            # waiting for "this version or newer" would accept the stale cached copy:
            # wait for the deletion instead.
            self._cache.expect_deleted(
                gvk, key_of(data), uid=uid_of(data), resource_version=resource_version_of(data)
            )
            return
        self._cache.expect_written(gvk, data)

    # -- reads (not cached: this is the live client) ---------------------------------------

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object from the API server (see :meth:`Client.get`)."""
        return await self._wrapped.get(kind, name, namespace=namespace)

    async def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        **options: Any,
    ) -> ObjectList[T]:
        """List objects from the API server (see :meth:`Client.list`).

        ``options`` the wrapped client takes besides these (``resource_version``) are passed
        on as they are.
        """
        return await self._wrapped.list(
            kind, namespace=namespace, labels=labels, fields=fields, **options
        )

    async def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """How the server serves ``kind`` (see :meth:`Client.resource_info`)."""
        return await self._wrapped.resource_info(kind)

    def watch(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
    ) -> WatchStream[T]:
        """Watch the API server (see :meth:`Client.watch`)."""
        return self._wrapped.watch(
            kind,
            namespace=namespace,
            resource_version=resource_version,
            labels=labels,
            fields=fields,
            allow_bookmarks=allow_bookmarks,
            send_initial_events=send_initial_events,
        )

    @property
    def default_namespace(self) -> str:
        """The wrapped client's default namespace."""
        return self._wrapped.default_namespace

    # -- writes -----------------------------------------------------------------------------

    async def create(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Create ``obj`` (see :meth:`Client.create`) and record the stored version."""
        result = await self._wrapped.create(
            obj,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )
        if not dry_run:
            self._record(None, result)
        return result

    async def update(
        self,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace ``obj`` (see :meth:`Client.update`; also status) and record the version."""
        result = await self._wrapped.update(
            obj,
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )
        if not dry_run:
            self._record(None, result)
        return result

    async def replace_status(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Write ``obj``'s status (see :meth:`Client.replace_status`) and record the version."""
        result = await self._wrapped.replace_status(
            obj,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )
        if not dry_run:
            self._record(None, result)
        return result

    async def patch(
        self,
        kind: Kind[T],
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> T:
        """Patch an object (see :meth:`Client.patch`) and record the version."""
        result = await self._wrapped.patch(
            kind,
            name,
            patch,
            namespace=namespace,
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )
        if not dry_run:
            self._record(kind, _with_key(result, name, namespace))
        return result

    async def apply(
        self,
        obj: Obj,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Server-side apply ``obj`` (see :meth:`Client.apply`) and record the version."""
        result = await self._wrapped.apply(
            obj,
            field_manager=field_manager,
            force=force,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )
        if not dry_run:
            self._record(None, result)
        return result

    async def apply_outcome(
        self,
        obj: Obj,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Applied[Obj]:
        """Apply ``obj`` (see :meth:`Client.apply_outcome`), record the version, say if created.

        A wrapped client without ``apply_outcome`` is asked with a GET before the apply
        instead; that answer is not atomic (a create by another writer in between is
        reported as this apply's).
        """
        reporting = getattr(self._wrapped, "apply_outcome", None)
        if reporting is not None:
            applied: Applied[Obj] = await reporting(
                obj,
                field_manager=field_manager,
                force=force,
                subresource=subresource,
                dry_run=dry_run,
                field_validation=field_validation,
            )
        else:
            data = obj.to_object() if is_typed(obj) else obj
            kind = kind_of(obj)
            key = key_of(data)
            try:
                await self._wrapped.get(kind, key.name, namespace=key.namespace or None)
                existed = True
            except NotFound:
                existed = False
            written = await self._wrapped.apply(
                obj,
                field_manager=field_manager,
                force=force,
                subresource=subresource,
                dry_run=dry_run,
                field_validation=field_validation,
            )
            applied = Applied(written, not existed)
        if not dry_run:
            self._record(None, applied.object)
        return applied

    async def delete(
        self,
        kind: Kind[object],
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: PropagationPolicy | None = None,
        preconditions: Preconditions | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Delete an object (see :meth:`Client.delete`) and record what became of it.

        An object that stays (finalizers, a grace period) is recorded as written at the
        returned version; one that is gone is recorded as deleted.
        """
        result = await self._wrapped.delete(
            kind,
            name,
            namespace=namespace,
            propagation_policy=propagation_policy,
            preconditions=preconditions,
            grace_period_seconds=grace_period_seconds,
            dry_run=dry_run,
        )
        if dry_run:
            return result
        gvk = kind.gvk
        data = _json(result)
        if data is not None and _still_exists(data):
            self._cache.expect_written(gvk, data)
            return result
        if data is not None:
            uid, rv = uid_of(data), resource_version_of(data)
        else:
            details = result.get("details") if isinstance(result, dict) else None
            uid = str(details.get("uid") or "") if isinstance(details, dict) else ""
            rv = ""
        self._cache.expect_deleted(
            gvk, ObjectKey(namespace or "", name), uid=uid, resource_version=rv
        )
        return result

    async def update_subresource(
        self,
        kind: Kind[object],
        name: str,
        subresource: str,
        body: JsonObject,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """PUT a subresource (see :meth:`Client.update_subresource`) and record the version.

        ``scale`` and ``status`` answers carry the parent object's resourceVersion.
        """
        result = await self._wrapped.update_subresource(
            kind, name, subresource, body, namespace=namespace, dry_run=dry_run
        )
        if not dry_run:
            self._record(kind, _with_key(result, name, namespace))
        return result

    async def set_scale(
        self, kind: Kind[object], name: str, replicas: int, *, namespace: str | None = None
    ) -> JsonObject:
        """Set ``spec.replicas`` through ``scale`` (see :meth:`Client.set_scale`); record it."""
        result = await self._wrapped.set_scale(kind, name, replicas, namespace=namespace)
        self._record(kind, _with_key(result, name, namespace))
        return result


def _still_exists(obj: JsonObject) -> bool:
    """Whether a delete response describes an object that is still stored (being deleted)."""
    m = metadata_of(obj)
    if not m.get("deletionTimestamp"):
        return False
    grace = m.get("deletionGracePeriodSeconds")
    return bool(finalizers_of(obj)) or (isinstance(grace, int) and grace > 0)


def _with_key(result: Any, name: str, namespace: str | None) -> Any:
    # A Scale names its parent in metadata; make sure of it, the key is what we record.
    data = _json(result)
    if data is None:
        return result
    m = dict(metadata_of(data))
    m.setdefault("name", name)
    if namespace:
        m.setdefault("namespace", namespace)
    return {**data, "metadata": m}


class ConsistentReader:
    """A :class:`~setpoint.client.protocols.Reader` over a cache with read-after-write.

    Before reading a key it waits until the cache reflects this process's last write of it
    (through a :class:`TrackingClient` of the same cache); a list waits for every such write
    in its namespace. See the module docstring.

    Args:
        cache: The cache to read.
        timeout: Seconds to wait for the cache to catch up before raising
            :class:`~setpoint.cache.errors.ReadAfterWriteTimeout`.

    """

    def __init__(self, cache: ConsistentSource, *, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError("ConsistentReader timeout must be > 0 seconds")
        self._cache = cache
        self._timeout = timeout

    @property
    def cache(self) -> ConsistentSource:
        """The cache this reader reads."""
        return self._cache

    @property
    def timeout(self) -> float:
        """Seconds a read waits for the cache to catch up with this process's writes."""
        return self._timeout

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object once the cache reflects this process's writes of it.

        Raises:
            NotFound: as :meth:`Cache.get`.
            ReadAfterWriteTimeout: the cache did not catch up in time.

        """
        expectations = await self._cache.expectations(kind)
        await expectations.wait_caught_up(ObjectKey(namespace or "", name), self._timeout)
        return await self._cache.get(kind, name, namespace=namespace)

    async def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[T]:
        """List objects once the cache reflects this process's writes in ``namespace``."""
        expectations = await self._cache.expectations(kind)
        await expectations.wait_scope_caught_up(namespace or None, self._timeout)
        return await self._cache.list(
            kind,
            namespace=namespace,
            labels=labels,
            fields=fields,
        )

    async def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        """List by index once the cache reflects every write of this process to ``kind``."""
        expectations = await self._cache.expectations(kind)
        await expectations.wait_scope_caught_up(None, self._timeout)
        return await self._cache.list_by_index(kind, index, value)


if TYPE_CHECKING:
    from setpoint.client.protocols import (
        CachedClient,
        IndexReader,
        ReadWriter,
        StatusWriter,
        Writer,
    )

    def _conforms(
        reader: ConsistentReader, cache: ConsistentSource, client: TrackingClient
    ) -> tuple[
        Reader,
        IndexReader,
        Reader,
        Reader,
        Writer,
        StatusWriter,
        ReadWriter,
        ApiClient,
        CachedClient,
    ]:
        # Checked by mypy only: the readers and the tracking client satisfy the client's
        # protocols, so code written against them accepts either.
        return reader, reader, cache, client, client, client, client, client, client
