"""Testing kit: a real local control plane, pytest fixtures, waits, and (later) a fake client.

Integration tests run against real Kubernetes. Import what you need::

    from setpoint.testing import ControlPlane, eventually
"""

from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    find_binaries,
)
from setpoint.testing.waits import WaitTimeout, eventually

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "WaitTimeout",
    "eventually",
    "find_binaries",
]
