"""Reporting a controller's own problems on the object: one status condition, best effort.

Finalizer cleanups (``<finalizer>.CleanupFailed``) and terminal errors (``Stalled``) tell
``kubectl describe`` readers what went wrong through a condition in the object's status.
:class:`ConditionReporter` is the one place that writes such conditions:

- only for kinds with a status subresource (looked up once, from discovery);
- through :func:`~setpoint.client.safe.update_status`, so nothing else in the status is
  touched and a concurrent writer costs a retry, never a lost write;
- never raising: a report that cannot be written is logged as a warning (the failure it
  reports is already logged and counted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from setpoint.api.conditions import ConditionError, remove_condition, set_condition
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject, generation_of
from setpoint.client._safebase import OperationResult
from setpoint.client._status import update_status
from setpoint.client.errors import ClientError, NotFound
from setpoint.client.protocols import ApiClient
from setpoint.observability.logging import Logger

__all__ = ["ConditionReporter"]


class ConditionReporter:
    """Sets and removes a controller's conditions on objects of one kind (see module doc)."""

    def __init__(self, kind: GroupVersionKind) -> None:
        self.kind = kind
        """The kind whose objects get the conditions."""
        self._has_status: bool | None = None

    async def has_status(self, client: ApiClient, log: Logger) -> bool:
        """Whether the kind has a status subresource (asked once; ``False`` if unknown)."""
        if self._has_status is None:
            try:
                info = await client.resource_info(self.kind)
            except ClientError as exc:
                log.warning("Could not look up the kind's subresources", error=str(exc))
                return False
            self._has_status = "status" in info.subresources
        return self._has_status

    async def set(  # noqa: PLR0917 - mirrors set_condition's arguments
        self,
        client: ApiClient,
        obj: Mapping[str, Any],
        type: str,
        reason: str,
        message: str,
        log: Logger,
    ) -> None:
        """Set condition ``type`` to ``True`` with ``reason`` and ``message`` on ``obj``."""

        def mutate(current: JsonObject) -> None:
            status = current.get("status")
            if not isinstance(status, dict):
                status = current["status"] = {}
            set_condition(
                status,
                type,
                True,
                reason,
                message,
                observed_generation=generation_of(current) or None,
            )

        await self._write(client, obj, mutate, log, f"Could not set the {type} condition")

    async def remove(
        self, client: ApiClient, obj: Mapping[str, Any], type: str, log: Logger
    ) -> None:
        """Remove condition ``type`` from ``obj``'s status (no request if it is absent)."""

        def mutate(current: JsonObject) -> None:
            status = current.get("status")
            if isinstance(status, dict):
                remove_condition(status, type)

        await self._write(client, obj, mutate, log, f"Could not remove the {type} condition")

    async def update(
        self,
        client: ApiClient,
        obj: Mapping[str, Any],
        mutate: Callable[[JsonObject], None],
        log: Logger,
        problem: str,
    ) -> JsonObject | None:
        """Change ``obj``'s status with ``mutate``; return the written object, if one was.

        ``None`` when nothing changed (no request), the kind has no status subresource, the
        object is gone, or the write failed (logged as a warning with ``problem``).
        """
        return await self._write(client, obj, mutate, log, problem)

    async def _write(
        self, client: ApiClient, obj: Mapping[str, Any], mutate: Any, log: Logger, problem: str
    ) -> JsonObject | None:
        if not await self.has_status(client, log):
            return None
        try:
            result = await update_status(client, dict(obj), mutate)
        except NotFound:
            return None
        except (ClientError, ConditionError, ValueError) as exc:
            log.warning(problem, error=str(exc))
            return None
        if result.outcome is not OperationResult.UPDATED:
            return None
        written: JsonObject = result.object
        return written
