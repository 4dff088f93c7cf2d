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
import sys
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
    condition: Callable[[], Awaitable[None]],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> None: ...
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
    condition: Callable[[], None],
    *,
    timeout: float = 30.0,
    interval: float = 0.1,
    description: str = "condition",
) -> None: ...
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
    """Call ``condition`` until it holds; return what it returned.

    ``condition`` may be sync or async, and comes in two styles:

    - **a check** annotated ``-> None`` (``async def check() -> None: assert ...``) holds
      once it returns without raising;
    - **a probe** returning a value (any other annotation, or none, as in a lambda) holds
      once it returns something truthy, which ``eventually`` returns: ``obj = await
      eventually(lambda: fake.lookup(kind, name))``.

    A lambda that calls an async check (``lambda: check(x)``) counts as the check.

    An ``AssertionError`` or any other exception counts as "not yet", and the last one
    is reported if time runs out; so does pytest's failure outcome (a ``pytest.raises``
    block that did not raise, ``pytest.fail``), although it is not an ``Exception``.
    Both styles type-check with mypy, sync or async.

    Raises:
        WaitTimeout: after ``timeout`` seconds, naming ``description`` and the
            last result or exception.

    """
    check: bool | None = True if _is_check(condition) else None
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = condition()
            if inspect.isawaitable(result):
                if check is None:
                    check = _awaits_a_check(condition, result)
                result = await result
            if check or result:
                return result
            last = result
        except BaseException as exc:
            if not _not_yet(exc):
                raise
            last = exc
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{description} did not hold within {timeout:.1f}s; last: {last!r}")
        await asyncio.sleep(interval)


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


def _awaits_a_check(condition: Callable[[], Any], awaitable: object) -> bool:
    """Whether ``condition`` (a lambda, say) returned the coroutine of a ``-> None`` check.

    ``eventually(lambda: check(x))`` types as a check, so it should behave as one: the
    coroutine's function is found among the names ``condition`` uses (its closure and
    globals) by its code object.
    """
    code = getattr(awaitable, "cr_code", None)
    if code is None:
        return False
    candidates: list[Any] = []
    for cell in getattr(condition, "__closure__", None) or ():
        try:
            candidates.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    candidates.append(getattr(condition, "__globals__", {}).get(code.co_name))
    for candidate in candidates:
        function = getattr(candidate, "__func__", candidate)  # a bound method's function
        if getattr(function, "__code__", None) is code:
            return _is_check(function)
    return False


def _is_check(condition: Callable[[], Any]) -> bool:
    """Whether ``condition`` is annotated to return ``None`` (an assertion-style check)."""
    try:
        annotation = inspect.signature(condition).return_annotation
    except (TypeError, ValueError):
        return False
    return annotation is None or annotation == "None"
