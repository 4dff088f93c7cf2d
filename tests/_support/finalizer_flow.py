"""Finalizer scenarios on a running controller: states, cleanup, failures, backoff, metrics.

Each scenario runs a real Controller (cache, work queue, workers) over a ``Backend``: the
fake client (tests/unit/controller/test_finalizers_flow.py) or, in
tests/integration/finalizers/test_finalizers_parity.py, both the fake and the real API
server, so the fake is held to the server's behaviour for finalizers, deletion, the status
subresource and resourceVersion conflicts. The scenarios are plain coroutines taking a
backend; the test modules wrap them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from prometheus_client import CollectorRegistry

from setpoint.api.conditions import find_condition
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject, finalizers_of, metadata_of
from setpoint.cache import Cache, CacheOptions
from setpoint.client import NotFound
from setpoint.client.safe import remove_finalizer
from setpoint.controller import Builder, Context, Controller, Request, Result
from setpoint.controller.finalizers import (
    CleanupRetry,
    cleanup_annotation,
    cleanup_condition_type,
    read_cleanup_records,
)
from setpoint.observability.metrics import Metrics
from setpoint.testing import eventually
from setpoint.testing.fake import FakeClient, FakeOptions
from tests._support.kinds import CRDS, DOODAD, GIZMO

FIN = "widgets.test.setpoint.dev/directory"
FIN2 = "widgets.test.setpoint.dev/dns"
FOREIGN = "other.example.com/hold"
FAST = CleanupRetry(base_delay=0.2, max_delay=0.8)


@dataclass
class Backend:
    """Where a test runs: a client (fake or real) and a namespace of its own."""

    client: Any
    namespace: str
    name: str

    def obj(self, kind: GroupVersionKind, name: str, **metadata: Any) -> JsonObject:
        return {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": name, "namespace": self.namespace, **metadata},
            "spec": {"size": 1},
        }

    async def read(self, kind: GroupVersionKind, name: str) -> JsonObject | None:
        try:
            got: JsonObject = await self.client.get(kind, name, namespace=self.namespace)
        except NotFound:
            return None
        return got

    async def gone(self, kind: GroupVersionKind, name: str) -> bool:
        return await self.read(kind, name) is None

    async def release(self, kind: GroupVersionKind, name: str, *finalizers: str) -> None:
        """Drop finalizers a test left behind, so its namespace can go."""
        for finalizer in finalizers:
            with contextlib.suppress(NotFound):
                await remove_finalizer(
                    self.client,
                    await self.client.get(kind, name, namespace=self.namespace),
                    finalizer,
                )


def fake_backend() -> Backend:
    """The fake, with the test CRDs and a namespace of its own (required, as on the server)."""
    namespace = f"fin-{uuid.uuid4().hex[:6]}"
    fake = FakeClient(
        options=FakeOptions(require_namespaces=True),
        objects=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, *CRDS],
    )
    return Backend(fake, namespace, "fake")


class Recorder:
    """An in-memory EventRecorder."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def event(self, obj: Any, type: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], type, reason, message))


@dataclass
class Journal:
    """What the reconciler and the cleanups saw."""

    reconciled: list[JsonObject] = field(default_factory=list)
    cleanups: list[tuple[str, str, float]] = field(default_factory=list)  # finalizer, name, t
    finished: list[tuple[str, str]] = field(default_factory=list)

    def starts(self, finalizer: str, name: str) -> list[float]:
        return [t for f, n, t in self.cleanups if f == finalizer and n == name]


class Operator:
    """One controller with finalizer handlers over a backend, and what it saw."""

    def __init__(self, backend: Backend, name: str = "widgets") -> None:
        self.backend = backend
        self.name = name
        self.journal = Journal()
        self.recorder = Recorder()
        self.metrics = Metrics(CollectorRegistry())
        self.cache: Cache | None = None
        self.controller: Controller | None = None

    async def reconcile(self, ctx: Context, request: Request) -> Result | None:
        assert ctx.gvk is not None
        try:
            obj = await ctx.reader.get(ctx.gvk, request.name, namespace=request.namespace)
        except NotFound:
            return None
        self.journal.reconciled.append(obj)
        return None

    def cleanup(
        self, finalizer: str, behaviour: Callable[[JsonObject], Awaitable[None]] | None = None
    ) -> Callable[[Context, Any], Awaitable[None]]:
        async def run(ctx: Context, obj: Any) -> None:
            data = obj if isinstance(obj, dict) else obj.to_object()
            self.journal.cleanups.append((finalizer, data["metadata"]["name"], time.monotonic()))
            if behaviour is not None:
                await behaviour(data)
            self.journal.finished.append((finalizer, data["metadata"]["name"]))

        return run

    async def start(self, builder: Builder) -> Controller:
        self.cache = Cache(
            self.backend.client, options=CacheOptions(namespaces=(self.backend.namespace,))
        )
        await self.cache.start()
        self.controller = builder.build(
            self.reconcile,
            client=self.backend.client,
            cache=self.cache,
            metrics=self.metrics,
            recorder=self.recorder,
        )
        await self.controller.start()
        return self.controller

    async def stop(self) -> None:
        if self.controller is not None:
            await self.controller.stop(5)
        if self.cache is not None:
            await self.cache.stop(5)

    def gauge(self, metric: str, finalizer: str) -> float:
        value = self.metrics.registry.get_sample_value(metric, {"finalizer": finalizer})
        return -1.0 if value is None else value

    def failures(self, finalizer: str) -> float:
        value = self.metrics.registry.get_sample_value(
            "setpoint_finalizer_cleanup_failures_total",
            {"controller": self.name, "finalizer": finalizer},
        )
        return 0.0 if value is None else value

    def successes(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": self.name, "result": "success"}
        )
        return 0.0 if value is None else value


@contextlib.asynccontextmanager
async def running(
    backend: Backend, builder_for: Callable[[Operator], Builder]
) -> AsyncIterator[Operator]:
    operator = Operator(backend)
    await operator.start(builder_for(operator))
    try:
        yield operator
    finally:
        await operator.stop()


async def has_finalizers(backend: Backend, kind: GroupVersionKind, name: str, *names: str) -> bool:
    obj = await backend.read(kind, name)
    return obj is not None and all(n in finalizers_of(obj) for n in names)


# -- the scenarios ------------------------------------------------------------------------------


async def finalizer_is_in_place_before_reconcile_runs(backend: Backend) -> None:
    """A live object gets the finalizer first; reconcile only ever sees it protected."""
    async with running(
        backend,
        lambda op: Builder(op.name).for_(GIZMO).finalizer(FIN, op.cleanup(FIN), deadline=5),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: op.journal.reconciled, timeout=20, description="reconciled")
        assert all(FIN in finalizers_of(o) for o in op.journal.reconciled)
        assert await has_finalizers(backend, GIZMO, "w1", FIN)
        assert op.journal.cleanups == []
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")


async def delete_runs_cleanup_removes_finalizer_and_skips_reconcile(backend: Backend) -> None:
    """Deleting runs the cleanup once with the deleting object, then the object goes.

    Reconcile is not called for the deleting object, and another controller's finalizer
    (added by hand here) is left in place until its owner removes it.
    """
    async with running(
        backend,
        lambda op: Builder(op.name).for_(GIZMO).finalizer(FIN, op.cleanup(FIN), deadline=5),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1", finalizers=[FOREIGN]))
        await eventually(lambda: has_finalizers(backend, GIZMO, "w1", FOREIGN, FIN), timeout=20)
        await eventually(lambda: op.journal.reconciled, timeout=20, description="reconciled")
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)

        async def only_foreign_left() -> bool:
            obj = await backend.read(GIZMO, "w1")
            return obj is not None and finalizers_of(obj) == [FOREIGN]

        await eventually(only_foreign_left, timeout=20, description="our finalizer removed")
        assert op.journal.finished == [(FIN, "w1")]
        assert not any(metadata_of(o).get("deletionTimestamp") for o in op.journal.reconciled)
        await backend.release(GIZMO, "w1", FOREIGN)
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        assert len(op.journal.starts(FIN, "w1")) == 1


async def failing_cleanup_is_recorded_retried_with_backoff_then_completes(
    backend: Backend,
) -> None:
    """A failing cleanup leaves an annotation, a condition, a Warning Event and a metric.

    Retries follow CleanupRetry's doubling delays even though recording the failure writes
    the object (events that would otherwise run the cleanup again at once). Once the
    cleanup succeeds the finalizer is removed and the pending gauges drop back to zero.
    """
    healthy = asyncio.Event()

    async def flaky(obj: JsonObject) -> None:
        if not healthy.is_set():
            raise RuntimeError("directory service unreachable")

    async with running(
        backend,
        lambda op: (
            Builder(op.name)
            .for_(GIZMO)
            .finalizer(FIN, op.cleanup(FIN, flaky), deadline=5, retry=FAST)
        ),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: has_finalizers(backend, GIZMO, "w1", FIN), timeout=20)
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(
            lambda: len(op.journal.starts(FIN, "w1")) >= 3, timeout=20, description="3 attempts"
        )

        async def recorded() -> JsonObject | None:
            obj = await backend.read(GIZMO, "w1")
            record = read_cleanup_records(obj or {}).get(FIN)
            return obj if record is not None and record.failures >= 2 else None

        obj = await eventually(recorded, timeout=20, description="failure recorded")
        assert obj is not None
        record = read_cleanup_records(obj)[FIN]
        assert record.error == "RuntimeError: directory service unreachable"
        assert record.reason == "CleanupFailed"
        assert record.controller == op.name
        assert record.first_failure <= record.last_failure
        assert cleanup_annotation(FIN) in obj["metadata"]["annotations"]
        condition = find_condition(obj["status"], cleanup_condition_type(FIN))
        assert condition is not None
        assert (condition.status, condition.reason) == ("True", "CleanupFailed")
        assert "directory service unreachable" in condition.message
        assert any(e[1:3] == ("Warning", "CleanupFailed") for e in op.recorder.events)
        assert op.failures(FIN) >= 2
        assert op.gauge("setpoint_finalizer_pending_objects", FIN) == 1
        assert op.gauge("setpoint_finalizer_oldest_pending_seconds", FIN) >= 0

        starts = op.journal.starts(FIN, "w1")
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        # Delays 0.2, 0.4, 0.8 (capped): no retry came early (small slack for timers).
        for n, gap in enumerate(gaps[:3]):
            assert gap >= min(0.2 * 2**n, 0.8) * 0.9, gaps

        healthy.set()
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        await eventually(
            lambda: op.gauge("setpoint_finalizer_pending_objects", FIN) == 0,
            timeout=10,
            description="pending gauge back to 0",
        )
        assert op.gauge("setpoint_finalizer_oldest_pending_seconds", FIN) == 0
        assert op.journal.finished == [(FIN, "w1")]


async def credentials_in_a_cleanup_error_are_masked(backend: Backend) -> None:
    """A token or password in a cleanup's exception is masked on the object and in the Event.

    The annotation, the condition and the Warning Event carry the error's text, and everyone
    who may read the object reads them (issue 18: redact cleanup exception text first).
    """
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJlLXBhcnQ"

    async def leaky(obj: JsonObject) -> None:
        raise RuntimeError(f"GET https://svc:hunter2@dir.example/x with token={token} failed")

    async with running(
        backend,
        lambda op: (
            Builder(op.name)
            .for_(GIZMO)
            .finalizer(FIN, op.cleanup(FIN, leaky), deadline=5, retry=FAST)
        ),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: has_finalizers(backend, GIZMO, "w1", FIN), timeout=20)
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)

        async def recorded() -> JsonObject | None:
            obj = await backend.read(GIZMO, "w1")
            status = (obj or {}).get("status") or {}
            if FIN in read_cleanup_records(obj or {}) and find_condition(
                status, cleanup_condition_type(FIN)
            ):
                return obj
            return None

        obj = await eventually(recorded, timeout=20, description="failure recorded")
        assert obj is not None
        condition = find_condition(obj["status"], cleanup_condition_type(FIN))
        assert condition is not None
        texts = {
            "annotation": obj["metadata"]["annotations"][cleanup_annotation(FIN)],
            "record": read_cleanup_records(obj)[FIN].error,
            "condition": condition.message,
            "event": next(e[3] for e in op.recorder.events if e[2] == "CleanupFailed"),
        }
        for where, text in texts.items():
            assert token not in text and "hunter2" not in text, (where, text)
            assert "token=<redacted>" in text, (where, text)
        assert texts["record"] == (
            "RuntimeError: GET https://<redacted>@dir.example/x with token=<redacted> failed"
        )
        await backend.release(GIZMO, "w1", FIN)


async def hanging_cleanup_hits_its_deadline_and_is_retried(backend: Backend) -> None:
    """A cleanup that hangs is cancelled at its deadline, recorded as such, and retried."""
    release = asyncio.Event()
    cancelled: list[str] = []

    async def hang(obj: JsonObject) -> None:
        if release.is_set():
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(obj["metadata"]["name"])
            raise

    async with running(
        backend,
        lambda op: (
            Builder(op.name)
            .for_(GIZMO)
            .finalizer(FIN, op.cleanup(FIN, hang), deadline=0.3, retry=FAST)
        ),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: has_finalizers(backend, GIZMO, "w1", FIN), timeout=20)
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(lambda: len(cancelled) >= 2, timeout=20, description="2 deadlines hit")

        async def recorded() -> JsonObject | None:
            obj = await backend.read(GIZMO, "w1")
            return obj if FIN in read_cleanup_records(obj or {}) else None

        obj = await eventually(recorded, timeout=20, description="deadline recorded")
        assert obj is not None
        record = read_cleanup_records(obj)[FIN]
        assert record.reason == "CleanupDeadlineExceeded"
        assert "deadline of 0.3s" in record.error
        condition = find_condition(obj["status"], cleanup_condition_type(FIN))
        assert condition is not None and condition.reason == "CleanupDeadlineExceeded"
        assert op.failures(FIN) >= 2
        assert op.journal.finished == []
        release.set()
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")


async def kind_without_status_subresource_gets_the_annotation_only(backend: Backend) -> None:
    """Without a status subresource the failure is recorded in the annotation; no status."""
    healthy = asyncio.Event()

    async def flaky(obj: JsonObject) -> None:
        if not healthy.is_set():
            raise RuntimeError("no route to host")

    async with running(
        backend,
        lambda op: (
            Builder(op.name)
            .for_(DOODAD)
            .finalizer(FIN, op.cleanup(FIN, flaky), deadline=5, retry=FAST)
        ),
    ) as op:
        await backend.client.create(backend.obj(DOODAD, "g1"))
        await eventually(lambda: has_finalizers(backend, DOODAD, "g1", FIN), timeout=20)
        await backend.client.delete(DOODAD, "g1", namespace=backend.namespace)

        async def recorded() -> JsonObject | None:
            obj = await backend.read(DOODAD, "g1")
            return obj if FIN in read_cleanup_records(obj or {}) else None

        obj = await eventually(recorded, timeout=20, description="failure recorded")
        assert obj is not None
        assert read_cleanup_records(obj)[FIN].error == "RuntimeError: no route to host"
        assert "status" not in obj
        assert op.failures(FIN) >= 1
        healthy.set()
        await eventually(lambda: backend.gone(DOODAD, "g1"), timeout=20, description="g1 gone")


async def no_finalizer_is_added_to_an_object_already_being_deleted(backend: Backend) -> None:
    """An object that is deleting before the controller sees it is left alone.

    No finalizer is added, no cleanup runs (nothing of ours was ever created for it) and
    reconcile is not called.
    """
    await backend.client.create(backend.obj(GIZMO, "w1", finalizers=[FOREIGN]))
    await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
    async with running(
        backend,
        lambda op: Builder(op.name).for_(GIZMO).finalizer(FIN, op.cleanup(FIN), deadline=5),
    ) as op:
        await eventually(lambda: op.successes() >= 1, timeout=20, description="w1 processed")
        obj = await backend.read(GIZMO, "w1")
        assert obj is not None
        assert finalizers_of(obj) == [FOREIGN]
        assert op.journal.cleanups == []
        assert op.journal.reconciled == []
    await backend.release(GIZMO, "w1", FOREIGN)


async def cleanup_pending_from_before_a_restart_runs_on_start(backend: Backend) -> None:
    """An object left deleting with our finalizer (a crashed operator) is finalized on start."""
    await backend.client.create(backend.obj(GIZMO, "w1", finalizers=[FIN]))
    await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
    async with running(
        backend,
        lambda op: Builder(op.name).for_(GIZMO).finalizer(FIN, op.cleanup(FIN), deadline=5),
    ) as op:
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        assert op.journal.finished == [(FIN, "w1")]
        assert op.journal.reconciled == []


async def two_finalizers_of_one_controller_clean_up_last_registered_first(
    backend: Backend,
) -> None:
    """Both are added before reconcile; cleanups run in reverse registration order."""
    async with running(
        backend,
        lambda op: (
            Builder(op.name)
            .for_(GIZMO)
            .finalizer(FIN, op.cleanup(FIN), deadline=5)
            .finalizer(FIN2, op.cleanup(FIN2), deadline=5)
        ),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: op.journal.reconciled, timeout=20, description="reconciled")
        assert all(finalizers_of(o)[-2:] == [FIN, FIN2] for o in op.journal.reconciled)
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        assert op.journal.finished == [(FIN2, "w1"), (FIN, "w1")]


class TypedGizmo:
    """A minimal typed class for GIZMO (the TypedObject protocol)."""

    gvk: ClassVar[GroupVersionKind] = GIZMO

    def __init__(self, data: JsonObject) -> None:
        self.data = data

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        return cls(dict(obj))

    def to_object(self) -> JsonObject:
        return self.data


async def cleanup_of_a_typed_kind_receives_a_typed_object(backend: Backend) -> None:
    """With for_(TypedClass), the cleanup gets an instance of that class."""
    seen: list[Any] = []

    async def cleanup(ctx: Context, obj: Any) -> None:
        seen.append(obj)

    async with running(
        backend,
        lambda op: Builder(op.name).for_(TypedGizmo).finalizer(FIN, cleanup, deadline=5),
    ) as op:
        await backend.client.create(backend.obj(GIZMO, "w1"))
        await eventually(lambda: op.journal.reconciled, timeout=20, description="reconciled")
        await backend.client.delete(GIZMO, "w1", namespace=backend.namespace)
        await eventually(lambda: backend.gone(GIZMO, "w1"), timeout=20, description="w1 gone")
        assert len(seen) == 1 and isinstance(seen[0], TypedGizmo)
        assert metadata_of(seen[0].data).get("deletionTimestamp")


async def two_controllers_with_different_finalizers_on_one_kind(backend: Backend) -> None:
    """Two controllers add and remove their own finalizers on the same objects concurrently.

    Both finalizers end up on every object, each cleanup runs for every object, and every
    object goes away: if either controller dropped the other's finalizer, an object would
    vanish before the other cleanup ran, and that cleanup's list would miss it.
    """
    count = 12
    names = [f"w{i:02d}" for i in range(count)]
    first, second = Operator(backend, "dir-ctl"), Operator(backend, "dns-ctl")

    async def slowish(obj: JsonObject) -> None:
        await asyncio.sleep(0)  # yield, so the two controllers interleave

    try:
        await first.start(
            Builder("dir-ctl")
            .for_(GIZMO)
            .finalizer(FIN, first.cleanup(FIN, slowish), deadline=10)
            .max_concurrent_reconciles(4)
        )
        await second.start(
            Builder("dns-ctl")
            .for_(GIZMO)
            .finalizer(FIN2, second.cleanup(FIN2, slowish), deadline=10)
            .max_concurrent_reconciles(4)
        )
        await asyncio.gather(*(backend.client.create(backend.obj(GIZMO, n)) for n in names))

        async def all_protected() -> bool:
            found = await backend.client.list(GIZMO, namespace=backend.namespace)
            return len(found) == count and all(
                FIN in finalizers_of(o) and FIN2 in finalizers_of(o) for o in found
            )

        await eventually(all_protected, timeout=30, description="both finalizers everywhere")
        await asyncio.gather(
            *(backend.client.delete(GIZMO, n, namespace=backend.namespace) for n in names)
        )

        async def all_gone() -> bool:
            return len(await backend.client.list(GIZMO, namespace=backend.namespace)) == 0

        await eventually(all_gone, timeout=60, description="every widget gone")
        assert sorted(n for f, n in first.journal.finished if f == FIN) == names
        assert sorted(n for f, n in second.journal.finished if f == FIN2) == names
    finally:
        await second.stop()
        await first.stop()
