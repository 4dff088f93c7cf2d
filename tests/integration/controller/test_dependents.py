"""Dependents in order on the real server: a three-level chain, and a failing middle level.

The scenario is tests/_support/dependents_flow.py's, which the unit tests also run on the
fake client.
"""

from __future__ import annotations

import pytest

from setpoint.client import Client
from tests._support import dependents_flow
from tests._support.finalizer_flow import Backend


@pytest.fixture
def backend(test_crds: None, k8s: Client, namespace: str) -> Backend:
    """The real control plane, with the test CRDs and a namespace of the test's own."""
    return Backend(k8s, namespace, "real")


async def test_a_chain_of_dependents_waits_level_by_level_and_stops_at_a_failure(
    backend: Backend,
) -> None:
    """Each dependent is applied once the one before is ready; a refused one stops the chain.

    A controller for Gizmos applies a ConfigMap, a child Gizmo that must report Ready, and
    a second ConfigMap that depends on it. The parent's DependentsReady condition says
    Waiting (naming the child Gizmo, the last ConfigMap not applied) until the test sets
    the child's Ready condition; the owns() event then applies the last level and the
    condition turns AllReady; reconciling the settled chain again changes no object (no
    resourceVersion moves). A parent whose spec makes the middle child invalid gets
    Failed (the server's 422 in the message), a Stalled condition with reason
    DependentInvalid and no third level; fixing its spec lets the chain go on.
    """
    await dependents_flow.chain_in_a_controller(backend)
