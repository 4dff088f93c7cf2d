"""The in-memory store behind one informer: objects by key, plus secondary indexes.

Objects are kept encoded, as compact JSON bytes (after the informer's transform), keyed by
:class:`~setpoint.api.keys.ObjectKey`, and decoded on every read: a decoded object is a tree
of small dicts that takes about three times the memory of its JSON (a cached Widget
without managedFields: 1,414 bytes as dicts, 499 as bytes), and a reader needs a copy it may
change anyway, which decoding gives for less than a deep copy costs (decision 0013). An
object that cannot be encoded as JSON (a transform put a ``datetime`` in it) is kept as
given. Indexes are computed from the object when it is stored. Indexes map an index *value*
(a string an index function computes from an object) to the keys of the objects that
produce it, as client-go's ``cache.Indexer`` does; every write keeps them current, so a
lookup is a dict access. A namespace index is always maintained, because listing one
namespace is the most common query.

The store belongs to one event loop and is not locked: the informer mutates it between
awaits. Every read decodes a new object, so readers own what they get.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from setpoint.api.gvk import GroupVersionKind, split_api_version
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, labels_of, metadata_of
from setpoint.cache.selectors import field_value

__all__ = [
    "IndexFunc",
    "ReadMark",
    "Store",
    "by_controller",
    "by_field",
    "by_label",
    "by_owner_uid",
    "changes_applied",
    "mark_read",
    "marking_reads",
    "parse_resource_version",
]

log = logging.getLogger("setpoint.cache")

IndexFunc = Callable[[JsonObject], "Iterable[str] | str | None"]
"""Computes an object's values for one index: a string, several, or ``None`` for none.

It receives the stored JSON form (after the transform) and must not mutate it."""


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


_CHANGES = _Count()
"""How many store changes (puts and deletes, in every store of the process) were applied."""


def changes_applied() -> int:
    """The number of changes applied to any store of this process so far.

    Every :meth:`Store.put` and every :meth:`Store.delete` that removed something counts one.
    The count only grows, and the stores belong to one event loop, so a reader that sees the
    count at ``n`` sees every change numbered ``n`` or lower in every store. A controller
    stamps each key an event queues with the count (the event's change was applied just
    before its handlers ran), and compares it with :class:`ReadMark` (see there).
    """
    return _CHANGES.value


class ReadMark:
    """When a block of code first read a cache: the :func:`changes_applied` count then.

    Set up with :func:`marking_reads`; the cache's read methods call :func:`mark_read`.
    A controller marks each reconcile's reads: a change applied no later than the first
    read is reflected in everything the reconcile read, so a key queued again by such a
    change while the reconcile ran needs no second reconcile (decision 0015).
    """

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first: int | None = None
        """The count at the first read, or ``None`` while nothing was read."""


_READS: contextvars.ContextVar[ReadMark | None] = contextvars.ContextVar(
    "setpoint_cache_reads", default=None
)


class marking_reads:  # used as a function: ``with marking_reads() as mark:``
    """Record in a new :class:`ReadMark` when the block (and tasks it starts) first reads.

    A class rather than a generator context manager: the controller enters one per
    reconcile, and a generator's set-up costs more than the context variable it sets.
    """

    __slots__ = ("_mark", "_token")

    def __init__(self) -> None:
        self._mark = ReadMark()
        self._token: contextvars.Token[ReadMark | None] | None = None

    def __enter__(self) -> ReadMark:
        self._token = _READS.set(self._mark)
        return self._mark

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _READS.reset(self._token)


def mark_read() -> None:
    """Note a cache read in the current :class:`ReadMark`, if any (first read only).

    Call it right before reading a store, with no ``await`` between the two.
    """
    mark = _READS.get()
    if mark is not None and mark.first is None:
        mark.first = _CHANGES.value


def parse_resource_version(rv: str) -> int | None:
    """``int(rv)`` when ``rv`` is a decimal integer, else ``None``.

    resourceVersions are opaque by the API's contract. In practice kube-apiserver (backed by
    etcd) uses the etcd revision, a global counter, so two versions of any objects of one
    resource compare as integers. setpoint relies on that only for the read-after-write wait,
    and only when both sides parse; otherwise it falls back to equality (see decision 0004).
    """
    if rv.isdigit():
        return int(rv)
    return None


class Store:
    """Objects by key, a namespace index and named secondary indexes."""

    __slots__ = ("_by_namespace", "_index_values", "_indexers", "_indices", "_items")

    def __init__(self) -> None:
        # Compact JSON bytes; a dict only for an object JSON cannot encode (kept as given).
        self._items: dict[ObjectKey, bytes | JsonObject] = {}
        self._by_namespace: dict[str, set[ObjectKey]] = {}
        self._indexers: dict[str, IndexFunc] = {}
        # index name -> index value -> keys
        self._indices: dict[str, dict[str, set[ObjectKey]]] = {}
        # index name -> key -> the values it was indexed under (to unindex on change)
        self._index_values: dict[str, dict[ObjectKey, tuple[str, ...]]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[ObjectKey]:
        return iter(self._items)

    def get(self, key: ObjectKey) -> JsonObject | None:
        """The object stored for ``key``, decoded (a new object the caller owns), or ``None``."""
        stored = self._items.get(key)
        if stored is None:
            return None
        return _decoded(stored)

    def snapshot(self, key: ObjectKey) -> bytes | JsonObject | None:
        """What is stored for ``key`` as it is now (its JSON bytes), or ``None``; no decoding.

        Bytes are immutable, so keeping a snapshot costs nothing; :meth:`decode` turns it
        into the object when (if ever) it is needed. An object JSON cannot encode is
        returned as stored: do not mutate it.
        """
        return self._items.get(key)

    @staticmethod
    def decode(snapshot: bytes | JsonObject) -> JsonObject:
        """The object of a :meth:`snapshot` (a new object, unless it was stored unencoded)."""
        return _decoded(snapshot)

    def keys(self) -> Iterable[ObjectKey]:
        """Every key (a live view; copy it before mutating the store)."""
        return self._items.keys()

    def values(self) -> Iterator[JsonObject]:
        """Every object, decoded as it is reached (do not mutate the store meanwhile)."""
        return (_decoded(stored) for stored in self._items.values())

    def items(self) -> Iterator[tuple[ObjectKey, JsonObject]]:
        """Every key and object, decoded as it is reached."""
        return ((key, _decoded(stored)) for key, stored in self._items.items())

    def keys_in_namespace(self, namespace: str) -> set[ObjectKey]:
        """Keys of the objects in ``namespace`` (``""``: cluster-scoped objects); a copy."""
        return set(self._by_namespace.get(namespace, ()))

    def put(self, key: ObjectKey, obj: JsonObject) -> None:
        """Store ``obj`` under ``key`` and update every index.

        ``obj`` is encoded: later changes to it do not reach the store. Nothing is
        returned (decoding the previous object would cost every event); read it first
        when it is needed.
        """
        try:
            # orjson returns its bytes in a buffer of at least 4 KiB; the copy is exact-size.
            encoded: bytes | JsonObject = bytes(memoryview(orjson.dumps(obj)))
        except TypeError:
            encoded = obj  # not plain JSON (a transform's doing): kept as given
        _CHANGES.value += 1
        old = self._items.get(key)
        self._items[key] = encoded
        if old is None:
            self._by_namespace.setdefault(key.namespace, set()).add(key)
        for name in self._indexers:
            self._reindex(name, key, obj)

    def delete(self, key: ObjectKey) -> JsonObject | None:
        """Remove ``key`` and return the object it held, decoded (``None`` if there was none)."""
        stored = self._items.pop(key, None)
        if stored is None:
            return None
        _CHANGES.value += 1
        keys = self._by_namespace.get(key.namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_namespace[key.namespace]
        for name in self._indexers:
            self._reindex(name, key, None)
        return _decoded(stored)

    def clear(self) -> None:
        """Drop every object and every index (definitions too): the store holds nothing after.

        For an informer removed from its cache (:meth:`~setpoint.cache.Cache.remove_informer`):
        whatever still refers to the store no longer keeps its objects alive.
        """
        if self._items:
            _CHANGES.value += 1
        self._items = {}
        self._by_namespace = {}
        self._indexers = {}
        self._indices = {}
        self._index_values = {}

    # -- indexes ---------------------------------------------------------------------

    def has_index(self, name: str) -> bool:
        """Whether an index called ``name`` exists."""
        return name in self._indexers

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Add an index and build it over the objects already stored.

        Raises:
            ValueError: an index with this name exists (two functions cannot share a name).

        """
        if name in self._indexers:
            raise ValueError(
                f"an index named {name!r} already exists on this store; give the new one "
                "another name"
            )
        self._indexers[name] = fn
        self._indices[name] = {}
        self._index_values[name] = {}
        for key, stored in self._items.items():
            self._reindex(name, key, _decoded(stored))

    def keys_by_index(self, name: str, value: str) -> set[ObjectKey]:
        """Keys of the objects whose ``name`` index includes ``value``; a copy.

        Raises:
            KeyError: there is no index called ``name``.

        """
        index = self._indices.get(name)
        if index is None:
            raise KeyError(name)
        return set(index.get(value, ()))

    def _reindex(self, name: str, key: ObjectKey, obj: JsonObject | None) -> None:
        index = self._indices[name]
        previous = self._index_values[name].pop(key, ())
        for value in previous:
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]
        if obj is None:
            return
        values = _index_values(name, self._indexers[name], obj)
        if values:
            self._index_values[name][key] = values
            for value in values:
                index.setdefault(value, set()).add(key)


def _decoded(stored: bytes | JsonObject) -> JsonObject:
    if type(stored) is bytes:
        decoded: JsonObject = orjson.loads(stored)
        return decoded
    return stored  # type: ignore[return-value]


def _index_values(name: str, fn: IndexFunc, obj: JsonObject) -> tuple[str, ...]:
    try:
        result = fn(obj)
    except Exception:
        # One bad object must not break the informer; it is just not indexed.
        log.exception("index function %r failed for an object; it is left out of the index", name)
        return ()
    if result is None:
        return ()
    if isinstance(result, str):
        return (result,)
    return tuple(dict.fromkeys(str(v) for v in result))


# -- standard index functions ---------------------------------------------------------------


def by_owner_uid(obj: JsonObject) -> list[str]:
    """Index by the UID of every owner (``metadata.ownerReferences[].uid``).

    Look up an owner's dependents with ``list_by_index(kind, "owner", uid_of(owner))``.
    """
    refs = metadata_of(obj).get("ownerReferences") or []
    return [str(ref.get("uid")) for ref in refs if isinstance(ref, dict) and ref.get("uid")]


def by_controller(owner_kind: GroupVersionKind) -> IndexFunc:
    """Index by the controlling owner of kind ``owner_kind`` (group and kind; any version).

    The value is the owner's key as ``"namespace/name"`` (an owner shares its dependent's
    namespace, or is cluster-scoped: then it is just ``"name"``), the form ``str(ObjectKey)``
    gives; an object without such a controller is not indexed.
    """

    def index(obj: JsonObject) -> str | None:
        for ref in metadata_of(obj).get("ownerReferences") or []:
            if not isinstance(ref, dict) or not ref.get("controller"):
                continue
            try:
                group, _ = split_api_version(str(ref.get("apiVersion") or ""))
            except ValueError:
                continue
            if group == owner_kind.group and ref.get("kind") == owner_kind.kind:
                namespace = str(metadata_of(obj).get("namespace") or "")
                return str(ObjectKey(namespace, str(ref.get("name") or "")))
        return None

    return index


def by_field(path: str) -> IndexFunc:
    """Index by the value at a dotted ``path`` (``spec.nodeName``), as field selectors read it.

    Register it as ``"field:" + path`` and ``list(fields={path: value})`` uses the index.
    """

    def index(obj: JsonObject) -> str:
        return field_value(obj, path)

    return index


def by_label(key: str) -> IndexFunc:
    """Index by the value of label ``key`` (objects without the label are not indexed)."""

    def index(obj: JsonObject) -> str | None:
        value: Any = labels_of(obj).get(key)
        return str(value) if value is not None else None

    return index
