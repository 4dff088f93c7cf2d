"""CRD assembly: names, versions, subresources, columns, and every cross-version check."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import Field

from setpoint.api.declaration import PrinterColumn, Scale, field, resource
from setpoint.api.resource import Model, Resource
from setpoint.crd import CRDGenerationError, crd_for, crd_path, generate_crds, version_priority
from tests._support.crd_golden import load_fixtures

GROUP = "gen.setpoint.dev"
FIXTURES = load_fixtures()


class Spec(Model):
    replicas: int = 1
    color: str = ""
    tags: list[str] = Field(default_factory=list)


class Status(Model):
    replicas: int | None = None
    selector: str | None = None
    phase: str | None = None


def test_single_version_crd_shape() -> None:
    @resource(
        group=GROUP,
        version="v1",
        short_names=["sh"],
        categories=["all"],
        scale=Scale(label_selector_path=".status.selector"),
        printer_columns=[PrinterColumn(name="Phase", json_path=".status.phase")],
        selectable_fields=[".spec.color"],
    )
    class Shape(Resource):
        spec: Spec
        status: Status | None = None

    crd = crd_for(Shape)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"] == {"name": f"shapes.{GROUP}"}
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "Shape",
        "listKind": "ShapeList",
        "plural": "shapes",
        "singular": "shape",
        "shortNames": ["sh"],
        "categories": ["all"],
    }
    assert "conversion" not in spec
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    assert version["additionalPrinterColumns"] == [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"}
    ]
    assert version["selectableFields"] == [{"jsonPath": ".spec.color"}]
    assert version["schema"]["openAPIV3Schema"]["properties"]["spec"]["type"] == "object"
    assert crd_path(crd) == f"crd/bases/{GROUP}_shapes.yaml"


def test_no_subresources_without_status() -> None:
    @resource(group=GROUP, version="v1", scope="Cluster")
    class Plain(Resource):
        spec: Spec | None = None

    (version,) = crd_for(Plain)["spec"]["versions"]
    assert "subresources" not in version
    assert crd_for(Plain)["spec"]["scope"] == "Cluster"


def test_multi_version_kinds_become_one_crd_with_one_storage_version() -> None:
    crd = crd_for(FIXTURES.GadgetV1Alpha1, FIXTURES.Gadget, FIXTURES.GadgetV1Beta1)
    versions = crd["spec"]["versions"]
    assert [v["name"] for v in versions] == ["v1", "v1beta1", "v1alpha1"]
    assert [v["storage"] for v in versions] == [True, False, False]
    assert [v["served"] for v in versions] == [True, False, True]
    alpha = versions[2]
    assert alpha["deprecated"] is True
    assert alpha["deprecationWarning"].startswith("fixtures.setpoint.dev/v1alpha1 Gadget")
    assert crd["spec"]["names"]["shortNames"] == ["gd"]
    assert "subresources" in versions[0]
    assert "subresources" not in versions[2]


def test_version_order_follows_kubernetes_priority() -> None:
    names = ["v1alpha1", "foo", "v2", "v1beta2", "v1", "v10beta1", "v1beta1", "v11alpha2", "bar"]
    random.Random(4).shuffle(names)
    assert sorted(names, key=version_priority) == [
        "v2",
        "v1",
        "v10beta1",
        "v1beta2",
        "v1beta1",
        "v11alpha2",
        "v1alpha1",
        "bar",
        "foo",
    ]


def test_generate_crds_groups_kinds_and_sorts_files() -> None:
    manifests = generate_crds(
        [FIXTURES.Widget, FIXTURES.Gadget, FIXTURES.GadgetV1Alpha1, FIXTURES.GadgetV1Beta1]
    )
    assert [m.path for m in manifests] == [
        "crd/bases/fixtures.setpoint.dev_gadgets.yaml",
        "crd/bases/fixtures.setpoint.dev_widgets.yaml",
    ]
    assert len(manifests[0].documents[0]["spec"]["versions"]) == 3


def test_undeclared_bases_are_skipped() -> None:
    class Base(Resource):
        spec: Spec | None = None

    assert generate_crds([Base]) == []


def _problems(*classes: type[Resource]) -> list[str]:
    with pytest.raises(CRDGenerationError) as info:
        crd_for(*classes)
    return [str(e) for e in info.value.errors]


def test_two_storage_versions_are_an_error() -> None:
    @resource(group=GROUP, version="v1", kind="Dup", storage=True)
    class DupV1(Resource):
        pass

    @resource(group=GROUP, version="v2", kind="Dup", storage=True)
    class DupV2(Resource):
        pass

    (problem,) = _problems(DupV1, DupV2)
    assert "2 storage versions" in problem
    assert "storage=True" in problem


def test_no_storage_version_among_several_is_an_error() -> None:
    @resource(group=GROUP, version="v1", kind="Dup")
    class DupV1(Resource):
        pass

    @resource(group=GROUP, version="v2", kind="Dup")
    class DupV2(Resource):
        pass

    (problem,) = _problems(DupV1, DupV2)
    assert "0 storage versions" in problem


def test_duplicate_versions_and_mixed_kinds_are_errors() -> None:
    @resource(group=GROUP, version="v1", kind="Dup", storage=True)
    class DupA(Resource):
        pass

    @resource(group=GROUP, version="v1", kind="Dup")
    class DupB(Resource):
        pass

    @resource(group=GROUP, version="v2", kind="Other")
    class Other(Resource):
        pass

    assert any("version v1 is also declared by" in p for p in _problems(DupA, DupB))
    assert any("pass the versions of one kind" in p for p in _problems(DupA, Other))


def test_versions_must_agree_on_crd_wide_names() -> None:
    @resource(
        group=GROUP, version="v1", kind="Dup", storage=True, short_names=["a"], scope="Namespaced"
    )
    class DupA(Resource):
        pass

    @resource(group=GROUP, version="v2", kind="Dup", short_names=["b"], scope="Cluster")
    class DupB(Resource):
        pass

    problems = _problems(DupA, DupB)
    assert any("versions disagree on short_names" in p for p in problems), problems
    assert any("versions disagree on scope" in p for p in problems), problems


def test_names_declared_on_one_version_apply_to_all() -> None:
    @resource(
        group=GROUP,
        version="v1",
        kind="Spread",
        storage=True,
        categories=["all"],
        short_names=["sp"],
        plural="spreadz",
        scope="Cluster",
    )
    class SpreadV1(Resource):
        pass

    @resource(group=GROUP, version="v1alpha1", kind="Spread")
    class SpreadV1Alpha1(Resource):
        pass

    crd = crd_for(SpreadV1, SpreadV1Alpha1)
    assert crd["spec"]["names"]["categories"] == ["all"]
    assert crd["spec"]["names"]["plural"] == "spreadz"
    assert crd["spec"]["scope"] == "Cluster"
    # The typed class of the other version serves the same resource.
    info = SpreadV1Alpha1.resource_info()
    assert (info.plural, info.namespaced, info.short_names) == ("spreadz", False, ("sp",))


def test_columns_scale_and_selectable_fields_must_point_at_declared_fields() -> None:
    @resource(
        group=GROUP,
        version="v1",
        scale=Scale(spec_replicas_path=".spec.color", status_replicas_path=".status.nope"),
        printer_columns=[
            PrinterColumn(name="Bad", json_path=".spec.colour"),
            PrinterColumn(name="Ok", json_path=".metadata.labels.app"),
            PrinterColumn(name="Filter", json_path=".spec.tags[0]"),
        ],
        selectable_fields=[".spec.tags"],
    )
    class Pointy(Resource):
        spec: Spec
        status: Status | None = None

    problems = _problems(Pointy)
    assert any("printer column 'Bad' path '.spec.colour' names a field" in p for p in problems)
    assert any(
        "spec_replicas_path '.spec.color' points at a field of type string" in p for p in problems
    )
    assert any("status_replicas_path '.status.nope'" in p for p in problems)
    assert any(
        "selectable field '.spec.tags' points at a field of type array" in p for p in problems
    )
    assert not any("'Ok'" in p or "'Filter'" in p for p in problems)


def test_schema_errors_name_resource_class_and_field() -> None:
    class BadSpec(Model):
        size: int = field(pattern="x")
        other: int | float = 0

    @resource(group=GROUP, version="v1")
    class Broken(Resource):
        spec: BadSpec

    with pytest.raises(CRDGenerationError) as info:
        crd_for(Broken)
    text = str(info.value)
    assert "2 problem(s)" in text
    assert "Broken gen.setpoint.dev/v1" in text
    assert "BadSpec.size (.spec.size): pattern applies to string fields" in text
    assert "BadSpec.other (.spec.other)" in text
    assert "Fix:" in text


def test_structural_violations_are_attributed_to_python_fields() -> None:
    class BadMapSpec(Model):
        items: list[Spec] = field(default_factory=list, list_map_keys=["missing"])

    @resource(group=GROUP, version="v1")
    class BadMapped(Resource):
        spec: BadMapSpec

    problems = _problems(BadMapped)
    assert any(
        "BadMapSpec.items (.spec.items): map key 'missing' is not a field" in p for p in problems
    ), problems


def test_all_kinds_are_reported_together() -> None:
    class BadSpec(Model):
        size: int = field(pattern="x")

    @resource(group=GROUP, version="v1", kind="One")
    class One(Resource):
        spec: BadSpec

    @resource(group=GROUP, version="v1", kind="Two")
    class Two(Resource):
        spec: BadSpec

    with pytest.raises(CRDGenerationError) as info:
        generate_crds([One, Two])
    labels = {e.resource.split()[0] for e in info.value.errors if e.resource}
    assert labels == {"One", "Two"}


def test_non_resource_arguments_are_errors() -> None:
    with pytest.raises(CRDGenerationError, match="is not a Resource class"):
        not_a_resource: Any = Spec  # deliberately the wrong type
        crd_for(not_a_resource)
    with pytest.raises(CRDGenerationError, match="no resource classes"):
        crd_for()

    class Undeclared(Resource):
        pass

    with pytest.raises(CRDGenerationError, match="decorate it with"):
        crd_for(Undeclared)
