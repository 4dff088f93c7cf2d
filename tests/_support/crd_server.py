"""Helpers shared by the CRD integration tests: the fixture types, their CRDs, kubectl."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from setpoint.crd import find_resources, generate_crds
from setpoint.testing.controlplane import find_binaries
from tests._support.crd_golden import load_fixtures


def fixture_crds() -> list[dict[str, Any]]:
    """The CRDs generated for the fixture types, exactly as `setpoint generate crd` writes them."""
    manifests = generate_crds(find_resources([load_fixtures()]))
    return [manifest.documents[0] for manifest in manifests]


def is_established(crd: dict[str, Any]) -> bool:
    """Whether a CRD's status says Established=True."""
    conditions = crd.get("status", {}).get("conditions", [])
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run the kubectl built with the control plane.

    Returns stdout and fails on a non-zero exit; with ``check=False`` returns stdout plus
    stderr whatever the exit code (to assert on the error a user sees).
    """
    binary = find_binaries().kubectl
    assert binary is not None, "kubectl was not built with the control plane"
    result = subprocess.run(
        [str(binary), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if not check:
        return result.stdout + result.stderr
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed: {result.stderr}"
    return result.stdout
