"""The generated manifests in config/ match the code (what CI checks with --check)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .tenants_support import EXAMPLE_DIR


@pytest.mark.parametrize("what", ["crd", "rbac", "webhook"])
def test_generated_manifests_are_up_to_date(what: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "setpoint",
            "generate",
            what,
            "tenants",
            "--output-dir",
            "config",
            "--check",
        ],
        cwd=EXAMPLE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout
