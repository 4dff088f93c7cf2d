"""The namespace fixture's teardown: finalizers a test left behind do not block deletion."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from setpoint.api import kinds
from setpoint.client import Client, NotFound
from setpoint.testing import eventually_passes
from setpoint.testing.pytest_plugin import release_finalizers

PYPROJECT = """\
[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "session"
asyncio_default_test_loop_scope = "session"
"""

LEAVES_A_FINALIZER = """\
from pathlib import Path


async def test_leaves_a_finalizer(k8s, namespace):
    Path("namespace.txt").write_text(namespace)
    await k8s.create({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "stuck", "namespace": namespace,
                     "finalizers": ["example.com/stuck", "kubernetes.io/kept"]},
    })
"""


async def test_leftover_finalizers_are_removed_and_reported(
    k8s: Client, kubeconfig_path: Path, tmp_path: Path
) -> None:
    """A test that ends with a finalizer on an object: the plugin removes it, and says so.

    A project's test (run by pytest in a subprocess, on this session's control plane)
    creates a ConfigMap with a finalizer no controller handles. The namespace fixture
    removes that finalizer (keeping Kubernetes' own), the run's summary names the object
    and the finalizer, and the namespace is then deleted instead of staying Terminating.
    """
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "test_leftover.py").write_text(textwrap.dedent(LEAVES_A_FINALIZER))
    env = {
        **os.environ,
        "SETPOINT_USE_EXISTING_CLUSTER": "1",
        "KUBECONFIG": str(kubeconfig_path),
    }
    done = subprocess.run(  # noqa: ASYNC221 - the child's pytest owns its own event loop
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_leftover.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "setpoint: finalizers left behind by tests were removed" in done.stdout, done.stdout
    assert "ConfigMap stuck: example.com/stuck" in done.stdout
    assert "kubernetes.io/kept" not in done.stdout
    namespace = (tmp_path / "namespace.txt").read_text()

    async def stuck_removed() -> None:
        try:
            config = await k8s.get(kinds.ConfigMap, "stuck", namespace=namespace)
        except NotFound:
            return
        assert "example.com/stuck" not in (config["metadata"].get("finalizers") or [])

    await eventually_passes(stuck_removed, timeout=30)


async def test_release_finalizers_on_a_clean_namespace(k8s: Client, namespace: str) -> None:
    """Nothing to release: no object is changed, and the scan reports nothing."""
    await k8s.create(
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "plain", "namespace": namespace}}
    )  # fmt: skip
    assert await release_finalizers(k8s, namespace) == []


async def test_release_finalizers_reads_endpointslices_not_deprecated_endpoints(
    k8s: Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The teardown scan lists EndpointSlices, not v1 Endpoints: no deprecation warning.

    v1 Endpoints is deprecated (Kubernetes 1.33+: the API server answers every request for
    it with a ``Warning`` header that setpoint's client logs); listing it made every
    integration test log ``v1 Endpoints is deprecated``. EndpointSlices carry the same
    objects, so a finalizer left on one is still released.
    """
    await k8s.create(
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "slice", "namespace": namespace,
                      "finalizers": ["example.com/stuck"]},
         "addressType": "IPv4", "endpoints": []}
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="setpoint.client"):
        released = await release_finalizers(k8s, namespace)
    assert released == ["EndpointSlice slice: example.com/stuck"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "setpoint.client"]
    assert not [w for w in warnings if "deprecated" in w], warnings
