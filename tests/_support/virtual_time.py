"""Virtual time for unit tests of code that takes a ``Clock`` (``setpoint.api.clock``).

Code under test reads time and sets its timers through a :class:`~setpoint.api.clock.Clock`;
a test passes a :class:`RecordingClock` (a ``ManualClock`` that remembers each timer's delay)
and moves time itself, so it can check a timeout, a backoff or a ``Retry-After`` exactly and
without waiting: no unit test asserts elapsed wall time (issue 28;
``tests/unit/test_no_wall_time.py`` keeps it so). Sockets stay real: a test waits for I/O with
``setpoint.testing.waits.eventually`` (or :func:`run_timers`' grace), for time by advancing
the clock, and for tasks that are ready to run with :func:`settle`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from setpoint.api.clock import ManualClock, TimerHandle

T = TypeVar("T")


class RecordingClock(ManualClock):
    """A :class:`ManualClock` that records the delay of every timer set on it."""

    def __init__(self, start: float = 1000.0) -> None:
        super().__init__(start)
        self.delays: list[float] = []
        """``when - now()`` of each ``call_at``, in the order they were set."""

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Schedule ``callback`` at ``when`` (see :class:`ManualClock`) and record its delay."""
        self.delays.append(when - self.now())
        return super().call_at(when, callback)


async def settle(rounds: int = 30) -> None:
    """Let every task that is ready run up to its next await (no time passes: not a wait).

    A test calls it after moving a clock, or after starting a task, before it checks what
    the tasks did (or that they are still waiting).
    """
    for _ in range(rounds):
        await asyncio.sleep(0)


async def run_timers(clock: ManualClock, task: asyncio.Task[T], *, grace: float = 0.02) -> float:
    """Await ``task``, moving ``clock`` to its next timer whenever the task waits on time.

    Between two moves the loop runs for up to ``grace`` seconds of real time, so socket I/O
    on loopback (a refused connection, an answer) lands before time moves on; the clock only
    jumps when the task is still waiting after that. Returns the virtual seconds that passed.

    Raises:
        AssertionError: the task waits, and no timer is set on the clock (it would hang).

    """
    start = clock.now()
    while True:
        done, _ = await asyncio.wait({task}, timeout=grace)
        if done:
            break
        deadline = clock.next_deadline
        assert deadline is not None, "the task waits, but not on the clock"
        clock.advance_to(max(deadline, clock.now()))
    task.result()  # raise what the task raised
    return clock.now() - start
