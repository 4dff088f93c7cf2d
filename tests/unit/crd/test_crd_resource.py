"""Typed resources: JSON names, unknown fields, unset vs zero, declarations and their errors."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import Field, ValidationError

from setpoint.api.declaration import (
    DeclarationError,
    FieldSchema,
    PrinterColumn,
    ResourceOptions,
    Rule,
    Scale,
    cel_rules_of,
    field,
    field_schema_of,
    resource,
)
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.resource import Model, ObjectMeta, Resource, json_name_for, python_name_for
from setpoint.api.types import TypedObject

GROUP = "unit.setpoint.dev"


class Inner(Model):
    count: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class Spec(Model):
    max_replicas: int | None = None
    replicas: int = field(default=1, minimum=0)
    paused: bool = False
    tags: list[str] = field(default_factory=list)
    note: str | None = field(None, nullable=True)
    inner: Inner | None = None
    from_: str | None = None
    api_url: str | None = field(None, json_name="apiURL")


class Status(Model):
    ready: bool | None = None


@resource(group=GROUP, version="v1", short_names=["sm"])
class Sample(Resource):
    """A sample resource."""

    spec: Spec = Field(default_factory=Spec)
    status: Status | None = None


def _obj(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Sample",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": spec,
    }


# --------------------------------------------------------------------------- JSON names


@pytest.mark.parametrize(
    ("python", "json"),
    [
        ("max_replicas", "maxReplicas"),
        ("url", "url"),
        ("url_v2", "urlV2"),
        ("http2_port", "http2Port"),
        ("x_y_z", "xYZ"),
        ("from_", "from"),
        ("ttl_seconds_after_finished", "ttlSecondsAfterFinished"),
    ],
)
def test_json_names_are_camel_case_and_convert_back(python: str, json: str) -> None:
    assert json_name_for(python) == json
    assert python_name_for(json) == python.rstrip("_")


def test_declared_fields_use_derived_and_explicit_json_names() -> None:
    aliases = {name: info.alias for name, info in Spec.model_fields.items()}
    assert aliases["max_replicas"] == "maxReplicas"
    assert aliases["from_"] == "from"
    assert aliases["api_url"] == "apiURL"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("replicas_2: int = 0", "converts back to 'replicas2'"),
        ("maxReplicas: int = 0", "converts back to 'max_replicas'"),
        ("max__replicas: int = 0", "converts back to 'max_replicas'"),
    ],
)
def test_a_json_name_that_does_not_round_trip_fails_at_class_definition(
    source: str, expected: str
) -> None:
    namespace: dict[str, Any] = {"Model": Model}
    with pytest.raises(DeclarationError, match=expected) as info:
        exec(f"class Broken(Model):\n    {source}\n", namespace)
    assert "Broken." in str(info.value)
    assert "json_name=" in str(info.value)


def test_two_fields_with_one_json_name_fail() -> None:
    with pytest.raises(DeclarationError, match="'maxReplicas' is also used by"):

        class Clash(Model):
            max_replicas: int = 0
            other: int = field(default=0, json_name="maxReplicas")


def test_explicit_json_name_need_not_convert_back() -> None:
    class Explicit(Model):
        pod_cidr: str = field(default="", json_name="podCIDR")

    assert Explicit.model_fields["pod_cidr"].alias == "podCIDR"


def test_excluded_fields_are_rejected_because_they_would_be_dropped() -> None:
    with pytest.raises(DeclarationError, match="excluded from serialization"):

        class Excluded(Model):
            secret: str = Field(default="", exclude=True)


def test_split_read_and_write_names_are_rejected() -> None:
    with pytest.raises(DeclarationError, match="reads and writes different JSON names"):

        class Split(Model):
            value: int = Field(default=0, validation_alias="v", serialization_alias="value")


# --------------------------------------------------------------------------- round trips


def test_from_object_reads_json_names_and_to_object_writes_them() -> None:
    obj = Sample.from_object(_obj(maxReplicas=5, apiURL="https://x"))
    assert obj.spec.max_replicas == 5
    assert obj.spec.api_url == "https://x"
    assert obj.to_object()["spec"] == {"maxReplicas": 5, "apiURL": "https://x"}


def test_python_names_in_json_stay_unknown_fields_instead_of_filling_declared_ones() -> None:
    obj = Sample.from_object(_obj(max_replicas=7))
    assert obj.spec.max_replicas is None
    assert obj.to_object()["spec"] == {"max_replicas": 7}


def test_unknown_fields_survive_at_every_level() -> None:
    source = _obj(inner={"count": 1, "future": {"a": [1, 2]}}, newField="x")
    source["metadata"]["someNewMetaField"] = {"k": "v"}
    source["topLevelUnknown"] = [1, {"b": None}]
    source["status"] = {"ready": True, "observedSomething": 3}
    obj = Sample.from_object(source)
    assert obj.to_object() == source


def test_unset_and_zero_differ() -> None:
    absent = Sample.from_object(_obj())
    zero = Sample.from_object(_obj(maxReplicas=0, paused=False))
    assert absent.spec.max_replicas is None
    assert zero.spec.max_replicas == 0
    assert "maxReplicas" not in absent.to_object()["spec"]
    assert zero.to_object()["spec"] == {"maxReplicas": 0, "paused": False}


def test_defaults_are_omitted_until_assigned() -> None:
    obj = Sample(spec=Spec())
    assert obj.spec.replicas == 1
    assert obj.to_object()["spec"] == {}
    obj.spec.replicas = 1
    assert obj.to_object()["spec"] == {"replicas": 1}


def test_in_place_edits_of_default_collections_are_written() -> None:
    obj = Sample(spec=Spec())
    obj.spec.tags.append("a")
    obj.metadata.labels["app"] = "x"
    out = obj.to_object()
    assert out["spec"] == {"tags": ["a"]}
    assert out["metadata"] == {"labels": {"app": "x"}}


def test_none_is_omitted_unless_the_field_is_nullable_and_assigned() -> None:
    obj = Sample(spec=Spec(max_replicas=None, note=None))
    assert obj.to_object()["spec"] == {"note": None}
    parsed = Sample.from_object(_obj(note=None))
    assert parsed.to_object()["spec"] == {"note": None}
    assert Sample.from_object(_obj()).to_object()["spec"] == {}


def test_to_object_always_carries_api_version_kind_and_metadata_first() -> None:
    out = Sample().to_object()
    assert list(out)[:3] == ["apiVersion", "kind", "metadata"]
    assert out["apiVersion"] == f"{GROUP}/v1"
    assert out["kind"] == "Sample"
    assert out["metadata"] == {}


def test_from_object_rejects_another_kind_or_version() -> None:
    wrong = _obj()
    wrong["apiVersion"] = f"{GROUP}/v2"
    with pytest.raises(ValidationError, match=r"Sample parses unit\.setpoint\.dev/v1 Sample"):
        Sample.from_object(wrong)
    wrong = _obj()
    wrong["kind"] = "Other"
    with pytest.raises(ValidationError, match="kind='Other'"):
        Sample.from_object(wrong)


def test_from_object_rejects_wrong_value_types_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"spec\.replicas"):
        Sample.from_object(_obj(replicas="many"))


def test_metadata_is_typed() -> None:
    source = _obj()
    source["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        generation=3,
        creationTimestamp="2024-05-01T10:00:00Z",
        deletionTimestamp="2024-05-02T10:00:00Z",
        finalizers=["x/y"],
        ownerReferences=[
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u", "controller": True}
        ],
        labels={"a": "b"},
        annotations={"c": "d"},
    )
    obj = Sample.from_object(source)
    meta = obj.metadata
    assert (meta.name, meta.namespace, meta.uid, meta.resource_version) == ("s", "ns", "u-1", "42")
    assert meta.generation == 3
    assert meta.creation_timestamp is not None and meta.creation_timestamp.year == 2024
    assert meta.owner_references[0].controller is True
    assert meta.owner_references[0].block_owner_deletion is None
    assert obj.to_object() == source


def test_typed_objects_satisfy_the_typed_object_protocol() -> None:
    assert isinstance(Sample(), TypedObject)
    assert Sample.gvk == GroupVersionKind(GROUP, "v1", "Sample")


def test_resource_info_serves_the_rest_mapper() -> None:
    info = Sample.resource_info()
    assert info.plural == "samples"
    assert info.singular == "sample"
    assert info.namespaced is True
    assert info.subresources == frozenset({"status"})
    assert info.short_names == ("sm",)
    assert info.gvr.resource == "samples"


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize(
    ("kind", "plural"),
    [("Widget", "widgets"), ("Policy", "policies"), ("Box", "boxes"), ("Gateway", "gateways")],
)
def test_plural_defaults_follow_kubebuilder(kind: str, plural: str) -> None:
    @resource(group=GROUP, version="v1", kind=kind)
    class Anything(Resource):
        pass

    assert Anything.resource_info().plural == plural
    assert Anything.declaration().resolved_list_kind == f"{kind}List"


def test_kind_defaults_to_the_class_name() -> None:
    @resource(group=GROUP, version="v1")
    class Gizmo(Resource):
        pass

    assert Gizmo.gvk.kind == "Gizmo"


def test_cluster_scope_and_subresources() -> None:
    @resource(group=GROUP, version="v1", scope="Cluster", scale=Scale())
    class Scaled(Resource):
        status: Status | None = None

    info = Scaled.resource_info()
    assert info.namespaced is False
    assert info.subresources == frozenset({"status", "scale"})


def test_status_subresource_can_be_turned_off() -> None:
    @resource(group=GROUP, version="v1", status_subresource=False)
    class NoStatus(Resource):
        status: Status | None = None

    assert NoStatus.resource_info().subresources == frozenset()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group": "nodot"}, "at least one dot"),
        ({"group": "Upper.case"}, "DNS subdomain"),
        ({"version": "1"}, "DNS label"),
        ({"kind": "bad kind"}, "CamelCase"),
        ({"plural": "Widgets"}, "lower-case DNS label"),
        ({"short_names": "wd"}, "list of names"),
        ({"short_names": ["WD"]}, "lower-case DNS label"),
        ({"deprecation_warning": "old"}, "only allowed with deprecated=True"),
        ({"deprecated": True, "deprecation_warning": "x" * 257}, "1 to 256"),
        ({"storage": True, "served": False}, "not served"),
        ({"selectable_fields": [".metadata.name"]}, "outside metadata"),
    ],
)
def test_invalid_resource_options_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    options = {"group": GROUP, "version": "v1", **kwargs}
    with pytest.raises(ValueError, match=message):
        ResourceOptions(**options)


def test_status_subresource_requires_a_status_field() -> None:
    with pytest.raises(DeclarationError, match="declares no 'status' field"):

        @resource(group=GROUP, version="v1", status_subresource=True)
        class Missing(Resource):
            pass


def test_scale_requires_status() -> None:
    with pytest.raises(DeclarationError, match="scale subresource without the status"):

        @resource(group=GROUP, version="v1", scale=Scale())
        class Missing(Resource):
            pass


def test_api_version_and_kind_cannot_be_fields() -> None:
    with pytest.raises(DeclarationError, match="declares a field 'kind'"):

        @resource(group=GROUP, version="v1")
        class Reserved(Resource):
            kind: str = ""


def test_resource_decorator_rejects_non_resources() -> None:
    with pytest.raises(DeclarationError, match="not a Resource"):
        resource(group=GROUP, version="v1")(Spec)


def test_undeclared_resources_say_how_to_declare_them() -> None:
    class Undeclared(Resource):
        pass

    with pytest.raises(DeclarationError, match=r"@sp.resource\(group=..., version=...\)"):
        Undeclared.resource_info()
    assert Undeclared.is_declared() is False


def test_undeclared_resource_bases_keep_api_version_and_kind_as_unknown_fields() -> None:
    class Base(Resource):
        pass

    source = {"apiVersion": "x/v1", "kind": "Y", "metadata": {"name": "n"}}
    assert Base.from_object(source).to_object() == source


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "json_path": ".a"}, "empty"),
        ({"name": "A", "json_path": "a"}, "must start with '.'"),
        ({"name": "A", "json_path": ".a", "priority": -1}, "priority"),
    ],
)
def test_invalid_printer_columns(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PrinterColumn(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"spec_replicas_path": ".replicas"}, "under .spec"),
        ({"status_replicas_path": ".spec.replicas"}, "under .status"),
        ({"label_selector_path": ".metadata.labels"}, "under .spec or .status"),
    ],
)
def test_invalid_scale_paths(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scale(**kwargs)


# --------------------------------------------------------------------------- rules and fields


def test_rules_decorate_models_in_source_order_and_inherit() -> None:
    @Rule("self.a < 10")
    @Rule("self.a > 0", message="a must be positive")
    class Base(Model):
        a: int = 1

    @Rule("self.b")
    class Child(Base):
        b: bool = True

    assert [r.rule for r in cel_rules_of(Base)] == ["self.a < 10", "self.a > 0"]
    assert [r.rule for r in cel_rules_of(Child)] == ["self.a < 10", "self.a > 0", "self.b"]


def test_rule_schema_carries_every_declared_field() -> None:
    rule = Rule(
        "self.x == oldSelf.x",
        message="x is immutable",
        message_expression="'x changed'",
        field_path=".x",
        reason="FieldValueForbidden",
        optional_old_self=True,
    )
    assert rule.to_schema() == {
        "rule": "self.x == oldSelf.x",
        "message": "x is immutable",
        "messageExpression": "'x changed'",
        "fieldPath": ".x",
        "reason": "FieldValueForbidden",
        "optionalOldSelf": True,
    }


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((" ",), {}, "empty"),
        (("a",), {"message": "two\nlines"}, "single line"),
        (("a ||\n b",), {}, "requires a message"),
        (("a",), {"field_path": ""}, "field_path"),
    ],
)
def test_invalid_rules(args: tuple[str], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rule(*args, **kwargs)


def test_rules_only_decorate_models() -> None:
    with pytest.raises(DeclarationError, match="not a setpoint Model"):
        Rule("true")(dict)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"exclusive_minimum": True}, "needs minimum"),
        ({"exclusive_maximum": True}, "needs maximum"),
        ({"minimum": 5, "maximum": 1}, "greater than maximum"),
        ({"min_length": 3, "max_length": 2}, "greater than max_length"),
        ({"max_items": -1}, "negative"),
        ({"multiple_of": 0}, "positive"),
        ({"pattern": "("}, "not a regular expression"),
        ({"list_type": "set", "list_map_keys": ("a",)}, "needs list_type='map'"),
        ({"list_type": "map"}, "needs list_map_keys"),
        ({"unique_items": True, "list_type": "atomic"}, "conflicts"),
        ({"enum": ()}, "allows no value"),
    ],
)
def test_contradictory_field_declarations_are_rejected(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        FieldSchema(**kwargs)


def test_field_carries_its_schema_and_both_default_forms() -> None:
    class Holder(Model):
        a: int = field(default=3, minimum=1)
        b: list[int] = field(default_factory=lambda: [1], max_items=2)

    assert Holder().a == 3
    assert Holder().b == [1]
    declared = field_schema_of(Holder.model_fields["a"])
    assert declared is not None and declared.minimum == 1
    with pytest.raises(ValueError, match="not both"):
        field(default=1, default_factory=list)


def test_field_constraints_are_left_to_the_api_server() -> None:
    # A reconciler must be able to read what the server stored, even after a schema tightens.
    parsed = Sample.from_object(_obj(replicas=-1))
    assert parsed.spec.replicas == -1


def test_attribute_docstrings_become_descriptions() -> None:
    class Documented(Model):
        size: int = 0
        """How big."""

    assert Documented.model_fields["size"].description == "How big."


def test_object_meta_round_trips_alone() -> None:
    meta = ObjectMeta.model_validate({"name": "a", "x": 1}, by_alias=True, by_name=False)
    assert meta.model_dump(mode="json") == {"name": "a", "x": 1}


def test_importing_the_resource_module_does_not_import_yaml() -> None:
    code = "import sys, setpoint.api.resource, setpoint.api.rbac; print('yaml' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


def test_set_fields_are_written_sorted_so_rewrites_do_not_diff() -> None:
    class Tagged(Model):
        tags: set[str] = Field(default_factory=set)

    parsed = Tagged.model_validate({"tags": ["b", "c", "a"]}, by_alias=True, by_name=False)
    assert parsed.model_dump(mode="json") == {"tags": ["a", "b", "c"]}


def test_nested_resources_without_metadata_are_written_without_it() -> None:
    @resource(group=GROUP, version="v1")
    class Part(Resource):
        pass

    class Holder(Model):
        part: Part | None = None

    holder = Holder.model_validate(
        {"part": {"apiVersion": f"{GROUP}/v1", "kind": "Part"}}, by_alias=True, by_name=False
    )
    assert holder.model_dump(mode="json") == {"part": {"apiVersion": f"{GROUP}/v1", "kind": "Part"}}
    assert Part().to_object()["metadata"] == {}
