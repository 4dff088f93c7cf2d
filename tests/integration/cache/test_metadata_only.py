"""Metadata-only reads, watches and controllers against a real API server (and the fake)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.api.metadata import METADATA_ACCEPT, METADATA_LIST_ACCEPT, Metadata
from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client, UnknownKind
from setpoint.client.patch import MergePatch
from setpoint.controller import Builder, Context, ControllerOptions, Request
from setpoint.testing import FakeClient, FakeOptions, eventually

PAYLOAD = base64.b64encode(b"x" * 4096).decode()


def secret(name: str, namespace: str, **metadata: Any) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "type": "Opaque",
        "data": {"key": PAYLOAD},
    }


def shape(obj: JsonObject) -> tuple[Any, ...]:
    """What must match between the server and the fake: types, fields, metadata fields.

    Less managedFields, which the fake never writes (a documented difference of the fake
    for every object, not of metadata-only reads).
    """
    meta = sorted(set(obj["metadata"]) - {"managedFields"})
    return (obj.get("apiVersion"), obj.get("kind"), sorted(obj), meta)


async def reads(api: Any, namespace: str) -> list[tuple[Any, ...]]:
    """get, list and the first watch event of one Secret, metadata-only, as shapes."""
    got = await api.get(Metadata(kinds.Secret), "s", namespace=namespace)
    listed = await api.list(Metadata(kinds.Secret), namespace=namespace)
    async with api.watch(Metadata(kinds.Secret), namespace=namespace, timeout_seconds=5) as w:
        first = await anext(aiter(w))
    assert first.type == "ADDED"
    return [shape(got), *(shape(o) for o in listed), shape(first.object)]


async def test_metadata_reads_are_what_the_server_sends_and_the_fake_matches(
    k8s: Client, namespace: str
) -> None:
    """Metadata(kind) reads return the server's PartialObjectMetadata; the fake sends the same.

    get, list and watch of Metadata(Secret) return apiVersion meta.k8s.io/v1, kind
    PartialObjectMetadata and the whole metadata (equal to the full object's), no data;
    the FakeClient answers the same reads with the same fields.
    """
    full = await k8s.create(secret("s", namespace, labels={"app": "web"}))
    partial = await k8s.get(Metadata(kinds.Secret), "s", namespace=namespace)
    assert partial == {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": full["metadata"],
    }
    server = await reads(k8s, namespace)
    with pytest.raises(UnknownKind, match="PartialObjectMetadata"):
        await k8s.update(partial)  # an object without its data is never written back
    # The server itself sends no data (the client cuts down only what a server that
    # ignores ``as=`` would send): the raw answers of a get, a list and a watch.
    path = f"/api/v1/namespaces/{namespace}/secrets"
    for url, accept in ((f"{path}/s", METADATA_ACCEPT), (path, METADATA_LIST_ACCEPT)):
        raw = (await k8s.transport.request("GET", url, accept=accept)).body
        assert raw["kind"].startswith("PartialObjectMetadata")
        assert PAYLOAD not in str(raw)
    params = {"watch": "true", "timeoutSeconds": "5"}
    async with k8s.transport.stream(
        "GET", path, params=params, read_timeout=10, accept=METADATA_ACCEPT
    ) as resp:
        chunk = await anext(aiter(resp.chunks()))
    assert b'"kind":"PartialObjectMetadata"' in chunk
    assert PAYLOAD.encode() not in chunk

    fake = FakeClient(
        options=FakeOptions(require_namespaces=True),
        objects=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}],
    )
    await fake.create(secret("s", namespace, labels={"app": "web"}))
    assert await reads(fake, namespace) == server


async def test_a_metadata_informer_streams_its_list_and_caches_no_data(
    k8s: Client, namespace: str
) -> None:
    """A metadata-only informer streams its list (sendInitialEvents) and stores no data.

    Next to a full informer of the same kind in one cache: each has its own store, the
    metadata one holds PartialObjectMetadata only, and both follow a change.
    """
    for i in range(3):
        await k8s.create(secret(f"s{i}", namespace))
    cache = Cache(k8s, options=CacheOptions(namespaces=(namespace,)))
    await cache.start()
    try:
        meta = cache.informer(Metadata(kinds.Secret))
        full = cache.informer(kinds.Secret)
        await cache.wait_for_sync(30)
        assert meta.stats.streamed_lists == 1
        stored = [meta.store.get(ObjectKey(namespace, f"s{i}")) for i in range(3)]
        assert all(o is not None and set(o) == {"apiVersion", "kind", "metadata"} for o in stored)
        assert (await cache.get(kinds.Secret, "s0", namespace=namespace))["data"]["key"] == PAYLOAD
        changed = await k8s.patch(
            kinds.Secret,
            "s0",
            MergePatch({"metadata": {"labels": {"v": "2"}}}),
            namespace=namespace,
        )
        rv = changed["metadata"]["resourceVersion"]

        def caught_up() -> bool:
            versions = {
                (i.store.get(ObjectKey(namespace, "s0")) or {})["metadata"]["resourceVersion"]
                for i in (meta, full)
            }
            return versions == {rv}

        await eventually(caught_up, timeout=30, description="the change reached both informers")
    finally:
        await cache.stop(5)


async def test_a_controller_owning_secrets_metadata_only(k8s: Client, namespace: str) -> None:
    """owns(Secret, metadata_only=True): children map to their owner; reads see own writes.

    The reconcile of a ConfigMap creates its Secret child and reads it back at once through
    ctx.reader as Metadata(Secret): the read returns the version just written. A label
    change on the child made by someone else reconciles the owner again. The cache holds
    the children's metadata only (no full Secret informer, no data).
    """
    seen: list[tuple[str, str, str]] = []
    failures: list[str] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        owner = await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
        name = f"{request.name}-secret"
        child = secret(name, request.namespace)
        child["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": request.name,
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
        written = await ctx.client.apply(child, field_manager="metadata-test", force=True)
        read = await ctx.reader.get(Metadata(kinds.Secret), name, namespace=request.namespace)
        if read["metadata"]["resourceVersion"] != written["metadata"]["resourceVersion"]:
            failures.append(f"stale read of {name}")
        labels = read["metadata"].get("labels") or {}
        seen.append((request.name, read["kind"], labels.get("touched", "")))

    cache = Cache(k8s, options=CacheOptions(namespaces=(namespace,)))
    await cache.start()
    controller = (
        Builder("metadata-owner")
        .for_(kinds.ConfigMap)
        .owns(kinds.Secret, metadata_only=True)
        .with_options(ControllerOptions(reconcile_timeout=30, needs_leader_election=False))
        .build(reconcile, client=k8s, cache=cache)
    )
    await controller.start()
    try:
        for name in ("one", "two"):
            await k8s.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace},
                }
            )
        await eventually(
            lambda: {s[0] for s in seen} >= {"one", "two"}, timeout=30, description="reconciled"
        )
        await k8s.patch(
            kinds.Secret,
            "one-secret",
            MergePatch({"metadata": {"labels": {"touched": "yes"}}}),
            namespace=namespace,
        )
        await eventually(
            lambda: ("one", "PartialObjectMetadata", "yes") in seen,
            timeout=30,
            description="the owner reconciled after its child changed",
        )
        assert failures == []
        assert [(i.kind.kind, i.metadata_only) for i in cache.informers()] == [
            ("ConfigMap", False),
            ("Secret", True),
        ]
        children = list(cache.informer(Metadata(kinds.Secret)).store.values())
        assert {o["metadata"]["name"] for o in children} >= {"one-secret", "two-secret"}
        assert all("data" not in o for o in children)
    finally:
        await controller.stop(10)
        await cache.stop(5)
        await asyncio.sleep(0)
