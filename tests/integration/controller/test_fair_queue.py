"""Fair queues across tenants (kubernetes#25744) on a real API server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.api.meta import key_of
from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client, load_kubeconfig
from setpoint.controller import Builder, Context, Controller, ControllerOptions, Request
from setpoint.observability.metrics import Metrics
from setpoint.testing import eventually

BIG = 120
SMALL = 5


async def _create_config_maps(k8s: Client, namespace: str, prefix: str, count: int) -> None:
    limit = asyncio.Semaphore(20)

    async def one(i: int) -> None:
        async with limit:
            await k8s.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"{prefix}-{i:04d}", "namespace": namespace},
                }
            )

    await asyncio.gather(*(one(i) for i in range(count)))


async def test_fair_by_namespace_serves_a_small_namespace_behind_a_backlog(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """A controller with fair_by="namespace" reconciles a small namespace between a backlog.

    Two controllers watch ConfigMaps in two namespaces, one with the default FIFO queue and
    one with ``fair_by="namespace"``; each holds its first reconcile until every event has
    been queued. 120 ConfigMaps are created in one namespace, then 5 in the other. Once
    released, the fair controller reconciles the small namespace's 5 objects within its
    first rounds (one key per namespace per round), while the FIFO controller reconciles
    them after the whole backlog: informer events, the controller option and the queue
    order together, on live objects.
    """
    small_ns = f"{namespace}-small"
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": small_ns, "labels": {"setpoint.dev/test": "true"}},
        }
    )
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    cache = Cache(client, options=CacheOptions(namespaces=(namespace, small_ns)))
    gate = asyncio.Event()
    orders: dict[str, list[str]] = {"fifo": [], "fair": []}
    controllers: list[Controller] = []
    try:
        await cache.start()
        options = {"fifo": ControllerOptions(), "fair": ControllerOptions(fair_by="namespace")}
        for name, order in orders.items():

            async def reconcile(ctx: Context, request: Request, order: list[str] = order) -> None:
                await gate.wait()
                if request.name.startswith("cm-"):  # not each namespace's kube-root-ca.crt
                    order.append(request.namespace)

            controller = (
                Builder(f"fairq-{name}")
                .for_(kinds.ConfigMap)
                .with_options(options[name])
                .build(reconcile, client=client, cache=cache, metrics=Metrics(CollectorRegistry()))
            )
            await controller.start()
            controllers.append(controller)

        await _create_config_maps(k8s, namespace, "cm", BIG)
        await _create_config_maps(k8s, small_ns, "cm", SMALL)

        # The informers enqueue as they store an event, so once the cache holds every
        # ConfigMap, each key waits (or is the one held at the gate) in both queues.
        async def all_queued() -> bool:
            listed = await cache.list(kinds.ConfigMap)
            return sum(key_of(obj).name.startswith("cm-") for obj in listed) == BIG + SMALL

        await eventually(all_queued, timeout=60)
        gate.set()
        await eventually(
            lambda: all(len(order) == BIG + SMALL for order in orders.values()), timeout=60
        )
    finally:
        for controller in controllers:
            await controller.stop(10)
        await cache.stop(5)
        await client.close()
        await k8s.delete(kinds.Namespace, small_ns)

    def last_small(order: list[str]) -> int:
        return max(i for i, ns in enumerate(order) if ns == small_ns)

    # FIFO: behind the whole backlog. Fair: one per round, so within the first 2 * SMALL
    # (the key held at the gate, and a round's tie, may add one each).
    assert last_small(orders["fifo"]) >= BIG
    assert last_small(orders["fair"]) < 2 * SMALL + 2, orders["fair"][: 2 * SMALL + 2]
