"""The tenants operator installed on real nodes by dist/install.yaml, its Helm chart and OLM."""

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
from tests._support.shipping import build_olm, build_tool, install_plan_rbac
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


def _olm_env(plane: Cluster, home: Path) -> dict[str, str]:
    """olm's environment: the plane's kubeconfig, and a HOME of its own (a kube client
    without HOME writes .kube/ into its working directory)."""
    home.mkdir(exist_ok=True)
    return {"KUBECONFIG": plane.kubeconfig, "HOME": str(home), "PATH": "/usr/bin:/bin"}


def _csv_phase(plane: Cluster, csv: str) -> str:
    return plane.kc(
        "get", "csv", csv, "-n", NAMESPACE, "-o", "jsonpath={.status.phase}", check=False
    ).strip()


def test_olm_installs_the_tenants_bundle(one_node: Cluster, tmp_path: Path) -> None:
    """OLM's olm-operator installs the tenants bundle from its ClusterServiceVersion.

    OLM's CRDs are applied and its ``olm`` operator (v0.46.0, built from Go modules by
    scripts/build_olm.py) runs as a host process against the one-node plane. The bundle of
    ``setpoint generate bundle`` is installed as OLM installs one without a catalog: its CRD
    and other manifests, the ServiceAccount and RBAC an InstallPlan would create, then its
    ClusterServiceVersion in a namespace whose OperatorGroup targets all namespaces (the
    Deployment's claim swapped for an emptyDir, as above). olm-operator creates the
    Deployment, the webhook Service, its own serving certificate, the validating webhook
    configuration and the CRD's conversion webhook; the CSV reaches phase Succeeded, a v1
    Tenant passes the validating webhook and turns Ready, and a v1alpha1 Tenant converges
    through the conversion webhook. Deleting the CSV removes the Deployment, Service,
    certificate, webhook configuration, account and roles.
    """
    plane = one_node
    olm, olm_crds = build_olm()
    bundle = tmp_path / "bundle"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "setpoint", "generate", "bundle", "tenants"),
            *("--output-dir", str(bundle), "--image", IMAGE),
        ],
        cwd=TENANTS,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    plane.kc("apply", "--server-side", "-f", str(olm_crds))
    _wait(plane, "crd", "--all", "--for=condition=Established")
    log = (tmp_path / "olm.log").open("w")
    operator = subprocess.Popen(
        [str(olm), "--namespace", NAMESPACE],
        env=_olm_env(plane, tmp_path / "olm-home"),
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _install_by_olm(plane, bundle, tmp_path / "olm.log")
    finally:
        operator.terminate()
        operator.wait(timeout=30)
        log.close()


def _install_by_olm(plane: Cluster, bundle: Path, log: Path) -> None:
    """The bundle installed, used and removed through OLM (``log`` is olm's output)."""

    def olm_said() -> str:
        return log.read_text()[-4000:]

    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    plane.apply(
        {
            "apiVersion": "operators.coreos.com/v1",
            "kind": "OperatorGroup",
            "metadata": {"name": "tenants", "namespace": NAMESPACE},
            "spec": {},
        }
    )
    manifests = bundle / "manifests"
    csv_file = next(manifests.glob("*.clusterserviceversion.yaml"))
    for path in sorted(manifests.glob("*.yaml")):
        if path != csv_file:
            plane.kc("apply", "--server-side", "-n", NAMESPACE, "-f", str(path))
    csv = yaml.safe_load(csv_file.read_text())
    csv["metadata"]["namespace"] = NAMESPACE
    deployment = csv["spec"]["install"]["spec"]["deployments"][0]
    deployment["spec"]["template"]["spec"]["volumes"] = [EMPTY_DIRECTORY]
    name = csv["metadata"]["name"]
    # What OLM's catalog operator would create first (InstallPlan steps): the
    # ServiceAccount and its RBAC; olm-operator checks them, then installs the rest.
    rbac = install_plan_rbac(csv, NAMESPACE)
    plane.apply({"apiVersion": "v1", "kind": "List", "items": rbac})
    plane.apply(csv)
    uid = plane.kc("get", "csv", name, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}")
    owner = {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "name": name,
        "uid": uid,
        "blockOwnerDeletion": False,
        "controller": False,
    }
    for item in rbac:
        if "namespace" in item["metadata"]:
            patch = json.dumps({"metadata": {"ownerReferences": [owner]}})
            plane.kc(
                "patch",
                item["kind"].lower(),
                item["metadata"]["name"],
                "-n",
                NAMESPACE,
                "-p",
                patch,
            )
    phase = ""
    for _ in range(120):
        phase = _csv_phase(plane, name)
        if phase == "Succeeded":
            break
        time.sleep(2)
    assert phase == "Succeeded", (
        phase,
        plane.kc("get", "csv", name, "-n", NAMESPACE, "-o", "yaml", check=False)[-3000:],
        plane.describe_all(),
        olm_said(),
    )
    hooks = plane.kc(
        "get", "validatingwebhookconfigurations", "-l", f"olm.owner={name}", "-o", "name"
    ).split()
    assert len(hooks) == 1, (hooks, olm_said())
    _converges(plane, "by-olm")
    conversion = plane.kc("get", "crd", CRD, "-o", "jsonpath={.spec.conversion.webhook}")
    assert "tenants-controller-manager-service" in conversion, conversion
    _converges(plane, "by-olm-v1alpha1", "tenants.setpoint.dev/v1alpha1")
    _gone(plane, tenants=("by-olm", "by-olm-v1alpha1"))
    plane.kc("delete", "csv", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    left: list[str] = []
    for _ in range(60):
        left = plane.kc("get", "deploy,svc,secret,sa,role", "-n", NAMESPACE, "-o", "name").split()
        left = [n for n in left if "tenants-" in n]
        left += plane.kc(
            "get",
            "validatingwebhookconfigurations,clusterroles,clusterrolebindings",
            "-l",
            f"olm.owner={name}",
            "-o",
            "name",
        ).split()
        if not left:
            break
        time.sleep(2)
    assert left == [], (left, olm_said())
