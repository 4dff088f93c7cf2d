"""eventually(): probes and checks, sync and async, typed for mypy (which checks this file)."""

from __future__ import annotations

import asyncio
import time
from typing import assert_type

import pytest

from setpoint.testing import WaitTimeout, eventually


async def test_an_async_check_holds_once_it_stops_raising() -> None:
    """An async `-> None` check holds when it returns; assertions meanwhile mean not yet."""
    calls: list[int] = []

    async def check() -> None:
        calls.append(1)
        assert len(calls) >= 3

    await eventually(check, timeout=5, interval=0.001)
    assert len(calls) == 3


async def test_a_sync_check_holds_once_it_stops_raising() -> None:
    """A sync `-> None` check works the same way."""
    started = time.monotonic()

    def check() -> None:
        assert time.monotonic() - started > 0.01

    await eventually(check, timeout=5, interval=0.001)


async def test_a_pytest_raises_that_did_not_raise_yet_is_not_yet() -> None:
    """`with pytest.raises(...)` inside a check: "did not raise" means not yet, not a failure.

    pytest's Failed is a BaseException; the wait treats it like an AssertionError, and
    reports it if time runs out.
    """
    calls: list[int] = []

    async def gone() -> None:
        calls.append(1)
        with pytest.raises(KeyError):
            if len(calls) >= 3:
                raise KeyError("gone")

    await eventually(gone, timeout=5, interval=0.001)
    assert len(calls) == 3

    def never() -> None:
        with pytest.raises(KeyError):
            pass

    with pytest.raises(WaitTimeout, match="DID NOT RAISE"):
        await eventually(never, timeout=0.05, interval=0.01)


async def test_cancellation_is_not_swallowed() -> None:
    """Only failures mean "not yet": a CancelledError from the check stops the wait at once."""
    calls: list[int] = []

    def cancelled() -> None:
        calls.append(1)
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await eventually(cancelled, timeout=5, interval=0.001)
    assert calls == [1]


async def test_probes_return_the_first_truthy_value_typed() -> None:
    """A probe's first truthy result is returned, with its type (sync, async, lambda)."""
    values = iter([None, {}, {"ready": True}])

    async def probe() -> dict[str, bool] | None:
        return next(values)

    got = await eventually(probe, timeout=5, interval=0.001)
    assert_type(got, dict[str, bool] | None)
    assert got == {"ready": True}
    counter = iter(range(10))
    number = await eventually(lambda: next(counter) > 2, timeout=5, interval=0.001)
    assert_type(number, bool)
    assert number is True


async def test_a_check_that_keeps_failing_reports_its_last_assertion() -> None:
    """After the timeout, WaitTimeout names the description and the last failure."""

    async def check() -> None:
        raise AssertionError("never")

    with pytest.raises(WaitTimeout, match=r"the thing did not hold within 0.1s; last: Assertion"):
        await eventually(check, timeout=0.05, interval=0.01, description="the thing")


async def test_a_probe_returning_none_is_not_yet() -> None:
    """A probe without a `-> None` annotation that returns None has not held yet."""
    with pytest.raises(WaitTimeout, match="last: None"):
        await eventually(lambda: None, timeout=0.05, interval=0.01)


async def test_a_lambda_around_an_async_check_is_a_check() -> None:
    """eventually(lambda: check(x)) holds once the check stops raising, as its type says."""
    calls: list[int] = []

    async def check(limit: int) -> None:
        calls.append(1)
        assert len(calls) >= limit

    await eventually(lambda: check(2), timeout=5, interval=0.001)
    assert len(calls) == 2
