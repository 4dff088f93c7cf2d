"""Event sources of a controller and the handler that turns their events into queue keys.

A controller watches kinds through the shared cache's informers. Each *source* says which
kind, which predicates filter its events, and how an object maps to the keys to reconcile:

- ``for_(Kind)``: the object's own key.
- ``owns(Kind)``: the key of the object's *controlling owner* (the ownerReference with
  ``controller: true`` whose apiVersion group and kind match the ``for_`` kind).
- ``watches(Kind, mapper)``: whatever keys ``mapper(obj)`` returns (sync or async).

For updates, ``owns`` and ``watches`` map both the old and the new object, so a change of
owner (or of whatever the mapper reads) reconciles both the previous and the current target.
Keys from an informer's initial list, and from periodic resyncs (an update whose
resourceVersion did not change), are queued at :attr:`Priority.LOW
<setpoint.controller.workqueue.Priority.LOW>`, so a restart restating 10,000 objects does
not delay a live change.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from setpoint.api.gvk import GroupVersionKind, split_api_version
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, key_of, metadata_of, resource_version_of
from setpoint.api.metadata import Metadata
from setpoint.api.types import Kind, TypedObject
from setpoint.controller.pause import pause_changed
from setpoint.controller.predicates import (
    AddEvent,
    DeleteEvent,
    InformerEvent,
    Predicate,
    UpdateEvent,
)
from setpoint.controller.workqueue import Priority
from setpoint.observability.logging import Logger
from setpoint.observability.tracing import active_tracing

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from setpoint.client.protocols import IndexReader
    from setpoint.observability.tracing import Tracing

__all__ = [
    "EnqueueHandler",
    "KeyMapper",
    "Source",
    "SourceRole",
    "check_keys",
    "controller_owner_key",
    "mapper_takes_reader",
]

MappedKeys: TypeAlias = "Iterable[ObjectKey] | Awaitable[Iterable[ObjectKey]]"
"""What a mapper returns: the keys, or an awaitable of them."""

KeyMapper: TypeAlias = Callable[[Any], MappedKeys] | Callable[[Any, "IndexReader"], MappedKeys]
"""Maps a watched object to the keys to reconcile; may be a plain or an async function.

It receives the object as a typed instance when the source's kind is a typed class, else
its JSON form. A mapper with a second parameter also receives the controller's cached
reader (``ctx.reader``'s kind: reads with read-after-write, indexes), to look up which
objects the event concerns: ``def mapper(namespace, reader)``."""


def mapper_takes_reader(mapper: Callable[..., Any]) -> bool:
    """Whether ``mapper`` has a second positional parameter (for the reader)."""
    try:
        parameters = list(inspect.signature(mapper).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


SourceRole = Literal["for", "owns", "watches"]
"""How a source maps objects to keys (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One watched kind of a controller."""

    kind: GroupVersionKind
    """The kind watched."""
    role: SourceRole
    """How objects map to keys."""
    predicates: tuple[Predicate, ...] = ()
    """Predicates its events must pass (besides the controller's global ones)."""
    mapper: KeyMapper | None = None
    """For ``watches``: the mapping function."""
    typed: type[TypedObject] | None = None
    """The typed class given for the kind, if any (the mapper receives instances of it)."""
    metadata_only: bool = False
    """Watch the kind's ``PartialObjectMetadata`` only (:mod:`setpoint.api.metadata`)."""

    @property
    def watched(self) -> Kind[JsonObject]:
        """The kind whose informer the source watches: ``kind``, or ``Metadata(kind)``."""
        return Metadata(self.kind) if self.metadata_only else self.kind


def controller_owner_key(
    obj: JsonObject, owner_kind: GroupVersionKind, *, owner_namespaced: bool
) -> ObjectKey | None:
    """The key of ``obj``'s controlling owner of kind ``owner_kind`` (any version), or ``None``.

    Only the ownerReference with ``controller: true`` counts, and its apiVersion's group and
    its kind must match ``owner_kind``: another controller's children are not ours. A
    namespaced owner lives in the object's namespace (owner references cannot cross
    namespaces); a cluster-scoped owner's key has no namespace.
    """
    for ref in metadata_of(obj).get("ownerReferences") or ():
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        try:
            group, _ = split_api_version(str(ref.get("apiVersion") or ""))
        except ValueError:
            continue
        name = ref.get("name")
        if group == owner_kind.group and ref.get("kind") == owner_kind.kind and name:
            namespace = str(metadata_of(obj).get("namespace") or "") if owner_namespaced else ""
            return ObjectKey(namespace, str(name))
    return None


class EnqueueHandler:
    """Turns one source's informer notifications into work-queue adds.

    Implements :class:`~setpoint.cache.informer.ResourceEventHandler`; every method returns
    at once. An async mapper's result is awaited in a task the controller owns.
    """

    __slots__ = ("_add", "_controller", "_link", "_log", "_map", "_predicates", "_source", "_spawn")

    def __init__(
        self,
        source: Source,
        predicates: tuple[Predicate, ...],
        *,
        map_keys: Callable[[JsonObject], Iterable[ObjectKey] | Awaitable[Iterable[ObjectKey]]],
        add: Callable[[ObjectKey, int], None],
        spawn: Callable[[Awaitable[Iterable[ObjectKey]], int], None],
        log: Logger,
        controller: str = "",
        link: Callable[[ObjectKey, SpanContext], None] | None = None,
    ) -> None:
        self._source = source
        self._controller = controller
        self._link = link
        self._predicates = (*source.predicates, *predicates)
        self._map = map_keys
        self._add = add
        self._spawn = spawn
        self._log = log

    def on_add(self, obj: JsonObject, *, is_initial_list: bool) -> None:
        """Enqueue for an added object (low priority when from the initial list)."""
        tracing = active_tracing() if self._link is not None else None
        event = AddEvent(obj, is_initial_list) if self._predicates or tracing else None
        self._handle(event, (obj,), Priority.LOW if is_initial_list else Priority.NORMAL, tracing)

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        """Enqueue for an update (low priority when it is a resync: same resourceVersion)."""
        resync = resource_version_of(old) == resource_version_of(new)
        objects = (new,) if self._source.role == "for" else (old, new)
        tracing = active_tracing() if self._link is not None else None
        event = UpdateEvent(old, new) if self._predicates or tracing else None
        self._handle(event, objects, Priority.LOW if resync else Priority.NORMAL, tracing)

    def on_delete(self, obj: JsonObject, *, final_state_unknown: bool) -> None:
        """Enqueue for a deleted object."""
        tracing = active_tracing() if self._link is not None else None
        event = DeleteEvent(obj, final_state_unknown) if self._predicates or tracing else None
        self._handle(event, (obj,), Priority.NORMAL, tracing)

    def _pause_changed(self, event: InformerEvent) -> bool:
        """Whether ``event`` pauses or resumes its ``for_`` object: it passes every predicate.

        A controller filtering on ``GenerationChanged`` would otherwise never see the
        annotation come or go (see :mod:`setpoint.controller.pause`).
        """
        return (
            self._source.role == "for"
            and isinstance(event, UpdateEvent)
            and pause_changed(event.old, event.new)
        )

    def _handle(
        self,
        event: InformerEvent | None,
        objects: tuple[JsonObject, ...],
        priority: int,
        tracing: Tracing | None,
    ) -> None:
        # ``event`` is built only when predicates or tracing need it (None otherwise): this
        # runs for every event of every watched object.
        if event is not None:
            for predicate in self._predicates:
                try:
                    if not predicate(event) and not self._pause_changed(event):
                        return
                except Exception:
                    self._log.exception(
                        "Predicate failed; the event is dropped",
                        predicate=repr(predicate),
                        object=str(key_of(event.object)),
                    )
                    return
        seen: set[ObjectKey] | None = None  # not needed for one object mapped to one key
        traced: SpanContext | None = None
        for obj in objects:
            try:
                keys = self._map(obj)
            except Exception:
                self._log.exception(
                    "Mapping an event to reconcile requests failed; the event is dropped",
                    object=str(key_of(obj)),
                    kind=self._source.kind.kind,
                )
                continue
            if type(keys) is not tuple:
                if inspect.isawaitable(keys):
                    self._spawn(keys, priority)
                    continue
                seen = set() if seen is None else seen
            elif seen is None and (len(objects) > 1 or len(keys) > 1):
                seen = set()
            for key in keys:
                if seen is not None:
                    if key in seen:
                        continue
                    seen.add(key)
                self._add(key, priority)
                if tracing is not None and self._link is not None and event is not None:
                    if traced is None:
                        traced = self._trace(tracing, event)
                    self._link(key, traced)

    def _trace(self, tracing: Tracing, event: InformerEvent) -> SpanContext:
        """Record the event as a span (tracing on only); its context links to the reconcile."""
        obj = event.object
        data = metadata_of(obj)
        return tracing.watch_event(
            controller=self._controller,
            event=_EVENT_NAMES.get(type(event), type(event).__name__),
            kind=self._source.kind.kind,
            namespace=str(data.get("namespace") or ""),
            name=str(data.get("name") or ""),
            resource_version=resource_version_of(obj) or "",
        )


_EVENT_NAMES: dict[type, str] = {AddEvent: "add", UpdateEvent: "update", DeleteEvent: "delete"}


def check_keys(keys: Any, where: str) -> list[ObjectKey]:
    """Validate what a mapper returned: an iterable of :class:`ObjectKey`."""
    if keys is None:
        return []
    if isinstance(keys, ObjectKey):
        return [keys]
    out = []
    for key in keys:
        if not isinstance(key, ObjectKey):
            raise TypeError(
                f"{where} returned {key!r}; a mapper must return ObjectKey objects "
                "(ObjectKey(namespace, name))"
            )
        out.append(key)
    return out
