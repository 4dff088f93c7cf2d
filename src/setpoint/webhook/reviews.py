"""What the conversion and admission handlers share about large reviews (issue 27, finding 2).

- :class:`ReviewWorkers`: the threads that decode and answer reviews too large for the event
  loop, at most ``threads`` at once (``WebhookServerOptions.review_workers``);
- :func:`check_review_values`: the count of a body's JSON values, taken before decoding, that
  refuses a review whose decode would take too much memory
  (``WebhookServerOptions.max_review_values``), as :class:`ReviewTooLarge`.

The figures behind the defaults are in :mod:`setpoint.webhook.options`.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final, TypeVar

from setpoint.api.errors import SetpointError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "THREAD_PREFIX",
    "ReviewTooLarge",
    "ReviewWorkers",
    "check_review_values",
    "count_review_values",
]

T = TypeVar("T")

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
        does not; ``orjson.loads`` of a whole body is one call, so the loop waits for one
        decode of the largest body a cap allows (measured in docs/benchmarks.md). The body
        caps and :func:`check_review_values` bound that wait. A function already running
        when its request is cancelled runs to its end (a thread cannot be stopped), still
        holding its worker.

    Errors:
        Whatever the function raises, re-raised to the awaiting caller.

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
