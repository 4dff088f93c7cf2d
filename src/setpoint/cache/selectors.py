r"""Label and field selectors, parsed and evaluated locally, as the API server does.

The cache answers ``list(labels=..., fields=...)`` from memory, so it must understand the
same selector strings the server does:

- Label selectors (``k8s.io/apimachinery/pkg/labels``): comma-separated requirements, each
  one of ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``,
  ``key`` (exists), ``!key`` (does not exist), ``key>5`` / ``key<5`` (integer comparison).
  A requirement on a missing label: ``!=`` and ``notin`` match, everything else does not.
- Field selectors (``k8s.io/apimachinery/pkg/fields``): comma-separated ``path=value``,
  ``path==value`` or ``path!=value``; ``\,``, ``\=`` and ``\\`` escape those characters
  in values. The server supports a few paths per kind (``metadata.name``,
  ``metadata.namespace``, ``status.phase`` for Pods, ...); the cache supports any dotted
  path into the object, comparing the field's JSON value rendered as text (``true``,
  ``3``), with a missing field reading as ``""``.

A mapping ``{"app": "web"}`` is accepted wherever a selector string is, meaning equality on
every pair.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from setpoint.api.errors import SetpointError
from setpoint.api.meta import labels_of

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelRequirement",
    "LabelSelector",
    "SelectorError",
    "field_value",
]

LabelOperator = Literal["=", "!=", "in", "notin", "exists", "!", ">", "<"]


class SelectorError(SetpointError, ValueError):
    """A selector string could not be parsed; the message points at the offending part."""


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One requirement of a label selector: ``key <operator> values``."""

    key: str
    operator: LabelOperator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement."""
        op = self.operator
        present = self.key in labels
        if op == "exists":
            return present
        if op == "!":
            return not present
        if op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        value = labels[self.key]
        if op in ("=", "in"):
            return value in self.values
        # ">" and "<": both sides must be integers, as in apimachinery.
        try:
            number = int(value)
        except ValueError:
            return False
        (bound,) = self.values
        return number > int(bound) if op == ">" else number < int(bound)


_KEY_RE: Final = re.compile(
    r"^([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
)
_VALUE_RE: Final = re.compile(r"^([a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?)?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( ... )``."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"label selector {text!r}: unbalanced ')' at {index}")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise SelectorError(f"label selector {text!r}: unclosed '('")
    parts.append(text[start:])
    return parts


def _check_key(key: str, text: str) -> str:
    if not key or len(key) > 317 or not _KEY_RE.match(key):
        raise SelectorError(f"label selector {text!r}: {key!r} is not a valid label key")
    return key


def _check_value(value: str, text: str) -> str:
    if len(value) > 63 or not _VALUE_RE.match(value):
        raise SelectorError(f"label selector {text!r}: {value!r} is not a valid label value")
    return value


_SET_RE: Final = re.compile(
    r"^\s*(?P<key>[^\s!=<>()]+)\s+(?P<op>in|notin)\s*\((?P<values>.*)\)\s*$"
)
_CMP_RE: Final = re.compile(r"^\s*(?P<key>[^\s!=<>()]+)\s*(?P<op>==|=|!=|>|<)\s*(?P<value>.*?)\s*$")


def _parse_requirement(part: str, text: str) -> LabelRequirement:
    stripped = part.strip()
    if not stripped:
        raise SelectorError(f"label selector {text!r}: empty requirement")
    match = _SET_RE.match(stripped)
    if match:
        values = [v.strip() for v in match["values"].split(",")]
        if values == [""]:
            raise SelectorError(
                f"label selector {text!r}: {match['op']!r} needs at least one value"
            )
        return LabelRequirement(
            _check_key(match["key"], text),
            "in" if match["op"] == "in" else "notin",
            frozenset(_check_value(v, text) for v in values),
        )
    match = _CMP_RE.match(stripped)
    if match:
        op = match["op"]
        value = match["value"]
        if op in (">", "<"):
            try:
                int(value)
            except ValueError:
                raise SelectorError(
                    f"label selector {text!r}: {op!r} needs an integer, not {value!r}"
                ) from None
            return LabelRequirement(
                _check_key(match["key"], text), ">" if op == ">" else "<", frozenset({value})
            )
        return LabelRequirement(
            _check_key(match["key"], text),
            "!=" if op == "!=" else "=",
            frozenset({_check_value(value, text)}),
        )
    if stripped.startswith("!"):
        return LabelRequirement(_check_key(stripped[1:].strip(), text), "!")
    return LabelRequirement(_check_key(stripped, text), "exists")


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector: an object matches when it meets every requirement.

    An empty selector matches everything.
    """

    requirements: tuple[LabelRequirement, ...] = ()

    @classmethod
    def parse(cls, selector: str | Mapping[str, str] | None) -> LabelSelector:
        """Parse a selector string or an equality mapping (``None`` or ``""``: match all).

        Raises:
            SelectorError: naming the requirement that is malformed.

        """
        if selector is None:
            return cls()
        if isinstance(selector, Mapping):
            text = ",".join(f"{k}={v}" for k, v in selector.items())
            return cls(
                tuple(
                    LabelRequirement(_check_key(k, text), "=", frozenset({_check_value(v, text)}))
                    for k, v in sorted(selector.items())
                )
            )
        if not selector.strip():
            return cls()
        return cls(tuple(_parse_requirement(p, selector) for p in _split_top_level(selector)))

    @property
    def empty(self) -> bool:
        """Whether this selector matches every object."""
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies every requirement."""
        return all(r.matches(labels) for r in self.requirements)

    def matches_object(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's ``metadata.labels`` satisfy every requirement."""
        return not self.requirements or self.matches(labels_of(obj))

    def equality_pairs(self) -> dict[str, str]:
        """The ``key=value`` requirements, usable for an index lookup."""
        return {r.key: next(iter(r.values)) for r in self.requirements if r.operator == "="}

    def __str__(self) -> str:
        out = []
        for r in self.requirements:
            values = sorted(r.values)
            if r.operator == "exists":
                out.append(r.key)
            elif r.operator == "!":
                out.append(f"!{r.key}")
            elif r.operator in ("in", "notin"):
                out.append(f"{r.key} {r.operator} ({','.join(values)})")
            else:
                out.append(f"{r.key}{r.operator}{values[0]}")
        return ",".join(out)


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """One requirement of a field selector: the field at ``path`` equals (or not) ``value``."""

    path: str
    value: str
    negated: bool = False

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` satisfies this requirement."""
        return (field_value(obj, self.path) == self.value) != self.negated


def _unescape_field_value(value: str, text: str) -> str:
    out = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise SelectorError(
                    f"field selector {text!r}: invalid escape '\\{char}' (only \\\\, \\, and "
                    "\\= are allowed)"
                )
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            out.append(char)
    if escaped:
        raise SelectorError(f"field selector {text!r}: a value ends with a lone backslash")
    return "".join(out)


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append("\\" + char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: an object matches when it meets every requirement."""

    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, selector: str | Mapping[str, str] | None) -> FieldSelector:
        """Parse a selector string or an equality mapping (``None`` or ``""``: match all).

        Raises:
            SelectorError: naming the requirement that is malformed.

        """
        if selector is None:
            return cls()
        if isinstance(selector, Mapping):
            return cls(tuple(FieldRequirement(k, str(v)) for k, v in sorted(selector.items())))
        if not selector.strip():
            return cls()
        requirements = []
        for part in _split_unescaped(selector, ","):
            for op, negated in (("!=", True), ("==", False), ("=", False)):
                index = _find_unescaped(part, op)
                if index >= 0:
                    path = part[:index].strip()
                    if not path:
                        raise SelectorError(f"field selector {selector!r}: {part!r} has no field")
                    raw = part[index + len(op) :]
                    requirements.append(
                        FieldRequirement(path, _unescape_field_value(raw, selector), negated)
                    )
                    break
            else:
                raise SelectorError(
                    f"field selector {selector!r}: {part!r} is not 'field=value', "
                    "'field==value' or 'field!=value'"
                )
        return cls(tuple(requirements))

    @property
    def empty(self) -> bool:
        """Whether this selector matches every object."""
        return not self.requirements

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` satisfies every requirement."""
        return all(r.matches(obj) for r in self.requirements)

    def __str__(self) -> str:
        def escape(value: str) -> str:
            return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")

        return ",".join(
            f"{r.path}{'!=' if r.negated else '='}{escape(r.value)}" for r in self.requirements
        )


def _find_unescaped(text: str, needle: str) -> int:
    index = 0
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text.startswith(needle, index):
            return index
        index += 1
    return -1


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value at a dotted ``path`` as a field selector compares it (``""`` when missing).

    Strings are returned as they are, booleans as ``true``/``false``, numbers in their JSON
    form; objects and lists cannot be selected on and read as ``""``.
    """
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
        if current is None:
            return ""
    if isinstance(current, str):
        return current
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, int | float):
        return str(current)
    return ""
