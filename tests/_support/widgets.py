"""Widgets on the public FakeClient, for the cache and controller unit tests.

The informer and controller unit tests script what the server does (events in revision
order, bookmarks, compaction, broken watches, failing lists, a lagging watch stream)
through the public :class:`~setpoint.testing.FakeClient` and its fault rules; these are
the few helpers they share. The same behaviour against a real API server is tested in
tests/integration/cache and tests/integration/controller.
"""

from __future__ import annotations

import asyncio
from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.client.errors import AlreadyExists, ConnectionFailed
from setpoint.testing import FakeClient, FakeOptions, FaultRule
from tests._support.kinds import CRDS, DIAL, WIDGET, Dial, Widget

__all__ = [
    "CLUSTER_THING",
    "WIDGET",
    "WIDGET_CRD",
    "connection_reset",
    "fake_api",
    "hold_next_watch",
    "put",
    "remove",
    "widget",
]

CLUSTER_THING = DIAL
"""A cluster-scoped kind."""

WIDGET_CRD = next(crd for crd in CRDS if crd["spec"]["names"]["kind"] == "Widget")
"""The Widget CRD, for tests that install the kind while an informer waits for it."""


def widget(name: str, namespace: str = "default", **extra: Any) -> JsonObject:
    """A Widget manifest; ``metadata=`` adds metadata, other keywords are top-level fields."""
    obj: JsonObject = {
        "apiVersion": WIDGET.api_version,
        "kind": WIDGET.kind,
        "metadata": {"name": name, "namespace": namespace, **extra.pop("metadata", {})},
    }
    obj.update(extra)
    return obj


def fake_api(*, widgets: bool = True, **options: Any) -> FakeClient:
    """A fake serving Widgets (unless ``widgets=False``) and the cluster-scoped Dial.

    Widgets are served without their schema (registered by ResourceInfo, not by class), so
    the tests can store any content in them; the fake would otherwise prune it as the
    server does.
    """
    return FakeClient(
        resources=[Widget.resource_info(), Dial] if widgets else [Dial],
        options=FakeOptions(**options),
    )


async def put(fake: FakeClient, obj: JsonObject, kind: GroupVersionKind = WIDGET) -> JsonObject:
    """Create ``obj``, or replace the stored object of that name with it (a server-side
    write as another client makes it); returns what the server stored."""
    try:
        created: JsonObject = await fake.create(obj)
        return created
    except AlreadyExists:
        meta = obj["metadata"]
        live = fake.lookup(kind, meta["name"], namespace=meta.get("namespace"))
        assert live is not None
        replaced = {
            **obj,
            "metadata": {**meta, "resourceVersion": live["metadata"]["resourceVersion"]},
        }
        updated: JsonObject = await fake.update(replaced)
        return updated


async def remove(fake: FakeClient, key: ObjectKey, kind: GroupVersionKind = WIDGET) -> None:
    """Delete the object at ``key`` (no finalizers: it goes at once)."""
    await fake.delete(kind, key.name, namespace=key.namespace or None)


def connection_reset() -> ConnectionFailed:
    """A dropped connection, as the transport reports it (the watch resumes, no relist)."""
    return ConnectionFailed("connection reset by peer", url="https://fake")


def hold_next_watch(fake: FakeClient) -> tuple[asyncio.Event, FaultRule]:
    """Hold the next watch request back until the returned event is set.

    The call is recorded (``fake.faults.calls``) before it waits, so a test can see the
    re-watch was issued, change objects while it waits, and then let it through.
    """
    gate = asyncio.Event()

    async def wait(call: Any) -> None:
        await gate.wait()

    return gate, fake.faults.intercept("watch", wait, times=1)
