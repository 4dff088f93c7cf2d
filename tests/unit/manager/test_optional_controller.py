"""Optional controllers on the fake: wait for the CRD, start, stop when it goes, start again.

controller-runtime#2589 and #935: a controller whose CRD is missing fails the manager's
start-up; ``.optional()`` makes it wait, Ready, and follow the CRD.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.cache import InformerRemoved, KindNotServed
from setpoint.controller import Context
from setpoint.manager import Manager, ManagerOptions, RunnableFailed
from setpoint.manager.optional import WAITING_ANNOTATION, OptionalController
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient, eventually
from tests._support.manager_fakes import FakeHttpServer
from tests._support.sprockets import CRD_NAME, GROUP, SPROCKET, sprocket, sprocket_crd


class Run:
    """A manager with one optional controller over Sprocket (owning ConfigMaps), running."""

    def __init__(self) -> None:
        self.api = FakeClient()
        self.metrics = Metrics(CollectorRegistry())
        self.manager = Manager(
            self.api,
            ManagerOptions(
                metrics=self.metrics,
                new_http_server=FakeHttpServer,
                handle_signals=False,
                failure_check_interval=0.02,
                graceful_shutdown_timeout=5.0,
            ),
        )
        self.reconciled: list[ObjectKey] = []
        self.gate = asyncio.Event()  # what a Sprocket named "slow" waits for

        async def reconcile(ctx: Context, request: ObjectKey) -> None:
            await ctx.reader.get(SPROCKET, request.name, namespace=request.namespace)
            if request.name == "slow":
                await self.gate.wait()
            self.reconciled.append(request)

        self.optional = (
            self.manager.controller("sprocket")
            .for_(SPROCKET)
            .owns(kinds.ConfigMap)
            .optional(drain_timeout=1.0)
            .build(reconcile)
        )
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.manager.run())

    async def close(self) -> None:
        self.manager.stop()
        if self.task is not None:
            await asyncio.wait_for(asyncio.gather(self.task, return_exceptions=True), 10)

    def series(self) -> set[str]:
        """Names of the samples labelled controller=sprocket, the waiting gauge aside."""
        return {
            sample.name
            for metric in self.metrics.registry.collect()
            for sample in metric.samples
            if sample.labels.get("controller") == "sprocket"
            and sample.name != "setpoint_controller_waiting"
        }


@pytest.fixture
async def run() -> AsyncIterator[Run]:
    r = Run()
    try:
        yield r
    finally:
        await r.close()


async def test_the_manager_is_ready_while_the_controller_waits(run: Run) -> None:
    assert isinstance(run.optional, OptionalController)
    run.start()
    await eventually(lambda: run.optional.waiting_for == (SPROCKET,), timeout=5)
    await eventually(lambda: run.manager.is_leader, timeout=5)
    for check in run.manager.readyz.names:
        assert await run.manager.readyz.run(check) is None, check
    assert run.optional.controller is None
    waiting = run.metrics.value(
        "setpoint_controller_waiting", controller="sprocket", kind="Sprocket.v1." + GROUP
    )
    assert waiting == 1.0
    annotation = json.loads(run.manager.lease_annotations()[WAITING_ANNOTATION])
    assert annotation == {"sprocket": [f"Sprocket.v1.{GROUP}"]}
    assert not any(i.kind == SPROCKET for i in run.manager.cache.informers())


async def test_follows_the_crd_install_delete_reinstall(run: Run) -> None:
    run.start()
    await eventually(lambda: run.optional.waiting_for == (SPROCKET,), timeout=5)

    await run.api.create(sprocket_crd())
    await run.api.create(sprocket("one"))
    controller = await run.optional.wait_running(5)
    await eventually(lambda: ObjectKey("default", "one") in run.reconciled, timeout=5)
    assert run.optional.runs == 1
    assert run.metrics.value("setpoint_controller_waiting", controller="sprocket") == 0.0
    assert "controller_runtime_reconcile_total" in run.series()
    assert json.loads(run.manager.lease_annotations()[WAITING_ANNOTATION]) == {}

    await run.api.delete(kinds.CustomResourceDefinition, CRD_NAME)
    await run.optional.wait_waiting(5)
    assert controller.queue.shutting_down
    assert not any(i.kind.group == GROUP for i in run.manager.cache.informers())
    assert any(i.kind == kinds.ConfigMap for i in run.manager.cache.informers())  # still served
    with pytest.raises(InformerRemoved):
        await run.manager.cache.get(SPROCKET, "one", namespace="default")
    assert run.series() == set()
    assert run.metrics.value("setpoint_controller_waiting", controller="sprocket") == 1.0
    for check in run.manager.readyz.names:
        assert await run.manager.readyz.run(check) is None, check

    run.reconciled.clear()
    await run.api.create(sprocket_crd())
    await run.api.create(sprocket("two"))
    again = await run.optional.wait_running(5)
    assert again is not controller
    await eventually(lambda: ObjectKey("default", "two") in run.reconciled, timeout=5)
    assert run.optional.runs == 2
    assert run.task is not None and not run.task.done()


async def test_an_installed_crd_starts_the_controller_with_the_manager(run: Run) -> None:
    await run.api.create(sprocket_crd())
    await run.api.create(sprocket("one"))
    run.start()
    await run.optional.wait_running(5)
    await eventually(lambda: run.reconciled == [ObjectKey("default", "one")], timeout=5)
    assert run.optional.waiting_for == ()


async def test_without_optional_a_missing_crd_fails_the_start_up() -> None:
    api = FakeClient()
    manager = Manager(
        api,
        ManagerOptions(
            metrics=Metrics(CollectorRegistry()),
            new_http_server=FakeHttpServer,
            handle_signals=False,
            failure_check_interval=0.02,
        ),
    )

    async def reconcile(ctx: Context, request: ObjectKey) -> None:
        """Never called."""

    manager.controller("sprocket").for_(SPROCKET).build(reconcile)
    with pytest.raises(RunnableFailed) as caught:
        await asyncio.wait_for(manager.run(), 10)
    assert isinstance(caught.value.__cause__, KindNotServed)
    assert "Sprocket" in str(caught.value)
    assert "...optional()" in str(caught.value)


async def test_a_shutdown_during_a_retirement_still_stops_the_controller(run: Run) -> None:
    await run.api.create(sprocket_crd())
    await run.api.create(sprocket("slow"))
    run.start()
    controller = await run.optional.wait_running(5)
    await eventually(lambda: controller.active_workers == 1, timeout=5, description="in flight")

    await run.api.delete(kinds.CustomResourceDefinition, CRD_NAME)
    await eventually(lambda: controller.queue.shutting_down, timeout=5, description="draining")
    await run.close()  # the manager stops while the retirement drains the slow reconcile

    assert controller.active_workers == 0
    assert run.task is not None and run.task.done() and run.task.exception() is None
