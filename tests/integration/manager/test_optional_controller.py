"""An optional controller on the real API server follows its CRD: install, delete, reinstall."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.client import Client, NotFound, load_kubeconfig
from setpoint.controller import Context
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing.waits import eventually
from tests._support.sprockets import CRD_NAME, GROUP, SPROCKET, sprocket, sprocket_crd


async def _crd_gone(k8s: Client) -> None:
    with contextlib.suppress(NotFound):
        await k8s.delete(kinds.CustomResourceDefinition, CRD_NAME)

    async def gone() -> bool:
        try:
            await k8s.get(kinds.CustomResourceDefinition, CRD_NAME)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=60, description="the Sprocket CRD deleted")


async def _create_sprocket(k8s: Client, namespace: str, name: str) -> None:
    obj = sprocket(name, namespace)

    async def created() -> bool:
        await k8s.create(obj)  # fails (and is retried) until the CRD is served
        return True

    await eventually(created, timeout=60, description=f"Sprocket {name} created")


async def test_optional_controller_follows_its_crd(
    kubeconfig_path: Path, k8s: Client, namespace: str
) -> None:
    """An optional controller waits for its CRD, runs while it exists, and stops when it goes.

    Without the Sprocket CRD the manager starts and /readyz answers 200 while the controller
    waits (setpoint_controller_waiting is 1). Installing the CRD starts the controller and a
    new Sprocket is reconciled; deleting the CRD stops it (its queue shut down), removes every
    informer of the kind from the cache and drops its reconcile series, with /readyz still
    200; reinstalling the CRD starts a new controller that reconciles a new Sprocket.
    """
    await _crd_gone(k8s)
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    metrics = Metrics(CollectorRegistry())
    manager = Manager(
        client,
        ManagerOptions(
            health_probe_bind_address="127.0.0.1:0",
            metrics=metrics,
            handle_signals=False,
            cache_sync_timeout=60,
        ),
    )
    reconciled: list[ObjectKey] = []

    async def reconcile(ctx: Context, request: ObjectKey) -> None:
        await ctx.reader.get(SPROCKET, request.name, namespace=request.namespace)
        reconciled.append(request)

    optional = (
        manager.controller("sprocket-follow")
        .for_(SPROCKET)
        .owns(kinds.ConfigMap)
        .optional(drain_timeout=5)
        .build(reconcile)
    )
    task = asyncio.create_task(manager.run())
    try:
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                address = manager.health_probe_address
                assert address is not None
                async with http.get(f"http://{address[0]}:{address[1]}/readyz") as resp:
                    return resp.status == 200

            await eventually(ready, timeout=60, description="/readyz 200 while waiting")
            assert optional.waiting_for == (SPROCKET,)
            assert optional.controller is None
            waiting = metrics.value("setpoint_controller_waiting", controller="sprocket-follow")
            assert waiting == 1.0

            await k8s.create(sprocket_crd())
            first = await optional.wait_running(60)
            await _create_sprocket(k8s, namespace, "one")
            await eventually(
                lambda: ObjectKey(namespace, "one") in reconciled, timeout=30, description="one"
            )
            assert metrics.value("setpoint_controller_waiting", controller="sprocket-follow") == 0

            await _crd_gone(k8s)
            await optional.wait_waiting(60)
            assert first.queue.shutting_down
            assert not [i for i in manager.cache.informers() if i.kind.group == GROUP]
            total = "controller_runtime_reconcile_total"
            assert not [
                s
                for m in metrics.registry.collect()
                for s in m.samples
                if s.name == total and s.labels.get("controller") == "sprocket-follow"
            ]
            await eventually(ready, timeout=30, description="/readyz 200 after the CRD went")

            reconciled.clear()
            await k8s.create(sprocket_crd())
            second = await optional.wait_running(60)
            assert second is not first
            await _create_sprocket(k8s, namespace, "two")
            await eventually(
                lambda: ObjectKey(namespace, "two") in reconciled, timeout=30, description="two"
            )
            assert optional.runs == 2
            assert not task.done()
    finally:
        manager.stop()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 60)
        await client.close()
        await _crd_gone(k8s)
