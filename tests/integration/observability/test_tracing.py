"""OpenTelemetry traces on a real API server: reconcile spans, request children, event links."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from setpoint.cache import Cache, CacheOptions
from setpoint.client import Client, load_kubeconfig
from setpoint.client.safe import update_status
from setpoint.controller import Builder, Context, Request
from setpoint.observability import tracing
from setpoint.observability.logging import JsonFormatter
from setpoint.observability.metrics import Metrics
from setpoint.testing import eventually_passes
from tests._support.gizmos import gizmo
from tests._support.kinds import GIZMO


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


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The controller's log lines as JSON, in memory."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("setpoint.controller")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.usefixtures("gizmo_crd")
async def test_a_reconcile_is_a_span_with_its_requests_as_children_and_a_link_to_its_event(
    spans: InMemorySpanExporter,
    json_log: io.StringIO,
    k8s: Client,
    namespace: str,
    kubeconfig_path: Path,
) -> None:
    """One Gizmo: reconcile span, PUT child span, the link to its event, and the log line's ids.

    The reconcile span carries the result; the status PUT is its CLIENT child with the HTTP
    semantic conventions; the span links to the "add" event span that queued it; the log line
    written inside the reconcile carries the span's trace_id and span_id, and its caller.
    """

    async def reconcile(ctx: Context, request: Request) -> None:
        obj = await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
        ctx.log.info("setting the phase")
        await update_status(
            ctx.client, obj, lambda o: o.setdefault("status", {}).update(phase="Seen")
        )

    client = Client(load_kubeconfig(str(kubeconfig_path)))
    cache = Cache(client, options=CacheOptions(namespaces=(namespace,)))
    await cache.start()
    controller = (
        Builder("traced")
        .for_(GIZMO)
        .build(reconcile, client=client, cache=cache, metrics=Metrics(CollectorRegistry()))
    )
    await controller.start()
    try:
        await k8s.create(gizmo("g1", namespace, size=1))

        async def phase_seen() -> None:
            got = await k8s.get(GIZMO, "g1", namespace=namespace)
            assert (got.get("status") or {}).get("phase") == "Seen"

        await eventually_passes(phase_seen, timeout=30)
        await controller.wait_idle(timeout=30, settle=0.5)
    finally:
        await controller.stop(5)
        await cache.stop(5)
        await client.close()

    finished: list[ReadableSpan] = list(spans.get_finished_spans())
    reconciles = [s for s in finished if s.name == "reconcile traced" and s.attributes is not None]
    assert reconciles, [s.name for s in finished]
    first = reconciles[0]
    assert first.kind is SpanKind.CONSUMER
    attrs = dict(first.attributes or {})
    assert attrs["setpoint.controller"] == "traced"
    assert (attrs["k8s.namespace.name"], attrs["k8s.object.name"]) == (namespace, "g1")
    assert attrs["setpoint.reconcile.result"] == "success"
    assert attrs["setpoint.reconcile.id"]

    # The status write is a child CLIENT span with the HTTP semantic conventions.
    children = [
        s for s in finished if s.parent is not None and s.parent.span_id == first.context.span_id
    ]
    puts = [s for s in children if s.name == "PUT"]
    assert len(puts) == 1, [s.name for s in children]
    put = dict(puts[0].attributes or {})
    assert puts[0].kind is SpanKind.CLIENT
    assert put["http.request.method"] == "PUT"
    assert put["http.response.status_code"] == 200
    assert str(put["url.full"]).endswith(f"/namespaces/{namespace}/gizmos/g1/status")
    assert put["server.address"] == "127.0.0.1" and isinstance(put["server.port"], int)
    assert puts[0].context.trace_id == first.context.trace_id

    # The reconcile links to the watch event that queued it: the Gizmo's "add".
    events = {
        s.context.span_id: s for s in finished if s.kind is SpanKind.PRODUCER and s.parent is None
    }
    linked = [
        events[link.context.span_id] for link in first.links if link.context.span_id in events
    ]
    assert linked, "the first reconcile links to no event span"
    event = dict(linked[0].attributes or {})
    assert linked[0].name == "add Gizmo"
    assert (event["setpoint.event"], event["k8s.object.name"]) == ("add", "g1")
    assert event["k8s.resource_version"]

    # The log line written inside the reconcile names the span and the code that logged.
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    inside = [line for line in lines if line["msg"] == "setting the phase"]
    assert inside, lines
    trace_id = f"{first.context.trace_id:032x}"
    span_id = f"{first.context.span_id:016x}"
    assert (inside[0]["trace_id"], inside[0]["span_id"]) == (trace_id, span_id)
    assert inside[0]["caller"].startswith("observability/test_tracing.py:")
    assert inside[0]["reconcile_id"] == attrs["setpoint.reconcile.id"]
    # Outside a reconcile (the controller starting) there is no trace.
    started = [line for line in lines if line["msg"] == "Controller started"]
    assert started and "trace_id" not in started[0]
