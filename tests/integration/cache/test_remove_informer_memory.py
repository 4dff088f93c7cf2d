"""Informers added and removed 100 times on the real server leave memory and watches flat."""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path
from typing import Any

import orjson

from setpoint.api import kinds
from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client, load_kubeconfig
from setpoint.testing.waits import eventually

OBJECTS = 200
PAYLOAD = 4000  # bytes of data per ConfigMap: a store holds about 0.8 MB
WARM_UP = 10
CYCLES = 100
TOLERANCE = 16 * 2**20
"""RSS growth allowed over the cycles: the allocator's noise, far below a leaked store per cycle."""


def rss() -> int:
    """This process's resident set size in bytes (/proc/self/statm)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        resident_pages = int(statm.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def open_sockets() -> int:
    """Sockets this process holds open (its HTTP connections, a watch's among them)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


async def server_watches(k8s: Client) -> float:
    """ConfigMap watches the API server serves now (apiserver_longrunning_requests)."""
    response = await k8s.transport.request("GET", "/metrics", accept="text/plain")
    body: Any = response.body
    text = body.decode() if isinstance(body, bytes) else str(body)
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_longrunning_requests{")
            and 'resource="configmaps"' in line
            and 'verb="WATCH"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_add_and_remove_cycles_leave_rss_and_watches_flat(
    kubeconfig_path: Path, k8s: Client, namespace: str
) -> None:
    """100 add/remove cycles of an informer leave the RSS, the server's watches and sockets flat.

    An informer over 200 ConfigMaps of 4 KB each (a store of about 0.8 MB, measured) is
    added, synced and removed 100 times after 10 warm-up cycles. The RSS (/proc/self/statm)
    grows by less than 16 MiB, while keeping one store per cycle would add 100 stores (about
    80 MB, asserted to exceed three times the tolerance); the API server's ConfigMap watch
    count (apiserver_longrunning_requests) and this process's open sockets are back to
    their values before the cycles.
    """
    data = {"payload": "x" * PAYLOAD}
    for start in range(0, OBJECTS, 20):
        await asyncio.gather(
            *(
                k8s.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": f"cm-{i}", "namespace": namespace},
                        "data": data,
                    }
                )
                for i in range(start, start + 20)
            )
        )
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    cache = Cache(client, options=CacheOptions(namespaces=(namespace,)))
    await cache.start()
    store_bytes = 0

    async def cycle() -> None:
        nonlocal store_bytes
        informer = cache.informer(kinds.ConfigMap)
        await informer.wait_for_sync(60)
        assert len(informer.store) >= OBJECTS
        if not store_bytes:
            store_bytes = sum(len(orjson.dumps(obj)) for obj in informer.store.values())
        assert await cache.remove_informer(kinds.ConfigMap)
        assert len(informer.store) == 0

    try:
        for _ in range(WARM_UP):
            await cycle()
        gc.collect()
        await eventually(lambda: open_sockets() > 0, timeout=5)
        rss_before, sockets_before = rss(), open_sockets()
        watches_before = await server_watches(k8s)
        for _ in range(CYCLES):
            await cycle()
        gc.collect()
        growth = rss() - rss_before

        leak_if_kept = CYCLES * store_bytes
        assert leak_if_kept > 3 * TOLERANCE, (store_bytes, leak_if_kept)
        assert growth < TOLERANCE, f"RSS grew {growth / 2**20:.1f} MiB over {CYCLES} cycles"
        await eventually(
            lambda: open_sockets() <= sockets_before,
            timeout=30,
            description=f"sockets back to {sockets_before}",
        )

        async def watches_back() -> bool:
            return await server_watches(k8s) <= watches_before

        await eventually(watches_back, timeout=30, description="server watches back")
        assert not cache.informers()
    finally:
        await cache.stop(5)
        await client.close()
