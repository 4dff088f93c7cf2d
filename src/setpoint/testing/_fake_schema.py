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
   FieldValueTypeInvalid, FieldValueRequired, FieldValueNotSupported); the messages are
   setpoint's wording of the same rule, not the server's text.

Duplicate fields in a JSON body are refused or warned about by the server too; the fake
receives parsed objects, in which duplicates are already gone, so it cannot see them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from setpoint.api.meta import JsonObject
from setpoint.client.errors import Cause
from setpoint.client.server_warnings import FieldValidation, record_warning
from setpoint.crd.errors import StructuralError
from setpoint.crd.objects import unknown_fields, validate_object
from setpoint.testing._fake_errors import api_error
from setpoint.testing._fake_kinds import KindRules

__all__ = [
    "OBJECT_META_FIELDS",
    "check_apply",
    "check_fields",
    "schema_causes",
    "undeclared_fields",
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


def _cause(stored: JsonObject, error: StructuralError) -> Cause:
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
    value = json.dumps(_value_at(stored, tuple(error.schema_path)), sort_keys=True)
    if rest.startswith(("is not of type", "must be an integer or a string", "null is not")):
        reason = "FieldValueTypeInvalid"
    elif rest.startswith("is not one of"):
        reason = "FieldValueNotSupported"
    else:
        reason = "FieldValueInvalid"
    where = field or "<root>"
    return Cause(
        reason=reason, field=field, message=f"Invalid value: {value}: {where} in body {rest}"
    )


def schema_causes(stored: JsonObject, schema: Mapping[str, Any]) -> list[Cause]:
    """The 422 causes the server answers for ``stored`` (already pruned and defaulted).

    One per problem, sorted by field path as the server sorts them; empty when valid.
    """
    causes = [_cause(stored, e) for e in validate_object(stored, schema)]
    return sorted(causes, key=lambda c: c.field)
