"""The offline structural-schema validator: each API server rule, and clean generated schemas."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from setpoint.crd import (
    StructuralError,
    find_resources,
    resource_schema,
    validate_default,
    validate_structural,
)
from setpoint.crd.errors import field_path_of
from setpoint.crd.structural import validate_value
from tests._support.crd_golden import load_fixtures

FIXTURES = load_fixtures()


def root(**properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            **properties,
        },
    }


def messages(schema: dict[str, Any], **kwargs: Any) -> list[str]:
    return [f"{e.field_path} {e.message}" for e in validate_structural(schema, **kwargs)]


def test_generated_fixture_schemas_are_structural() -> None:
    for cls in find_resources([FIXTURES]):
        built = resource_schema(cls)
        assert built.errors == []
        status = cls.declaration().has_status(cls)
        assert validate_structural(built.schema, status_subresource=status) == [], cls


def test_a_minimal_schema_is_valid() -> None:
    assert validate_structural(root(spec={"type": "object"})) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, ".spec type must not be empty for object fields"),
        ({"type": "array"}, ".spec an array must declare items"),
        ({"type": "array", "items": {}}, ".spec[*] type must not be empty for array items"),
        ({"type": "null"}, "type 'null' is not allowed"),
        ({"type": "thing"}, "type 'thing' is not allowed"),
        ({"$ref": "#/definitions/x"}, "$ref is not supported"),
        ({"type": "object", "definitions": {}}, "definitions is not supported"),
        ({"type": "object", "patternProperties": {}}, "patternProperties is not supported"),
        ({"type": "object", "dependencies": {}}, "dependencies is not supported"),
        ({"type": "array", "items": {"type": "string"}, "additionalItems": {}}, "additionalItems"),
        ({"type": "object", "id": "x"}, "id is not supported"),
        ({"type": "object", "foo": 1}, "'foo' is not a CRD schema keyword"),
        (
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "uniqueItems: true is forbidden",
        ),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "properties and additionalProperties are mutually exclusive",
        ),
        ({"type": "object", "additionalProperties": False}, "additionalProperties: false"),
        (
            {"type": "array", "items": [{"type": "string"}]},
            "items must be a single schema",
        ),
        ({"type": "string", "pattern": "("}, "is not a regular expression"),
        (
            {"type": "string", "pattern": "(?=a)b"},
            "RE2, the server's engine, says invalid perl operator",
        ),
        (
            {"type": "object", "x-kubernetes-preserve-unknown-fields": False},
            "must be true or absent",
        ),
        (
            {"x-kubernetes-int-or-string": True, "x-kubernetes-preserve-unknown-fields": True},
            "must be false if x-kubernetes-int-or-string is true",
        ),
        (
            {"type": "string", "x-kubernetes-int-or-string": True},
            "an int-or-string node must not set type",
        ),
        (
            {"type": "string", "x-kubernetes-embedded-resource": True},
            "an embedded resource must have type object",
        ),
        (
            {"type": "object", "x-kubernetes-embedded-resource": True},
            "an embedded resource without x-kubernetes-preserve-unknown-fields needs properties",
        ),
        (
            {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "x-kubernetes-preserve-unknown-fields": True,
                "additionalProperties": {"type": "string"},
            },
            "additionalProperties is not allowed at the root of a resource",
        ),
        (
            {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"kind": {"type": "integer"}},
            },
            "kind must have type string",
        ),
        (
            {"type": "string", "x-kubernetes-map-type": "atomic"},
            "must be object if x-kubernetes-map",
        ),
        ({"type": "object", "x-kubernetes-map-type": "deep"}, "is not one of atomic, granular"),
        ({"type": "string", "x-kubernetes-list-type": "set"}, "must be array if x-kubernetes-list"),
        (
            {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"},
            "is not one of atomic, set, map",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-map-keys": ["a"]},
            "must be map if x-kubernetes-list-map-keys is non-empty",
        ),
        (
            {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "map"},
            "must not be empty if x-kubernetes-list-type is map",
        ),
        (
            {
                "type": "array",
                "items": {"type": "string"},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a"],
            },
            "items of a map list must be objects",
        ),
        (
            {
                "type": "array",
                "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["b"],
            },
            "map key 'b' is not a field of the items",
        ),
        (
            {
                "type": "array",
                "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a"],
            },
            "map key 'a' must be required or have a default",
        ),
        (
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["a"],
                    "properties": {"a": {"type": "object"}},
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a"],
            },
            "map key 'a' must be a scalar",
        ),
        (
            {
                "type": "array",
                "items": {"type": "object", "properties": {"a": {"type": "string"}}},
                "x-kubernetes-list-type": "set",
            },
            "object items of a set list must be atomic",
        ),
        (
            {
                "type": "array",
                "items": {"type": "string", "nullable": True},
                "x-kubernetes-list-type": "set",
            },
            "items of a set list cannot be nullable",
        ),
    ],
)
def test_structural_rules(spec: dict[str, Any], expected: str) -> None:
    found = messages(root(spec=spec))
    assert any(expected in m for m in found), found


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["a"],
                    "properties": {"a": {"type": "string"}, "b": {"type": "integer", "default": 0}},
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a", "b"],
            },
            [],
        ),
        (
            {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a"]},
            [".spec an array must declare items"],
        ),
        (
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "nullable": True,
                    "required": ["a", "b"],
                    "properties": {
                        "a": {"type": "string", "nullable": True},
                        "b": {"type": "string"},
                    },
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["a", "b", "b"],
            },
            [
                ".spec[*] items of a map list cannot be nullable",
                ".spec[*].a map key 'a' cannot be nullable",
                ".spec map keys ['a', 'b', 'b'] contain duplicates",
            ],
        ),
        (
            {
                "type": "array",
                "items": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "set",
                },
                "x-kubernetes-list-type": "set",
            },
            [".spec[*] list items of a set list must be atomic"],
        ),
        (
            {
                "type": "array",
                "items": {
                    "type": "array",
                    "items": {"type": "string"},
                    "x-kubernetes-list-type": "atomic",
                },
                "x-kubernetes-list-type": "set",
            },
            [],
        ),
    ],
)
def test_list_extensions_report_exactly_what_is_wrong(
    spec: dict[str, Any], expected: list[str]
) -> None:
    assert messages(root(spec=spec)) == expected


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ({"rule": " "}, "rule is not specified"),
        ({"rule": "true", "message": " "}, "message must be non-empty"),
        ({"rule": "true", "message": "a\nb"}, "must not contain line breaks"),
        ({"rule": "a ||\nb"}, "message must be specified if the rule contains line breaks"),
        ({"rule": "true", "messageExpression": ""}, "messageExpression must be non-empty"),
        ({"rule": "true", "reason": "Nope"}, "reason 'Nope' is not supported"),
        ({"rule": "true", "fieldPath": ""}, "fieldPath must be a non-empty single line"),
        ({"rule": "true", "fieldPath": ".missing"}, "does not name a field"),
        ({"rule": "true", "bogus": 1}, "unknown rule keys ['bogus']"),
    ],
)
def test_cel_rule_fields(rule: dict[str, Any], expected: str) -> None:
    spec = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [rule],
    }
    found = messages(root(spec=spec))
    assert any(expected in m for m in found), found


@pytest.mark.parametrize(
    "path", [".a", ".m['any key']", ".l[0].x", "['a']", ".free.anything.below"]
)
def test_cel_field_paths_that_resolve(path: str) -> None:
    spec = {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "l": {
                "type": "array",
                "items": {"type": "object", "properties": {"x": {"type": "integer"}}},
            },
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "x-kubernetes-validations": [{"rule": "true", "fieldPath": path}],
    }
    assert validate_structural(root(spec=spec)) == []


def test_junctors_may_only_hold_value_validations() -> None:
    spec = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "anyOf": [
            {"type": "object", "description": "x", "default": {}, "nullable": True},
            {"properties": {"b": {"minLength": 1}}},
            {"properties": {"metadata": {}}},
            {"x-kubernetes-validations": [{"rule": "true"}]},
        ],
        "allOf": [{"items": {"minLength": 1}}],
        "not": {"properties": {"a": {"title": "t"}}},
    }
    found = messages(root(spec=spec))
    for expected in (
        "type is not allowed inside",
        "a description is not allowed inside",
        "a default is not allowed inside",
        "nullable is not allowed inside",
        "property 'b' is used inside a junctor but not declared",
        "metadata must not be specified in a nested context",
        "CEL rules is not allowed inside",
        "items are used inside a junctor but the node declares none",
        "a title is not allowed inside",
    ):
        assert any(expected in m for m in found), (expected, found)


def test_the_int_or_string_junctor_patterns_are_allowed() -> None:
    any_of = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    all_of = {
        "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^a"}],
        "x-kubernetes-int-or-string": True,
    }
    assert validate_structural(root(a=any_of, b=all_of)) == []


def test_root_rules() -> None:
    assert any(
        "the root must have type object" in m for m in messages({"type": "array", "items": {}})
    )
    assert any("type must not be empty at the root" in m for m in messages({}))
    assert any(
        "additionalProperties is not allowed at the root" in m
        for m in messages({"type": "object", "additionalProperties": {"type": "string"}})
    )
    assert any("root cannot be nullable" in m for m in messages({**root(), "nullable": True}))


def test_root_metadata_may_only_restrict_name_and_generate_name() -> None:
    ok = root()
    ok["properties"]["metadata"] = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}},
    }
    assert validate_structural(ok) == []
    bad = copy.deepcopy(ok)
    bad["properties"]["metadata"]["properties"]["labels"] = {"type": "object"}
    bad["properties"]["metadata"]["description"] = "x"
    found = messages(bad)
    assert any("may only restrict name and generateName" in m for m in found), found
    bad = root()
    bad["properties"]["metadata"] = {"type": "string"}
    assert any("metadata must have type object" in m for m in messages(bad))


def test_no_defaults_in_top_level_meta_or_metadata_maps() -> None:
    schema = root()
    schema["properties"]["kind"]["default"] = "X"
    found = messages(schema)
    assert any("defaults are not allowed in top-level kind" in m for m in found), found
    embedded = {
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string", "default": "x"},
                    }
                },
            }
        },
    }
    found = messages(root(template=embedded))
    assert any("inside additionalProperties applying to object metadata" in m for m in found)


def test_status_subresource_limits_root_keywords() -> None:
    schema = {**root(), "minProperties": 1}
    assert validate_structural(schema) == []
    found = messages(schema, status_subresource=True)
    assert any("root may not use ['minProperties']" in m for m in found), found


@pytest.mark.parametrize(
    ("node", "value", "expected"),
    [
        ({"type": "integer"}, "1", "is not of type integer"),
        ({"type": "integer"}, True, "is not of type integer"),
        ({"type": "number"}, "x", "is not of type number"),
        ({"type": "boolean"}, 1, "is not of type boolean"),
        ({"type": "string"}, None, "null is not allowed"),
        ({"type": "string", "enum": ["a"]}, "b", "is not one of ['a']"),
        ({"type": "integer", "minimum": 2}, 1, "must be at least 2"),
        ({"type": "integer", "minimum": 2, "exclusiveMinimum": True}, 2, "greater than 2"),
        ({"type": "integer", "maximum": 2}, 3, "must be at most 2"),
        ({"type": "integer", "maximum": 2, "exclusiveMaximum": True}, 2, "less than 2"),
        ({"type": "integer", "multipleOf": 5}, 7, "multiple of 5"),
        ({"type": "string", "minLength": 2}, "a", "at least 2 characters"),
        ({"type": "string", "maxLength": 1}, "ab", "at most 1 characters"),
        ({"type": "string", "pattern": "^a"}, "b", "does not match pattern"),
        ({"type": "array", "items": {"type": "string"}, "minItems": 1}, [], "at least 1 items"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 0}, ["a"], "at most 0"),
        ({"type": "array", "items": {"type": "integer"}}, ["a"], "is not of type integer"),
        ({"type": "object", "properties": {}}, {"x": 1}, "would be pruned"),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {},
            "missing the required field 'a'",
        ),
        (
            # The server validates a default as written: a field's own default does not
            # satisfy required (read on a v1.37 server: `default.a: Required value`).
            {
                "type": "object",
                "properties": {"a": {"type": "integer", "default": 1}},
                "required": ["a"],
            },
            {},
            "missing the required field 'a'",
        ),
        ({"type": "object", "minProperties": 1, "additionalProperties": {}}, {}, "at least 1"),
        ({"type": "object", "maxProperties": 0, "additionalProperties": {}}, {"a": 1}, "at most"),
        ({"x-kubernetes-int-or-string": True}, 1.5, "must be an integer or a string"),
    ],
)
def test_invalid_defaults_are_reported(node: dict[str, Any], value: Any, expected: str) -> None:
    found = [e.message for e in validate_default(value, node, ("default",))]
    assert any(expected in m for m in found), found


@pytest.mark.parametrize(
    ("node", "value"),
    [
        ({"type": "string", "nullable": True}, None),
        ({"type": "number", "minimum": 0}, 0),
        ({"x-kubernetes-int-or-string": True}, "50%"),
        ({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, {"any": {"thing": 1}}),
        (
            {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}},
        ),
    ],
)
def test_valid_defaults_pass(node: dict[str, Any], value: Any) -> None:
    assert validate_default(value, node, ("default",)) == []


_SET = {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}
_MAP_LIST = {
    "type": "array",
    "items": {"type": "object", "properties": {"k": {"type": "string"}}},
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["k"],
}


@pytest.mark.parametrize(
    ("node", "value", "expected"),
    [
        (_SET, ["a", "a"], "repeats 'a' in a set list"),
        (_MAP_LIST, [{"k": "a"}, {"k": "a"}], "repeats the map key"),
    ],
)
def test_set_and_map_list_duplicates_are_checked_on_objects_only(
    node: dict[str, Any], value: Any, expected: str
) -> None:
    # The API server checks list types on objects (structurallisttype), not on a default:
    # a CRD with `default: [a, a]` on a set list is accepted (read on a v1.37 server).
    assert validate_default(value, node, ("default",)) == []
    found = [e.message for e in validate_value(value, node, ())]
    assert any(expected in m for m in found), found


def test_defaults_are_checked_in_place() -> None:
    spec = {"type": "object", "properties": {"n": {"type": "integer", "default": "x"}}}
    (error,) = validate_structural(root(spec=spec))
    assert error.field_path == ".spec.n"
    assert "is not of type integer" in error.message


def test_errors_are_sorted_and_readable() -> None:
    errors = validate_structural(root(b={}, a={}))
    assert [e.field_path for e in errors] == [".a", ".b"]
    assert str(errors[0]).startswith(".a: type must not be empty")
    assert "Fix:" in str(errors[0])


def test_field_paths_of_schema_locations() -> None:
    assert field_path_of(("properties", "spec", "items", "properties", "x")) == ".spec[*].x"
    assert field_path_of(("properties", "m", "additionalProperties")) == ".m[*]"
    assert field_path_of(()) == "."
    assert field_path_of(("properties", "a", "anyOf", 0, "properties", "b")) == ".a"


def test_a_non_mapping_schema_is_one_error() -> None:
    not_a_schema: Any = []  # deliberately the wrong type
    (error,) = validate_structural(not_a_schema)
    assert isinstance(error, StructuralError)
    assert "not an object" in error.message
