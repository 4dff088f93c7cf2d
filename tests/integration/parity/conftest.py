"""The parity fixture: every test here runs once against the fake and once against the server.

``api`` is parametrized over ``("fake", "real")``. Both give a client and a
fresh namespace; the fake one requires namespaces to exist, as the server does.
``crds`` installs three CRDs in either backend: Gizmo (namespaced, status
subresource), Doodad (namespaced, no status subresource) and Dial
(cluster-scoped, status subresource).
"""

from __future__ import annotations

import uuid

import pytest
import pytest_asyncio

from setpoint.client import Client
from setpoint.testing.fake import FakeClient, FakeOptions
from tests._support.kinds import install_crds
from tests._support.parity import Api


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
    """The test CRDs (tests/_support/kinds.py), installed and served in the backend."""
    await install_crds(api.client)
    return api
