"""Record what an operator saw and did: informer events and API requests, as bounded JSONL.

A race that corrupted a status in production happened once, in one interleaving of requests.
A recording keeps that interleaving: every event the informers delivered and every API
request the client sent, with its answer, in the order they happened, one JSON object per
line. :func:`setpoint.testing.replay` then plays the recorded requests back against the fake
client in the same order, so the race happens again, in a unit test, every time.

Turn it on with ``setpoint run --record FILE`` or ``ManagerOptions(record=RecordOptions(...))``
(:class:`RecordOptions`), or in a test with :func:`recording` around the code. Each line is one
of::

    {"seq": 1, "t": 0.0021, "type": "request", "sent": 0.0013, "actor": "gizmo:prod/g1",
     "method": "PUT", "path": "/apis/.../gizmos/g1/status", "params": {...}, "body": {...},
     "status": 200, "response": {...}}
    {"seq": 2, "t": 0.0107, "type": "event", "kind": "example.com/v1, Kind=Gizmo",
     "event": "update", "object": {...}}

``actor`` names who sent the request: the reconcile it ran in (``controller:namespace/name``),
a name set with :func:`actor` (a test's foreign writer), or ``null`` (informers, leader
election). ``t`` is seconds since the recording started, when the line was written (for a
request: when its answer arrived); a request's ``sent`` is when it went out.

Guarantees:
    - Bounded: once a line would take the file past ``max_bytes``, one last line
      ``{"type": "truncated"}`` is written and recording stops (the operator runs on).
    - Redacted: a Secret's ``data`` and ``stringData`` values and the ``token`` fields of
      TokenRequest/TokenReview are replaced by ``"<redacted>"`` wherever they appear
      (request bodies, responses, events, list items); request headers (credentials) are
      never recorded. ``managedFields`` are dropped (large, and no reconcile reads them).
    - Off costs nothing: each hook is one call returning ``None``.

Caveats:
    - Lines are written synchronously from the event loop thread (buffered; flushed when
      recording stops). It is a diagnosis tool: turn it on to catch a problem, not always.
    - Watch streams are recorded as the events the informers delivered, not as HTTP.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import orjson

from setpoint.observability.runtime import current_reconcile

__all__ = [
    "REDACTED",
    "RecordOptions",
    "Recorder",
    "active",
    "actor",
    "current_actor",
    "load",
    "recording",
    "redact",
    "set_recorder",
]

REDACTED: Final = "<redacted>"
"""What a redacted value is replaced by."""

_ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "setpoint_record_actor", default=None
)
_active: Recorder | None = None


@dataclass(frozen=True, kw_only=True)
class RecordOptions:
    """Where and how much to record (see the module docstring)."""

    path: str | Path
    """The JSONL file to write (created or truncated)."""

    max_bytes: int = 64 * 2**20
    """Stop recording (with a ``truncated`` line) before the file grows past this. 64 MiB
    holds tens of thousands of requests with their objects."""

    def __post_init__(self) -> None:
        if not str(self.path):
            raise ValueError("RecordOptions.path: give the file to record to")
        if self.max_bytes < 4096:
            raise ValueError(f"RecordOptions.max_bytes={self.max_bytes}: give at least 4096 bytes")


def active() -> Recorder | None:
    """The recorder in use, or ``None`` when nothing is recorded (the usual case)."""
    return _active


def set_recorder(recorder: Recorder | None) -> Recorder | None:
    """Install ``recorder`` (``None``: stop recording); return the one installed before."""
    global _active
    previous, _active = _active, recorder
    return previous


@contextlib.contextmanager
def actor(name: str) -> Iterator[None]:
    """Name who sends the requests made inside the block (a test's writer, a script)."""
    token = _ACTOR.set(name)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_actor() -> str | None:
    """Who the caller is: :func:`actor`'s name, else its reconcile, else ``None``."""
    name = _ACTOR.get()
    if name is not None:
        return name
    info = current_reconcile()
    if info is not None:
        return f"{info.controller}:{info.key}"
    return None


_SECRET_FIELDS: Final = ("data", "stringData")
_TOKEN_KINDS: Final = frozenset({"TokenRequest", "TokenReview"})


def redact(value: Any) -> Any:
    """A copy of ``value`` with secrets redacted and ``managedFields`` dropped.

    Objects are recognised by ``kind`` (a list's items too). Values that are not
    objects are returned as they are.
    """
    if isinstance(value, list):
        return [redact(item) for item in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("kind")
    out: dict[str, Any] = {}
    for key, item in value.items():
        new = item
        if key == "metadata" and isinstance(item, dict) and "managedFields" in item:
            new = {k: v for k, v in item.items() if k != "managedFields"}
        elif kind == "Secret" and key in _SECRET_FIELDS and isinstance(item, dict):
            new = dict.fromkeys(item, REDACTED)
        elif kind in _TOKEN_KINDS and key in ("spec", "status") and isinstance(item, dict):
            new = {k: (REDACTED if k == "token" else v) for k, v in item.items()}
        elif key == "items" and isinstance(item, list):
            new = [redact(entry) for entry in item]
        out[key] = new
    return out


class Recorder:
    """Writes the recording (see the module docstring); build it with :func:`recording`."""

    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        """What this recorder was asked for."""
        self._file: IO[bytes] | None = Path(options.path).open("wb")  # noqa: SIM115
        self._size = 0
        self._seq = 0
        self._started = time.monotonic()
        self.truncated = False
        """Whether the bound was reached (the file ends with a ``truncated`` line)."""

    def _write(self, entry: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._seq += 1
        entry = {"seq": self._seq, "t": round(time.monotonic() - self._started, 6), **entry}
        line = orjson.dumps(entry, default=str) + b"\n"
        if self._size + len(line) > self.options.max_bytes - 64:
            self._file.write(orjson.dumps({"seq": self._seq, "type": "truncated"}) + b"\n")
            self.truncated = True
            self.close()
            return
        self._size += len(line)
        self._file.write(line)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        body: Any,
        status: int | None,
        response: Any,
        sent: float | None = None,
    ) -> None:
        """Record one API request and its answer (``status`` ``None``: no answer arrived).

        ``sent`` is the ``time.monotonic()`` at which the request went out; the line is
        written when the answer arrives, so two requests in flight at once can be seen to
        overlap (``sent`` of one before ``t`` of the other).
        """
        self._write(
            {
                "type": "request",
                "sent": None if sent is None else round(sent - self._started, 6),
                "actor": current_actor(),
                "method": method,
                "path": path,
                "params": dict(params) if params else None,
                "body": redact(body) if not isinstance(body, bytes) else None,
                "status": status,
                "response": redact(response),
            }
        )

    def event(self, kind: str, event: str, obj: Any) -> None:
        """Record one informer event (``add``, ``update``, ``delete``) of ``kind``."""
        self._write({"type": "event", "kind": kind, "event": event, "object": redact(obj)})

    def close(self) -> None:
        """Flush and close the file; later calls record nothing."""
        file, self._file = self._file, None
        if file is not None:
            file.close()


@contextlib.contextmanager
def recording(options: RecordOptions) -> Iterator[Recorder]:
    """Record everything this process does inside the block (one recorder at a time).

    Raises:
        RuntimeError: another recording is already running.

    """
    if _active is not None:
        raise RuntimeError(
            f"already recording to {_active.options.path}; stop that recording first"
        )
    recorder = Recorder(options)
    set_recorder(recorder)
    try:
        yield recorder
    finally:
        set_recorder(None)
        recorder.close()


def load(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a recording, in order.

    Raises:
        ValueError: a line is not a JSON object; names the file and line.

    """
    entries: list[dict[str, Any]] = []
    with Path(path).open("rb") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
            if not isinstance(entry, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object per line")
            entries.append(entry)
    return entries
