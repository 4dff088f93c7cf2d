"""manager.controller(name): a controller wired to the manager, against the real API server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.client import Client, load_kubeconfig
from setpoint.controller import Context, Request
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing.waits import eventually


async def test_a_controller_built_from_the_manager_uses_its_parts(
    kubeconfig_path: Path, k8s: Client, namespace: str
) -> None:
    """manager.controller(name) builds a controller from the manager's parts and adds it.

    The builder fills in the manager's client, cache, metrics and Event recorder. The
    controller reconciles ConfigMaps through the manager's shared cache, records an Event
    through ctx.recorder (reported as the controller's name) and counts its reconciles in
    the manager's registry. A second controller with the same name is refused.
    """
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    metrics = Metrics(CollectorRegistry())
    manager = Manager(
        client,
        ManagerOptions(
            metrics=metrics,
            metrics_bind_address="0",
            health_probe_bind_address="0",
            handle_signals=False,
        ),
    )
    reconciled: list[str] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        if request.namespace != namespace:
            return
        cm: dict[str, Any] = await ctx.reader.get(
            kinds.ConfigMap, request.name, namespace=request.namespace
        )
        reconciled.append(request.name)
        assert ctx.recorder is not None
        ctx.recorder.event(cm, "Normal", "Seen", f"reconciled {request.name}")

    controller = manager.controller("cm-watch").for_(kinds.ConfigMap).build(reconcile)
    assert controller in manager.runnables
    assert manager.cache in manager.runnables
    with pytest.raises(ValueError, match="already runs a controller named 'cm-watch'"):
        manager.controller("cm-watch").for_(kinds.ConfigMap).build(reconcile)

    task = asyncio.create_task(manager.run())
    try:
        await manager.wait_elected(timeout=60)
        await k8s.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "watched", "namespace": namespace},
            }
        )
        await eventually(
            lambda: "watched" in reconciled, timeout=60, description="the ConfigMap reconciled"
        )

        async def seen_event() -> list[dict[str, Any]]:
            listed = await k8s.list(kinds.Event, namespace=namespace)
            # Only "watched": kube-controller-manager adds kube-root-ca.crt to every namespace.
            return [
                e
                for e in listed.items
                if e["reason"] == "Seen" and e["regarding"]["name"] == "watched"
            ]

        (event,) = await eventually(seen_event, timeout=30, description="the Event exists")
        assert event["reportingController"] == "cm-watch"
        assert event["note"] == "reconciled watched"
        success = metrics.reconcile_total.labels("cm-watch", "success")
        assert success.get() >= 1
    finally:
        manager.stop()
        await asyncio.wait_for(task, 60)
        await client.close()
