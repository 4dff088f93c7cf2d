"""The ``format`` keyword, checked the way the API server checks it.

The API server validates custom resources with kube-openapi's validator and the format
registry of ``k8s.io/kube-openapi/pkg/validation/strfmt``; apiextensions-apiserver first
*strips* every format it does not support (``StripUnsupportedFormatsPostProcessorForVersion``
in ``pkg/apiserver/validation/formats.go``), so an unknown format is accepted with a warning
and checks nothing. What is left:

* on a ``string`` node (or a node without a type: int-or-string, or an allOf/anyOf/oneOf/not
  branch) the string formats of :data:`STRING_FORMATS`, applied to string values only. Names
  are compared without ``-`` (``date-time`` and ``datetime`` are the same format);
* on an ``integer`` node ``int32`` and ``int64``, on a ``number`` node ``float`` and
  ``double``: range checks of the value *and of the node's minimum, maximum and multipleOf*
  (:func:`number_range_problem`), which the server applies even without a format (an
  integer node's bounds must be 64-bit integers).

Each string check follows the Go function the server runs (``net.ParseIP``,
``net.ParseMAC``, ``url.ParseRequestURI``, ``time.ParseDuration``, the strfmt regular
expressions run with RE2). ``email`` is the exception: Go's ``net/mail.ParseAddress``
accepts RFC 5322 addresses with display names, comments and quoted parts; this module
accepts the common subset (``name <local@domain>``, dot-atoms, quoted local parts) and may
refuse an exotic address the server takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from setpoint.crd.patterns import compile_pattern

__all__ = [
    "NUMBER_FORMATS",
    "STRING_FORMATS",
    "effective_format",
    "format_problem",
    "number_range_problem",
]

NUMBER_FORMATS: dict[str, frozenset[str]] = {
    "integer": frozenset({"int32", "int64"}),
    "number": frozenset({"float", "double"}),
}
"""The formats the server keeps on integer and number nodes (the others are stripped)."""

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = Fraction((2**24 - 1) * 2**104)  # math.MaxFloat32
_FLOAT32_ROUND = _FLOAT32_MAX + Fraction(2**103)  # half an ulp above it: ParseFloat's limit


def _go_regex(pattern: str) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        return compile_pattern(pattern).matches(value)

    return check


_HOSTNAME = _go_regex(
    r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}]"
    r"(([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$"
)
_SHORT_NAME = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_BASE64 = re.compile(
    r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})"
)
_UUID = {
    "uuid": r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}",
    "uuid3": r"[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}",
    "uuid4": r"[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}",
    "uuid5": r"[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}",
}
_CREDIT_CARD = re.compile(
    r"(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}"
    r"|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35[0-9]{3})[0-9]{11})"
)
_RGB_PART = r"\s*(0|[1-9][0-9]?|1[0-9][0-9]?|2[0-4][0-9]|25[0-5])\s*"
_RGB = re.compile(rf"rgb\({_RGB_PART},{_RGB_PART},{_RGB_PART}\)".replace(r"\s", "[ \t\n\f\r]"))
_DATE_TIME_TAIL = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))"
)


def _is_date(value: str) -> bool:
    """Go's ``time.Parse("2006-01-02", value)``."""
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        return False
    year, month, day = int(value[:4]), int(value[5:7]), int(value[8:])
    if not 1 <= month <= 12 or day < 1:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    return day <= days


def _is_date_time(value: str) -> bool:
    """Strfmt's ``IsDateTime``: a date, ``t``, then a time, compared part by part."""
    if len(value) < 4:
        return False
    parts = value.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    match = _DATE_TIME_TAIL.fullmatch(parts[1])
    if match is None:
        return False
    return match[1] <= "23" and match[2] <= "59" and match[3] <= "59"


_GO_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}


def _go_parse_duration(value: str) -> bool:
    """Whether Go's ``time.ParseDuration`` accepts ``value``."""
    s = value
    negative = False
    if s and s[0] in "+-":
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return True
    if not s:
        return False
    total = Fraction(0)
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            return False
        match = re.match(r"([0-9]*)(\.([0-9]*))?", s)
        assert match is not None  # the pattern matches the empty string
        whole, frac = match[1], match[3]
        if not whole and not frac:
            return False
        if whole and int(whole) > 2**63:
            return False
        s = s[match.end() :]
        unit_end = 0
        while unit_end < len(s) and s[unit_end] != "." and not ("0" <= s[unit_end] <= "9"):
            unit_end += 1
        unit, s = s[:unit_end], s[unit_end:]
        if unit not in _GO_UNITS:
            return False
        number = Fraction(int(whole or "0")) + (
            Fraction(int(frac), 10 ** len(frac)) if frac else Fraction(0)
        )
        total += number * _GO_UNITS[unit]
        if total > 2**63:
            return False
    return total <= 2**63 - 1 or (negative and total == 2**63)


_UNIT_VARIANTS = (
    ("ns", "nano"),
    ("us", "\u00b5s", "micro"),
    ("ms", "milli"),
    ("s", "sec"),
    ("m", "min"),
    ("h", "hr", "hour"),
    ("d", "day"),
    ("w", "wk", "week"),
)


def _is_duration(value: str) -> bool:
    """Strfmt's ``ParseDuration``: Go's durations, or any ``<digits> <unit>`` inside the text."""
    if _go_parse_duration(value):
        return True
    ok = False
    for match in re.finditer("([0-9]+)[ \t\n\f\r]*([A-Za-z\u00b5]+)", value):
        if int(match[1]) > 2**63 - 1:  # strconv.Atoi fails: the whole value is refused
            return False
        unit = match[2].lower()
        for variants in _UNIT_VARIANTS:
            last = len(variants) - 1
            for i, variant in enumerate(variants):
                if (i == last and unit.startswith(variant)) or unit == variant:
                    ok = True
    return ok


def _parse_ipv4(value: str, *, sloppy: bool) -> bool:
    """Go's IPv4 parser; ``sloppy`` allows leading zeros (k8s.io/utils/net)."""
    parts = value.split(".")
    if len(parts) != 4:
        return False
    for part in parts:
        if not part or not re.fullmatch("[0-9]+", part):
            return False
        if not sloppy and (len(part) > 3 or (len(part) > 1 and part[0] == "0")):
            return False
        if int(part) > 255:
            return False
    return True


def _parse_ipv6(value: str, *, sloppy: bool) -> bool:
    """Go's IPv6 parser (no zone), with an embedded IPv4 tail allowed."""
    if "::" in value:
        head, _, tail = value.partition("::")
        if "::" in tail:
            return False
        head_groups = head.split(":") if head else []
        tail_groups = tail.split(":") if tail else []
        compressed = True
    else:
        head_groups, tail_groups, compressed = value.split(":"), [], False
    groups = head_groups + tail_groups
    width = 0
    for i, group in enumerate(groups):
        if i == len(groups) - 1 and "." in group and (tail_groups or not compressed):
            if not _parse_ipv4(group, sloppy=sloppy):
                return False
            width += 2
            continue
        if not re.fullmatch("[0-9a-fA-F]{1,4}", group):
            return False
        width += 1
    if compressed:
        return width < 8
    return width == 8


def _parse_ip(value: str, *, sloppy: bool) -> bool:
    if "." in value and ":" not in value:
        return _parse_ipv4(value, sloppy=sloppy)
    return ":" in value and _parse_ipv6(value, sloppy=sloppy)


def _is_cidr(value: str) -> bool:
    """k8s.io/utils/net ``ParseCIDRSloppy``."""
    address, slash, mask = value.partition("/")
    if not slash:
        return False
    if ":" not in address and _parse_ipv4(address, sloppy=True):
        bits = 32
    elif _parse_ipv6(address, sloppy=True):
        bits = 128
    else:
        return False
    if not re.fullmatch("[0-9]+", mask) or int(mask) >= 0xFFFFFF:
        return False
    return int(mask) <= bits


def _is_mac(value: str) -> bool:
    """Go's ``net.ParseMAC``: 6, 8 or 20 octets as xx:xx, xx-xx or xxxx.xxxx."""
    if len(value) < 14:
        return False
    hex_pair = "[0-9a-fA-F]{2}"
    if value[2] in ":-":
        if (len(value) + 1) % 3:
            return False
        count = (len(value) + 1) // 3
        pattern = hex_pair + f"(?:{re.escape(value[2])}{hex_pair}){{{count - 1}}}"
    elif value[4] == ".":
        if (len(value) + 1) % 5:
            return False
        count = 2 * (len(value) + 1) // 5
        pattern = f"{hex_pair * 2}(?:\\.{hex_pair * 2}){{{count // 2 - 1}}}"
    else:
        return False
    return count in (6, 8, 20) and re.fullmatch(pattern, value) is not None


def _is_request_uri(value: str) -> bool:
    """Go's ``url.ParseRequestURI``: an absolute URI or an absolute path."""
    if not value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return False
    rest = value
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", value)
    if value[0] == ":":
        return False
    if scheme:
        rest = value[scheme.end() :]
    if "?" in rest:
        rest = rest.split("?", 1)[0]
    if not rest.startswith("/"):
        return bool(scheme)  # opaque (mailto:x), or a relative path (refused)
    if scheme and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if not _valid_authority(authority):
            return False
        rest = slash + path
    return _valid_escapes(rest)


def _valid_escapes(text: str) -> bool:
    return re.search(r"%(?![0-9a-fA-F]{2})", text) is None


def _valid_authority(authority: str) -> bool:
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return False
        port = host[end + 1 :]
        return not port or re.fullmatch(":[0-9]*", port) is not None
    if ":" in host:
        host, _, port = host.rpartition(":")
        if not re.fullmatch("[0-9]*", port):
            return False
    return (
        _valid_escapes(host)
        and re.fullmatch(r"[A-Za-z0-9\-._~!$&'()*+,;=%\u0080-\U0010ffff]*", host) is not None
    )


_ATEXT = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~\u0080-\U0010ffff]+"
_DOT_ATOM = rf"{_ATEXT}(?:\.{_ATEXT})*"
_QUOTED = r'"(?:[^"\\\r\n]|\\.)*"'
_ADDR_SPEC = rf"(?:{_DOT_ATOM}|{_QUOTED})@(?:{_DOT_ATOM}|\[[^\[\]\\]*\])"
_EMAIL = re.compile(
    rf"[ \t]*(?:{_ADDR_SPEC}|(?:(?:{_DOT_ATOM}|{_QUOTED})(?:[ \t]+(?:{_DOT_ATOM}|{_QUOTED}))*)?"
    rf"[ \t]*<{_ADDR_SPEC}>)[ \t]*"
)


def _uuid_check(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern, re.IGNORECASE | re.ASCII)
    return lambda value: compiled.fullmatch(value) is not None


def _isbn10(value: str) -> bool:
    digits = re.sub(r"[ \t\n\f\r\-]+", "", value)
    if not re.fullmatch("(?:[0-9]{9}X|[0-9]{10})", digits):
        return False
    total = sum((i + 1) * int(digits[i]) for i in range(9))
    total += 100 if digits[9] == "X" else 10 * int(digits[9])
    return total % 11 == 0


def _isbn13(value: str) -> bool:
    digits = re.sub(r"[ \t\n\f\r\-]+", "", value)
    if not re.fullmatch("[0-9]{13}", digits):
        return False
    total = sum((1, 3)[i % 2] * int(digits[i]) for i in range(12))
    return int(digits[12]) == (10 - total % 10) % 10


def _credit_card(value: str) -> bool:
    digits = re.sub("[^0-9]+", "", value)
    if not _CREDIT_CARD.fullmatch(digits):
        return False
    total = 0
    for i, char in enumerate(reversed(digits)):
        number = int(char)
        if i % 2:
            number *= 2
            total += number % 10 + 1 if number >= 10 else number
        else:
            total += number
    return total % 10 == 0


STRING_FORMATS: dict[str, Callable[[str], bool]] = {
    "bsonobjectid": lambda v: re.fullmatch("[0-9a-fA-F]{24}", v) is not None,
    "uri": _is_request_uri,
    "email": lambda v: _EMAIL.fullmatch(v) is not None,
    "hostname": lambda v: (
        _HOSTNAME(v) and len(v) <= 255 and all(len(p) <= 63 for p in v.split("."))
    ),
    "ipv4": lambda v: "." in v and _parse_ip(v, sloppy=True),
    "ipv6": lambda v: ":" in v and _parse_ip(v, sloppy=False),
    "cidr": _is_cidr,
    "mac": _is_mac,
    **{name: _uuid_check(p) for name, p in _UUID.items()},
    "isbn": lambda v: _isbn10(v) or _isbn13(v),
    "isbn10": _isbn10,
    "isbn13": _isbn13,
    "creditcard": _credit_card,
    "ssn": lambda v: (
        len(v) == 11 and re.fullmatch("[0-9]{3}[- ]?[0-9]{2}[- ]?[0-9]{4}", v) is not None
    ),
    "hexcolor": lambda v: re.fullmatch("#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})", v) is not None,
    "rgbcolor": lambda v: _RGB.fullmatch(v) is not None,
    "byte": lambda v: _BASE64.fullmatch(v) is not None,
    "password": lambda v: True,
    "date": _is_date,
    "duration": _is_duration,
    "datetime": _is_date_time,
    "k8sshortname": lambda v: len(v) <= 63 and re.fullmatch(_SHORT_NAME, v) is not None,
    "k8slongname": lambda v: (
        len(v) <= 253 and re.fullmatch(rf"{_SHORT_NAME}(\.{_SHORT_NAME})*", v) is not None
    ),
}
"""The string formats the server checks (names without ``-``), each a test of a string."""


def effective_format(node_type: Any, fmt: Any) -> str | None:
    """The format the server keeps on a node of ``node_type`` (``None``: stripped, no check).

    String formats are returned normalized (without ``-``).
    """
    if not isinstance(fmt, str) or not fmt:
        return None
    if node_type in (None, "string"):
        normalized = fmt.replace("-", "")
        return normalized if normalized in STRING_FORMATS else None
    if node_type in NUMBER_FORMATS:
        return fmt if fmt in NUMBER_FORMATS[node_type] else None
    return None


def format_problem(value: str, fmt: str) -> bool:
    """Whether the string ``value`` fails the (normalized, supported) string format ``fmt``."""
    check = STRING_FORMATS.get(fmt)
    if check is None:
        return False
    try:
        return not check(value)
    except UnicodeEncodeError:
        return True  # not valid text (a lone surrogate): nothing the server would accept


def _fits(value: float, node_type: Any, fmt: str | None) -> bool:
    """kube-openapi's ``IsValueValidAgainstRange`` for one number."""
    if node_type == "integer":
        low, high = _INT32 if fmt == "int32" else _INT64
        if isinstance(value, float):
            if not value.is_integer():
                return False
            value = int(value)
        return low <= value <= high
    if fmt == "float":
        return abs(Fraction(value)) < _FLOAT32_ROUND
    return True


def number_range_problem(value: float, node: dict[str, Any]) -> str | None:
    """Why the server refuses the number ``value`` on ``node`` for range reasons, or ``None``.

    kube-openapi checks that the value, and each of the node's ``multipleOf``, ``maximum``
    and ``minimum``, fits the node's type and format (int32 or int64 for integers, float32
    for ``format: float``). A bound that does not fit (``maximum: 1e20`` or ``0.5`` on an
    integer node) makes every number on that node invalid.
    """
    node_type = node.get("type")
    fmt = effective_format(node_type, node.get("format"))
    what = f"{node_type} with format {fmt}" if fmt else f"{node_type} (default format)"
    if not _fits(value, node_type, fmt):
        return f"must be of type {what}"
    for bound in ("multipleOf", "maximum", "minimum"):
        limit = node.get(bound)
        if isinstance(limit, bool) or not isinstance(limit, int | float):
            continue
        if not _fits(limit, node_type, fmt):
            return f"the schema's {bound} {limit!r} is not of type {what}"
    return None
