"""setpoint init / create api / create webhook, without a cluster: files, names, conflicts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.cli.main import main
from setpoint.cli.scaffold.commands import create_api, create_webhook, init, setpoint_source
from setpoint.cli.scaffold.files import ScaffoldConflict
from setpoint.cli.scaffold.names import ScaffoldNameError, snake_case
from setpoint.cli.scaffold.project import Project, ProjectFileError, digest
from tests._support.kubectl import kubectl_binary

RUFF = Path(sys.executable).with_name("ruff")
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "shop-op"
    root.mkdir()
    init(root, domain="example.com")
    return root


def files_under(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_init_writes_the_layout_and_records_every_file(project: Path) -> None:
    recorded = Project.load(project)
    assert (recorded.name, recorded.domain, recorded.package) == (
        "shop-op",
        "example.com",
        "shop_op",
    )
    for path in (
        "pyproject.toml",
        "Makefile",
        "Dockerfile",
        "README.md",
        ".gitignore",
        "shop_op/__init__.py",
        "shop_op/controllers/__init__.py",
        "shop_op/webhooks/__init__.py",
        "tests/conftest.py",
        "config/default/kustomization.yaml",
        "config/manager/manager.yaml",
        "config/rbac/role_binding.yaml",
        "config/prometheus/monitor.yaml",
        "config/crd/kustomization.yaml",
    ):
        assert (project / path).is_file(), path
        assert recorded.files[path] == digest((project / path).read_bytes())
    readme = (project / "README.md").read_text()
    assert "make run" in readme and "make test" in readme
    assert "setpoint dev shop_op" in (project / "Makefile").read_text()


def test_init_again_changes_nothing(project: Path) -> None:
    before = files_under(project)
    result = init(project, domain="example.com")
    assert {f.status for f in result.files} == {"unchanged"}
    assert files_under(project) == before


def test_init_with_other_names_refuses(project: Path) -> None:
    with pytest.raises(ProjectFileError, match="already the project 'shop-op'"):
        init(project, domain="other.org")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--domain", "Example.COM"], r"--domain 'Example\.COM' is not a domain"),
        (["--domain", "localhost"], "at least one dot"),
        (["--name", "Shop_Op"], r"--name 'Shop_Op' is not a project name"),
        (["--name", "9shop"], "must start with a letter"),
    ],
)
def test_bad_init_names_fail_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["init", "--dir", str(tmp_path), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("setpoint: error: ")
    assert "Traceback" not in err

    assert re.search(message, err), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("group", "version", "kind", "message"),
    [
        ("Ship", "v1", "Frigate", r"--group 'Ship' is not a group name"),
        ("ship.io", "v1", "Frigate", r"--group 'ship\.io' is not a group name"),
        ("ship", "1", "Frigate", r"--version '1' is not a Kubernetes API version"),
        ("ship", "v1beta", "Frigate", r"--version 'v1beta'"),
        ("ship", "v1", "frigate", r"--kind 'frigate' is not a kind"),
        ("ship", "v1", "Frig-ate", r"--kind 'Frig-ate' is not a kind"),
    ],
)
def test_bad_api_names_leave_the_project_untouched(
    project: Path, group: str, version: str, kind: str, message: str
) -> None:
    before = files_under(project)
    with pytest.raises(ScaffoldNameError, match=message):
        create_api(project, group=group, version=version, kind=kind)
    assert files_under(project) == before


def test_create_api_outside_a_project_says_to_init(tmp_path: Path) -> None:
    with pytest.raises(ProjectFileError, match="run `setpoint init` first"):
        create_api(tmp_path, group="ship", version="v1", kind="Frigate")


def test_create_api_adds_the_kind_and_wires_its_controller(project: Path) -> None:
    create_api(project, group="ship", version="v1", kind="CargoShip")
    assert snake_case("CargoShip") == "cargo_ship"
    for path in (
        "shop_op/api/ship/v1/cargo_ship.py",
        "shop_op/controllers/cargo_ship.py",
        "tests/test_unit_cargo_ship.py",
        "tests/test_cargo_ship.py",
        "config/samples/ship_v1_cargo_ship.yaml",
    ):
        assert (project / path).is_file(), path
    wiring = (project / "shop_op/controllers/__init__.py").read_text()
    assert "cargo_ship.setup(manager)" in wiring
    controller = (project / "shop_op/controllers/cargo_ship.py").read_text()
    assert ".for_(CargoShip).kstatus_conditions().build(reconcile)" in controller
    crd = yaml.safe_load((project / "config/crd/kustomization.yaml").read_text())
    assert crd["resources"] == ["bases/ship.example.com_cargoships.yaml"]
    entry = yaml.safe_load((project / "PROJECT").read_text())["resources"][0]
    assert entry["kind"] == "CargoShip" and entry["namespaced"] is True
    with pytest.raises(ScaffoldNameError, match="scaffolded already"):
        create_api(project, group="ship", version="v1", kind="CargoShip")


def test_a_second_version_is_a_spoke_with_failing_converter_stubs(project: Path) -> None:
    create_api(project, group="fleet", version="v1", kind="Armada", namespaced=False)
    with pytest.raises(ScaffoldNameError, match="is cluster-scoped"):
        create_api(project, group="fleet", version="v2", kind="Armada", namespaced=True)
    with pytest.raises(ScaffoldNameError, match="a kind name is used once per project"):
        create_api(project, group="ship", version="v1", kind="Armada")
    result = create_api(project, group="fleet", version="v2", kind="Armada", hub="v1")
    spoke = (project / "shop_op/api/fleet/v2/armada.py").read_text()
    assert "class ArmadaV2(sp.Resource, sp.Convertible[Armada]):" in spoke
    assert spoke.count("raise NotImplementedError(") == 2
    assert "ArmadaV2.to_hub is not written yet" in spoke
    assert (project / "tests/test_armada_v2_conversion.py").is_file()
    assert not (project / "shop_op/controllers/armada_v2.py").exists()
    assert any("create webhook --kind Armada --conversion" in s for s in result.next_steps)


def test_a_newer_version_becomes_the_hub_by_default(project: Path) -> None:
    """As the evolution guide and the tenants example do: v1 is the hub, v1alpha1 a spoke."""
    create_api(project, group="fleet", version="v1alpha1", kind="Armada")
    result = create_api(project, group="fleet", version="v1", kind="Armada")
    hub = (project / "shop_op/api/fleet/v1/armada.py").read_text()
    assert "class Armada(sp.Resource):" in hub and "storage=True" in hub
    spoke = (project / "shop_op/api/fleet/v1alpha1/armada.py").read_text()
    assert "class ArmadaV1alpha1(sp.Resource, sp.Convertible[Armada]):" in spoke
    assert "from shop_op.api.fleet.v1.armada import (" in spoke
    assert "storage=True" not in spoke
    assert (project / "tests/test_armada_v1alpha1_conversion.py").is_file()
    assert not (project / "tests/test_armada_v1_conversion.py").exists()
    for path in (
        "shop_op/controllers/armada.py",
        "shop_op/controllers/__init__.py",
        "tests/test_unit_armada.py",
        "tests/test_armada.py",
    ):
        text = (project / path).read_text()
        assert "shop_op.api.fleet.v1.armada" in text, path
        assert "v1alpha1" not in text, path
    entries = yaml.safe_load((project / "PROJECT").read_text())["resources"]
    by_version = {e["version"]: e for e in entries}
    assert by_version["v1alpha1"]["spokeOf"] == "v1"
    assert by_version["v1alpha1"]["controller"] is False
    assert "spokeOf" not in by_version["v1"] and by_version["v1"]["controller"] is True
    assert any("ArmadaV1alpha1.to_hub" in s for s in result.next_steps)
    # An older version added later is a spoke of the hub: nothing else is rewritten.
    before = files_under(project)
    create_api(project, group="fleet", version="v1beta1", kind="Armada")
    assert "sp.Convertible[Armada]" in (project / "shop_op/api/fleet/v1beta1/armada.py").read_text()
    after = files_under(project)
    assert {p for p in before if before[p] != after[p]} == {
        "PROJECT",
        "config/samples/kustomization.yaml",
    }


def test_create_webhook_conversion_follows_the_chosen_hub(project: Path) -> None:
    create_api(project, group="fleet", version="v1", kind="Armada")
    create_api(project, group="fleet", version="v2", kind="Armada", hub="v2")
    create_webhook(project, kind="Armada", conversion=True, validation=True)
    hooks = (project / "shop_op/webhooks/__init__.py").read_text()
    assert "from shop_op.api.fleet.v2.armada import (\n    Armada,\n)" in hooks
    assert "from shop_op.api.fleet.v1.armada import (\n    ArmadaV1,\n)" in hooks
    assert "add_conversion(\n        Armada,\n        ArmadaV1,\n    )" in hooks
    entries = yaml.safe_load((project / "PROJECT").read_text())["resources"]
    (hub,) = [e for e in entries if "spokeOf" not in e]
    assert hub["version"] == "v2" and hub["webhooks"]["conversion"] is True
    # A third version moves the hub again: both spokes (and the webhooks) follow it.
    create_api(project, group="fleet", version="v3", kind="Armada")
    hooks = (project / "shop_op/webhooks/__init__.py").read_text()
    assert "add_conversion(\n        Armada,\n        ArmadaV1,\n        ArmadaV2,\n    )" in hooks
    assert "ArmadaValidator()" in hooks
    for version in ("v1", "v2"):
        spoke = (project / f"shop_op/api/fleet/{version}/armada.py").read_text()
        assert "from shop_op.api.fleet.v3.armada import (" in spoke, version
    webhook = (project / "tests/test_armada_webhook.py").read_text()
    assert '"apiVersion": "fleet.example.com/v3"' in webhook
    rules = (project / "shop_op/webhooks/armada.py").read_text()
    assert "from shop_op.api.fleet.v3.armada import (" in rules


def test_moving_the_hub_never_overwrites_a_changed_file(project: Path) -> None:
    create_api(project, group="fleet", version="v1", kind="Armada")
    types = project / "shop_op/api/fleet/v1/armada.py"
    types.write_text(types.read_text() + "# my fields\n")
    before = files_under(project)
    with pytest.raises(ScaffoldConflict) as info:
        create_api(project, group="fleet", version="v2", kind="Armada")
    message = str(info.value)
    assert "making v2 the hub of Armada rewrites v1" in message
    assert "pass --hub v1" in message
    assert "shop_op/api/fleet/v1/armada.py (on disk)" in message
    assert files_under(project) == before
    with pytest.raises(ScaffoldNameError, match="it can stay there"):
        create_api(project, group="fleet", version="v2", kind="Armada", hub="v1beta1")
    create_api(project, group="fleet", version="v2", kind="Armada", hub="v1")
    assert types.read_text().endswith("# my fields\n")


def test_create_api_hub_on_the_command_line(project: Path) -> None:
    assert main(["create", "api", "--dir", str(project), "--group", "fleet",
                 "--version", "v1", "--kind", "Armada"]) == 0  # fmt: skip
    with pytest.raises(ScaffoldNameError, match="drop --hub"):
        create_api(project, group="fleet", version="v1", kind="Sloop", hub="v2")
    assert main(["create", "api", "--dir", str(project), "--group", "fleet",
                 "--version", "v2", "--kind", "Armada", "--hub", "v1"]) == 0  # fmt: skip
    assert "class ArmadaV2(" in (project / "shop_op/api/fleet/v2/armada.py").read_text()


def test_create_webhook_checks_the_kind_and_the_flags(project: Path) -> None:
    with pytest.raises(ScaffoldNameError, match="at least one of"):
        create_webhook(project, kind="Armada")
    with pytest.raises(ScaffoldNameError, match="no such kind in this project"):
        create_webhook(project, kind="Armada", validation=True)
    create_api(project, group="fleet", version="v1", kind="Armada")
    with pytest.raises(ScaffoldNameError, match="has one version"):
        create_webhook(project, kind="Armada", conversion=True)


def test_create_webhook_adds_code_tests_and_kustomize_overlays(project: Path) -> None:
    create_api(project, group="fleet", version="v1", kind="Armada")
    create_api(project, group="fleet", version="v1beta1", kind="Armada")
    create_webhook(project, kind="Armada", conversion=True)
    create_webhook(project, kind="Armada", defaulting=True, validation=True)
    hooks = (project / "shop_op/webhooks/__init__.py").read_text()
    assert "add_conversion(" in hooks and "ArmadaV1beta1," in hooks
    assert "ArmadaDefaulter()," in hooks and "ArmadaValidator()," in hooks
    for path in (
        "shop_op/webhooks/armada.py",
        "tests/test_unit_armada_webhook.py",
        "tests/test_armada_webhook.py",
        "config/webhook/service.yaml",
        "config/certmanager/certificate.yaml",
        "config/default/manager_webhook_patch.yaml",
        "config/default/webhookcainjection_patch.yaml",
        "config/crd/patches/cainjection_in_armadas.yaml",
    ):
        assert (project / path).is_file(), path
    default = yaml.safe_load((project / "config/default/kustomization.yaml").read_text())
    assert {"../webhook", "../certmanager"} <= set(default["resources"])
    assert "setpoint generate webhook shop_op" in (project / "Makefile").read_text()


def test_a_changed_file_is_never_overwritten_without_force(project: Path) -> None:
    create_api(project, group="ship", version="v1", kind="Frigate")
    wiring = project / "shop_op/controllers/__init__.py"
    wiring.write_text(wiring.read_text() + "# my change\n")
    before = files_under(project)
    with pytest.raises(ScaffoldConflict) as info:
        create_api(project, group="ship", version="v1", kind="Sloop")
    message = str(info.value)
    assert "nothing was written" in message
    assert "shop_op/controllers/__init__.py (on disk)" in message
    assert "-# my change" in message and "+    sloop.setup(manager)" in message
    assert files_under(project) == before  # not even the new kind's files
    create_api(project, group="ship", version="v1", kind="Sloop", force=True)
    assert "# my change" not in wiring.read_text()
    assert (project / "shop_op/api/ship/v1/sloop.py").is_file()


def test_init_over_a_users_file_shows_the_diff(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("my notes\n")
    with pytest.raises(ScaffoldConflict, match=r"README\.md \(on disk\)"):
        init(tmp_path, name="shop-op")
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"]


def test_the_setpoint_source(tmp_path: Path) -> None:
    wheel = tmp_path / "setpoint-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert setpoint_source(wheel).install == f"'{wheel}[testing]'"
    checkout = tmp_path / "setpoint"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text("")
    assert setpoint_source(checkout).install == f"-e '{checkout}[testing]'"
    with pytest.raises(ScaffoldNameError, match="neither a setpoint wheel"):
        setpoint_source(tmp_path / "nothing")
    source = setpoint_source()
    assert source.requirement.startswith("setpoint")
    assert source.testing_requirement.startswith("setpoint[testing]")


def test_generated_python_passes_ruff(project: Path) -> None:
    """The generated code is clean under the project's own ruff settings (mypy: the e2e)."""
    create_api(project, group="ship", version="v1", kind="Frigate")
    create_api(project, group="fleet", version="v1", kind="Armada", namespaced=False)
    create_api(project, group="ship", version="v2alpha1", kind="Frigate")
    create_webhook(project, kind="Frigate", conversion=True, validation=True)
    create_webhook(project, kind="Armada", defaulting=True)
    create_api(project, group="fleet", version="v2", kind="Armada")  # moves the hub to v2
    create_api(project, group="ship", version="v1beta1", kind="Sloop")
    create_api(project, group="ship", version="v1alpha1", kind="Sloop")  # sorts before its hub
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [str(RUFF), *command, "shop_op", "tests"],
            cwd=project,
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def load(project: Path, path: str) -> Any:
    """The one YAML document of ``path`` in ``project``."""
    return yaml.safe_load((project / path).read_text())


def manager_pod(project: Path) -> dict[str, Any]:
    """The pod template of the manager's Deployment in config/manager/manager.yaml."""
    documents = yaml.safe_load_all((project / "config/manager/manager.yaml").read_text())
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    template: dict[str, Any] = deployment["spec"]["template"]
    return template


def test_init_serves_metrics_over_https_only_to_authorized_scrapers(project: Path) -> None:
    """Issue 27 finding 6: /metrics is HTTPS behind TokenReview and SubjectAccessReview.

    The manager runs with ``--metrics-secure`` on :8443 (never plain :8080 anywhere in
    config/); its service account may create the two reviews; scrapers get a
    ``metrics-reader`` ClusterRole; the Service and the ServiceMonitor use the HTTPS port
    with the scraper's bearer token, as kubebuilder scaffolds them.
    """
    pod = manager_pod(project)
    (container,) = pod["spec"]["containers"]
    assert "--metrics-secure" in container["args"]
    assert "--metrics-bind-address=:8443" in container["args"]
    assert {"name": "metrics", "containerPort": 8443, "protocol": "TCP"} in container["ports"]
    for path in sorted((project / "config").rglob("*.yaml")):
        assert "8080" not in path.read_text(), f"{path} still serves plain HTTP metrics on 8080"

    service = load(project, "config/default/metrics_service.yaml")
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 8443, "protocol": "TCP", "targetPort": "metrics"}
    ]
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    monitor = load(project, "config/prometheus/monitor.yaml")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {
        "path": "/metrics",
        "port": "https",
        "scheme": "https",
        "bearerTokenFile": SERVICE_ACCOUNT_TOKEN,
        "tlsConfig": {"insecureSkipVerify": True},
    }

    rbac = load(project, "config/rbac/kustomization.yaml")["resources"]
    assert {
        "metrics_auth_role.yaml",
        "metrics_auth_role_binding.yaml",
        "metrics_reader_role.yaml",
    } <= set(rbac)
    auth = load(project, "config/rbac/metrics_auth_role.yaml")
    assert (auth["kind"], auth["metadata"]["name"]) == ("ClusterRole", "metrics-auth-role")
    assert auth["rules"] == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    binding = load(project, "config/rbac/metrics_auth_role_binding.yaml")
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "metrics-auth-role",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod["spec"]["serviceAccountName"], "namespace": "system"}
    ]
    reader = load(project, "config/rbac/metrics_reader_role.yaml")
    assert (reader["kind"], reader["metadata"]["name"]) == ("ClusterRole", "metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_init_admits_scrapers_only_from_monitoring_namespaces(project: Path) -> None:
    """A NetworkPolicy (in config/default) lets only namespaces labelled metrics=enabled in."""
    assert "../network-policy" in load(project, "config/default/kustomization.yaml")["resources"]
    assert load(project, "config/network-policy/kustomization.yaml")["resources"] == [
        "allow-metrics-traffic.yaml"
    ]
    policy = load(project, "config/network-policy/allow-metrics-traffic.yaml")
    assert policy["kind"] == "NetworkPolicy"
    assert policy["spec"]["podSelector"] == {
        "matchLabels": manager_pod(project)["metadata"]["labels"]
    }
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}],
            "ports": [{"port": 8443, "protocol": "TCP"}],
        }
    ]
    assert "metrics=enabled" in (project / "README.md").read_text()


def test_webhooks_add_their_port_and_policy_without_repeating_the_managers_args(
    project: Path,
) -> None:
    """The webhook patch adds its flags to the manager's (a JSON patch): metrics stay secure."""
    create_api(project, group="fleet", version="v1", kind="Armada")
    create_webhook(project, kind="Armada", validation=True)
    default = load(project, "config/default/kustomization.yaml")
    assert {"path": "manager_webhook_patch.yaml", "target": {"kind": "Deployment"}} in default[
        "patches"
    ]
    patch = load(project, "config/default/manager_webhook_patch.yaml")
    added = {
        op["path"]: op["value"] for op in patch if op["op"] == "add" and op["path"].endswith("-")
    }
    assert added["/spec/template/spec/containers/0/ports/-"] == {
        "name": "webhook-server",
        "containerPort": 9443,
        "protocol": "TCP",
    }
    arguments = [op["value"] for op in patch if op["path"].endswith("/args/-")]
    assert "--webhook-bind-address=:9443" in arguments
    assert not [a for a in arguments if "metrics" in a], arguments
    assert load(project, "config/network-policy/kustomization.yaml")["resources"] == [
        "allow-metrics-traffic.yaml",
        "allow-webhook-traffic.yaml",
    ]
    policy = load(project, "config/network-policy/allow-webhook-traffic.yaml")
    assert policy["spec"]["podSelector"] == {
        "matchLabels": manager_pod(project)["metadata"]["labels"]
    }
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 9443, "protocol": "TCP"}]


def kustomize(project: Path, directory: str) -> list[dict[str, Any]]:
    """``kubectl kustomize <directory>`` in ``project``: the rendered objects."""
    built = subprocess.run(
        [kubectl_binary(), "kustomize", directory],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def test_config_default_builds_and_its_pieces_agree(project: Path) -> None:
    """``kubectl kustomize config/default`` (and with ../prometheus): names, ports, selectors.

    After namePrefix and namespace, the metrics Service, the ServiceMonitor, the review
    RBAC and both NetworkPolicies point at the manager's pod, its service account and its
    container ports.
    """
    create_api(project, group="fleet", version="v1", kind="Armada")
    create_api(project, group="fleet", version="v2", kind="Armada")
    create_webhook(project, kind="Armada", conversion=True, validation=True)
    for what in ("crd", "rbac", "webhook"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "setpoint",
                "generate",
                what,
                "shop_op",
                "--output-dir",
                "config",
            ],
            cwd=project,
            capture_output=True,
            timeout=120,
            check=True,
        )
    default = project / "config/default/kustomization.yaml"
    default.write_text(default.read_text().replace("- ../rbac\n", "- ../rbac\n- ../prometheus\n"))
    objects = kustomize(project, "config/default")

    def one(kind: str, name: str) -> dict[str, Any]:
        (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return found

    deployment = one("Deployment", "shop-op-controller-manager")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8443, "probes": 8081, "webhook-server": 9443}
    assert {
        "--metrics-secure",
        "--metrics-bind-address=:8443",
        "--webhook-bind-address=:9443",
        "--webhook-cert-dir=/etc/webhook/certs",
    } <= set(container["args"])
    assert container["volumeMounts"][0]["name"] == pod["spec"]["volumes"][0]["name"]

    service = one("Service", "shop-op-controller-manager-metrics-service")
    assert service["metadata"]["namespace"] == "shop-op-system"
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (service_port,) = service["spec"]["ports"]
    assert ports[service_port["targetPort"]] == 8443
    monitor = one("ServiceMonitor", "shop-op-controller-manager-metrics-monitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service_port["name"]

    account = {
        "kind": "ServiceAccount",
        "name": pod["spec"]["serviceAccountName"],
        "namespace": "shop-op-system",
    }
    assert (
        account["name"] == one("ServiceAccount", "shop-op-controller-manager")["metadata"]["name"]
    )
    binding = one("ClusterRoleBinding", "shop-op-metrics-auth-rolebinding")
    assert binding["subjects"] == [account]
    auth = one("ClusterRole", binding["roleRef"]["name"])
    assert {r["resources"][0] for r in auth["rules"]} == {"tokenreviews", "subjectaccessreviews"}
    reader = one("ClusterRole", "shop-op-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]

    for name, port in (("metrics", 8443), ("webhook", 9443)):
        policy = one("NetworkPolicy", f"shop-op-allow-{name}-traffic")
        assert policy["metadata"]["namespace"] == "shop-op-system"
        selector = policy["spec"]["podSelector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert [p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]] == [port]


def generated_e2e(project: Path) -> Any:
    """The project's tests/e2e/test_e2e.py, imported as a module."""
    import importlib.util

    path = project / "tests/e2e/test_e2e.py"
    spec = importlib.util.spec_from_file_location("generated_e2e", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_init_scaffolds_an_e2e_that_deploys_the_image_a_node_already_has(project: Path) -> None:
    """Issue 29: ``make test-e2e`` deploys config/ with the image ``docker-build`` wrote.

    The Deployment takes the image a node has (``IfNotPresent``: ``:latest`` alone means
    Always, a pull from a registry), /tmp is the one writable path of its read-only root
    (secure metrics write their self-signed certificate there), the reconciler declares
    the RBAC its kind needs (the generated role is not empty), ``make test-e2e`` builds the
    image and runs tests/e2e on a plane with one node while ``make test`` and ``make unit``
    leave it out, and the e2e's kustomize override follows ``IMG``.
    """
    (container,) = manager_pod(project)["spec"]["containers"]
    assert container["image"] == "shop-op:latest"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    (tmp,) = [v for v in manager_pod(project)["spec"]["volumes"] if v["name"] == mounts["/tmp"]]
    assert "emptyDir" in tmp

    create_api(project, group="ship", version="v1", kind="Frigate")
    controller = (project / "shop_op/controllers/frigate.py").read_text()
    assert '@sp.rbac.for_kind(Frigate, verbs=["get", "list", "watch"])' in controller
    assert 'subresources=["status"], verbs=["get", "update", "patch"])' in controller

    makefile = (project / "Makefile").read_text()
    recipe = re.search(r"^test-e2e: (.*)\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe is not None, makefile
    assert "docker-build" in recipe.group(1).split()
    assert "setpoint controlplane build --nodes" in recipe.group(2)
    assert "-m e2e --setpoint-nodes 1 tests/e2e" in recipe.group(2)
    assert "IMAGE_ARCHIVE='$(IMAGE_ARCHIVE)'" in recipe.group(2)
    assert re.search(r'^test: .*\n\t\$\(PY\) -m pytest -q -m "not e2e"$', makefile, re.M)
    assert re.search(r'^unit: .*\n\t.* -m "not integration and not e2e"$', makefile, re.M)
    assert '"e2e: ' in (project / "pyproject.toml").read_text()

    e2e = generated_e2e(project)
    assert e2e.PROJECT == "shop-op" and e2e.DEPLOYMENT == "shop-op-controller-manager"
    assert e2e.image_override("shop-op:latest") == {
        "name": "shop-op",
        "newName": "shop-op",
        "newTag": "latest",
    }
    assert e2e.image_override("registry.example.com:5000/team/shop-op:v2") == {
        "name": "shop-op",
        "newName": "registry.example.com:5000/team/shop-op",
        "newTag": "v2",
    }
    assert e2e.image_override("registry.example.com:5000/shop-op") == {
        "name": "shop-op",
        "newName": "registry.example.com:5000/shop-op",
    }
