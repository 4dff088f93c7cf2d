"""Value validation under allOf/anyOf/oneOf/not and formats, as the API server decides it.

Each verdict here was read from a real API server (v1.37) first: the CRD (for a default) or
the object (server-side dry-run) was sent and the answer recorded. The differential test
(tests/integration/crd/test_crd_validator_diff.py) checks many more against the server.
"""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.crd import validate_default, validate_structural
from setpoint.crd.formats import effective_format, format_problem


def _spec_with(prop: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"a": prop}}},
    }


@pytest.mark.parametrize(
    ("prop", "message"),
    [
        ({"type": "string", "default": "x", "allOf": [{"minLength": 3}]}, "allOf"),
        (
            {"type": "string", "default": "x", "anyOf": [{"minLength": 3}, {"pattern": "^y"}]},
            "anyOf",
        ),
        (
            {"type": "string", "default": "x", "oneOf": [{"minLength": 1}, {"pattern": "^x"}]},
            "oneOf",
        ),
        ({"type": "string", "default": "x", "not": {"pattern": "^x"}}, "(not)"),
        ({"type": "string", "default": "x", "format": "ipv4"}, "ipv4"),
        ({"type": "string", "default": "x", "format": "uuid"}, "uuid"),
    ],
    ids=["allOf", "anyOf", "oneOf", "not", "ipv4", "uuid"],
)
def test_defaults_violating_junctors_and_formats_are_refused(
    prop: dict[str, Any], message: str
) -> None:
    # The server: `spec.validation.openAPIV3Schema.properties[spec].properties[a].default:
    # Invalid value: "": "" must validate all the schemas (allOf)` and so on.
    errors = validate_structural(_spec_with(prop))
    assert {e.schema_path for e in errors} == {
        ("properties", "spec", "properties", "a", "default")
    }, errors
    assert any(message in e.message for e in errors), errors


@pytest.mark.parametrize(
    "prop",
    [
        {"type": "string", "default": "xyz", "allOf": [{"minLength": 3}]},
        {"type": "string", "default": "y", "anyOf": [{"minLength": 3}, {"pattern": "^y"}]},
        {"type": "string", "default": "y", "oneOf": [{"minLength": 2}, {"pattern": "^y"}]},
        {"type": "string", "default": "y", "not": {"pattern": "^x"}},
        {"type": "string", "default": "10.0.0.1", "format": "ipv4"},
        {"type": "string", "default": "anything", "format": "no-such-format"},
        {"type": "integer", "default": 1, "format": "ipv4"},
    ],
)
def test_defaults_satisfying_junctors_and_formats_are_accepted(prop: dict[str, Any]) -> None:
    assert validate_structural(_spec_with(prop)) == []


def test_junctor_branches_see_nested_fields() -> None:
    node = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    assert validate_default({"a": 1}, node, ()) == []
    both = validate_default({"a": 1, "b": 2}, node, ())
    assert any("oneOf" in e.message for e in both)
    neither = validate_default({}, node, ())
    assert any("oneOf" in e.message for e in neither)


def test_null_is_checked_only_for_type_and_enum() -> None:
    # kube-openapi validates a null value with the type and enum validators only.
    node = {"type": "string", "nullable": True, "not": {"maxLength": 100}}
    assert validate_default(None, node, ()) == []


def test_cyclic_junctors_are_reported_not_recursed_forever() -> None:
    node: dict[str, Any] = {"type": "string"}
    node["not"] = node
    errors = validate_default("x", node, ())
    assert any("nest deeper" in e.message for e in errors)


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("byte", ["aGVsbG8=", "AAAA"], ["", "abc", "a b="]),
        ("date", ["2024-02-29", "0000-02-29"], ["", "2023-02-29", "2024-1-01", "2024-13-01"]),
        (
            "date-time",
            ["2024-01-01T10:00:00Z", "2024-01-01t10:00:00.5+01:00", "2024-01-01T23:59:59z"],
            ["", "2024-01-01", "2024-01-01T24:00:00Z", "2024-01-01T10:00:00"],
        ),
        ("duration", ["1h", "5m30s", "0", "-1.5h", "3 days", "x 5 weeks"], ["", "1", "h", "1x"]),
        (
            "uuid",
            ["123e4567-e89b-12d3-a456-426614174000", "123E4567E89B12D3A456426614174000"],
            ["", "123e4567-e89b-12d3-a456-42661417400"],
        ),
        ("email", ["a@b.c", "Ann <ann@example.com>", '"a b"@c'], ["", "a", "a@", "@b"]),
        ("hostname", ["a", "example.com", "ex-ample.co"], ["", "-a", "a_b.com", "a.b"]),
        ("ipv4", ["10.0.0.1", "010.0.0.1", "::ffff:1.2.3.4"], ["", "1.2.3", "256.0.0.1", "::1"]),
        ("ipv6", ["::1", "fe80::1", "::ffff:1.2.3.4"], ["", "1.2.3.4", "::ffff:01.2.3.4", ":::"]),
        ("cidr", ["10.0.0.0/8", "::/0", "10.0.0.0/032"], ["", "10.0.0.0", "10.0.0.0/33"]),
        (
            "mac",
            ["00:11:22:33:44:55", "00-11-22-33-44-55", "0011.2233.4455"],
            ["", "00:11:22:33:44", "00:11-22:33:44:55"],
        ),
        ("uri", ["http://example.com/x", "/path", "mailto:a@b"], ["", "path", "http://x/%zz"]),
        ("k8s-short-name", ["abc", "a-1"], ["", "A", "-a", "a" * 64]),
        ("k8s-long-name", ["a.b-c", "abc"], ["", "a..b", "A.b"]),
        ("bsonobjectid", ["0123456789abcdef01234567"], ["", "0123"]),
        ("hexcolor", ["#fff", "abcdef"], ["", "#ffff"]),
        ("password", ["", "anything"], []),
    ],
)
def test_string_formats(fmt: str, good: list[str], bad: list[str]) -> None:
    normalized = effective_format("string", fmt)
    assert normalized is not None
    assert [v for v in good if format_problem(v, normalized)] == []
    assert [v for v in bad if not format_problem(v, normalized)] == []


def test_formats_the_server_strips_check_nothing() -> None:
    assert effective_format("string", "int32") is None
    assert effective_format("integer", "uuid") is None
    assert effective_format("boolean", "byte") is None
    assert effective_format("number", "float") == "float"
    assert effective_format(None, "date-time") == "datetime"


@pytest.mark.parametrize(
    ("node", "value", "refused"),
    [
        ({"type": "integer", "format": "int32"}, 2**31 - 1, False),
        ({"type": "integer", "format": "int32"}, 2**40, True),
        ({"type": "integer", "format": "int64"}, 2**40, False),
        ({"type": "number", "format": "float"}, 1e300, True),
        ({"type": "number", "format": "float"}, 3.0e38, False),
        ({"type": "number", "format": "double"}, 1e300, False),
        # A bound that does not fit the type makes every value invalid.
        ({"type": "integer", "maximum": 1e20}, 1, True),
        ({"type": "integer", "maximum": 10.5}, 1, True),
        ({"type": "integer", "format": "int32", "minimum": -(2**40)}, 1, True),
        ({"type": "number", "maximum": 10.5}, 1, False),
        # Integers past float64's range compare as infinite (found by the fuzz test: an
        # OverflowError before).
        ({"minimum": 0}, 10**400, False),
        ({"maximum": 0}, 10**400, True),
        ({"minimum": 0}, -(10**400), True),
        ({"enum": [1]}, 10**400, True),
        ({"multipleOf": 0.5}, 10**400, True),
    ],
)
def test_number_ranges(node: dict[str, Any], value: float, refused: bool) -> None:
    errors = validate_default(value, node, ())
    assert bool(errors) is refused, errors
