"""Local check of a CRD schema against the API server's structural-schema rules.

The API server (apiextensions-apiserver) rejects a CustomResourceDefinition
whose ``openAPIV3Schema`` is not *structural* or breaks one of its schema
rules. :func:`validate_structural` applies the same rules offline, so
``setpoint generate crd`` fails with a precise message instead of the apply
failing later. It covers:

* structure: every node typed (unless int-or-string or preserve-unknown),
  arrays with ``items``, object root, no ``additionalProperties`` at the root,
  ``properties`` and ``additionalProperties`` never together;
* forbidden keywords: ``$ref``, ``definitions``, ``dependencies``,
  ``patternProperties``, ``additionalItems``, ``id``, ``uniqueItems: true``,
  ``type: null``, ``x-kubernetes-preserve-unknown-fields: false``;
* logic junctors (allOf/anyOf/oneOf/not): no type, description, default,
  title, nullable, additionalProperties or x-kubernetes extensions inside, and
  every property they mention also declared outside them;
* metadata: at the root only ``name``/``generateName`` may be constrained;
  no defaults under top-level apiVersion/kind/metadata;
* extensions: int-or-string, embedded resources, list types and map keys,
  map types, CEL rule fields (rule, message, fieldPath, reason);
* defaults: each ``default`` must itself be valid against its node (its
  allOf/anyOf/oneOf/not branches and its ``format`` included, as the server
  checks them: :mod:`setpoint.crd.formats`) and must not contain fields the
  schema would prune;
* with the status subresource, only the keywords the server allows at the root.

CEL expressions themselves are compiled only by the server.

Any input is safe to check: a keyword with a value of the wrong type (``type:
[string, "null"]``, ``minLength: "3"``), a cycle (YAML anchors can build one),
nesting deeper than :data:`MAX_SCHEMA_DEPTH` or a default value of any shape
each become a :class:`StructuralError` naming the path; nothing raises.
Patterns are compiled and matched with RE2 (:mod:`setpoint.crd.patterns`), as
the server does, so a pattern cannot make the check take exponential time.
"""

from __future__ import annotations

import math
import re
import reprlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from setpoint.crd.errors import SchemaPath, StructuralError
from setpoint.crd.formats import (
    NUMBER_FORMATS,
    STRING_FORMATS,
    effective_format,
    format_problem,
    number_range_problem,
)
from setpoint.crd.patterns import PatternError, compile_pattern

__all__ = [
    "JUNCTOR_FORBIDDEN_KEYWORDS",
    "MAX_SCHEMA_DEPTH",
    "ROOT_KEYWORDS_WITH_STATUS",
    "SCHEMA_KEYWORDS",
    "UNSUPPORTED_KEYWORDS",
    "validate_default",
    "validate_structural",
    "validate_value",
]

MAX_SCHEMA_DEPTH = 64
"""How deeply schema nodes (and default values) may nest before the check stops there.

Each ``properties.<name>``, ``items``, ``additionalProperties`` or junctor
branch is one level. Generated CRDs of real operators stay far below it (a pod
template is about 15 levels); deeper input is reported, not walked, so a
hostile or cyclic document cannot exhaust the stack."""

_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean"})

SCHEMA_KEYWORDS: frozenset[str] = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "default",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "enum",
        "maxProperties",
        "minProperties",
        "required",
        "items",
        "allOf",
        "oneOf",
        "anyOf",
        "not",
        "properties",
        "additionalProperties",
        "nullable",
        "example",
        "externalDocs",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)
"""Every keyword an apiextensions v1 ``JSONSchemaProps`` node may hold."""

_UNSUPPORTED = {
    "$ref": "CRD schemas cannot reference other schemas; inline the referenced schema",
    "definitions": "CRD schemas cannot hold definitions; inline each schema where it is used",
    "dependencies": "use CEL rules (x-kubernetes-validations) to relate fields instead",
    "patternProperties": "use additionalProperties (a dict[str, T] field) plus a CEL rule",
    "additionalItems": "describe the item type with items",
    "id": "remove the id keyword",
    "$schema": "remove the $schema keyword",
}
UNSUPPORTED_KEYWORDS: frozenset[str] = frozenset(_UNSUPPORTED)
"""JSON Schema keywords CRD schemas reject (``$ref``, ``definitions``, ...)."""

# Keywords allowed at the root when the status subresource is on: the server extracts
# properties.status as the status schema, so nothing may constrain the root otherwise.
ROOT_KEYWORDS_WITH_STATUS: frozenset[str] = frozenset(
    {
        "description",
        "type",
        "format",
        "title",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "multipleOf",
        "required",
        "items",
        "properties",
        "externalDocs",
        "example",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-validations",
    }
)
"""The keywords the root schema may hold when the status subresource is on."""

# Inside allOf/anyOf/oneOf/not only value validations are allowed.
_FORBIDDEN_IN_JUNCTOR = {
    "type": "type",
    "default": "a default",
    "title": "a title",
    "description": "a description",
    "nullable": "nullable",
    "externalDocs": "externalDocs",
    "additionalProperties": "additionalProperties",
    "x-kubernetes-preserve-unknown-fields": "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource": "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string": "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys": "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type": "x-kubernetes-list-type",
    "x-kubernetes-map-type": "x-kubernetes-map-type",
    "x-kubernetes-validations": "CEL rules",
}
JUNCTOR_FORBIDDEN_KEYWORDS: tuple[str, ...] = tuple(_FORBIDDEN_IN_JUNCTOR)
"""Keywords an ``allOf``/``anyOf``/``oneOf``/``not`` branch may not hold."""

_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
_VALIDATION_REASONS = frozenset(
    {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"}
)
_META_FIELDS = frozenset({"apiVersion", "kind", "metadata"})

# The JSON type each keyword's value must have; anything else is reported at the
# keyword and the keyword is ignored by the other checks.
_KEYWORD_KINDS: dict[str, str] = {
    "type": "string",
    "format": "string",
    "title": "string",
    "description": "string",
    "pattern": "string",
    "x-kubernetes-list-type": "string",
    "x-kubernetes-map-type": "string",
    "maximum": "number",
    "minimum": "number",
    "multipleOf": "positive number",
    "exclusiveMaximum": "boolean",
    "exclusiveMinimum": "boolean",
    "uniqueItems": "boolean",
    "nullable": "boolean",
    "x-kubernetes-preserve-unknown-fields": "boolean",
    "x-kubernetes-embedded-resource": "boolean",
    "x-kubernetes-int-or-string": "boolean",
    "maxLength": "count",
    "minLength": "count",
    "maxItems": "count",
    "minItems": "count",
    "maxProperties": "count",
    "minProperties": "count",
    "enum": "list",
    "x-kubernetes-validations": "list",
    "allOf": "list of schemas",
    "anyOf": "list of schemas",
    "oneOf": "list of schemas",
    "required": "list of strings",
    "x-kubernetes-list-map-keys": "list of strings",
    "items": "schema",
    "not": "schema",
    "externalDocs": "object",
    "properties": "map of schemas",
    "additionalProperties": "boolean or schema",
}
_INT64_MAX = 2**63 - 1
_DISPLAY = reprlib.Repr()
_DISPLAY.maxstring = 40
_DISPLAY.maxother = 40
_DISPLAY.maxlist = _DISPLAY.maxdict = 6
_DISPLAY.maxlevel = 3


@dataclass(frozen=True)
class _Where:
    """What the walk knows about the node's surroundings."""

    level: str  # "root", "field" or "item"
    inside_resource_meta: bool = False
    defaults_forbidden: str | None = None  # the reason, when defaults are not allowed here
    under_map: bool = False  # at or below additionalProperties: the server checks no default


def validate_structural(
    schema: Mapping[str, Any], *, status_subresource: bool = False
) -> list[StructuralError]:
    """Check an ``openAPIV3Schema`` against the API server's rules; return every problem.

    An empty list means the API server accepts the schema (CEL expressions
    aside, which only the server compiles). Errors are ordered by location.
    ``status_subresource`` applies the stricter root rules the server uses
    when the status subresource is enabled.
    """
    errors: list[StructuralError] = []
    if not isinstance(schema, Mapping):
        return [
            StructuralError(
                schema_path=(),
                message="the schema is not an object",
                fix="pass the openAPIV3Schema mapping",
            )
        ]
    if status_subresource:
        extra = sorted(str(k) for k in schema if k not in ROOT_KEYWORDS_WITH_STATUS)
        if extra:
            errors.append(
                StructuralError(
                    schema_path=(),
                    message=f"with the status subresource the root may not use {extra}",
                    fix="move those constraints into spec or status, or use a CEL rule "
                    "on the resource class",
                )
            )
    if schema.get("nullable") is True:
        errors.append(
            StructuralError(
                schema_path=("nullable",),
                message="the root cannot be nullable",
                fix="remove nullable from the resource class",
            )
        )
    _walk(schema, (), _Where("root"), errors)
    errors.sort(key=lambda e: (tuple(str(p) for p in e.schema_path), e.message))
    return errors


def _err(errors: list[StructuralError], path: SchemaPath, message: str, fix: str) -> None:
    errors.append(StructuralError(schema_path=path, message=message, fix=fix))


def _kind_error(value: Any, kind: str) -> str | None:
    """Why ``value`` is not of the keyword kind ``kind``; ``None`` when it is."""
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind in ("number", "positive number"):
        if not is_number:
            ok = False
        elif isinstance(value, float) and not math.isfinite(value):
            return f"must be a finite number, not {_show(value)}"
        elif isinstance(value, int) and value.bit_length() > 1023:
            return "is too large for a 64-bit float"
        elif kind == "positive number" and value <= 0:
            return f"must be greater than zero, not {_show(value)}"
        else:
            ok = True
    elif kind == "count":
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0 or value > _INT64_MAX:
                return f"must be a non-negative 64-bit integer, not {_show(value)}"
            ok = True
        else:
            ok = False
    elif kind in ("list", "list of schemas"):
        ok = isinstance(value, list)
    elif kind == "list of strings":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif kind in ("schema", "object"):
        ok = isinstance(value, Mapping)
    elif kind == "map of schemas":
        ok = isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
    else:  # "boolean or schema"
        ok = isinstance(value, bool | Mapping)
    if ok:
        return None
    return f"must be a {kind}, not {_json_type(value)} {_show(value)}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _clean(
    node: Mapping[Any, Any], path: SchemaPath, errors: list[StructuralError]
) -> dict[str, Any]:
    """The node's keywords whose values have the right JSON type; the rest are reported."""
    clean: dict[str, Any] = {}
    for key, value in node.items():
        if not isinstance(key, str):
            _err(
                errors,
                (*path, str(key)),
                f"schema keys must be strings, not {_json_type(key)} {_show(key)}",
                "quote the key",
            )
            continue
        kind = _KEYWORD_KINDS.get(key)
        problem = _kind_error(value, kind) if kind is not None else None
        if problem is None:
            clean[key] = value
            continue
        if key == "type" and isinstance(value, list):
            fix = (
                "use a single type with nullable: true (`setpoint crd migrate` rewrites it)"
                if "null" in value
                else "use a single type; for integer-or-string use x-kubernetes-int-or-string: true"
            )
            _err(
                errors,
                (*path, key),
                f"type must be a single string, not the list {_show(value)}",
                fix,
            )
        elif key == "items" and isinstance(value, list):
            _err(
                errors,
                (*path, "items"),
                "items must be a single schema, not a list (tuples are not supported)",
                "type the field as list[T] (or tuple[T, ...])",
            )
        else:
            _err(errors, (*path, key), f"{key} {problem}", f"give {key} a {kind} value")
    return clean


def _walk(
    raw: Any,
    path: SchemaPath,
    where: _Where,
    errors: list[StructuralError],
    stack: set[int] | None = None,
) -> None:
    if not isinstance(raw, Mapping):
        _err(errors, path, "schema node is not an object", "describe the field with a schema")
        return
    stack = set() if stack is None else stack
    if not _may_enter(raw, path, errors, stack):
        return
    stack.add(id(raw))
    try:
        _walk_node(raw, _clean(raw, path, errors), path, where=where, errors=errors, stack=stack)
    finally:
        stack.discard(id(raw))


def _may_enter(
    raw: Mapping[Any, Any], path: SchemaPath, errors: list[StructuralError], stack: set[int]
) -> bool:
    """False (and reported) when the node is its own ancestor or nests too deep."""
    if id(raw) in stack:
        _err(errors, path, "the schema contains itself (a cycle)", "CRD schemas must be trees")
        return False
    if _depth(path) > MAX_SCHEMA_DEPTH:
        _err(
            errors,
            path,
            f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels",
            "flatten the type, or declare the deep part with preserve_unknown_fields=True",
        )
        return False
    return True


def _depth(path: SchemaPath) -> int:
    """Schema levels in a path: each properties.<name>/items/additionalProperties/branch is one."""
    return sum(
        1
        for key in path
        if key in ("properties", "items", "additionalProperties", "allOf", "anyOf", "oneOf", "not")
    )


def _walk_node(
    raw: Mapping[Any, Any],
    node: dict[str, Any],
    path: SchemaPath,
    *,
    where: _Where,
    errors: list[StructuralError],
    stack: set[int],
) -> None:
    _check_keywords(raw, node, path, where, errors)
    _check_structure(node, path, where, errors, type_reported="type" in raw and "type" not in node)
    _check_extensions(node, path, errors)
    _check_validations(node, path, errors)
    for junctor in ("allOf", "anyOf", "oneOf"):
        branches = node.get(junctor)
        if branches is None:
            continue
        for i, branch in enumerate(branches):
            skip = (junctor == "anyOf" and _is_int_or_string_any_of(node)) or (
                junctor == "allOf" and i == 0 and _is_int_or_string_all_of(node)
            )
            _check_junctor_branch(
                branch, node, (*path, junctor, i), errors, skip_any_of=skip, stack=stack
            )
    if "not" in node:
        _check_junctor_branch(
            node["not"], node, (*path, "not"), errors, skip_any_of=False, stack=stack
        )
    # The server skips a null default (it is no default) and does not follow
    # additionalProperties when it validates defaults.
    if node.get("default") is not None:
        if where.defaults_forbidden:
            _err(
                errors,
                (*path, "default"),
                f"defaults are not allowed {where.defaults_forbidden}",
                "remove the default; the API server manages these fields",
            )
        elif not where.under_map:
            errors.extend(validate_default(node["default"], node, (*path, "default")))

    properties = node.get("properties")
    if isinstance(properties, Mapping):
        is_resource_root = where.level == "root" or bool(node.get("x-kubernetes-embedded-resource"))
        for name in sorted(properties):  # keys are strings (checked by _clean)
            child_where = _Where(
                "field",
                inside_resource_meta=where.inside_resource_meta,
                defaults_forbidden=where.defaults_forbidden,
                under_map=where.under_map,
            )
            if is_resource_root and name in _META_FIELDS:
                child_where = replace(child_where, inside_resource_meta=True)
                if where.level == "root":
                    child_where = replace(child_where, defaults_forbidden=f"in top-level {name}")
            _walk(properties[name], (*path, "properties", name), child_where, errors, stack)
    items = node.get("items")
    if isinstance(items, Mapping):
        _walk(items, (*path, "items"), replace(where, level="item"), errors, stack)
    additional = node.get("additionalProperties")
    if isinstance(additional, Mapping):
        child = replace(where, level="field", under_map=True)
        if where.inside_resource_meta:
            child = replace(
                child, defaults_forbidden="inside additionalProperties applying to object metadata"
            )
        _walk(additional, (*path, "additionalProperties"), child, errors, stack)


def _check_keywords(
    raw: Mapping[Any, Any],
    node: Mapping[str, Any],
    path: SchemaPath,
    where: _Where,
    errors: list[StructuralError],
) -> None:
    for key in raw:
        if not isinstance(key, str):
            continue  # reported by _clean
        if key in _UNSUPPORTED:
            _err(errors, (*path, key), f"{key} is not supported in CRD schemas", _UNSUPPORTED[key])
        elif key not in SCHEMA_KEYWORDS:
            _err(
                errors,
                (*path, key),
                f"{_show(key)} is not a CRD schema keyword",
                "remove it; see apiextensions.k8s.io/v1 JSONSchemaProps for the allowed keys",
            )
    node_type = node.get("type")
    if node_type is not None and node_type not in _TYPES:
        fix = (
            "use nullable: true (sp.field(nullable=True)) instead of type null"
            if node_type == "null"
            else f"use one of {sorted(_TYPES)}"
        )
        _err(errors, (*path, "type"), f"type {_show(node_type)} is not allowed", fix)
    if node.get("uniqueItems") is True:
        _err(
            errors,
            (*path, "uniqueItems"),
            "uniqueItems: true is forbidden (the check is quadratic)",
            "declare the list as a set: sp.field(unique_items=True) or a set[T] type, "
            "which emits x-kubernetes-list-type: set",
        )
    if where.inside_resource_meta and node.get("x-kubernetes-embedded-resource"):
        _err(
            errors,
            (*path, "x-kubernetes-embedded-resource"),
            "embedded resources cannot appear inside apiVersion, kind or metadata",
            "move the embedded resource out of metadata",
        )
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        try:
            compile_pattern(pattern)
        except PatternError as exc:
            _err(
                errors,
                (*path, "pattern"),
                f"pattern {_show(pattern)} is not a regular expression the server accepts: {exc}",
                "rewrite it in RE2 syntax (no lookaround or backreferences), or use a CEL rule",
            )


def _check_structure(
    node: Mapping[str, Any],
    path: SchemaPath,
    where: _Where,
    errors: list[StructuralError],
    *,
    type_reported: bool = False,
) -> None:
    node_type = node.get("type")
    int_or_string = bool(node.get("x-kubernetes-int-or-string"))
    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(node.get("x-kubernetes-embedded-resource"))
    if node_type == "array" and "items" not in node:
        _err(errors, path, "an array must declare items", "type the list's items")
    if embedded and node_type != "object":
        _err(
            errors,
            (*path, "type"),
            "an embedded resource must have type object",
            "embed a Resource class or a dict[str, Any] field",
        )
    elif not node_type and not int_or_string and not preserve and not type_reported:
        what = {
            "root": "at the root",
            "item": "for array items",
            "field": "for object fields",
        }[where.level]
        _err(
            errors,
            (*path, "type"),
            f"type must not be empty {what}",
            "give the field a concrete type, or declare preserve_unknown_fields=True "
            "for free-form data",
        )
    if where.level == "root" and node_type not in (None, "object"):
        _err(errors, (*path, "type"), "the root must have type object", "use type object")
    additional = node.get("additionalProperties")
    if additional is not None:
        if where.level == "root" or embedded:
            _err(
                errors,
                (*path, "additionalProperties"),
                "additionalProperties is not allowed at the root of a resource",
                "declare the resource's fields (spec, status) instead of a map",
            )
        if "properties" in node:
            _err(
                errors,
                (*path, "additionalProperties"),
                "properties and additionalProperties are mutually exclusive",
                "use a model (properties) for structs and dict[str, T] "
                "(additionalProperties) for maps, not both on one field",
            )
        if additional is False:
            _err(
                errors,
                (*path, "additionalProperties"),
                "additionalProperties: false is not allowed (Kubernetes prunes unknown fields)",
                "remove it; unknown fields are pruned by the server unless preserved",
            )
    if int_or_string:
        if preserve:
            _err(
                errors,
                (*path, "x-kubernetes-preserve-unknown-fields"),
                "must be false if x-kubernetes-int-or-string is true",
                "drop preserve_unknown_fields from the int-or-string field",
            )
        if embedded:
            _err(
                errors,
                (*path, "x-kubernetes-embedded-resource"),
                "must be false if x-kubernetes-int-or-string is true",
                "drop embedded_resource from the int-or-string field",
            )
        if node_type:
            _err(
                errors,
                (*path, "type"),
                "an int-or-string node must not set type",
                "leave the type out; x-kubernetes-int-or-string implies it",
            )
    properties = node.get("properties")
    check_meta = where.level == "root" or embedded
    if isinstance(properties, Mapping) and check_meta:
        for name in ("apiVersion", "kind"):
            sub = properties.get(name)
            if isinstance(sub, Mapping) and sub.get("type") != "string":
                _err(
                    errors,
                    (*path, "properties", name, "type"),
                    f"{name} must have type string",
                    f"do not declare a field named {name!r}",
                )
        meta = properties.get("metadata")
        if isinstance(meta, Mapping):
            if meta.get("type") != "object":
                _err(
                    errors,
                    (*path, "properties", "metadata", "type"),
                    "metadata must have type object",
                    "keep the standard ObjectMeta metadata field",
                )
            if where.level == "root":
                _check_root_metadata(meta, (*path, "properties", "metadata"), errors)
    if embedded and not preserve and not properties:
        _err(
            errors,
            (*path, "properties"),
            "an embedded resource without x-kubernetes-preserve-unknown-fields needs properties",
            "type the field with a Resource class, or declare preserve_unknown_fields=True",
        )


def _check_root_metadata(
    meta: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    allowed_keys = {"type", "properties"}
    extra = sorted(str(k) for k in set(meta) - allowed_keys)
    props = meta.get("properties") or {}
    extra_props = (
        sorted(str(k) for k in set(props) - {"name", "generateName"})
        if isinstance(props, Mapping)
        else []
    )
    if extra or extra_props:
        _err(
            errors,
            path,
            "metadata at the root may only restrict name and generateName "
            f"(found {extra + [f'properties.{p}' for p in extra_props]})",
            "keep `metadata: {type: object}`; validate labels or annotations with a CEL rule",
        )


def _check_extensions(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    """The ``x-kubernetes-*`` extensions, one check each (:data:`_EXTENSION_CHECKS`)."""
    for check in _EXTENSION_CHECKS:
        check(node, path, errors)


def _check_preserve_unknown_fields(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    """``x-kubernetes-preserve-unknown-fields`` is true or absent, never false."""
    if node.get("x-kubernetes-preserve-unknown-fields") is False:
        _err(
            errors,
            (*path, "x-kubernetes-preserve-unknown-fields"),
            "must be true or absent",
            "remove it (false is the default)",
        )


@dataclass(frozen=True)
class _MergeType:
    """A server-side-apply merge extension: the node type it needs and the values it takes."""

    keyword: str
    """``x-kubernetes-map-type`` or ``x-kubernetes-list-type``."""
    node_type: str
    """The only node type it may be declared on."""
    values: tuple[str, ...]
    """The values the server accepts."""
    what: str
    """How a message names it (``map type``)."""
    declare_on: str
    """The fix when it is on a node of another type."""
    use: str
    """The fix when its value is not one of :attr:`values`."""

    def __call__(
        self, node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
    ) -> None:
        value = node.get(self.keyword)
        if value is None:
            return
        if node.get("type") != self.node_type:
            _err(
                errors,
                (*path, "type"),
                f"must be {self.node_type} if {self.keyword} is specified",
                self.declare_on,
            )
        if value not in self.values:
            _err(
                errors,
                (*path, self.keyword),
                f"{self.what} {_show(value)} is not one of {', '.join(self.values)}",
                self.use,
            )


def _check_map_keys_need_a_map_list(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    """``x-kubernetes-list-map-keys`` only on a list of type map."""
    if node.get("x-kubernetes-list-map-keys") and node.get("x-kubernetes-list-type") != "map":
        _err(
            errors,
            (*path, "x-kubernetes-list-type"),
            "must be map if x-kubernetes-list-map-keys is non-empty",
            "declare list_type='map' (or drop list_map_keys)",
        )


def _items_of(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    items = node.get("items")
    return items if isinstance(items, Mapping) else None


def _check_keyed_list_items_not_nullable(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    """The items of a set or map list are never null (they identify the entry)."""
    list_type = node.get("x-kubernetes-list-type")
    items = _items_of(node)
    if items is not None and list_type in ("set", "map") and items.get("nullable") is True:
        _err(
            errors,
            (*path, "items", "nullable"),
            f"items of a {list_type} list cannot be nullable",
            "drop nullable=True from the item type",
        )


def _check_set_items_atomic(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    """Object and list items of a set list are atomic: the server compares them whole."""
    items = _items_of(node)
    if items is None or node.get("x-kubernetes-list-type") != "set":
        return
    if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
        _err(
            errors,
            (*path, "items", "x-kubernetes-map-type"),
            "object items of a set list must be atomic",
            "declare the item model with map_type='atomic' (setpoint adds it for set[T])",
        )
    if items.get("type") == "array" and items.get("x-kubernetes-list-type") not in (None, "atomic"):
        _err(
            errors,
            (*path, "items", "x-kubernetes-list-type"),
            "list items of a set list must be atomic",
            "declare the inner list with list_type='atomic'",
        )


def _check_map_list(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    """A map list names its keys once each, its items are objects, and each key is valid."""
    if node.get("x-kubernetes-list-type") != "map":
        return
    keys: list[str] = node.get("x-kubernetes-list-map-keys") or []
    if not keys:
        _err(
            errors,
            (*path, "x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
            "name the item fields that identify an entry with list_map_keys=[...]",
        )
    items = _items_of(node)
    if items is None:
        return  # reported as an array without items
    if items.get("type") != "object":
        _err(
            errors,
            (*path, "items", "type"),
            "items of a map list must be objects",
            "make the items a model with the key fields",
        )
        return
    if len(set(keys)) != len(keys):
        _err(
            errors,
            (*path, "x-kubernetes-list-map-keys"),
            f"map keys {list(keys)} contain duplicates",
            "name each key once",
        )
    raw_props = items.get("properties")
    item_props: Mapping[Any, Any] = raw_props if isinstance(raw_props, Mapping) else {}
    raw_required = items.get("required")
    required = {
        r for r in (raw_required if isinstance(raw_required, list) else ()) if isinstance(r, str)
    }
    for key in keys:
        _check_map_key(key, item_props.get(key), key in required, path, errors)


def _check_map_key(
    key: str, prop: Any, required: bool, path: SchemaPath, errors: list[StructuralError]
) -> None:
    """One key of a map list: an item field that is a scalar, always set and never null."""
    if not isinstance(prop, Mapping):
        _err(
            errors,
            (*path, "x-kubernetes-list-map-keys"),
            f"map key {key!r} is not a field of the items",
            "name item fields by their JSON (or Python) names",
        )
        return
    at: SchemaPath = (*path, "items", "properties", key)
    if prop.get("type") in ("array", "object"):
        _err(
            errors,
            (*at, "type"),
            f"map key {key!r} must be a scalar, not {_show(prop.get('type'))}",
            "key the list by a string, integer or boolean field",
        )
    if not required and "default" not in prop:
        _err(
            errors,
            (*at, "default"),
            f"map key {key!r} must be required or have a default",
            "make the key field required (no default) or give it a default",
        )
    if prop.get("nullable") is True:
        _err(
            errors,
            (*at, "nullable"),
            f"map key {key!r} cannot be nullable",
            "drop nullable=True from the key field",
        )


_ExtensionCheck = Callable[[Mapping[str, Any], SchemaPath, list[StructuralError]], None]
_EXTENSION_CHECKS: tuple[_ExtensionCheck, ...] = (
    _check_preserve_unknown_fields,
    _MergeType(
        "x-kubernetes-map-type",
        "object",
        ("atomic", "granular"),
        what="map type",
        declare_on="declare map_type only on model or dict fields",
        use="use map_type='atomic' or 'granular'",
    ),
    _MergeType(
        "x-kubernetes-list-type",
        "array",
        ("atomic", "set", "map"),
        what="list type",
        declare_on="declare list_type only on list fields",
        use="use list_type='atomic', 'set' or 'map'",
    ),
    _check_map_keys_need_a_map_list,
    _check_keyed_list_items_not_nullable,
    _check_set_items_atomic,
    _check_map_list,
)
"""The checks of the ``x-kubernetes-*`` extensions, in the order they report."""


def _check_validations(
    node: Mapping[str, Any], path: SchemaPath, errors: list[StructuralError]
) -> None:
    rules = node.get("x-kubernetes-validations")
    if not isinstance(rules, list):
        return  # absent, or reported by _clean
    for i, rule in enumerate(rules):
        at: SchemaPath = (*path, "x-kubernetes-validations", i)
        if not isinstance(rule, Mapping):
            _err(errors, at, "a rule must be an object", "use sp.Rule(...)")
            continue
        unknown = sorted(
            str(k)
            for k in rule
            if k
            not in {
                "rule",
                "message",
                "messageExpression",
                "fieldPath",
                "reason",
                "optionalOldSelf",
            }
        )
        if unknown:
            _err(errors, at, f"unknown rule keys {_show(unknown)}", "use the fields of sp.Rule")
        typed: dict[str, Any] = {}
        for key, kind in _RULE_KINDS.items():
            value = rule.get(key)
            if value is None:
                continue
            if kind == "boolean" and not isinstance(value, bool):
                _err(errors, (*at, key), f"{key} must be a boolean", f"write {key}: true or false")
            elif kind == "string" and not isinstance(value, str):
                _err(
                    errors,
                    (*at, key),
                    f"{key} must be a string, not {_json_type(value)} {_show(value)}",
                    f"quote the {key}",
                )
            else:
                typed[key] = value
        _check_rule(node, typed, at, errors)


_RULE_KINDS = {
    "rule": "string",
    "message": "string",
    "messageExpression": "string",
    "fieldPath": "string",
    "reason": "string",
    "optionalOldSelf": "boolean",
}


def _check_rule(
    node: Mapping[str, Any], rule: Mapping[str, Any], at: SchemaPath, errors: list[StructuralError]
) -> None:
    text = str(rule.get("rule") or "").strip()
    message = rule.get("message")
    if not text:
        _err(errors, (*at, "rule"), "rule is not specified", "write the CEL expression")
    if message is not None and not message.strip():
        _err(errors, (*at, "message"), "message must be non-empty if specified", "write it")
    elif message is not None and ("\n" in message or "\r" in message):
        _err(errors, (*at, "message"), "message must not contain line breaks", "use one line")
    elif ("\n" in text or "\r" in text) and not (message or "").strip():
        _err(
            errors,
            (*at, "message"),
            "message must be specified if the rule contains line breaks",
            "add message=...",
        )
    expression = rule.get("messageExpression")
    if expression is not None and not expression.strip():
        _err(
            errors,
            (*at, "messageExpression"),
            "messageExpression must be non-empty if specified",
            "write the expression or drop it",
        )
    reason = rule.get("reason")
    if reason is not None and reason not in _VALIDATION_REASONS:
        _err(
            errors,
            (*at, "reason"),
            f"reason {_show(reason)} is not supported",
            f"use one of {sorted(_VALIDATION_REASONS)}",
        )
    fp = rule.get("fieldPath")
    if fp is not None:
        if not fp.strip() or "\n" in fp or "\r" in fp:
            _err(
                errors,
                (*at, "fieldPath"),
                "fieldPath must be a non-empty single line",
                "write a path like '.max'",
            )
        elif not _field_path_exists(node, fp):
            _err(
                errors,
                (*at, "fieldPath"),
                f"fieldPath {_show(fp)} does not name a field under this node",
                "use a path relative to the rule's node, with JSON names, e.g. '.spec.max'",
            )


_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['((?:[^'\\]|\\.)*)'\]|\[(\d+)\]")


def _field_path_exists(node: Mapping[str, Any], path: str) -> bool:
    """Whether a CEL ``fieldPath`` (``.a.b['c'][0]``) resolves inside ``node``."""
    pos = 0
    current: Any = node
    while pos < len(path):
        if not isinstance(current, Mapping):
            return False
        match = _PATH_TOKEN.match(path, pos)
        if match is None:
            return False
        pos = match.end()
        name = match.group(1) if match.group(1) is not None else match.group(2)
        if match.group(3) is not None:
            items = current.get("items")
            if not isinstance(items, Mapping):
                return False
            current = items
            continue
        properties = current.get("properties")
        additional = current.get("additionalProperties")
        if isinstance(properties, Mapping) and name in properties:
            current = properties[name]
        elif isinstance(additional, Mapping):
            current = additional
        else:
            # Beyond preserved unknown fields any name may exist.
            return current.get("x-kubernetes-preserve-unknown-fields") is True
    return True


def _is_int_or_string_any_of(node: Mapping[str, Any]) -> bool:
    return node.get("anyOf") == _INT_OR_STRING_ANY_OF


def _is_int_or_string_all_of(node: Mapping[str, Any]) -> bool:
    all_of = node.get("allOf")
    return (
        isinstance(all_of, list)
        and bool(all_of)
        and isinstance(all_of[0], Mapping)
        and all_of[0].get("anyOf") == _INT_OR_STRING_ANY_OF
    )


def _check_junctor_branch(
    raw: Any,
    structural: Mapping[str, Any] | None,
    path: SchemaPath,
    errors: list[StructuralError],
    *,
    skip_any_of: bool,
    stack: set[int],
) -> None:
    """Check one allOf/anyOf/oneOf/not branch against the structural node beside it."""
    if not isinstance(raw, Mapping):
        _err(errors, path, "a junctor branch must be a schema", "write a schema object")
        return
    if skip_any_of:
        return  # the sanctioned int-or-string pattern
    if not _may_enter(raw, path, errors, stack):
        return
    stack.add(id(raw))
    try:
        _check_branch(_clean(raw, path, errors), structural, path, errors, stack)
    finally:
        stack.discard(id(raw))


def _check_branch(
    branch: Mapping[str, Any],
    structural: Mapping[str, Any] | None,
    path: SchemaPath,
    errors: list[StructuralError],
    stack: set[int],
) -> None:
    for key, what in _FORBIDDEN_IN_JUNCTOR.items():
        if key in branch:
            _err(
                errors,
                (*path, key),
                f"{what} is not allowed inside allOf/anyOf/oneOf/not",
                "declare it on the field itself; keep only value validations in the junctor",
            )
    for key in ("$ref", "definitions", "dependencies", "patternProperties", "additionalItems"):
        if key in branch:
            _err(errors, (*path, key), f"{key} is not supported", _UNSUPPORTED[key])
    props = branch.get("properties")
    raw_struct_props = (structural or {}).get("properties")
    struct_props: Mapping[str, Any] = (
        raw_struct_props if isinstance(raw_struct_props, Mapping) else {}
    )
    if isinstance(props, Mapping):
        if "metadata" in props:
            _err(
                errors,
                (*path, "properties", "metadata"),
                "metadata must not be specified in a nested context",
                "constrain metadata with a CEL rule instead",
            )
        for name, sub in props.items():
            if name not in struct_props:
                _err(
                    errors,
                    (*path, "properties", name),
                    f"property {name!r} is used inside a junctor but not declared on the node",
                    "declare the field in the model so the schema stays structural",
                )
                continue
            sub_struct = struct_props[name]
            _check_junctor_branch(
                sub,
                sub_struct if isinstance(sub_struct, Mapping) else None,
                (*path, "properties", name),
                errors,
                skip_any_of=False,
                stack=stack,
            )
    items = branch.get("items")
    if items is not None:
        struct_items = (structural or {}).get("items")
        if not isinstance(struct_items, Mapping):
            _err(
                errors,
                (*path, "items"),
                "items are used inside a junctor but the node declares none",
                "type the list's items on the field",
            )
        else:
            _check_junctor_branch(
                items, struct_items, (*path, "items"), errors, skip_any_of=False, stack=stack
            )
    for junctor in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(branch.get(junctor) or ()):
            _check_junctor_branch(
                sub, structural, (*path, junctor, i), errors, skip_any_of=False, stack=stack
            )
    if "not" in branch:
        _check_junctor_branch(
            branch["not"], structural, (*path, "not"), errors, skip_any_of=False, stack=stack
        )


# --------------------------------------------------------------------------- defaults


def validate_default(
    value: Any, node: Mapping[str, Any], path: SchemaPath
) -> list[StructuralError]:
    """Check a ``default`` value against the schema node it belongs to.

    The server rejects a CRD whose defaults do not validate or contain fields
    its pruning would drop; this applies the schema's type, enum, bounds,
    length, pattern, format, item and required rules and its allOf, anyOf,
    oneOf and not branches (CEL rules aside). Any value and
    node are safe to pass: malformed keywords of the node are ignored here
    (:func:`validate_structural` reports them), and values nested deeper than
    :data:`MAX_SCHEMA_DEPTH` or containing themselves are reported, not walked.
    """
    return validate_value(value, node, path, what="default")


def validate_value(
    value: Any, node: Mapping[str, Any], path: SchemaPath, *, what: str = "value"
) -> list[StructuralError]:
    """Check any JSON value against a schema node, as the server validates a field.

    :func:`validate_default` with another word in the messages (``what``): the type,
    enum, bounds, lengths, pattern, format, items, required fields and the
    allOf/anyOf/oneOf/not branches, recursively (CEL rules aside). A field the schema
    does not declare (and does not preserve) is reported, since the server would prune
    it: prune first (:func:`setpoint.crd.objects.prune_and_default`) to validate a
    stored object.
    """
    errors: list[StructuralError] = []
    try:
        _check_value(value, node, path, errors, where=what, stack=set())
    except _JunctorsTooDeep:
        _err(
            errors,
            path,
            f"allOf/anyOf/oneOf/not nest deeper than {MAX_SCHEMA_DEPTH} levels "
            "(or contain themselves)",
            "flatten the junctors",
        )
    return errors


class _JunctorsTooDeep(Exception):
    """Junctor branches nest deeper than MAX_SCHEMA_DEPTH while checking one value."""


def _check_value(
    value: Any,
    raw_node: Any,
    path: SchemaPath,
    errors: list[StructuralError],
    *,
    where: str,
    stack: set[int],
    branch: int = 0,
) -> None:
    """Validate ``value`` against ``raw_node`` as the server's schema validator does.

    ``branch`` counts the allOf/anyOf/oneOf/not branches the node is inside (0: none); a
    branch's nodes have no type and no notion of pruning: they check only the keywords
    they hold.
    """

    def bad(message: str) -> None:
        _err(errors, path, f"{where} {_show(value)}: {message}", f"fix the {where}")

    if not isinstance(raw_node, Mapping):
        return  # the schema node itself is reported by the structural walk
    node = _clean(raw_node, path, [])
    if value is None:
        # kube-openapi checks only the type and the enum of a null value. A node without
        # a type (a branch; an int-or-string node in a default, checked alone) takes it.
        typeless = not node.get("type") and (
            branch or (node.get("x-kubernetes-int-or-string") is True and where == "default")
        )
        if node.get("nullable") is not True and not typeless:
            bad("null is not allowed here")
        elif isinstance(node.get("enum"), list):
            bad(f"is not one of {_show(node['enum'])} (a null never is)")
        return
    if isinstance(value, list | dict):
        if id(value) in stack:
            bad("contains itself (a cycle)")
            return
        if len(stack) >= MAX_SCHEMA_DEPTH:
            bad(f"nests deeper than {MAX_SCHEMA_DEPTH} levels")
            return
    elif not isinstance(value, str | int | float | bool):
        bad(f"is a {type(value).__name__}, which is not a JSON value")
        return
    node_type = node.get("type")
    if not node_type and _typeless_format_refuses(value, node, branch=branch, where=where):
        bad(f"must be of type {node['format']}")
        return
    if node.get("x-kubernetes-int-or-string") is True:
        integral = isinstance(value, float) and _is_json_integer(value)
        if isinstance(value, bool) or not (isinstance(value, int | str) or integral):
            bad("must be an integer or a string")
            return
        node_type = "string" if isinstance(value, str) else "integer"
    if (
        node_type
        and not _is_type(value, node_type)
        and not _format_lets_through(value, node, where)
    ):
        bad(f"is not of type {node_type}")
        return
    if isinstance(value, float) and not math.isfinite(value):
        bad("must be a finite number")
        return
    stack.add(id(value))
    try:
        enum = node.get("enum")
        if isinstance(enum, list) and not _in_enum(value, enum):
            bad(f"is not one of {_show(enum)}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if node.get("type") in NUMBER_FORMATS:
                problem = number_range_problem(value, node)
                if problem is not None:
                    bad(problem)
            _check_number(value, node, bad)
        if isinstance(value, str):
            _check_string(value, node, bad, fmt=_checked_format(node, where))
        if isinstance(value, list):
            _check_list(value, node, path, errors, where=where, bad=bad, stack=stack, branch=branch)
        if isinstance(value, dict):
            _check_object(
                value, node, path, errors, where=where, bad=bad, stack=stack, branch=branch
            )
        _check_junctors(value, node, path, errors, where=where, bad=bad, stack=stack, branch=branch)
    finally:
        stack.discard(id(value))


def _format_lets_through(value: Any, node: Mapping[str, Any], where: str) -> bool:
    """kube-openapi's type check passes a string or a list on a non-numeric node with a format.

    For an object only string nodes keep a format (the server strips the rest), so a list
    passes a ``type: string`` field with a supported format. A default is checked against
    its node unstripped: any format on any non-numeric node lets a string or list through.
    """
    node_type, fmt = node.get("type"), node.get("format")
    if not isinstance(value, str | list) or node_type in ("integer", "number"):
        return False
    if where == "default":
        return isinstance(fmt, str) and bool(fmt)
    return effective_format(node_type, fmt) is not None


def _checked_format(node: Mapping[str, Any], where: str) -> str | None:
    """The string format the server checks on a string value of ``node`` (normalized)."""
    fmt = node.get("format")
    if where == "default":  # unstripped: the strfmt registry decides
        normalized = fmt.replace("-", "") if isinstance(fmt, str) else None
        return normalized if normalized in STRING_FORMATS else None
    return effective_format(node.get("type"), fmt)


def _typeless_format_refuses(
    value: Any, node: Mapping[str, Any], *, branch: int, where: str
) -> bool:
    """kube-openapi's type check of a node without a type but with a format.

    Only a string or a list passes it (a number's type is not among the node's types,
    which are none, even with ``format: int64``). For an object, the server has stripped the
    formats it does not support and sees an int-or-string node as typed, so only
    junctor branches with a supported string format refuse. A default is checked against
    its node alone, unstripped: any format counts, on int-or-string nodes too.
    """
    fmt = node.get("format")
    if isinstance(value, str | list) or not isinstance(fmt, str) or not fmt:
        return False
    if where != "default":
        return bool(branch) and effective_format(None, fmt) is not None
    return bool(branch) or node.get("x-kubernetes-int-or-string") is True


def _check_junctors(
    value: Any,
    node: Mapping[str, Any],
    path: SchemaPath,
    errors: list[StructuralError],
    *,
    where: str,
    bad: Callable[[str], None],
    stack: set[int],
    branch: int,
) -> None:
    """allOf, anyOf, oneOf and not: each branch validates the same value."""
    if not any(k in node for k in ("allOf", "anyOf", "oneOf", "not")):
        return
    if branch >= MAX_SCHEMA_DEPTH:
        raise _JunctorsTooDeep  # a verdict inside `not` would be inverted: stop the check

    def passes(sub: Any, into: list[StructuralError] | None = None) -> bool:
        found: list[StructuralError] = [] if into is None else into
        before = len(found)
        _check_value(value, sub, path, found, where=where, stack=stack, branch=branch + 1)
        return len(found) == before

    stack.discard(id(value))  # the branches see the same value again
    try:
        for sub in node.get("allOf") or ():
            if not passes(sub, errors):
                bad("must validate all the schemas (allOf)")
                break
        any_of = node.get("anyOf")
        if any_of and not any(passes(b) for b in any_of):
            bad("must validate at least one schema (anyOf)")
        one_of = node.get("oneOf")
        if one_of:
            valid = sum(1 for b in one_of if passes(b))
            if valid != 1:
                bad(f"must validate one and only one schema (oneOf); {valid} validated")
        if "not" in node and passes(node["not"]):
            bad("must not validate the schema (not)")
    finally:
        stack.add(id(value))


def _in_enum(value: Any, enum: list[Any]) -> bool:
    """``value in enum`` as kube-openapi decides it, safe on nested values.

    kube-openapi converts the value to each member's Go type before comparing: a JSON
    integer is an int64 and a number with a fraction a float64, so ``1.5`` matches the
    member ``1`` (truncated), ``1`` matches ``1.0``, and an integer matches the string
    holding that code point (``65`` matches ``"A"``). Nested lists and maps compare
    exactly, an int64 never equal to a float64. Booleans equal only booleans. A null
    matches nothing, not even a null member (kube-openapi skips untyped members).
    """
    return any(_go_enum_equal(value, member) for member in enum)


def _go_kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int" if _INT64_MIN <= value <= _INT64_MAX else "float"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "map"
    return None


def _go_key(value: Any, depth: int = 0) -> Any:
    """A hashable form of a JSON value with Go's types (int64 and float64 differ)."""
    kind = _go_kind(value)
    if depth > MAX_SCHEMA_DEPTH or (kind is None and value is not None):
        return ("?", id(value))
    if kind == "float":
        return (kind, _float64(value))
    if kind == "list":
        return (kind, tuple(_go_key(v, depth + 1) for v in value))
    if kind == "map":
        return (kind, tuple(sorted((str(k), _go_key(v, depth + 1)) for k, v in value.items())))
    return (kind, value)


def _go_enum_equal(value: Any, member: Any) -> bool:
    """Go reflect ConvertibleTo, Convert and DeepEqual, as kube-openapi compares an enum."""
    value_kind, member_kind = _go_kind(value), _go_kind(member)
    if value_kind is None or member_kind is None:
        return False
    if value_kind == member_kind:
        return bool(_go_key(value) == _go_key(member))
    if (value_kind, member_kind) == ("int", "float"):
        return _float64(value) == _float64(member)
    if (value_kind, member_kind) == ("float", "int"):
        return bool(_go_int64(value) == member)
    if (value_kind, member_kind) == ("int", "string"):
        valid_rune = 0 <= value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF
        return bool((chr(value) if valid_rune else "\ufffd") == member)
    return False


def _json_key(value: Any, depth: int = 0) -> Any:
    """A hashable form of a JSON value that tells booleans from numbers; None if too deep."""
    if depth > MAX_SCHEMA_DEPTH:
        return None
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if value is None:
        return ("null",)
    if isinstance(value, list):
        return ("l", tuple(_json_key(v, depth + 1) for v in value))
    if isinstance(value, Mapping):
        return ("o", tuple(sorted((str(k), _json_key(v, depth + 1)) for k, v in value.items())))
    return ("?", id(value))


def _show(value: Any) -> str:
    """A short, always-printable rendering of a user-supplied value for messages."""
    try:
        text = _DISPLAY.repr(value)
    except ValueError:  # an integer too long to print
        text = "<a number too large to print>"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_type(value: Any, node_type: str) -> bool:
    if node_type == "object":
        return isinstance(value, dict)
    if node_type == "array":
        return isinstance(value, list)
    if node_type == "string":
        return isinstance(value, str)
    if node_type == "boolean":
        return isinstance(value, bool)
    if node_type == "integer":
        # kube-openapi accepts a float64 holding an integer (2.0) as an integer.
        if isinstance(value, float):
            return _is_json_integer(value)
        return isinstance(value, int) and not isinstance(value, bool)
    if node_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _check_number(value: float, node: Mapping[str, Any], bad: Callable[[str], None]) -> None:
    """kube-openapi's bounds and multipleOf, with its native-type arithmetic.

    A JSON integer is a Go int64 there, and each bound is converted to int64 (truncated:
    ``maximum: 2.5`` is 2 for an integer value, ``multipleOf: 0.5`` is 0, which no
    integer satisfies); a number with a fraction is compared as a float64.
    """
    native_int = isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX
    minimum, maximum = node.get("minimum"), node.get("maximum")
    if minimum is not None:
        low = _go_int64(minimum) if native_int else _float64(minimum)
        number = value if native_int else _float64(value)
        if node.get("exclusiveMinimum") is True and number <= low:
            bad(f"must be greater than {_show(minimum)}")
        elif number < low:
            bad(f"must be at least {_show(minimum)}")
    if maximum is not None:
        high = _go_int64(maximum) if native_int else _float64(maximum)
        number = value if native_int else _float64(value)
        if node.get("exclusiveMaximum") is True and number >= high:
            bad(f"must be less than {_show(maximum)}")
        elif number > high:
            bad(f"must be at most {_show(maximum)}")
    multiple = node.get("multipleOf")
    if multiple is not None and not _is_multiple(value, multiple, native_int=native_int):
        bad(f"must be a multiple of {_show(multiple)}")


_INT64_MIN = -(2**63)
_MAX_JSON_FLOAT = float(2**53 - 1)


def _float64(number: float) -> float:
    """``number`` as a float64; an integer beyond its range is +/-infinity (no OverflowError).

    Python integers have no bound; a JSON number past float64's range reaches the server
    as an infinite float64 at most, so bounds compare it as one.
    """
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def _go_int64(bound: float) -> int:
    """Go's ``int64(float64(bound))`` on amd64: truncated; out of range is the minimum."""
    number = _float64(bound)
    if not math.isfinite(number) or not -(2.0**63) <= number < 2.0**63:
        return _INT64_MIN
    return int(number)


def _is_multiple(value: float, multiple: float, *, native_int: bool) -> bool:
    """kube-openapi's MultipleOfInt (for integers) or MultipleOf (floats, relative 1e-9)."""
    if native_int:
        factor = _go_int64(multiple)
        return factor > 0 and int(value) % factor == 0
    divisor = float(multiple)
    if divisor <= 0:
        return False
    mult = 1 / divisor * _float64(value) if divisor < 1 else _float64(value) / divisor
    return _is_json_integer(mult)


def _is_json_integer(f: float) -> bool:
    """go-openapi swag's ``IsFloat64AJSONInteger``."""
    if not math.isfinite(f) or f < -_MAX_JSON_FLOAT or f > _MAX_JSON_FLOAT:
        return False
    g = float(int(f)) if f >= 0 else float(int(f) & (2**64 - 1)) if f > -(2.0**63) else 0.0
    diff = abs(f - g)
    if f == g or f == float(int(f)):
        return True
    if f == 0 or g == 0 or diff < 5e-324:
        return diff < 1e-9 * 5e-324
    return diff / min(abs(f) + abs(g), sys.float_info.max) < 1e-9


def _check_string(
    value: str, node: Mapping[str, Any], bad: Callable[[str], None], *, fmt: str | None
) -> None:
    if node.get("minLength") is not None and len(value) < node["minLength"]:
        bad(f"must be at least {node['minLength']} characters")
    if node.get("maxLength") is not None and len(value) > node["maxLength"]:
        bad(f"must be at most {node['maxLength']} characters")
    if fmt is not None and format_problem(value, fmt):
        bad(f"must be of type {node['format']}")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        try:
            compiled = compile_pattern(pattern)
        except PatternError:
            return  # reported on the pattern itself
        try:
            if not compiled.matches(value):
                bad(f"does not match pattern {_show(pattern)}")
        except PatternError as exc:
            bad(str(exc))


def _check_list(
    value: list[Any],
    node: Mapping[str, Any],
    path: SchemaPath,
    errors: list[StructuralError],
    *,
    where: str,
    bad: Callable[[str], None],
    stack: set[int],
    branch: int = 0,
) -> None:
    if node.get("minItems") is not None and len(value) < node["minItems"]:
        bad(f"must have at least {node['minItems']} items")
    if node.get("maxItems") is not None and len(value) > node["maxItems"]:
        bad(f"must have at most {node['maxItems']} items")
    items = node.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            _check_value(item, items, (*path, i), errors, where=where, stack=stack, branch=branch)
    # Sets and map lists are checked on objects (structurallisttype), not on defaults.
    list_type = node.get("x-kubernetes-list-type") if where != "default" else None
    if list_type == "set":
        seen: set[Any] = set()
        for item in value:
            key = _json_key(item)
            if key in seen:
                bad(f"repeats {_show(item)} in a set list")
            seen.add(key)
    elif list_type == "map":
        keys = list(node.get("x-kubernetes-list-map-keys") or ())
        seen_keys: set[tuple[Any, ...]] = set()
        for item in value:
            if isinstance(item, dict):
                ident = tuple(_json_key(item.get(k)) for k in keys)
                if ident in seen_keys:
                    shown = {k: _show(item.get(k)) for k in keys}
                    bad(f"repeats the map key {shown}")
                seen_keys.add(ident)


def _check_object(
    value: dict[Any, Any],
    node: Mapping[str, Any],
    path: SchemaPath,
    errors: list[StructuralError],
    *,
    where: str,
    bad: Callable[[str], None],
    stack: set[int],
    branch: int = 0,
) -> None:
    if node.get("minProperties") is not None and len(value) < node["minProperties"]:
        bad(f"must have at least {node['minProperties']} keys")
    if node.get("maxProperties") is not None and len(value) > node["maxProperties"]:
        bad(f"must have at most {node['maxProperties']} keys")
    properties = node.get("properties")
    additional = node.get("additionalProperties")
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    embedded = node.get("x-kubernetes-embedded-resource") is True
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    if embedded and not branch:
        # The server validates an embedded object's TypeMeta: both fields must be set.
        missing = [k for k in ("apiVersion", "kind") if not value.get(k)]
        if missing:
            bad(f"is an embedded resource without {' and '.join(missing)}")
    for key, sub in value.items():
        if not isinstance(key, str):
            bad(f"has the key {_show(key)}, which is not a string")
            continue
        if embedded and key == "metadata":
            continue  # the server validates an embedded object's metadata as ObjectMeta
        child = (*path, key)
        if key in props:
            _check_value(sub, props[key], child, errors, where=where, stack=stack, branch=branch)
        elif isinstance(additional, Mapping):
            _check_value(sub, additional, child, errors, where=where, stack=stack, branch=branch)
        elif branch:
            continue  # a branch constrains only the fields it names
        elif not preserve and additional is not True and not (embedded and key in _META_FIELDS):
            bad(f"has field {key!r} that the schema does not declare (it would be pruned)")
    # A field's own default does not satisfy required: the server validates a default
    # as it is written (`default: {}` with a required, defaulted field is refused).
    for key in node.get("required") or ():
        if key not in value:
            bad(f"is missing the required field {key!r}")
