"""config/default builds with kustomize, with either source of webhook certificates."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.testing.controlplane import find_binaries

from .tenants_support import CONFIG_DIR


def rendered(config: Path) -> list[dict[str, Any]]:
    """Every object ``kubectl kustomize <config>/default`` renders."""
    kubectl = find_binaries().kubectl
    assert kubectl is not None
    done = subprocess.run(
        [str(kubectl), "kustomize", str(config / "default")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def build(config: Path) -> dict[str, dict[str, Any]]:
    """``kubectl kustomize <config>/default``, by kind (the last object of each kind)."""
    return {doc["kind"]: doc for doc in rendered(config)}


def manager_container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_default_layout_manages_its_own_certificates() -> None:
    """Self-managed: the flags name the prefixed Secret, Service and caBundle targets."""
    objects = build(CONFIG_DIR)
    args = manager_container(objects)["args"]
    assert "--webhook-cert-secret=tenants-webhook-server-cert" in args
    assert "--webhook-service=tenants-webhook-service" in args
    assert "--webhook-inject=crd/tenants.tenants.setpoint.dev" in args
    hooks = objects["ValidatingWebhookConfiguration"]
    assert f"--webhook-inject=validating/{hooks['metadata']['name']}" in args
    service = hooks["webhooks"][0]["clientConfig"]["service"]
    assert (service["namespace"], service["name"]) == ("tenants-system", "tenants-webhook-service")
    assert objects["Service"]["metadata"]["name"] == service["name"]
    role = objects["Role"]  # the last Role: the certificate Secret's
    assert role["metadata"]["name"] == "tenants-webhook-certificate-role"
    assert role["rules"][0]["resources"] == ["secrets"]
    assert "Certificate" not in objects


def test_the_cert_manager_layout_mounts_the_secret_and_asks_for_injection(
    tmp_path: Path,
) -> None:
    """With ../certmanager: a Certificate, the Secret mounted, inject-ca-from on both targets."""
    config = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, config)
    default = config / "default" / "kustomization.yaml"
    default.write_text(default.read_text().replace("- ../certificates", "- ../certmanager"))
    objects = build(config)
    certificate = objects["Certificate"]
    source = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    assert source == "tenants-system/tenants-serving-cert"
    for kind in ("CustomResourceDefinition", "ValidatingWebhookConfiguration"):
        assert objects[kind]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == source
    container = manager_container(objects)
    assert "--webhook-cert-dir=/etc/webhook/certs" in container["args"]
    assert not any(a.startswith("--webhook-cert-secret") for a in container["args"])
    volumes = objects["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "webhook-certs",
        "secret": {"secretName": certificate["spec"]["secretName"]},
    } in (volumes)
    issuer = objects["Issuer"]["metadata"]["name"]
    assert certificate["spec"]["issuerRef"]["name"] == issuer


def test_the_admission_policy_names_the_operator_as_kustomize_renames_it() -> None:
    """config/policy: the binding follows the prefixed policy; CEL names the rendered account.

    kustomize cannot rewrite text inside CEL, so the username is written out; this test
    keeps it in step with the rendered ServiceAccount.
    """
    objects = build(CONFIG_DIR)
    policy = objects["ValidatingAdmissionPolicy"]
    binding = objects["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == "tenants-operator-writes"
    account = objects["ServiceAccount"]["metadata"]
    username = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    (condition,) = policy["spec"]["matchConditions"]
    assert f"'{username}'" in condition["expression"]


@pytest.mark.parametrize("certificates", ["../certificates", "../certmanager"])
def test_metrics_are_https_for_authorized_scrapers_from_monitoring_namespaces(
    tmp_path: Path, certificates: str
) -> None:
    """Issue 27 finding 6, as in the scaffold: no plain-HTTP /metrics on the pod network.

    With either certificate component the manager serves ``--metrics-secure`` on :8443
    (TokenReview and SubjectAccessReview, which its service account may create), a
    ``metrics-reader`` ClusterRole exists for scrapers, and NetworkPolicies admit only
    namespaces labelled metrics=enabled to the metrics port and the API server's calls to
    the webhook port.
    """
    config = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, config)
    default = config / "default" / "kustomization.yaml"
    default.write_text(default.read_text().replace("- ../certificates", f"- {certificates}"))
    objects = rendered(config)

    def one(kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found

    pod = one("Deployment", "tenants-controller-manager")["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert {"--metrics-secure", "--metrics-bind-address=:8443"} <= set(container["args"])
    assert not [a for a in container["args"] if "8080" in a], container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8443, "probes": 8081, "webhook-server": 9443}

    account = {
        "kind": "ServiceAccount",
        "name": pod["spec"]["serviceAccountName"],
        "namespace": "tenants-system",
    }
    binding = one("ClusterRoleBinding", "tenants-metrics-auth-rolebinding")
    assert binding["subjects"] == [account]
    auth = one("ClusterRole", binding["roleRef"]["name"])
    assert sorted((r["apiGroups"][0], r["resources"][0], r["verbs"]) for r in auth["rules"]) == [
        ("authentication.k8s.io", "tokenreviews", ["create"]),
        ("authorization.k8s.io", "subjectaccessreviews", ["create"]),
    ]
    reader = one("ClusterRole", "tenants-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]

    metrics = one("NetworkPolicy", "tenants-allow-metrics-traffic")
    webhook = one("NetworkPolicy", "tenants-allow-webhook-traffic")
    for policy in (metrics, webhook):
        assert policy["metadata"]["namespace"] == "tenants-system"
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert metrics["spec"]["ingress"] == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}],
            "ports": [{"port": ports["metrics"], "protocol": "TCP"}],
        }
    ]
    (rule,) = webhook["spec"]["ingress"]
    assert rule["ports"] == [{"port": ports["webhook-server"], "protocol": "TCP"}]
