"""The small interfaces the client is composed of.

As in controller-runtime's ``pkg/client/interfaces.go``, code depends on the
narrowest interface it needs: a reconciler that only reads takes a
:class:`Reader`, which the live :class:`~setpoint.client.client.Client`, the
cache's cached reader and the testing fake client all satisfy. Decorators
(fault injection, read-after-write) wrap the same interfaces.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, overload, runtime_checkable

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.api.types import TypedObject
from setpoint.client.patch import Patch

__all__ = ["Reader", "StatusWriter", "Writer"]

T = TypeVar("T", bound=TypedObject)
Selector = str | dict[str, str]


@runtime_checkable
class Reader(Protocol):
    """Reads objects: ``get`` one, ``list`` many (by namespace, labels and fields)."""

    @overload
    async def get(self, kind: type[T], name: str, *, namespace: str | None = None) -> T: ...
    @overload
    async def get(
        self, kind: GroupVersionKind, name: str, *, namespace: str | None = None
    ) -> JsonObject: ...
    async def get(self, kind: Any, name: str, *, namespace: str | None = None) -> Any:
        """Read one object; raise ``NotFound`` if it does not exist."""
        ...

    async def list(
        self,
        kind: Any,
        *,
        namespace: str | None = None,
        labels: Any = None,
        fields: Any = None,
    ) -> Any:
        """List matching objects; returns an ``ObjectList`` (iterable, with ``items``)."""
        ...


@runtime_checkable
class Writer(Protocol):
    """Writes objects: create, update (optimistic), patch (four kinds), apply, delete."""

    async def create(self, obj: Any, *, dry_run: bool = False) -> Any:
        """Create an object; raise ``AlreadyExists`` if the name is taken."""
        ...

    async def update(
        self, obj: Any, *, subresource: str | None = None, dry_run: bool = False
    ) -> Any:
        """Replace an object; raise ``Conflict`` if its resourceVersion is stale."""
        ...

    async def patch(
        self,
        kind: Any,
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Patch an object with a JSON, merge, strategic-merge or apply patch."""
        ...

    async def delete(self, kind: Any, name: str, *, namespace: str | None = None) -> JsonObject:
        """Delete an object; raise ``NotFound`` if it does not exist."""
        ...


@runtime_checkable
class StatusWriter(Protocol):
    """Writes the ``status`` subresource only."""

    async def update_status(self, obj: Any, *, dry_run: bool = False) -> Any:
        """Replace the status of an object (optimistic on resourceVersion)."""
        ...
