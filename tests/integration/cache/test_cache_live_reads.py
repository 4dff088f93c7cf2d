"""The cache against a real API server: same answers as the live client, clear errors."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.cache import (
    Cache,
    CacheOptions,
    FuncHandler,
    Informer,
    InformerOptions,
    KindNotServed,
    KindOptions,
    keep_as_received,
)
from setpoint.client import Client, NotFound
from setpoint.client.patch import MergePatch
from setpoint.testing import eventually


@pytest_asyncio.fixture(loop_scope="session")
async def cache(k8s: Client, namespace: str) -> AsyncIterator[Cache]:
    c = Cache(k8s, options=CacheOptions(namespaces=(namespace,)))
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


async def make(k8s: Client, namespace: str, cm: str, **labels: str) -> JsonObject:
    return await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": cm, "namespace": namespace, "labels": labels},
            "data": {"name": cm},
        }
    )


async def test_cached_reads_match_the_live_client(
    k8s: Client, namespace: str, cache: Cache
) -> None:
    """get and list from the cache answer what the live client answers.

    The same label selectors (set-based too), field selectors and NotFound errors, from
    memory; managedFields are stripped by the default transform.
    """
    await make(k8s, namespace, "web-1", app="web", tier="1")
    await make(k8s, namespace, "web-2", app="web", tier="2")
    await make(k8s, namespace, "db-1", app="db", tier="1")
    await cache.wait_for_sync(30)
    informer = cache.informer(kinds.ConfigMap)
    await eventually(lambda: len(informer.store.keys_in_namespace(namespace)) >= 3, timeout=30)

    live = await k8s.get(kinds.ConfigMap, "web-1", namespace=namespace)
    cached = await cache.get(kinds.ConfigMap, "web-1", namespace=namespace)
    assert cached["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    assert cached["data"] == live["data"]
    assert "managedFields" in live["metadata"]
    assert "managedFields" not in cached["metadata"]

    for labels, fields in [
        ("app=web", None),
        ("app in (web,db),tier!=2", None),
        ("!missing,tier", None),
        (None, "metadata.name=db-1"),
        ("app=web", "metadata.name!=web-1"),
    ]:
        from_server = await k8s.list(
            kinds.ConfigMap, namespace=namespace, labels=labels, fields=fields
        )
        from_cache = await cache.list(
            kinds.ConfigMap, namespace=namespace, labels=labels, fields=fields
        )
        server_names = sorted(o["metadata"]["name"] for o in from_server)
        assert [o["metadata"]["name"] for o in from_cache] == server_names, (labels, fields)

    with pytest.raises(NotFound) as live_error:
        await k8s.get(kinds.ConfigMap, "missing", namespace=namespace)
    with pytest.raises(NotFound) as cache_error:
        await cache.get(kinds.ConfigMap, "missing", namespace=namespace)
    assert cache_error.value.reason == live_error.value.reason == "NotFound"
    assert cache_error.value.details["name"] == live_error.value.details["name"] == "missing"
    assert cache_error.value.details["kind"] == live_error.value.details["kind"]


async def test_keep_as_received_stores_what_the_server_sent(k8s: Client, namespace: str) -> None:
    """With ``transform=keep_as_received`` the cache keeps managedFields.

    The default transform strips them (the test above); keep_as_received stores each
    object exactly as the server sent it, managedFields included.
    """
    await make(k8s, namespace, "kept")
    options = InformerOptions(namespaces=(namespace,), transform=keep_as_received)
    informer = Informer(k8s, kinds.ConfigMap, options)
    await informer.start()
    try:
        await informer.wait_for_sync(30)
        await eventually(lambda: ObjectKey(namespace, "kept") in informer.store, timeout=30)
        stored = informer.store.get(ObjectKey(namespace, "kept"))
        assert stored is not None
        assert stored["metadata"]["managedFields"][0]["manager"]
    finally:
        await informer.stop()


async def test_a_kind_that_is_not_served_fails_fast(k8s: Client) -> None:
    """A kind whose CRD is not installed fails wait_for_sync at once, naming the kind.

    It does not hang until the sync timeout: the informer reports UnknownKind (as
    KindNotServed) as soon as discovery says so.
    """
    cache = Cache(k8s)
    await cache.start()
    try:
        cache.informer(GroupVersionKind("nope.setpoint.dev", "v1", "Nope"))
        started = time.monotonic()
        with pytest.raises(KindNotServed, match="Nope") as caught:
            await cache.wait_for_sync(60)
        assert time.monotonic() - started < 20
        assert "CustomResourceDefinition" in str(caught.value)
    finally:
        await cache.stop(5)


async def test_objects_leaving_the_label_selector_are_deleted_from_the_cache(
    k8s: Client, namespace: str
) -> None:
    """An object relabelled out of an informer's label selector is seen as deleted.

    The server sends DELETED when an object stops matching a watch's selector; the cache
    drops it, and adds it again when it matches once more.
    """
    cache = Cache(
        k8s,
        options=CacheOptions(
            namespaces=(namespace,), by_kind={kinds.ConfigMap: KindOptions(labels="keep=yes")}
        ),
    )
    await cache.start()
    try:
        informer = cache.informer(kinds.ConfigMap)
        seen: list[tuple[str, str, bool]] = []
        informer.add_handler(
            FuncHandler(
                add=lambda o, initial: seen.append(("add", o["metadata"]["name"], initial)),
                delete=lambda o, unknown: seen.append(("delete", o["metadata"]["name"], unknown)),
            )
        )
        await make(k8s, namespace, "kept", keep="yes")
        await make(k8s, namespace, "ignored", keep="no")
        await cache.wait_for_sync(30)
        await eventually(lambda: ("add", "kept", False) in seen or ("add", "kept", True) in seen)
        assert all(name != "ignored" for _, name, _ in seen)

        patch = MergePatch({"metadata": {"labels": {"keep": "no"}}})
        await k8s.patch(kinds.ConfigMap, "kept", patch, namespace=namespace)
        await eventually(lambda: ("delete", "kept", False) in seen, timeout=30)
        with pytest.raises(NotFound):
            await cache.get(kinds.ConfigMap, "kept", namespace=namespace)

        patch = MergePatch({"metadata": {"labels": {"keep": "yes"}}})
        await k8s.patch(kinds.ConfigMap, "kept", patch, namespace=namespace)
        await eventually(lambda: seen[-1] == ("add", "kept", False), timeout=30)
    finally:
        await cache.stop(5)


async def test_reads_through_the_consistent_reader_see_own_writes(
    k8s: Client, namespace: str, cache: Cache
) -> None:
    """A read right after a write through the tracking client sees that write.

    Create, update, status-less patch and delete through ``cache.tracking_client()``; an
    immediate read through ``cache.reader()`` returns the written version (or NotFound
    after the delete), never the one before.
    """
    await cache.wait_for_sync(30)
    client = cache.tracking_client(k8s)
    reader = cache.reader(read_after_write_timeout=10)
    cache.informer(kinds.ConfigMap)
    await cache.wait_for_sync(30)
    for round_ in range(20):
        created: JsonObject = await client.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"raw-{round_}", "namespace": namespace},
                "data": {"v": "1"},
            }
        )
        got = await reader.get(kinds.ConfigMap, f"raw-{round_}", namespace=namespace)
        assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
        got["data"]["v"] = "2"
        updated = await client.update(got)
        again = await reader.get(kinds.ConfigMap, f"raw-{round_}", namespace=namespace)
        assert again["metadata"]["resourceVersion"] == updated["metadata"]["resourceVersion"]
        assert again["data"] == {"v": "2"}
        listing = await reader.list(kinds.ConfigMap, namespace=namespace)
        assert f"raw-{round_}" in {o["metadata"]["name"] for o in listing}
        await client.delete(kinds.ConfigMap, f"raw-{round_}", namespace=namespace)
        with pytest.raises(NotFound):
            await reader.get(kinds.ConfigMap, f"raw-{round_}", namespace=namespace)
    assert cache.informer(kinds.ConfigMap).expectations.pending() == []
