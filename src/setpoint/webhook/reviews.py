"""What the conversion and admission handlers share about large reviews (issue 27, finding 2).

- :class:`ReviewWorkers`: the threads that decode and answer reviews too large for the event
  loop, at most ``threads`` at once (``WebhookServerOptions.review_workers``);
- :func:`check_review_values`: the count of a body's JSON values, taken before decoding, that
  refuses a review whose decode would take too much memory
  (``WebhookServerOptions.max_review_values``), as :class:`ReviewTooLarge`;
- the split: :func:`split_review`, :func:`split_part`, :func:`split_objects` and
  :func:`load_part` take a large review apart without building its values (msgspec, into
  :class:`msgspec.Raw` slices of the body), then decode one part at a time (orjson), so no
  single call that holds the interpreter lock spans more than one object.

Why split: ``orjson.loads`` of a whole body is one C call that holds the GIL however many
objects the body carries, so the event loop waits for it even when a worker thread makes the
call (464 ms for 7 MiB, 869 ms for 16 MiB measured on a busy machine, docs/benchmarks.md).
msgspec scans the envelope and the ``objects`` list at memory speed, making one small
:class:`msgspec.Raw` per part; each object is then decoded, converted and encoded alone, and
the loop gets the interpreter between any two of those calls.
:data:`~setpoint.webhook.options.MAX_OBJECT_SIZE` bounds the largest single decode left.

The figures behind the defaults are in :mod:`setpoint.webhook.options`.
"""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
import orjson

from setpoint.api.errors import SetpointError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ABSENT",
    "THREAD_PREFIX",
    "NotJSON",
    "ReviewParts",
    "ReviewTooLarge",
    "ReviewWorkers",
    "WrongType",
    "check_object_count",
    "check_review_values",
    "count_review_values",
    "json_type",
    "load_part",
    "split_objects",
    "split_part",
    "split_review",
]

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)

THREAD_PREFIX: Final = "webhook-review"
"""The name every review worker thread starts with (in thread dumps and profiles)."""


class ReviewTooLarge(SetpointError, ValueError):
    """A review holds more JSON values than the webhook decodes; the handler answers 413.

    The message names the path, the count, the limit and the option that raises it.
    """


def count_review_values(body: bytes) -> int:
    """An upper bound, nearly, on the JSON values in ``body``, without decoding it.

    Every object or array opens with ``{`` or ``[``, and every value after the first in a
    container follows a ``,``: their count is at least the number of containers and values
    but one per container. The same bytes inside strings count too (an overestimate, which
    only makes the check stricter for strings full of them). ``bytes.count`` runs at memory
    speed and allocates nothing.
    """
    return body.count(b"{") + body.count(b"[") + body.count(b",")


def check_review_values(body: bytes, limit: int, *, review: str, path: str) -> None:
    """Refuse ``body`` before decoding when it holds more than ``limit`` JSON values.

    Expected flow:
        Called first on every review body, before ``orjson.loads``; the handler turns the
        error into a 413 answer.

    Guarantees:
        A body that passes decodes to at most ~160 bytes of Python objects per counted value
        (the worst shapes measured, nested one-key objects) plus its strings' bytes, so
        ``limit`` bounds the memory one decode takes.

    Caveats:
        The count is of bytes, not tokens: ``{``, ``[`` and ``,`` inside strings count too.
        A real review holds about 62 per KiB; a body of little but such characters in
        strings is refused sooner than its decoded size would require.

    Errors:
        ReviewTooLarge: past the limit, naming the review kind, the path, the count, the
            limit and ``WebhookServerOptions.max_review_values``.

    """
    count = count_review_values(body)
    if count > limit:
        raise ReviewTooLarge(
            f"the {review} sent to {path} holds about {count} JSON values ({len(body)} "
            f"bytes), more than this webhook decodes ({limit}: decoding costs up to ~160 "
            "bytes of memory per value); if the API server really sends reviews this large, "
            "raise WebhookServerOptions.max_review_values"
        )


# ------------------------------------------------------------------------------ the split

ABSENT: Final = msgspec.Raw(b"")
"""A :class:`ReviewParts` (or request) field the body does not hold. A present value is
never empty, so ``len(part) == 0`` means absent; :func:`load_part` reads it as ``None``,
as ``dict.get`` on a decoded body would."""


class ReviewParts(msgspec.Struct, gc=False, rename={"api_version": "apiVersion"}):
    """The top of a review (either kind), each field its undecoded bytes or :data:`ABSENT`.

    Other fields are skipped: their JSON syntax is checked, their values are not built.
    A repeated key keeps its last value, as ``orjson.loads`` does.
    """

    api_version: msgspec.Raw = ABSENT
    kind: msgspec.Raw = ABSENT
    request: msgspec.Raw = ABSENT


class _AnyObject(msgspec.Struct, gc=False):
    """Any JSON object, fields skipped: what the first pass over ``objects`` builds."""


_REVIEW: Final = msgspec.json.Decoder(ReviewParts)
_ANY: Final = msgspec.json.Decoder(msgspec.Raw)
_OBJECT_LIST: Final = msgspec.json.Decoder(list[_AnyObject])
_RAW_LIST: Final = msgspec.json.Decoder(list[msgspec.Raw])
_EXPECTED_OBJECT: Final = re.compile(r"Expected `object`, got `(\w+)`(?: - at `\$\[(\d+)\]`)?")
_TYPES: Final = {
    "object": ("object", "dict"),
    "array": ("array", "list"),
    "str": ("string", "str"),
    "bool": ("boolean", "bool"),
    "null": ("null", "NoneType"),
    "int": ("number", "int"),
    "float": ("number", "float"),
}
"""msgspec's name of a JSON value's type -> (JSON's name, the Python type orjson builds)."""


class NotJSON(SetpointError, ValueError):
    """Bytes of a review that are not JSON; the message says what is wrong, and where.

    The handlers answer it as their ``Malformed...`` error (HTTP 400).
    """


class WrongType(SetpointError, ValueError):
    """A value that had to be a JSON object is not one; the handlers word the message."""

    def __init__(self, where: str, got: str) -> None:
        self.where = where
        """``""`` for the body itself, else the field path (``request.objects[3]``)."""
        self.json_type, self.python_type = _TYPES.get(got, ("number", got))
        """The value's type as JSON names it (``array``), and as Python would (``list``)."""
        super().__init__(f"{where or 'the body'} is a JSON {self.json_type}, not an object")


def json_type(part: msgspec.Raw) -> str:
    """The JSON type of an undecoded value, from its first byte (``null`` when absent).

    The value has passed msgspec's syntax check, so its first byte decides: ``{`` object,
    ``[`` array, ``"`` string, ``t``/``f`` boolean, ``n`` null, anything else a number.
    """
    if not len(part):
        return "null"
    first = memoryview(part)[0]
    return {
        ord("{"): "object",
        ord("["): "array",
        ord('"'): "string",
        ord("t"): "boolean",
        ord("f"): "boolean",
        ord("n"): "null",
    }.get(first, "number")


def split_review(body: bytes) -> ReviewParts:
    """The top of a review's ``body``: ``apiVersion``, ``kind`` and ``request``, undecoded.

    Expected flow:
        The first step of a large review, in a review worker, after
        :func:`check_review_values`: then :func:`split_part` for ``request`` and
        :func:`load_part` for each value the handler reads.

    Guarantees:
        One msgspec scan of the body, building three :class:`msgspec.Raw` (views into
        ``body``) and no other value, whatever the body holds; the whole body's JSON syntax
        is checked (strings' UTF-8 and numbers' range are checked where a part is decoded).

    Caveats:
        msgspec nests as deep as the interpreter's recursion limit (~1,000 levels) where
        orjson allows 1,024: a body nested between the two is refused here and not when
        decoded whole. Kubernetes objects are nowhere near either.

    Errors:
        NotJSON: the body is not JSON (msgspec's message says where).
        WrongType: the body is JSON but not an object (``where`` is ``""``).

    """
    try:
        return _REVIEW.decode(body)
    except msgspec.ValidationError as exc:
        _check_syntax(body)  # not an object: first, is it JSON at all?
        raise _wrong_type(exc, "") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise NotJSON(_syntax_error(exc)) from None


def split_part(part: msgspec.Raw, decoder: msgspec.json.Decoder[S]) -> S:
    """``part``, a JSON object, split into ``decoder``'s Struct of :class:`msgspec.Raw`.

    Other fields are skipped. The caller has checked that the part is an object (its first
    byte is ``{``, :func:`json_type`); the body's syntax was checked by :func:`split_review`.

    Errors:
        NotJSON: only if the part is not what the caller checked (a nesting past msgspec's).

    """
    try:
        return decoder.decode(part)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise NotJSON(_syntax_error(exc)) from None


def load_part(part: msgspec.Raw, limit: int, *, field: str, review: str, path: str) -> Any:
    """``part`` decoded (``None`` when :data:`ABSENT`), if it is at most ``limit`` bytes.

    Expected flow:
        Called for each value a handler reads: the envelope's strings and each object,
        one call per part, so one call holds the interpreter for one part at most.

    Guarantees:
        No decode of more than ``limit`` bytes (``WebhookServerOptions.max_object_size``);
        the value is exactly what ``orjson.loads`` of the whole body would have held there.

    Errors:
        ReviewTooLarge: larger than ``limit``, naming ``field``, its size, the limit and
            the option that raises it (the handler answers 413).
        NotJSON: orjson refuses the part (bad UTF-8, a number out of range), naming
            ``field``.

    """
    size = len(part)
    if not size:
        return None
    if size > limit:
        raise ReviewTooLarge(
            f"{field} of the {review} sent to {path} is {size} bytes of JSON, more than one "
            f"object may be ({limit} bytes; kube-apiserver accepts no request body over "
            "3 MiB); if the API server really sends objects this large, raise "
            "WebhookServerOptions.max_object_size"
        )
    try:
        return orjson.loads(memoryview(part))
    except orjson.JSONDecodeError as exc:
        raise NotJSON(f"{field}: {exc}") from None


def split_objects(
    part: msgspec.Raw, *, max_objects: int, max_size: int, review: str, path: str
) -> list[msgspec.Raw]:
    """A review's ``objects`` list (its first byte is ``[``), one undecoded part per object.

    Expected flow:
        After the envelope checks, in the review worker; then the handler decodes,
        converts and encodes the parts one at a time (:func:`load_part`).

    Guarantees:
        Two msgspec scans. The first builds one empty Struct per item and stops at the
        first item that is not an object, so a list of scalars costs nothing; it counts the
        objects. Only a list of at most ``max_objects`` objects is split into parts (the
        second scan, one :class:`msgspec.Raw` per object), so neither scan builds more
        than ``max_review_values / 2`` values or ``max_objects`` parts. Every part
        returned is an object of at most ``max_size`` bytes.

    Caveats:
        The first scan's cost grows with the list's length up to ``max_review_values / 2``
        objects (``[{},{},...]``); measured in docs/benchmarks.md.

    Errors:
        WrongType: an item is not an object, naming the first (``request.objects[3]``).
        ReviewTooLarge: more than ``max_objects`` objects, or an object larger than
            ``max_size`` bytes (naming the first, its index and size), each naming the
            option that raises it.
        NotJSON: an item msgspec refuses (a number out of range).

    """
    try:
        count = len(_OBJECT_LIST.decode(part))
    except msgspec.ValidationError as exc:
        raise _wrong_type(exc, "request.objects") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise NotJSON(_syntax_error(exc)) from None
    check_object_count(count, max_objects, review=review, path=path)
    parts = _RAW_LIST.decode(part)
    for index, item in enumerate(parts):
        if len(item) > max_size:
            load_part(item, max_size, field=f"request.objects[{index}]", review=review, path=path)
    return parts


def check_object_count(count: int, limit: int, *, review: str, path: str) -> None:
    """Refuse a review of more than ``limit`` objects (``max_review_objects``), both paths.

    Errors:
        ReviewTooLarge: naming the count, the limit and the option (the handler answers 413).

    """
    if count > limit:
        raise ReviewTooLarge(
            f"the {review} sent to {path} carries {count} objects, more than this webhook "
            f"takes in one review ({limit}); if the API server really sends lists this "
            "long, raise WebhookServerOptions.max_review_objects"
        )


def _check_syntax(body: bytes) -> None:
    try:
        _ANY.decode(body)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise NotJSON(_syntax_error(exc)) from None


def _syntax_error(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested deeper than the decoder allows"
    return str(exc)


def _wrong_type(exc: msgspec.ValidationError, where: str) -> ValueError:
    """``exc`` (msgspec: ``Expected `object`, got `str` - at `$[2]```) as a WrongType."""
    found = _EXPECTED_OBJECT.fullmatch(str(exc))
    if found is None:  # "Number out of range - at `$[1]`": not JSON orjson would decode
        return NotJSON(f"{where or 'the body'}: {exc}")
    got, index = found.groups()
    return WrongType(f"{where}[{index}]" if index is not None else where, got)


class ReviewWorkers:
    """The threads that decode and answer large reviews: at most ``threads`` at once.

    Expected flow:
        The webhook server makes one and hands it to every conversion and admission handler;
        a handler awaits :meth:`run` with the CPU-bound part of a review (decode, check,
        convert, encode) when the body is larger than its inline size, and runs it inline
        otherwise. :meth:`close` at server stop.

    Guarantees:
        At most ``threads`` functions run at once, across every handler sharing this
        instance; the others wait in order. A waiting call whose awaiting task is cancelled
        (its request went away) never runs. The event loop thread never runs the function,
        so probes, other webhooks and the controllers keep their loop while a large review
        is converted.

    Caveats:
        Python runs one thread at a time: a worker's bytecode yields the interpreter to the
        loop every few milliseconds (``sys.getswitchinterval()``), but a single C call
        does not. The handlers therefore split a large review (:func:`split_review`) and
        decode it one object at a time; the longest single call left is the decode of
        one object (at most ``max_object_size``) or one scan of a body (measured in
        docs/benchmarks.md). A function already running when its request is cancelled runs
        to its end (a thread cannot be stopped), still holding its worker.

    Errors:
        Exception: whatever the function raises, re-raised to the awaiting caller.

    """

    def __init__(self, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"ReviewWorkers(threads={threads}) must have at least one thread")
        self.threads = threads
        """How many functions run at once, at most."""
        self._executor: ThreadPoolExecutor | None = None

    async def run(self, fn: Callable[..., T], /, *args: object) -> T:
        """``fn(*args)`` in a worker thread, once one is free; its result or its exception."""
        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(
                max_workers=self.threads, thread_name_prefix=THREAD_PREFIX
            )
        return await asyncio.wrap_future(executor.submit(fn, *args))

    def close(self) -> None:
        """Drop waiting calls and let the threads end after the ones running; reusable after."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
