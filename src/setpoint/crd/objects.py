"""A custom resource as the API server stores it: pruned, defaulted, then validated.

On a create or update of a custom resource the API server (apiextensions-apiserver)
drops the fields the structural schema does not declare (pruning), fills in the
``default`` of every missing field (defaulting; a ``null`` in a field that is not
nullable counts as missing), and validates what is left against the schema. These
functions do the same offline, so a test or a tool can tell what the server will store
and whether it will refuse the object, without a server:

* :func:`prune_and_default` returns the object the server would validate and store;
* :func:`validate_object` returns the server's refusals for it (empty: accepted);
* :func:`unknown_fields` names the fields pruning drops, as the server's
  ``fieldValidation`` reports them (``Strict`` refuses the write, ``Warn`` warns).

``apiVersion``, ``kind`` and ``metadata`` at the root (and of embedded resources) are the
server's and are kept as they are; CEL rules (``x-kubernetes-validations``) are only
compiled by the server and are not evaluated here. The differential test
(tests/integration/crd/test_crd_validator_diff.py) compares both answers with a real
API server's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from setpoint.crd.errors import StructuralError
from setpoint.crd.structural import validate_value

__all__ = ["prune_and_default", "unknown_fields", "validate_object"]

_RESOURCE_FIELDS = ("apiVersion", "kind", "metadata")


def prune_and_default(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The object the server validates and stores: unknown fields pruned, defaults applied.

    ``schema`` is the version's ``openAPIV3Schema``. The input is not modified.
    """
    result = copy.deepcopy(dict(obj))
    _prune(result, schema, resource_root=True)
    _default(result, schema)
    _drop_null_fields(result, schema)
    return result


def validate_object(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[StructuralError]:
    """What the server refuses in ``obj`` under ``schema``, after pruning and defaulting.

    Each error names the field path (``("spec", "replicas")``). The root's apiVersion,
    kind and metadata are not checked (the server validates them as ObjectMeta).
    """
    stored = prune_and_default(obj, schema)
    body = {k: v for k, v in stored.items() if k not in _RESOURCE_FIELDS}
    properties = schema.get("properties")
    node = dict(schema)
    if isinstance(properties, Mapping):
        node["properties"] = {k: v for k, v in properties.items() if k not in _RESOURCE_FIELDS}
    return validate_value(body, node, ())


def unknown_fields(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The fields of ``obj`` that ``schema`` neither declares nor preserves, sorted.

    Spelled as the server's strict decoding names them (``spec.foo``,
    ``spec.items[0].bar``): what ``fieldValidation=Strict`` refuses and ``Warn`` warns
    about (``unknown field "spec.foo"``), and what :func:`prune_and_default` drops.
    ``metadata`` is the server's (ObjectMeta) and is not looked into.
    """
    dropped: list[str] = []
    _prune(copy.deepcopy(dict(obj)), schema, resource_root=True, dropped=dropped, path="")
    return sorted(dropped)


def _prune(
    value: Any,
    node: Any,
    *,
    resource_root: bool = False,
    dropped: list[str] | None = None,
    path: str = "",
) -> None:
    """structuralpruning.Prune: drop what the schema neither declares nor preserves.

    With ``dropped``, the path of each dropped field is appended to it.
    """
    if not isinstance(node, Mapping):
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _prune(item, node.get("items"), dropped=dropped, path=f"{path}[{index}]")
        return
    if not isinstance(value, dict):
        return
    embedded = node.get("x-kubernetes-embedded-resource") is True
    keep_meta = resource_root or embedded
    properties = node.get("properties")
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    additional = node.get("additionalProperties")
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    for key in list(value):
        if keep_meta and key in _RESOURCE_FIELDS:
            if key == "metadata" and key in props and not resource_root:
                continue  # the server keeps ObjectMeta as it is
            continue
        where = f"{path}.{key}" if path else str(key)
        if key in props:
            _prune(value[key], props[key], dropped=dropped, path=where)
        elif isinstance(additional, Mapping):
            _prune(value[key], additional, dropped=dropped, path=where)
        elif not preserve and additional is not True:
            del value[key]
            if dropped is not None:
                dropped.append(where)


def _drop_null_fields(value: Any, node: Any) -> None:
    """PruneNonNullableNullsWithoutDefaults: a null that may not be null, with no default.

    Fields of ``properties`` and values of ``additionalProperties`` are dropped; a null
    list item stays (and is then refused by validation).
    """
    if not isinstance(node, Mapping):
        return
    if isinstance(value, list):
        for item in value:
            _drop_null_fields(item, node.get("items"))
        return
    if not isinstance(value, dict):
        return
    for key in list(value):
        sub = _field_schema(node, key)
        if value[key] is None and _non_nullable(sub) and sub.get("default") is None:
            del value[key]
        else:
            _drop_null_fields(value[key], sub)


def _field_schema(node: Mapping[str, Any], key: str) -> Any:
    properties = node.get("properties")
    if isinstance(properties, Mapping) and key in properties:
        return properties[key]
    additional = node.get("additionalProperties")
    return additional if isinstance(additional, Mapping) else None


def _non_nullable(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("nullable") is not True


def _as_stored(value: Any) -> Any:
    """A copy of a default as the server applies it: as its stored CRD reads back.

    The server writes the CRD with Go's JSON encoder, which writes the float 2.0 as
    ``2``, so an integral float in a default reaches objects as an integer (and then
    meets integer arithmetic: ``multipleOf: 0.1`` refuses it).
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_as_stored(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_stored(v) for k, v in value.items()}
    return value


def _default(value: Any, node: Any) -> None:
    """structuraldefaulting.Default: fill missing (or non-nullable null) fields, top down."""
    if not isinstance(node, Mapping):
        return
    if isinstance(value, list):
        items = node.get("items")
        for i in range(len(value)):
            if value[i] is None and isinstance(items, Mapping) and _non_nullable(items):
                value[i] = _as_stored(items.get("default"))
            _default(value[i], items)
        return
    if not isinstance(value, dict):
        return
    properties = node.get("properties")
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    for key, prop in props.items():
        if not isinstance(prop, Mapping) or prop.get("default") is None:
            continue
        if key not in value or (value[key] is None and _non_nullable(prop)):
            value[key] = _as_stored(prop["default"])
    additional = node.get("additionalProperties")
    for key in list(value):
        if key in props:
            _default(value[key], props[key])
        elif isinstance(additional, Mapping):
            if value[key] is None and _non_nullable(additional):
                value[key] = _as_stored(additional.get("default"))
            _default(value[key], additional)
