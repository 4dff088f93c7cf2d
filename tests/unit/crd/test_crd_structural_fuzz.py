"""The structural validator on hostile input: it reports, it never raises, hangs or recurses away.

Any schema a user (or a YAML file) can produce must come back as a list of
``StructuralError`` naming a path: wrong keyword types, keys that are not
strings, giant or non-finite numbers, cycles built with YAML anchors, very deep
nesting, and patterns that make backtracking engines take exponential time.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.crd import StructuralError, validate_default, validate_structural
from setpoint.crd.structural import MAX_SCHEMA_DEPTH, SCHEMA_KEYWORDS, UNSUPPORTED_KEYWORDS

KEYWORDS = sorted(SCHEMA_KEYWORDS | UNSUPPORTED_KEYWORDS)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    # Too long to print (Python refuses str() past 4,300 digits) or to divide as floats.
    st.sampled_from([5000, -5000, 4400]).map(lambda n: (1 if n > 0 else -1) * 10 ** abs(n)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "object",
            "array",
            "string",
            "integer",
            "number",
            "boolean",
            "null",
            "set",
            "map",
            "atomic",
            "granular",
            "^(a+)+$",
            "(",
            "(?=a)",
            "\\C",
            "self.a > 0",
            ".spec",
            "FieldValueInvalid",
        ]
    ),
)

json_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.text(max_size=4), scalars, max_size=3),
)

keys = st.one_of(
    st.sampled_from(KEYWORDS), st.sampled_from([0, None, True, "spec", "metadata", "x-foo"])
)


def schemas() -> st.SearchStrategy[Any]:
    """Schema-shaped mappings whose keywords hold values of any type."""
    return st.recursive(
        st.dictionaries(keys, json_values, max_size=4),
        lambda children: st.dictionaries(
            keys,
            st.one_of(
                children,
                json_values,
                st.lists(children, max_size=2),
                st.dictionaries(
                    st.sampled_from(["a", "b", "metadata", "kind"]), children, max_size=2
                ),
            ),
            max_size=5,
        ),
        max_leaves=10,
    )


def _mappings(value: Any, out: list[dict[Any, Any]], depth: int = 0) -> list[dict[Any, Any]]:
    if depth > 20:
        return out
    if isinstance(value, dict):
        out.append(value)
        for child in value.values():
            _mappings(child, out, depth + 1)
    elif isinstance(value, list):
        for child in value:
            _mappings(child, out, depth + 1)
    return out


@st.composite
def hostile_schemas(draw: st.DrawFn) -> Any:
    """A random schema, sometimes with a cycle (as YAML anchors can build)."""
    schema = draw(schemas())
    if draw(st.booleans()):
        nodes = _mappings(schema, [])
        if nodes:
            inner = draw(st.sampled_from(nodes))
            target = draw(st.sampled_from(nodes))
            inner[draw(st.sampled_from(["properties", "items", "not", "default"]))] = (
                {"x": target} if draw(st.booleans()) else target
            )
    return schema


EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "200"))
"""Random schemas per run; `make test` keeps it small (200), `make fuzz` runs 5000."""


def assert_only_structural_errors(result: Any) -> None:
    assert isinstance(result, list)
    for error in result:
        assert isinstance(error, StructuralError)
        assert isinstance(error.schema_path, tuple)
        assert str(error)  # printable, names a path


@settings(
    max_examples=EXAMPLES,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(schema=hostile_schemas(), status=st.booleans())
def test_random_schemas_give_structural_errors_only(schema: Any, status: bool) -> None:
    """validate_structural answers any input with StructuralErrors and never raises."""
    assert_only_structural_errors(validate_structural(schema, status_subresource=status))


@settings(max_examples=EXAMPLES // 2, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(value=json_values, node=schemas())
def test_random_defaults_give_structural_errors_only(value: Any, node: Any) -> None:
    """validate_default answers any value against any node with StructuralErrors only."""
    assert_only_structural_errors(validate_default(value, node, ("default",)))


def test_type_list_with_null_names_the_path() -> None:
    """The crash of issue 12 (type: [string, "null"]) is a clear error at the field."""
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": ["string", "null"]}}}
        },
    }
    errors = validate_structural(schema)
    assert [(e.field_path, e.message) for e in errors] == [
        (".spec.a", "type must be a single string, not the list ['string', 'null']")
    ]
    assert "nullable: true" in errors[0].fix


@pytest.mark.timeout(60)
def test_backtracking_pattern_on_a_default_terminates() -> None:
    """A default checked against ^(a+)+$ runs on RE2: linear, where Python's re takes hours."""
    node = {"type": "string", "pattern": "^(a+)+$", "default": "a" * 64 + "b"}
    errors = validate_structural({"type": "object", "properties": {"s": node}})
    assert len(errors) == 1, errors
    assert errors[0].message.endswith("does not match pattern '^(a+)+$'")


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?=a)b", "invalid perl operator"),
        ("(a)\\1", "invalid escape sequence"),
        ("a\\Z", "invalid escape sequence"),
        ("(?P=name)", "invalid"),
        ("a{1001}", "invalid repetition size"),
        ("\\C", "not supported by the API server"),
    ],
)
def test_patterns_the_server_rejects_are_reported(pattern: str, reason: str) -> None:
    """Syntax Python's re accepts but Go's RE2 does not is reported on the pattern."""
    errors = validate_structural(
        {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}}
    )
    assert len(errors) == 1
    assert errors[0].schema_path == ("properties", "s", "pattern")
    assert reason in errors[0].message


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"type": "string", "minLength": "3"}, "minLength must be a count, not string '3'"),
        ({"type": "integer", "maximum": math.inf}, "maximum must be a finite number, not inf"),
        ({"type": "integer", "multipleOf": 0}, "multipleOf must be greater than zero, not 0"),
        ({"type": "string", "maxLength": -1}, "must be a non-negative 64-bit integer, not -1"),
        ({"type": "object", "required": "a"}, "required must be a list of strings"),
        ({"type": "object", "properties": ["a"]}, "properties must be a map of schemas"),
        ({"type": "integer", "minimum": 2**5000}, "minimum is too large for a 64-bit float"),
        ({"type": "string", "enum": "a"}, "enum must be a list, not string 'a'"),
        ({"type": "string", "nullable": "yes"}, "nullable must be a boolean"),
    ],
)
def test_wrong_keyword_types_are_reported_at_the_keyword(
    node: dict[str, Any], expected: str
) -> None:
    """A keyword with a value of the wrong JSON type is one error at that keyword."""
    errors = validate_structural({"type": "object", "properties": {"f": node}})
    assert any(expected in e.message for e in errors), [e.message for e in errors]
    assert all(e.field_path == ".f" for e in errors)


def test_yaml_anchor_cycle_is_reported() -> None:
    """A schema that contains itself through a YAML alias is an error, not a RecursionError."""
    doc = yaml.safe_load("root: &node {type: object, properties: {child: *node}}")
    errors = validate_structural(doc["root"])
    assert [(e.field_path, e.message) for e in errors] == [
        (".child", "the schema contains itself (a cycle)")
    ]


def test_shared_yaml_anchor_is_not_a_cycle() -> None:
    """The same node used twice (an alias, no cycle) is checked like two copies."""
    doc = yaml.safe_load(
        "s: {type: object, properties: {a: &n {type: string}, b: *n, c: {type: array, items: *n}}}"
    )
    assert validate_structural(doc["s"]) == []


def test_deep_nesting_stops_at_the_limit() -> None:
    """Nesting past MAX_SCHEMA_DEPTH is reported once at the limit, not walked further."""
    node: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH * 20):
        node = {"type": "object", "properties": {"n": node}}
    errors = validate_structural(node)
    assert len(errors) == 1
    assert "nests deeper than" in errors[0].message


def test_deep_and_cyclic_default_values() -> None:
    """A default that nests too deep or contains itself is reported, not recursed into."""
    deep: Any = "x"
    for _ in range(MAX_SCHEMA_DEPTH * 20):
        deep = [deep]
    node: dict[str, Any] = {"type": "array"}
    node["items"] = node  # a schema that describes any depth of nested lists
    assert any("nests deeper" in e.message for e in validate_default(deep, node, ("default",)))
    loop: list[Any] = []
    loop.append(loop)
    assert any("contains itself" in e.message for e in validate_default(loop, node, ("default",)))


def test_booleans_are_not_numbers_in_enums_and_sets() -> None:
    """JSON equality: true is not 1, so an enum of [1] rejects a default of true."""
    errors = validate_default(True, {"type": "boolean", "enum": [1]}, ("default",))
    assert [e.message for e in errors] == ["default True: is not one of [1]"]
    node = {"type": "array", "x-kubernetes-list-type": "set", "items": {}}
    assert validate_default([1, True], node, ("default",)) == []
