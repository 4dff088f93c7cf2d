"""Rate limiters and clocks: client-go's backoff semantics, checked on a manual clock."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from setpoint.api.clock import LoopClock, ManualClock
from setpoint.controller.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    PerKeyLimit,
    PerKeyWindowLimiter,
    RateLimiter,
    RateLimiterOptions,
    default_controller_rate_limiter,
)
from tests._support.virtual_time import settle

# --------------------------------------------------------------------------------------------
# ItemExponentialFailureRateLimiter


def test_exponential_backoff_doubles_from_base_per_key() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(
        0.005, 1000.0
    )
    delays = [limiter.when("a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert limiter.num_requeues("a") == 5
    # Another key starts from the base: failures are counted per key.
    assert limiter.when("b") == pytest.approx(0.005)
    assert limiter.num_requeues("b") == 1


def test_exponential_backoff_is_capped_and_survives_huge_failure_counts() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 60.0)
    delays = [limiter.when("k") for _ in range(2000)]
    assert delays[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    assert set(delays[6:]) == {60.0}
    assert limiter.num_requeues("k") == 2000


def test_forget_resets_backoff_of_one_key_only() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    for _ in range(3):
        limiter.when("a")
        limiter.when("b")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    assert limiter.num_requeues("b") == 3
    limiter.forget("never-seen")  # forgetting an unknown key is fine


@pytest.mark.parametrize(
    ("base", "cap", "field"),
    [(-1.0, 10.0, "base_delay"), (float("nan"), 10.0, "base_delay"), (2.0, 1.0, "max_delay")],
)
def test_exponential_limiter_rejects_bad_delays(base: float, cap: float, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ItemExponentialFailureRateLimiter(base, cap)


# --------------------------------------------------------------------------------------------
# BucketRateLimiter


def test_bucket_lets_burst_through_then_spaces_retries_at_qps() -> None:
    clock = ManualClock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(10.0, 100, clock=clock)
    burst = [bucket.when(f"k{i}") for i in range(100)]
    assert burst == [0.0] * 100
    # Tokens are reserved ahead: each extra retry waits one more token interval.
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("y") == pytest.approx(0.2)
    assert bucket.num_requeues("x") == 0
    bucket.forget("x")  # nothing per key to forget


def test_bucket_refills_over_time_up_to_burst() -> None:
    clock = ManualClock()
    bucket: BucketRateLimiter[str] = BucketRateLimiter(10.0, 5, clock=clock)
    for _ in range(5):
        bucket.when("k")
    assert bucket.when("k") == pytest.approx(0.1)  # debt of one token
    clock.advance(0.6)  # six new tokens pay the debt of one: five available
    assert [bucket.when("k") for _ in range(5)] == [0.0] * 5
    assert bucket.when("k") == pytest.approx(0.1)
    clock.advance(100.0)  # long idle: refill stops at burst
    assert [bucket.when("k") for _ in range(5)] == [0.0] * 5
    assert bucket.when("k") > 0


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (float("inf"), 1), (1.0, 0)])
def test_bucket_rejects_bad_settings(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"qps|burst"):
        BucketRateLimiter(qps, burst, clock=ManualClock())


# --------------------------------------------------------------------------------------------
# MaxOfRateLimiter and the default controller limiter


class _Fixed:
    """A limiter returning a fixed delay and counting calls, to observe max-of."""

    def __init__(self, delay: float, requeues: int) -> None:
        self.delay = delay
        self.requeues = requeues
        self.forgotten: list[str] = []

    def when(self, key: str) -> float:
        return self.delay

    def forget(self, key: str) -> None:
        self.forgotten.append(key)

    def num_requeues(self, key: str) -> int:
        return self.requeues


def test_max_of_takes_longest_delay_and_forgets_everywhere() -> None:
    short, long = _Fixed(1.0, 7), _Fixed(3.0, 2)
    combined: MaxOfRateLimiter[str] = MaxOfRateLimiter(short, long)
    assert combined.when("k") == 3.0
    assert combined.num_requeues("k") == 7
    combined.forget("k")
    assert short.forgotten == ["k"]
    assert long.forgotten == ["k"]


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter[str]()


def test_default_controller_limiter_combines_backoff_and_bucket() -> None:
    clock = ManualClock()
    limiter: RateLimiter[str] = default_controller_rate_limiter(clock=clock)
    # 100 distinct keys fail once: the bucket's burst absorbs them, per-key backoff rules.
    first = [limiter.when(f"k{i}") for i in range(100)]
    assert first == pytest.approx([0.005] * 100)
    # The 101st retry finds the bucket empty: 10 qps means 100 ms, more than the 5 ms backoff.
    assert limiter.when("k100") == pytest.approx(0.1)
    # One key failing repeatedly is dominated by its own backoff once that exceeds the bucket.
    assert limiter.num_requeues("k0") == 1
    limiter.forget("k0")
    assert limiter.num_requeues("k0") == 0


def test_default_limiter_without_bucket_is_pure_backoff() -> None:
    limiter: RateLimiter[str] = default_controller_rate_limiter(
        RateLimiterOptions(base_delay=1.0, max_delay=4.0, overall_qps=None), clock=ManualClock()
    )
    assert [limiter.when(f"k{i}") for i in range(200)] == [1.0] * 200
    assert [limiter.when("k0") for _ in range(3)] == [2.0, 4.0, 4.0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"base_delay": -0.1}, "base_delay"),
        ({"max_delay": 0.001}, "max_delay"),
        ({"max_delay": float("inf")}, "max_delay"),
        ({"overall_qps": 0.0}, "overall_qps"),
        ({"overall_burst": 0}, "overall_burst"),
    ],
)
def test_rate_limiter_options_validate_each_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"RateLimiterOptions.{field}"):
        RateLimiterOptions(**kwargs)


def test_rate_limiter_options_defaults_match_client_go() -> None:
    options = RateLimiterOptions()
    assert (options.base_delay, options.max_delay) == (0.005, 1000.0)
    assert (options.overall_qps, options.overall_burst) == (10.0, 100)


# --------------------------------------------------------------------------------------------
# PerKeyWindowLimiter


def test_per_key_window_allows_n_starts_then_waits_for_oldest_to_expire() -> None:
    window: PerKeyWindowLimiter[str] = PerKeyWindowLimiter(
        PerKeyLimit(max_processings=2, window=10.0)
    )
    assert window.earliest("k", 0.0) == 0.0
    window.record("k", 0.0)
    assert window.earliest("k", 1.0) == 1.0
    window.record("k", 3.0)
    # Two starts in the window: the next waits until the first (t=0) leaves it.
    assert window.earliest("k", 4.0) == 10.0
    assert window.earliest("other", 4.0) == 4.0
    window.record("k", 10.0)
    # Now the window holds t=3 and t=10: next allowed at 13.
    assert window.earliest("k", 11.0) == 13.0
    assert window.earliest("k", 20.0) == 20.0


def test_per_key_window_forgets_keys_that_left_the_window() -> None:
    window: PerKeyWindowLimiter[int] = PerKeyWindowLimiter(
        PerKeyLimit(max_processings=1, window=5.0)
    )
    for key in range(100):
        window.record(key, float(key) * 0.01)
    assert len(window) == 100
    window.record(1000, 100.0)  # every older key's last start is far outside the window
    assert len(window) == 1
    assert window.earliest(1000, 101.0) == 105.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_processings": 0, "window": 1.0}, "max_processings"),
        ({"max_processings": 1, "window": 0.0}, "window"),
        ({"max_processings": 1, "window": float("inf")}, "window"),
    ],
)
def test_per_key_limit_validates(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"PerKeyLimit.{field}"):
        PerKeyLimit(**kwargs)


# --------------------------------------------------------------------------------------------
# Clocks


def test_manual_clock_fires_due_timers_in_order_at_their_deadline() -> None:
    clock = ManualClock(start=100.0)
    seen: list[tuple[str, float]] = []
    clock.call_at(105.0, lambda: seen.append(("b", clock.now())))
    clock.call_at(102.0, lambda: seen.append(("a", clock.now())))
    cancelled = clock.call_at(103.0, lambda: seen.append(("never", clock.now())))
    cancelled.cancel()
    clock.call_at(200.0, lambda: seen.append(("late", clock.now())))
    assert clock.pending_timers == 3
    clock.advance(10.0)
    assert seen == [("a", 102.0), ("b", 105.0)]
    assert clock.now() == 110.0
    assert clock.pending_timers == 1
    assert clock.next_deadline == 200.0


def test_manual_clock_runs_timers_scheduled_by_callbacks_within_the_same_advance() -> None:
    clock = ManualClock()
    seen: list[float] = []

    def chain() -> None:
        seen.append(clock.now())
        if len(seen) < 3:
            clock.call_at(clock.now() + 1.0, chain)

    clock.call_at(1.0, chain)
    clock.advance(5.0)
    assert seen == [1.0, 2.0, 3.0]
    assert clock.next_deadline is None
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1.0)


class _SetTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock only moves when a test sets :attr:`now`."""

    now = 1234.5

    def time(self) -> float:
        return self.now


def test_loop_clock_reads_loop_time_and_schedules_loop_timers() -> None:
    """``now()`` is the running loop's ``time()``; ``call_at`` sets a timer on that loop."""
    clock = LoopClock()
    loop = _SetTimeLoop()

    async def check() -> None:
        assert clock.now() == 1234.5
        fired: asyncio.Future[float] = loop.create_future()
        handle = clock.call_at(1236.0, lambda: fired.set_result(clock.now()))
        assert isinstance(handle, asyncio.TimerHandle) and handle.when() == 1236.0
        await asyncio.sleep(0)
        assert not fired.done()
        loop.now = 1236.0
        await settle()  # the loop moves due timers to its ready queue on its next pass
        assert fired.done() and fired.result() == 1236.0

    try:
        loop.run_until_complete(check())
    finally:
        loop.close()


async def test_loop_clock_works_from_another_thread_once_used_in_the_loop() -> None:
    clock = LoopClock()
    in_loop = clock.now()
    results: list[float | BaseException] = []

    def read() -> None:
        try:
            results.append(clock.now())
        except BaseException as exc:
            results.append(exc)

    await asyncio.to_thread(read)
    assert isinstance(results[0], float)
    assert results[0] >= in_loop


def test_loop_clock_outside_any_loop_explains_itself() -> None:
    clock = LoopClock()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            clock.now()
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(timeout=10)
    assert len(errors) == 1
    assert "outside a running event loop" in str(errors[0])


def test_manual_clock_advance_to_lands_exactly_and_refuses_the_past() -> None:
    clock = ManualClock()
    fired: list[float] = []
    clock.call_at(0.3, lambda: fired.append(clock.now()))
    for _ in range(3):
        clock.advance(0.1)  # 0.1 + 0.1 + 0.1 drifts to 0.30000000000000004
    assert fired == [0.3]
    clock.advance_to(1.0)
    assert clock.now() == 1.0
    with pytest.raises(ValueError, match="forward"):
        clock.advance_to(0.5)
