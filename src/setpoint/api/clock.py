"""Time as a seam: a :class:`Clock` protocol, the event loop's clock, and a manual one for tests.

The work queue, the rate limiters and leader election read time and set timers through a
:class:`Clock` instead of calling ``loop.time()``, ``asyncio.sleep`` or ``asyncio.timeout``
directly. :class:`LoopClock` (the default everywhere) is the running loop's clock;
:class:`ManualClock` only moves when a test says so, so a test can check a backoff or a lease
deadline exactly without sleeping. :func:`clock_sleep` and :func:`clock_timeout` are
``asyncio.sleep`` and ``asyncio.timeout`` on a given clock.

The module lives in :mod:`setpoint.api` because every layer above uses it (the controller's
queue, the manager's leader election) and it does no I/O: only time and asyncio timers.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

__all__ = [
    "Clock",
    "LoopClock",
    "ManualClock",
    "TimerHandle",
    "clock_sleep",
    "clock_timeout",
]


class TimerHandle(Protocol):
    """A scheduled callback that can be cancelled (``asyncio.TimerHandle`` satisfies it)."""

    def cancel(self) -> None:
        """Stop the callback from running; cancelling twice or after it ran does nothing."""


class Clock(Protocol):
    """Monotonic time in seconds, and one-shot timers on the same time line.

    The work queue and the rate limiters take a clock so tests can drive time by hand
    (:class:`ManualClock`) instead of sleeping.
    """

    def now(self) -> float:
        """Return the current time in seconds; only differences between readings matter."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` (synchronously, in the loop thread) once ``now() >= when``."""
        ...


class LoopClock:
    """The running asyncio loop's clock and timers (``loop.time()`` / ``loop.call_at``).

    The loop is looked up on every call rather than captured at construction, so a queue can
    be built before the loop starts. :meth:`now` also works from other threads once the clock
    has been used inside a loop (a metrics scrape on a server thread reads in-flight ages),
    because ``loop.time()`` is safe to call from anywhere. :meth:`call_at` needs a running loop.
    """

    __slots__ = ("_loop",)

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def now(self) -> float:
        """``loop.time()`` of the running loop (or of the last loop seen, off the loop thread)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is None:
                raise RuntimeError(
                    "LoopClock.now() was called outside a running event loop before the clock "
                    "was ever used inside one; call it from async code"
                ) from None
            loop = self._loop
        else:
            self._loop = loop
        return loop.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """``loop.call_at`` on the running loop."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        return loop.call_at(when, callback)


class _ManualTimer:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock for tests: time stands still until :meth:`advance` moves it.

    Timers fire inside :meth:`advance`, in deadline order (ties in scheduling order), with
    :meth:`now` set to each timer's deadline while its callback runs, so callbacks observe the
    time they asked for. Callbacks may schedule further timers; those fire in the same call if
    they fall due before the target time.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._seq = 0
        self._timers: list[tuple[float, int, _ManualTimer]] = []

    def now(self) -> float:
        """Return the current manual time."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Schedule ``callback`` for when :meth:`advance` reaches ``when``."""
        timer = _ManualTimer(when, callback)
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, timer))
        return timer

    @property
    def pending_timers(self) -> int:
        """How many timers are scheduled and not cancelled (tests use it to spot leaks)."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    @property
    def next_deadline(self) -> float | None:
        """The earliest live timer's deadline, or ``None`` when nothing is scheduled."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0), firing every timer that falls due."""
        if seconds < 0:
            raise ValueError(f"ManualClock.advance({seconds}): time only moves forward")
        self.advance_to(self._now + seconds)

    def advance_to(self, target: float) -> None:
        """Move time forward to exactly ``target``, firing every timer due by then.

        Prefer it to :meth:`advance` for landing on a deadline: repeated float additions drift.
        """
        if target < self._now:
            raise ValueError(
                f"ManualClock.advance_to({target}): time only moves forward (now={self._now})"
            )
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.cancelled = True  # a timer fires once; cancelling it afterwards is a no-op
            timer.callback()
        self._now = target


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
