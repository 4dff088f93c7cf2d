"""Property test: random operation sequences against a simple reference model of the queue.

The model keeps, per key, whether it has been requested since its last start, the earliest
time requested, the highest priority requested, and whether it is in flight. After every
operation the queue must agree with the model on what is ready, waiting and in flight; every
key handed out must be ready in the model and of the highest ready priority; and at the end,
with time run forward and all work finished, no request may be left unserved. The same
model holds for a fair queue (``fair_by``): fairness changes only the order among ready keys
of one priority, which the model leaves open.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from setpoint.api.clock import ManualClock
from setpoint.controller.workqueue import WorkQueue

KEYS = ["a", "b", "c", "d", "e"]
PRIORITIES = [-100, 0, 5]


@dataclass
class _KeyModel:
    pending: bool = False
    earliest: float = 0.0
    priority: int = -(10**9)
    in_flight: bool = False

    def request(self, when: float, priority: int) -> None:
        if self.pending:
            self.earliest = min(self.earliest, when)
            self.priority = max(self.priority, priority)
        else:
            self.pending, self.earliest, self.priority = True, when, priority


operation = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(KEYS), st.sampled_from(PRIORITIES)),
    st.tuples(
        st.just("add_after"),
        st.sampled_from(KEYS),
        st.sampled_from(PRIORITIES),
        st.sampled_from([0.5, 1.0, 2.0, 5.0]),
    ),
    st.tuples(st.just("get")),
    st.tuples(st.just("done"), st.integers(min_value=0, max_value=10)),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 3.0])),
)


def _model_ready(model: dict[str, _KeyModel], now: float) -> dict[str, _KeyModel]:
    return {
        key: state
        for key, state in model.items()
        if state.pending and not state.in_flight and state.earliest <= now
    }


def _group(key: str) -> str:
    return "ab" if key in "ab" else "cde"


async def _run(operations: list[tuple[object, ...]], *, fair: bool = False) -> None:
    clock = ManualClock()
    queue: WorkQueue[str] = WorkQueue("model", clock=clock, fair_by=_group if fair else None)
    model = {key: _KeyModel() for key in KEYS}
    in_flight: list[str] = []

    async def take() -> None:
        now = clock.now()
        ready = _model_ready(model, now)
        key, priority = await asyncio.wait_for(queue.get_with_priority(), 5.0)
        assert key in ready, f"{key} handed out but not ready in the model at t={now}"
        assert priority == ready[key].priority
        assert priority == max(state.priority for state in ready.values())
        state = model[key]
        state.pending, state.in_flight = False, True
        in_flight.append(key)

    def finish(index: int) -> None:
        key = in_flight.pop(index % len(in_flight))
        model[key].in_flight = False
        queue.done(key)

    def check() -> None:
        now = clock.now()
        assert queue.ready_count == len(_model_ready(model, now))
        assert len(queue) == sum(state.pending for state in model.values())
        assert queue.in_flight_count == len(in_flight)

    for op in operations:
        kind = op[0]
        if kind == "add":
            _, key, priority = op
            assert isinstance(key, str) and isinstance(priority, int)
            model[key].request(clock.now(), priority)
            queue.add(key, priority=priority)
        elif kind == "add_after":
            _, key, priority, delay = op
            assert isinstance(key, str) and isinstance(priority, int)
            assert isinstance(delay, float)
            model[key].request(clock.now() + delay, priority)
            queue.add_after(key, delay, priority=priority)
        elif kind == "get":
            if queue.ready_count:
                await take()
        elif kind == "done":
            if in_flight:
                index = op[1]
                assert isinstance(index, int)
                finish(index)
        else:
            seconds = op[1]
            assert isinstance(seconds, float)
            clock.advance(seconds)
        check()

    # Finish everything: no request may be lost.
    while in_flight:
        finish(0)
    clock.advance(100.0)
    check()
    while queue.ready_count:
        await take()
        finish(0)
        check()
    assert len(queue) == 0
    assert not any(state.pending for state in model.values())
    assert clock.pending_timers == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=60))
def test_queue_agrees_with_reference_model(operations: list[tuple[object, ...]]) -> None:
    asyncio.run(_run(operations))


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=60))
def test_fair_queue_agrees_with_reference_model(operations: list[tuple[object, ...]]) -> None:
    asyncio.run(_run(operations, fair=True))
