"""Label and field selectors for the fake client, parsed and matched as the API server does.

Label selectors accept the full syntax of ``k8s.io/apimachinery/pkg/labels``:
``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)``,
``key notin (a,b)``, ``key`` (exists), ``!key`` (does not exist) and the
integer comparisons ``key>1`` / ``key<1``, joined by commas (AND). A mapping
means equality on every entry. A malformed selector raises
:class:`SelectorError`, which the fake answers as the server does: 400 Bad
Request with the parser's complaint.

Semantics worth knowing (the real server behaves the same way):

- ``key!=value`` and ``key notin (...)`` match objects *without* the label.
- ``key=`` matches only objects whose label is present and empty.
- ``key in ()`` means ``key in ("")``: only objects whose label is present and empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "FieldSelector",
    "LabelSelector",
    "SelectorError",
    "parse_field_selector",
    "parse_label_selector",
]

Operator = Literal["=", "!=", "in", "notin", "exists", "!", ">", "<"]

# Label key: optional DNS-subdomain prefix and a name part of at most 63 characters.
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

# Characters that end an identifier in the server's selector lexer.
_SPECIAL = set("!=(),<> \t\n")


class SelectorError(ValueError):
    """A label or field selector the API server would refuse (400 Bad Request)."""


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label/annotation key, or ``None`` when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_PART.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or ``None`` when it is."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _VALUE.fullmatch(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        )
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One clause of a label selector: ``key``, an operator and its values."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this clause."""
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "=":
                return present and value == self.values[0]
            case "!=":
                return not present or value != self.values[0]
            case "in":
                return present and value in self.values
            case "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case "!":
                return not present
            case ">" | "<":
                if not present:
                    return False
                try:
                    have = int(str(value))
                except ValueError:
                    return False
                want = int(self.values[0])
                return have > want if self.operator == ">" else have < want


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector: every requirement must hold (an empty one matches everything)."""

    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        return all(r.matches(labels) for r in self.requirements)


class _Lexer:
    """Splits a selector into the tokens of the server's lexer (identifiers and operators)."""

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if ch in " \t\n":
                i += 1
            elif text.startswith(("==", "!="), i):
                self.tokens.append(text[i : i + 2])
                i += 2
            elif ch in "!=(),<>":
                self.tokens.append(ch)
                i += 1
            else:
                j = i
                while j < len(text) and text[j] not in _SPECIAL:
                    j += 1
                self.tokens.append(text[i:j])
                i = j
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token


def _is_identifier(token: str | None) -> bool:
    return token is not None and token not in ("==", "!=", "!", "=", "(", ")", ",", "<", ">")


def _describe(token: str | None) -> str:
    return "end of string" if token is None else token


def _parse_requirement(lex: _Lexer) -> Requirement:
    token = lex.next()
    if token == "!":
        key = lex.next()
        if not _is_identifier(key):
            raise SelectorError(
                f"unable to parse requirement: found '{_describe(key)}', expected: identifier"
            )
        assert key is not None
        _check_key(key)
        return Requirement(key, "!")
    if not _is_identifier(token):
        raise SelectorError(
            f"unable to parse requirement: found '{_describe(token)}', expected: "
            "!, identifier, or 'end of string'"
        )
    assert token is not None
    key = token
    _check_key(key)
    op = lex.peek()
    if op is None or op == ",":
        return Requirement(key, "exists")
    lex.next()
    if op in ("=", "=="):
        return Requirement(key, "=", (_single_value(lex),))
    if op == "!=":
        return Requirement(key, "!=", (_single_value(lex),))
    if op in (">", "<"):
        value = _single_value(lex)
        try:
            int(value)
        except ValueError:
            raise SelectorError(
                f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an "
                f"integer: {value!r}"
            ) from None
        return Requirement(key, ">" if op == ">" else "<", (value,))
    if op in ("in", "notin"):
        opening = lex.next()
        if opening != "(":
            raise SelectorError(
                f"unable to parse requirement: found '{_describe(opening)}' expected: '('"
            )
        values: list[str] = []
        if lex.peek() == ")":
            # The server reads "()" as the set holding the empty string.
            lex.next()
            return Requirement(key, "in" if op == "in" else "notin", ("",))
        while True:
            item = lex.peek()
            if item == ")":
                lex.next()
                values.append("")
                break
            if item == ",":
                lex.next()
                values.append("")
                continue
            if not _is_identifier(item):
                raise SelectorError(
                    f"unable to parse requirement: found '{_describe(item)}', expected: ',' or ')'"
                )
            lex.next()
            assert item is not None
            _check_value(item)
            values.append(item)
            after = lex.next()
            if after == ")":
                break
            if after != ",":
                raise SelectorError(
                    f"unable to parse requirement: found '{_describe(after)}', expected: ',' or ')'"
                )
        return Requirement(key, "in" if op == "in" else "notin", tuple(values))
    raise SelectorError(
        f"unable to parse requirement: found '{op}', expected: in, notin, =, ==, !=, gt, lt"
    )


def _single_value(lex: _Lexer) -> str:
    token = lex.peek()
    if token is None or token == ",":
        return ""
    if not _is_identifier(token):
        raise SelectorError(f"found '{token}', expected: identifier")
    lex.next()
    _check_value(token)
    return token


def _check_key(key: str) -> None:
    problem = label_key_problem(key)
    if problem is not None:
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r}: {problem}")


def _check_value(value: str) -> None:
    problem = label_value_problem(value)
    if problem is not None:
        raise SelectorError(
            f"unable to parse requirement: invalid label value: {value!r}: {problem}"
        )


def parse_label_selector(selector: str | Mapping[str, str] | None) -> LabelSelector:
    """Parse a label selector string (or an equality mapping) as the server does.

    Raises:
        SelectorError: the selector is malformed; the message is the server's.

    """
    if selector is None:
        return LabelSelector(())
    if isinstance(selector, Mapping):
        reqs = []
        for key, value in sorted(selector.items()):
            _check_key(key)
            _check_value(value)
            reqs.append(Requirement(key, "=", (value,)))
        return LabelSelector(tuple(reqs))
    lex = _Lexer(selector)
    requirements: list[Requirement] = []
    if lex.peek() is None:
        return LabelSelector(())
    while True:
        requirements.append(_parse_requirement(lex))
        token = lex.next()
        if token is None:
            break
        if token != ",":
            raise SelectorError(f"found '{token}', expected: ',' or 'end of string'")
    return LabelSelector(tuple(requirements))


# ----------------------------------------------------------------------------- fields


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: ``(path, equal?, value)`` terms that must all hold."""

    terms: tuple[tuple[str, bool, str], ...]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is selected."""
        return all((_field_value(obj, path) == value) == equal for path, equal, value in self.terms)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_field_selector(
    selector: str | Mapping[str, str] | None,
    supported: frozenset[str],
    *,
    custom: bool,
) -> FieldSelector:
    """Parse a field selector, allowing only the ``supported`` field paths.

    ``custom`` picks the server's wording for an unsupported field: custom
    resources answer ``field label not supported: X``, built-in kinds name the
    fields they do support.

    Raises:
        SelectorError: malformed, or a field this kind cannot be selected on.

    """
    if selector is None:
        return FieldSelector(())
    if isinstance(selector, Mapping):
        pairs = [(k, True, v) for k, v in sorted(selector.items())]
    else:
        pairs = []
        for part in selector.split(","):
            term = part.strip()
            if not term:
                continue
            for op, equal in (("!=", False), ("==", True), ("=", True)):
                if op in term:
                    path, _, value = term.partition(op)
                    pairs.append((path.strip(), equal, value.strip()))
                    break
            else:
                raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
    for path, _, _ in pairs:
        if path not in supported:
            if custom:
                raise SelectorError(f"field label not supported: {path}")
            names = ", ".join(f'"{p}"' for p in sorted(supported))
            raise SelectorError(f'"{path}" is not a known field selector: only {names}')
    return FieldSelector(tuple(pairs))
