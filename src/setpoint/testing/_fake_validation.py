"""The fake API server's validation of what a write may store (the server's 400s and 422s).

kube-apiserver decodes the body into typed structs first (a label that is not a string is
a 400: the JSON cannot be decoded) and then validates ObjectMeta (names, label and
annotation keys and values, owner references: 422 Invalid with one cause per problem).
These functions implement both steps for the fields operators write; schema validation of
custom resources is not implemented (see the FakeClient docstring).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from setpoint.api.meta import JsonObject
from setpoint.api.validation import (
    DNS1123_LABEL_MAX_LENGTH,
    DNS1123_SUBDOMAIN_MAX_LENGTH,
    is_dns1123_label,
    is_dns1123_subdomain,
    label_value_problem,
    qualified_name_problem,
)
from setpoint.client.errors import Cause
from setpoint.testing._fake_errors import api_error
from setpoint.testing._fake_kinds import KindRules

__all__ = [
    "check_decodable",
    "finalizers_added_while_deleting",
    "metadata_problems",
    "normalize_metadata",
]


def check_decodable(rules: KindRules, obj: JsonObject, *, method: str, path: str) -> None:
    """Refuse metadata the server could not even decode into ObjectMeta (400 BadRequest)."""
    meta = obj.get("metadata") or {}
    gvk = rules.info.gvk
    prefix = f'{gvk.kind} in version "{gvk.version}" cannot be handled as a {gvk.kind}: json: '
    for field_name in ("labels", "annotations"):
        values = meta.get(field_name)
        if values is not None and (
            not isinstance(values, Mapping) or not all(isinstance(v, str) for v in values.values())
        ):
            raise api_error(
                400,
                "BadRequest",
                prefix + "cannot unmarshal into Go struct field ObjectMeta.metadata."
                f"{field_name} of type map[string]string",
                method=method,
                path=path,
            )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        raise api_error(
            400,
            "BadRequest",
            prefix + "cannot unmarshal into Go struct field ObjectMeta.metadata.finalizers "
            "of type []string",
            method=method,
            path=path,
        )


def metadata_problems(rules: KindRules, obj: JsonObject, *, creating: bool) -> list[Cause]:
    """What the server's ObjectMeta validation refuses (422 causes); empty when valid.

    The name is checked on create only (it cannot change later): a DNS-1123 label for
    Namespaces, a DNS-1123 subdomain otherwise. Label and annotation keys, label values and
    the required fields of owner references are checked on every write.
    """
    meta = obj.get("metadata") or {}
    problems: list[Cause] = []
    name = meta.get("name") or ""
    if creating and name:
        label_only = (rules.info.gvk.group, rules.info.gvk.kind) == ("", "Namespace")
        valid = is_dns1123_label if label_only else is_dns1123_subdomain
        limit = DNS1123_LABEL_MAX_LENGTH if label_only else DNS1123_SUBDOMAIN_MAX_LENGTH
        what = "RFC 1123 label" if label_only else "RFC 1123 subdomain"
        if label_only and "." in name:
            problems.append(
                Cause(
                    reason="FieldValueInvalid",
                    field="metadata.name",
                    message=f'Invalid value: "{name}": must not contain dots',
                )
            )
        elif not valid(name):
            problems.append(
                Cause(
                    reason="FieldValueInvalid",
                    field="metadata.name",
                    message=f'Invalid value: "{name}": a lowercase {what} must consist of lower '
                    "case alphanumeric characters, '-'"
                    + ("" if label_only else " or '.'")
                    + f", and must start and end with an alphanumeric character (at most "
                    f"{limit} characters)",
                )
            )
    for field_name in ("labels", "annotations"):
        for key, value in (meta.get(field_name) or {}).items():
            problem = qualified_name_problem(str(key))
            if problem is not None:
                problems.append(
                    Cause(
                        reason="FieldValueInvalid",
                        field=f"metadata.{field_name}",
                        message=f'Invalid value: "{key}": {problem}',
                    )
                )
            value_problem = label_value_problem(value) if field_name == "labels" else None
            if value_problem is not None:
                problems.append(
                    Cause(
                        reason="FieldValueInvalid",
                        field="metadata.labels",
                        message=f'Invalid value: "{value}": {value_problem}',
                    )
                )
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not (isinstance(ref, Mapping) and ref.get(key)):
                problems.append(
                    Cause(
                        reason="FieldValueRequired",
                        field=f"metadata.ownerReferences[{index}].{key}",
                        message="Required value: must not be empty",
                    )
                )
    controllers = [
        f"{ref.get('kind')}/{ref.get('name')}"
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, Mapping) and ref.get("controller") is True
    ]
    if len(controllers) > 1:
        # The server's message (apimachinery's ValidateOwnerReferences), without its dump
        # of the references.
        problems.append(
            Cause(
                reason="FieldValueInvalid",
                field="metadata.ownerReferences",
                message="Invalid value: Only one reference can have Controller set to true. Found "
                f'"true" in references for {controllers[0]} and {controllers[1]}',
            )
        )
    return problems


def normalize_metadata(meta: dict[str, Any]) -> None:
    """Drop emptied maps and lists from ObjectMeta, as the server stores them (omitempty)."""
    # ObjectMeta's fields are omitempty, so every kind (custom ones too) stores an emptied
    # labels map or finalizers list as absent.
    for key in ("labels", "annotations", "finalizers", "ownerReferences", "generateName"):
        if key in meta and not meta[key]:
            del meta[key]


def finalizers_added_while_deleting(
    old_meta: Mapping[str, Any], meta: Mapping[str, Any]
) -> list[Cause]:
    """The 422 cause for finalizers added to an object that is being deleted, if any."""
    if not old_meta.get("deletionTimestamp"):
        return []
    added = [f for f in meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])]
    if not added:
        return []
    quoted = ", ".join(f'"{f}"' for f in added)
    return [
        Cause(
            reason="FieldValueForbidden",
            field="metadata.finalizers",
            message="Forbidden: no new finalizers can be added if the object is being "
            f"deleted, found new finalizers []string{{{quoted}}}",
        )
    ]
