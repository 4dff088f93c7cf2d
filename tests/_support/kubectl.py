"""kubectl for tests: the binary (``kubectl kustomize``, a fake discovery server) and a run.

The control plane's own kubectl (built with it) is preferred, so the suite runs the release
it tests against; on a machine where the plane is not built yet, a kubectl on ``PATH``
serves, and without either the test is skipped with what to do.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest

from setpoint.testing.controlplane import ControlPlaneError, find_binaries

__all__ = ["kubectl_binary", "run_kubectl"]


def kubectl_binary() -> str:
    """The kubectl built with the control plane, else one on ``PATH``; fails without one."""
    try:
        built = find_binaries().kubectl
    except ControlPlaneError:
        built = None
    found = str(built) if built is not None else shutil.which("kubectl")
    if found is None:
        pytest.fail("no kubectl: build the control plane (make controlplane) or put one on PATH")
    return found


async def run_kubectl(
    kubeconfig: Path, *args: str, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """Run kubectl against ``kubeconfig`` in a thread; ``(exit code, stdout, stderr)``.

    For tests that read what a user sees (a webhook's denial and its ``Warning:`` lines).
    """
    result = await asyncio.to_thread(
        subprocess.run,
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()
