"""Informers recover from lost watches and expired resourceVersions on a real API server.

These tests run on the spare control plane (tests/integration/conftest.py: the API server
is restarted and etcd compacted) and reach it through a proxy they can cut, so objects
change while the informer is disconnected, deterministically.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.cache import Cache, CacheOptions, FuncHandler, Informer
from setpoint.client import Client, load_kubeconfig
from setpoint.testing import ControlPlane, eventually
from tests._support.outage_proxy import OutageProxy, proxied_client


@pytest_asyncio.fixture(loop_scope="session")
async def direct(spare_plane: ControlPlane) -> AsyncIterator[Client]:
    client = Client(load_kubeconfig(str(spare_plane.kubeconfig_path)))
    try:
        yield client
    finally:
        await client.close()


@pytest_asyncio.fixture(loop_scope="session")
async def proxy(spare_plane: ControlPlane) -> AsyncIterator[OutageProxy]:
    p = OutageProxy("127.0.0.1", spare_plane.api_port)
    await p.start()
    try:
        yield p
    finally:
        await p.close()


class Events:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, Any]] = []

    def handler(self) -> FuncHandler:
        return FuncHandler(
            add=lambda obj, initial: self.log.append(("add", name(obj), initial)),
            update=lambda old, new: self.log.append(("update", name(new), (rv(old), rv(new)))),
            delete=lambda obj, unknown: self.log.append(("delete", name(obj), unknown)),
        )

    def of(self, kind: str) -> list[tuple[str, Any]]:
        return [(n, extra) for k, n, extra in self.log if k == kind]


def name(obj: JsonObject) -> str:
    return str(obj["metadata"]["name"])


def rv(obj: JsonObject) -> str:
    return str(obj["metadata"]["resourceVersion"])


async def configmap(client: Client, namespace: str, cm_name: str, value: str) -> JsonObject:
    return await client.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": cm_name, "namespace": namespace},
            "data": {"v": value},
        }
    )


async def set_value(client: Client, namespace: str, cm_name: str, value: str) -> JsonObject:
    cm = await client.get(kinds.ConfigMap, cm_name, namespace=namespace)
    cm["data"] = {"v": value}
    return await client.update(cm)


async def fresh_namespace(client: Client, ns: str) -> str:
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return ns


async def store_matches_server(informer: Informer, client: Client, namespace: str) -> bool:
    listing = await client.list(kinds.ConfigMap, namespace=namespace)
    server = {name(o): rv(o) for o in listing if name(o) != "kube-root-ca.crt"}
    cached = {
        k.name: rv(o)
        for k, o in informer.store.items()
        if k.namespace == namespace and k.name != "kube-root-ca.crt"
    }
    return cached == server


async def start_cache(kubeconfig: Path, proxy: OutageProxy, namespace: str) -> tuple[Cache, Client]:
    client = proxied_client(kubeconfig, proxy)
    cache = Cache(client, options=CacheOptions(namespaces=(namespace,), backoff_max=1.0))
    await cache.start()
    return cache, client


async def test_dropped_watch_resumes_from_the_last_resource_version(
    spare_plane: ControlPlane, direct: Client, proxy: OutageProxy
) -> None:
    """After a dropped connection the informer re-watches from its last resourceVersion.

    The proxy in front of the API server is cut, objects are updated, deleted and created
    through a direct connection, then the proxy is restored. The informer must see exactly
    those three changes as watch events (no relist, no duplicate add), and its store must
    equal a fresh list.
    """
    ns = await fresh_namespace(direct, "rewatch")
    for i in range(3):
        await configmap(direct, ns, f"cm-{i}", "0")
    cache, client = await start_cache(spare_plane.kubeconfig_path, proxy, ns)
    try:
        informer = cache.informer(kinds.ConfigMap)
        events = Events()
        informer.add_handler(events.handler())
        await cache.wait_for_sync(30)
        events.log.clear()
        watches_before = informer.stats.watches

        await proxy.cut()
        await set_value(direct, ns, "cm-0", "1")
        await direct.delete(kinds.ConfigMap, "cm-1", namespace=ns)
        await configmap(direct, ns, "cm-new", "0")
        await proxy.restore()

        await eventually(
            lambda: store_matches_server(informer, direct, ns),
            timeout=60,
            description="store equals a fresh list",
        )
        assert informer.stats.relists == 0
        assert informer.stats.lists == 1
        assert informer.stats.watches > watches_before
        assert [n for n, _ in events.of("update")] == ["cm-0"]
        assert events.of("delete") == [("cm-1", False)]
        assert events.of("add") == [("cm-new", False)]
    finally:
        await cache.stop(5)
        await client.close()


async def test_gone_after_compaction_and_restart_relists_without_losing_state(
    spare_plane: ControlPlane, direct: Client, proxy: OutageProxy
) -> None:
    """After etcd compaction and an API server restart, the informer relists and reconciles.

    While the informer is disconnected, objects change, vanish and appear; etcd is
    compacted and kube-apiserver restarted, so the informer's resourceVersion is gone
    (410). It must relist and emit a delete (final state unknown) for each vanished
    object, an update for each changed one and an add (not from the initial list) for each
    new one, never add an object twice, and end with a store equal to a fresh list.
    """
    ns = await fresh_namespace(direct, "relist")
    for i in range(6):
        await configmap(direct, ns, f"cm-{i}", "0")
    cache, client = await start_cache(spare_plane.kubeconfig_path, proxy, ns)
    try:
        informer = cache.informer(kinds.ConfigMap)
        events = Events()
        informer.add_handler(events.handler())
        await cache.wait_for_sync(30)
        initial_adds = Counter(n for n, _ in events.of("add"))
        events.log.clear()

        await proxy.cut()
        await set_value(direct, ns, "cm-0", "changed-while-down")
        await direct.delete(kinds.ConfigMap, "cm-1", namespace=ns)
        await configmap(direct, ns, "created-while-down", "0")
        spare_plane.compact_etcd()
        await asyncio.to_thread(spare_plane.restart_apiserver)
        await set_value(direct, ns, "cm-2", "changed-after-restart")
        await direct.delete(kinds.ConfigMap, "cm-3", namespace=ns)
        await configmap(direct, ns, "created-after-restart", "0")
        await proxy.restore()

        await eventually(
            lambda: store_matches_server(informer, direct, ns),
            timeout=90,
            description="store equals a fresh list",
        )
        assert informer.stats.relists >= 1
        assert sorted(events.of("delete")) == [("cm-1", True), ("cm-3", True)]
        updated = dict(events.of("update"))
        assert sorted(updated) == ["cm-0", "cm-2"]
        assert all(old != new for old, new in updated.values())
        assert sorted(events.of("add")) == [
            ("created-after-restart", False),
            ("created-while-down", False),
        ]
        adds = initial_adds + Counter(n for n, _ in events.of("add"))
        assert max(adds.values()) == 1, f"an object was added twice: {adds}"
        # The watch works again after the relist.
        await configmap(direct, ns, "after-recovery", "0")
        await eventually(lambda: ("after-recovery", False) in events.of("add"), timeout=30)
    finally:
        await cache.stop(5)
        await client.close()
