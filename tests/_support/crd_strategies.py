"""Hypothesis strategies producing API objects that are valid for a generated CRD schema.

The strategy is derived from the schema itself, so every node the generator
emits (enums, bounds, patterns, int-or-string, sets, map lists, nullable,
embedded resources, preserve-unknown) is exercised. With ``unknown_fields``
it also sprinkles keys the schema does not declare (named ``zz...`` so they
never collide with a declared field), the way a newer server or another
controller would.
"""

from __future__ import annotations

import datetime as dt
import math
import string
from typing import Any

from hypothesis import strategies as st

UNKNOWN_KEYS = st.from_regex(r"\Azz[a-z]{1,5}\Z")
"""Names of fields the schema does not declare."""

_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " -_./:é", max_size=12)

_SCALARS = st.none() | st.booleans() | st.integers(-(2**31), 2**31) | _TEXT
JSON_VALUES = st.recursive(
    _SCALARS | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=6,
)
"""Any JSON value (what a preserve-unknown field may hold)."""

TIMESTAMPS = st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2200, 1, 1)).map(
    lambda d: d.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
)
"""RFC 3339 timestamps with second precision, as the API server writes them."""

_LABEL = st.from_regex(r"\A[a-z]([-a-z0-9]{0,10}[a-z0-9])?\Z")


def with_unknown(base: st.SearchStrategy[dict[str, Any]], enabled: bool) -> Any:
    """Add undeclared fields to generated objects."""
    if not enabled:
        return base
    extras = st.dictionaries(UNKNOWN_KEYS, JSON_VALUES, max_size=2)
    return st.tuples(base, extras).map(lambda pair: {**pair[1], **pair[0]})


def object_meta(*, unknown_fields: bool) -> Any:
    """``metadata`` as the API server returns it."""
    owner = st.fixed_dictionaries(
        {"apiVersion": st.just("v1"), "kind": st.just("ConfigMap"), "name": _LABEL, "uid": _LABEL},
        optional={"controller": st.booleans(), "blockOwnerDeletion": st.booleans()},
    )
    base = st.fixed_dictionaries(
        {"name": _LABEL},
        optional={
            "namespace": _LABEL,
            "generateName": _LABEL,
            "uid": _LABEL,
            "resourceVersion": st.integers(1, 10**9).map(str),
            "generation": st.integers(1, 1000),
            "creationTimestamp": TIMESTAMPS,
            "deletionTimestamp": TIMESTAMPS,
            "deletionGracePeriodSeconds": st.integers(0, 60),
            "labels": st.dictionaries(_LABEL, _LABEL, max_size=3),
            "annotations": st.dictionaries(_LABEL, _TEXT, max_size=3),
            "finalizers": st.lists(_LABEL, max_size=2, unique=True),
            "ownerReferences": st.lists(owner, max_size=2),
        },
    )
    return with_unknown(base, unknown_fields)


def for_schema(node: dict[str, Any], *, unknown_fields: bool, resource_root: bool = False) -> Any:
    """Values valid for a schema node (``resource_root``: the node is a whole object)."""
    base = _for_node(node, unknown_fields=unknown_fields, resource_root=resource_root)
    if node.get("nullable"):
        return st.none() | base
    return base


def _for_node(node: dict[str, Any], *, unknown_fields: bool, resource_root: bool) -> Any:
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return st.integers(-(10**6), 10**6) | _strings(node)
    node_type = node.get("type")
    if node_type is None:
        # Any JSON value; a top-level null would be pruned by the server, so none here.
        return JSON_VALUES.filter(lambda v: v is not None)
    if node_type == "boolean":
        return st.booleans()
    if node_type == "integer":
        return _integers(node)
    if node_type == "number":
        floats = st.floats(
            min_value=node.get("minimum"),
            max_value=node.get("maximum"),
            exclude_min=bool(node.get("exclusiveMinimum")),
            exclude_max=bool(node.get("exclusiveMaximum")),
            allow_nan=False,
            allow_infinity=False,
        )
        return floats | _integers(node)  # JSON numbers may be written without a fraction
    if node_type == "string":
        return _strings(node)
    if node_type == "array":
        return _arrays(node, unknown_fields=unknown_fields)
    return _objects(node, unknown_fields=unknown_fields, resource_root=resource_root)


def _integers(node: dict[str, Any]) -> Any:
    minimum, maximum = node.get("minimum", -(2**40)), node.get("maximum", 2**40)
    low, high = math.ceil(minimum), math.floor(maximum)
    if node.get("exclusiveMinimum") and low == minimum:
        low += 1
    if node.get("exclusiveMaximum") and high == maximum:
        high -= 1
    multiple = node.get("multipleOf")
    if multiple:
        return st.integers(-(-low // multiple), high // multiple).map(lambda n: n * multiple)
    return st.integers(low, high)


def _strings(node: dict[str, Any]) -> Any:
    fmt = node.get("format")
    if fmt == "date-time":
        return TIMESTAMPS
    if fmt == "date":
        return st.dates(dt.date(1971, 1, 1), dt.date(2200, 1, 1)).map(dt.date.isoformat)
    if fmt == "uuid":
        return st.uuids().map(str)
    if fmt == "email":  # the server checks the format (setpoint.crd.formats)
        return st.from_regex(r"[a-z0-9]{1,8}@[a-z]{1,8}\.[a-z]{2,3}", fullmatch=True)
    low, high = node.get("minLength", 0), node.get("maxLength", 16)
    pattern = node.get("pattern")
    if pattern:
        # Python's $ also matches before a final newline; the server's RE2 does not.
        return st.from_regex(pattern, fullmatch=False).filter(
            lambda s: low <= len(s) <= high and not s.endswith("\n")
        )
    return st.text(
        alphabet=string.ascii_letters + string.digits + " -_é", min_size=low, max_size=min(high, 16)
    )


def _arrays(node: dict[str, Any], *, unknown_fields: bool) -> Any:
    items = node["items"]
    low, high = node.get("minItems", 0), min(node.get("maxItems", 4), 4)
    element = for_schema(items, unknown_fields=unknown_fields)
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        # Written sorted, as setpoint writes set-typed fields.
        return st.lists(element, min_size=low, max_size=high, unique=True).map(_sorted_if_possible)
    if list_type == "map":
        keys = node["x-kubernetes-list-map-keys"]
        return st.lists(
            element,
            min_size=low,
            max_size=high,
            unique_by=lambda item: tuple(repr(item.get(k)) for k in keys),
        )
    return st.lists(element, min_size=low, max_size=high)


def _sorted_if_possible(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:
        return values


def _objects(node: dict[str, Any], *, unknown_fields: bool, resource_root: bool) -> Any:
    properties: dict[str, Any] = node.get("properties") or {}
    embedded = bool(node.get("x-kubernetes-embedded-resource"))
    is_resource = resource_root or embedded
    if properties:
        required = set(node.get("required") or ())
        if is_resource:
            required |= {"apiVersion", "kind"}
        if resource_root:
            required.add("metadata")  # objects read from the server always have metadata
        strategies: dict[str, Any] = {}
        for name, sub in properties.items():
            if is_resource and name == "metadata" and not sub.get("properties"):
                strategies[name] = object_meta(unknown_fields=unknown_fields)
            elif is_resource and name in ("apiVersion", "kind") and "enum" not in sub:
                strategies[name] = st.just("v1" if name == "apiVersion" else "Thing")
            else:
                strategies[name] = for_schema(sub, unknown_fields=unknown_fields)
        base = st.fixed_dictionaries(
            {k: v for k, v in strategies.items() if k in required},
            optional={k: v for k, v in strategies.items() if k not in required},
        )
        keep_unknown = unknown_fields or bool(node.get("x-kubernetes-preserve-unknown-fields"))
        return with_unknown(base, keep_unknown)
    additional = node.get("additionalProperties")
    low, high = node.get("minProperties", 0), min(node.get("maxProperties", 3), 3)
    if isinstance(additional, dict):
        return st.dictionaries(
            _LABEL,
            for_schema(additional, unknown_fields=unknown_fields),
            min_size=low,
            max_size=high,
        )
    if node.get("x-kubernetes-preserve-unknown-fields"):
        if embedded:
            return st.fixed_dictionaries(
                {"apiVersion": st.just("v1"), "kind": st.just("ConfigMap")},
                optional={"metadata": object_meta(unknown_fields=False), "data": JSON_VALUES},
            )
        return st.dictionaries(_TEXT, JSON_VALUES, min_size=low, max_size=high)
    return st.just({})
