"""``setpoint generate helm|bundle|installer``: the files of the three shipping paths.

What Helm, kustomize, the Operator Framework's validation library and the API server say
about them is in tests/integration/cli/test_install_paths.py; these tests hold the
generators' own choices.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from setpoint.cli.bundle import BundleOptions, example_object, make_bundle
from setpoint.cli.helm import (
    ChartOptions,
    OperatorSources,
    chart_files,
    load_sources,
    render_values,
    values_spec,
    write_chart,
)
from setpoint.cli.installer import render_documents, set_image
from setpoint.cli.main import main
from setpoint.webhook.server import POD_CERT_DIR

ROOT = Path(__file__).resolve().parents[3]
TENANTS = str(ROOT / "examples" / "tenants" / "tenants")


@pytest.fixture(scope="module")
def tenants() -> OperatorSources:
    """The tenants operator's CRD, ClusterRole and webhook configuration, generated."""
    return load_sources([TENANTS])


def _spec(sources: OperatorSources) -> list[tuple[str, str, Any]]:
    return values_spec(sources, ChartOptions(name="tenants"))


def test_regenerating_keeps_the_values_the_author_set_and_added(
    tenants: OperatorSources,
) -> None:
    first = yaml.safe_load(render_values(_spec(tenants)))
    assert first["replicas"] == 1
    assert first["image"] == {"repository": "tenants", "tag": "", "pullPolicy": "IfNotPresent"}
    edited = copy.deepcopy(first)
    edited["replicas"] = 3
    edited["image"]["tag"] = "v2"
    edited["image"]["digest"] = "sha256:abc"  # a key the generator does not know
    edited["myTeam"] = {"owner": "platform"}  # a top-level key of the author's
    del edited["logLevel"]  # a default the author removed comes back
    again = yaml.safe_load(render_values(_spec(tenants), yaml.safe_dump(edited)))
    assert again["replicas"] == 3
    assert again["image"] == {
        "repository": "tenants",
        "tag": "v2",
        "pullPolicy": "IfNotPresent",
        "digest": "sha256:abc",
    }
    assert again["myTeam"] == {"owner": "platform"}
    assert again["logLevel"] == "info"


def test_values_that_are_not_a_mapping_are_refused(tenants: OperatorSources) -> None:
    with pytest.raises(ValueError, match="must be a YAML mapping"):
        render_values(_spec(tenants), "- a list\n")


def test_write_chart_twice_changes_nothing_and_keeps_edits(
    tenants: OperatorSources, tmp_path: Path
) -> None:
    options = ChartOptions(name="tenants")
    write_chart(tenants, options, tmp_path)
    values = tmp_path / "values.yaml"
    values.write_text(values.read_text().replace("replicas: 1", "replicas: 2"))
    statuses = {path.name: status for path, status in write_chart(tenants, options, tmp_path)}
    assert set(statuses.values()) == {"unchanged"}
    assert "replicas: 2" in values.read_text()


def test_chart_crds_go_to_crds_dir_with_the_default_service(tenants: OperatorSources) -> None:
    files = chart_files(tenants, ChartOptions(name="tenants"))
    crd = yaml.safe_load(files["crds/tenants.setpoint.dev_tenants.yaml"])
    service = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert service == {
        "name": "tenants-webhook-service",
        "namespace": "tenants-system",
        "path": "/convert",
        "port": 443,
    }
    assert "templates/crds.yaml" not in files


def test_templated_crds_follow_the_release_and_are_kept(tenants: OperatorSources) -> None:
    files = chart_files(tenants, ChartOptions(name="tenants", crds="templates"))
    text = files["templates/crds.yaml"]
    assert not any(path.startswith("crds/") for path in files)
    assert "helm.sh/resource-policy: keep" in text
    assert "namespace: {{ .Release.Namespace }}" in text
    assert 'name: {{ include "tenants.prefix" . }}webhook-service' in text


def test_the_manager_role_comes_from_the_rbac_declarations(tenants: OperatorSources) -> None:
    text = chart_files(tenants, ChartOptions(name="tenants"))["templates/manager-role.yaml"]
    assert 'name: {{ include "tenants.prefix" . }}manager-role' in text
    assert "tenants/finalizers" in text  # declared with @sp.rbac in tenants/controller.py


def test_the_deployment_injects_the_ca_into_every_webhook_it_serves(
    tenants: OperatorSources,
) -> None:
    text = chart_files(tenants, ChartOptions(name="tenants"))["templates/deployment.yaml"]
    assert "- --webhook-inject=crd/tenants.tenants.setpoint.dev" in text
    assert (
        '- --webhook-inject=validating/{{ include "tenants.prefix" . }}'
        "validating-webhook-configuration" in text
    )
    assert 'command: ["setpoint", "run", "tenants"]' in text
    assert "readOnlyRootFilesystem: true" in text


def test_an_operator_without_webhooks_disables_them(tenants: OperatorSources) -> None:
    plain = OperatorSources(
        package="plain",
        crds=tuple(
            {**crd, "spec": {**crd["spec"], "conversion": {"strategy": "None"}}}
            for crd in tenants.crds
        ),
        rbac=tenants.rbac,
        webhooks=(),
    )
    values = yaml.safe_load(render_values(values_spec(plain, ChartOptions(name="plain"))))
    assert values["webhook"]["enabled"] is False
    files = chart_files(plain, ChartOptions(name="plain"))
    assert "templates/webhook-configurations.yaml" not in files
    assert "--webhook-inject" not in files["templates/deployment.yaml"]


def _kustomized(tenants: OperatorSources) -> list[dict[str, Any]]:
    """What kubectl kustomize renders for the tenants operator, in short."""
    account = {"kind": "ServiceAccount", "name": "tenants-controller-manager"}
    crd = copy.deepcopy(tenants.crds[0])
    webhooks = copy.deepcopy(tenants.webhooks[0])
    webhooks["metadata"]["name"] = "tenants-validating-webhook-configuration"
    webhooks["webhooks"][0]["clientConfig"]["service"]["name"] = "tenants-webhook-service"
    manager_role = copy.deepcopy(tenants.rbac[0])
    manager_role["metadata"]["name"] = "tenants-manager-role"

    def binding(kind: str, name: str, role: str) -> dict[str, Any]:
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": "tenants-system"},
            "roleRef": {"kind": kind.removesuffix("Binding"), "name": role},
            "subjects": [{**account, "namespace": "tenants-system"}],
        }

    def role(kind: str, name: str, resource: str) -> dict[str, Any]:
        rules = [{"apiGroups": [""], "resources": [resource], "verbs": ["get"]}]
        return {"kind": kind, "metadata": {"name": name}, "rules": rules}

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenants-system"}},
        crd,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account["name"]}},
        manager_role,
        binding("ClusterRoleBinding", "tenants-manager-rolebinding", "tenants-manager-role"),
        role("Role", "tenants-leader-election-role", "configmaps"),
        binding(
            "RoleBinding", "tenants-leader-election-rolebinding", "tenants-leader-election-role"
        ),
        role("Role", "tenants-webhook-certificate-role", "secrets"),
        binding(
            "RoleBinding",
            "tenants-webhook-certificate-rolebinding",
            "tenants-webhook-certificate-role",
        ),
        role("ClusterRole", "tenants-metrics-reader", "pods"),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "tenants-webhook-service"}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "tenants-directory"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "tenants-controller-manager", "labels": {"a": "b"}},
            "spec": {
                "template": {
                    "spec": {
                        "serviceAccountName": account["name"],
                        "containers": [
                            {
                                "name": "manager",
                                "image": "tenants-operator:latest",
                                "args": [
                                    "--leader-elect",
                                    "--webhook-cert-secret=tenants-webhook-server-cert",
                                    "--webhook-service=tenants-webhook-service",
                                    "--webhook-inject=crd/tenants.tenants.setpoint.dev",
                                ],
                                "ports": [{"name": "webhook-server", "containerPort": 9443}],
                            }
                        ],
                    }
                }
            },
        },
        webhooks,
    ]


def _csv(files: dict[str, str]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(files["manifests/tenants.clusterserviceversion.yaml"])
    return loaded


def test_the_bundle_installs_the_deployment_with_olms_certificate(
    tenants: OperatorSources,
) -> None:
    result = make_bundle(tenants, _kustomized(tenants), BundleOptions(package="tenants"))
    install = _csv(result.files)["spec"]["install"]["spec"]
    (deployment,) = install["deployments"]
    assert deployment["name"] == "tenants-controller-manager"
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == ["--leader-elect", f"--webhook-cert-dir={POD_CERT_DIR}"]
    assert PurePosixPath(POD_CERT_DIR).parts == ("/", "tmp", "k8s-webhook-server", "serving-certs")
    assert install["clusterPermissions"][0]["rules"] == tenants.rbac[0]["rules"]
    assert install["permissions"][0]["rules"][0]["resources"] == ["configmaps"]  # not secrets


def test_the_bundle_lists_webhooks_and_leaves_out_what_olm_cannot_install(
    tenants: OperatorSources,
) -> None:
    result = make_bundle(tenants, _kustomized(tenants), BundleOptions(package="tenants"))
    definitions = {d["type"]: d for d in _csv(result.files)["spec"]["webhookdefinitions"]}
    assert definitions["ConversionWebhook"]["conversionCRDs"] == ["tenants.tenants.setpoint.dev"]
    validating = definitions["ValidatingAdmissionWebhook"]
    assert validating["webhookPath"] == "/validate-tenants-setpoint-dev-v1-tenant"
    assert validating["targetPort"] == 9443
    assert result.skipped == ("PersistentVolumeClaim/tenants-directory",)
    assert sorted(result.files) == [
        "bundle.Dockerfile",
        "manifests/tenants-metrics-reader_clusterrole.yaml",
        "manifests/tenants.clusterserviceversion.yaml",
        "manifests/tenants.tenants.setpoint.dev_customresourcedefinition.yaml",
        "metadata/annotations.yaml",
    ]
    annotations = yaml.safe_load(result.files["metadata/annotations.yaml"])["annotations"]
    assert annotations["operators.operatorframework.io.bundle.package.v1"] == "tenants"
    assert (
        "LABEL operators.operatorframework.io.bundle.channels.v1=alpha"
        in result.files["bundle.Dockerfile"]
    )


def test_owned_crds_carry_the_docstrings_and_examples_of_every_served_version(
    tenants: OperatorSources,
) -> None:
    csv = _csv(make_bundle(tenants, _kustomized(tenants), BundleOptions(package="tenants")).files)
    owned = {o["version"]: o for o in csv["spec"]["customresourcedefinitions"]["owned"]}
    assert owned["v1"]["description"].startswith("A tenant of the cluster")
    assert ":class:" not in owned["v1alpha1"]["description"]
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    assert [e["apiVersion"] for e in examples] == [
        "tenants.setpoint.dev/v1",
        "tenants.setpoint.dev/v1alpha1",
    ]
    assert examples[0]["spec"] == {"adminGroup": "example", "namespaces": ["example"]}


def test_an_example_the_schema_refuses_names_the_field(tenants: OperatorSources) -> None:
    crd = copy.deepcopy(tenants.crds[0])
    (v1,) = (v for v in crd["spec"]["versions"] if v["name"] == "v1")
    spec = v1["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["adminGroup"]["example"] = "x" * 300  # maxLength is 253
    with pytest.raises(ValueError, match="adminGroup"):
        example_object(crd)


def test_a_bundle_needs_a_deployment(tenants: OperatorSources) -> None:
    documents = [d for d in _kustomized(tenants) if d["kind"] != "Deployment"]
    with pytest.raises(ValueError, match="no Deployment"):
        make_bundle(tenants, documents, BundleOptions(package="tenants"))


def test_installer_sets_the_manager_image_only() -> None:
    documents: list[dict[str, Any]] = [
        {"kind": "Service", "metadata": {"name": "s"}},
        {
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "sidecar", "image": "proxy:1"},
                            {"name": "manager", "image": "old:1"},
                        ]
                    }
                }
            },
        },
    ]
    assert set_image(documents, "new:2") == 1
    containers = documents[1]["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == ["proxy:1", "new:2"]
    assert list(yaml.safe_load_all(render_documents(documents))) == documents


def test_generate_helm_check_fails_on_a_stale_chart(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    assert main(["generate", "helm", TENANTS, "--output-dir", str(chart), "--check"]) == 1
    assert not chart.exists()
    assert main(["generate", "helm", TENANTS, "--output-dir", str(chart)]) == 0
    assert main(["generate", "helm", TENANTS, "--output-dir", str(chart), "--check"]) == 0
    assert yaml.safe_load((chart / "Chart.yaml").read_text())["name"] == "tenants"


def test_installer_without_a_kustomization_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "installer", "--kustomize", str(tmp_path)]) == 1
    assert f"{tmp_path}/kustomization.yaml does not exist" in capsys.readouterr().err
    assert not (tmp_path / "dist").exists()


def test_bundle_maintainers_and_links_are_name_and_value() -> None:
    from setpoint.cli.bundle import _pair

    assert _pair("Ada Lovelace <ada@example.com>", "--maintainer") == (
        "Ada Lovelace",
        "ada@example.com",
    )
    assert _pair("Docs=https://example.com", "--link") == ("Docs", "https://example.com")
    with pytest.raises(ValueError, match="--maintainer 'nobody'"):
        _pair("nobody", "--maintainer")


def test_named_templates_carry_the_charts_name(tenants: OperatorSources) -> None:
    """Two operators' charts in one umbrella chart must not share a named template."""
    files = chart_files(tenants, ChartOptions(name="tenants"))
    assert '{{- define "tenants.prefix" -}}' in files["templates/_helpers.tpl"]
    assert not any('"operator.' in text for text in files.values())


def test_install_plan_rbac_is_what_olm_checks_before_it_installs() -> None:
    """The stand-in for OLM's InstallPlan: an account, a ClusterRole and a Role with their
    bindings, named as OLM names them, labelled with the CSV as owner, rules unchanged."""
    from tests._support.shipping import install_plan_rbac

    cluster_rules = [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]
    local_rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}]
    csv = {
        "metadata": {"name": "tenants.v0.1.0"},
        "spec": {
            "install": {
                "spec": {
                    "clusterPermissions": [{"serviceAccountName": "mgr", "rules": cluster_rules}],
                    "permissions": [{"serviceAccountName": "mgr", "rules": local_rules}],
                }
            }
        },
    }
    objects = install_plan_rbac(csv, "ns")
    by_kind = {o["kind"]: o for o in objects}
    assert [o["kind"] for o in objects] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ]
    assert by_kind["ClusterRole"]["metadata"]["name"] == "tenants.v0.1.0-mgr-cluster"
    assert "namespace" not in by_kind["ClusterRoleBinding"]["metadata"]
    assert by_kind["ClusterRole"]["rules"] == cluster_rules
    assert by_kind["Role"]["rules"] == local_rules
    assert by_kind["RoleBinding"]["metadata"]["namespace"] == "ns"
    assert by_kind["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "mgr", "namespace": "ns"}
    ]
    assert all(o["metadata"]["labels"]["olm.owner"] == "tenants.v0.1.0" for o in objects)
