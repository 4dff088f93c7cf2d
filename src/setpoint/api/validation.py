"""Kubernetes' validation rules, in one place, as apimachinery's ``util/validation`` has them.

Pure data and pure functions (regular expressions and limits), so every layer can check a
name, a label or a condition the way the API server will, and say why, before a request is
sent.

Names:

- DNS-1123 label (at most 63): namespaces (:func:`is_dns1123_label`);
- DNS-1123 subdomain (at most 253): object names, API groups, key prefixes
  (:func:`is_dns1123_subdomain`);
- DNS-1035 label (at most 63): API versions, resource plurals (:func:`is_dns1035_label`);
- qualified name (``[prefix/]name``): label and annotation keys, finalizers
  (:func:`qualified_name_problem`, :func:`is_qualified_name`);
- label value (at most 63): :func:`label_value_problem`.

The ``*_problem`` functions return the API server's own wording (or ``None`` when the value
is valid), so a fake can answer as the server does; callers that address a user put that
reason in a message naming the field and the fix.
"""

from __future__ import annotations

import re
from typing import Final, Literal, TypeAlias

__all__ = [
    "CONDITION_MESSAGE_MAX_LENGTH",
    "CONDITION_REASON_MAX_LENGTH",
    "CONDITION_REASON_PATTERN",
    "CONDITION_TYPE_MAX_LENGTH",
    "CONDITION_TYPE_PATTERN",
    "DNS1035_LABEL_MAX_LENGTH",
    "DNS1123_LABEL_MAX_LENGTH",
    "DNS1123_SUBDOMAIN_MAX_LENGTH",
    "LABEL_VALUE_MAX_LENGTH",
    "QUALIFIED_NAME_MAX_LENGTH",
    "ConditionStatus",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_qualified_name",
    "label_value_problem",
    "qualified_name_problem",
]

# --------------------------------------------------------------------------- names

DNS1123_LABEL_MAX_LENGTH: Final = 63
"""Longest DNS-1123 label (a namespace name)."""
DNS1123_SUBDOMAIN_MAX_LENGTH: Final = 253
"""Longest DNS-1123 subdomain (most object names, API groups, label key prefixes)."""
DNS1035_LABEL_MAX_LENGTH: Final = 63
"""Longest DNS-1035 label (an API version, a resource's plural)."""
QUALIFIED_NAME_MAX_LENGTH: Final = 63
"""Longest name part of a qualified name (after the optional ``prefix/``)."""
LABEL_VALUE_MAX_LENGTH: Final = 63
"""Longest label value."""

_DNS1123_LABEL_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL_FMT}(\.{_DNS1123_LABEL_FMT})*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME_FMT = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE = re.compile(rf"({_QUALIFIED_NAME_FMT})?")


def is_dns1123_label(value: str) -> bool:
    """Lower-case letters, digits and ``-``, alphanumeric at both ends, at most 63."""
    return len(value) <= DNS1123_LABEL_MAX_LENGTH and bool(_DNS1123_LABEL.fullmatch(value))


def is_dns1123_subdomain(value: str) -> bool:
    """DNS-1123 labels joined by ``.``, at most 253 characters (``example.com``)."""
    return len(value) <= DNS1123_SUBDOMAIN_MAX_LENGTH and bool(_DNS1123_SUBDOMAIN.fullmatch(value))


def is_dns1035_label(value: str) -> bool:
    """A DNS-1123 label that starts with a letter (``v1``, ``widgets``), at most 63."""
    return len(value) <= DNS1035_LABEL_MAX_LENGTH and bool(_DNS1035_LABEL.fullmatch(value))


def qualified_name_problem(value: str) -> str | None:
    """Why ``value`` is not a qualified name (``[prefix/]name``), in the server's words.

    Qualified names are label and annotation keys and finalizer names: an optional DNS-1123
    subdomain prefix and ``/``, then at most 63 letters, digits, ``-``, ``_`` or ``.``,
    alphanumeric at both ends. ``None`` when it is one.
    """
    prefix, slash, name = value.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    if not name:
        return "name part must be non-empty"
    if len(name) > QUALIFIED_NAME_MAX_LENGTH:
        return f"name part must be no more than {QUALIFIED_NAME_MAX_LENGTH} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            f"'123-abc', regex used for validation is '{_QUALIFIED_NAME_FMT}')"
        )
    return None


def is_qualified_name(value: str) -> bool:
    """Whether ``value`` is a qualified name (see :func:`qualified_name_problem`)."""
    return qualified_name_problem(value) is None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, in the server's words; ``None`` when it is."""
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        return f"must be no more than {LABEL_VALUE_MAX_LENGTH} characters"
    if not _LABEL_VALUE.fullmatch(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
            f"'({_QUALIFIED_NAME_FMT})?')"
        )
    return None


# --------------------------------------------------------------------------- conditions

ConditionStatus: TypeAlias = Literal["True", "False", "Unknown"]
"""The three values of ``condition.status`` (strings, as the API defines them)."""

# The API server's validation of metav1.Condition (apimachinery/pkg/apis/meta/v1/types.go
# kubebuilder markers, enforced by ValidateConditions and by CRD schemas built from it).
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_TYPE_MAX_LENGTH = 316
CONDITION_REASON_MAX_LENGTH = 1024
CONDITION_MESSAGE_MAX_LENGTH = 32768
