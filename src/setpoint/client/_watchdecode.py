"""Splitting a watch response into events: :class:`WatchDecoder`.

The API server streams a watch as one JSON object per line (``{"type": "ADDED",
"object": {...}}``). The decoder is pure (bytes in, events out), so it is tested and fuzzed
without a server.

Guarantees:
    - Each byte is searched for a newline once: a long line arriving in many small chunks
      costs time linear in its length (the first version rescanned the buffer from its
      start on every chunk, 11.6 s of event-loop CPU for a 32 MiB line in 4 KiB chunks;
      ``bench/watch_decode.py``).
    - A line longer than ``max_line`` (16 MiB by default, client-go's limit; the watch
      event cap of issue 27's finding 4, ``ClientOptions.max_watch_line``) fails the watch
      with :class:`~setpoint.client.errors.ResponseTooLarge` as soon as the buffer passes
      the limit, before it is stored whole.
    - Anything that is not a watch event (not JSON, not an object, a missing or non-string
      ``type``, an ``object`` that is not an object, an ``ERROR`` whose ``code`` is not a
      number) raises :class:`~setpoint.client.errors.MalformedResponse`; an ``ERROR`` event
      raises the typed :class:`~setpoint.client.errors.ApiError` its Status names. No other
      exception type leaves :meth:`WatchDecoder.feed`.
    - Messages never quote the data: a watch of Secrets must not put one into a log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, NoReturn

import orjson

from setpoint.api.redaction import brief
from setpoint.client.errors import (
    ApiError,
    Gone,
    MalformedResponse,
    ResponseTooLarge,
    error_from_response,
)

__all__ = ["MAX_WATCH_LINE", "RawWatchEvent", "WatchDecoder"]

MAX_WATCH_LINE: Final = 16 * 1024 * 1024
"""The longest watch line accepted, in bytes (client-go's limit; etcd keeps objects under
1.5 MiB, so a real event is far smaller)."""


@dataclass(frozen=True, slots=True)
class RawWatchEvent:
    """One decoded event: its ``type`` and ``object`` (a JSON object, still untyped)."""

    type: str
    object: dict[str, Any]


class WatchDecoder:
    """Turns the chunks of one watch response into :class:`RawWatchEvent` objects.

    Args:
        url: Named in errors.
        max_line: The longest line accepted, in bytes.

    """

    def __init__(self, url: str, *, max_line: int = MAX_WATCH_LINE) -> None:
        if max_line < 1:
            raise ValueError(f"WatchDecoder max_line={max_line} must be at least 1 byte")
        self._url = url
        self._max_line = max_line
        self._partial = bytearray()  # the start of a line whose newline has not arrived

    @property
    def pending(self) -> int:
        """Bytes received that do not end in a newline yet."""
        return len(self._partial)

    def feed(self, chunk: bytes) -> list[RawWatchEvent]:
        """Add ``chunk``; return the events of every line it completed.

        Only ``chunk`` is searched for newlines, never what came before it, so the work is
        linear in the bytes received however a line is split into chunks.

        Raises:
            ResponseTooLarge: a line is longer than ``max_line`` (a MalformedResponse).
            MalformedResponse: a line is not a watch event.
            ApiError: (a subclass of it) for an ``ERROR`` event, e.g. ``Gone`` for a
                resourceVersion that is too old.

        """
        events: list[RawWatchEvent] = []
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:end]
            start = end + 1
            if self._partial:
                size = len(self._partial) + len(piece)
                if size > self._max_line:
                    self._too_long(size)
                self._partial += piece
                line = bytes(self._partial)
                self._partial.clear()
            else:
                if len(piece) > self._max_line:
                    self._too_long(len(piece))
                line = piece
            if line.strip():
                event = self._decode(line)
                if event is not None:
                    events.append(event)
        rest = len(chunk) - start
        if rest:
            if len(self._partial) + rest > self._max_line:
                self._too_long(len(self._partial) + rest)
            self._partial += chunk[start:]
        return events

    def _too_long(self, size: int) -> NoReturn:
        self._partial.clear()
        raise ResponseTooLarge(
            f"watch {self._url} sent an event longer than {self._max_line} bytes (at least "
            f"{size}), the cap of ClientOptions.max_watch_line; etcd keeps objects under "
            "1.5 MiB, so the stream is treated as broken (raise ClientOptions.max_watch_line "
            "if your objects are really that large)",
            url=self._url,
            method="GET",
            limit=self._max_line,
            setting="ClientOptions.max_watch_line",
        )

    def _malformed(self, line: bytes, problem: str) -> MalformedResponse:
        return MalformedResponse(
            f"watch {self._url} sent a line of {len(line)} bytes that is not a watch event "
            f"({problem})",
            url=self._url,
        )

    def _decode(self, line: bytes) -> RawWatchEvent | None:
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise self._malformed(line, f"not JSON: {exc.msg} at byte {exc.pos}") from None
        if not isinstance(raw, dict):
            raise self._malformed(line, f"a JSON {_json_type(raw)}, not an object")
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise self._malformed(line, f"its type is {_json_type(kind)}, not a string")
        obj = raw.get("object")
        if obj is None:
            obj = {}
        if not isinstance(obj, dict):
            raise self._malformed(line, f"its object is a JSON {_json_type(obj)}, not an object")
        if kind == "ERROR":
            raise self._error(line, obj)
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise self._malformed(line, f"object.metadata is a JSON {_json_type(meta)}")
        return RawWatchEvent(kind, obj)

    def _error(self, line: bytes, status: dict[str, Any]) -> ApiError | MalformedResponse:
        code = status.get("code")
        if code is None:
            code = 500
        if isinstance(code, bool) or not isinstance(code, int):
            return self._malformed(line, f"an ERROR whose code is {brief(code, limit=30)}")
        if not 100 <= code <= 599:
            code = 500
        error = error_from_response(code, status, method="GET", url=self._url)
        if code == 410 and not isinstance(error, Gone):
            error = Gone(
                str(error), code=410, reason="Gone", status=status, method="GET", url=self._url
            )
        return error


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
    }.get(type(value), type(value).__name__)
