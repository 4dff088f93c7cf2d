"""A scaffolded project's `make test-e2e` deploys its image on a node and leaves nothing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from setpoint.testing.nodes import host_state, leftovers

ROOT = Path(__file__).resolve().parents[2]
# Variables that would make the project reach back into this checkout, its plane or the
# outer make (as tests/e2e/test_scaffold.py scrubs them).
SCRUBBED = (
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "KUBECONFIG",
    "KUBEBUILDER_ASSETS",
    "SETPOINT_CONTROLPLANE_BIN",
    "SETPOINT_CONTROLPLANE_SRC",
    "SETPOINT_USE_EXISTING_CLUSTER",
    "PYTEST_ADDOPTS",
    "PYTEST_CURRENT_TEST",
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAKEOVERRIDES",
)
# What the project's .gitignore ignores: build output, the venv, caches.
IGNORED = (".venv", "build", ".pytest_cache", ".mypy_cache", ".ruff_cache", "__pycache__")


def project_files(project: Path) -> dict[str, bytes]:
    """Every file of the project but what its .gitignore ignores."""
    return {
        path.relative_to(project).as_posix(): path.read_bytes()
        for path in sorted(project.rglob("*"))
        if path.is_file()
        and not any(
            part in IGNORED or part.endswith(".egg-info")
            for part in path.relative_to(project).parts
        )
    }


def run(
    title: str, command: Sequence[str | Path], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    began = time.monotonic()
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    print(f"{title}: {time.monotonic() - began:.1f}s")
    assert done.returncode == 0, (
        f"{title}: `{' '.join(map(str, command))}` exited {done.returncode}\n"
        f"{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    )
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The setpoint wheel, built from this checkout (as the release check builds it)."""
    out = tmp_path_factory.mktemp("wheel")
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )
    (built,) = out.glob("setpoint-*.whl")
    return built


def test_a_scaffolded_projects_make_test_e2e_deploys_it_on_a_node(
    tmp_path: Path, wheel: Path
) -> None:
    """A new project's `make test-e2e` runs its image on a node and leaves nothing behind.

    `setpoint init --setpoint-from <wheel>` and `create api` scaffold a project outside the
    checkout, whose Makefile installs the wheel built from this checkout into its own
    virtualenv. Its `make test-e2e` builds the image (`make docker-build`: no Docker, no
    registry), starts a control plane with one real node through the pytest plugin
    (`--setpoint-nodes 1`), loads the image, deploys `config/default` with `kubectl apply
    -k`, sees the manager's Deployment Available and the sample Frigate Ready (reconciled
    by the operator in its Pod, with the RBAC `make manifests` generated), and deletes it
    all. Afterwards the host has no process, mount, network namespace, link, cgroup or
    sysctl change left, and the project has no file that was not there before.
    """
    project = tmp_path / "fleet-op"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    setpoint = [sys.executable, "-m", "setpoint"]
    run("setpoint init", [*setpoint, "init", "--setpoint-from", wheel], project, env)
    run(
        "setpoint create api",
        [*setpoint, "create", "api", "--group", "ship", "--version", "v1", "--kind", "Frigate"],
        project,
        env,
    )
    run("make manifests (the project's venv)", ["make", "manifests"], project, env)
    files = project_files(project)
    before = host_state()

    e2e = run("make test-e2e", ["make", "test-e2e"], project, env)

    summary = re.search(r"^=* ?(\d+) passed.*$", e2e.stdout, re.M)
    assert summary and summary.group(1) == "1", e2e.stdout[-3000:]
    assert "failed" not in summary.group(0) and "error" not in summary.group(0), summary
    assert "controlplane build --nodes" in e2e.stdout
    assert (project / "build" / "fleet-op.oci.tar").is_file()  # docker-build's archive
    assert leftovers(before, host_state(), []) == []
    assert project_files(project) == files
