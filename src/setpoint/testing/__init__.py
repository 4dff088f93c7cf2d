"""Testing kit: a real local control plane, pytest fixtures, waits, a fake client, faults.

A race recorded on a cluster replays over the fake (:func:`replay`), and every interleaving
of writers' requests can be explored (:func:`explore`).

Integration tests run against real Kubernetes. Import what you need::

    from setpoint.testing import ControlPlane, eventually

Each name is loaded on first use, with only the module that defines it.
"""

from typing import TYPE_CHECKING

from setpoint._lazy import lazy_module

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
    "ManualClock",
    "RecordedEvent",
    "Replay",
    "ReplayError",
    "RunningOperator",
    "Step",
    "UpgradeCheck",
    "Violation",
    "WaitTimeout",
    "WriterFunc",
    "context_for",
    "eventually",
    "eventually_passes",
    "explore",
    "find_binaries",
    "free_port",
    "install_crds",
    "replay",
    "run_operator",
    "serving_certificate",
]

if TYPE_CHECKING:  # the same names, eagerly, for type checkers and IDEs
    from setpoint.api.clock import ManualClock
    from setpoint.server.address import free_port
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
        WriterFunc,
        explore,
        replay,
    )
    from setpoint.testing.operator import RunningOperator, run_operator
    from setpoint.testing.upgrade import UpgradeCheck
    from setpoint.testing.waits import WaitTimeout, eventually, eventually_passes
    from setpoint.testing.webhook import LocalWebhook, serving_certificate

# Each public name -> the module that defines it; loaded on first use (PEP 562), so that
# importing one module of the kit (the CLI imports setpoint.testing.controlplane) does
# not import the fake client, the cache and the controller with it.
_EXPORTS: dict[str, str] = {
    "free_port": "setpoint.server.address",
    "Call": "setpoint.testing.faults",
    "ControlPlane": "setpoint.testing.controlplane",
    "ControlPlaneError": "setpoint.testing.controlplane",
    "ControlPlaneOptions": "setpoint.testing.controlplane",
    "Exploration": "setpoint.testing.interleavings",
    "FakeClient": "setpoint.testing.fake",
    "FakeOptions": "setpoint.testing.fake",
    "FakeRecorder": "setpoint.testing.context",
    "FakeWatch": "setpoint.testing.fake",
    "FaultInjectingClient": "setpoint.testing.faults",
    "FaultRule": "setpoint.testing.faults",
    "Faults": "setpoint.testing.faults",
    "LocalWebhook": "setpoint.testing.webhook",
    "ManualClock": "setpoint.api.clock",
    "RecordedEvent": "setpoint.testing.context",
    "Replay": "setpoint.testing.interleavings",
    "ReplayError": "setpoint.testing.interleavings",
    "RunningOperator": "setpoint.testing.operator",
    "Step": "setpoint.testing.interleavings",
    "UpgradeCheck": "setpoint.testing.upgrade",
    "Violation": "setpoint.testing.interleavings",
    "WaitTimeout": "setpoint.testing.waits",
    "WriterFunc": "setpoint.testing.interleavings",
    "context_for": "setpoint.testing.context",
    "eventually": "setpoint.testing.waits",
    "eventually_passes": "setpoint.testing.waits",
    "explore": "setpoint.testing.interleavings",
    "find_binaries": "setpoint.testing.controlplane",
    "install_crds": "setpoint.testing.crds",
    "replay": "setpoint.testing.interleavings",
    "run_operator": "setpoint.testing.operator",
    "serving_certificate": "setpoint.testing.webhook",
}


__getattr__, __dir__ = lazy_module("setpoint.testing", globals(), _EXPORTS)
