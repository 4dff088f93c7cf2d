"""Sleeping and timeouts on an injectable :class:`~setpoint.controller.ratelimit.Clock`.

Leader election is a protocol about time. Driving it from the clock seam (rather than
``asyncio.sleep`` and ``asyncio.timeout``, which read the loop's clock) lets unit tests move
time with a :class:`~setpoint.controller.ratelimit.ManualClock` and check every deadline
exactly, without sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from setpoint.controller.ratelimit import Clock

__all__ = ["clock_sleep", "clock_timeout"]

T = TypeVar("T")


async def clock_sleep(clock: Clock, seconds: float) -> None:
    """Wait until ``clock`` has advanced by ``seconds`` (yield once when ``seconds <= 0``)."""
    if seconds <= 0:
        await asyncio.sleep(0)
        return
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    handle = clock.call_at(clock.now() + seconds, wake)
    try:
        await future
    finally:
        handle.cancel()


async def clock_timeout(clock: Clock, awaitable: Awaitable[T], seconds: float) -> T:
    """Await ``awaitable``, cancelling it and raising ``TimeoutError`` after ``seconds``.

    Time is read from ``clock``. Cancelling the caller cancels the awaited work too.
    """
    task = asyncio.ensure_future(awaitable)
    if seconds <= 0:
        task.cancel()
    expired = False

    def expire() -> None:
        nonlocal expired
        if not task.done():
            expired = True
            task.cancel()

    handle = clock.call_at(clock.now() + seconds, expire) if seconds > 0 else None
    try:
        return await task
    except asyncio.CancelledError:
        if (expired or seconds <= 0) and not _caller_cancelled():
            raise TimeoutError(f"no answer within {seconds:.3g}s") from None
        raise
    finally:
        if handle is not None:
            handle.cancel()
        if not task.done():
            task.cancel()


def _caller_cancelled() -> bool:
    """Whether the current task itself is being cancelled (not just the awaited work)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0
