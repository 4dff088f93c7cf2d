"""What the conversion and admission handlers share about large reviews (issue 27, finding 2).

- :class:`ReviewWorkers`: the threads that decode and answer reviews too large for the event
  loop, at most ``threads`` at once (``WebhookServerOptions.review_workers``);
- :func:`check_review_values`: the count of a body's JSON values, taken before decoding, that
  refuses a review whose decode would take too much memory
  (``WebhookServerOptions.max_review_values``), as :class:`ReviewTooLarge`;
- the split: :func:`split_review`, :func:`split_part`, :func:`split_objects` and
  :func:`load_part` take a large review apart without building its values (msgspec, into
  :class:`msgspec.Raw` slices of the body), then decode one part at a time (orjson), so no
  single call that holds the interpreter lock spans more than one object;
- the nesting rule both paths share, orjson's (:data:`MAX_DEPTH`, :func:`exceeds_depth`):
  the split path measures a body's depth itself, since msgspec's own limit follows the
  interpreter, and hands a body msgspec cannot split for its depth back to the whole-body
  path (:class:`TooDeepToSplit`).

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
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
import orjson

from setpoint.api.errors import SetpointError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ABSENT",
    "MAX_DEPTH",
    "THREAD_PREFIX",
    "NotJSON",
    "ReviewParts",
    "ReviewTooLarge",
    "ReviewWorkers",
    "TooDeepToSplit",
    "WrongType",
    "check_object_count",
    "check_review_values",
    "count_review_values",
    "exceeds_depth",
    "json_type",
    "load_part",
    "split_objects",
    "split_part",
    "split_review",
]

T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)
D = TypeVar("D")

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


# ------------------------------------------------------------------------------ nesting

MAX_DEPTH: Final = 1024
"""The deepest nesting of arrays and objects a review may have: orjson's limit (1,024 levels
decode, 1,025 do not), which the whole-body path applies on every Python. The split path
applies the same rule itself (:func:`exceeds_depth`): msgspec's own limit is the
interpreter's C recursion limit, which moves with the Python version (about 1,000 levels on
3.11, 1,500 on 3.12, 10,000 on 3.13) and with the depth of the calling stack."""

_DEPTH_BLOCK: Final = 256 * 1024
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'[]{}"')
"""Every byte but the brackets and the quote: what :func:`exceeds_depth` deletes first."""
_STEP: Final = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def exceeds_depth(
    data: bytes | bytearray | memoryview, limit: int = MAX_DEPTH, *, block: int = _DEPTH_BLOCK
) -> bool:
    """Whether the JSON in ``data`` nests arrays and objects deeper than ``limit`` levels.

    Expected flow:
        :func:`split_review` calls it on every body it splits, before msgspec reads it, so
        a body nested deeper than :data:`MAX_DEPTH` is refused there (400) exactly when
        ``orjson.loads`` would refuse it on the whole-body path, on every Python, and before
        any check that could answer otherwise (a 413 for too many objects, say).

    Guarantees:
        For valid JSON, ``True`` exactly when some array or object is nested more than
        ``limit`` levels deep (``[[]]`` is 2 levels), counting only brackets outside
        strings (escaped quotes and backslashes in them are followed). For bytes that are not JSON,
        ``True`` only where ``orjson.loads`` fails too: the part of ``data`` before the first
        bracket past ``limit`` is then either a valid prefix nested past it, or invalid.
        The work is done ``block`` bytes at a time (256 KiB: a few C calls of at most a few
        milliseconds each), so a thread running it yields the interpreter between blocks.

    Caveats:
        Costs about 3.5 ms per MiB of a typical review (55 ms for 16 MiB); a body built to
        nest close to ``limit`` everywhere costs up to ten times that, still bounded by the
        body cap and yielding between blocks (docs/benchmarks.md).

    Errors:
        None: any bytes give an answer.

    """
    view = memoryview(data).cast("B")
    size = len(view)
    depth = 0
    inside = False  # whether the block starts inside a string
    start = 0
    while start < size:
        end = min(start + block, size)
        while end < size and view[end - 1] == 0x5C:  # never split a run of backslashes
            end += 1
        piece = view[start:end].tobytes()
        start = end
        if b"\\" in piece:
            # Escaped backslashes first, then escaped quotes: every quote left delimits a
            # string (a block never ends inside a run of backslashes).
            piece = piece.replace(b"\\\\", b"").replace(b'\\"', b"")
        structure = piece.translate(None, _NOT_STRUCTURE)
        if b'"' in structure:
            parts = structure.split(b'"')
            brackets = b"".join(parts[1 if inside else 0 :: 2])
            inside ^= len(parts) % 2 == 0
        else:
            brackets = b"" if inside else structure
        reached = _nest(brackets, depth, limit)
        if reached is None:
            return True
        depth = reached
    return False


def _nest(brackets: bytes, depth: int, limit: int) -> int | None:
    """The depth after ``brackets`` (only ``[]{}``) from ``depth``; ``None`` past ``limit``.

    Where ``limit`` is far, a slice of as many brackets as levels are left cannot pass it,
    so only its net change is counted (``bytes.count``); near ``limit``, every prefix is.
    """
    at, end = 0, len(brackets)
    while at < end:
        room = limit - depth
        if room >= 64:
            piece = brackets[at : at + room]
            at += room
        else:
            piece = brackets[at : at + 4096]
            at += 4096
            if max(accumulate(map(_STEP.__getitem__, piece), initial=depth)) > limit:
                return None
        depth += 2 * (piece.count(b"[") + piece.count(b"{")) - len(piece)
    return depth


class TooDeepToSplit(SetpointError, ValueError):
    """msgspec cannot split this body for its nesting, though orjson would decode it.

    Raised by the split functions when msgspec reaches the interpreter's C recursion limit
    in a body :func:`exceeds_depth` found within :data:`MAX_DEPTH` (on Python 3.11, about
    1,000 levels less the calling stack; never on 3.12 and 3.13, whose limits are higher).
    The handlers then answer the body on the whole-body path, whose verdict it is by
    definition. That path decodes the body in one call, holding the interpreter (and so the
    event loop) for it: bounded by ``max_review_values``, it measured 190 ms for a 2 MiB
    body of 700,000 empty arrays nested 1,000 deep (Python 3.11).
    """


# ------------------------------------------------------------------------------ the split

ABSENT: Final = msgspec.Raw(b"")
"""A :class:`ReviewParts` (or request) field the body does not hold. A present value is
never empty, so ``len(part) == 0`` means absent; :func:`load_part` reads it as ``None``,
as ``dict.get`` on a decoded body would."""


class ReviewParts(msgspec.Struct, gc=False, rename={"api_version": "apiVersion"}):
    """The top of a review (either kind), each field its undecoded bytes or :data:`ABSENT`.

    Other fields are decoded once, to be checked as ``orjson.loads`` would check them, and
    dropped. A repeated key keeps its last value, as ``orjson.loads`` does.
    """

    api_version: msgspec.Raw = ABSENT
    kind: msgspec.Raw = ABSENT
    request: msgspec.Raw = ABSENT


class _AnyObject(msgspec.Struct, gc=False):
    """Any JSON object, fields skipped: what the first pass over ``objects`` builds."""


_FIELDS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
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


def split_review(body: bytes, *, max_size: int, review: str, path: str) -> ReviewParts:
    """The top of a review's ``body``: ``apiVersion``, ``kind`` and ``request``, undecoded.

    Expected flow:
        The first step of a large review, in a review worker, after
        :func:`check_review_values`: then :func:`split_part` for ``request`` and
        :func:`load_part` for each value the handler reads.

    Guarantees:
        The nesting rule first: a body nested deeper than :data:`MAX_DEPTH` is refused, as
        ``orjson.loads`` refuses it (:func:`exceeds_depth`). Then one msgspec scan of the
        body, building one :class:`msgspec.Raw` (a view into ``body``) per top-level field
        and no other value; the whole body's JSON syntax is checked. Fields other than the
        three are decoded (orjson, each alone) and dropped, so what ``orjson.loads`` of the
        whole body refuses there (bad UTF-8, a number out of range) is refused here too.
        Strings and numbers of the three are checked where a part is decoded.

    Caveats:
        A repeated key is checked under its last value only. A field other than the three
        that is larger than ``max_size`` is refused (413) rather than decoded, as an object
        that large would be.

    Errors:
        NotJSON: the body is not JSON (msgspec's message says where), or nested too deep,
            or a field other than the three does not decode (naming it).
        WrongType: the body is JSON but not an object (``where`` is ``""``).
        TooDeepToSplit: msgspec cannot split the body for its nesting (decode it whole).
        ReviewTooLarge: a field other than the three is larger than ``max_size``.

    """
    if exceeds_depth(body):
        raise NotJSON(f"arrays and objects nested deeper than {MAX_DEPTH} levels")
    try:
        fields = _decode(_FIELDS, body)
    except msgspec.ValidationError as exc:
        _decode(_ANY, body)  # not an object: first, is it JSON at all?
        raise _wrong_type(exc, "") from None
    return _known(fields, ReviewParts, "", max_size=max_size, review=review, path=path)


def split_part(
    part: msgspec.Raw, fields: type[S], *, where: str, max_size: int, review: str, path: str
) -> S:
    """``part``, a JSON object, split into ``fields``, a Struct of :class:`msgspec.Raw`.

    Other fields are decoded alone (orjson) and dropped, as in :func:`split_review`;
    ``where`` prefixes their names in messages (``"request."``). The caller has checked that
    the part is an object (its first byte is ``{``, :func:`json_type`); the body's syntax
    and depth were checked by :func:`split_review`.

    Errors:
        NotJSON: a field other than ``fields``' does not decode (naming it).
        ReviewTooLarge: such a field is larger than ``max_size``.
        TooDeepToSplit: msgspec cannot split the part for its nesting.

    """
    try:
        found = _decode(_FIELDS, part)
    except msgspec.ValidationError as exc:  # not what the caller checked
        raise NotJSON(f"{where.rstrip('.') or 'the body'}: {exc}") from None
    return _known(found, fields, where, max_size=max_size, review=review, path=path)


def _known(
    found: dict[str, msgspec.Raw],
    fields: type[S],
    where: str,
    *,
    max_size: int,
    review: str,
    path: str,
) -> S:
    """``fields`` from the parts ``found``; each other part decoded (to check it) and dropped."""
    names = _struct_names(fields)
    known: dict[str, msgspec.Raw] = {}
    for key, part in found.items():
        attr = names.get(key)
        if attr is None:  # orjson's verdict on a field the handler does not read
            load_part(part, max_size, field=f"{where}{key}", review=review, path=path)
        else:
            known[attr] = part
    return fields(**known)


_NAMES: dict[type[msgspec.Struct], dict[str, str]] = {}


def _struct_names(fields: type[msgspec.Struct]) -> dict[str, str]:
    """A Struct's JSON field names -> its attribute names."""
    names = _NAMES.get(fields)
    if names is None:
        names = _NAMES[fields] = dict(
            zip(fields.__struct_encode_fields__, fields.__struct_fields__, strict=True)
        )
    return names


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
        TooDeepToSplit: msgspec cannot split the list for its nesting.

    """
    try:
        count = len(_decode(_OBJECT_LIST, part))
    except msgspec.ValidationError as exc:
        raise _wrong_type(exc, "request.objects") from None
    check_object_count(count, max_objects, review=review, path=path)
    parts = _decode(_RAW_LIST, part)
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


def _decode(decoder: msgspec.json.Decoder[D], data: bytes | msgspec.Raw) -> D:
    """``decoder.decode(data)``, its failures as the split's errors.

    Bad syntax is :class:`NotJSON`, a nesting msgspec cannot take :class:`TooDeepToSplit`;
    a :class:`msgspec.ValidationError` is left to the caller.
    """
    try:
        return decoder.decode(data)
    except RecursionError:
        raise TooDeepToSplit(
            "msgspec cannot split a review nested this deep on this Python; it is decoded whole"
        ) from None
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as exc:
        raise NotJSON(str(exc)) from None


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
