"""Pagination and watches against a real server."""

import asyncio

import pytest

from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.client import Client, ClientOptions
from setpoint.client.errors import Gone
from setpoint.testing import ControlPlane, eventually


async def make_configmaps(k8s: Client, namespace: str, count: int) -> None:
    sem = asyncio.Semaphore(20)

    async def one(i: int) -> None:
        async with sem:
            await k8s.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": f"cm-{i:04d}",
                        "namespace": namespace,
                        "labels": {"page-test": "yes"},
                    },
                }
            )

    await asyncio.gather(*(one(i) for i in range(count)))


async def test_pagination_follows_continue_tokens(k8s: Client, namespace: str) -> None:
    """A list larger than one page is returned whole, via limit/continue.

    list_page returns at most `limit` items and a continue token; list() follows
    the tokens and returns every object exactly once.
    """
    await make_configmaps(k8s, namespace, 125)
    first = await k8s.list_page(
        kinds.ConfigMap, namespace=namespace, labels={"page-test": "yes"}, limit=50
    )
    assert len(first.items) == 50
    assert first.continue_token
    second = await k8s.list_page(
        kinds.ConfigMap,
        namespace=namespace,
        labels={"page-test": "yes"},
        limit=50,
        continue_token=first.continue_token,
    )
    assert len(second.items) == 50
    assert second.continue_token
    assert {c["metadata"]["name"] for c in first}.isdisjoint(c["metadata"]["name"] for c in second)

    small_pages = Client(k8s.config, ClientOptions(page_size=40))
    try:
        everything = await small_pages.list(
            kinds.ConfigMap, namespace=namespace, labels={"page-test": "yes"}
        )
    finally:
        await small_pages.close()
    names = [c["metadata"]["name"] for c in everything]
    assert len(names) == 125
    assert len(set(names)) == 125
    assert everything.resource_version


async def test_watch_sees_every_event_type(k8s: Client, namespace: str) -> None:
    """A watch delivers ADDED, MODIFIED, DELETED, and BOOKMARK events.

    With sendInitialEvents the server ends the initial state with a BOOKMARK
    (annotated k8s.io/initial-events-end), which makes bookmarks observable
    without waiting for the server's periodic ones.
    """
    seen: list[tuple[str, str]] = []
    bookmark_rv: list[str] = []
    ready = asyncio.Event()

    async def consume() -> None:
        async with k8s.watch(
            kinds.ConfigMap,
            namespace=namespace,
            send_initial_events=True,
            fields={"metadata.name": "watched"},
        ) as watch:
            async for event in watch:
                if event.type == "BOOKMARK":
                    bookmark_rv.append(event.resource_version)
                    ready.set()
                    continue
                seen.append((event.type, event.object["metadata"]["name"]))
                if event.type == "DELETED":
                    return

    task = asyncio.create_task(consume())
    await asyncio.wait_for(ready.wait(), 30)
    cm: JsonObject = await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "watched", "namespace": namespace},
            "data": {"v": "1"},
        }
    )
    cm["data"]["v"] = "2"
    await k8s.update(cm)
    await k8s.delete(kinds.ConfigMap, "watched", namespace=namespace)
    await asyncio.wait_for(task, 30)
    assert seen == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]
    assert bookmark_rv and bookmark_rv[0]


async def test_watch_resumes_from_resource_version(k8s: Client, namespace: str) -> None:
    """Watching from a list's resourceVersion yields exactly the changes made after it."""
    await make_configmaps(k8s, namespace, 3)
    listing = await k8s.list(kinds.ConfigMap, namespace=namespace, labels={"page-test": "yes"})
    await k8s.delete(kinds.ConfigMap, "cm-0001", namespace=namespace)
    async with k8s.watch(
        kinds.ConfigMap,
        namespace=namespace,
        resource_version=listing.resource_version,
        labels={"page-test": "yes"},
    ) as watch:
        event = await asyncio.wait_for(anext(watch), 30)
    assert (event.type, event.object["metadata"]["name"]) == ("DELETED", "cm-0001")


async def test_watch_from_expired_resource_version_raises_gone(
    k8s: Client, namespace: str, control_plane: ControlPlane
) -> None:
    """A watch from a resourceVersion older than the server keeps raises Gone (410).

    etcd's history is compacted (kube-apiserver does this every five minutes)
    and kube-apiserver restarts, so its watch cache starts after the old
    version: nothing can replay from there. That is the signal for an informer
    to relist; the client must surface it, never swallow it.
    """
    old: JsonObject = await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "old", "namespace": namespace},
        }
    )
    stale = old["metadata"]["resourceVersion"]
    old["data"] = {"changed": "yes"}
    await k8s.update(old)
    control_plane.compact_etcd()
    control_plane.restart_apiserver()
    with pytest.raises(Gone) as info:
        async with k8s.watch(kinds.ConfigMap, namespace=namespace, resource_version=stale) as w:
            await asyncio.wait_for(anext(w), 30)
    assert info.value.code == 410


async def test_watch_closed_from_another_task_ends_cleanly(k8s: Client, namespace: str) -> None:
    """aclose() from another task stops a watch that is blocked waiting for events.

    Informers stop their watches this way on shutdown: the iterating task must
    end without an error, and the connection must be released.
    """
    watch = k8s.watch(kinds.ConfigMap, namespace=namespace)
    started = asyncio.Event()
    received: list[str] = []

    async def consume() -> None:
        started.set()
        async for event in watch:
            received.append(event.type)

    task = asyncio.create_task(consume())
    await started.wait()
    # the request reached the server and the consumer blocks on the open stream
    await eventually(lambda: watch._response is not None, timeout=10, description="stream open")
    await watch.aclose()
    await asyncio.wait_for(task, 10)
    assert task.exception() is None
