"""`crd migrate` applies every default the v1beta1 API applied before converting to v1.

The rules come from k8s.io/apiextensions-apiserver: pkg/apis/apiextensions/v1beta1/defaults.go
(``SetDefaults_CustomResourceDefinitionSpec``), pkg/apis/apiextensions/v1/conversion.go
(the internal -> v1 spec conversion) and the validation v1 adds (``scope`` required,
``conversionReviewVersions`` required, the API-approval annotation of protected groups).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.crd import validate_structural
from setpoint.migrate.convert import migrate_crd

SCHEMA = {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}


def legacy(**spec: Any) -> dict[str, Any]:
    """A minimal v1beta1 CRD of widgets.example.com with ``spec`` overriding its fields."""
    base: dict[str, Any] = {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets"},
        "version": "v1alpha1",
        "validation": SCHEMA,
    }
    base.update(spec)
    return {
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {k: v for k, v in base.items() if v is not None},
    }


@pytest.mark.parametrize("scope", ["", None])
def test_empty_or_null_scope_becomes_namespaced(scope: str | None) -> None:
    """v1beta1 defaulted an empty scope (``len(Scope) == 0``); v1 says Required value."""
    doc = legacy()
    doc["spec"]["scope"] = scope
    migration = migrate_crd(doc)
    assert migration.crd["spec"]["scope"] == "Namespaced"
    assert any(n.where == "spec.scope" for n in migration.notes)


def test_served_and_storage_are_explicit_booleans() -> None:
    """A version entry without served/storage read as false on the server; say so in the output."""
    doc = legacy(
        version=None,
        versions=[{"name": "v1beta2", "served": True, "storage": True}, {"name": "v1alpha1"}],
    )
    migration = migrate_crd(doc)
    old = migration.crd["spec"]["versions"][1]
    assert (old["served"], old["storage"]) == (False, False)
    assert migration.needs_human == ()


def test_a_served_flag_of_the_wrong_type_is_not_rewritten() -> None:
    """Only a missing flag is defaulted; a string is the author's mistake, left for the server."""
    doc = legacy(version=None, versions=[{"name": "v1", "served": "yes", "storage": True}])
    assert migrate_crd(doc).crd["spec"]["versions"][0]["served"] == "yes"


def test_no_storage_version_needs_a_human() -> None:
    """Exactly one storage version is required (by v1beta1 too); the note names the versions."""
    doc = legacy(version=None, versions=[{"name": "v1alpha1", "served": True}])
    migration = migrate_crd(doc)
    assert [n.where for n in migration.needs_human] == ["spec.versions"]
    assert "exactly one" in migration.needs_human[0].message


def test_version_must_be_the_first_of_versions() -> None:
    """A top-level version that is not versions[0] was invalid in v1beta1: flagged, not guessed."""
    doc = legacy(
        version="v2",
        versions=[
            {"name": "v1", "served": True, "storage": True},
            {"name": "v2", "served": True, "storage": False},
        ],
    )
    migration = migrate_crd(doc)
    assert [v["name"] for v in migration.crd["spec"]["versions"]] == ["v1", "v2"]
    assert [n.where for n in migration.needs_human] == ["spec.version"]


def test_top_level_selectable_fields_move_into_every_version() -> None:
    """spec.selectableFields (v1beta1, 1.30+) is copied per version like validation."""
    doc = legacy(
        version=None,
        versions=[
            {"name": "v1", "served": True, "storage": True},
            {"name": "v2", "served": True, "storage": False},
        ],
        selectableFields=[{"jsonPath": ".spec.color"}],
        validation={
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "properties": {"color": {"type": "string"}}}
                },
            }
        },
    )
    crd = migrate_crd(doc).crd
    assert "selectableFields" not in crd["spec"]
    for version in crd["spec"]["versions"]:
        assert version["selectableFields"] == [{"jsonPath": ".spec.color"}]


@pytest.mark.parametrize("conversion", [{}, {"strategy": ""}])
def test_conversion_without_strategy_becomes_none(conversion: dict[str, Any]) -> None:
    """v1 requires spec.conversion.strategy whenever spec.conversion is present."""
    crd = migrate_crd(legacy(conversion=conversion)).crd
    assert crd["spec"]["conversion"] == {"strategy": "None"}


def test_webhook_review_versions_move_under_webhook() -> None:
    """Explicit conversionReviewVersions move too; the service port keeps its default."""
    service = {"namespace": "ops", "name": "conv", "path": "/convert"}
    doc = legacy(
        conversion={
            "strategy": "Webhook",
            "webhookClientConfig": {"service": service},
            "conversionReviewVersions": ["v1", "v1beta1"],
        },
        preserveUnknownFields=False,
    )
    conversion = migrate_crd(doc).crd["spec"]["conversion"]
    assert conversion == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"service": service},
            "conversionReviewVersions": ["v1", "v1beta1"],
        },
    }


def test_protected_group_gets_an_unapproved_marker() -> None:
    """v1 refuses a *.k8s.io group without api-approved.kubernetes.io; v1beta1 did not ask."""
    doc = legacy(group="snapshot.storage.k8s.io")
    doc["metadata"]["name"] = "widgets.snapshot.storage.k8s.io"
    migration = migrate_crd(doc)
    annotation = migration.crd["metadata"]["annotations"]["api-approved.kubernetes.io"]
    assert annotation.startswith("unapproved")
    assert [n.where for n in migration.needs_human] == [
        "metadata.annotations[api-approved.kubernetes.io]"
    ]


def test_unprotected_or_approved_groups_are_left_alone() -> None:
    """x-k8s.io is not protected; an existing approval is kept as written."""
    doc = legacy(group="cluster.x-k8s.io")
    assert "annotations" not in migrate_crd(doc).crd["metadata"]
    doc = legacy(group="apps.k8s.io")
    doc["metadata"]["annotations"] = {"api-approved.kubernetes.io": "https://x.invalid/pull/1"}
    migration = migrate_crd(doc)
    assert migration.crd["metadata"]["annotations"] == {
        "api-approved.kubernetes.io": "https://x.invalid/pull/1"
    }
    assert migration.needs_human == ()


def test_controller_gen_int_or_string_pattern_is_kept() -> None:
    """anyOf [integer, string] beside x-kubernetes-int-or-string is the sanctioned v1 form.

    controller-gen writes it for every IntOrString field (prometheus-operator v0.38's rule
    ``expr``); the migration kept the anyOf but emptied its branches and asked a human.
    """
    int_or_string = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    wrapped: dict[str, Any] = {
        "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}],
        "x-kubernetes-int-or-string": True,
    }
    doc = legacy(
        validation={
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {"expr": int_or_string, "port": wrapped},
                    }
                },
            }
        },
        preserveUnknownFields=False,
    )
    migration = migrate_crd(doc)
    spec = migration.crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["expr"] == int_or_string
    assert spec["properties"]["port"] == wrapped
    assert migration.needs_human == ()


LEGACY = Path(__file__).resolve().parents[2] / "data" / "legacy_crds"


@pytest.mark.parametrize("path", sorted(LEGACY.glob("*.yaml")), ids=lambda p: p.stem)
def test_legacy_corpus_migrates_to_structural_v1(path: Path) -> None:
    """Each real legacy CRD names its source, is v1beta1, and migrates to a structural v1 CRD.

    The server-side half (applied, Established, example created) is
    tests/integration/migrate/test_migrate_legacy_corpus.py.
    """
    text = path.read_text()
    assert text.startswith("# Source: https://github.com/"), path.name
    docs = [d for d in yaml.safe_load_all(text) if d]
    legacy = docs[0]
    assert legacy["apiVersion"] == "apiextensions.k8s.io/v1beta1"
    assert len(docs) >= 2, f"{path.name}: an example object follows the CRD"
    crd = migrate_crd(legacy).crd
    assert crd["spec"]["scope"] in ("Namespaced", "Cluster")
    storage = [v["name"] for v in crd["spec"]["versions"] if v["storage"]]
    assert len(storage) == 1
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        status = "status" in (version.get("subresources") or {})
        assert validate_structural(schema, status_subresource=status) == [], version["name"]


def test_legacy_corpus_is_several_projects() -> None:
    """The corpus stays within its intended size: 8 to 15 files, 6 or more projects."""
    files = sorted(LEGACY.glob("*.yaml"))
    projects = {f.read_text().split()[2] for f in files}
    assert 8 <= len(files) <= 15
    assert len(projects) >= 6
