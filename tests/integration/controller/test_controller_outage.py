"""A running manager (cache and controller) survives an API server restart with compacted history.

The test runs on the spare control plane (tests/integration/conftest.py: it restarts
kube-apiserver and compacts etcd) and reaches it through a proxy it can cut, so objects
change while the controller is disconnected. It has no kube-controller-manager, so children
of deleted objects are not garbage-collected; the assertions are about the controller and
its cache.
"""

from __future__ import annotations

import asyncio

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import key_of
from setpoint.cache import Cache, CacheOptions, FuncHandler
from setpoint.client import Client, NotFound, load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.controller import Context, Request, Result
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing import ControlPlane, eventually, eventually_passes
from tests._support.gizmos import (
    converged,
    create_gizmos,
    gizmo,
    reconcile_gizmo,
)
from tests._support.kinds import GIZMO, install_crds
from tests._support.outage_proxy import OutageProxy, proxied_client

NAMESPACE = "outage"


async def resize(client: Client, name: str, size: int) -> None:
    await client.patch(GIZMO, name, MergePatch({"spec": {"size": size}}), namespace=NAMESPACE)


async def cache_equals_server(cache: Cache, client: Client) -> bool:
    for kind in (GIZMO, kinds.ConfigMap):
        listing = await client.list(kind, namespace=NAMESPACE)
        server = {key_of(o): o["metadata"]["resourceVersion"] for o in listing}
        cached = {
            k: o["metadata"]["resourceVersion"] for k, o in cache.informer(kind).store.items()
        }
        if cached != server:
            return False
    return True


async def test_controller_recovers_from_restart_with_compacted_history(
    spare_plane: ControlPlane,
) -> None:
    """After an outage with changes, compaction and a restart, everything is reconciled.

    The controller runs in a Manager, as in production. With 40 objects converged, the
    proxy is cut; while the controller is disconnected some
    objects are resized, some deleted and some created, etcd is compacted and
    kube-apiserver restarted, and more changes follow. When the proxy is restored the
    informers get 410 Gone, relist, and the controller reconciles every change: deleted
    objects (learned from the relist, final state unknown), changed and new ones. At the
    end every object has converged, the cache equals a fresh list, and no 409 was seen.
    """
    direct = Client(load_kubeconfig(str(spare_plane.kubeconfig_path)))
    proxy = OutageProxy("127.0.0.1", spare_plane.api_port)
    await proxy.start()
    codes: list[str] = []
    client = proxied_client(
        spare_plane.kubeconfig_path, proxy, on_request=lambda method, host, code: codes.append(code)
    )
    manager = Manager(
        client,
        ManagerOptions(
            metrics=Metrics.isolated(),
            metrics_bind_address="0",
            health_probe_bind_address="0",
            handle_signals=False,
            new_cache=lambda c: Cache(
                c, options=CacheOptions(namespaces=(NAMESPACE,), backoff_max=1.0)
            ),
        ),
    )
    cache = manager.cache
    reconciled: list[ObjectKey] = []

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        reconciled.append(request)
        return await reconcile_gizmo(ctx, request)

    controller = (
        manager.controller("outage")
        .for_(GIZMO)
        .owns(kinds.ConfigMap)
        .max_concurrent_reconciles(4)
        .build(reconcile)
    )
    inferred_deletes: list[str] = []
    running: asyncio.Task[None] | None = None
    try:
        await install_crds(direct)
        await direct.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        await create_gizmos(direct, NAMESPACE, 40)
        running = asyncio.create_task(manager.run())
        await manager.wait_elected(timeout=60)
        cache.informer(GIZMO).add_handler(
            FuncHandler(
                delete=lambda obj, unknown: (
                    inferred_deletes.append(obj["metadata"]["name"]) if unknown else None
                )
            )
        )
        await eventually(lambda: converged(direct, NAMESPACE, 40), timeout=120)

        await proxy.cut()
        for i in range(0, 5):
            await resize(direct, f"g-{i:04d}", 7)
        deleted = [f"g-{i:04d}" for i in range(5, 10)]
        for name in deleted:
            await direct.delete(GIZMO, name, namespace=NAMESPACE)
        for i in range(40, 45):
            await direct.create(gizmo(f"g-{i:04d}", NAMESPACE, size=3))
        spare_plane.compact_etcd()
        await asyncio.to_thread(spare_plane.restart_apiserver)
        for i in range(10, 15):
            await resize(direct, f"g-{i:04d}", 9)
        for i in range(45, 50):
            await direct.create(gizmo(f"g-{i:04d}", NAMESPACE, size=4))
        reconciled.clear()
        await proxy.restore()

        # Children of deleted gizmos stay (no garbage collector here): count live ones only.
        await eventually(lambda: converged(direct, NAMESPACE, 45), timeout=180)
        await eventually(lambda: cache_equals_server(cache, direct), timeout=60)
        assert cache.informer(GIZMO).stats.relists >= 1
        assert sorted(inferred_deletes) == deleted
        # A deleted object's reconcile writes nothing the server could show, and the relist
        # queued it beside the changed ones: it may still be waiting for a worker when the
        # others have converged. Wait for the reconciles themselves.
        expected_changed = {f"g-{i:04d}" for i in (*range(0, 5), *range(10, 15), *range(40, 50))}

        def reconciled_every_change() -> None:
            touched = {k.name for k in reconciled}
            assert set(deleted) <= touched, "deleted objects were not reconciled"
            assert expected_changed <= touched

        await eventually_passes(reconciled_every_change, timeout=60)
        for name in deleted:
            try:
                await direct.get(GIZMO, name, namespace=NAMESPACE)
            except NotFound:
                continue
            raise AssertionError(f"{name} should be gone")
        assert "409" not in codes
        assert controller.failure() is None
        assert cache.failure() is None
        assert not running.done(), "the manager stopped during the outage"
    finally:
        manager.stop()
        if running is not None:
            await asyncio.wait_for(running, 30)
        await client.close()
        await proxy.close()
        await direct.close()
