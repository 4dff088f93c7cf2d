"""External event sources on the real server: a channel and a per-object poller.

The scenario is tests/_support/sources_flow.py's, which the unit tests also run on the fake
client; the tenants example's test_directory_drift.py polls a SQLite file end to end.
"""

from __future__ import annotations

import pytest

from setpoint.client import Client
from tests._support import sources_flow
from tests._support.finalizer_flow import Backend


@pytest.fixture
def backend(test_crds: None, k8s: Client, namespace: str) -> Backend:
    """The real control plane, with the test CRDs and a namespace of the test's own."""
    return Backend(k8s, namespace, "real")


async def test_keys_from_a_channel_and_from_changed_outside_values_are_reconciled(
    backend: Backend,
) -> None:
    """A per-object poller reconciles the one object whose outside value changed.

    A controller for Gizmos has a ChannelSource and a PerObjectPollingSource polling an
    in-memory value per Gizmo every 0.2 s, over the keys in the controller's cache. After
    both Gizmos are reconciled and the controller is idle, one value changes: that Gizmo
    is reconciled again, the other is not, and the source counts one key enqueued. A key
    sent on the channel, with no object behind it, is reconciled as well.
    """
    await sources_flow.channel_and_per_object_poller(backend)
