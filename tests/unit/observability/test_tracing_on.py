"""Tracing on, over the fake client: reconcile outcomes on spans, event links and their cap."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from setpoint.api import kinds
from setpoint.controller import Context, Request, Result
from setpoint.manager import Manager
from setpoint.observability import tracing
from setpoint.testing import FakeClient, eventually, run_operator


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into the SDK's in-memory exporter; off again afterwards."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = tracing.set_tracing(tracing.Tracing(provider))
    try:
        yield exporter
    finally:
        tracing.set_tracing(previous)
        provider.shutdown()


def _config_map(name: str, **data: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": data,
    }


async def test_each_outcome_is_recorded_on_the_reconcile_span(
    spans: InMemorySpanExporter,
) -> None:
    """success, requeue_after (with its delay) and error (status ERROR, the exception event)."""

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        if request.name == "fails":
            raise RuntimeError("the backend said no")
        if request.name == "again":
            return Result(requeue_after=300)
        return None

    def setup(manager: Manager) -> None:
        manager.controller("outcomes").for_(kinds.ConfigMap).build(reconcile)

    fake = FakeClient()
    async with run_operator(setup, client=fake) as op:
        for name in ("done", "again", "fails"):
            await fake.create(_config_map(name))
        await op.wait_idle(settle=0.3)

    by_name: dict[str, list[dict[str, Any]]] = {}
    errors = []
    for span in spans.get_finished_spans():
        if span.name != "reconcile outcomes":
            continue
        attrs = dict(span.attributes or {})
        by_name.setdefault(str(attrs["k8s.object.name"]), []).append(attrs)
        if attrs["k8s.object.name"] == "fails":
            errors.append(span)
    assert by_name["done"][0]["setpoint.reconcile.result"] == "success"
    assert "setpoint.reconcile.requeue_after" not in by_name["done"][0]
    assert by_name["again"][0]["setpoint.reconcile.result"] == "requeue_after"
    assert by_name["again"][0]["setpoint.reconcile.requeue_after"] == 300
    assert errors and all(a["setpoint.reconcile.result"] == "error" for a in by_name["fails"])
    assert errors[0].status.status_code is StatusCode.ERROR
    assert "RuntimeError: the backend said no" in (errors[0].status.description or "")
    assert [e.name for e in errors[0].events] == ["exception"]


async def test_events_queued_while_a_key_waits_are_all_linked_up_to_the_cap(
    spans: InMemorySpanExporter,
) -> None:
    """Updates queued behind a running reconcile link to its next one; at most MAX_LINKS."""

    release = asyncio.Event()
    started = asyncio.Event()

    async def reconcile(ctx: Context, request: Request) -> None:
        if not release.is_set():
            started.set()
            await release.wait()

    def setup(manager: Manager) -> None:
        manager.controller("links").for_(kinds.ConfigMap).build(reconcile)

    fake = FakeClient()
    updates = tracing.MAX_LINKS + 4
    async with run_operator(setup, client=fake) as op:
        await fake.create(_config_map("hot"))
        await started.wait()  # the first reconcile holds the key
        for i in range(updates):
            obj = await fake.get(kinds.ConfigMap, "hot", namespace="default")
            obj["data"] = {"n": str(i)}
            await fake.update(obj)
        # Each event's span ends where its key is queued and linked (the same synchronous
        # step): once all 1 + updates exist, every update is waiting behind the first reconcile.
        await eventually(
            lambda: (
                sum(1 for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER)
                == 1 + updates
            ),
            timeout=30,
            description="every update delivered by the informer",
        )
        release.set()
        await op.wait_idle(settle=0.3)

    finished = spans.get_finished_spans()
    events = {s.context.span_id: s for s in finished if s.kind is SpanKind.PRODUCER}
    reconciles = [s for s in finished if s.name == "reconcile links"]
    assert len(reconciles) == 2, [s.name for s in finished]
    first, second = sorted(reconciles, key=lambda s: s.start_time or 0)
    assert [events[link.context.span_id].name for link in first.links] == ["add ConfigMap"]
    linked = [events[link.context.span_id] for link in second.links]
    assert len(linked) == tracing.MAX_LINKS
    assert {s.name for s in linked} == {"update ConfigMap"}
    assert len(events) == 1 + updates  # every event is a span; only the newest are linked

    def version(span: ReadableSpan) -> int:
        return int(str((span.attributes or {})["k8s.resource_version"]))

    newest = sorted(version(s) for s in events.values())[-tracing.MAX_LINKS :]
    assert [version(s) for s in linked] == newest
