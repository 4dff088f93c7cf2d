"""Parity: the fake converts versions with the same converters the server's webhook runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.conversion import CONVERSION_DATA_ANNOTATION
from setpoint.client import Client
from setpoint.client.errors import InternalError
from setpoint.client.patch import MergePatch
from setpoint.migrate.install import apply_crd
from setpoint.testing import LocalWebhook
from setpoint.testing.fake import FakeClient
from tests._support.machines import V1, V2, VERSIONS, Machine, MachineV1, MachineV1Beta1

if TYPE_CHECKING:
    from tests._support.parity import Api


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def real_machines(k8s: Client) -> AsyncIterator[LocalWebhook]:
    """The Machine CRD on the server, converting through a webhook on loopback."""
    async with LocalWebhook() as hook:
        hook.server.add_conversion(*VERSIONS)
        await apply_crd(k8s, hook.crd(*VERSIONS))
        try:
            yield hook
        finally:
            await k8s.delete(kinds.CustomResourceDefinition, "machines.conv.setpoint.dev")


@pytest.fixture
def machines(api: Api, request: pytest.FixtureRequest) -> Api:
    """Machines served in the backend: the fake learns the converters from the classes."""
    if isinstance(api.client, FakeClient):
        api.client.register(*VERSIONS)
    else:
        request.getfixturevalue("real_machines")
    return api


def v1_machine(api: Api, name: str, image: str = "nginx:1.27") -> dict[str, Any]:
    """A Machine written at v1 (the spoke: size, one image string, bare port numbers)."""
    return {
        "apiVersion": V1,
        "kind": "Machine",
        "metadata": {"name": name, "namespace": api.namespace},
        "spec": {"size": 2, "image": image, "ports": [80, 443], "safe": False},
    }


async def test_written_at_a_spoke_read_at_every_version(machines: Api) -> None:
    """A Machine written at v1 reads converted at v2 and v1beta1, and back at v1 unchanged.

    The fake stores it at the storage version and converts each read, as the server does
    through the webhook: same spec at each version, the hub's data in the conversion
    annotation of spoke reads only, typed reads parse at every version.
    """
    c, ns = machines.client, machines.namespace
    created = await c.create(v1_machine(machines, "spoke"))
    assert created["apiVersion"] == V1
    assert created["spec"] == {"size": 2, "image": "nginx:1.27", "ports": [80, 443], "safe": False}
    hub = await c.get(Machine, "spoke", namespace=ns)
    assert hub.spec.replicas == 2
    assert (hub.spec.image.repository, hub.spec.image.tag) == ("nginx", "1.27")
    assert [(p.name, p.port) for p in hub.spec.ports] == [("p80", 80), ("p443", 443)]
    assert hub.spec.mode == "Fast"
    assert CONVERSION_DATA_ANNOTATION not in hub.metadata.annotations
    beta = await c.get(MachineV1Beta1, "spoke", namespace=ns)
    assert beta.spec.replicas == 2
    assert CONVERSION_DATA_ANNOTATION in beta.metadata.annotations
    (listed,) = (await c.list(MachineV1, namespace=ns)).items
    assert listed.spec.image == "nginx:1.27"
    assert listed.spec.ports == [80, 443]


async def test_updates_and_patches_at_a_spoke_keep_hub_only_fields(machines: Api) -> None:
    """An update and a merge patch at v1 change what v1 says and keep what only v2 says.

    The object is created at v2 with a paused flag and a named UDP port; a v1 update of
    size and a v1 merge patch of the image (in v1's field names) leave both in place.
    """
    c, ns = machines.client, machines.namespace
    await c.create(
        {
            "apiVersion": V2,
            "kind": "Machine",
            "metadata": {"name": "keep", "namespace": ns},
            "spec": {
                "replicas": 1,
                "image": {"repository": "redis", "tag": "7"},
                "ports": [{"name": "resp", "port": 6379, "protocol": "UDP"}],
                "paused": True,
            },
        }
    )
    old = await c.get(MachineV1, "keep", namespace=ns)
    old.spec.size = 5
    updated = await c.update(old)
    assert updated.spec.size == 5
    patched = await c.patch(
        MachineV1, "keep", MergePatch({"spec": {"image": "redis:8"}}), namespace=ns
    )
    assert patched.spec.image == "redis:8"
    hub = await c.get(Machine, "keep", namespace=ns)
    assert hub.spec.replicas == 5
    assert (hub.spec.image.repository, hub.spec.image.tag) == ("redis", "8")
    assert hub.spec.paused is True
    assert [(p.name, p.port, p.protocol) for p in hub.spec.ports] == [("resp", 6379, "UDP")]


async def test_a_converter_that_refuses_an_object_is_an_internal_error(machines: Api) -> None:
    """A write the converter refuses fails with 500 InternalError naming the webhook and why.

    MachineV1.to_hub refuses an image with '!': the create is refused with the server's
    wording, ``conversion webhook for conv.setpoint.dev/v1, Kind=Machine failed:``, then the
    webhook's message naming the object and the converter's reason; nothing is stored.
    """
    c, ns = machines.client, machines.namespace
    with pytest.raises(InternalError) as info:
        await c.create(v1_machine(machines, "bad", image="bad!image"))
    message = str(info.value)
    assert "conversion webhook for conv.setpoint.dev/v1, Kind=Machine failed: " in message
    assert f"Machine {ns}/bad ({V1}) -> {V2}: MachineV1.to_hub() raised ValueError" in message
    assert "is not an image reference" in message
    assert (await c.list(Machine, namespace=ns)).items == []
