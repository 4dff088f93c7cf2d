"""Waiting on conditions, never on bare sleeps.

Tests against a real API server observe asynchronous effects: the garbage
collector removing a dependent, a CRD becoming Established, a controller
converging. :func:`eventually` polls a condition until it holds or a deadline
passes, and then fails with the last thing it saw, so a red test says *what*
never became true.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from setpoint.api.errors import SetpointError

__all__ = ["WaitTimeout", "eventually"]

T = TypeVar("T")


class WaitTimeout(SetpointError, AssertionError):
    """A condition did not hold within its timeout. The message has the last observation."""


@overload
async def eventually(
    condition: Callable[[], Awaitable[T]],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> T: ...
@overload
async def eventually(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> T: ...
async def eventually(
    condition: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> Any:
    """Call ``condition`` until it returns a truthy value; return that value.

    ``condition`` may be sync or async. An ``AssertionError`` or any exception
    raised by it counts as "not yet" and is reported if time runs out.

    Raises:
        WaitTimeout: after ``timeout`` seconds, naming ``description`` and the
            last result or exception.

    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last = result
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{description} did not hold within {timeout:.1f}s; last: {last!r}")
        await asyncio.sleep(interval)
