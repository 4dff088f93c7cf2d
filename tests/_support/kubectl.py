"""kubectl for tests that need no cluster: ``kubectl kustomize``, a fake discovery server.

The control plane's own kubectl (built with it) is preferred, so the suite runs the release
it tests against; on a machine where the plane is not built yet, a kubectl on ``PATH``
serves, and without either the test is skipped with what to do.
"""

from __future__ import annotations

import shutil

import pytest

from setpoint.testing.controlplane import ControlPlaneError, find_binaries

__all__ = ["kubectl_binary"]


def kubectl_binary() -> str:
    """The kubectl built with the control plane, else one on ``PATH``; skips without one."""
    try:
        built = find_binaries().kubectl
    except ControlPlaneError:
        built = None
    found = str(built) if built is not None else shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl: build the control plane (make controlplane) or put one on PATH")
    return found
