"""Blocking (plain ``def``) reconcilers and cleanups: threads, the facade, timeouts (issue 30).

The controller runs over the public FakeClient, as in test_controller.py; a reconcile
"blocks" on a ``threading.Event`` the test releases, so nothing depends on how long a
thread takes. The same on the real control plane, with leader election and a second key
converging while one blocks in ``time.sleep``, is tests/integration/controller/
test_blocking_reconcile.py.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from setpoint.api.keys import ObjectKey
from setpoint.api.meta import annotations_of
from setpoint.cache import Cache
from setpoint.client.patch import MergePatch
from setpoint.client.protocols import ApiClient, IndexReader
from setpoint.controller import (
    Builder,
    CleanupRetry,
    ClusterRequest,
    ControllerError,
    Request,
    Result,
)
from setpoint.controller.blocking import (
    SyncClient,
    SyncContext,
    SyncReader,
    is_blocking,
    run_blocking,
)
from setpoint.controller.controller import Controller, ControllerOptions
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.manager.clusters import _for_cluster
from setpoint.observability.metrics import Metrics
from setpoint.testing import FakeClient, FakeRecorder, context_for, eventually
from tests._support.widgets import WIDGET, fake_api, put, widget

FAST_RETRIES = RateLimiterOptions(base_delay=0.001, max_delay=0.05)
FIN = "widgets.test.setpoint.dev/cleanup"
HOLD = 30.0  # seconds a blocked thread waits at most, so a failing test cannot hang


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    await put(fake, widget("a"))
    await put(fake, widget("b"))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics(CollectorRegistry())


class Started:
    """Starts controllers over the fake and stops them when the test ends."""

    def __init__(self, api: FakeClient, cache: Cache, metrics: Metrics) -> None:
        self.api, self.cache, self.metrics = api, cache, metrics
        self.controllers: list[Controller] = []

    async def start(self, builder: Builder, reconciler: Any, **options: Any) -> Controller:
        controller = builder.with_options(
            ControllerOptions(rate_limits=FAST_RETRIES, **options)
        ).build(reconciler, client=self.api, cache=self.cache, metrics=self.metrics)
        await controller.start()
        self.controllers.append(controller)
        return controller


@pytest.fixture
async def started(api: FakeClient, cache: Cache, metrics: Metrics) -> AsyncIterator[Started]:
    running = Started(api, cache, metrics)
    try:
        yield running
    finally:
        for controller in running.controllers:
            await controller.stop(5)


def sample(metric: Any, *labels: str) -> float:
    return float(metric.labels(*labels).get())


# -- which functions block -----------------------------------------------------------------------


def test_plain_functions_block_and_async_ones_do_not() -> None:
    def plain(ctx: SyncContext, request: Request) -> None:
        return None

    async def coroutine(ctx: Any, request: Request) -> None:
        return None

    @functools.wraps(coroutine)
    def decorated(*args: Any) -> Any:
        return coroutine(*args)

    class Plain:
        def reconcile(self, ctx: SyncContext, request: Request) -> None:
            return None

        def __call__(self, ctx: SyncContext, request: Request) -> None:
            return None

    class Async:
        async def __call__(self, ctx: Any, request: Request) -> None:
            return None

    assert is_blocking(plain)
    assert is_blocking(functools.partial(plain))
    assert is_blocking(Plain().reconcile)
    assert is_blocking(Plain())
    assert not is_blocking(coroutine)
    assert not is_blocking(functools.partial(coroutine))
    assert not is_blocking(decorated)  # functools.wraps: judged by what it wraps, as kopf does
    assert not is_blocking(Async())


def test_the_facade_states_every_method_of_the_protocols() -> None:
    # One signature per method (client/protocols.py): the blocking facade states the same
    # parameters, and offers every method but the stream and the client's own close.
    def methods(protocol: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(getattr(protocol, name))
            for name in dir(protocol)
            if not name.startswith("_") and inspect.isfunction(getattr(protocol, name))
        }

    for facade, protocol, left_out in (
        (SyncClient, ApiClient, {"watch", "close"}),
        (SyncReader, IndexReader, set()),
    ):
        wanted = methods(protocol)
        offered = methods(facade)
        assert set(offered) == set(wanted) - left_out, facade
        for name, signature in offered.items():
            assert list(signature.parameters.values()) == list(wanted[name].parameters.values()), (
                f"{facade.__name__}.{name}"
            )
    assert isinstance(inspect.getattr_static(SyncClient, "default_namespace"), property)


# -- a blocking reconcile in a running controller -----------------------------------------------


async def test_a_blocking_reconcile_runs_in_a_thread_while_the_loop_runs_on(
    api: FakeClient, cache: Cache, metrics: Metrics, started: Started
) -> None:
    release = threading.Event()
    threads: dict[str, str] = {}
    ticks = 0

    def reconcile(ctx: SyncContext, request: Request) -> Result:
        threads[request.name] = threading.current_thread().name
        obj = ctx.reader.get(WIDGET, request.name, namespace=request.namespace)
        if request.name == "a":
            assert release.wait(HOLD)  # blocks its thread, never the loop
        patch = MergePatch({"metadata": {"annotations": {"seen": obj["metadata"]["name"]}}})
        ctx.client.patch(WIDGET, request.name, patch, namespace=request.namespace)
        return Result()

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    try:
        await started.start(
            Builder("widgets").for_(WIDGET),
            reconcile,
            max_concurrent_reconciles=2,
        )

        async def b_written() -> bool:
            b = await api.get(WIDGET, "b", namespace="default")
            return annotations_of(b).get("seen") == "b"

        await eventually(b_written, timeout=10, description="b converges while a blocks")
        assert "a" in threads and not release.is_set()
        before = ticks
        await eventually(lambda: ticks > before + 10, timeout=10, description="the loop runs")
    finally:
        release.set()
        ticker.cancel()

    async def a_written() -> bool:
        a = await api.get(WIDGET, "a", namespace="default")
        return annotations_of(a).get("seen") == "a"

    await eventually(a_written, timeout=10, description="a converges once released")
    assert all(name.startswith("setpoint-widgets") for name in threads.values()), threads


async def test_a_blocking_reconcile_past_its_timeout_keeps_its_key_and_is_reported(
    api: FakeClient,
    cache: Cache,
    metrics: Metrics,
    started: Started,
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    calls: list[str] = []
    after_timeout: list[BaseException] = []

    def stuck_in_the_sdk() -> None:
        assert release.wait(HOLD)

    def reconcile(ctx: SyncContext, request: Request) -> None:
        if request.name != "a":
            return
        calls.append(request.name)
        if len(calls) > 1:
            return
        stuck_in_the_sdk()
        assert ctx.cancelled
        try:
            ctx.reader.get(WIDGET, "a", namespace="default")
        except BaseException as exc:  # the next call refuses, as the next await would
            after_timeout.append(exc)
            raise

    caplog.set_level(logging.WARNING, logger="setpoint.controller")
    controller = await started.start(
        Builder("widgets").for_(WIDGET),
        reconcile,
        reconcile_timeout=0.05,
    )
    overdue = metrics.reconcile_threads_overdue
    await eventually(lambda: sample(overdue, "widgets") == 1, timeout=10, description="overdue")
    key = ObjectKey("default", "a")
    # The key stays held by the worker that waits for the thread: asking again queues it
    # for later, and no second thread starts while the first runs.
    controller.enqueue(key)
    for _ in range(20):
        await asyncio.sleep(0)
    assert controller.holds(key) and calls == ["a"]
    warning = next(r for r in caplog.records if "still running in its thread" in r.getMessage())
    fields: dict[str, Any] = warning.setpoint_fields  # type: ignore[attr-defined]
    assert "stuck_in_the_sdk" in fields["thread_stack"]
    assert fields["limit"] == "reconcile_timeout (0.05s)"

    release.set()
    await eventually(lambda: calls == ["a", "a"], timeout=10, description="retried after it ended")
    assert len(after_timeout) == 1 and isinstance(after_timeout[0], asyncio.CancelledError)
    assert sample(overdue, "widgets") == 0
    assert sample(metrics.reconcile_threads_overdue_total, "widgets") == 1
    assert sample(metrics.reconcile_errors_total, "widgets") == 1  # the timeout
    assert sample(metrics.reconcile_panics_total, "widgets") == 0


async def test_a_stopping_controller_does_not_wait_for_a_blocked_thread(
    api: FakeClient, cache: Cache, metrics: Metrics, started: Started
) -> None:
    release = threading.Event()
    entered = threading.Event()

    def reconcile(ctx: SyncContext, request: Request) -> None:
        if request.name == "a":
            entered.set()
            assert release.wait(HOLD)

    controller = await started.start(Builder("widgets").for_(WIDGET), reconcile)
    try:
        await eventually(entered.is_set, timeout=10, description="a blocks")
        await controller.stop(0.05)  # returns although the thread still runs
        assert controller.queue.in_flight_count == 0
        assert sample(metrics.reconcile_threads_overdue, "widgets") == 1
    finally:
        release.set()
    await eventually(
        lambda: sample(metrics.reconcile_threads_overdue, "widgets") == 0,
        timeout=10,
        description="the thread ended",
    )


async def test_a_restarted_controller_waits_for_the_thread_its_predecessor_left(
    api: FakeClient, cache: Cache, metrics: Metrics, started: Started
) -> None:
    release = threading.Event()
    entered = threading.Event()
    running: list[str] = []
    overlaps: list[str] = []
    lock = threading.Lock()

    def reconcile(ctx: SyncContext, request: Request) -> None:
        if request.name != "a":
            return
        with lock:
            if running:
                overlaps.append(request.name)
            running.append(request.name)
        try:
            entered.set()
            if not release.is_set():
                assert release.wait(HOLD)
        finally:
            with lock:
                running.remove(request.name)

    first = await started.start(Builder("widgets").for_(WIDGET), reconcile)
    await eventually(entered.is_set, timeout=10, description="a blocks")
    await first.stop(0.05)  # leaves the thread running
    entered.clear()
    # A new run of the same controller (a new leader term, say) over the same cache.
    second = await started.start(Builder("widgets").for_(WIDGET), reconcile)
    for _ in range(50):
        await asyncio.sleep(0)
    assert not entered.is_set() and second.holds(ObjectKey("default", "a"))
    release.set()
    await eventually(entered.is_set, timeout=10, description="a reconciled by the new run")
    assert overlaps == []


async def test_a_blocking_cleanup_runs_in_a_thread_before_the_finalizer_goes(
    api: FakeClient, cache: Cache, metrics: Metrics, started: Started
) -> None:
    cleaned: list[tuple[str, str]] = []

    def cleanup(ctx: SyncContext, obj: Any) -> None:
        fresh = ctx.reader.get(WIDGET, obj["metadata"]["name"], namespace="default")
        cleaned.append((threading.current_thread().name, fresh["metadata"]["name"]))

    async def reconcile(ctx: Any, request: Request) -> None:
        return None

    await started.start(
        Builder("widgets").for_(WIDGET).finalizer(FIN, cleanup, deadline=10), reconcile
    )

    async def has_finalizer() -> bool:
        a = await api.get(WIDGET, "a", namespace="default")
        return FIN in a["metadata"].get("finalizers", [])

    await eventually(has_finalizer, timeout=10, description="finalizer added")
    await api.delete(WIDGET, "a", namespace="default")

    async def gone() -> bool:
        return "a" not in [o["metadata"]["name"] for o in await api.list(WIDGET)]

    await eventually(gone, timeout=10, description="cleaned up and deleted")
    assert len(cleaned) == 1
    thread, name = cleaned[0]
    assert thread.startswith("setpoint-widgets") and name == "a"


# -- the facade on its own -------------------------------------------------------------------------


async def test_the_facade_refuses_the_event_loops_thread() -> None:
    fake = fake_api()
    ctx = SyncContext.of(context_for(fake, ObjectKey("default", "a")), asyncio.get_running_loop())
    with pytest.raises(ControllerError, match="deadlock"):
        ctx.reader.get(WIDGET, "a", namespace="default")
    with pytest.raises(ControllerError, match="deadlock"):
        ctx.client.create(widget("c"))
    assert (await fake.list(WIDGET)).items == []


async def test_run_blocking_drives_a_blocking_reconciler_in_a_unit_test() -> None:
    fake = fake_api()
    await put(fake, widget("a"))
    events = FakeRecorder()
    ctx = context_for(fake, ObjectKey("default", "a"), recorder=events)

    def reconcile(ctx: SyncContext, request: Request) -> Result:
        obj = ctx.reader.get(WIDGET, request.name, namespace=request.namespace)
        ctx.client.create(widget(f"{request.name}-child"))
        assert ctx.recorder is not None
        ctx.recorder.event(obj, "Normal", "ChildCreated", "made a child")
        child = ctx.run(fake.get(WIDGET, "a-child", namespace="default"))
        return Result(requeue_after=float(len(child["metadata"]["name"])))

    result = await run_blocking(reconcile, ctx, ctx.request)
    assert result == Result(requeue_after=7.0)
    await eventually(lambda: events.events, timeout=5, description="the Event reached the loop")
    assert [e.reason for e in events.events] == ["ChildCreated"]
    assert (await fake.get(WIDGET, "a-child", namespace="default"))["metadata"]["name"]


async def test_an_error_in_the_thread_is_raised_to_the_controller_as_it_is() -> None:
    fake = fake_api()
    ctx = context_for(fake, ObjectKey("default", "missing"))

    def reconcile(ctx: SyncContext, request: Request) -> None:
        ctx.reader.get(WIDGET, request.name, namespace=request.namespace)

    from setpoint.client.errors import NotFound

    with pytest.raises(NotFound):
        await run_blocking(reconcile, ctx, ctx.request)


async def test_a_blocking_cleanup_past_its_deadline_is_waited_for_and_retried(
    api: FakeClient, cache: Cache, metrics: Metrics, started: Started
) -> None:
    release = threading.Event()
    runs: list[bool] = []

    def cleanup(ctx: SyncContext, obj: Any) -> None:
        runs.append(True)
        if len(runs) == 1:
            assert release.wait(HOLD)  # an SDK call that outlives the deadline

    async def reconcile(ctx: Any, request: Request) -> None:
        return None

    retry = CleanupRetry(base_delay=0.01, max_delay=0.05)
    await started.start(
        Builder("widgets").for_(WIDGET).finalizer(FIN, cleanup, deadline=0.05, retry=retry),
        reconcile,
    )

    async def has_finalizer() -> bool:
        a = await api.get(WIDGET, "a", namespace="default")
        return FIN in a["metadata"].get("finalizers", [])

    await eventually(has_finalizer, timeout=10, description="finalizer added")
    await api.delete(WIDGET, "a", namespace="default")
    overdue = metrics.reconcile_threads_overdue
    await eventually(lambda: sample(overdue, "widgets") == 1, timeout=10, description="overdue")
    assert runs == [True]  # the object's key is held: no second cleanup meanwhile
    release.set()

    async def gone() -> bool:
        return "a" not in [o["metadata"]["name"] for o in await api.list(WIDGET)]

    await eventually(gone, timeout=10, description="retried, then deleted")
    assert runs == [True, True]
    failures = metrics.finalizer_cleanup_failures_total
    assert sample(failures, "widgets", FIN) == 1  # the deadline, counted once
    assert sample(overdue, "widgets") == 0


def test_a_blocking_multi_cluster_reconciler_gets_its_cluster_request() -> None:
    seen: list[ClusterRequest] = []

    def reconcile(ctx: SyncContext, request: ClusterRequest) -> None:
        seen.append(request)

    wrapped = _for_cluster(reconcile, "east")  # a blocking function is a reconciler too
    assert is_blocking(wrapped)
    ctx: Any = object()
    assert wrapped(ctx, ObjectKey("prod", "web")) is None
    assert seen == [ClusterRequest("east", "prod", "web")]


async def test_a_plain_def_that_returns_a_coroutine_is_told_to_be_async() -> None:
    fake = fake_api()
    ctx = context_for(fake, ObjectKey("default", "a"))

    async def the_real_work(ctx: Any, request: Request) -> None:
        return None

    def reconcile(ctx: SyncContext, request: Request) -> Any:
        return the_real_work(ctx, request)

    with pytest.raises(TypeError, match="returned a coroutine: declare it 'async def'"):
        await run_blocking(reconcile, ctx, ctx.request)
