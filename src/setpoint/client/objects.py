"""What requests answer with: a list page, a watch event, what an apply did.

Plain data, shared by the client, the protocols it is described by, the cache and the
testing fake; it imports nothing else of the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, TypeVar

__all__ = ["Applied", "ObjectList", "WatchEvent", "WatchEventType"]

T = TypeVar("T")
E_co = TypeVar("E_co", covariant=True)
A = TypeVar("A")

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
"""The ``type`` of a watch event (an Event object's ``type`` is
:data:`setpoint.observability.events.EventType`)."""


@dataclass(slots=True)
class ObjectList(Generic[T]):
    """One list response: items plus the list's resourceVersion (and continue token for a page).

    ``T`` is what the kind listed gives: a ``JsonObject`` for a GVK, instances for a typed
    class (see :class:`setpoint.api.types.Kind`).
    """

    items: list[T]
    resource_version: str
    continue_token: str | None = None
    remaining_item_count: int | None = None

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True, slots=True)
class WatchEvent(Generic[E_co]):
    """One watch event. For ``BOOKMARK`` the object carries only ``metadata.resourceVersion``.

    ``T`` is what the kind watched gives (as for :class:`ObjectList`), but ``object`` stays
    untyped: a ``BOOKMARK`` carries a JSON dict whatever the kind.
    """

    type: WatchEventType
    object: Any
    resource_version: str


class Applied(NamedTuple, Generic[A]):
    """What a server-side apply did: the object as stored, and whether the apply created it.

    Unpacks as a pair: ``obj, created = await client.apply_outcome(desired, ...)``.
    """

    object: A
    """The object as the server stored it (typed when the applied object was typed)."""
    created: bool
    """The server answered ``201 Created``: no object of that name existed before this
    apply. ``False`` (``200 OK``) means one existed, whether or not the apply changed it."""
