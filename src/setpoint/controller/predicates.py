"""Events and predicates: which informer notifications may enqueue a reconcile.

A predicate is any callable taking an :data:`InformerEvent` and returning ``True`` to let it
through. Events carry objects in their JSON form (as the cache stores them; do not mutate
them), whatever kind class the controller was built with::

    def only_labelled(event: InformerEvent) -> bool:
        return "team" in labels_of(event.object)

    Builder("tenant").for_(Tenant, predicates=[GenerationChanged()]).with_event_filter(
        only_labelled
    )

Per-source predicates (given to ``for_``, ``owns`` or ``watches``) and global ones
(``with_event_filter``) must all pass. Add and delete events pass the "changed" predicates:
there is nothing to compare them with. Predicates run on the event loop for every event;
keep them fast and free of I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from setpoint.api.meta import (
    JsonObject,
    annotations_of,
    generation_of,
    labels_of,
    resource_version_of,
)
from setpoint.cache.selectors import LabelMatcher

__all__ = [
    "AddEvent",
    "AnnotationsChanged",
    "DeleteEvent",
    "GenerationChanged",
    "InformerEvent",
    "LabelSelectorPredicate",
    "LabelsChanged",
    "Predicate",
    "ResourceVersionChanged",
    "UpdateEvent",
    "all_of",
    "any_of",
    "not_",
]


@dataclass(frozen=True, slots=True)
class AddEvent:
    """An object appeared (from an informer's initial list, or created later)."""

    object: JsonObject
    """The object."""
    is_initial_list: bool = False
    """Whether it came from the informer's initial list (a restart restating what exists)."""


@dataclass(frozen=True, slots=True)
class UpdateEvent:
    """An object changed from :attr:`old` to :attr:`new` (the same object on a resync)."""

    old: JsonObject
    """The previous state."""
    new: JsonObject
    """The new state."""

    @property
    def object(self) -> JsonObject:
        """The new state (so every event has an ``object``)."""
        return self.new


@dataclass(frozen=True, slots=True)
class DeleteEvent:
    """An object was deleted."""

    object: JsonObject
    """Its last known state."""
    final_state_unknown: bool = False
    """Whether the deletion was inferred from a relist (``object`` may then be older than the
    real final state)."""


InformerEvent: TypeAlias = AddEvent | UpdateEvent | DeleteEvent
"""One informer notification: an add, an update or a delete of an object.

Not the Kubernetes Event kind (:data:`setpoint.api.kinds.Event`, what the Event recorder
writes)."""

Predicate: TypeAlias = Callable[[InformerEvent], bool]
"""Decides whether an event may enqueue a reconcile."""


class _Changed:
    """Base of the "something changed" predicates: adds and deletes pass, updates compare."""

    __slots__ = ()

    def __call__(self, event: InformerEvent) -> bool:
        if isinstance(event, UpdateEvent):
            return self.changed(event.old, event.new)
        return True

    def changed(self, old: JsonObject, new: JsonObject) -> bool:
        """Whether the update is interesting."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class GenerationChanged(_Changed):
    """Updates pass only when ``metadata.generation`` changed: spec changes, not status.

    As controller-runtime's ``GenerationChangedPredicate``: for kinds the server does not
    give a generation (ConfigMaps, ...) every update is filtered out, and so are periodic
    resyncs. Combine with :class:`LabelsChanged` or :class:`AnnotationsChanged` via
    :func:`any_of` to also react to metadata.
    """

    __slots__ = ()

    def changed(self, old: JsonObject, new: JsonObject) -> bool:
        """``metadata.generation`` differs."""
        return generation_of(old) != generation_of(new)


class LabelsChanged(_Changed):
    """Updates pass only when ``metadata.labels`` changed."""

    __slots__ = ()

    def changed(self, old: JsonObject, new: JsonObject) -> bool:
        """The label maps differ."""
        return dict(labels_of(old)) != dict(labels_of(new))


class AnnotationsChanged(_Changed):
    """Updates pass only when ``metadata.annotations`` changed."""

    __slots__ = ()

    def changed(self, old: JsonObject, new: JsonObject) -> bool:
        """The annotation maps differ."""
        return dict(annotations_of(old)) != dict(annotations_of(new))


class ResourceVersionChanged(_Changed):
    """Updates pass only when ``metadata.resourceVersion`` changed: drops periodic resyncs."""

    __slots__ = ()

    def changed(self, old: JsonObject, new: JsonObject) -> bool:
        """The resourceVersions differ."""
        return resource_version_of(old) != resource_version_of(new)


class LabelSelectorPredicate:
    """Events pass when the object's labels match a selector (for updates: the new state).

    Accepts the API server's selector syntax or an equality mapping.
    """

    __slots__ = ("_selector",)

    def __init__(self, selector: str | Mapping[str, str]) -> None:
        self._selector = LabelMatcher.parse(selector)

    def __call__(self, event: InformerEvent) -> bool:
        """Whether the event's object matches the selector."""
        return self._selector.matches_object(event.object)

    def __repr__(self) -> str:
        return f"LabelSelectorPredicate({str(self._selector)!r})"


class _Combined:
    __slots__ = ("_mode", "_predicates")

    def __init__(self, mode: str, predicates: tuple[Predicate, ...]) -> None:
        for predicate in predicates:
            if not callable(predicate):
                raise TypeError(
                    f"{predicate!r} is not a predicate: pass a callable taking an event and "
                    "returning a bool"
                )
        self._mode = mode
        self._predicates = predicates

    def __call__(self, event: InformerEvent) -> bool:
        if self._mode == "all":
            return all(p(event) for p in self._predicates)
        if self._mode == "any":
            return any(p(event) for p in self._predicates)
        return not self._predicates[0](event)

    def __repr__(self) -> str:
        inner = ", ".join(repr(p) for p in self._predicates)
        return f"{'not_' if self._mode == 'not' else self._mode + '_of'}({inner})"


def all_of(*predicates: Predicate) -> Predicate:
    """A predicate passing when every one of ``predicates`` passes (all pass when empty)."""
    return _Combined("all", predicates)


def any_of(*predicates: Predicate) -> Predicate:
    """A predicate passing when at least one of ``predicates`` passes."""
    return _Combined("any", predicates)


def not_(predicate: Predicate) -> Predicate:
    """A predicate passing when ``predicate`` does not."""
    return _Combined("not", (predicate,))


def check_predicates(predicates: Any) -> tuple[Predicate, ...]:
    """Validate a collection of predicates given to a builder method."""
    if callable(predicates):
        raise TypeError("predicates= takes a list of predicates; wrap a single one: predicates=[p]")
    checked = tuple(predicates)
    for predicate in checked:
        if not callable(predicate):
            raise TypeError(
                f"{predicate!r} is not a predicate: pass a callable taking an event and "
                "returning a bool (for example GenerationChanged())"
            )
    return checked
