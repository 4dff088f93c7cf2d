"""External sources in a running controller: a channel and a per-object poller.

tests/unit/controller/test_sources.py runs the scenario over the fake client;
tests/integration/controller/test_sources.py on the real API server.
"""

from __future__ import annotations

from collections import Counter

from setpoint.api.keys import ObjectKey
from setpoint.controller import Builder, Context, Request
from setpoint.controller.sources import ChannelSource, PerObjectPollingSource
from setpoint.testing import eventually
from tests._support.finalizer_flow import Backend, Operator
from tests._support.kinds import GIZMO


async def channel_and_per_object_poller(backend: Backend) -> None:
    """Keys sent on a channel and objects whose outside value changed are reconciled.

    Two Gizmos exist; an "outside" dict holds a value per Gizmo, polled every 0.2 s per
    object (keys from the controller's cache of its for_ kind). Changing one Gizmo's
    value reconciles that Gizmo once more and not the other; a key sent on the channel
    (no object behind it) is reconciled too.
    """
    outside: dict[ObjectKey, str] = {}
    reconciled: Counter[ObjectKey] = Counter()

    async def poll(key: ObjectKey) -> str | None:
        return outside.get(key)

    async def reconcile(ctx: Context, request: Request) -> None:
        reconciled[request] += 1

    channel = ChannelSource("bus")
    poller: PerObjectPollingSource[str] = PerObjectPollingSource(
        "outside", poll, period=0.2, jitter=0.1
    )
    operator = Operator(backend, name="sources")
    operator.reconcile = reconcile  # type: ignore[method-assign]
    a, b = (ObjectKey(backend.namespace, name) for name in ("a", "b"))
    outside.update({a: "1", b: "1"})
    for key in (a, b):
        await backend.client.create(backend.obj(GIZMO, key.name))
    builder = Builder("sources").for_(GIZMO).watches_source(channel).watches_source(poller)
    controller = await operator.start(builder)
    try:
        await eventually(
            lambda: reconciled[a] and reconciled[b] and poller.get(a) == "1",
            timeout=30,
            description="both reconciled, first values polled",
        )
        await controller.wait_idle(timeout=30, settle=0.5)
        before = reconciled.copy()
        outside[a] = "2"
        await eventually(
            lambda: reconciled[a] > before[a], timeout=30, description="a reconciled again"
        )
        await controller.wait_idle(timeout=30, settle=0.5)
        assert reconciled[b] == before[b]  # b's value did not change
        assert poller.polls >= 2  # the first values, and the poll that saw the change

        elsewhere = ObjectKey(backend.namespace, "not-a-gizmo")
        await channel.send(elsewhere)
        await eventually(lambda: reconciled[elsewhere], timeout=30, description="sent key")
        enqueued = operator.metrics.value(
            "setpoint_source_enqueued_total", controller="sources", source="outside"
        )
        assert enqueued == 1
    finally:
        await operator.stop()
