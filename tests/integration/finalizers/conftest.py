"""Fixtures of the finalizer integration tests.

``backend`` is parametrized over ``("fake", "real")``: the controller-level finalizer tests
of tests/_support/finalizer_flow.py run against both, so the fake is held to
the real API server's behaviour where those tests depend on it.
"""

from __future__ import annotations

import uuid

import pytest

from setpoint.client import Client
from setpoint.testing.fake import FakeClient, FakeOptions
from tests._support.finalizer_flow import Backend
from tests._support.kinds import CRDS


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
    request.getfixturevalue("test_crds")
    client: Client = request.getfixturevalue("k8s")
    return Backend(client, request.getfixturevalue("namespace"), "real")
