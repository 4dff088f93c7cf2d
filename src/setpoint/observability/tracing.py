"""OpenTelemetry traces across the reconcile: optional, configured by the ``OTEL_*`` variables.

With the ``setpoint[otel]`` extra installed and tracing configured, setpoint records:

- a **span per reconcile** (``reconcile <controller>``, kind ``CONSUMER``) with the
  controller, the object's namespace and name, the reconcile ID, the result (``success``,
  ``requeue_after``, ``error``) and the requeue delay;
- a **span per watch event that queued a key** (``<event> <Kind>``, kind ``PRODUCER``, a
  root span: the event has no parent), and on the reconcile span a **link** to each event
  that queued it since its last reconcile (up to :data:`MAX_LINKS`): "why did this reconcile
  run" is a click away;
- a **child span per API request** made inside a traced operation (the reconcile's reads
  and writes), kind ``CLIENT``, with the HTTP semantic conventions (``http.request.method``,
  ``url.full``, ``server.address``, ``server.port``, ``http.response.status_code``,
  ``error.type``). The W3C ``traceparent`` header goes with the request, so an API server
  with tracing on continues the trace. Requests outside any span (informer lists, lease
  renewals) are not traced, so they do not flood the backend with one-span traces; watch
  streams are not traced either.

Log lines written inside a traced operation carry ``trace_id`` and ``span_id``
(:func:`current_ids`, read by :class:`~setpoint.observability.logging.JsonFormatter`).

**Configuration** (:func:`configure_from_environment`, which the manager calls when it
starts): tracing turns on when one of ``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, unless
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The exporter is ``otlp`` (OTLP
over HTTP/protobuf; its endpoint, headers and timeout from the standard
``OTEL_EXPORTER_OTLP_*`` variables) or ``console``; the service name and resource from
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``; the sampler from
``OTEL_TRACES_SAMPLER``; batching from ``OTEL_BSP_*``. An application that set its own
global tracer provider (``opentelemetry-instrument``, say) keeps it: setpoint then only
creates spans on it.

**Cost without it**: nothing is imported (this module itself is standard library only), and
each hook is one call returning ``None``. Tests install a :class:`Tracing` on an SDK
provider with the in-memory exporter (:func:`set_tracing`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanContext, Tracer

__all__ = [
    "MAX_LINKS",
    "ReconcileSpan",
    "RequestSpan",
    "Tracing",
    "active_tracing",
    "configure_from_environment",
    "current_ids",
    "set_tracing",
]

log = logging.getLogger("setpoint.tracing")

MAX_LINKS: Final = 16
"""Links to queuing events kept per key; older ones are dropped (a hot key's reconcile
would otherwise link to every event of the day)."""

_TRACER_NAME: Final = "setpoint"
_ENABLING: Final = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)

_active: Tracing | None = None
_owned_provider: Any = None
_warned = False


def active_tracing() -> Tracing | None:
    """The installed :class:`Tracing`, or ``None`` when tracing is off (the usual case)."""
    return _active


def set_tracing(tracing: Tracing | None) -> Tracing | None:
    """Install ``tracing`` (``None`` turns tracing off); return what was installed before."""
    global _active
    previous, _active = _active, tracing
    return previous


def current_ids() -> tuple[str, str] | None:
    """``(trace_id, span_id)`` in hex of the span the caller runs in, when tracing is on."""
    tracing = _active
    return tracing.ids() if tracing is not None else None


def _wanted(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return any(environ.get(name, "").strip() for name in _ENABLING)


def configure_from_environment(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Turn tracing on when the ``OTEL_*`` variables ask for it (see the module docstring).

    Idempotent: once tracing is on, returns the installed :class:`Tracing`. When the
    variables ask for tracing but the extra is missing, logs a warning once (naming the
    extra) and returns ``None``: an operator never fails to start over its traces.

    Raises:
        ValueError: ``OTEL_TRACES_EXPORTER`` names an exporter setpoint does not build
            (it builds ``otlp`` and ``console``).

    """
    global _owned_provider, _warned  # noqa: PLW0603
    if _active is not None:
        return _active
    env = os.environ if environ is None else environ
    if not _wanted(env):
        return None
    exporter = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    names = [name.strip() for name in exporter.split(",") if name.strip()]
    unknown = sorted(set(names) - {"otlp", "console"})
    if unknown:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER={exporter!r}: setpoint builds the 'otlp' and 'console' "
            f"exporters, not {', '.join(unknown)}; set one of those, or 'none'"
        )
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        if not _warned:
            _warned = True
            log.warning(
                "OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
                "pip install 'setpoint[otel]' (no traces are recorded meanwhile)"
            )
        return None
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        tracing = Tracing()  # the application configured OpenTelemetry itself
    else:
        resource = Resource.create(
            {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "setpoint-operator"}
        )
        provider = TracerProvider(resource=resource)
        for name in names:
            if name == "console":
                provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
            else:
                try:
                    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                        OTLPSpanExporter,
                    )
                except ImportError:
                    log.warning(
                        "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http "
                        "(pip install 'setpoint[otel]'); no traces are recorded"
                    )
                    return None
                provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _owned_provider = provider
        tracing = Tracing(provider)
    set_tracing(tracing)
    log.info("tracing on: OpenTelemetry spans for reconciles, watch events and API requests")
    return tracing


def shutdown(timeout: float = 5.0) -> None:
    """Flush and stop the provider :func:`configure_from_environment` made, and turn off.

    A provider the application made is left to the application.
    """
    global _owned_provider
    provider, _owned_provider = _owned_provider, None
    set_tracing(None)
    if provider is not None:
        provider.force_flush(int(timeout * 1000))
        provider.shutdown()


class ReconcileSpan:
    """The reconcile's span, to record its outcome on (see :meth:`Tracing.reconcile`)."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def result(self, result: str, requeue_after: float | None = None) -> None:
        """Record the outcome (``success``, ``requeue_after``, ``error``) and any delay."""
        self._span.set_attribute("setpoint.reconcile.result", result)
        if requeue_after is not None:
            self._span.set_attribute("setpoint.reconcile.requeue_after", requeue_after)

    def failed(self, error: BaseException) -> None:
        """Record a failed reconcile: the exception as an event, the span's status error."""
        from opentelemetry.trace import Status, StatusCode

        self.result("error")
        self._span.record_exception(error)
        self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


class RequestSpan:
    """An API request's span, to record the response on (see :meth:`Tracing.request`)."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def response(self, status: int) -> None:
        """Record the HTTP status; 4xx and 5xx mark the span as an error (client semconv)."""
        self._span.set_attribute("http.response.status_code", status)
        if status >= 400:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_attribute("error.type", str(status))
            self._span.set_status(Status(StatusCode.ERROR))

    def failed(self, error: BaseException) -> None:
        """Record a request that got no response (connection refused, timeout)."""
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("error.type", type(error).__qualname__)
        self._span.set_status(Status(StatusCode.ERROR, str(error)))


class Tracing:
    """setpoint's spans on an OpenTelemetry tracer provider.

    ``Tracing()`` uses the global provider; ``Tracing(provider)`` a given one (tests pass
    an SDK provider with an in-memory exporter). Building one imports OpenTelemetry.

    Raises:
        setpoint._extras.ExtraNotInstalled: OpenTelemetry is not installed (the ``otel``
            extra: ``pip install 'setpoint[otel]'``).

    """

    def __init__(self, provider: TracerProvider | None = None) -> None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError as exc:
            from setpoint._extras import ExtraNotInstalled, missing_distributions

            raise ExtraNotInstalled("tracing", "otel", missing_distributions("otel")) from exc
        self._trace = trace
        self._context = context
        self._propagate = propagate
        source = provider if provider is not None else trace.get_tracer_provider()
        self._tracer: Tracer = source.get_tracer(_TRACER_NAME)

    def watch_event(
        self,
        *,
        controller: str,
        event: str,
        kind: str,
        namespace: str,
        name: str,
        resource_version: str,
    ) -> SpanContext:
        """Record a watch event that queued keys (a root span); return what links to it."""
        trace = self._trace
        span = self._tracer.start_span(
            f"{event} {kind}",
            context=self._context.Context(),  # a root: the event is where the story starts
            kind=trace.SpanKind.PRODUCER,
            attributes={
                "setpoint.controller": controller,
                "setpoint.event": event,
                "k8s.kind": kind,
                "k8s.namespace.name": namespace,
                "k8s.object.name": name,
                "k8s.resource_version": resource_version,
            },
        )
        span.end()
        return span.get_span_context()

    @contextlib.contextmanager
    def reconcile(
        self,
        *,
        controller: str,
        namespace: str,
        name: str,
        reconcile_id: str,
        links: Sequence[SpanContext] = (),
    ) -> Iterator[ReconcileSpan]:
        """The span of one reconcile, current while the block runs (requests become children)."""
        trace = self._trace
        with self._tracer.start_as_current_span(
            f"reconcile {controller}",
            kind=trace.SpanKind.CONSUMER,
            links=[trace.Link(link) for link in links],
            attributes={
                "setpoint.controller": controller,
                "setpoint.reconcile.id": reconcile_id,
                "k8s.namespace.name": namespace,
                "k8s.object.name": name,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield ReconcileSpan(span)

    def in_span(self) -> bool:
        """Whether the caller runs inside a recording span (API requests are traced then)."""
        return bool(self._trace.get_current_span().get_span_context().is_valid)

    @contextlib.contextmanager
    def request(
        self, method: str, url: str, host: str, port: int | None
    ) -> Iterator[tuple[RequestSpan, dict[str, str]]]:
        """A client span for one API request, and the headers that propagate it."""
        trace = self._trace
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.full": url,
            "server.address": host,
        }
        if port is not None:
            attributes["server.port"] = port
        with self._tracer.start_as_current_span(
            method,
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            headers: dict[str, str] = {}
            self._propagate.inject(headers)
            yield RequestSpan(span), headers

    def ids(self) -> tuple[str, str] | None:
        """``(trace_id, span_id)`` of the current span in hex, or ``None`` outside spans."""
        ctx = self._trace.get_current_span().get_span_context()
        if not ctx.is_valid:
            return None
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def otel_imported() -> bool:
    """Whether any OpenTelemetry module has been imported in this process (for tests)."""
    return any(name == "opentelemetry" or name.startswith("opentelemetry.") for name in sys.modules)
