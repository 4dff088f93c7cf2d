"""The tenants operator installed on real nodes by dist/install.yaml and by its Helm chart."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.testing.image import build_image
from tests._support.shipping import build_tool
from tests.cluster.test_nodes import Cluster, _setpoint, running_cluster

ROOT = Path(__file__).resolve().parents[2]
TENANTS = ROOT / "examples" / "tenants"
IMAGE = "tenants-operator:latest"
NAMESPACE = "tenants-system"
CRD = "tenants.tenants.setpoint.dev"
EMPTY_DIRECTORY = {"name": "directory", "emptyDir": {}}
"""The tenant directory's volume here: the plane binds no PersistentVolumeClaim (it runs no
volume binder or provisioner), so, as tests/cluster/test_tenants_deploy.py does, the
SQLite file lives in an emptyDir and the claim is left out."""
KEPT_OUT = "PersistentVolumeClaim"


@pytest.fixture
def one_node(tmp_path: Path) -> Iterator[Cluster]:
    """A plane with one node and the tenants image loaded into it."""
    archive = tmp_path / "tenants.oci.tar"
    build_image(archive, project=TENANTS, module="tenants", ref=IMAGE)
    with running_cluster("install-paths", 1, tmp_path) as plane:
        load = _setpoint("load-image", str(archive), "--name", plane.name)
        assert load.returncode == 0, load.stderr
        yield plane


def _wait(plane: Cluster, *args: str) -> None:
    done = subprocess.run(
        [plane.kubectl, "--kubeconfig", plane.kubeconfig, "wait", *args, "--timeout=180s"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (
        done.stderr,
        plane.kc("-n", NAMESPACE, "describe", "pods,pvc", check=False)[-4000:],
        plane.kc("get", "events", "-A", check=False)[-3000:],
        plane.kc("-n", NAMESPACE, "logs", "deploy/tenants-controller-manager", check=False)[-3000:],
    )


def _tenant(name: str, api_version: str = "tenants.setpoint.dev/v1") -> dict[str, Any]:
    spec: dict[str, Any] = (
        {"adminGroup": f"{name}-admins", "namespaces": [f"{name}-dev"]}
        if api_version.endswith("/v1")
        else {"admins": f"{name}-admins", "namespaces": [f"{name}-dev"]}
    )
    return {"apiVersion": api_version, "kind": "Tenant", "metadata": {"name": name}, "spec": spec}


def _converges(plane: Cluster, name: str, api_version: str = "tenants.setpoint.dev/v1") -> None:
    """A Tenant created (through the validating webhook) turns Ready with its namespace."""
    # The operator injects its CA into the webhook configurations as it starts: the first
    # creates may still meet the old caBundle.
    for _ in range(30):
        created = plane.kc(
            "apply", "-f", "-", stdin=json.dumps(_tenant(name, api_version)), check=False
        )
        if created:
            break
        time.sleep(2)
    else:
        plane.apply(_tenant(name, api_version))  # the last try, failing with kubectl's error
    _wait(plane, f"tenant.tenants.setpoint.dev/{name}", "--for=condition=Ready")
    plane.kc("get", "namespace", f"{name}-dev")


def _gone(plane: Cluster, *namespaces: str, tenants: tuple[str, ...] = ()) -> None:
    """Delete ``tenants`` (their finalizer runs in the operator); wait for ``namespaces`` and
    each tenant's namespace to be gone."""
    for name in tenants:
        plane.kc("delete", "tenant", name, "--wait=true", "--timeout=120s")
    wanted = {f"namespace/{n}" for n in (*namespaces, *(f"{t}-dev" for t in tenants))}
    left: set[str] = set()
    for _ in range(90):
        left = wanted & set(plane.kc("get", "namespaces", "-o", "name").split())
        if not left:
            return
        time.sleep(2)
    raise AssertionError(f"namespaces not deleted: {sorted(left)}")


def _without_version(helm: str, chart: Path, version: str) -> None:
    """The chart's CRD without one of its versions (the chart before an upgrade adds it):
    templates/crds.yaml as Helm renders it into tenants-system, less ``version``."""
    rendered = subprocess.run(
        [
            helm,
            "template",
            "tenants",
            str(chart),
            "-n",
            NAMESPACE,
            "--show-only",
            "templates/crds.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    crd = yaml.safe_load(rendered.stdout)
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] != version]
    (chart / "templates" / "crds.yaml").write_text(yaml.safe_dump(crd))


def test_tenants_installs_by_the_manifest_and_by_helm_and_upgrades(
    one_node: Cluster, tmp_path: Path
) -> None:
    """dist/install.yaml and the Helm chart each install a working tenants operator.

    ``setpoint generate installer`` writes dist/install.yaml from config/default (the
    tenant directory's claim swapped for an emptyDir: the plane binds no volume);
    ``kubectl apply -f`` installs it on a one-node plane, the Deployment turns Available
    (its probes pass on the node), a Tenant passes the validating webhook through the
    Service and turns Ready; deleting the manifest removes it all. Then ``helm install``
    (the same emptyDir through values) of a chart whose CRD lacks v1alpha1 installs the
    same operator (a Tenant converges), ``helm upgrade`` to examples/tenants/chart adds the
    v1alpha1 version (served through the conversion webhook: a v1alpha1 Tenant converges),
    and ``helm uninstall`` removes the operator's objects (the CRD stays, as
    helm.sh/resource-policy: keep says).
    """
    plane = one_node
    install = tmp_path / "install.yaml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "setpoint",
            "generate",
            "installer",
            "--kustomize",
            str(TENANTS / "config" / "default"),
            "--output",
            str(install),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    documents = [d for d in yaml.safe_load_all(install.read_text()) if d and d["kind"] != KEPT_OUT]
    for document in documents:
        if document["kind"] == "Deployment":
            document["spec"]["template"]["spec"]["volumes"] = [EMPTY_DIRECTORY]
    install.write_text("".join("---\n" + json.dumps(d) + "\n" for d in documents))
    plane.kc("apply", "-f", str(install))
    _wait(
        plane, "-n", NAMESPACE, "deployment/tenants-controller-manager", "--for=condition=Available"
    )
    _converges(plane, "by-manifest")
    _gone(plane, tenants=("by-manifest",))
    plane.kc("delete", "-f", str(install), "--wait=true", "--timeout=180s")
    _gone(plane, NAMESPACE)

    helm = str(build_tool("helm"))
    env = {
        "KUBECONFIG": plane.kubeconfig,
        # helm keeps its discovery cache under $HOME/.kube: without HOME it wrote
        # .kube/ into the working directory (the checkout).
        "HOME": str(tmp_path / "home"),
        "HELM_CACHE_HOME": str(tmp_path / "helm-cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "helm-config"),
        "HELM_DATA_HOME": str(tmp_path / "helm-data"),
        "PATH": "/usr/bin:/bin",
    }
    before = tmp_path / "chart-before"
    shutil.copytree(TENANTS / "chart", before)
    _without_version(helm, before, "v1alpha1")

    def run_helm(*args: str) -> None:
        result = subprocess.run(
            [helm, *args], capture_output=True, text=True, env=env, check=False, timeout=300
        )
        assert result.returncode == 0, (result.stdout, result.stderr, plane.describe_all())

    common = [
        *("-n", NAMESPACE, "--wait"),
        *("--set-json", f"volumes=[{json.dumps(EMPTY_DIRECTORY)}]"),
        *("--set-json", "extraObjects=[]"),
    ]
    run_helm("install", "tenants", str(before), "--create-namespace", *common)
    versions = plane.kc("get", "crd", CRD, "-o", "jsonpath={.spec.versions[*].name}").split()
    assert versions == ["v1"]
    _converges(plane, "by-helm")
    run_helm("upgrade", "tenants", str(TENANTS / "chart"), *common)
    versions = plane.kc("get", "crd", CRD, "-o", "jsonpath={.spec.versions[*].name}").split()
    assert sorted(versions) == ["v1", "v1alpha1"]
    _converges(plane, "by-helm-v1alpha1", "tenants.setpoint.dev/v1alpha1")
    _gone(plane, tenants=("by-helm", "by-helm-v1alpha1"))
    run_helm("uninstall", "tenants", "-n", NAMESPACE, "--wait")
    left = plane.kc("get", "deploy,sa,svc,role", "-n", NAMESPACE, "-o", "name").split()
    assert [name for name in left if "tenants-" in name] == []
    assert (
        plane.kc("get", "crd", CRD, "-o", "name").strip()
        == f"customresourcedefinition.apiextensions.k8s.io/{CRD}"
    )
