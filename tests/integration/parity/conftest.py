"""The parity fixture: every test here runs once against the fake and once against the server.

``api`` is parametrized over ``("fake", "real")``. Both give a client and a
fresh namespace; the fake one requires namespaces to exist, as the server does.
``crds`` installs three CRDs in either backend: Gizmo (namespaced, status
subresource), Doodad (namespaced, no status subresource) and Dial
(cluster-scoped, status subresource).
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
import pytest_asyncio

from setpoint.api import kinds
from setpoint.client import AlreadyExists, Client
from setpoint.testing.fake import FakeClient, FakeOptions
from setpoint.testing.waits import eventually
from tests._support.parity import CRDS, DIAL, Api


@pytest.fixture(params=["fake", "real"])
def api(request: pytest.FixtureRequest) -> Api:
    """A backend: the fake (requiring namespaces, like the server) or the real control plane."""
    if request.param == "fake":
        namespace = f"parity-{uuid.uuid4().hex[:6]}"
        fake = FakeClient(
            options=FakeOptions(require_namespaces=True),
            objects=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}],
        )
        return Api(fake, namespace, "fake")
    client: Client = request.getfixturevalue("k8s")
    return Api(client, request.getfixturevalue("namespace"), "real")


@pytest_asyncio.fixture(loop_scope="session")
async def crds(api: Api) -> Api:
    """The parity CRDs, installed (and Established) in the backend."""
    for crd in CRDS:
        with contextlib.suppress(AlreadyExists):
            await api.client.create(crd)

    async def established() -> bool:
        for crd in CRDS:
            got = await api.client.get(kinds.CustomResourceDefinition, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(established, timeout=30, description="parity CRDs established")
    # Discovery must see the new kinds before the client can address them.
    await eventually(
        lambda: api.client.resource_info(DIAL), timeout=30, description="Dial kind discoverable"
    )
    return api
