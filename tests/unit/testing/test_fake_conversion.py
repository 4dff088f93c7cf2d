"""FakeClient conversion: stored at the storage version, converted on reads, watches, writes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from setpoint.api.conversion import CONVERSION_DATA_ANNOTATION
from setpoint.client.errors import InternalError
from setpoint.client.patch import ApplyPatch
from setpoint.testing.fake import FakeClient
from tests._support.machines import V1, V2, Machine, MachineV1, hub_object


def v1(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": V1,
        "kind": "Machine",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"image": "nginx:1.27", **spec},
    }


async def test_using_a_spoke_class_registers_the_conversion() -> None:
    fake = FakeClient()
    created = await fake.create(MachineV1.from_object(v1("m", size=3)))
    assert isinstance(created, MachineV1)
    hub = await fake.get(Machine, "m", namespace="ns")
    assert hub.spec.replicas == 3
    assert fake.lookup(Machine, "m", namespace="ns") is not None


async def test_objects_are_stored_at_the_storage_version() -> None:
    fake = FakeClient(resources=[MachineV1], objects=[v1("seeded", size=2)])
    raw = await fake.get(Machine.gvk, "seeded", namespace="ns")
    assert raw["apiVersion"] == V2
    assert raw["spec"]["replicas"] == 2
    assert CONVERSION_DATA_ANNOTATION not in raw["metadata"].get("annotations", {})


async def test_a_watch_at_a_spoke_version_sees_converted_objects() -> None:
    fake = FakeClient(resources=[MachineV1])
    watch = fake.watch(MachineV1.gvk, namespace="ns")
    obj = hub_object(name="w", namespace="ns")
    del obj["metadata"]["resourceVersion"]
    await fake.create(obj)
    async with asyncio.timeout(1):
        async for event in watch:
            if event.type == "ADDED":
                break
    await watch.aclose()
    assert event.object["apiVersion"] == V1
    assert event.object["spec"]["size"] == 3
    assert CONVERSION_DATA_ANNOTATION in event.object["metadata"]["annotations"]


async def test_server_side_apply_at_a_spoke_keeps_hub_only_fields() -> None:
    fake = FakeClient(resources=[MachineV1], objects=[hub_object(name="a", namespace="ns")])
    config = {"apiVersion": V1, "kind": "Machine", "metadata": {"name": "a", "namespace": "ns"}}
    config["spec"] = {"size": 9, "image": "nginx:1.27"}
    applied = await fake.patch(MachineV1.gvk, "a", ApplyPatch(config, force=True), namespace="ns")
    assert applied["spec"]["size"] == 9
    hub = await fake.get(Machine, "a", namespace="ns")
    assert hub.spec.replicas == 9
    assert hub.spec.paused is True


async def test_a_refusing_converter_fails_the_write_as_the_server_does() -> None:
    fake = FakeClient(resources=[MachineV1])
    with pytest.raises(InternalError, match=r"conversion webhook for conv\.setpoint\.dev/v1"):
        await fake.create(v1("bad", image="x!y"))
