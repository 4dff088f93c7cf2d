"""The three shipping paths of the tenants operator, checked by the tools clusters use.

``setpoint generate helm``, ``generate bundle`` and ``generate installer`` (issue 33) each
render the tenants example; Helm itself lints and renders the chart, the Operator
Framework's validation library checks the bundle with its OperatorHub checks, and the local
control plane's API server accepts every object of each path in a server-side dry-run (the
plane has no nodes; tests/cluster/test_install_paths.py installs them for real).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests._support.kubectl import kubectl_binary
from tests._support.shipping import build_tool, compare_objects

ROOT = Path(__file__).resolve().parents[3]
TENANTS = ROOT / "examples" / "tenants"
NAMESPACE = "tenants-system"


def _setpoint(*args: str, cwd: Path = TENANTS) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "setpoint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module")
def helm() -> Path:
    """helm v4, built from its Go module on first use."""
    return build_tool("helm")


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tenants chart as the checkout holds it, regenerated: it must be up to date."""
    chart = tmp_path_factory.mktemp("chart") / "chart"
    shutil.copytree(TENANTS / "chart", chart)
    out = _setpoint(
        "generate", "helm", "tenants", "--crds", "templates", "--output-dir", str(chart)
    )
    assert set(line.split()[0] for line in out.splitlines()) == {"unchanged"}, out
    return chart


@pytest.fixture(scope="module")
def kustomized() -> list[dict[str, Any]]:
    """examples/tenants/config/default as kubectl kustomize renders it."""
    done = subprocess.run(
        [kubectl_binary(), "kustomize", str(TENANTS / "config" / "default")],
        capture_output=True,
        text=True,
        check=True,
    )
    return _documents(done.stdout)


def _helm_template(helm: Path, chart: Path, *values: str) -> list[dict[str, Any]]:
    args = [a for value in values for a in ("--set", value)]
    done = subprocess.run(
        [str(helm), "template", "tenants", str(chart), "-n", NAMESPACE, *args],
        capture_output=True,
        check=False,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return _documents(done.stdout)


def test_helm_lints_the_chart_and_renders_what_kustomize_renders(
    helm: Path, chart: Path, kustomized: list[dict[str, Any]]
) -> None:
    """helm lint --strict passes and helm template agrees with kubectl kustomize.

    The chart examples/tenants/chart (regenerated from the types: unchanged) passes Helm's
    strict lint with its defaults, with cert-manager certificates and with the
    ServiceMonitor on. Rendered into tenants-system, every object it shares with
    ``kubectl kustomize examples/tenants/config/default`` (CRD, RBAC, Deployment, webhook
    Service and configuration, the PVC from values) is the same object, field by field,
    apart from each tool's own labels; and they share at least those fifteen objects.
    """
    for values in (
        (),
        ("webhook.certificates=cert-manager", "metrics.serviceMonitor.enabled=true"),
    ):
        args = [a for value in values for a in ("--set", value)]
        done = subprocess.run(
            [str(helm), "lint", "--strict", str(chart), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    shared, differences = compare_objects(_helm_template(helm, chart), kustomized)
    assert differences == []
    kinds = {kind for kind, _, _ in shared}
    assert {
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "Deployment",
        "Service",
        "ValidatingWebhookConfiguration",
        "PersistentVolumeClaim",
    } <= kinds
    assert len(shared) >= 15


def test_cert_manager_values_mount_the_certificate_and_annotate_for_injection(
    helm: Path, chart: Path
) -> None:
    """With webhook.certificates=cert-manager the chart wires cert-manager in.

    The Deployment mounts the Certificate's Secret as its webhook certificate directory
    instead of managing a Secret; the CRD and the webhook configuration carry
    cert-manager.io/inject-ca-from naming the Certificate, which the chart renders with an
    Issuer.
    """
    rendered = _helm_template(helm, chart, "webhook.certificates=cert-manager")
    by_kind = {d["kind"]: d for d in rendered}
    container = by_kind["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert "--webhook-cert-dir=/etc/webhook/certs" in container["args"]
    assert not any(a.startswith("--webhook-cert-secret") for a in container["args"])
    for kind in ("CustomResourceDefinition", "ValidatingWebhookConfiguration"):
        annotations = by_kind[kind]["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/tenants-serving-cert"
    assert by_kind["Certificate"]["spec"]["secretName"] == "tenants-webhook-server-cert"
    assert "Issuer" in by_kind


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tenants operator's OLM bundle, generated."""
    directory = tmp_path_factory.mktemp("bundle")
    _setpoint("generate", "bundle", "tenants", "--output-dir", str(directory))
    return directory


def test_the_bundle_passes_the_operator_frameworks_validation(bundle: Path) -> None:
    """The OLM bundle passes operator-framework/api's validators with OperatorHub's checks.

    scripts/olmcheck runs the default bundle validators plus OperatorHubV2, standard
    capabilities and categories on the generated bundle: no errors. The one warning
    allowed is the library's guess that a rule for ``events`` uses an API removed in 1.25
    (it cannot tell events.k8s.io/v1 from v1beta1).
    """
    done = subprocess.run(
        [str(build_tool("olmcheck")), str(bundle)], capture_output=True, text=True, check=False
    )
    findings = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, findings or done.stderr
    assert [f for f in findings if f["level"] == "error"] == []
    others = [f for f in findings if "events" not in f["detail"]]
    assert others == []


def _kubectl(
    kubeconfig: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        check=False,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tenants_namespace(kubeconfig_path: Path) -> Iterator[str]:
    """tenants-system, created for the dry-runs (a dry-run Namespace holds nothing)."""
    created = _kubectl(kubeconfig_path, "create", "namespace", NAMESPACE)
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    yield NAMESPACE
    _kubectl(kubeconfig_path, "delete", "namespace", NAMESPACE, "--wait=false")


def _dry_run(kubeconfig: Path, documents: list[dict[str, Any]]) -> list[str]:
    text = "".join("---\n" + yaml.safe_dump(d) for d in documents)
    done = _kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=setpoint-test",
        "-f",
        "-",
        stdin=text,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_api_server_accepts_every_object_of_each_path(
    kubeconfig_path: Path,
    tenants_namespace: str,
    *,
    helm: Path,
    chart: Path,
    bundle: Path,
    tmp_path: Path,
) -> None:
    """Each path's objects pass the API server's validation in a server-side dry-run.

    dist/install.yaml (``setpoint generate installer`` over config/default), the chart as
    ``helm template`` renders it, and the bundle's manifests (its CRD, ClusterRole and
    NetworkPolicies, and the Deployment of the CSV's install strategy) are each applied with
    ``kubectl apply --server-side --dry-run=server``: every object is accepted, nothing is
    stored.
    """
    installer = tmp_path / "install.yaml"
    _setpoint("generate", "installer", "--output", str(installer))
    installed = _documents(installer.read_text())
    lines = _dry_run(kubeconfig_path, installed)
    assert len(lines) == len(installed)
    rendered = _helm_template(helm, chart)
    assert len(_dry_run(kubeconfig_path, rendered)) == len(rendered)
    manifests = [
        _documents(path.read_text())[0] for path in sorted((bundle / "manifests").glob("*.yaml"))
    ]
    (csv,) = [m for m in manifests if m["kind"] == "ClusterServiceVersion"]
    (deployment,) = csv["spec"]["install"]["spec"]["deployments"]
    objects = [m for m in manifests if m["kind"] != "ClusterServiceVersion"]
    objects.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": deployment["name"], "namespace": NAMESPACE},
            "spec": deployment["spec"],
        }
    )
    for obj in objects:
        if obj["kind"] in ("NetworkPolicy",):
            obj["metadata"]["namespace"] = NAMESPACE
    assert len(_dry_run(kubeconfig_path, objects)) == len(objects)
    stored = _kubectl(kubeconfig_path, "get", "deployments", "-n", NAMESPACE, "-o", "name")
    assert stored.stdout.strip() == ""


def test_a_scaffolded_project_ships_by_each_path(tmp_path: Path, helm: Path) -> None:
    """make build-installer, helm-chart and bundle work in a project setpoint init wrote.

    A project scaffolded with a kind and its defaulting and validating webhooks runs the
    three targets of its Makefile (with this checkout's setpoint as its virtualenv):
    dist/install.yaml holds the CRD, RBAC, Deployment and webhook configurations; the
    chart passes helm lint --strict and renders the CRD from crds/, the Deployment and both
    webhook configurations; the bundle passes the Operator Framework's validation.
    """
    project = tmp_path / "shop"
    project.mkdir()
    venv = Path(sys.executable).parent.parent
    setpoint = str(venv / "bin" / "setpoint")
    for args in (
        ["init", "--domain", "example.com"],
        ["create", "api", "--group", "ship", "--version", "v1", "--kind", "Frigate"],
        ["create", "webhook", "--kind", "Frigate", "--defaulting", "--validation"],
    ):
        done = subprocess.run(
            [setpoint, *args], cwd=project, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env["PATH"] = f"{Path(kubectl_binary()).parent}:{env['PATH']}"
    made = subprocess.run(
        [
            "make",
            "build-installer",
            "helm-chart",
            "bundle",
            f"VENV={venv}",
            "-o",
            f"{venv}/.installed-stamp",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    kinds = {d["kind"] for d in _documents((project / "dist" / "install.yaml").read_text())}
    assert {
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    } <= kinds
    lint = subprocess.run(
        [str(helm), "lint", "--strict", str(project / "chart")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = subprocess.run(
        [str(helm), "template", "shop", str(project / "chart"), "--include-crds"],
        capture_output=True,
        text=True,
        check=True,
    )
    rendered_kinds = {d["kind"] for d in _documents(rendered.stdout)}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    } <= rendered_kinds
    checked = subprocess.run(
        [str(build_tool("olmcheck")), str(project / "bundle")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
