"""Typed resources end to end: the cache returns instances, the tracking client records them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

import setpoint as sp
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client, NotFound
from setpoint.controller import Builder, Context, Request, Result
from setpoint.testing import eventually
from tests._support.kinds import GIZMO


class GizmoSpec(sp.Model):
    size: int = 0


class GizmoStatus(sp.Model):
    size: int | None = None
    observed_generation: int | None = None
    config_map: str | None = None


@sp.resource(group=GIZMO.group, version=GIZMO.version, kind="Gizmo", plural="gizmos")
class Gizmo(sp.Resource):
    """The Gizmo of the controller tests, as a typed resource."""

    spec: GizmoSpec
    status: GizmoStatus | None = None


@pytest_asyncio.fixture(loop_scope="session")
async def cache(k8s: Client, namespace: str, gizmo_crd: GroupVersionKind) -> AsyncIterator[Cache]:
    c = Cache(k8s, options=CacheOptions(namespaces=(namespace,)))
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


async def test_a_typed_controller_reads_and_writes_typed_objects(
    k8s: Client, namespace: str, cache: Cache
) -> None:
    """A controller built for a typed Resource class gets typed objects from ctx.reader.

    It writes status with the typed object, and its next read of the object returns that
    write (read-after-write works with typed objects too). Mappers of typed kinds receive
    instances.
    """
    seen_types: list[type] = []
    mapped: list[str] = []
    read_back: list[tuple[str | None, str | None]] = []

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        try:
            obj = await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
        except NotFound:
            return None
        seen_types.append(type(obj))
        if obj.status is None or obj.status.size != obj.spec.size:
            obj.status = GizmoStatus(size=obj.spec.size, observed_generation=1)
            written = await ctx.client.replace_status(obj)
            again = await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
            read_back.append((written.metadata.resource_version, again.metadata.resource_version))
        return None

    def mapper(obj: Gizmo) -> list[ObjectKey]:
        assert isinstance(obj, Gizmo)
        mapped.append(obj.metadata.name or "")
        return []

    controller = (
        Builder("typed-gizmos")
        .for_(Gizmo)
        .watches(Gizmo, mapper)
        .build(reconcile, client=k8s, cache=cache)
    )
    await controller.start()
    try:
        await k8s.create(
            {
                "apiVersion": GIZMO.api_version,
                "kind": "Gizmo",
                "metadata": {"name": "typed", "namespace": namespace},
                "spec": {"size": 5},
            }
        )

        async def status_written_and_read_back() -> bool:
            # The server holds the status as soon as replace_status returns, but the
            # reconcile records its read-back one await later: wait for both.
            got = await k8s.get(Gizmo, "typed", namespace=namespace)
            return got.status is not None and got.status.size == 5 and bool(read_back)

        await eventually(status_written_and_read_back, timeout=60)
        assert set(seen_types) == {Gizmo}
        assert all(written == again for written, again in read_back)
        assert "typed" in mapped
        listed = await cache.list(Gizmo, namespace=namespace)
        assert [g.metadata.name for g in listed] == ["typed"]
        assert all(isinstance(g, Gizmo) for g in listed)
        assert controller.failure() is None
    finally:
        await controller.stop(10)
