"""The protocol every typed object class satisfies.

The client, the cache and the fake client accept either a
:class:`~setpoint.api.gvk.GroupVersionKind` (and then return plain JSON
objects) or a class satisfying :class:`TypedObject` (and then return instances
of it). :class:`setpoint.api.resource.Resource` is the standard implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from setpoint.api.gvk import GroupVersionKind

__all__ = ["TypedObject"]


@runtime_checkable
class TypedObject(Protocol):
    """A typed API object that converts losslessly to and from its JSON form."""

    gvk: ClassVar[GroupVersionKind]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Parse the JSON form sent by the API server. Unknown fields must survive."""
        ...

    def to_object(self) -> dict[str, Any]:
        """Serialize to the JSON form, with ``apiVersion``, ``kind`` and ``metadata``."""
        ...
