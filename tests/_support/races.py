"""Two writers that each add their name to a Gizmo's ``status.entries``: the lost-update race.

- :func:`plain_writer` reads the Gizmo and writes its status back with a plain update and no
  retry: when both read before either writes, the second write meets a Conflict (custom
  resources allow no unconditional update) and that writer's name is lost.
- :func:`safe_writer` uses ``update_status``: conditional on the resourceVersion it read, and
  re-applied on a fresh read after a Conflict, so both names always survive.

``between`` runs after the read and before the write (the integration test uses a barrier
there to make the race happen on the real server; replay and the explorer pass none).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject
from setpoint.client.safe import RetryOptions, update_status
from setpoint.testing import FakeClient
from setpoint.testing.interleavings import WriterFunc
from tests._support.kinds import GIZMO

NAME = "race"


def plain_writer(
    name: str, namespace: str, between: Callable[[], Awaitable[object]] | None = None
) -> WriterFunc:
    """GET the Gizmo, add ``name`` to ``status.entries``, PUT the status; no retry."""

    async def write(client: Any) -> None:
        obj = await client.get(GIZMO, NAME, namespace=namespace)
        status = obj.setdefault("status", {})
        status["entries"] = [*(status.get("entries") or []), name]
        if between is not None:
            await between()
        await client.replace_status(obj)

    return write


def safe_writer(name: str, namespace: str) -> WriterFunc:
    """Add ``name`` to ``status.entries`` with ``update_status`` (conditional, retried)."""

    def add(obj: JsonObject) -> None:
        entries = obj.setdefault("status", {}).setdefault("entries", [])
        if name not in entries:
            entries.append(name)

    async def write(client: Any) -> None:
        await update_status(
            client,
            (GIZMO, ObjectKey(namespace, NAME)),
            add,
            retry=RetryOptions(initial_delay=0.001, max_delay=0.002),
        )

    return write


def seeded_kinds(fake: FakeClient) -> None:
    """Serve Gizmos (with the status subresource) on ``fake``."""
    fake.register(ResourceInfo(GIZMO, "gizmos", True, frozenset({"status"})))


def seeded(fake: FakeClient, namespace: str) -> None:
    """Serve Gizmos on ``fake`` and hold the Gizmo the writers race on, with no entries."""
    seeded_kinds(fake)
    fake.add(
        {
            "apiVersion": GIZMO.api_version,
            "kind": "Gizmo",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {"size": 1},
        }
    )


async def entries(client: Any, namespace: str) -> list[str]:
    """The Gizmo's ``status.entries``."""
    obj = await client.get(GIZMO, NAME, namespace=namespace)
    return list((obj.get("status") or {}).get("entries") or [])
