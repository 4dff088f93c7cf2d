"""kstatus conditions: Ready, Reconciling, Stalled and observedGeneration from the outcome.

The pure part (:func:`apply_outcome`) is checked on status dicts; the controller part runs a
controller over the FakeClient and a real Cache and counts the status writes it makes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import setpoint as sp
from setpoint.api.conditions import find_condition, set_condition
from setpoint.cache import Cache
from setpoint.controller import Builder, Controller, ControllerOptions
from setpoint.controller.health import (
    RETRY_REASON,
    SUCCEEDED_REASON,
    Outcome,
    apply_outcome,
    holds_outcome,
)
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient, FakeRecorder, eventually

FAST = RateLimiterOptions(base_delay=0.001, max_delay=0.02)
GVK = sp.GroupVersionKind("health.test.setpoint.dev", "v1", "Widget")


class WidgetSpec(sp.Model):
    """What the widget wants."""

    size: int = 1
    """Anything."""


class WidgetStatus(sp.Model):
    """What the controller saw."""

    observed_generation: int | None = None
    """The generation this status describes."""
    conditions: list[sp.Condition] = sp.field(default_factory=list)
    """Conditions."""


@sp.resource(group="health.test.setpoint.dev", version="v1")
class Widget(sp.Resource):
    """A test kind with a status subresource."""

    spec: WidgetSpec
    status: WidgetStatus | None = None


def obj(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w", "generation": generation}, "status": dict(status)}


def conditions(o: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in o["status"].get("conditions", [])}


# -- apply_outcome ---------------------------------------------------------------------------


def test_success_sets_ready_and_observed_generation() -> None:
    o = obj(3)
    apply_outcome(o, Outcome.SUCCEEDED, 3, "Stalled")
    assert o["status"]["observedGeneration"] == 3
    assert conditions(o) == {"Ready": ("True", SUCCEEDED_REASON)}
    assert o["status"]["conditions"][0]["observedGeneration"] == 3


def test_retry_sets_reconciling_and_ready_false_then_success_clears_it() -> None:
    o = obj(2)
    apply_outcome(o, Outcome.RETRYING, 2, "Stalled", message="boom")
    assert conditions(o) == {
        "Reconciling": ("True", RETRY_REASON),
        "Ready": ("False", RETRY_REASON),
    }
    apply_outcome(o, Outcome.SUCCEEDED, 2, "Stalled")
    assert conditions(o) == {"Ready": ("True", SUCCEEDED_REASON)}


def test_a_new_message_alone_is_not_a_transition() -> None:
    """Retries whose error text differs write nothing: the write would requeue at once."""
    o = obj(2)
    apply_outcome(o, Outcome.RETRYING, 2, "Stalled", message="first error")
    before = repr(o)
    apply_outcome(o, Outcome.RETRYING, 2, "Stalled", message="second error, other text")
    assert repr(o) == before


def test_terminal_sets_stalled_and_ready_false_and_drops_reconciling() -> None:
    o = obj(4)
    apply_outcome(o, Outcome.RETRYING, 4, "Stalled", message="x")
    apply_outcome(o, Outcome.STALLED, 4, "Stalled", reason="InvalidSelector", message="bad")
    assert conditions(o) == {
        "Ready": ("False", "Stalled"),
        "Stalled": ("True", "InvalidSelector"),
    }
    apply_outcome(o, Outcome.SUCCEEDED, 5, "Stalled")
    assert conditions(o) == {"Ready": ("True", SUCCEEDED_REASON)}
    assert o["status"]["observedGeneration"] == 5


def test_the_authors_ready_and_reconciling_are_left_alone() -> None:
    o = obj(1)
    set_condition(o["status"], "Ready", False, "WaitingForDatabase", "db not up")
    set_condition(o["status"], "Reconciling", True, "RollingOut", "2 of 3")
    apply_outcome(o, Outcome.SUCCEEDED, 1, "Stalled")
    assert conditions(o) == {
        "Ready": ("False", "WaitingForDatabase"),
        "Reconciling": ("True", "RollingOut"),
    }
    apply_outcome(o, Outcome.RETRYING, 1, "Stalled", message="x")
    assert conditions(o)["Ready"] == ("False", "WaitingForDatabase")


def test_observed_generation_never_goes_back() -> None:
    o = obj(7, observedGeneration=7)
    apply_outcome(o, Outcome.SUCCEEDED, 6, "Stalled")
    assert o["status"]["observedGeneration"] == 7


def test_holds_outcome_sees_a_pruned_write() -> None:
    assert holds_outcome(obj(2, observedGeneration=2), 2)
    assert not holds_outcome(obj(2, conditions=[]), 2)


def test_the_option_needs_stalled_as_the_terminal_condition() -> None:
    with pytest.raises(ValueError, match="terminal_condition='Stalled'"):
        ControllerOptions(kstatus_conditions=True, terminal_condition=None)
    assert Builder("w").kstatus_conditions().options.kstatus_conditions


# -- the controller --------------------------------------------------------------------------


class Flaky:
    """Fails ``failures`` times (retryably), then returns ``result``."""

    def __init__(self, failures: int, result: sp.Result | None = None) -> None:
        self.failures = failures
        self.result = result
        self.count = 0

    async def reconcile(self, ctx: sp.Context, request: sp.Request) -> sp.Result | None:
        self.count += 1
        if self.count <= self.failures:
            raise sp.ReconcileError(f"attempt {self.count} failed")
        return self.result


@contextlib.asynccontextmanager
async def start(fake: FakeClient, reconciler: Any) -> AsyncIterator[Controller]:
    cache = Cache(fake)
    builder = Builder("widgets").for_(Widget).kstatus_conditions()
    builder.with_options(ControllerOptions(rate_limits=FAST, kstatus_conditions=True))
    controller = builder.build(
        reconciler,
        client=fake,
        cache=cache,
        recorder=FakeRecorder(),
        metrics=Metrics(CollectorRegistry()),
    )
    await cache.start()
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop(5)
        await cache.stop(5)


def widget() -> dict[str, Any]:
    return {
        "apiVersion": "health.test.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"size": 1},
    }


def status_writes(fake: FakeClient) -> list[dict[str, Any]]:
    return [c.body for c in fake.faults.calls_to("update", GVK) if c.subresource == "status"]


def stored(fake: FakeClient) -> dict[str, Any]:
    found = fake.lookup(GVK, "w", namespace="default")
    assert found is not None
    return found


async def test_a_run_of_failures_writes_once_then_success_writes_ready() -> None:
    """Five retried failures cost one Reconciling write; the success one Ready write."""
    fake = FakeClient(resources=[Widget])
    await fake.create(widget())
    flaky = Flaky(failures=5)
    async with start(fake, flaky) as controller:
        await eventually(lambda: flaky.count > 5, timeout=10)
        await controller.wait_idle(timeout=10, settle=0.2)
    writes = status_writes(fake)
    assert [conditions(w).get("Reconciling") for w in writes] == [
        ("True", RETRY_REASON),
        None,
    ]
    final = stored(fake)["status"]
    assert final["observedGeneration"] == 1
    ready = find_condition(final, "Ready")
    assert ready is not None and (ready.status, ready.reason) == ("True", SUCCEEDED_REASON)
    # Failures 1..5, then a success; the Reconciling write's event adds at most one more.
    assert flaky.count in {6, 7}


async def test_periodic_requeue_after_is_ready_and_writes_once() -> None:
    """``Result(requeue_after=...)`` is success: Ready True, and no write on the re-checks."""
    fake = FakeClient(resources=[Widget])
    await fake.create(widget())
    periodic = Flaky(failures=0, result=sp.Result(requeue_after=0.01))
    async with start(fake, periodic):
        await eventually(lambda: periodic.count >= 5, timeout=10)
    assert len(status_writes(fake)) == 1
    assert conditions(stored(fake)) == {"Ready": ("True", SUCCEEDED_REASON)}


async def test_a_spec_change_moves_observed_generation() -> None:
    fake = FakeClient(resources=[Widget])
    await fake.create(widget())
    ok = Flaky(failures=0)
    async with start(fake, ok) as controller:
        await eventually(lambda: stored(fake).get("status", {}).get("observedGeneration") == 1)
        current = stored(fake)
        current["spec"]["size"] = 2
        await fake.update(current)
        await eventually(lambda: stored(fake)["status"].get("observedGeneration") == 2)
        await controller.wait_idle(timeout=10, settle=0.2)
    ready = find_condition(stored(fake)["status"], "Ready")
    assert ready is not None and ready.observed_generation == 2
