r"""Schema ``pattern`` keywords, compiled and matched the way the API server does: with RE2.

The API server compiles a CRD's ``pattern`` with Go's ``regexp`` package, an
RE2 engine: matching takes time linear in the input, and the syntax has no
lookaround or backreferences. Python's ``re`` backtracks, so running it on
user input can take exponential time (``^(a+)+$`` against 27 characters takes
seconds), and it accepts syntax the server rejects. Every pattern setpoint
compiles from a schema goes through this module instead, which uses RE2
(the ``google-re2`` package); see docs/decisions/0008-re2-for-schema-patterns.md.

Go's ``regexp`` and C++ RE2 agree on syntax except for a few escapes; the
ones known to differ are rejected here as the server would (``\C``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from setpoint._extras import TOOLS, ExtraNotInstalled
from setpoint.api.errors import SetpointError

__all__ = ["CompiledPattern", "PatternError", "compile_pattern"]

_MAX_PATTERN_LENGTH = 16 * 1024
"""Longer patterns are refused before compiling: no CRD needs one, and RE2's memory
budget would refuse most of them anyway."""

_MAX_PROGRAM_MEMORY = 8 << 20
"""RE2's memory budget for one compiled pattern (its own default): a pattern
whose program is larger fails to compile instead of using unbounded memory."""

# Escapes C++ RE2 accepts but Go's regexp (what the server runs) rejects.
_GO_REJECTS = ("\\C",)


class PatternError(SetpointError, ValueError):
    """A pattern the API server would reject: the message says why and what to change."""


@dataclass(frozen=True)
class CompiledPattern:
    """A compiled schema pattern; :meth:`matches` runs in time linear in its input."""

    source: str
    """The pattern as written in the schema."""
    _program: Any

    def matches(self, value: str) -> bool:
        """Whether ``value`` contains a match (JSON Schema ``pattern`` is unanchored).

        Raises:
            PatternError: ``value`` is not valid Unicode text (a lone surrogate),
                which no JSON document the server accepts can contain.

        """
        try:
            return self._program.search(value) is not None
        except UnicodeEncodeError as exc:
            raise PatternError(f"the value is not valid UTF-8 text ({exc.reason})") from None


def compile_pattern(pattern: str) -> CompiledPattern:
    """Compile a schema ``pattern`` with RE2 (cached).

    Raises:
        PatternError: the pattern is too long, not valid text, uses syntax RE2
            (and so the API server) does not support, or needs more than RE2's
            memory budget; the message quotes RE2's reason.
        ExtraNotInstalled: google-re2 is not installed (it comes with the ``tools``
            extra: ``pip install 'setpoint[tools]'``).

    """
    return _compile(pattern)


@lru_cache(maxsize=512)
def _compile(pattern: str) -> CompiledPattern:
    try:
        import re2  # type: ignore[import-untyped]  # deferred: only schema checks need it
    except ModuleNotFoundError as exc:
        if exc.name != "re2":
            raise
        # google-re2 is in the tools extra: the runtime alone (pip install setpoint) has none.
        raise ExtraNotInstalled(
            "checking a schema pattern with RE2", TOOLS, ["google-re2"]
        ) from None

    if len(pattern) > _MAX_PATTERN_LENGTH:
        raise PatternError(
            f"the pattern is {len(pattern)} characters long (at most {_MAX_PATTERN_LENGTH})"
        )
    for escape in _GO_REJECTS:
        if escape in pattern.replace("\\\\", ""):
            raise PatternError(f"the escape {escape} is not supported by the API server (Go RE2)")
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PatternError(f"the pattern is not valid UTF-8 text ({exc.reason})") from None
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _MAX_PROGRAM_MEMORY
    try:
        program = re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"RE2, the server's engine, says {reason}") from None
    return CompiledPattern(pattern, program)
