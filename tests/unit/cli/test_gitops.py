"""``setpoint generate gitops``: which kinds get an Argo CD health check, and the files.

What the Lua and jq say is run by Argo CD's own libraries on real objects in
tests/integration/controller/test_gitops_health.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from setpoint.cli.gitops import APPLIED_ANNOTATION_EXPRESSION, HEALTH_LUA, argocd_config, health_key
from setpoint.cli.main import main
from tests._support.kinds import Dial, Doodad, Gizmo

KINDS = str(Path(__file__).resolve().parents[2] / "_support" / "kinds.py")


def test_every_kind_with_a_status_subresource_gets_the_health_check() -> None:
    data = argocd_config([Gizmo, Doodad, Dial])["data"]
    health = {key: value for key, value in data.items() if ".health." in key}
    assert health == {
        "resource.customizations.health.test.setpoint.dev_Gizmo": HEALTH_LUA,
        "resource.customizations.health.test.setpoint.dev_Dial": HEALTH_LUA,
    }


def test_what_setpoint_writes_is_ignored_for_every_kind() -> None:
    data = argocd_config([Gizmo])["data"]
    ignored = yaml.safe_load(data["resource.customizations.ignoreDifferences.all"])
    assert ignored == {"jqPathExpressions": [APPLIED_ANNOTATION_EXPRESSION]}
    crd = yaml.safe_load(
        data[
            "resource.customizations.ignoreDifferences.apiextensions.k8s.io_CustomResourceDefinition"
        ]
    )
    assert crd == {"jqPathExpressions": [".spec.conversion.webhook.clientConfig.caBundle"]}


def test_a_core_kind_has_no_group_in_its_key() -> None:
    assert health_key("", "ConfigMap") == "resource.customizations.health.ConfigMap"
    assert health_key("demo.io", "Widget") == "resource.customizations.health.demo.io_Widget"


def test_the_command_writes_both_files_and_check_finds_them_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "config")
    assert main(["generate", "gitops", KINDS, "--output-dir", out, "--check"]) == 1
    assert main(["generate", "gitops", KINDS, "--output-dir", out, "--flux-path", "./deploy"]) == 0
    assert (
        main(
            ["generate", "gitops", KINDS, "--output-dir", out, "--flux-path", "./deploy", "--check"]
        )
        == 0
    )
    flux = yaml.safe_load((tmp_path / "config" / "gitops" / "flux-kustomization.yaml").read_text())
    assert (flux["kind"], flux["spec"]["wait"], flux["spec"]["path"]) == (
        "Kustomization",
        True,
        "./deploy",
    )
    cm = yaml.safe_load((tmp_path / "config" / "gitops" / "argocd-cm.yaml").read_text())
    assert cm["metadata"]["name"] == "argocd-cm"
    assert "resource.customizations.health.test.setpoint.dev_Widget" in cm["data"]


def test_no_declared_kind_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    assert main(["generate", "gitops", str(empty), "--output-dir", str(tmp_path)]) == 1
    assert "no @sp.resource classes" in capsys.readouterr().err
