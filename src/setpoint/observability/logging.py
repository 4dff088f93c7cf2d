"""Structured logs on top of the standard library's :mod:`logging`.

Every setpoint component logs through a :class:`Logger`: a thin wrapper around a stdlib
``logging.Logger`` that carries *bound* key/value pairs (``controller``, ``namespace``,
``name``, ``reconcile_id``, ``gvk``, ...) and attaches them, with the call's own pairs, to
each record::

    log = get_logger("setpoint.controller", controller="tenant")
    log = log.bind(namespace="prod", name="acme", reconcile_id=rid)
    log.info("Reconcile finished", duration=0.012)

Because records go through stdlib logging, handlers an application installs keep working;
the key/value pairs travel on the record as one attribute, :data:`FIELDS_ATTR`
(``record.setpoint_fields``, a ``dict``), and :func:`configure_logging`'s formatters render
them. Two formats:

- ``"json"``: one JSON object per line, ``{"ts", "level", "logger", "caller", "msg",
  <fields>...}``, plus ``"trace_id"`` and ``"span_id"`` inside a traced operation (a
  reconcile with OpenTelemetry on, :mod:`setpoint.observability.tracing`), and ``"error"``
  and ``"stacktrace"`` when an exception is logged. ``caller`` is the file and line that
  logged (``controller/controller.py:612``, zap's short form). Machine-readable, as zap's
  production encoder in Go operators.
- ``"console"``: ``2024-05-01T12:00:00.123Z INFO  setpoint.controller  Reconcile finished
  controller=tenant namespace=prod``, for humans.

Import cost: this module imports only the standard library and orjson, so importing it is
cheap. Nothing is configured on import; call :func:`configure_logging` once at start-up (the
manager does this) or configure stdlib logging yourself.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, Literal, TextIO

import orjson

from setpoint.observability.tracing import current_ids

__all__ = [
    "FIELDS_ATTR",
    "ConsoleFormatter",
    "JsonFormatter",
    "LogFormat",
    "Logger",
    "RepeatedErrors",
    "configure_logging",
    "get_logger",
]

FIELDS_ATTR: Final = "setpoint_fields"
"""Name of the ``LogRecord`` attribute holding a record's key/value pairs (a ``dict``).

One attribute rather than one per key: ``extra={"name": ...}`` would clash with the
record's own ``name`` attribute, and bound keys such as ``name`` are exactly what
controllers log."""

LogFormat = Literal["console", "json"]
"""The output formats of :func:`configure_logging`."""

_LEVELS: Final[Mapping[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# The JSON keys every line starts with; a field of the same name is renamed, not dropped.
_RESERVED: Final = frozenset(
    {"ts", "level", "logger", "caller", "msg", "trace_id", "span_id", "error", "stacktrace"}
)


class Logger:
    """A stdlib logger plus bound key/value pairs. Immutable: :meth:`bind` returns a new one.

    Methods take a message and keyword pairs, added to the bound ones. A call's pair never
    replaces a bound one with a different value: bound pairs name the context (controller,
    namespace, name, reconcile_id), and a line that silently names another object misleads.
    The call's value is kept as ``arg.<key>`` instead. Use :meth:`bind` to change context.
    Levels below the stdlib logger's effective level cost one comparison.
    """

    __slots__ = ("_bound", "_logger")

    def __init__(self, logger: logging.Logger, bound: Mapping[str, Any] | None = None) -> None:
        self._logger = logger
        self._bound: dict[str, Any] = dict(bound) if bound else {}

    @property
    def name(self) -> str:
        """The stdlib logger's name (``setpoint.controller``)."""
        return self._logger.name

    @property
    def stdlib(self) -> logging.Logger:
        """The underlying ``logging.Logger`` (to set its level or add a handler)."""
        return self._logger

    @property
    def bound(self) -> Mapping[str, Any]:
        """The pairs bound to this logger (a read-only view)."""
        return self._bound

    def bind(self, **kv: Any) -> Logger:
        """Return a logger that adds ``kv`` to every record (over the pairs bound so far)."""
        bound = Logger.__new__(Logger)  # the merged dict is new already: no second copy
        bound._logger = self._logger
        bound._bound = {**self._bound, **kv}
        return bound

    def is_enabled_for(self, level: int) -> bool:
        """Whether a record at ``level`` (a stdlib level number) would be emitted."""
        return self._logger.isEnabledFor(level)

    def debug(self, msg: str, /, **kv: Any) -> None:
        """Log at DEBUG: detail useful while developing or chasing a bug."""
        if self._logger.isEnabledFor(logging.DEBUG):
            self._emit(logging.DEBUG, msg, kv, None)

    def info(self, msg: str, /, **kv: Any) -> None:
        """Log at INFO: a normal event worth recording."""
        if self._logger.isEnabledFor(logging.INFO):
            self._emit(logging.INFO, msg, kv, None)

    def warning(self, msg: str, /, **kv: Any) -> None:
        """Log at WARNING: something unexpected that the program recovers from."""
        if self._logger.isEnabledFor(logging.WARNING):
            self._emit(logging.WARNING, msg, kv, None)

    def error(
        self, msg: str, /, *, exc_info: BaseException | bool | None = None, **kv: Any
    ) -> None:
        """Log at ERROR; pass ``exc_info`` (an exception, or ``True``) to attach a traceback."""
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit(logging.ERROR, msg, kv, exc_info)

    def exception(self, msg: str, /, **kv: Any) -> None:
        """Log at ERROR with the exception being handled (call it from an ``except`` block)."""
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit(logging.ERROR, msg, kv, True)

    def _emit(
        self, level: int, msg: str, kv: Mapping[str, Any], exc_info: BaseException | bool | None
    ) -> None:
        fields = dict(self._bound)
        for key, value in kv.items():
            if key in fields and fields[key] != value:
                fields[f"arg.{key}"] = value
            else:
                fields[key] = value
        # stacklevel 3: the caller of debug()/info()/..., so %(funcName)s and %(lineno)d in a
        # user's own formatter point at the code that logged, not at this module.
        self._logger.log(
            level,
            msg,
            exc_info=exc_info or None,
            extra={FIELDS_ATTR: fields},
            stacklevel=3,
        )

    def __repr__(self) -> str:
        return f"<Logger {self.name} {self._bound!r}>"


class RepeatedErrors:
    """Counts identical errors so a loop that fails the same way logs its traceback once.

    Two errors are identical when their type, message and traceback frames (file, line)
    are. :meth:`seen` returns how often this one was seen, this time included: the
    caller prints the traceback at 1 and only a counted one-line summary afterwards
    (at powers of two, so a failure that lasts all day still shows up, with its count).
    At most ``capacity`` distinct errors are remembered (the oldest are forgotten).
    """

    def __init__(self, capacity: int = 256) -> None:
        self._counts: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._capacity = capacity

    @staticmethod
    def signature(error: BaseException) -> tuple[Any, ...]:
        """What makes two errors identical: type, message and the frames they passed."""
        frames = tuple(
            (frame.f_code.co_filename, lineno)
            for frame, lineno in traceback.walk_tb(error.__traceback__)
        )
        return (type(error).__qualname__, str(error), frames)

    def seen(self, error: BaseException) -> int:
        """Count ``error``; return how many times an identical one was seen (1 the first)."""
        key = self.signature(error)
        count = self._counts.pop(key, 0) + 1
        self._counts[key] = count
        while len(self._counts) > self._capacity:
            self._counts.popitem(last=False)
        return count

    @staticmethod
    def worth_logging(count: int) -> bool:
        """Whether the ``count``-th repeat gets a log line at error level: 1, 2, 4, 8, ..."""
        return count & (count - 1) == 0


def get_logger(name: str, **bound: Any) -> Logger:
    """Return a :class:`Logger` for the stdlib logger ``name`` with ``bound`` pairs attached."""
    return Logger(logging.getLogger(name), bound)


def _fields_of(record: logging.LogRecord) -> Mapping[str, Any]:
    fields = getattr(record, FIELDS_ATTR, None)
    return fields if isinstance(fields, Mapping) else {}


def _timestamp(created: float) -> str:
    """RFC 3339 in UTC with milliseconds: ``2024-05-01T12:00:00.123Z``."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _default(value: Any) -> Any:
    # orjson calls this for anything it cannot encode; a log line must never fail to render.
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _caller(record: logging.LogRecord) -> str:
    """``<directory>/<file>:<line>`` of the code that logged (zap's short caller form)."""
    path = record.pathname.replace("\\", "/")
    parent, _, name = path.rpartition("/")
    directory = parent.rpartition("/")[2]
    return f"{directory}/{name}:{record.lineno}" if directory else f"{name}:{record.lineno}"


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line (see the module docstring)."""

    def __init__(self, fields: Mapping[str, Any] | None = None) -> None:
        """``fields``: pairs put on every line after the record's own (``{"worker": 1}``)."""
        super().__init__()
        self.fields: dict[str, Any] = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as JSON: ts, level, logger, msg, the fields, then any error."""
        line: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "caller": _caller(record),
            "msg": record.getMessage(),
        }
        ids = current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        for key, value in _fields_of(record).items():
            line[f"field.{key}" if key in _RESERVED else key] = value
        for key, value in self.fields.items():
            line.setdefault(f"field.{key}" if key in _RESERVED else key, value)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            line["error"] = f"{type(exc).__name__}: {exc}"
            line["stacktrace"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.stack_info:
            line["stacktrace"] = record.stack_info
        return orjson.dumps(line, default=_default, option=orjson.OPT_NON_STR_KEYS).decode()


class ConsoleFormatter(logging.Formatter):
    """Formats a record for a terminal: time, level, logger, message, then ``key=value`` pairs."""

    def __init__(self, fields: Mapping[str, Any] | None = None) -> None:
        """``fields``: pairs put on every line after the record's own (``{"worker": 1}``)."""
        super().__init__()
        self.fields: dict[str, Any] = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` on one line (plus the traceback's lines, if any)."""
        parts = [
            _timestamp(record.created),
            f"{record.levelname:<7}",
            record.name,
            record.getMessage(),
        ]
        fields = {**self.fields, **_fields_of(record)} if self.fields else _fields_of(record)
        if fields:
            parts.append(
                " ".join(f"{key}={_console_value(value)}" for key, value in fields.items())
            )
        text = "  ".join(parts)
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.stack_info:
            text += "\n" + record.stack_info
        return text


def _console_value(value: Any) -> str:
    text = str(value)
    # Quote values a reader could not tell apart from the separators around them.
    if not text or any(c.isspace() or c in '"=' for c in text):
        return orjson.dumps(text).decode()
    return text


class _SetpointHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` installs; marked so a second call replaces it."""


def configure_logging(
    *,
    level: str | int = "info",
    format: LogFormat = "console",
    stream: TextIO | None = None,
    fields: Mapping[str, Any] | None = None,
) -> None:
    """Send log records to ``stream`` in the chosen format, at ``level`` and above.

    Installs one handler on the root logger and sets the root level, so records from setpoint,
    the application and libraries share one format. Calling it again replaces the handler it
    installed earlier; handlers installed by anyone else are left alone.

    Args:
        level: ``"debug"``, ``"info"``, ``"warning"``, ``"error"``, ``"critical"`` (any case)
            or a stdlib level number. Default ``"info"``.
        format: ``"console"`` (default; human-readable) or ``"json"`` (one object per line).
        stream: Where to write; default ``sys.stderr`` (looked up at call time).
        fields: Pairs put on every line, after the record's own: ``setpoint run`` passes
            ``{"worker": i}`` in worker ``i`` of ``--processes N``, so one Pod's interleaved
            lines say which process wrote them. A record's own field of that name wins.

    Raises:
        ValueError: an unknown level name or format.

    """
    if isinstance(level, str):
        number = _LEVELS.get(level.lower())
        if number is None:
            raise ValueError(
                f"configure_logging(level={level!r}): use one of "
                f"{', '.join(sorted(set(_LEVELS) - {'warn'}))} or a logging level number"
            )
    else:
        number = int(level)
    if format == "json":
        formatter: logging.Formatter = JsonFormatter(fields)
    elif format == "console":
        formatter = ConsoleFormatter(fields)
    else:
        raise ValueError(f"configure_logging(format={format!r}): use 'console' or 'json'")
    handler = _SetpointHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _SetpointHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
