"""Informers stream their lists from a real API server (WatchList) and keep their guarantees."""

from __future__ import annotations

import asyncio

from setpoint.api import kinds
from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client
from setpoint.client.patch import MergePatch
from setpoint.testing import eventually


def config_map(namespace: str, i: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cm-{i:03d}", "namespace": namespace, "labels": {"app": "streamed"}},
        "data": {"i": str(i)},
    }


async def test_a_streamed_list_matches_a_paginated_one_and_reads_its_own_writes(
    k8s: Client, namespace: str
) -> None:
    """v1.37 streams the initial list (sendInitialEvents); it holds what a paginated list holds.

    Two caches of the same labelled ConfigMaps, one streaming and one listing with pages,
    sync to the same objects at the same versions. The streaming one then reads its own
    write at once (read-after-write) and sees another writer's change on the same stream.
    """
    await asyncio.gather(*(k8s.create(config_map(namespace, i)) for i in range(25)))
    caches = {
        streaming: Cache(
            k8s,
            options=CacheOptions(
                namespaces=(namespace,), labels="app=streamed", streaming_list=streaming
            ),
        )
        for streaming in (True, False)
    }
    for cache in caches.values():
        await cache.start()
    try:
        informers = {s: c.informer(kinds.ConfigMap) for s, c in caches.items()}
        for cache in caches.values():
            await cache.wait_for_sync(30)
        streamed, paged = informers[True], informers[False]
        assert streamed.stats.streamed_lists == streamed.stats.lists == 1
        assert paged.stats.streamed_lists == 0 and paged.stats.lists == 1
        assert {k: o["metadata"]["resourceVersion"] for k, o in streamed.store.items()} == {
            k: o["metadata"]["resourceVersion"] for k, o in paged.store.items()
        }
        assert len(streamed.store) == 25

        cache = caches[True]
        written = await cache.tracking_client().patch(
            kinds.ConfigMap, "cm-007", MergePatch({"data": {"i": "seven"}}), namespace=namespace
        )
        read = await cache.reader(read_after_write_timeout=10).get(
            kinds.ConfigMap, "cm-007", namespace=namespace
        )
        assert read["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]
        assert read["data"] == {"i": "seven"}

        await k8s.create(config_map(namespace, 99))
        await eventually(lambda: len(streamed.store) == 26, timeout=30, description="new object")
        assert streamed.stats.watches == 1  # the list's own stream delivered it
    finally:
        for cache in caches.values():
            await cache.stop(5)
