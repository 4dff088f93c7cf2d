"""The fake API server's schema checks of custom resources: fieldValidation, pruning, validation.

For a custom resource whose schema the fake knows (its CustomResourceDefinition was created
in the fake, or its Python type was registered or used), a write goes through what
apiextensions-apiserver does, each step worded as the server words it (checked against a
real kube-apiserver by tests/integration/parity/test_parity_schema.py):

1. ``fieldValidation`` on the body as sent (:func:`check_fields`): fields the schema does
   not declare (and ObjectMeta fields that do not exist) are refused under ``Strict`` - a
   400 BadRequest (``strict decoding error: unknown field "spec.foo"``) for create and
   update, a 422 on the field ``patch`` for merge and JSON patches - warned about under
   ``Warn`` (the server's default) and dropped silently under ``Ignore``. Server-side apply
   refuses an undeclared field whatever ``fieldValidation`` says (:func:`check_apply`:
   500, ``.spec.foo: field not declared in schema``).
2. Pruning and defaulting (:func:`setpoint.crd.objects.prune_and_default`).
3. Validation (:func:`setpoint.crd.objects.validate_object`): a 422 Invalid whose causes
   name the field paths (``spec.size``) with the server's reasons (FieldValueInvalid,
   FieldValueTypeInvalid, FieldValueRequired, FieldValueNotSupported). A failed junctor
   is a cause on the field ``<nil>`` (kube-openapi's way), plus the closest branch's
   errors when none passed. Messages are the server's text for types, formats,
   required fields, junctors, bounds, lengths, patterns, counts, enums and set
   duplicates (one cause for a value's first failing length/pattern/bound check, as
   kube-openapi stops there); the rarer ones are setpoint's wording of the same rule.

Duplicate fields in a JSON body are refused or warned about by the server too; the fake
receives parsed objects, in which duplicates are already gone, so it cannot see them.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from setpoint._extras import ExtraNotInstalled
from setpoint.api.meta import JsonObject
from setpoint.client.errors import Cause
from setpoint.client.server_warnings import FieldValidation, record_warning
from setpoint.crd.errors import StructuralError
from setpoint.crd.formats import effective_format
from setpoint.crd.objects import unknown_fields, validate_object
from setpoint.crd.structural import validate_value
from setpoint.testing._fake_errors import api_error
from setpoint.testing._fake_kinds import KindRules

__all__ = [
    "OBJECT_META_FIELDS",
    "check_apply",
    "check_fields",
    "schema_causes",
    "undeclared_fields",
    "warn_without_re2",
]

log = logging.getLogger("setpoint.testing.fake")

OBJECT_META_FIELDS: frozenset[str] = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
"""The fields of ObjectMeta (metav1.ObjectMeta's JSON names); any other is unknown."""


def undeclared_fields(obj: JsonObject, schema: Mapping[str, Any]) -> list[str]:
    """Unknown ObjectMeta fields first, then the fields ``schema`` does not declare, sorted."""
    meta = obj.get("metadata")
    unknown_meta = (
        sorted(f"metadata.{k}" for k in meta if k not in OBJECT_META_FIELDS)
        if isinstance(meta, Mapping)
        else []
    )
    return unknown_meta + unknown_fields(obj, schema)


def _strict_text(fields: list[str]) -> str:
    return "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in fields)


def check_fields(
    rules: KindRules,
    obj: JsonObject,
    schema: Mapping[str, Any] | None,
    validation: FieldValidation | None,
    *,
    method: str,
    path: str,
    patched: bool = False,
) -> None:
    """Apply ``fieldValidation`` to a body: refuse (Strict), warn (Warn, or not given), or not.

    ``patched``: ``obj`` is the result of a merge or JSON patch, whose strict error is a
    422 on the field ``patch`` rather than a 400. Without a schema nothing is checked.
    """
    if schema is None or validation == "Ignore":
        return
    fields = undeclared_fields(obj, schema)
    if not fields:
        return
    if validation == "Strict":
        gvk = rules.info.gvk
        if patched:
            dumped = json.dumps(obj, sort_keys=True, separators=(",", ":"))
            text = f'Invalid value: "{dumped}": {_strict_text(fields)}'
            raise api_error(
                422,
                "Invalid",
                f' "" is invalid: patch: {text}',
                method=method,
                path=path,
                details={
                    "causes": [{"reason": "FieldValueInvalid", "message": text, "field": "patch"}]
                },
            )
        raise api_error(
            400,
            "BadRequest",
            f'{gvk.kind} in version "{gvk.version}" cannot be handled as a {gvk.kind}: '
            + _strict_text(fields),
            method=method,
            path=path,
        )
    for field in fields:
        text = f'unknown field "{field}"'
        log.warning("API server warning for %s fake://%s: %s", method, path, text)
        record_warning(text)


def check_apply(
    rules: KindRules, config: JsonObject, schema: Mapping[str, Any] | None, *, path: str
) -> None:
    """Refuse an apply configuration that sets an undeclared field, as the server does.

    Server-side apply builds a typed object from the configuration before anything else;
    a field the schema lacks fails that (500 InternalError) whatever ``fieldValidation``
    says. The server names one field; the fake names the first in sorted order.
    """
    if schema is None:
        return
    fields = undeclared_fields(config, schema)
    if not fields:
        return
    meta = config.get("metadata") or {}
    gvk = rules.info.gvk
    raise api_error(
        500,
        "",
        f"failed to create typed patch object ({meta.get('namespace') or ''}/"
        f"{meta.get('name') or ''}; {gvk.group}/{gvk.version}, Kind={gvk.kind}): "
        f".{fields[0]}: field not declared in schema",
        method="PATCH",
        path=path,
    )


# Every message of validate_value is "value <shown value>: <what is wrong>"; what is wrong
# starts with one of these words.
_MESSAGE = re.compile(
    r"^value (?P<value>.*?): (?P<rest>(?:must|is|does|has|contains|nests|repeats|null)\b.*)$",
    re.DOTALL,
)
_REQUIRED = re.compile(r"^is missing the required field '(?P<key>.*)'$", re.DOTALL)
_ONE_OF = re.compile(r"^must validate one and only one schema \(oneOf\); (?P<valid>\d+) validated$")
_JUNCTOR_TEXT = {
    "must validate all the schemas (allOf)": "must validate all the schemas (allOf)",
    "must validate at least one schema (anyOf)": "must validate at least one schema (anyOf)",
    "must not validate the schema (not)": "must not validate the schema (not)",
}


def _field(path: tuple[Any, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _value_at(obj: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        try:
            obj = obj[part]
        except (KeyError, IndexError, TypeError):
            return None
    return obj


def _cause(
    stored: JsonObject, error: StructuralError, node: Mapping[str, Any] | None = None
) -> Cause:
    """The server's cause for one validation error; ``node`` is the schema node checked."""
    field = _field(tuple(error.schema_path))
    match = _MESSAGE.match(error.message)
    rest = match.group("rest") if match else error.message
    required = _REQUIRED.match(rest)
    if required is not None:
        key = required.group("key")
        return Cause(
            reason="FieldValueRequired",
            field=f"{field}.{key}" if field else key,
            message="Required value",
        )
    one_of = _ONE_OF.match(rest)
    if one_of is not None or rest in _JUNCTOR_TEXT:
        # kube-openapi reports a junctor on no field, naming the path in the message.
        if one_of is not None:
            valid = int(one_of.group("valid"))
            found = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
            text = f"must validate one and only one schema (oneOf). {found}"
        else:
            text = _JUNCTOR_TEXT[rest]
            if (
                "(allOf)" in text
                and node is not None
                and not _any_branch_passes(
                    _value_at(stored, tuple(error.schema_path)), node.get("allOf"), error
                )
            ):
                text += ". None validated"
        return Cause(
            reason="FieldValueInvalid",
            field="<nil>",
            message=f'Invalid value: "": "{field}" {text}',
        )
    raw = _value_at(stored, tuple(error.schema_path))
    value = _shown(raw)
    where = field or "<root>"
    if rest == "must be an integer or a string":
        rest = "is not of type integer,string"
    if rest == "null is not allowed here" and node is not None and node.get("type"):
        rest = f"is not of type {node['type']}"
    if rest.startswith("is not of type "):
        # kube-openapi shows the value's type, not the value; a string field with a format
        # names the format, and Go's type of a number.
        expected = rest.removeprefix("is not of type ")
        shown = f'"{_type_name(raw)}"'
        fmt = effective_format((node or {}).get("type"), (node or {}).get("format"))
        if fmt is not None and expected == "string" and isinstance(raw, int | float):
            expected = str((node or {}).get("format"))
            is_int = isinstance(raw, int) and not isinstance(raw, bool)
            shown = '"int64"' if is_int else '"float64"'
        text = f"must be of type {expected}: {shown}"
        return Cause(
            reason="FieldValueTypeInvalid",
            field=field,
            message=f"Invalid value: {shown}: {where} in body {text}",
        )
    if rest.startswith("must be of type "):  # a format
        return Cause(
            reason="FieldValueTypeInvalid",
            field=field,
            message=f"Invalid value: {value}: {where} in body {rest}: {value}",
        )
    boundary = _BOUNDARY.search(rest)
    if boundary is not None:
        return Cause(
            reason="FieldValueInvalid",
            field="<nil>",
            message=f'Invalid value: "": {boundary.group("key").capitalize()} boundary value '
            f"must be of type {boundary.group('type')} (default format) in {where}",
        )
    limit = _limit_cause(field, raw, rest, node or {})
    if limit is not None:
        return limit
    if rest.startswith(
        ("is not of type", "must be an integer or a string", "null is not", "must be of type")
    ):
        reason = "FieldValueTypeInvalid"
    elif rest.startswith("is not one of"):
        reason = "FieldValueNotSupported"
    else:
        reason = "FieldValueInvalid"
    return Cause(
        reason=reason, field=field, message=f"Invalid value: {value}: {where} in body {rest}"
    )


def _go_number(value: Any) -> str:
    """A bound as Go's ``%v`` prints a float64: ``10``, ``1.5``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _go_quoted(value: Any) -> str:
    """An enum member as the server lists it: always quoted (``"1"``, ``"a"``)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return json.dumps(text, ensure_ascii=False)


def _shown(value: Any) -> str:
    """A value as the server prints it: JSON, integral numbers as integers, Unicode as is."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        value = int(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _find_keyword(node: Mapping[str, Any], key: str) -> Any:
    """``node[key]``, or the first one in its allOf/anyOf/oneOf/not branches."""
    if key in node:
        return node[key]
    branches: list[Any] = [*(node.get("allOf") or ()), *(node.get("anyOf") or ())]
    branches += [*(node.get("oneOf") or ()), node.get("not")]
    for branch in branches:
        if isinstance(branch, Mapping):
            found = _find_keyword(branch, key)
            if found is not None:
                return found
    return None


_BOUNDARY = re.compile(
    r"the schema's (?P<key>minimum|maximum) \S+ is not of type (?P<type>\w+) \(default format\)"
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def _limit_cause(field: str, raw: Any, rest: str, node: Mapping[str, Any]) -> Cause | None:
    """A bound, length, count, pattern, enum or set failure in the server's words, if it is one."""
    where = field or "<root>"
    value = _shown(raw)
    found = _NUMBER.search(rest)
    limit_text = found.group(0) if found else "?"

    def invalid(text: str, shown: str = value) -> Cause:
        return Cause(
            reason="FieldValueInvalid",
            field=field,
            message=f"Invalid value: {shown}: {where} in body {text}",
        )

    def too_many() -> Cause:
        noun = "item" if limit_text == "1" else "items"
        return Cause(
            reason="FieldValueTooMany",
            field=field,
            message=f"Too many: {len(raw)}: must have at most {limit_text} {noun}",
        )

    def number(key: str) -> str:
        # The bound in the message is the one that failed (a branch's, maybe); an integer
        # value is compared with the bound converted to int64 (truncated), and shown so.
        bound: Any = float(limit_text) if found else _find_keyword(node, key)
        integral = (isinstance(raw, int) and not isinstance(raw, bool)) or (
            isinstance(raw, float) and raw.is_integer() and abs(raw) < 2**63
        )
        if integral and isinstance(bound, float) and key != "multipleOf":
            return str(int(bound))
        return _go_number(bound)

    if rest.startswith("must be a multiple of"):
        return invalid(f"should be a multiple of {number('multipleOf')}")
    if rest.startswith("must be less than"):
        return invalid(f"should be less than {number('maximum')}")
    if rest.startswith("must be greater than"):
        return invalid(f"should be greater than {number('minimum')}")
    if rest.endswith("characters"):
        if rest.startswith("must be at least"):
            return invalid(f"should be at least {limit_text} chars long")
        noun = "byte" if limit_text == "1" else "bytes"
        return Cause(
            reason="FieldValueTooLong",
            field=field,
            message=f"Too long: may not be more than {limit_text} {noun}",
        )
    if rest.startswith("must be at most") and not rest.endswith(("items", "keys")):
        return invalid(f"should be less than or equal to {number('maximum')}")
    if rest.startswith("must be at least") and not rest.endswith(("items", "keys")):
        return invalid(f"should be greater than or equal to {number('minimum')}")
    if rest.startswith("does not match pattern"):
        return invalid(f"should match '{_find_keyword(node, 'pattern')}'")
    if rest.startswith("must have at least") and rest.endswith("items"):
        return invalid(f"should have at least {limit_text} items", str(len(raw)))
    if rest.startswith("must have at least") and rest.endswith("keys"):
        return invalid(f"should have at least {limit_text} properties", str(len(raw)))
    if rest.startswith("must have at most") and rest.endswith("items"):
        return too_many()
    if rest.startswith("must have at most") and rest.endswith("keys"):
        return too_many()
    enum = _find_keyword(node, "enum")
    if rest.startswith("is not one of") and isinstance(enum, list):
        supported = ", ".join(_go_quoted(v) for v in enum)
        return Cause(
            reason="FieldValueNotSupported",
            field=field,
            message=f"Unsupported value: {value}: supported values: {supported}",
        )
    if rest.startswith("repeats") and "set list" in rest and isinstance(raw, list):
        for index, item in enumerate(raw):
            if item in raw[:index]:
                return Cause(
                    reason="FieldValueDuplicate",
                    field=f"{field}[{index}]",
                    message=f"Duplicate value: {_shown(item)}",
                )
    return None


# kube-openapi's string and number validators stop at their first failing check: a string
# too short is not also reported for its pattern. Each family, in checking order, with the
# keyword behind each message. Checks of allOf/anyOf branches are other validators.
_FIRST_ONLY = (
    (("Too long:", "maxLength"), ("should be at least", "minLength"), ("should match", "pattern")),
    (
        ("should be a multiple of", "multipleOf"),
        ("should be less than", "maximum"),
        ("should be greater than", "minimum"),
    ),
)


def _own_check(cause: Cause, node: Mapping[str, Any] | None, keyword: str) -> bool:
    """Whether ``cause`` comes from ``node``'s own ``keyword`` (not from a junctor branch)."""
    if node is None or keyword not in node:
        return False
    own = node[keyword]
    shown = {str(own), _go_number(own)}
    if isinstance(own, int | float) and not isinstance(own, bool):
        shown.add(str(int(own)))
    return any(f" {text} " in f"{cause.message} " or f"'{text}'" in cause.message for text in shown)


def _first_of_each_validator(
    causes: list[tuple[Cause, Mapping[str, Any] | None]],
) -> list[Cause]:
    """``causes`` with only the first failing own check of each validator family per field."""
    kept: list[Cause] = []
    first: dict[tuple[str, int], tuple[int, Cause]] = {}
    for cause, node in causes:
        family = next(
            (
                (i, rank)
                for i, checks in enumerate(_FIRST_ONLY)
                for rank, (text, keyword) in enumerate(checks)
                if text in cause.message and _own_check(cause, node, keyword)
            ),
            None,
        )
        if family is None:
            kept.append(cause)
            continue
        key = (cause.field, family[0])
        if key not in first or family[1] < first[key][0]:
            first[key] = (family[1], cause)
    return kept + [cause for _, cause in first.values()]


def _any_branch_passes(value: Any, branches: Any, error: StructuralError) -> bool:
    if not isinstance(branches, list):
        return True
    path = tuple(error.schema_path)
    return any(
        not validate_value(value, {"x-kubernetes-preserve-unknown-fields": True, **b}, path)
        for b in branches
        if isinstance(b, Mapping)
    )


_EMBEDDED = re.compile(r"^is an embedded resource without (?P<missing>.*)$")
_MAP_KEY = re.compile(r"^repeats the map key ")


def _error_causes(
    stored: JsonObject, error: StructuralError, node: Mapping[str, Any] | None
) -> list[Cause]:
    """The server's causes for one validation error (an embedded resource's are several)."""
    match = _MESSAGE.match(error.message)
    rest = match.group("rest") if match else error.message
    path = tuple(error.schema_path)
    field = _field(path)
    embedded = _EMBEDDED.match(rest)
    if embedded is not None:
        return [
            Cause(reason="FieldValueRequired", field=f"{field}.{key}", message="Required value")
            for key in embedded.group("missing").split(" and ")
        ]
    raw = _value_at(stored, path)
    keys = (node or {}).get("x-kubernetes-list-map-keys")
    if _MAP_KEY.match(rest) and isinstance(raw, list) and isinstance(keys, list):
        seen: list[Any] = []
        for index, item in enumerate(raw):
            ident = {k: item.get(k) for k in keys if isinstance(item, Mapping) and k in item}
            if ident in seen:
                shown = json.dumps(ident, separators=(",", ":"), ensure_ascii=False)
                return [
                    Cause(
                        reason="FieldValueDuplicate",
                        field=f"{field}[{index}]",
                        message=f"Duplicate value: {shown}",
                    )
                ]
            seen.append(ident)
    return [_cause(stored, error, node)]


def schema_causes(stored: JsonObject, schema: Mapping[str, Any]) -> list[Cause]:
    """The 422 causes the server answers for ``stored`` (already pruned and defaulted).

    One per problem (a failed anyOf/oneOf adds its closest branch's), sorted by field path
    and message as the server sorts them; a junctor's cause is on the field ``<nil>``, its
    path in the message, as kube-openapi reports it. Empty when valid.

    Patterns (and the ``hostname`` format) are checked with RE2, the server's engine, from
    the ``tools`` extra. An operator's unit tests may run on the runtime alone (``pip
    install setpoint`` plus pytest): then those checks are left out and a warning, once
    per process, names what was not checked and the extra to install; every other check
    still runs.
    """
    try:
        return _schema_causes(stored, schema)
    except ExtraNotInstalled as missing:
        warn_without_re2("schema patterns and the hostname format", str(missing))
        return _schema_causes(stored, _without_regex_checks(schema))


@functools.cache
def warn_without_re2(what: str, reason: str) -> None:
    """Say once per process (and per ``what``) that RE2's checks are left out, and why."""
    log.warning("FakeClient: %s not checked: %s", what, reason)


_NODE_LISTS = ("allOf", "anyOf", "oneOf")
_NODE_VALUES = ("items", "additionalProperties", "not")


def _without_regex_checks(node: Any) -> Any:
    """``node`` without the keywords only RE2 checks: ``pattern``, ``format: hostname``."""
    if not isinstance(node, Mapping):
        return node
    out = {
        key: value
        for key, value in node.items()
        if key != "pattern" and not (key == "format" and value == "hostname")
    }
    for key in ("properties", "patternProperties"):
        if isinstance(out.get(key), Mapping):
            out[key] = {name: _without_regex_checks(sub) for name, sub in out[key].items()}
    for key in _NODE_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_without_regex_checks(sub) for sub in out[key]]
    for key in _NODE_VALUES:
        if key in out:
            out[key] = _without_regex_checks(out[key])
    return out


def _schema_causes(stored: JsonObject, schema: Mapping[str, Any]) -> list[Cause]:
    causes: list[tuple[Cause, Mapping[str, Any] | None]] = []
    for error in validate_object(stored, schema):
        node = _node_at(schema, tuple(error.schema_path))
        causes += [(cause, node) for cause in _error_causes(stored, error, node)]
        causes += [(cause, None) for cause in _best_branch_causes(stored, schema, error)]
    # The server reports an error once, though a nested junctor may meet it twice.
    unique = list({(c.field, c.reason, c.message): (c, n) for c, n in causes}.values())
    return sorted(_first_of_each_validator(unique), key=lambda c: (c.field, c.message))


def _type_name(value: Any) -> str:
    """The JSON type of ``value`` as kube-openapi names it in a type error."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _node_at(schema: Mapping[str, Any], path: tuple[Any, ...]) -> Mapping[str, Any] | None:
    node: Any = schema
    for part in path:
        if not isinstance(node, Mapping):
            return None
        if isinstance(part, int):
            node = node.get("items")
            continue
        properties = node.get("properties")
        if isinstance(properties, Mapping) and part in properties:
            node = properties[part]
        else:
            node = node.get("additionalProperties")
    return node if isinstance(node, Mapping) else None


def _best_branch_causes(
    stored: JsonObject, schema: Mapping[str, Any], error: StructuralError
) -> list[Cause]:
    """The branch errors the server adds to a failed junctor.

    For an allOf, every failing branch's (the validator reports the first). For an anyOf
    or oneOf that no branch satisfied, kube-openapi merges the failures of the branch that
    passed the most checks; the fake takes the first branch with the fewest errors (the
    same branch in the cases the parity suite holds it to).
    """
    match = _MESSAGE.match(error.message)
    rest = match.group("rest") if match else ""
    one_of = _ONE_OF.match(rest)
    if one_of is not None and one_of.group("valid") == "0":
        key = "oneOf"
    elif rest == "must validate at least one schema (anyOf)":
        key = "anyOf"
    elif rest == "must validate all the schemas (allOf)":
        key = "allOf"
    else:
        return []
    path = tuple(error.schema_path)
    node = _node_at(schema, path)
    branches = node.get(key) if node is not None else None
    if not isinstance(branches, list) or not branches:
        return []
    value = _value_at(stored, path)
    # A branch holds value validations only: the fields it does not name are not unknown.
    failures = [
        (b, validate_value(value, {"x-kubernetes-preserve-unknown-fields": True, **b}, path))
        for b in branches
        if isinstance(b, Mapping)
    ]
    if not failures:
        return []
    chosen = failures if key == "allOf" else [min(failures, key=lambda f: len(f[1]))]
    return [
        cause
        for branch, errors in chosen
        for e in errors
        for cause in _error_causes(stored, e, _node_at(branch, tuple(e.schema_path)[len(path) :]))
    ]
