"""Testing kit: a real local control plane, pytest fixtures, waits, a fake client, faults.

A race recorded on a cluster replays over the fake (:func:`replay`), and every interleaving
of writers' requests can be explored (:func:`explore`).

Integration tests run against real Kubernetes. Import what you need::

    from setpoint.testing import ControlPlane, eventually
"""

from setpoint.testing.context import FakeRecorder, RecordedEvent, context_for
from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    find_binaries,
)
from setpoint.testing.crds import install_crds
from setpoint.testing.fake import FakeClient, FakeOptions, FakeWatch
from setpoint.testing.faults import Call, FaultInjectingClient, FaultRule, Faults
from setpoint.testing.interleavings import (
    Exploration,
    Replay,
    ReplayError,
    Step,
    Violation,
    Writer,
    explore,
    replay,
)
from setpoint.testing.operator import RunningOperator, run_operator
from setpoint.testing.upgrade import UpgradeCheck
from setpoint.testing.waits import WaitTimeout, eventually
from setpoint.testing.webhook import LocalWebhook, serving_certificate

__all__ = [
    "Call",
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "Exploration",
    "FakeClient",
    "FakeOptions",
    "FakeRecorder",
    "FakeWatch",
    "FaultInjectingClient",
    "FaultRule",
    "Faults",
    "LocalWebhook",
    "RecordedEvent",
    "Replay",
    "ReplayError",
    "RunningOperator",
    "Step",
    "UpgradeCheck",
    "Violation",
    "WaitTimeout",
    "Writer",
    "context_for",
    "eventually",
    "explore",
    "find_binaries",
    "install_crds",
    "replay",
    "run_operator",
    "serving_certificate",
]
