"""The tenants operator's image, built here, runs as a Pod on a node and turns Ready."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.testing.image import IMAGE_USER, build_image
from tests.cluster.test_nodes import Cluster, _setpoint, running_cluster

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "examples" / "tenants"
IMAGE = "tenants-operator:latest"
"""The name config/manager/manager.yaml runs; the archive carries its normalized form."""
CERT_SECRET = "tenants-webhook-server-cert"


@pytest.fixture
def one_node(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster("image-test", 1, tmp_path) as plane:
        yield plane


def _operator_pod() -> dict[str, Any]:
    """The Deployment's container (config/manager/manager.yaml) as a bare Pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tenants-operator", "namespace": "tenants-system"},
        "spec": {
            "serviceAccountName": "operator",
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "manager",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "args": [
                        "--health-probe-bind-address=:8081",
                        f"--webhook-cert-secret={CERT_SECRET}",
                        "--webhook-service=tenants-webhook-service",
                    ],
                    "env": [
                        {
                            "name": "TENANTS_DIRECTORY_PATH",
                            "value": "/var/lib/tenants/directory.db",
                        }
                    ],
                    "ports": [{"name": "probes", "containerPort": 8081}],
                    "readinessProbe": {
                        "httpGet": {"path": "/readyz", "port": "probes"},
                        "periodSeconds": 1,
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", "port": "probes"},
                        "periodSeconds": 5,
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "directory", "mountPath": "/var/lib/tenants"},
                    ],
                }
            ],
            # config/manager/manager.yaml mounts a PersistentVolumeClaim at /var/lib/tenants;
            # an emptyDir stands in for it here (no storage provisioner on the test nodes).
            "volumes": [
                {"name": "tmp", "emptyDir": {}},
                {"name": "directory", "emptyDir": {}},
            ],
        },
    }


def test_the_tenants_image_runs_as_a_pod_and_its_readiness_probe_passes(
    one_node: Cluster, tmp_path: Path
) -> None:
    """The tenants image, built without a registry, runs on a node and turns Ready.

    `build_image` builds the tenants operator's OCI image (Debian base from debootstrap,
    cached; setpoint and the operator in a virtualenv), `setpoint controlplane load-image`
    loads it into a 1-node plane, and a Pod runs it by the Deployment's short image name
    (`tenants-operator:latest`, which the kubelet looks up as `docker.io/library/...`,
    the name the archive carries) as the generated Deployment runs it:
    non-root (the image's own user 65532, not set in the Pod), read-only root filesystem, no
    capabilities, only emptyDirs on /tmp and on the directory file's folder writable. With the
    Tenant CRD installed and its service account allowed, the kubelet's readiness probe on
    /readyz passes (the informers synced through the `kubernetes` Service), the operator logs
    from inside the container, keeps its self-managed webhook certificate in a Secret, and its
    process runs as uid 65532. `down` leaves nothing behind.
    """
    archive = tmp_path / "tenants.oci.tar"
    result = build_image(archive, project=TENANTS, module="tenants", ref=IMAGE)
    assert result.archive.stat().st_size > 0
    load = _setpoint("load-image", str(archive), "--name", one_node.name)
    assert load.returncode == 0, load.stderr
    assert result.ref == "docker.io/library/tenants-operator:latest"
    assert result.ref in load.stdout

    kc = one_node.kc
    kc("apply", "-f", str(TENANTS / "config/crd/bases"))
    kc("create", "namespace", "tenants-system")
    kc("-n", "tenants-system", "create", "serviceaccount", "operator")
    kc(
        "create",
        "clusterrolebinding",
        "tenants-operator-test",
        "--clusterrole=cluster-admin",
        "--serviceaccount=tenants-system:operator",
    )
    one_node.apply(_operator_pod())
    wait = subprocess.run(
        [
            one_node.kubectl,
            "-n",
            "tenants-system",
            "wait",
            "pod/tenants-operator",
            "--for=condition=Ready",
            "--timeout=120s",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": one_node.kubeconfig},
        check=False,
    )
    logs = kc("-n", "tenants-system", "logs", "tenants-operator", check=False)
    assert wait.returncode == 0, (
        wait.stderr,
        one_node.describe_all(),
        kc("-n", "tenants-system", "describe", "pod", "tenants-operator", check=False),
        logs,
    )
    assert logs.strip(), "the operator logged nothing"
    # It wrote its webhook CA and serving certificate to a Secret, through the API.
    kc("-n", "tenants-system", "get", "secret", CERT_SECRET)
    status = kc("-n", "tenants-system", "exec", "tenants-operator", "--", "id", check=False)
    uid = IMAGE_USER.split(":", 1)[0]
    # The base image has `id` (coreutils); the container runs as the image's user.
    assert f"uid={uid}" in status, status
