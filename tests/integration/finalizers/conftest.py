"""Fixtures of the finalizer integration tests.

``backend`` is parametrized over ``("fake", "real")``: the controller-level finalizer tests
of tests/_support/finalizer_flow.py run against both, so the fake is held to
the real API server's behaviour where those tests depend on it.
"""

from __future__ import annotations

import contextlib
import functools
import uuid

import pytest
import pytest_asyncio

from setpoint.api import kinds
from setpoint.client import AlreadyExists, Client
from setpoint.testing.fake import FakeClient, FakeOptions
from setpoint.testing.waits import eventually
from tests._support.finalizer_flow import CRDS, GADGET, WIDGET, Backend


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def finalizer_crds(k8s: Client) -> None:
    """The Widget (status subresource) and Gadget (none) CRDs, served by the real server."""
    for crd in CRDS:
        with contextlib.suppress(AlreadyExists):
            await k8s.create(crd)

    async def established() -> bool:
        for crd in CRDS:
            got = await k8s.get(kinds.CustomResourceDefinition, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(established, timeout=60, description="finalizer test CRDs established")
    for kind in (WIDGET, GADGET):
        await eventually(
            functools.partial(k8s.resource_info, kind), timeout=30, description=f"{kind} served"
        )


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """The fake (requiring namespaces, like the server) or the real control plane."""
    if request.param == "fake":
        namespace = f"fin-{uuid.uuid4().hex[:6]}"
        fake = FakeClient(
            options=FakeOptions(require_namespaces=True),
            objects=[
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                *CRDS,
            ],
        )
        return Backend(fake, namespace, "fake")
    request.getfixturevalue("finalizer_crds")
    client: Client = request.getfixturevalue("k8s")
    return Backend(client, request.getfixturevalue("namespace"), "real")
