"""Python types -> OpenAPI schema: the type table, declarations, defaults and error reporting."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import annotated_types
import pytest
from pydantic import BaseModel, Field, StringConstraints

from setpoint.api.declaration import IntOrString, Quantity, Rule, field, resource
from setpoint.api.resource import Model, ObjectMeta, Resource
from setpoint.crd import model_schema, resource_schema

GROUP = "unit.setpoint.dev"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


def node_for(annotation: Any, value: Any = ...) -> dict[str, Any]:
    """The schema of a single field ``x`` declared with this annotation (and default)."""
    namespace: dict[str, Any] = {"__annotations__": {"x": annotation}}
    if value is not ...:
        namespace["x"] = value
    cls = type("Holder", (Model,), namespace)
    built = model_schema(cls)
    assert not built.errors, [str(e) for e in built.errors]
    node: dict[str, Any] = built.schema["properties"]["x"]
    return node


def errors_for(annotation: Any, value: Any = ...) -> list[str]:
    namespace: dict[str, Any] = {"__annotations__": {"x": annotation}}
    if value is not ...:
        namespace["x"] = value
    cls = type("Holder", (Model,), namespace)
    return [str(e) for e in model_schema(cls).errors]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (dt.datetime, {"type": "string", "format": "date-time"}),
        (dt.date, {"type": "string", "format": "date"}),
        (uuid.UUID, {"type": "string", "format": "uuid"}),
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, 2], {"type": "integer", "enum": [1, 2]}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (Level, {"type": "integer", "enum": [1, 2]}),
        (
            IntOrString,
            {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            },
        ),
        (
            str | int,
            {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            },
        ),
        (list[str], {"type": "array", "items": {"type": "string"}}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (
            set[str],
            {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        ),
        (
            frozenset[int],
            {"type": "array", "items": {"type": "integer"}, "x-kubernetes-list-type": "set"},
        ),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, str], {"type": "object", "additionalProperties": {"type": "string"}}),
        (dict[str, Any], {"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
        (Any, {"x-kubernetes-preserve-unknown-fields": True}),
        (list[Any], {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}),
    ],
)
def test_type_mapping(annotation: Any, expected: dict[str, Any]) -> None:
    assert node_for(annotation) == expected


def test_optional_types_are_the_type_and_not_required() -> None:
    class Holder(Model):
        a: int | None = None
        b: int

    schema = model_schema(Holder).schema
    assert schema["properties"]["a"] == {"type": "integer"}
    assert schema["required"] == ["b"]


def test_nested_models_become_objects_with_docs_and_required_fields() -> None:
    class Child(Model):
        """A child."""

        name: str
        """Its name."""
        size: int = 0

    class Parent(Model):
        child: Child
        """The child."""
        children: list[Child] = Field(default_factory=list)

    schema = model_schema(Parent).schema
    child = schema["properties"]["child"]
    assert child["description"] == "The child."
    assert child["required"] == ["name"]
    assert child["properties"]["name"] == {"type": "string", "description": "Its name."}
    assert schema["properties"]["children"]["items"]["description"] == "A child."


def test_multi_line_docstrings_are_dedented() -> None:
    class Doc(Model):
        value: int = 0
        """First line.

        Details:
            - nested item
        """

    assert model_schema(Doc).schema["properties"]["value"]["description"] == (
        "First line.\n\nDetails:\n    - nested item"
    )


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (field(minimum=1, maximum=5), {"minimum": 1, "maximum": 5}),
        (
            field(minimum=0, exclusive_minimum=True, maximum=9, exclusive_maximum=True),
            {"minimum": 0, "exclusiveMinimum": True, "maximum": 9, "exclusiveMaximum": True},
        ),
        (field(multiple_of=3), {"multipleOf": 3}),
        (field(format="int32"), {"format": "int32"}),
        (field(enum=[1, 2]), {"enum": [1, 2]}),
        (field(title="T", example=3), {"title": "T", "example": 3}),
        (Field(ge=1, lt=10), {"minimum": 1, "maximum": 10, "exclusiveMaximum": True}),
        (Field(gt=0, le=5), {"minimum": 0, "exclusiveMinimum": True, "maximum": 5}),
        (Field(multiple_of=2), {"multipleOf": 2}),
    ],
)
def test_number_declarations(declared: Any, expected: dict[str, Any]) -> None:
    assert node_for(int, declared) == {"type": "integer", **expected}


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (field(min_length=1, max_length=5), {"minLength": 1, "maxLength": 5}),
        (field(pattern="^a+$"), {"pattern": "^a+$"}),
        (field(format="email"), {"format": "email"}),
        (field(enum=["x", "y"]), {"enum": ["x", "y"]}),
        (Field(min_length=2, max_length=3, pattern="b"), {"minLength": 2, "maxLength": 3}),
    ],
)
def test_string_declarations(declared: Any, expected: dict[str, Any]) -> None:
    node = node_for(str, declared)
    for key, value in expected.items():
        assert node[key] == value
    assert node["type"] == "string"


def test_pydantic_pattern_is_mapped() -> None:
    assert node_for(str, Field(pattern="^b$"))["pattern"] == "^b$"


def test_annotated_constraints_on_items_and_map_values() -> None:
    node = node_for(list[Annotated[str, field(max_length=3)]])
    assert node["items"] == {"type": "string", "maxLength": 3}
    node = node_for(dict[str, Annotated[int, annotated_types.Ge(0)]])
    assert node["additionalProperties"] == {"type": "integer", "minimum": 0}
    node = node_for(list[Annotated[str, StringConstraints(min_length=1, pattern="^x")]])
    assert node["items"] == {"type": "string", "minLength": 1, "pattern": "^x"}
    node = node_for(Annotated[list[int], annotated_types.Len(1, 4)])
    assert (node["minItems"], node["maxItems"]) == (1, 4)


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (field(min_items=1, max_items=3), {"minItems": 1, "maxItems": 3}),
        (field(unique_items=True), {"x-kubernetes-list-type": "set"}),
        (field(list_type="atomic"), {"x-kubernetes-list-type": "atomic"}),
        (Field(min_length=2), {"minItems": 2}),
    ],
)
def test_list_declarations(declared: Any, expected: dict[str, Any]) -> None:
    node = node_for(list[str], declared)
    assert node == {"type": "array", "items": {"type": "string"}, **expected}


def test_map_lists_translate_python_key_names() -> None:
    class Entry(Model):
        port_name: str
        value: int = 0

    node = node_for(list[Entry], field(list_map_keys=["port_name"]))
    assert node["x-kubernetes-list-type"] == "map"
    assert node["x-kubernetes-list-map-keys"] == ["portName"]


def test_object_items_of_sets_are_atomic() -> None:
    class Item(Model):
        a: int

    node = node_for(list[Item], field(unique_items=True))
    assert node["items"]["x-kubernetes-map-type"] == "atomic"


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (field(min_properties=1, max_properties=4), {"minProperties": 1, "maxProperties": 4}),
        (field(map_type="atomic"), {"x-kubernetes-map-type": "atomic"}),
    ],
)
def test_map_declarations(declared: Any, expected: dict[str, Any]) -> None:
    assert node_for(dict[str, str], declared) == {
        "type": "object",
        "additionalProperties": {"type": "string"},
        **expected,
    }


def test_nullable_rules_preserve_unknown_and_embedded() -> None:
    assert node_for(str | None, field(None, nullable=True)) == {"type": "string", "nullable": True}
    rules = [Rule("self > 0", message="positive")]
    assert node_for(int, field(rules=rules))["x-kubernetes-validations"] == [
        {"rule": "self > 0", "message": "positive"}
    ]

    class Ext(Model):
        name: str = ""

    ext = node_for(Ext, field(default_factory=Ext, preserve_unknown_fields=True))
    assert ext["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" in ext
    assert node_for(dict[str, Any], field(embedded_resource=True)) == {
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "x-kubernetes-preserve-unknown-fields": True,
    }


def test_quantity_is_int_or_string_with_the_quantity_pattern() -> None:
    node = node_for(Quantity)
    assert node["x-kubernetes-int-or-string"] is True
    assert node["pattern"].startswith("^(\\+|-)?")


def test_type_level_rules_land_on_the_object() -> None:
    @Rule("self.a <= self.b", message="a <= b")
    class Pair(Model):
        a: int = 0
        b: int = 0

    assert model_schema(Pair).schema["x-kubernetes-validations"] == [
        {"rule": "self.a <= self.b", "message": "a <= b"}
    ]


# --------------------------------------------------------------------------- defaults


def test_defaults_become_server_side_defaults() -> None:
    class Sub(Model):
        n: int = 1

    class Holder(Model):
        count: int = 3
        name: str = "x"
        color: Color = Color.BLUE
        when: dt.datetime = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
        port: IntOrString = "http"
        sub: Sub = Field(default_factory=Sub)
        nonempty: list[str] = Field(default_factory=lambda: ["a"])
        empty: list[str] = Field(default_factory=list)
        empty_map: dict[str, str] = Field(default_factory=dict)
        unset: int | None = None

    props = model_schema(Holder).schema["properties"]
    assert props["count"]["default"] == 3
    assert props["name"]["default"] == "x"
    assert props["color"]["default"] == "blue"
    assert props["when"]["default"] == "2024-01-02T03:04:05Z"
    assert props["port"]["default"] == "http"
    assert props["sub"]["default"] == {"n": 1}  # spelled out: the server checks it as is
    assert props["nonempty"]["default"] == ["a"]
    for name in ("empty", "emptyMap", "unset"):
        assert "default" not in props[name]


# --------------------------------------------------------------------------- resources


def test_resource_root_has_type_meta_and_plain_metadata() -> None:
    class Spec(Model):
        size: int = 0

    @resource(group=GROUP, version="v1")
    class Root(Resource):
        """The root."""

        spec: Spec

    schema = resource_schema(Root).schema
    assert schema["type"] == "object"
    assert schema["description"] == "The root."
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["properties"]["apiVersion"]["type"] == "string"
    assert schema["properties"]["kind"]["type"] == "string"
    assert schema["required"] == ["spec"]


def test_nested_resources_are_embedded_with_their_type_fixed() -> None:
    @resource(group=GROUP, version="v1")
    class Inner(Resource):
        pass

    class Holder(Model):
        inner: Inner | None = None

    node = model_schema(Holder).schema["properties"]["inner"]
    assert node["x-kubernetes-embedded-resource"] is True
    assert node["properties"]["apiVersion"]["enum"] == [f"{GROUP}/v1"]
    assert node["properties"]["kind"]["enum"] == ["Inner"]
    assert node["properties"]["metadata"] == {"type": "object"}


def test_metadata_nested_in_a_template_keeps_its_settable_parts() -> None:
    class Template(Model):
        metadata: ObjectMeta | None = None

    node = model_schema(Template).schema["properties"]["metadata"]
    assert set(node["properties"]) == {"name", "namespace", "labels", "annotations", "finalizers"}


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("annotation", "declared", "message"),
    [
        (int | float, ..., "cannot be expressed in a structural schema"),
        (str | None, ..., "type allows None but the field has no default"),
        (tuple[int, str], ..., "fixed-length tuple"),
        (dict[int, str], ..., "map keys must be str"),
        (bytes, ..., "bytes fields do not round-trip"),
        (complex, ..., "has no schema mapping"),
        (Literal["a", 1], ..., "mixes value types"),
        (str, field(minimum=1), "minimum applies to integer and number fields"),
        (int, field(pattern="x"), "pattern applies to string fields"),
        (list[str], field(pattern="x"), "list[Annotated[str, sp.field(pattern=...)]]"),
        (int, field(min_items=1), "min_items applies to list fields"),
        (str, field(unique_items=True), "applies to list fields"),
        (str, field(max_properties=1), "applies to model and dict fields"),
        (str, field(map_type="atomic"), "applies to model and dict fields"),
        (int, field(enum=["a"]), "not of the field's type"),
        (list[int], field(enum=[1]), "enum applies to scalar fields"),
        (int, field(preserve_unknown_fields=True), "preserve_unknown_fields applies"),
        (int, field(embedded_resource=True), "embedded_resource applies"),
        pytest.param(
            list[Annotated[int, field(json_name="y")]],
            ...,
            "json_name declared inside",
            marks=pytest.mark.filterwarnings("ignore::UserWarning"),
        ),
    ],
)
def test_declarations_that_cannot_be_a_schema_are_errors(
    annotation: Any, declared: Any, message: str
) -> None:
    errors = errors_for(annotation, declared)
    assert any(message in e for e in errors), errors
    assert all("Holder.x" in e for e in errors), errors


def test_recursive_models_are_errors_with_the_chain() -> None:
    class Node(Model):
        children: list[Node] = Field(default_factory=list)

    Node.model_rebuild()
    errors = [str(e) for e in model_schema(Node).errors]
    assert any("recursive type (Node -> Node)" in e for e in errors), errors


def test_plain_pydantic_models_must_derive_from_setpoint_model() -> None:
    class Plain(BaseModel):
        a: int = 0

    errors = errors_for(Plain | None, None)
    assert any("derive Plain from sp.Model" in e for e in errors), errors


def test_errors_name_the_field_path_and_origin() -> None:
    class Bad(Model):
        value: int = field(pattern="x")

    class Spec(Model):
        bad: Bad | None = None

    @resource(group=GROUP, version="v1")
    class Root(Resource):
        spec: Spec

    (error,) = resource_schema(Root).errors
    assert error.field_path == ".spec.bad.value"
    assert error.origin == "Bad.value"
    assert "Fix:" in str(error)


def test_dependent_default_factories_are_errors() -> None:
    class Holder(Model):
        a: int = 1
        b: int = Field(default_factory=lambda data: data["a"] + 1)

    errors = [str(e) for e in model_schema(Holder).errors]
    assert any("depends on other fields" in e for e in errors), errors


# ------------------------------------------------------ declarations: the rarer branches


@pytest.mark.parametrize(
    ("annotation", "declared", "expected"),
    [
        (
            dict[str, str],
            Field(min_length=1, max_length=4),
            {"minProperties": 1, "maxProperties": 4},
        ),
        (IntOrString, Field(min_length=1, max_length=4), {"minLength": 1, "maxLength": 4}),
        (IntOrString, field(format="int-or-string"), {"format": "int-or-string"}),
        (IntOrString, field(enum=[1, "a"]), {"enum": [1, "a"]}),
        (Any, field(embedded_resource=True), {"type": "object"}),
        (list[str], field(unique_items=True, max_items=2), {"maxItems": 2}),
    ],
)
def test_declarations_map_by_the_node_type(
    annotation: Any, declared: Any, expected: dict[str, Any]
) -> None:
    node = node_for(annotation, declared)
    assert {key: node.get(key) for key in expected} == expected, node


def test_embedded_resource_keeps_declared_properties_closed() -> None:
    class Part(Model):
        name: str = ""

    free = node_for(Any, field(embedded_resource=True))
    assert free["x-kubernetes-preserve-unknown-fields"] is True
    typed = node_for(Part, field(default_factory=Part, embedded_resource=True))
    assert typed["x-kubernetes-embedded-resource"] is True
    assert "x-kubernetes-preserve-unknown-fields" not in typed


def test_map_list_keys_keep_json_and_unknown_names() -> None:
    class Entry(Model):
        port_name: str
        value: int = 0

    node = node_for(list[Entry], field(list_map_keys=["portName", "value", "other_key"]))
    assert node["x-kubernetes-list-map-keys"] == ["portName", "value", "other_key"]


def test_field_rules_follow_the_rules_of_the_field_class() -> None:
    @Rule("self.a >= 0", message="class rule")
    class Part(Model):
        a: int = 0

    node = node_for(Part, field(default_factory=Part, rules=[Rule("true", message="field rule")]))
    assert [r["message"] for r in node["x-kubernetes-validations"]] == ["class rule", "field rule"]


@pytest.mark.parametrize(
    ("annotation", "declared", "expected"),
    [
        (
            Any,
            field(minimum=1),
            "minimum applies to integer and number fields, but the field is untyped",
        ),
        (
            IntOrString,
            field(preserve_unknown_fields=True),
            "preserve_unknown_fields applies to model, dict and Any fields, but the field is "
            "int-or-string",
        ),
        (bool, Field(min_length=1), "a length limit applies to strings, lists and maps"),
        (list[str], field(format="date"), "format applies to string and number fields"),
        (list[str], field(min_properties=1), "min_properties applies to model and dict fields"),
        (str, field(multiple_of=2), "multiple_of applies to integer and number fields"),
    ],
)
def test_misplaced_declarations_name_what_they_apply_to(
    annotation: Any, declared: Any, expected: str
) -> None:
    errors = errors_for(annotation, declared)
    assert len(errors) == 1 and expected in errors[0], errors


def test_an_exclusive_bound_on_a_string_is_reported_once() -> None:
    # exclusive_minimum comes with minimum; the misplaced minimum is the one error.
    errors = errors_for(str, Field("x", gt="a"))
    assert len(errors) == 1 and "minimum applies to integer and number fields" in errors[0]
