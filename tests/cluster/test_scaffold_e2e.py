"""A scaffolded project's `make test-e2e` deploys its image on a node and leaves nothing."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from setpoint.testing.nodes import host_state, leftovers
from tests.e2e import test_scaffold as scaffold

# The scaffolding e2e's helpers, one home: the wheel fixture, the scrubbed variables, Steps.
wheel = scaffold.wheel
# Also the variables that would point the project at this session's binaries: it finds
# them in the cache, as a user's project does.
SCRUBBED = (*scaffold.SCRUBBED, "KUBEBUILDER_ASSETS", "SETPOINT_CONTROLPLANE_BIN")
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
    steps = scaffold.Steps(project, env)
    setpoint = [sys.executable, "-m", "setpoint"]
    steps.run("setpoint init", [*setpoint, "init", "--setpoint-from", wheel])
    steps.run(
        "setpoint create api",
        [*setpoint, "create", "api", "--group", "ship", "--version", "v1", "--kind", "Frigate"],
    )
    steps.run("make manifests (the project's venv)", ["make", "manifests"])
    files = project_files(project)
    before = host_state()

    e2e = steps.run("make test-e2e", ["make", "test-e2e"])

    summary = re.search(r"^=* ?(\d+) passed.*$", e2e.stdout, re.M)
    assert summary and summary.group(1) == "1", e2e.stdout[-3000:]
    assert "failed" not in summary.group(0) and "error" not in summary.group(0), summary
    assert "controlplane build --nodes" in e2e.stdout
    assert (project / "build" / "fleet-op.oci.tar").is_file()  # docker-build's archive
    assert leftovers(before, host_state(), []) == []
    assert project_files(project) == files
