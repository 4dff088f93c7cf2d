"""`setpoint crd migrate`: v1beta1 -> v1, OpenAPI v2 habits fixed, the report and exit code.

The legacy corpus lives in tests/golden/migrate/v1beta1; the expected v1 output
next to it in tests/golden/migrate/v1 (regenerate deliberately with
``SETPOINT_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/migrate``).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.cli.main import main
from setpoint.crd import find_resources, generate_crds, render_yaml, validate_structural
from setpoint.migrate.convert import MigrateOptions, MigrationInputError, migrate_crd
from setpoint.migrate.pygen import python_module_for

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "migrate"
CORPUS = sorted((GOLDEN / "v1beta1").glob("*.yaml"))
UPDATE = os.environ.get("SETPOINT_UPDATE_GOLDEN") == "1"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((GOLDEN / "v1beta1" / f"{name}.yaml").read_text())
    return doc


def notes_of(name: str, **kwargs: Any) -> list[str]:
    return [str(n) for n in migrate_crd(load(name), **kwargs).notes]


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_matches_golden_v1(path: Path) -> None:
    migrated = migrate_crd(yaml.safe_load(path.read_text()))
    text = render_yaml([migrated.crd])
    golden = GOLDEN / "v1" / path.name
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    expected = golden.read_text()
    assert text == expected, "\n".join(
        difflib.unified_diff(expected.splitlines(), text.splitlines(), "golden", "now", lineterm="")
    )


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_every_migrated_schema_is_structural(path: Path) -> None:
    crd = migrate_crd(yaml.safe_load(path.read_text())).crd
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["spec"]["preserveUnknownFields"] is False
    assert crd["spec"]["scope"] in ("Namespaced", "Cluster")
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        status = "status" in (version.get("subresources") or {})
        assert validate_structural(schema, status_subresource=status) == []


def test_top_level_fields_move_into_every_version() -> None:
    """validation, subresources and printer columns are copied per version; JSONPath renamed."""
    crd = migrate_crd(load("subresources")).crd
    for version in crd["spec"]["versions"]:
        assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.labelSelector"
        assert [c["jsonPath"] for c in version["additionalPrinterColumns"]] == [
            ".spec.replicas",
            ".status.replicas",
            ".metadata.creationTimestamp",
        ]
        assert all("JSONPath" not in c for c in version["additionalPrinterColumns"])
        assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["type"] == "object"
    assert not {"validation", "subresources", "additionalPrinterColumns"} & set(crd["spec"])


def test_webhook_conversion_moves_and_review_versions_need_a_decision() -> None:
    """webhookClientConfig -> webhook.clientConfig; the implicit [v1beta1] is explicit + flagged."""
    migration = migrate_crd(load("webhook-conversion"))
    webhook = migration.crd["spec"]["conversion"]["webhook"]
    assert webhook == {
        "clientConfig": {"url": "https://gateway-converter.example.invalid:9443/convert"},
        "conversionReviewVersions": ["v1beta1"],
    }
    assert [n.where for n in migration.needs_human] == [
        "spec.conversion.webhook.conversionReviewVersions"
    ]


def test_openapi_v2_habits_are_fixed() -> None:
    """Type lists, x-example, x-nullable, $ref, uniqueItems and missing types are rewritten."""
    crd = migrate_crd(load("validation")).crd
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec["properties"]
    assert props["image"] == {"type": "string", "nullable": True}
    assert props["replicas"]["nullable"] is True
    assert props["port"] == {"x-kubernetes-int-or-string": True}
    assert props["cronSpec"]["example"] == "*/5 * * * *"
    assert props["retry"]["properties"]["attempts"] == {"type": "integer", "minimum": 0}
    assert props["tags"]["x-kubernetes-list-type"] == "set"
    assert props["env"]["additionalProperties"] == {"type": "string"}
    assert props["schedule"]["type"] == "object"
    assert props["anything"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert "readOnly" not in props["readOnlyNote"]
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "definitions" not in root
    assert root["properties"]["metadata"] == {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 40}},
    }


def test_unsupported_keywords_each_get_a_note() -> None:
    """patternProperties and dependencies need a human; readOnly and definitions are removed."""
    notes = notes_of("validation")
    human = [n for n in notes if n.startswith("[needs-human]")]
    assert len(human) == 2
    assert any("patternProperties" in n and "CEL" in n for n in human)
    assert any("dependencies" in n and "CEL" in n for n in human)
    assert any("[removed]" in n and "readOnly" in n for n in notes)
    assert any("[removed]" in n and ".definitions" in n for n in notes)


def test_pruning_was_off_keeps_data_by_default() -> None:
    """Pruning-off CRDs get x-kubernetes-preserve-unknown-fields wherever data could hide."""
    crd = migrate_crd(load("partial-schema")).crd
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["x-kubernetes-preserve-unknown-fields"] is True
    assert root["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert root["properties"]["spec"]["properties"]["stages"]["items"] == {
        "x-kubernetes-preserve-unknown-fields": True
    }
    notes = notes_of("preserve-unknown-fields")
    assert any("preserveUnknownFields" in n and "set to false" in n for n in notes)


def test_prune_declared_only_opens_free_form_nodes() -> None:
    """keep_unknown_fields=False opens only nodes without declared fields, and says so."""
    migration = migrate_crd(
        load("partial-schema"), options=MigrateOptions(keep_unknown_fields=False)
    )
    root = migration.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "x-kubernetes-preserve-unknown-fields" not in root
    assert "x-kubernetes-preserve-unknown-fields" not in root["properties"]["spec"]
    assert root["properties"]["spec"]["properties"]["params"][
        "x-kubernetes-preserve-unknown-fields"
    ]
    assert any("dropped on the next read or write" in n.message for n in migration.needs_human)


def test_no_schema_accepts_anything() -> None:
    """A v1beta1 CRD without validation gets an open schema, v1 requiring one."""
    crd = migrate_crd(load("preserve-unknown-fields")).crd
    assert crd["spec"]["versions"] == [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            },
        }
    ]


def test_v1_input_with_pruning_on_is_left_alone() -> None:
    """A clean v1 CRD comes back unchanged, with no notes."""
    crd = migrate_crd(load("subresources")).crd
    again = migrate_crd(crd)
    assert again.crd == crd
    assert again.notes == ()


def test_input_must_be_a_crd() -> None:
    with pytest.raises(MigrationInputError, match="is not a CustomResourceDefinition"):
        migrate_crd({"apiVersion": "v1", "kind": "ConfigMap"})
    with pytest.raises(MigrationInputError, match="neither versions nor version"):
        migrate_crd(
            {
                "apiVersion": "apiextensions.k8s.io/v1beta1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "x.y.z"},
                "spec": {"group": "y.z", "names": {"kind": "X", "plural": "x"}},
            }
        )


def test_cli_exit_codes_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 when a human must act (with the report listing it), 0 when not, 1 on bad input."""
    out = tmp_path / "out"
    report = tmp_path / "report.json"
    code = main(
        [
            "crd",
            "migrate",
            str(GOLDEN / "v1beta1" / "validation.yaml"),
            "--output-dir",
            str(out),
            "--report-json",
            str(report),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "2 item(s) need a human (exit 2)" in err
    assert "[needs-human]" in err and "patternProperties" in err
    data = json.loads(report.read_text())
    assert data["needsHuman"] == 2
    assert yaml.safe_load((out / "validation.yaml").read_text())["apiVersion"] == (
        "apiextensions.k8s.io/v1"
    )
    assert main(["crd", "migrate", str(GOLDEN / "v1beta1" / "subresources.yaml")]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["metadata"]["name"] == "replicasets.legacy.setpoint.dev"
    assert "nothing needs a human" in captured.err
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\n")
    assert main(["crd", "migrate", str(bad)]) == 1
    assert "is not a CustomResourceDefinition" in capsys.readouterr().err
    (tmp_path / "broken.yaml").write_text("a: [\n")
    assert main(["crd", "migrate", str(tmp_path / "broken.yaml")]) == 1
    assert "not valid YAML" in capsys.readouterr().err


def _normalize(crd: dict[str, Any]) -> dict[str, Any]:
    """What `generate crd` and a hand-written CRD legitimately differ in, removed."""
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items() if k != "description"}
            if out.get("x-kubernetes-int-or-string") and out.get("anyOf") == [
                {"type": "integer"},
                {"type": "string"},
            ]:
                del out["anyOf"]
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    versions = []
    for version in sorted(spec["versions"], key=lambda v: v["name"]):
        schema = walk(version["schema"]["openAPIV3Schema"])
        props = schema.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            props.pop(key, None)
        props.setdefault("metadata", {"type": "object"})
        versions.append({**version, "schema": {"openAPIV3Schema": schema}})
    out = {**spec, "names": names, "versions": versions}
    out.pop("preserveUnknownFields", None)
    return out


def test_python_output_generates_the_same_crds(tmp_path: Path) -> None:
    """--python writes classes whose `generate crd` output equals the migrated CRDs.

    Only what the module docstring lists as not expressible in Python may differ.
    """
    migrated = [migrate_crd(yaml.safe_load(p.read_text())).crd for p in CORPUS]
    source = python_module_for(migrated)
    module_path = tmp_path / "legacy_types_roundtrip.py"
    module_path.write_text(source)
    spec = importlib.util.spec_from_file_location("legacy_types_roundtrip", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        generated = {
            m.documents[0]["metadata"]["name"]: m.documents[0]
            for m in generate_crds(find_resources([module]))
        }
    finally:
        del sys.modules[spec.name]
    docstring = source.split('"""')[1]
    for crd in migrated:
        name = crd["metadata"]["name"]
        expected = _normalize(crd)
        got = _normalize(generated[name])
        kind = crd["spec"]["names"]["kind"]
        for version in expected["versions"]:
            root = version["schema"]["openAPIV3Schema"]
            if root.pop("x-kubernetes-preserve-unknown-fields", None):
                assert (
                    f"{kind} {version['name']}: x-kubernetes-preserve-unknown-fields" in docstring
                )
            meta = root["properties"]["metadata"]
            if meta.pop("properties", None):
                assert f"{kind} {version['name']}: constraints on metadata" in docstring
        conversion = expected.pop("conversion", None)
        if conversion:
            # The strategy round-trips; the client config is given to `generate crd` instead.
            assert got.pop("conversion")["strategy"] == conversion["strategy"] == "Webhook"
            assert f"{kind}: the webhook clientConfig" in docstring
            for version in expected["versions"]:
                if not version["storage"]:
                    assert f"{kind} {version['name']}: the conversion to and from" in docstring
        assert got == expected, name
