"""scripts/node_spike.py (``make node-spike``): the Pods its checks run.

The spike needs root and a node's packages, so it runs by hand. The node logic it calls
(images, configurations, checks) moved to setpoint.testing.nodes and is tested in
tests/unit/testing/test_nodes.py; what stays in the script is checked here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "node_spike.py"


@pytest.fixture(scope="module")
def spike() -> ModuleType:
    spec = importlib.util.spec_from_file_location("setpoint_node_spike", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_network_pods_run_without_the_probed_pods_extras(spike: ModuleType) -> None:
    pod = spike.pod_on("client", "node-a", "echo hi")
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["nodeName"] == "node-a"
    assert container["command"] == ["/bin/sh", "-c", "echo hi"]
    assert "readinessProbe" not in container and "volumes" not in pod["spec"]
    assert "readinessProbe" in spike.POD["spec"]["containers"][0]  # the template is untouched


def test_the_pods_run_the_image_the_nodes_are_loaded_with(spike: ModuleType) -> None:
    from setpoint.testing.nodes import BUSYBOX_IMAGE

    assert spike.POD["spec"]["containers"][0]["image"] == BUSYBOX_IMAGE
    assert spike.pod_on("x", "n", "true")["spec"]["containers"][0]["image"] == BUSYBOX_IMAGE
