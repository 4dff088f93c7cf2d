"""create_or_patch / create_or_update read through the client's cache: no GET per object."""

from __future__ import annotations

from typing import Any

import pytest

import setpoint as sp
from setpoint import kinds
from setpoint.cache import Cache
from setpoint.testing import FakeClient

COPIES = 50


def copy(i: int, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"copy-{i}", "namespace": "default"},
        "data": {"value": value},
    }


@pytest.mark.parametrize("helper", [sp.create_or_patch, sp.create_or_update])
async def test_copies_in_the_cache_cost_no_get(helper: Any) -> None:
    """50 copies through a cached client: no GET; only the changed ones are written.

    A controller's ctx.client carries its cache. Keeping 50 copies that already match sends
    no request at all; after the source changes, each copy is written once and read from
    the cache, never fetched.
    """
    fake = FakeClient(objects=[copy(i, "v1") for i in range(COPIES)])
    cache = Cache(fake)
    cache.informer(kinds.ConfigMap)
    await cache.start()
    await cache.wait_for_sync(10)
    client = cache.tracking_client(fake)
    try:

        def to(value: str) -> Any:
            def mutate(obj: dict[str, Any]) -> None:
                obj["data"] = {"value": value}

            return mutate

        gets, writes = len(fake.faults.calls_to("get")), len(fake.faults.calls)
        for i in range(COPIES):
            result = await helper(client, copy(i, "v1"), to("v1"))
            assert result.outcome is sp.OperationResult.UNCHANGED
        assert len(fake.faults.calls_to("get")) == gets
        assert len(fake.faults.calls) == writes  # no request of any kind

        for i in range(COPIES):
            result = await helper(client, copy(i, "v1"), to("v2"))
            assert result.outcome is sp.OperationResult.UPDATED
        assert len(fake.faults.calls_to("get")) == gets
        stored = fake.lookup(kinds.ConfigMap, "copy-7", namespace="default")
        assert stored is not None and stored["data"] == {"value": "v2"}
    finally:
        await cache.stop(5)


async def test_a_stale_cached_copy_is_retried_from_the_server() -> None:
    """The cache lags a write made elsewhere: the guarded write fails once, then a GET wins."""
    fake = FakeClient(objects=[copy(0, "v1")])
    cache = Cache(fake)
    cache.informer(kinds.ConfigMap)
    await cache.start()
    await cache.wait_for_sync(10)
    client = cache.tracking_client(fake)
    try:
        await cache.stop(5)  # the cache stops following: its copy goes stale
        other = fake.lookup(kinds.ConfigMap, "copy-0", namespace="default")
        assert other is not None
        other["data"] = {"value": "by-someone-else", "extra": "kept"}
        await fake.update(other)

        def mutate(obj: dict[str, Any]) -> None:
            obj["data"]["value"] = "mine"

        result = await sp.create_or_patch(client, copy(0, "v1"), mutate)
        assert result.outcome is sp.OperationResult.UPDATED
        stored = fake.lookup(kinds.ConfigMap, "copy-0", namespace="default")
        assert stored is not None
        assert stored["data"] == {"value": "mine", "extra": "kept"}
        assert len(fake.faults.calls_to("get")) == 1  # the retry's fresh read
    finally:
        await cache.stop(5)
