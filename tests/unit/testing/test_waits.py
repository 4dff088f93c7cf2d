"""eventually() waits for probes, eventually_passes() for checks; mypy checks this file.

Which one holds when is in the name, never in an annotation (issue 28, "no API that
guesses"): an unannotated asserting check holds with eventually_passes(), a probe that
returns None keeps eventually() waiting whatever its annotation says, and the types come
out of sync and async functions alike.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import assert_type

import pytest

from setpoint.testing import WaitTimeout, eventually, eventually_passes


@dataclass
class Backup:
    name: str


async def test_an_unannotated_asserting_check_holds() -> None:
    """A check written as a newcomer writes it, with no annotation, holds once it passes."""
    calls: list[int] = []

    def check():  # type: ignore[no-untyped-def]  # unannotated on purpose
        calls.append(1)
        assert len(calls) >= 3

    await eventually_passes(check, timeout=5, interval=0.001)
    assert len(calls) == 3


async def test_an_async_check_holds_once_it_stops_raising() -> None:
    """An async check holds when it returns; assertions meanwhile mean not yet."""
    calls: list[int] = []

    async def check() -> None:
        calls.append(1)
        assert len(calls) >= 3

    assert_type(await eventually_passes(check, timeout=5, interval=0.001), None)
    assert len(calls) == 3


async def test_a_lambda_around_an_async_check_is_a_check() -> None:
    """eventually_passes(lambda: check(x)) holds once the check stops raising."""
    calls: list[int] = []

    async def check(limit: int) -> None:
        calls.append(1)
        assert len(calls) >= limit

    await eventually_passes(lambda: check(2), timeout=5, interval=0.001)
    assert len(calls) == 2


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

    await eventually_passes(gone, timeout=5, interval=0.001)
    assert len(calls) == 3

    def never() -> None:
        with pytest.raises(KeyError):
            pass

    with pytest.raises(WaitTimeout, match="DID NOT RAISE"):
        await eventually_passes(never, timeout=0.05, interval=0.01)


async def test_a_check_that_keeps_failing_reports_its_last_assertion() -> None:
    """After the timeout, WaitTimeout names the description and the last failure."""

    async def check() -> None:
        raise AssertionError("never")

    with pytest.raises(WaitTimeout, match=r"the thing did not hold within 0.1s; last: Assertion"):
        await eventually_passes(check, timeout=0.05, interval=0.01, description="the thing")


async def test_a_probe_given_as_a_check_is_refused_at_once() -> None:
    """A check returns None; a function returning a value is a probe, and says which wait."""
    calls: list[int] = []

    def probe() -> bool:
        calls.append(1)
        return False

    with pytest.raises(TypeError, match=r"got False from its check.*use eventually\(probe\)"):
        await eventually_passes(probe, timeout=5, interval=0.001)  # type: ignore[arg-type]
    assert calls == [1]


async def test_cancellation_is_not_swallowed() -> None:
    """Only failures mean "not yet": a CancelledError from the check stops the wait at once."""
    calls: list[int] = []

    def cancelled() -> None:
        calls.append(1)
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await eventually_passes(cancelled, timeout=5, interval=0.001)
    with pytest.raises(asyncio.CancelledError):
        await eventually(cancelled, timeout=5, interval=0.001)
    assert calls == [1, 1]


async def test_probes_return_the_first_truthy_value_typed() -> None:
    """A probe's first truthy result is returned, with its type less None (sync, async, lambda)."""
    values = iter([None, {}, {"ready": True}])

    async def probe() -> dict[str, bool] | None:
        return next(values)

    got = await eventually(probe, timeout=5, interval=0.001)
    assert_type(got, dict[str, bool])
    assert got == {"ready": True}
    counter = iter(range(10))
    number = await eventually(lambda: next(counter) > 2, timeout=5, interval=0.001)
    assert_type(number, bool)
    assert number is True


async def test_an_optional_probe_gives_its_value_type() -> None:
    """`async def backup() -> Backup | None` is a probe whose wait is a Backup (mypy agrees)."""
    found = iter([None, None, Backup("nightly")])

    async def backup() -> Backup | None:
        return next(found)

    def sync_backup() -> Backup | None:
        return Backup("weekly")

    typed: Backup = await eventually(backup, timeout=5, interval=0.001)
    assert_type(await eventually(sync_backup, timeout=5, interval=0.001), Backup)
    assert typed == Backup("nightly")


async def test_a_probe_returning_none_keeps_waiting() -> None:
    """None is "not yet" for a probe, and the timeout says what a check would have needed."""
    with pytest.raises(WaitTimeout, match=r"last: None \(eventually\(\) waits for a truthy value"):
        await eventually(lambda: None, timeout=0.05, interval=0.01)


async def test_an_annotation_does_not_change_what_eventually_waits_for() -> None:
    """A `-> None` function is still a probe for eventually(): it never returns truthy."""
    calls: list[int] = []

    def check() -> None:
        calls.append(1)

    with pytest.raises(WaitTimeout, match="eventually_passes"):
        await eventually(check, timeout=0.05, interval=0.01)
    assert len(calls) > 1


async def test_exceptions_from_a_probe_mean_not_yet() -> None:
    """A probe that raises (NotFound, a KeyError) has not held yet; the last error is shown."""
    calls: list[int] = []
    stored: dict[str, str] = {}

    def probe() -> str:
        calls.append(1)
        if len(calls) >= 3:
            stored["x"] = "there"
        return stored["x"]

    assert await eventually(probe, timeout=5, interval=0.001) == "there"
    with pytest.raises(WaitTimeout, match="last: KeyError"):
        await eventually(lambda: stored["y"], timeout=0.05, interval=0.01)
