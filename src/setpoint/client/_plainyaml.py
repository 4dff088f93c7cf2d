"""A fast path for the plain YAML that kubectl, kind and PyYAML write into kubeconfig files.

Importing PyYAML costs ~30 ms (about a seventh of an operator's imports: its modules compile
dozens of regular expressions), and every operator that reads a kubeconfig paid it at start.
The files themselves almost always use a small part of YAML: block mappings and sequences,
one-line plain or quoted scalars, ``{}`` and ``[]``. :func:`load` reads exactly that part and
returns :data:`DECLINED` for anything else, and the caller then reads the file with PyYAML,
so the result never depends on which path read it.

Expected Flow:
    ``doc = load(text)``; ``if doc is DECLINED: doc = yaml.load(text, Loader=...)``.

Guarantees:
    - When :func:`load` returns a value, it is the value PyYAML's safe loader (with
      timestamps read as strings, as the kubeconfig loader does) returns for the same text;
      ``tests/unit/client/test_plainyaml_fuzz.py`` compares the two on generated documents.
    - A plain scalar becomes a string only when no YAML 1.1 implicit type can match it: any
      plain scalar that could be a number, a boolean, a null, a date, a merge key or a value
      key, other than the few read here (``true``/``false``/``null`` and decimal integers),
      declines the whole document.
    - Never raises: text it cannot read, including invalid YAML, is declined, and PyYAML
      then reports the error with its line and column.

Caveats:
    - Declines anchors and aliases, tags, flow collections other than ``{}``/``[]``, block
      scalars (``|``, ``>``), multi-line scalars, escapes in double quotes, tabs, text that
      is not printable ASCII, directives and document markers, empty and complex keys. Such
      files are read by PyYAML, as before.

Errors:
    None: see Guarantees.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["DECLINED", "load"]


class _Declined:
    """The type of :data:`DECLINED`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DECLINED"


DECLINED: Final = _Declined()
"""What :func:`load` returns for text outside the part of YAML it reads."""

# Plain scalars that resolve to something other than a string in YAML 1.1 (PyYAML's implicit
# resolvers) start with one of these characters or are one of these words; they are declined
# unless they are one of the values in _KNOWN.
_TYPED_FIRST: Final = frozenset("0123456789-+.~<=")
_TYPED_WORDS: Final = frozenset(
    {
        *("yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF"),
        *("true", "True", "TRUE", "false", "False", "FALSE", "null", "Null", "NULL"),
    }
)
_KNOWN: Final[dict[str, Any]] = {
    "true": True,
    "True": True,
    "TRUE": True,
    "false": False,
    "False": False,
    "FALSE": False,
    "null": None,
    "Null": None,
    "NULL": None,
    "~": None,
}
# Characters that may not start a plain scalar, or that start something this reader declines.
_INDICATORS: Final = frozenset("-?:,[]{}#&*!|>'\"%@`")
_DIGITS: Final = frozenset("0123456789")


class _Decline(Exception):
    """Raised inside the reader to give up on the whole document."""


def load(text: str) -> Any:
    """The value of the YAML ``text``, or :data:`DECLINED` when it is outside the plain part."""
    try:
        lines = _lines(text)
        if not lines:
            return None  # PyYAML: an empty document (or only comments) is None
        value, end = _block(lines, 0, lines[0][0])
        if end != len(lines):
            return DECLINED
        return value
    except (_Decline, RecursionError, ValueError):  # ValueError: int() of > 4300 digits
        return DECLINED


def _lines(text: str) -> list[tuple[int, str]]:
    """The lines that are not blank or comments, as (indentation, content)."""
    # Only printable ASCII, line feeds and carriage returns at line ends: PyYAML refuses
    # some other characters anywhere (comments included), and reads others as line breaks.
    if not text.isascii() or not text.replace("\n", "").replace("\r", "").isprintable():
        raise _Decline
    out: list[tuple[int, str]] = []
    for raw in text.split("\n"):
        line = raw.rstrip(" ")
        if line.endswith("\r"):
            line = line[:-1].rstrip(" ")
        if "\r" in line:
            raise _Decline  # a lone carriage return is a line break to YAML
        content = line.lstrip(" ")
        if not content or content.startswith("#"):
            continue
        if line.startswith(("---", "...", "%")):
            raise _Decline
        out.append((len(line) - len(content), content))
    return out


def _block(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[Any, int]:
    """The block node whose lines start at ``lines[at]``, indented by ``indent``."""
    if lines[at][0] != indent:
        raise _Decline
    if _is_entry(lines[at][1]):
        return _sequence(lines, at, indent)
    return _mapping(lines, at, indent, lines[at][1])


def _is_entry(content: str) -> bool:
    return content == "-" or content.startswith("- ")


def _sequence(lines: list[tuple[int, str]], at: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while at < len(lines) and lines[at][0] == indent and _is_entry(lines[at][1]):
        rest = lines[at][1][1:]
        stripped = rest.lstrip(" ")
        if not stripped:  # "-" alone: the item is the more indented block below, or null
            at += 1
            if at < len(lines) and lines[at][0] > indent:
                item, at = _block(lines, at, lines[at][0])
            else:
                item = None
            items.append(item)
            continue
        # A compact item ("- key: value" or "- scalar") starts at this column.
        column = indent + 1 + (len(rest) - len(stripped))
        if _is_entry(stripped):  # "- - x": a sequence in a sequence, starting at column
            lines[at] = (column, stripped)
            item, at = _sequence(lines, at, column)
            items.append(item)
            continue
        key_split = _split_key(stripped)
        if key_split is None:
            items.append(_scalar(stripped))
            at += 1
            continue
        item, at = _mapping(lines, at, column, stripped)
        items.append(item)
    return items, at


def _mapping(
    lines: list[tuple[int, str]], at: int, indent: int, first: str
) -> tuple[dict[Any, Any], int]:
    """A block mapping at ``indent``; its first entry's text is ``first`` (on ``lines[at]``)."""
    out: dict[Any, Any] = {}
    content = first
    while True:
        split = _split_key(content)
        if split is None:
            raise _Decline  # a scalar where a key was expected, or a multi-line scalar
        key_text, value_text = split
        key = _scalar(key_text)  # a plain "<<" (merge) or "=" (value) key is declined there
        if not isinstance(key, (str, int, bool)) and key is not None:
            raise _Decline  # "{}" or "[]" as a key
        at += 1
        if value_text:
            value: Any = _scalar(value_text)
        elif at < len(lines) and lines[at][0] > indent:
            value, at = _block(lines, at, lines[at][0])
        elif at < len(lines) and lines[at][0] == indent and _is_entry(lines[at][1]):
            value, at = _sequence(lines, at, indent)  # an indentless sequence (kubectl's)
        else:
            value = None
        out[key] = value
        if at >= len(lines) or lines[at][0] != indent:
            if at < len(lines) and lines[at][0] > indent:
                raise _Decline  # a continuation line: a multi-line scalar
            return out, at
        content = lines[at][1]
        if _is_entry(content):
            return out, at  # an enclosing indentless sequence goes on


def _split_key(content: str) -> tuple[str, str] | None:
    """``(key text, value text)`` of a ``key: value`` line, or None when it is no such line."""
    if content[0] in "'\"":
        end = _quoted_end(content)
        if end is None:
            raise _Decline
        rest = content[end:]
        if rest.startswith(":") and (len(rest) == 1 or rest[1] == " "):
            return content[:end], _strip_comment(rest[1:].lstrip(" "))
        if _strip_comment(rest.lstrip(" ")):
            raise _Decline
        return None
    comment = content.find(" #")
    head = content if comment == -1 else content[:comment].rstrip(" ")
    index = head.find(": ")
    if index == -1:
        if not head.endswith(":"):
            return None
        index = len(head) - 1
    key = head[:index].rstrip(" ")
    if not key:
        raise _Decline  # an empty (null) key
    return key, _strip_comment(content[index + 1 :].lstrip(" "))


def _strip_comment(text: str) -> str:
    """``text`` without a trailing comment (``" #..."``), for unquoted text."""
    if not text or text[0] in "'\"":
        return text
    if text.startswith("#"):
        return ""
    index = text.find(" #")
    return text if index == -1 else text[:index].rstrip(" ")


def _quoted_end(text: str) -> int | None:
    """The index after the closing quote of the quoted scalar ``text`` starts with."""
    quote = text[0]
    i = 1
    while True:
        j = text.find(quote, i)
        if j == -1:
            return None
        if quote == "'" and text.startswith("''", j):
            i = j + 2
            continue
        return j + 1


def _scalar(text: str) -> Any:
    """The value of a one-line scalar (plain or quoted), or decline."""
    if not text:
        return None
    first = text[0]
    if first in "'\"":
        end = _quoted_end(text)
        if end is None or _strip_comment(text[end:].lstrip(" ")):
            raise _Decline
        inner = text[1 : end - 1]
        if first == '"':
            if "\\" in inner:
                raise _Decline
            return inner
        return inner.replace("''", "'")
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    known = _KNOWN.get(text, _Decline)
    if known is not _Decline:
        return known
    if first in _DIGITS and text.isdigit() and text.isascii() and (text == "0" or first != "0"):
        return int(text)
    if first in "-+" and len(text) > 1 and text[1] not in _DIGITS and text[1] not in ". ":
        pass  # "--flag": after a sign, only a digit or a dot can start a number
    elif first in _INDICATORS or first in _TYPED_FIRST or text in _TYPED_WORDS:
        raise _Decline
    if ": " in text or text.endswith(":") or " #" in text:
        raise _Decline
    return text
