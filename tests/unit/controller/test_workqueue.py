"""Work queue semantics: dedup, exclusivity, dirty re-queue, priorities, delays, shutdown.

Time is a ManualClock, so delays are exact and nothing sleeps. ``get()`` on a queue with a
ready key returns without suspending; where a test needs a blocked getter it starts a task and
lets the loop run it up to its await with :func:`settle` (no time passes).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from setpoint.api.clock import ManualClock
from setpoint.api.keys import ObjectKey
from setpoint.controller.ratelimit import (
    PerKeyLimit,
    RateLimiter,
    RateLimiterOptions,
    default_controller_rate_limiter,
)
from setpoint.controller.workqueue import (
    NotProcessingError,
    Priority,
    ShutDown,
    WorkQueue,
    WorkQueueOptions,
)
from tests._support.virtual_time import settle

GET_TIMEOUT = 5.0


def make_queue(
    clock: ManualClock | None = None, options: WorkQueueOptions | None = None
) -> tuple[WorkQueue[str], ManualClock]:
    clock = clock if clock is not None else ManualClock()
    return WorkQueue("test", options, clock=clock), clock


async def take(queue: WorkQueue[str]) -> str:
    return await asyncio.wait_for(queue.get(), GET_TIMEOUT)


async def drain(queue: WorkQueue[str]) -> list[str]:
    """Take and finish every ready key, in the order the queue hands them out."""
    order = []
    while queue.ready_count:
        key = await take(queue)
        order.append(key)
        queue.done(key)
    return order


# --------------------------------------------------------------------------------------------
# Basics, dedup, exclusivity, dirty


async def test_add_get_done_round_trip_with_object_keys() -> None:
    queue: WorkQueue[ObjectKey] = WorkQueue("test", clock=ManualClock())
    key = ObjectKey("default", "cm")
    queue.add(key)
    assert (len(queue), queue.ready_count) == (1, 1)
    assert await asyncio.wait_for(queue.get(), GET_TIMEOUT) == key
    assert (len(queue), queue.ready_count, queue.in_flight_count) == (0, 0, 1)
    queue.done(key)
    assert queue.in_flight_count == 0


async def test_key_added_many_times_while_waiting_is_processed_once() -> None:
    queue, _ = make_queue()
    for _ in range(3):
        queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert await drain(queue) == ["a", "b"]
    assert len(queue) == 0


async def test_fifo_within_one_priority() -> None:
    queue, _ = make_queue()
    for key in "dcab":
        queue.add(key)
    assert await drain(queue) == list("dcab")


async def test_key_in_flight_is_not_handed_to_a_second_worker() -> None:
    queue, _ = make_queue()
    queue.add("k")
    assert await take(queue) == "k"
    queue.add("k")  # changed while being processed: dirty
    assert (len(queue), queue.ready_count) == (1, 0)

    second = asyncio.create_task(queue.get())
    await settle()
    assert not second.done()

    queue.done("k")  # the dirty key becomes ready again and goes to the waiting worker
    assert await asyncio.wait_for(second, GET_TIMEOUT) == "k"
    queue.done("k")
    assert len(queue) == 0


async def test_many_adds_during_processing_collapse_into_one_more_processing() -> None:
    queue, _ = make_queue()
    queue.add("k")
    await take(queue)
    for _ in range(10):
        queue.add("k")
    queue.add("other")
    queue.done("k")
    assert sorted(await drain(queue)) == ["k", "other"]
    assert len(queue) == 0


async def test_dirty_mark_of_changes_the_processing_had_seen_is_dropped() -> None:
    """Adds stamped no later than what the processing saw do not queue the key again."""
    queue, _ = make_queue()
    queue.add("k", stamp=1)
    await take(queue)
    queue.add("k", stamp=4)  # a change applied before the reconcile's first read (at 5)
    queue.add("k", stamp=5)
    queue.done("k", seen=5)
    assert (len(queue), queue.ready_count) == (0, 0)


async def test_dirty_mark_with_a_change_after_what_was_seen_queues_the_key() -> None:
    """One add stamped after the processing's first read is enough to queue it again."""
    queue, _ = make_queue()
    queue.add("k")
    await take(queue)
    queue.add("k", stamp=3)
    queue.add("k", stamp=7)  # applied after the first read (at 5): not seen
    queue.done("k", seen=5)
    assert await drain(queue) == ["k"]


@pytest.mark.parametrize("late", ["add", "add_after", "add_rate_limited"])
async def test_dirty_mark_with_an_unstamped_add_is_never_dropped(late: str) -> None:
    """An add without a stamp (enqueue, requeue, retry) always gets its processing."""
    queue, clock = make_queue()
    queue.add("k")
    await take(queue)
    queue.add("k", stamp=2)
    if late == "add":
        queue.add("k")
    elif late == "add_after":
        queue.add_after("k", 1.0)
    else:
        queue.add_rate_limited("k")
    queue.done("k", seen=10)
    assert len(queue) == 1
    clock.advance(1.0)
    assert await drain(queue) == ["k"]


async def test_done_without_seen_keeps_every_dirty_mark() -> None:
    """Without ``seen`` (a failed reconcile, or one that read nothing) the key runs again."""
    queue, _ = make_queue()
    queue.add("k")
    await take(queue)
    queue.add("k", stamp=1)
    queue.done("k")
    assert await drain(queue) == ["k"]


async def test_other_keys_flow_while_one_key_is_in_flight() -> None:
    queue, _ = make_queue()
    queue.add("slow")
    queue.add("fast")
    assert await take(queue) == "slow"
    queue.add("slow")
    assert await take(queue) == "fast"
    queue.done("fast")
    assert queue.ready_count == 0  # "slow" waits for its own processing, not for a worker
    queue.done("slow")
    assert await drain(queue) == ["slow"]


async def test_done_for_key_not_in_flight_is_an_error_naming_key_and_queue() -> None:
    queue, _ = make_queue()
    with pytest.raises(NotProcessingError, match=r"'test'.*done\('ghost'\)"):
        queue.done("ghost")
    queue.add("k")
    await take(queue)
    queue.done("k")
    with pytest.raises(NotProcessingError, match="exactly once"):
        queue.done("k")


# --------------------------------------------------------------------------------------------
# Priorities


async def test_live_changes_overtake_initial_list_backlog() -> None:
    queue, _ = make_queue()
    for i in range(1000):
        queue.add(f"listed-{i}", priority=Priority.LOW)
    queue.add("changed")
    key, priority = await asyncio.wait_for(queue.get_with_priority(), GET_TIMEOUT)
    assert (key, priority) == ("changed", Priority.NORMAL)
    queue.done(key)
    key, priority = await asyncio.wait_for(queue.get_with_priority(), GET_TIMEOUT)
    assert (key, priority) == ("listed-0", Priority.LOW)
    queue.done(key)


async def test_low_priority_key_added_again_at_high_priority_moves_up() -> None:
    queue, _ = make_queue()
    queue.add("a", priority=Priority.LOW)
    queue.add("b", priority=Priority.LOW)
    queue.add("c", priority=Priority.LOW)
    queue.add("z")
    queue.add("c")  # raised: now NORMAL, and it arrived before "z"
    assert len(queue) == 4
    assert await drain(queue) == ["c", "z", "a", "b"]


async def test_lower_priority_never_demotes_a_waiting_key() -> None:
    queue, _ = make_queue()
    queue.add("a")
    queue.add("b", priority=Priority.LOW)
    queue.add("a", priority=Priority.LOW)
    key, priority = await asyncio.wait_for(queue.get_with_priority(), GET_TIMEOUT)
    assert (key, priority) == ("a", Priority.NORMAL)


async def test_arbitrary_integer_priorities_order_highest_first() -> None:
    queue, _ = make_queue()
    for key, priority in [("p5", 5), ("m3", -3), ("p100", 100), ("zero", 0), ("p5b", 5)]:
        queue.add(key, priority=priority)
    assert await drain(queue) == ["p100", "p5", "p5b", "zero", "m3"]


async def test_priority_of_dirty_key_is_the_highest_requested_while_in_flight() -> None:
    queue, _ = make_queue()
    queue.add("k", priority=Priority.LOW)
    await take(queue)
    queue.add("k", priority=Priority.LOW)
    queue.add("k", priority=7)
    queue.add("k", priority=Priority.LOW)
    queue.add("other", priority=5)
    queue.done("k")
    key, priority = await asyncio.wait_for(queue.get_with_priority(), GET_TIMEOUT)
    assert (key, priority) == ("k", 7)


async def test_repeated_priority_raises_keep_heap_bounded_and_order_right() -> None:
    queue, _ = make_queue()
    for i in range(50):
        queue.add(f"k{i}", priority=0)
    for round_ in range(1, 200):
        queue.add(f"k{round_ % 50}", priority=round_)
    # Internal heap items are compacted instead of growing with every raise.
    assert len(queue._ready) <= 2 * queue.ready_count + 64 + 1
    order = await drain(queue)
    assert order[0] == "k49"  # raised last, to 199
    assert len(order) == 50


# --------------------------------------------------------------------------------------------
# Delays


async def test_add_after_makes_key_ready_exactly_at_its_deadline() -> None:
    queue, clock = make_queue()
    queue.add_after("k", 10.0)
    assert (len(queue), queue.ready_count) == (1, 0)
    clock.advance_to(9.999)
    assert queue.ready_count == 0
    clock.advance_to(10.0)
    assert queue.ready_count == 1
    assert await drain(queue) == ["k"]


async def test_waiting_worker_is_woken_by_the_timer() -> None:
    queue, clock = make_queue()
    worker = asyncio.create_task(queue.get())
    await settle()
    queue.add_after("k", 3.0)
    await settle()
    assert not worker.done()
    clock.advance(3.0)
    assert await asyncio.wait_for(worker, GET_TIMEOUT) == "k"
    queue.done("k")


async def test_earlier_deadline_wins_and_later_one_does_not_process_again() -> None:
    queue, clock = make_queue()
    queue.add_after("k", 10.0)
    queue.add_after("k", 2.0)
    queue.add_after("k", 5.0)
    assert len(queue) == 1
    clock.advance(2.0)
    assert await drain(queue) == ["k"]
    clock.advance(20.0)
    assert (len(queue), queue.ready_count) == (0, 0)
    assert clock.pending_timers == 0


async def test_plain_add_makes_delayed_key_ready_now_and_absorbs_its_deadline() -> None:
    queue, clock = make_queue()
    queue.add_after("k", 60.0)
    queue.add("k")
    assert queue.ready_count == 1
    assert await drain(queue) == ["k"]
    clock.advance(120.0)
    assert len(queue) == 0  # the 60 s request was served by the processing above


async def test_ready_key_ignores_a_later_deadline() -> None:
    queue, clock = make_queue()
    queue.add("k")
    queue.add_after("k", 5.0)
    assert queue.ready_count == 1
    assert await drain(queue) == ["k"]
    clock.advance(10.0)
    assert len(queue) == 0


async def test_add_after_with_non_positive_delay_is_a_plain_add() -> None:
    queue, clock = make_queue()
    queue.add_after("zero", 0.0)
    queue.add_after("negative", -5.0)
    assert queue.ready_count == 2
    assert clock.pending_timers == 0


async def test_delay_requested_during_processing_counts_from_the_request() -> None:
    queue, clock = make_queue()
    queue.add("k")
    await take(queue)
    queue.add_after("k", 10.0)  # e.g. a reconcile returning requeue_after=10s
    clock.advance_to(4.0)
    queue.done("k")
    assert (len(queue), queue.ready_count) == (1, 0)
    clock.advance_to(9.999)
    assert queue.ready_count == 0
    clock.advance_to(10.0)
    assert await drain(queue) == ["k"]


async def test_delay_already_passed_when_processing_ends_is_ready_at_once() -> None:
    queue, clock = make_queue()
    queue.add("k")
    await take(queue)
    queue.add_after("k", 1.0)
    clock.advance(5.0)
    queue.done("k")
    assert queue.ready_count == 1


async def test_delayed_keys_falling_due_together_come_out_by_priority() -> None:
    queue, clock = make_queue()
    queue.add_after("low", 1.0, priority=Priority.LOW)
    queue.add_after("high", 1.0, priority=10)
    queue.add_after("normal", 1.0)
    clock.advance(1.0)
    assert await drain(queue) == ["high", "normal", "low"]


async def test_one_timer_serves_all_delays_and_is_rearmed_for_earlier_ones() -> None:
    queue, clock = make_queue()
    for i in range(100):
        queue.add_after(f"k{i}", 100.0 + i)
    assert clock.pending_timers == 1
    assert clock.next_deadline == 100.0
    queue.add_after("early", 1.0)
    assert clock.pending_timers == 1
    assert clock.next_deadline == 1.0
    clock.advance(1.0)
    assert clock.next_deadline == 100.0
    clock.advance(200.0)
    assert queue.ready_count == 101
    assert clock.pending_timers == 0


async def test_add_rate_limited_backs_off_exponentially_until_forgotten() -> None:
    queue, clock = make_queue()
    for expected_delay in (0.005, 0.01, 0.02):
        start = clock.now()
        queue.add_rate_limited("k")
        deadline = clock.next_deadline
        assert deadline is not None
        assert deadline - start == pytest.approx(expected_delay)
        clock.advance(expected_delay / 2)
        assert queue.ready_count == 0
        clock.advance_to(deadline)
        assert await drain(queue) == ["k"]
    assert queue.num_requeues("k") == 3
    queue.forget("k")
    assert queue.num_requeues("k") == 0
    queue.add_rate_limited("k")
    clock.advance(0.005)
    assert queue.ready_count == 1


async def test_rate_limited_add_keeps_the_priority_it_is_given() -> None:
    queue, clock = make_queue()
    queue.add("normal")
    queue.add_rate_limited("retry", priority=Priority.LOW)
    clock.advance(1.0)
    assert await drain(queue) == ["normal", "retry"]


async def test_rate_limiter_options_reach_the_default_limiter() -> None:
    options = WorkQueueOptions(rate_limits=RateLimiterOptions(base_delay=2.0, max_delay=3.0))
    queue, clock = make_queue(options=options)
    queue.add_rate_limited("k")
    clock.advance_to(1.9)
    assert queue.ready_count == 0
    clock.advance_to(2.0)
    assert queue.ready_count == 1


async def test_injected_rate_limiter_is_used() -> None:
    clock = ManualClock()
    limiter: RateLimiter[str] = default_controller_rate_limiter(
        RateLimiterOptions(base_delay=7.0, max_delay=7.0), clock=clock
    )
    queue: WorkQueue[str] = WorkQueue("test", rate_limiter=limiter, clock=clock)
    queue.add_rate_limited("k")
    clock.advance_to(6.9)
    assert queue.ready_count == 0
    clock.advance_to(7.0)
    assert queue.ready_count == 1
    assert queue.num_requeues("k") == 1


# --------------------------------------------------------------------------------------------
# Per-key limit


async def test_per_key_limit_defers_excess_processing_to_the_window() -> None:
    options = WorkQueueOptions(per_key_limit=PerKeyLimit(max_processings=2, window=10.0))
    queue, clock = make_queue(options=options)
    queue.add("hot")
    assert await drain(queue) == ["hot"]
    clock.advance(1.0)
    queue.add("hot")
    assert await drain(queue) == ["hot"]
    clock.advance_to(2.0)  # two starts (t=0, t=1) in the last 10 s
    for _ in range(5):
        queue.add("hot")  # not dropped: deferred, and merged into one processing
    queue.add("cold")
    assert len(queue) == 2
    assert await drain(queue) == ["cold"]
    clock.advance_to(9.999)
    assert queue.ready_count == 0
    clock.advance_to(10.0)  # the t=0 start left the window
    assert await drain(queue) == ["hot"]
    assert len(queue) == 0


async def test_per_key_limit_holds_for_adds_during_processing_and_delays() -> None:
    options = WorkQueueOptions(per_key_limit=PerKeyLimit(max_processings=1, window=30.0))
    queue, clock = make_queue(options=options)
    queue.add("k")
    await take(queue)
    queue.add("k")
    clock.advance_to(1.0)
    queue.done("k")  # dirty, but the window allows the next start only at t=30
    assert (len(queue), queue.ready_count) == (1, 0)
    queue.add_after("k", 5.0)  # an earlier request still cannot beat the cap
    clock.advance_to(29.5)
    assert queue.ready_count == 0
    clock.advance_to(30.0)
    assert await drain(queue) == ["k"]


# --------------------------------------------------------------------------------------------
# Shutdown


async def test_shutdown_wakes_waiting_workers_with_shutdown_error() -> None:
    queue, _ = make_queue()
    workers = [asyncio.create_task(queue.get()) for _ in range(3)]
    await settle()
    queue.shutdown()
    results = await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), GET_TIMEOUT)
    assert all(isinstance(result, ShutDown) for result in results)
    assert "'test' is shut down" in str(results[0])


async def test_shutdown_stops_handing_out_keys_and_ignores_later_adds() -> None:
    queue, clock = make_queue()
    queue.add("waiting")
    queue.add_after("delayed", 5.0)
    queue.shutdown()
    assert queue.shutting_down
    assert (len(queue), queue.ready_count) == (0, 0)
    assert clock.pending_timers == 0
    with pytest.raises(ShutDown):
        await queue.get()
    queue.add("late")
    queue.add_after("late", 1.0)
    queue.add_rate_limited("late")
    assert len(queue) == 0
    assert queue.num_requeues("late") == 0
    queue.shutdown()  # idempotent


async def test_in_flight_keys_can_still_be_done_after_shutdown() -> None:
    queue, _ = make_queue()
    queue.add("k")
    await take(queue)
    queue.add("k")
    queue.shutdown()
    queue.done("k")
    assert (len(queue), queue.in_flight_count) == (0, 0)


async def test_shutdown_with_drain_returns_true_when_in_flight_work_finishes() -> None:
    queue, _ = make_queue()
    queue.add("a")
    queue.add("b")
    await take(queue)
    await take(queue)
    drain_task = asyncio.create_task(queue.shutdown_with_drain(timeout=30.0))
    await settle()
    assert not drain_task.done()
    queue.done("a")
    await settle()
    assert not drain_task.done()
    queue.done("b")
    assert await asyncio.wait_for(drain_task, GET_TIMEOUT) is True


async def test_shutdown_with_drain_reports_false_at_the_deadline() -> None:
    queue, clock = make_queue()
    queue.add("stuck")
    await take(queue)
    drain_task = asyncio.create_task(queue.shutdown_with_drain(timeout=30.0))
    await settle()
    clock.advance_to(29.9)
    await settle()
    assert not drain_task.done()
    clock.advance_to(30.0)
    assert await asyncio.wait_for(drain_task, GET_TIMEOUT) is False
    assert queue.in_flight_count == 1
    assert clock.pending_timers == 0


async def test_shutdown_with_drain_with_nothing_in_flight_or_zero_timeout() -> None:
    idle, _ = make_queue()
    assert await idle.shutdown_with_drain(timeout=10.0) is True
    busy, _ = make_queue()
    busy.add("k")
    await take(busy)
    assert await busy.shutdown_with_drain(timeout=0.0) is False
    with pytest.raises(ValueError, match="timeout"):
        await busy.shutdown_with_drain(timeout=-1.0)


async def test_shutdown_with_drain_without_deadline_waits_for_done() -> None:
    queue, clock = make_queue()
    queue.add("k")
    await take(queue)
    drain_task = asyncio.create_task(queue.shutdown_with_drain(timeout=float("inf")))
    await settle()
    assert clock.pending_timers == 0
    queue.done("k")
    assert await asyncio.wait_for(drain_task, GET_TIMEOUT) is True


# --------------------------------------------------------------------------------------------
# Cancellation and waking


async def test_cancelled_waiting_worker_does_not_swallow_a_key() -> None:
    queue, _ = make_queue()
    cancelled = asyncio.create_task(queue.get())
    other = asyncio.create_task(queue.get())
    await settle()
    cancelled.cancel()
    await settle()
    queue.add("k")
    assert await asyncio.wait_for(other, GET_TIMEOUT) == "k"
    assert cancelled.cancelled()


async def test_worker_cancelled_after_being_woken_passes_the_wakeup_on() -> None:
    queue, _ = make_queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await settle()
    queue.add("k")  # wakes the first worker...
    first.cancel()  # ...which is cancelled before it runs again
    assert await asyncio.wait_for(second, GET_TIMEOUT) == "k"
    assert first.cancelled()
    assert queue.in_flight_count == 1


async def test_each_ready_key_wakes_its_own_worker() -> None:
    queue, _ = make_queue()
    workers = [asyncio.create_task(queue.get()) for _ in range(4)]
    await settle()
    for key in "abcd":
        queue.add(key)
    got = await asyncio.wait_for(asyncio.gather(*workers), GET_TIMEOUT)
    assert sorted(got) == list("abcd")


async def test_real_loop_clock_delays_and_wakeups() -> None:
    """On the default clock (the real loop's) a delayed key wakes a waiting worker when due.

    How long that took is not asserted: the loop runs its timers in deadline order, so a
    loop timer set for before the key's delay has fired by the time the key is handed out.
    """
    queue: WorkQueue[str] = WorkQueue("real-clock")
    earlier = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, earlier.set)
    queue.add_after("k", 0.02)
    assert queue.ready_count == 0
    assert await asyncio.wait_for(queue.get(), GET_TIMEOUT) == "k"
    assert earlier.is_set(), "the key was handed out before its delay"
    queue.done("k")
    assert await queue.shutdown_with_drain(timeout=1.0) is True


# --------------------------------------------------------------------------------------------
# Construction


def test_queue_needs_a_name() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        WorkQueue[str]("")


def test_rate_limiter_and_rate_limit_options_are_exclusive() -> None:
    clock = ManualClock()
    with pytest.raises(ValueError, match=r"either rate_limiter or options\.rate_limits"):
        WorkQueue[str](
            "test",
            WorkQueueOptions(rate_limits=RateLimiterOptions(base_delay=1.0)),
            rate_limiter=default_controller_rate_limiter(clock=clock),
            clock=clock,
        )


def test_options_reject_wrong_types_with_the_field_name() -> None:
    with pytest.raises(TypeError, match="rate_limits"):
        a_dict: Any = {"base_delay": 1.0}  # deliberately not RateLimiterOptions
        WorkQueueOptions(rate_limits=a_dict)
    with pytest.raises(TypeError, match="per_key_limit"):
        a_tuple: Any = (1, 2.0)  # deliberately not a PerKeyLimit
        WorkQueueOptions(per_key_limit=a_tuple)


def test_repr_shows_counts() -> None:
    queue, _ = make_queue()
    queue.add("a")
    queue.add_after("b", 1.0)
    assert repr(queue) == "<WorkQueue 'test' ready=1 delayed=1 in_flight=0>"
    queue.shutdown()
    assert repr(queue).endswith("shut down>")
