"""owns()/watches() with metadata_only: the children are watched and cached as metadata only.

Against the real API server: tests/integration/cache/test_metadata_only.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.metadata import Metadata
from setpoint.cache import Cache
from setpoint.controller import Builder, Context, ControllerOptions, Request
from setpoint.testing import FakeClient, eventually
from tests._support.kinds import Widget
from tests._support.widgets import WIDGET, fake_api, put, widget

PARENT = GroupVersionKind("test.setpoint.dev", "v1", "Parent")


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    fake.register(ResourceInfo(PARENT, "parents", True))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


def child(name: str, parent: str) -> dict[str, Any]:
    ref = {"apiVersion": "test.setpoint.dev/v1", "kind": "Parent", "name": parent,
           "uid": f"uid-{parent}", "controller": True}  # fmt: skip
    return widget(name, metadata={"ownerReferences": [ref]}, spec={"size": 3})


def test_metadata_only_sources_have_no_typed_class() -> None:
    builder = (
        Builder("parents")
        .for_(PARENT)
        .owns(Widget, metadata_only=True)
        .watches(Metadata(Widget), lambda obj: [])
        .owns(Widget)
    )
    sources = builder._sources
    assert [(s.metadata_only, s.typed) for s in sources] == [
        (True, None),
        (True, None),
        (False, Widget),
    ]
    assert sources[0].watched == Metadata(WIDGET)
    assert sources[2].watched == WIDGET
    assert "owns:Widget(metadata)" in repr(builder)


async def test_owned_children_watched_as_metadata_enqueue_their_owner(
    api: FakeClient, cache: Cache
) -> None:
    reads: list[dict[str, Any]] = []

    async def reconcile(ctx: Context, request: Request) -> None:
        listed = await ctx.reader.list(Metadata(WIDGET), namespace=request.namespace)
        reads.extend(listed.items)

    controller = (
        Builder("parents")
        .for_(PARENT)
        .owns(WIDGET, metadata_only=True)
        .with_options(ControllerOptions(reconcile_timeout=5))
        .build(reconcile, client=api, cache=cache)
    )
    await controller.start()
    try:
        await put(api, child("c1", "p1"))
        await eventually(lambda: len(reads) >= 1, timeout=5, description="p1 reconciled")
        assert reads[0]["kind"] == "PartialObjectMetadata"
        assert "spec" not in reads[0]
        # Only the metadata-only informer of the children exists: no full copy is cached.
        kinds = sorted((i.kind.kind, i.metadata_only) for i in cache.informers())
        assert kinds == [("Parent", False), ("Widget", True)]
    finally:
        await controller.stop(5)


async def test_a_metadata_mapper_receives_partial_objects(api: FakeClient, cache: Cache) -> None:
    mapped: list[dict[str, Any]] = []
    done: list[ObjectKey] = []

    def mapper(obj: dict[str, Any]) -> list[ObjectKey]:
        mapped.append(obj)
        return [ObjectKey("default", "target")]

    async def reconcile(ctx: Context, request: Request) -> None:
        done.append(request)

    controller = (
        Builder("mapped")
        .watches(WIDGET, mapper, metadata_only=True)
        .build(reconcile, client=api, cache=cache)
    )
    await controller.start()
    try:
        await put(api, widget("w", spec={"size": 1}))
        await eventually(lambda: bool(done), timeout=5, description="target reconciled")
        assert mapped and all(set(o) == {"apiVersion", "kind", "metadata"} for o in mapped)
    finally:
        await controller.stop(5)
