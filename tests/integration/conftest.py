"""Integration tests run against the real local control plane (see setpoint.testing).

Every test here is marked ``integration``. The test kinds (tests/_support/kinds.py) are
installed once per session by ``test_crds``; ``gizmo_crd`` is the Gizmo kind, installed.
``spare_plane`` is a second control plane for the tests that restart its API server or compact
its etcd.
"""

from collections.abc import Iterator

import pytest
import pytest_asyncio

from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.testing import ControlPlane, ControlPlaneOptions
from tests._support.kinds import GIZMO, install_crds


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def test_crds(k8s: Client) -> None:
    """The Gizmo, Doodad and Dial CRDs (generated from tests/_support/kinds.py), served."""
    await install_crds(k8s)


@pytest_asyncio.fixture(loop_scope="session")
async def gizmo_crd(test_crds: None) -> GroupVersionKind:
    """The Gizmo kind (namespaced, status subresource), installed and served."""
    return GIZMO


@pytest.fixture(scope="session")
def spare_plane() -> Iterator[ControlPlane]:
    """A second control plane (no kube-controller-manager), started once and shared.

    For the tests that restart its API server, compact its etcd or cut clients off behind a
    proxy, which the session's plane must not suffer (the cache's watch recovery, the
    controller's outage, the parity of expired versions). Each uses namespaces of its own
    name; with no namespace controller here, a deleted namespace would never go.
    """
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
        yield plane
