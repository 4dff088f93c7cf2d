"""The small interfaces the client is composed of.

As in controller-runtime's ``pkg/client/interfaces.go``, code depends on the
narrowest interface it needs: a reconciler that only reads takes a
:class:`Reader`, which the live :class:`~setpoint.client.client.Client`, the
cache and its read-after-write reader, and the testing fake client all
satisfy. Decorators (the tracking client, fault injection) wrap the same
interfaces. mypy checks each implementation against them.

========================  ===============================================================
protocol                  who takes it
========================  ===============================================================
:class:`Reader`           helpers that only read
:class:`IndexReader`      ``Context.reader`` (a reader that also answers index queries)
:class:`ReadWriter`       the safe-write helpers
:class:`ListWatcher`      the informers (list, watch, resolve kinds)
:class:`ApiClient`        everything the runtime asks of the API: ``Context.client``, the
                          cache, controllers, the builder and the manager
:class:`CachedClient`     optional: a client that carries a cache it can :class:`CacheView`
                          (``apply_child`` skips the GET when the cache shows no change,
                          or shows that the child does not exist yet)
========================  ===============================================================

The live client, the tracking client and the testing fake satisfy all of them, so a
:class:`~setpoint.testing.FakeClient` fits wherever the live client does.

Each method has one signature here, and the implementations state exactly it (adding only
optional keywords): a kind is a :class:`~setpoint.api.types.Kind` (``get(kind: Kind[T],
...) -> T``: a GVK gives JSON dicts, a typed class its instances), and a method that takes
an object returns the same type. So a helper typed against :class:`ReadWriter` runs
unchanged on the live client, the tracking client and the fake, and mypy checks both the
helper and every implementation.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, TypeVar, runtime_checkable

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject
from setpoint.api.types import Kind, Obj
from setpoint.client.objects import Applied, ObjectList, WatchEvent
from setpoint.client.patch import Patch
from setpoint.client.server_warnings import FieldValidation

if TYPE_CHECKING:
    from setpoint.client.client import Preconditions, PropagationPolicy, Selector

__all__ = [
    "ApiClient",
    "CacheView",
    "CachedClient",
    "IndexReader",
    "ListWatcher",
    "ReadWriter",
    "Reader",
    "StatusWriter",
    "WatchStream",
    "Writer",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class Reader(Protocol):
    """Reads objects: ``get`` one, ``list`` many (by namespace, labels and fields)."""

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object; raise ``NotFound`` if it does not exist."""
        ...

    async def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
    ) -> ObjectList[T]:
        """List matching objects (iterable, with ``items`` and ``resource_version``)."""
        ...


@runtime_checkable
class Writer(Protocol):
    """Writes objects: create, update (optimistic), patch (four kinds), apply, delete."""

    async def create(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Create an object; raise ``AlreadyExists`` if the name is taken."""
        ...

    async def update(
        self,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace an object (or its status); raise ``Conflict`` if its resourceVersion is stale."""
        ...

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
        """Patch an object with a JSON, merge, strategic-merge or apply patch."""
        ...

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
        """Server-side apply an object under ``field_manager``."""
        ...

    async def delete(
        self, kind: Kind[object], name: str, *, namespace: str | None = None
    ) -> JsonObject:
        """Delete an object; raise ``NotFound`` if it does not exist."""
        ...


@runtime_checkable
class StatusWriter(Protocol):
    """Writes the ``status`` subresource only."""

    async def replace_status(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace the status of an object (optimistic on resourceVersion)."""
        ...


@runtime_checkable
class ReadWriter(Reader, Writer, StatusWriter, Protocol):
    """Everything a controller does with the API: read, write, write status, resolve kinds.

    The safe-write helpers (:mod:`setpoint.client.safe`) take one of these.
    """

    async def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """Plural, scope and subresources of a kind."""
        ...


@runtime_checkable
class IndexReader(Reader, Protocol):
    """A :class:`Reader` that also lists by a cache index (``Cache.add_index``)."""

    async def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        """List the objects of ``kind`` whose index ``index`` includes ``value``."""
        ...


class WatchStream(Protocol[T_co]):
    """One watch: an async context manager and an async iterator of watch events."""

    async def __aenter__(self) -> Self:
        """Open the watch (``async with``)."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the watch and release its connection."""
        ...

    def __aiter__(self) -> Self:
        """Iterate the events."""
        ...

    async def __anext__(self) -> WatchEvent[T_co]:
        """The next event; ``Gone`` when the start version is too old."""
        ...


@runtime_checkable
class ListWatcher(Reader, Protocol):
    """What an informer needs: list, watch, and how the server serves a kind."""

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
        """Watch changes of ``kind`` after ``resource_version``.

        ``send_initial_events``: start with the current state as ``ADDED`` events and a
        bookmark marking its end (a streamed list, the WatchList feature).
        """
        ...

    async def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """Plural, scope and subresources of a kind."""
        ...


@runtime_checkable
class ApiClient(ReadWriter, ListWatcher, Protocol):
    """Everything the runtime asks of the API server.

    Read, write, write status, list and watch, subresources, and the client's default
    namespace. :class:`~setpoint.client.client.Client`,
    :class:`~setpoint.cache.consistency.TrackingClient` and
    :class:`~setpoint.testing.FakeClient` satisfy it.
    """

    @property
    def default_namespace(self) -> str:
        """The namespace calls use when none is given (the kubeconfig context's)."""
        ...

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
        """Delete an object; raise ``NotFound`` if it does not exist."""
        ...

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
        """PUT a subresource (``scale``, ``status``)."""
        ...

    async def set_scale(
        self, kind: Kind[object], name: str, replicas: int, *, namespace: str | None = None
    ) -> JsonObject:
        """Set ``spec.replicas`` through the ``scale`` subresource."""
        ...

    async def close(self) -> None:
        """Release connections (a wrapper that does not own them does nothing)."""
        ...


@runtime_checkable
class CacheView(Protocol):
    """Answers from memory what the server holds, when it can (the cache's ``peek``)."""

    def peek(self, kind: GroupVersionKind, key: ObjectKey) -> JsonObject | None:
        """The stored object, or ``None`` when absent or not known (not watched, not synced).

        Never waits and never asks the server. The object is the caller's own (decoded for
        this call), so it may be changed or handed on.
        """
        ...

    def known_absent(self, kind: GroupVersionKind, obj: JsonObject) -> bool:
        """Whether the cache knows that no object with ``obj``'s key exists.

        True only when the informer of ``kind`` has synced, ``obj`` is within its scope
        (namespace, label and field selectors: an object outside it would never be
        cached), it holds nothing under that key, and no write of this process to the key
        is still waiting to be seen. Anything else is "not known": ask the server.
        """
        ...

    async def wait_for_own_write(
        self, kind: GroupVersionKind, key: ObjectKey, timeout: float
    ) -> bool:
        """Wait (at most ``timeout`` seconds) for this process's pending write of ``key``.

        True when such a write was on its way and the cache now reflects it, so
        :meth:`peek` and :meth:`known_absent` answer with it. False at once when nothing
        is on its way or the cache cannot tell (not watched, not synced), and False when
        the write's event did not arrive in time. Never asks the server.
        """
        ...


@runtime_checkable
class CachedClient(Protocol):
    """An optional capability: a client carrying the cache its writes are read back from.

    :class:`~setpoint.cache.consistency.TrackingClient` (``ctx.client`` in a controller)
    has it. Helpers check for it with ``isinstance(client, CachedClient)`` and fall back to
    the API server when a client lacks it (the live client, the fake).
    """

    @property
    def cache(self) -> CacheView:
        """The cache that holds what this client wrote."""
        ...

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
        """Server-side apply ``obj`` and say whether the server created it (``201``)."""
        ...
