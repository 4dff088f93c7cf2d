"""`setpoint crd diff`: each breaking change caught by the right check, each safe one passes."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.cli.main import main
from setpoint.migrate.diff import CHECKS, DiffConfig, DiffConfigError, Finding, diff_crds

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "migrate"
CASES = yaml.safe_load((GOLDEN / "diff" / "schema-changes.yaml").read_text())


def crd(spec: dict[str, Any] | None = None, **overrides: Any) -> dict[str, Any]:
    """A Widget CRD whose v1 `.spec` has the given schema."""
    spec_schema = spec or {"type": "object", "properties": {"a": {"type": "integer"}}}
    doc: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.diff.setpoint.dev"},
        "spec": {
            "group": "diff.setpoint.dev",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": copy.deepcopy(spec_schema)},
                        }
                    },
                }
            ],
        },
    }
    doc["spec"].update(overrides)
    return doc


def errors(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.check, f.path) for f in findings if f.level == "error"]


@pytest.mark.parametrize("case", CASES["breaking"], ids=lambda c: c["name"])
def test_breaking_change_is_caught_by_its_check(case: dict[str, Any]) -> None:
    """The change is reported at level error by the named check, at the named field."""
    findings = diff_crds([crd(case["old"])], [crd(case["new"])])
    assert (case["check"], case["path"]) in errors(findings), [str(f) for f in findings]


@pytest.mark.parametrize("case", CASES["safe"], ids=lambda c: c["name"])
def test_safe_change_passes(case: dict[str, Any]) -> None:
    """No error-level finding: the diff exits 0."""
    findings = diff_crds([crd(case["old"])], [crd(case["new"])])
    assert errors(findings) == [], [str(f) for f in findings]


def test_every_check_has_a_default_level() -> None:
    assert set(CHECKS.values()) <= {"error", "warn", "off"}
    caught = {c["check"] for c in CASES["breaking"]}
    crd_level = {
        "scope",
        "names",
        "crdRemoval",
        "storedVersionRemoval",
        "servedVersionRemoval",
        "storageVersionChange",
        "subresources",
        "conversion",
        "enumAddition",
        "format",
        "mapType",
        "servedVersionDrift",
        "unboundedString",
        "unboundedList",
        "unboundedMap",
    }
    assert set(CHECKS) - caught - crd_level == set(), "every check has a fixture"


def two_versions(old_served: bool = True) -> dict[str, Any]:
    doc = crd()
    v1 = doc["spec"]["versions"][0]
    alpha = {**copy.deepcopy(v1), "name": "v1alpha1", "storage": False, "served": old_served}
    doc["spec"]["versions"] = [alpha, v1]
    return doc


def test_crd_wide_breaking_changes() -> None:
    """Scope, names, stored and served version removal, subresources, storage flip, conversion."""
    base = two_versions()
    base["status"] = {"storedVersions": ["v1alpha1", "v1"]}
    new = crd(scope="Cluster")
    new["spec"]["names"] = {"kind": "Widget", "plural": "widgets"}
    new["spec"]["versions"][0]["subresources"] = {}
    new["spec"]["conversion"] = {"strategy": "Webhook"}
    found = {(f.check, f.level) for f in diff_crds([base], [new])}
    assert {
        ("scope", "error"),
        ("names", "error"),
        ("storedVersionRemoval", "error"),
        ("servedVersionRemoval", "error"),
        ("subresources", "error"),
        ("conversion", "warn"),
    } <= found
    flipped = two_versions()
    for version in flipped["spec"]["versions"]:
        version["storage"] = version["name"] == "v1alpha1"
    assert ("storageVersionChange", "warn") in {
        (f.check, f.level) for f in diff_crds([two_versions()], [flipped])
    }
    assert [f.check for f in diff_crds([crd()], [])] == ["crdRemoval"]


def test_stored_version_removal_message_says_to_migrate() -> None:
    old = two_versions()
    old["status"] = {"storedVersions": ["v1alpha1", "v1"]}
    (finding,) = [f for f in diff_crds([old], [crd()]) if f.check == "storedVersionRemoval"]
    assert "setpoint crd migrate-storage" in finding.message


def test_served_version_drift_between_versions_of_new() -> None:
    """Two served versions of NEW that differ incompatibly are a warning."""
    new = two_versions()
    new["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 3}},
    }
    drift = [f for f in diff_crds([new], [new]) if f.check == "servedVersionDrift"]
    assert {(f.version, f.path, f.level) for f in drift} == {("v1alpha1->v1", ".spec.a", "warn")}
    assert sorted(f.message.split("]")[0] + "]" for f in drift) == ["[maxLength]", "[type]"]


def test_best_practice_warnings_are_ratcheted() -> None:
    """An unbounded string already in OLD is not reported again; a new one is."""
    old = crd({"type": "object", "properties": {"a": {"type": "string"}}})
    new = crd({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}})
    found = [(f.check, f.path) for f in diff_crds([old], [new])]
    assert found == [("unboundedString", ".spec.b")]


def test_levels_come_from_the_config() -> None:
    """enumAddition can be made an error (crdify's Disallow) and a check can be switched off."""
    old = crd({"type": "object", "properties": {"m": {"type": "string", "enum": ["a"]}}})
    new = crd({"type": "object", "properties": {"m": {"type": "string", "enum": ["a", "b"]}}})
    assert [(f.check, f.level) for f in diff_crds([old], [new])] == [("enumAddition", "warn")]
    strict = DiffConfig.from_mapping(yaml.safe_load("checks: {enumAddition: error}"))
    assert [(f.check, f.level) for f in diff_crds([old], [new], config=strict)] == [
        ("enumAddition", "error")
    ]
    quiet = DiffConfig.from_mapping(yaml.safe_load("checks: {enumAddition: off}"))
    assert diff_crds([old], [new], config=quiet) == []
    with pytest.raises(DiffConfigError, match=r"checks\.enumAdition: unknown check"):
        DiffConfig.from_mapping({"checks": {"enumAdition": "error"}})
    with pytest.raises(DiffConfigError, match="level 'fatal' is not one of"):
        DiffConfig.from_mapping({"checks": {"enum": "fatal"}})


def test_cli_formats_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 1 on errors; text, markdown and JSON output; v1beta1 input is migrated first."""
    old_file, new_file = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old_file.write_text(yaml.safe_dump(crd()))
    new_file.write_text(
        yaml.safe_dump(crd({"type": "object", "properties": {"a": {"type": "string"}}}))
    )
    assert main(["crd", "diff", str(old_file), str(new_file)]) == 1
    out = capsys.readouterr().out
    assert "ERROR [type] widgets.diff.setpoint.dev v1 .spec.a" in out
    assert main(["crd", "diff", str(old_file), str(new_file), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["errors"] == 1 and data["findings"][0]["check"] == "type"
    assert main(["crd", "diff", str(old_file), str(new_file), "--format", "markdown"]) == 1
    assert "| error | `type` |" in capsys.readouterr().out
    assert main(["crd", "diff", str(old_file), str(old_file)]) == 0
    legacy = GOLDEN / "v1beta1" / "subresources.yaml"
    migrated = GOLDEN / "v1" / "subresources.yaml"
    assert main(["crd", "diff", str(legacy), str(migrated)]) == 0
    assert main(["crd", "diff", str(tmp_path / "missing.yaml"), str(new_file)]) == 1
    assert "missing.yaml" in capsys.readouterr().err


def test_cli_reads_python_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NEW given as MODULE:Class is generated like `setpoint generate crd` does."""
    module = tmp_path / "diff_types_v2.py"
    module.write_text(
        "import setpoint as sp\n\n"
        "class WidgetSpec(sp.Model):\n"
        "    a: str = sp.field(max_length=3)\n\n"
        "@sp.resource(group='diff.setpoint.dev', version='v1', short_names=['wd'])\n"
        "class Widget(sp.Resource):\n"
        "    spec: WidgetSpec\n"
        "    status: dict[str, int] | None = sp.field(None, max_properties=3)\n"
    )
    old_file = tmp_path / "old.yaml"
    old_file.write_text(yaml.safe_dump(crd()))
    code = main(["crd", "diff", str(old_file), f"{module}:Widget"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "[type] widgets.diff.setpoint.dev v1 .spec.a" in out
