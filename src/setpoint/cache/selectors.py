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
every pair. :class:`LabelMatcher` and :class:`FieldMatcher` are the parsed forms; the typed
``LabelSelector`` users put in specs is :class:`setpoint.api.labelselector.LabelSelector`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from setpoint.api.errors import SetpointError
from setpoint.api.meta import labels_of
from setpoint.api.validation import label_value_problem, qualified_name_problem

__all__ = [
    "FieldMatcher",
    "FieldRequirement",
    "LabelMatcher",
    "LabelRequirement",
    "SelectorError",
    "field_value",
]

LabelOperator = Literal["=", "!=", "in", "notin", "exists", "!", ">", "<"]


class SelectorError(SetpointError, ValueError):
    """A selector the API server would refuse; the message names the selector and the part.

    ``reason`` is the API server's own wording (what a 400 Bad Request says), without the
    selector in front: the testing fake answers with it.
    """

    def __init__(self, kind: str, selector: str, reason: str) -> None:
        super().__init__(f"{kind} selector {selector!r}: {reason}")
        self.reason = reason
        """The API server's wording of the problem."""

    __module__ = "setpoint"


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
        # ">" and "<": both sides must be 64-bit decimal integers, as Go's
        # strconv.ParseInt(value, 10, 64) reads them in apimachinery.
        number = _parse_int64(value)
        (bound,) = self.values
        limit = _parse_int64(bound)
        if number is None or limit is None:
            return False
        return number > limit if op == ">" else number < limit


_INT64: Final = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it, or ``None``.

    ASCII digits with an optional sign, within the 64-bit range: no ``1_000``, no spaces,
    no other scripts' digits and no 20-digit values, all of which Python's ``int`` accepts
    and the API server does not (the cache and the server would then select differently).
    """
    if not _INT64.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


# Characters that end an identifier in the API server's selector lexer.
_SPECIAL: Final = frozenset("!=(),<> \t\n")
_OPERATORS: Final = ("==", "!=", "!", "=", "(", ")", ",", "<", ">")


def _tokens(text: str) -> list[str]:
    """The API server's lexer (apimachinery ``labels.Lexer``): identifiers and operators."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in " \t\n":
            i += 1
        elif text.startswith(("==", "!="), i):
            tokens.append(text[i : i + 2])
            i += 2
        elif ch in "!=(),<>":
            tokens.append(ch)
            i += 1
        else:
            j = i
            while j < len(text) and text[j] not in _SPECIAL:
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


class _LabelParser:
    """apimachinery's label selector parser, with its error messages."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def fail(self, reason: str) -> SelectorError:
        return SelectorError("label", self.text, reason)

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def parse(self) -> tuple[LabelRequirement, ...]:
        requirements: list[LabelRequirement] = []
        if self.peek() is None:
            return ()
        while True:
            requirements.append(self.requirement())
            token = self.next()
            if token is None:
                return tuple(requirements)
            if token != ",":
                raise self.fail(f"found '{token}', expected: ',' or 'end of string'")

    def requirement(self) -> LabelRequirement:
        token = self.next()
        if token == "!":
            key = self.next()
            if not _is_identifier(key):
                raise self.fail(
                    f"unable to parse requirement: found '{_describe(key)}', expected: identifier"
                )
            return LabelRequirement(self.key(key), "!")
        if not _is_identifier(token):
            raise self.fail(
                f"unable to parse requirement: found '{_describe(token)}', expected: "
                "!, identifier, or 'end of string'"
            )
        key = self.key(token)
        op = self.peek()
        if op is None or op == ",":
            return LabelRequirement(key, "exists")
        self.next()
        if op in ("=", "=="):
            return LabelRequirement(key, "=", frozenset({self.single_value()}))
        if op == "!=":
            return LabelRequirement(key, "!=", frozenset({self.single_value()}))
        if op in (">", "<"):
            value = self.single_value()
            if _parse_int64(value) is None:
                raise self.fail(
                    "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                    f"an integer: {value!r}"
                )
            return LabelRequirement(key, ">" if op == ">" else "<", frozenset({value}))
        if op in ("in", "notin"):
            return LabelRequirement(key, "in" if op == "in" else "notin", self.value_set())
        raise self.fail(
            f"unable to parse requirement: found '{op}', expected: in, notin, =, ==, !=, gt, lt"
        )

    def value_set(self) -> frozenset[str]:
        opening = self.next()
        if opening != "(":
            raise self.fail(
                f"unable to parse requirement: found '{_describe(opening)}' expected: '('"
            )
        values: list[str] = []
        if self.peek() == ")":
            # The server reads "()" as the set holding the empty string.
            self.next()
            return frozenset({""})
        while True:
            item = self.peek()
            if item == ")":
                self.next()
                values.append("")
                return frozenset(values)
            if item == ",":
                self.next()
                values.append("")
                continue
            if not _is_identifier(item):
                raise self.fail(
                    f"unable to parse requirement: found '{_describe(item)}', expected: ',' or ')'"
                )
            self.next()
            assert item is not None
            values.append(self.value(item))
            after = self.next()
            if after == ")":
                return frozenset(values)
            if after != ",":
                raise self.fail(
                    f"unable to parse requirement: found '{_describe(after)}', expected: ',' or ')'"
                )

    def single_value(self) -> str:
        token = self.peek()
        if token is None or token == ",":
            return ""
        if not _is_identifier(token):
            raise self.fail(f"found '{token}', expected: identifier")
        self.next()
        return self.value(token)

    def key(self, key: str | None) -> str:
        assert key is not None
        problem = qualified_name_problem(key)
        if problem is not None:
            raise self.fail(f"unable to parse requirement: invalid label key {key!r}: {problem}")
        return key

    def value(self, value: str) -> str:
        problem = label_value_problem(value)
        if problem is not None:
            raise self.fail(
                f"unable to parse requirement: invalid label value: {value!r}: {problem}"
            )
        return value


def _is_identifier(token: str | None) -> bool:
    return token is not None and token not in _OPERATORS


def _describe(token: str | None) -> str:
    return "end of string" if token is None else token


@dataclass(frozen=True, slots=True)
class LabelMatcher:
    """A label selector string, parsed to match objects in memory.

    An object matches when it meets every requirement; an empty selector matches
    everything. Not the spec model users declare (:class:`setpoint.LabelSelector`,
    ``metav1.LabelSelector``): that one renders the string this parses
    (``LabelMatcher.parse(spec.selector.to_selector())``).
    """

    requirements: tuple[LabelRequirement, ...] = ()

    @classmethod
    def parse(cls, selector: str | Mapping[str, str] | None) -> LabelMatcher:
        """Parse a selector string or an equality mapping (``None`` or ``""``: match all).

        Raises:
            SelectorError: naming the requirement that is malformed.

        """
        if selector is None:
            return cls()
        if isinstance(selector, Mapping):
            parser = _LabelParser(",".join(f"{k}={v}" for k, v in selector.items()))
            return cls(
                tuple(
                    LabelRequirement(parser.key(k), "=", frozenset({parser.value(v)}))
                    for k, v in sorted(selector.items())
                )
            )
        return cls(_LabelParser(selector).parse())

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
                    "field",
                    text,
                    f"invalid field selector: invalid escape sequence: '\\{char}' (only \\\\, "
                    "\\, and \\= are allowed)",
                )
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        else:
            out.append(char)
    if escaped:
        raise SelectorError(
            "field", text, "invalid field selector: a value ends with a lone backslash"
        )
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
class FieldMatcher:
    """A field selector string, parsed to match objects in memory.

    An object matches when it meets every requirement; an empty selector matches everything.
    """

    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, selector: str | Mapping[str, str] | None) -> FieldMatcher:
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
            if not part.strip():
                continue  # the server skips empty terms
            for op, negated in (("!=", True), ("==", False), ("=", False)):
                index = _find_unescaped(part, op)
                if index >= 0:
                    path = part[:index].strip()
                    if not path:
                        break
                    raw = part[index + len(op) :]
                    requirements.append(
                        FieldRequirement(path, _unescape_field_value(raw, selector), negated)
                    )
                    break
            else:
                path = ""
            if not path:
                raise SelectorError(
                    "field",
                    selector,
                    f"invalid selector: '{selector}'; can't understand '{part.strip()}' (use "
                    "'field=value', 'field==value' or 'field!=value')",
                )
        return cls(tuple(requirements))

    def require_fields(self, supported: frozenset[str], *, custom: bool) -> FieldMatcher:
        """Return the selector itself when the server selects on every path it names.

        ``custom`` picks the server's wording: custom resources answer ``field label not
        supported: X``, built-in kinds name the fields they do support.

        Raises:
            SelectorError: a field outside ``supported``.

        """
        for requirement in self.requirements:
            if requirement.path not in supported:
                if custom:
                    reason = f"field label not supported: {requirement.path}"
                else:
                    names = ", ".join(f'"{p}"' for p in sorted(supported))
                    reason = f'"{requirement.path}" is not a known field selector: only {names}'
                raise SelectorError("field", str(self), reason)
        return self

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
