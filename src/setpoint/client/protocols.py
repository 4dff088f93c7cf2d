"""The small interfaces the client is composed of.

As in controller-runtime's ``pkg/client/interfaces.go``, code depends on the
narrowest interface it needs: a reconciler that only reads takes a
:class:`Reader`, which the live :class:`~setpoint.client.client.Client`, the
cache and its read-after-write reader, and the testing fake client all
satisfy. Decorators (the tracking client, fault injection) wrap the same
interfaces. mypy checks each implementation against them.

Signatures here are exactly the client's (minus its typed overloads, which
implementations add), so a helper typed against :class:`ReadWriter` runs
unchanged on the live client, the tracking client and the fake.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject
from setpoint.client.patch import Patch

__all__ = ["ReadWriter", "Reader", "StatusWriter", "Writer"]


@runtime_checkable
class Reader(Protocol):
    """Reads objects: ``get`` one, ``list`` many (by namespace, labels and fields)."""

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

    async def create(
        self, obj: Any, *, dry_run: bool = False, field_manager: str | None = None
    ) -> Any:
        """Create an object; raise ``AlreadyExists`` if the name is taken."""
        ...

    async def update(
        self,
        obj: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> Any:
        """Replace an object (or its status); raise ``Conflict`` if its resourceVersion is stale."""
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
        field_manager: str | None = None,
    ) -> Any:
        """Patch an object with a JSON, merge, strategic-merge or apply patch."""
        ...

    async def apply(
        self,
        obj: Any,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Server-side apply an object under ``field_manager``."""
        ...

    async def delete(self, kind: Any, name: str, *, namespace: str | None = None) -> JsonObject:
        """Delete an object; raise ``NotFound`` if it does not exist."""
        ...


@runtime_checkable
class StatusWriter(Protocol):
    """Writes the ``status`` subresource only."""

    async def update_status(
        self, obj: Any, *, dry_run: bool = False, field_manager: str | None = None
    ) -> Any:
        """Replace the status of an object (optimistic on resourceVersion)."""
        ...


@runtime_checkable
class ReadWriter(Reader, Writer, StatusWriter, Protocol):
    """Everything a controller does with the API: read, write, write status, resolve kinds.

    The safe-write helpers (:mod:`setpoint.client.safe`) take one of these.
    """

    async def resource_info(self, kind: Any) -> ResourceInfo:
        """Plural, scope and subresources of a kind."""
        ...
