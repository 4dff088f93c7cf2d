"""config/default builds with kustomize, with either source of webhook certificates."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from setpoint.testing.controlplane import find_binaries

from .tenants_support import CONFIG_DIR


def build(config: Path) -> dict[str, dict[str, Any]]:
    """``kubectl kustomize <config>/default``, by kind (the last object of each kind)."""
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
    return {doc["kind"]: doc for doc in yaml.safe_load_all(done.stdout) if doc}


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
