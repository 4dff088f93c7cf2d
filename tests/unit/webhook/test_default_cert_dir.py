"""The default certificate directory is known without a writable temporary directory."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import tempfile

def no_temp_dir():
    raise FileNotFoundError("No usable temporary directory found")

tempfile.gettempdir = no_temp_dir
from setpoint.webhook.server import DEFAULT_CERT_DIR
print(DEFAULT_CERT_DIR)
"""


def test_importing_the_webhook_server_needs_no_writable_temporary_directory() -> None:
    """A read-only root with no /tmp volume must not break the import (issue 29).

    In such a container `tempfile.gettempdir()` raises; the operator failed at start
    before the default was computed the way controller-runtime does: $TMPDIR or /tmp.
    """
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": "/nowhere/tmp"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "/nowhere/tmp/k8s-webhook-server/serving-certs"
    env.pop("TMPDIR")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "/tmp/k8s-webhook-server/serving-certs"
