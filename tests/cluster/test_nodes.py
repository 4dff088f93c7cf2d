"""A local plane with two real nodes runs a Deployment behind a Service, and goes away."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from setpoint.testing.controlplane import find_binaries
from setpoint.testing.nodes import (
    BUSYBOX_APPLETS,
    host_state,
    leftovers,
    processes_mentioning,
    write_oci_archive,
)
from setpoint.testing.supervisor import plane_dir as supervisor_dir

IMAGE = "localhost/setpoint-test/web:v1"
ANSWER = "served by a deployment on a setpoint node"


def _setpoint(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "setpoint", "controlplane", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Cluster:
    """The plane started by `setpoint controlplane up --nodes 2`, driven with kubectl."""

    def __init__(self, name: str, kubeconfig: str, work: Path) -> None:
        self.name = name
        self.kubeconfig = kubeconfig
        self.work = work
        kubectl = find_binaries().kubectl
        assert kubectl is not None
        self.kubectl = str(kubectl)

    def kc(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [self.kubectl, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**os.environ, "KUBECONFIG": self.kubeconfig},
            timeout=120,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr or proc.stdout}")
        return proc.stdout

    def apply(self, obj: dict[str, Any]) -> None:
        self.kc("apply", "-f", "-", stdin=json.dumps(obj))

    def describe_all(self) -> str:
        return self.kc(
            "get", "nodes,pods,deploy,rs,svc,endpointslices", "-A", "-o", "wide", check=False
        )


def _web_image(path: Path) -> None:
    """A second image, built here like the nodes' busybox, loaded by `load-image`."""
    from setpoint.testing.nodes import _layer

    busybox = Path("/bin/busybox")
    files: dict[str, tuple[bytes | None, int, str | None]] = {
        "bin": (None, 0o755, None),
        "bin/busybox": (busybox.read_bytes(), 0o755, None),
        "www": (None, 0o755, None),
        "www/index.html": (ANSWER.encode() + b"\n", 0o644, None),
    }
    for applet in BUSYBOX_APPLETS:
        files[f"bin/{applet}"] = (None, 0o777, "busybox")
    write_oci_archive(
        path,
        IMAGE,
        _layer(files),
        {"Entrypoint": ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"], "User": "65534:65534"},
    )


@contextmanager
def running_cluster(prefix: str, nodes: int, work: Path) -> Iterator[Cluster]:
    """A plane from `setpoint controlplane up --nodes N`; on exit `down`, checked.

    The host's state is read before `up`; after `down` no process, mount, network
    namespace, link, cgroup, sysctl change or host path of the plane may be left.
    """
    before = host_state()
    name = f"{prefix}-{os.getpid()}"
    up = _setpoint("up", "--nodes", str(nodes), "--name", name)
    assert up.returncode == 0, up.stderr
    kubeconfig = up.stdout.strip().removeprefix("export KUBECONFIG=")
    try:
        yield Cluster(name, kubeconfig, work)
    finally:
        down = _setpoint("down", "--name", name)
        plane_dir = str(Path(kubeconfig).parent)
        shutil.rmtree(supervisor_dir(name), ignore_errors=True)
        assert down.returncode == 0, down.stderr
        problems = leftovers(before, host_state(), processes_mentioning(plane_dir))
        assert problems == [], problems
        assert not Path(plane_dir).exists()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster("cluster-test", 2, tmp_path) as plane:
        yield plane


def test_two_nodes_run_a_deployment_that_a_pod_reaches_through_a_service(
    cluster: Cluster, tmp_path: Path
) -> None:
    """`setpoint controlplane up --nodes 2` runs a Deployment a Pod reaches through a Service.

    Two real nodes (kubelet, containerd, kube-proxy) join the plane and turn Ready; a
    second plane with nodes is refused before it starts anything; an
    image built here is loaded into both with `setpoint controlplane load-image`; a
    Deployment of it (non-root, read-only root filesystem, HTTP readiness probe) becomes
    Available through the plane's scheduler and controllers; a Pod on the other node gets
    its answer through the Service's ClusterIP (kube-proxy, the EndpointSlice controller);
    and `setpoint controlplane down` leaves no process, mount, namespace, link or cgroup.
    """
    nodes = cluster.kc("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split()
    assert sorted(nodes) == ["setpoint-node1", "setpoint-node2"]
    # A second plane with nodes is refused before it starts anything: the names are taken.
    second = _setpoint("up", "--nodes", "1", "--name", f"cluster-second-{os.getpid()}")
    shutil.rmtree(supervisor_dir(f"cluster-second-{os.getpid()}"), ignore_errors=True)
    assert second.returncode == 2 and "setpoint0" in second.stderr, second.stderr
    assert "exist already" in second.stderr
    archive = tmp_path / "web.oci.tar"
    _web_image(archive)
    missing = _setpoint("load-image", str(tmp_path / "missing.tar"), "--name", cluster.name)
    assert missing.returncode == 1 and "missing.tar" in missing.stderr, missing.stderr
    load = _setpoint("load-image", str(archive), "--name", cluster.name)
    assert load.returncode == 0, load.stderr
    assert "2 node(s)" in load.stdout

    labels = {"app": "web"}
    secure = {
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
                        "terminationGracePeriodSeconds": 2,
                        "containers": [
                            {
                                "name": "web",
                                "image": IMAGE,
                                "imagePullPolicy": "Never",
                                "ports": [{"containerPort": 8080}],
                                "securityContext": secure,
                                "readinessProbe": {
                                    "httpGet": {"path": "/index.html", "port": 8080},
                                    "periodSeconds": 1,
                                },
                            }
                        ],
                    },
                },
            },
        }
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        }
    )
    waited = subprocess.run(
        [cluster.kubectl, "wait", "deployment/web", "--for=condition=Available", "--timeout=120s"],
        env={**os.environ, "KUBECONFIG": cluster.kubeconfig},
        capture_output=True,
        text=True,
        check=False,
    )
    assert waited.returncode == 0, waited.stderr + cluster.describe_all()
    service_ip = cluster.kc("get", "service", "web", "-o", "jsonpath={.spec.clusterIP}")
    web_nodes = cluster.kc(
        "get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.nodeName}"
    ).split()
    client_node = "setpoint-node1" if "setpoint-node2" in web_nodes else "setpoint-node2"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client", "namespace": "default"},
            "spec": {
                "nodeName": client_node,
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
                "containers": [
                    {
                        "name": "client",
                        "image": "localhost/setpoint/busybox:v1",
                        "imagePullPolicy": "Never",
                        "command": [
                            "/bin/sh",
                            "-c",
                            # busybox's wget crashes in static glibc's resolver: nc.
                            "for i in 1 2 3 4 5; do out=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n'"
                            f' | nc -w 3 {service_ip} 80); echo "$out"; case "$out" in'
                            " *served*) exit 0;; esac; sleep 1; done; exit 1",
                        ],
                        "securityContext": secure,
                    }
                ],
            },
        }
    )
    deadline = time.monotonic() + 90
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kc("get", "pod", "client", "-o", "jsonpath={.status.phase}").strip()
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(1)
    logs = cluster.kc("logs", "client", check=False)
    assert phase == "Succeeded", f"{phase}: {logs}\n{cluster.describe_all()}"
    assert ANSWER in logs
