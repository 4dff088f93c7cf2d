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
Two pieces, joined by the :class:`~setpoint.cache.Cache`:

- :class:`TrackingClient` wraps a :class:`~setpoint.client.Client` and, after every successful
  write (create, update, status update, patch, apply, delete, scale), records the
  resourceVersion the server returned, per group/kind and object key, in the informers of
  that kind (:meth:`Informer.expect_written <setpoint.cache.informer.Informer.expect_written>`).
  For a delete that removed the object, it records the deletion (and the object's UID).
- :class:`ConsistentReader` reads from the cache, but first waits until the informer
  reflects the recorded write of the key it reads: the store holds that version or a newer
  one, or the informer has applied every event up to that version (so a later change,
  including a deletion, is already reflected), or the recorded deletion is visible. A list
  waits for every recorded write of its namespace. The wait is event-driven (no polling)
  and bounded: after ``timeout`` seconds it raises
  :class:`~setpoint.cache.errors.ReadAfterWriteTimeout` rather than return stale data.

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

from typing import TYPE_CHECKING, Any, TypeVar, overload

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import (
    JsonObject,
    finalizers_of,
    gvk_of,
    key_of,
    meta,
    resource_version_of,
    uid_of,
)
from setpoint.api.types import TypedObject, is_typed
from setpoint.cache.cache import resolve_kind
from setpoint.client.client import (
    Client,
    KindLike,
    ObjectList,
    Preconditions,
    PropagationPolicy,
    Selector,
)
from setpoint.client.patch import Patch

if TYPE_CHECKING:
    from setpoint.cache.cache import Cache

__all__ = ["ConsistentReader", "TrackingClient"]

T = TypeVar("T", bound=TypedObject)


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
        cache: The cache whose informers record the writes.

    """

    def __init__(self, client: Client, cache: Cache) -> None:
        self._wrapped = client
        self._cache = cache

    @property
    def wrapped(self) -> Client:
        """The client this one sends its requests through."""
        return self._wrapped

    @property
    def cache(self) -> Cache:
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

    def _record(self, kind: KindLike | None, result: Any) -> None:
        data = _json(result)
        if data is None:
            return
        if kind is None:
            try:
                gvk = gvk_of(data)
            except ValueError:
                return
        else:
            gvk = resolve_kind(kind)[0]
        if meta(data).get("deletionTimestamp") and not _still_exists(data):
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

    @overload
    async def get(self, kind: type[T], name: str, *, namespace: str | None = None) -> T: ...
    @overload
    async def get(
        self, kind: GroupVersionKind, name: str, *, namespace: str | None = None
    ) -> JsonObject: ...
    async def get(self, kind: KindLike, name: str, *, namespace: str | None = None) -> Any:
        """Read one object from the API server (see :meth:`Client.get`)."""
        return await self._wrapped.get(kind, name, namespace=namespace)

    async def list(self, kind: KindLike, **kwargs: Any) -> ObjectList[Any]:
        """List objects from the API server (see :meth:`Client.list`)."""
        return await self._wrapped.list(kind, **kwargs)

    async def resource_info(self, kind: KindLike) -> ResourceInfo:
        """How the server serves ``kind`` (see :meth:`Client.resource_info`)."""
        return await self._wrapped.resource_info(kind)

    # -- writes -----------------------------------------------------------------------------

    @overload
    async def create(
        self, obj: T, *, dry_run: bool = False, field_manager: str | None = None
    ) -> T: ...
    @overload
    async def create(
        self, obj: JsonObject, *, dry_run: bool = False, field_manager: str | None = None
    ) -> JsonObject: ...
    async def create(
        self,
        obj: JsonObject | TypedObject,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Any:
        """Create ``obj`` (see :meth:`Client.create`) and record the stored version."""
        result = await self._wrapped.create(
            obj,
            dry_run=dry_run,
            field_manager=field_manager,
        )
        if not dry_run:
            self._record(None, result)
        return result

    @overload
    async def update(
        self,
        obj: T,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> T: ...
    @overload
    async def update(
        self,
        obj: JsonObject,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> JsonObject: ...
    async def update(
        self,
        obj: JsonObject | TypedObject,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Any:
        """Replace ``obj`` (see :meth:`Client.update`; also status) and record the version."""
        result = await self._wrapped.update(
            obj,
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager,
        )
        if not dry_run:
            self._record(None, result)
        return result

    async def update_status(
        self, obj: Any, *, dry_run: bool = False, field_manager: str | None = None
    ) -> Any:
        """Write ``obj``'s status (see :meth:`Client.update_status`) and record the version."""
        result = await self._wrapped.update_status(
            obj, dry_run=dry_run, field_manager=field_manager
        )
        if not dry_run:
            self._record(None, result)
        return result

    @overload
    async def patch(
        self,
        kind: type[T],
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> T: ...
    @overload
    async def patch(
        self,
        kind: GroupVersionKind,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> JsonObject: ...
    async def patch(
        self,
        kind: KindLike,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Any:
        """Patch an object (see :meth:`Client.patch`) and record the version."""
        result = await self._wrapped.patch(
            kind,
            name,
            patch,
            namespace=namespace,
            subresource=subresource,
            dry_run=dry_run,
            field_manager=field_manager,
        )
        if not dry_run:
            self._record(kind, _with_key(result, name, namespace))
        return result

    @overload
    async def apply(
        self,
        obj: T,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> T: ...
    @overload
    async def apply(
        self,
        obj: JsonObject,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject: ...
    async def apply(
        self,
        obj: JsonObject | TypedObject,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Server-side apply ``obj`` (see :meth:`Client.apply`) and record the version."""
        result = await self._wrapped.apply(
            obj,
            field_manager=field_manager,
            force=force,
            subresource=subresource,
            dry_run=dry_run,
        )
        if not dry_run:
            self._record(None, result)
        return result

    async def delete(
        self,
        kind: KindLike,
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
        gvk = resolve_kind(kind)[0]
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
        kind: KindLike,
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

    async def scale(
        self, kind: KindLike, name: str, replicas: int, *, namespace: str | None = None
    ) -> JsonObject:
        """Set ``spec.replicas`` through ``scale`` (see :meth:`Client.scale`); record it."""
        result = await self._wrapped.scale(kind, name, replicas, namespace=namespace)
        self._record(kind, _with_key(result, name, namespace))
        return result


def _still_exists(obj: JsonObject) -> bool:
    """Whether a delete response describes an object that is still stored (being deleted)."""
    m = meta(obj)
    if not m.get("deletionTimestamp"):
        return False
    grace = m.get("deletionGracePeriodSeconds")
    return bool(finalizers_of(obj)) or (isinstance(grace, int) and grace > 0)


def _with_key(result: Any, name: str, namespace: str | None) -> Any:
    # A Scale names its parent in metadata; make sure of it, the key is what we record.
    data = _json(result)
    if data is None:
        return result
    m = dict(meta(data))
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

    def __init__(self, cache: Cache, *, timeout: float) -> None:
        if timeout <= 0:
            raise ValueError("ConsistentReader timeout must be > 0 seconds")
        self._cache = cache
        self._timeout = timeout

    @property
    def cache(self) -> Cache:
        """The cache this reader reads."""
        return self._cache

    @property
    def timeout(self) -> float:
        """Seconds a read waits for the cache to catch up with this process's writes."""
        return self._timeout

    @overload
    async def get(self, kind: type[T], name: str, *, namespace: str | None = None) -> T: ...
    @overload
    async def get(
        self, kind: GroupVersionKind, name: str, *, namespace: str | None = None
    ) -> JsonObject: ...
    async def get(self, kind: KindLike, name: str, *, namespace: str | None = None) -> Any:
        """Read one object once the cache reflects this process's writes of it.

        Raises:
            NotFound: as :meth:`Cache.get`.
            ReadAfterWriteTimeout: the cache did not catch up in time.

        """
        informer = await self._cache._ready_informer(kind)
        await informer.wait_caught_up(ObjectKey(namespace or "", name), self._timeout)
        return await self._cache.get(kind, name, namespace=namespace)

    @overload
    async def list(
        self,
        kind: type[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[T]: ...
    @overload
    async def list(
        self,
        kind: GroupVersionKind,
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[Any]: ...
    async def list(
        self,
        kind: KindLike,
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[Any]:
        """List objects once the cache reflects this process's writes in ``namespace``."""
        informer = await self._cache._ready_informer(kind)
        await informer.wait_scope_caught_up(namespace or None, self._timeout)
        return await self._cache.list(
            kind,
            namespace=namespace,
            labels=labels,
            fields=fields,
        )

    async def list_by_index(self, kind: KindLike, index: str, value: str) -> ObjectList[Any]:
        """List by index once the cache reflects every write of this process to ``kind``."""
        informer = await self._cache._ready_informer(kind)
        await informer.wait_scope_caught_up(None, self._timeout)
        return await self._cache.list_by_index(kind, index, value)


if TYPE_CHECKING:
    from setpoint.client.protocols import Reader, ReadWriter, StatusWriter, Writer

    def _conforms(
        reader: ConsistentReader, cache: Cache, client: TrackingClient
    ) -> tuple[Reader, Reader, Reader, Writer, StatusWriter, ReadWriter]:
        # Checked by mypy only: the readers and the tracking client satisfy the client's
        # protocols, so code written against them accepts either.
        return reader, cache, client, client, client, client
