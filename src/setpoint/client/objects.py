"""What requests answer with: a list page and a watch event.

Plain data, shared by the client, the protocols it is described by, the cache and the
testing fake; it imports nothing else of the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from setpoint.api.types import TypedObject

__all__ = ["EventType", "ObjectList", "WatchEvent"]

T = TypeVar("T", bound=TypedObject)

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
"""The ``type`` of a watch event."""


@dataclass(slots=True)
class ObjectList(Generic[T]):
    """One list response: items plus the list's resourceVersion (and continue token for a page)."""

    items: list[Any]
    resource_version: str
    continue_token: str | None = None
    remaining_item_count: int | None = None

    def __iter__(self) -> Any:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True, slots=True)
class WatchEvent(Generic[T]):
    """One watch event. For ``BOOKMARK`` the object carries only ``metadata.resourceVersion``."""

    type: EventType
    object: Any
    resource_version: str
