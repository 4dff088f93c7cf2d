"""Waiting on conditions, never on bare sleeps.

Tests against a real API server observe asynchronous effects: the garbage
collector removing a dependent, a CRD becoming Established, a controller
converging. Two waits poll a condition until it holds or a deadline passes, and
then fail with the last thing they saw, so a red test says *what* never became
true. Which one holds when is in its name, never read from annotations:

- :func:`eventually` waits for a **probe**, a function that returns something truthy
  once it holds (``await eventually(lambda: fake.lookup(kinds.Secret, "s", namespace=ns))``)
  and returns that value;
- :func:`eventually_passes` waits for a **check**, a function that asserts and returns
  ``None`` (``await eventually_passes(check)``), until it stops raising.

Both take sync or async functions, and both count any exception raised meanwhile (a failed
``assert``, ``NotFound``, a ``pytest.raises`` block that did not raise yet) as "not yet".
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

from setpoint.api.clock import LoopClock, clock_sleep
from setpoint.api.errors import SetpointError

__all__ = ["WaitTimeout", "eventually", "eventually_passes"]

T = TypeVar("T")


class WaitTimeout(SetpointError, AssertionError):
    """A condition did not hold within its timeout. The message has the last observation."""


# Two signatures only because mypy cannot take the awaited type out of a union of a sync
# and an async callable; both say the same: the probe's type without None.
@overload
async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,
    interval: float = ...,
    description: str = ...,
) -> T: ...
@overload
async def eventually(
    probe: Callable[[], T | None],
    *,
    timeout: float = ...,
    interval: float = ...,
    description: str = ...,
) -> T: ...
async def eventually(
    probe: Callable[[], object],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> object:
    """Call ``probe`` until it returns something truthy, and return that.

    ``probe`` may be sync or async; any exception it raises means "not yet". Its type is
    that of the probe without ``None``: for ``async def backup() -> Backup | None``,
    ``await eventually(backup)`` is a ``Backup``. To wait for a function that asserts
    (and returns ``None``), use :func:`eventually_passes`.

    Raises:
        WaitTimeout: after ``timeout`` seconds, naming ``description`` and the last result
            or exception.

    """
    return await _wait(probe, _truthy, timeout, interval, description)


async def eventually_passes(
    check: Callable[[], Awaitable[None] | None],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> None:
    """Call ``check`` until it returns without raising.

    ``check`` may be sync or async and returns ``None``: a failed ``assert`` (or any other
    exception, or a ``pytest.raises`` block that did not raise yet) means "not yet". A
    lambda around an async check (``lambda: check(x)``) is a check too.

    Raises:
        WaitTimeout: after ``timeout`` seconds, naming ``description`` and the last
            exception.
        TypeError: ``check`` returned something other than ``None``: it is a probe, whose
            value would be ignored here; wait for it with :func:`eventually`.

    """
    await _wait(check, _returned_none, timeout, interval, description)


def _truthy(result: object) -> bool:
    return bool(result)


def _returned_none(result: object) -> bool:
    if result is not None:
        raise TypeError(
            f"eventually_passes() got {result!r} from its check: a check asserts and returns "
            "None. To wait until a function returns something truthy, use eventually(probe)"
        )
    return True


async def _wait(
    condition: Callable[[], object],
    holds: Callable[[object], bool],
    timeout: float,
    interval: float,
    description: str,
) -> object:
    """Call ``condition`` until ``holds`` says its result holds; exceptions are "not yet"."""
    clock = LoopClock()
    deadline = clock.now() + timeout
    last: object = None
    raised = False
    while True:
        try:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
        except BaseException as exc:
            if not _not_yet(exc):
                raise
            last, raised = exc, True
        else:
            if holds(result):
                return result
            last, raised = result, False
        if clock.now() >= deadline:
            hint = (
                " (eventually() waits for a truthy value; a check that asserts and returns "
                "None holds with eventually_passes())"
                if last is None and not raised and holds is _truthy
                else ""
            )
            raise WaitTimeout(
                f"{description} did not hold within {timeout:.1f}s; last: {last!r}{hint}"
            )
        await clock_sleep(clock, interval)


def _not_yet(exc: BaseException) -> bool:
    """Whether ``exc`` from a condition means "not yet" rather than "stop waiting".

    Any ``Exception``, and pytest's ``Failed`` (``pytest.fail.Exception``), which derives
    from ``BaseException`` so that test code's ``except Exception`` does not swallow it.
    Cancellation, ``KeyboardInterrupt`` and pytest's skip stop the wait. pytest is looked
    up only if loaded: its outcomes exist only then.
    """
    if isinstance(exc, Exception):
        return True
    pytest = sys.modules.get("pytest")
    failed = getattr(getattr(pytest, "fail", None), "Exception", None)
    return isinstance(failed, type) and isinstance(exc, failed)
