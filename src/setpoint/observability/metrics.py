"""setpoint's Prometheus metrics, under controller-runtime's names and labels.

Every metric setpoint exports is defined here, once, in :class:`Metrics`. The names, label sets
and histogram buckets are those of controller-runtime (``pkg/internal/controller/metrics``,
``pkg/internal/metrics/workqueue.go``, ``pkg/metrics/client_go_adapter.go``,
``pkg/metrics/leaderelection.go``, ``pkg/webhook/internal/metrics`` and the webhook panic
counters), so Grafana dashboards and alerts written for Go operators work unchanged. The
``setpoint_finalizer_*``, ``setpoint_shard_*``, ``setpoint_cluster_*``,
``setpoint_reconcile_threads_*``, ``setpoint_source_*`` and ``setpoint_event_loop_*``
families are setpoint's own.

Metrics live on a setpoint-owned :class:`prometheus_client.CollectorRegistry`, never on
prometheus_client's global default registry: the manager serves :func:`default_registry`, and a
test builds ``Metrics(CollectorRegistry())`` to get a fresh, isolated set.

The work queue does not depend on prometheus_client. It talks to the small
:class:`WorkQueueMetricsProvider` protocol; :class:`Metrics` implements it, and
:data:`NO_WORKQUEUE_METRICS` is the do-nothing implementation queues use by default.

Import cost: ``prometheus_client`` takes ~30 ms to import (its package pulls in its HTTP
exposition: ``http.server``, ``wsgiref``, ``email``), so the metrics of :class:`Metrics` are
setpoint's own (:mod:`setpoint.observability._families`, with prometheus_client's recording
API) and prometheus_client is imported only when a registry is needed: at the first scrape,
or when :func:`default_registry`, :attr:`Metrics.registry` or :func:`render` is called.
Building the manager's metrics and counting reconciles imports nothing.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, Protocol, cast

from setpoint.observability._families import Counter, FamilyCollector, Gauge, Histogram

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE_OPENMETRICS",
    "CONTENT_TYPE_TEXT",
    "NO_WORKQUEUE_METRICS",
    "PRIORITY_LABEL_LIMIT",
    "PRIORITY_OVERFLOW_LABEL",
    "RECONCILE_RESULTS",
    "RECONCILE_TIME_BUCKETS",
    "SHARD_HANDOVER_BUCKETS",
    "WEBHOOK_LATENCY_BUCKETS",
    "WORKQUEUE_DURATION_BUCKETS",
    "Metrics",
    "NoWorkQueueMetrics",
    "WorkQueueMetrics",
    "WorkQueueMetricsProvider",
    "default_registry",
    "register_runtime_collectors",
    "render",
]

RECONCILE_TIME_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
    15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)  # fmt: skip
"""Buckets of ``controller_runtime_reconcile_time_seconds`` (controller-runtime's list)."""

WORKQUEUE_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    1e-08, 1e-07, 1e-06, 1e-05, 1e-04, 1e-03, 1e-02, 1e-01, 1.0, 10.0, 100.0, 1000.0,
)  # fmt: skip
"""Buckets of the work queue duration histograms: controller-runtime's
``ExponentialBuckets(10e-9, 10, 12)``, written out so no float rounding creeps into ``le``."""

SHARD_HANDOVER_BUCKETS: Final[tuple[float, ...]] = (
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0,
)  # fmt: skip
"""Buckets of ``setpoint_shard_handover_seconds``: a drain takes a few round trips, a dead
shard's objects wait for its Lease to expire (15 s by default)."""

WEBHOOK_LATENCY_BUCKETS: Final[tuple[float, ...]] = WORKQUEUE_DURATION_BUCKETS
"""Buckets of ``controller_runtime_webhook_latency_seconds``: controller-runtime uses the same
``ExponentialBuckets(10e-9, 10, 12)`` as for the work queue."""

RECONCILE_RESULTS: Final[tuple[str, ...]] = ("success", "error", "requeue", "requeue_after")
"""Values of the ``result`` label of ``controller_runtime_reconcile_total``."""

PRIORITY_LABEL_LIMIT: Final = 25
"""Distinct ``priority`` label values one queue's depth gauge may use (as controller-runtime)."""

PRIORITY_OVERFLOW_LABEL: Final = "exceeded_cardinality_limit"
"""``priority`` label value for priorities seen after :data:`PRIORITY_LABEL_LIMIT` others."""

CONTENT_TYPE_TEXT: Final = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of the classic Prometheus text exposition format."""

CONTENT_TYPE_OPENMETRICS: Final = "application/openmetrics-text; version=1.0.0; charset=utf-8"
"""Content type of the OpenMetrics 1.0 text format."""

_OPENMETRICS_VERSIONS: Final = frozenset({"0.0.1", "1.0.0"})


# --------------------------------------------------------------------------------------------
# The work queue's view of metrics


class WorkQueueMetrics(Protocol):
    """What one work queue reports; every method must be cheap (it runs on the hot path)."""

    def added(self) -> None:
        """Count a key that became ready to process (``workqueue_adds_total``)."""

    def depth_changed(self, priority: int, delta: int) -> None:
        """Change the number of ready keys at ``priority`` by ``delta`` (``workqueue_depth``)."""

    def observe_queue_duration(self, seconds: float) -> None:
        """Observe how long a key waited between becoming ready and reaching a worker."""

    def observe_work_duration(self, seconds: float) -> None:
        """Observe how long a worker took between taking a key and calling ``done``."""

    def retried(self) -> None:
        """Count a delayed or rate-limited re-add of a key (``workqueue_retries_total``)."""

    def track_in_flight(
        self, unfinished_seconds: Callable[[], float], longest_seconds: Callable[[], float]
    ) -> None:
        """Register scrape-time functions for the in-flight gauges.

        They return the summed and the longest age of the keys being processed right now,
        and may be called from any thread.
        """


class WorkQueueMetricsProvider(Protocol):
    """Creates the :class:`WorkQueueMetrics` of a named queue.

    The counterpart of controller-runtime's ``workqueue.MetricsProvider``. The queue's name
    becomes both the ``name`` and the ``controller`` label.
    """

    def new_queue_metrics(self, name: str) -> WorkQueueMetrics:
        """Metrics for the queue called ``name``."""
        ...


class NoWorkQueueMetrics:
    """A :class:`WorkQueueMetrics` that records nothing; queues use it unless given a provider."""

    __slots__ = ()

    def added(self) -> None:
        """Record nothing."""

    def depth_changed(self, priority: int, delta: int) -> None:
        """Record nothing."""

    def observe_queue_duration(self, seconds: float) -> None:
        """Record nothing."""

    def observe_work_duration(self, seconds: float) -> None:
        """Record nothing."""

    def retried(self) -> None:
        """Record nothing."""

    def track_in_flight(
        self, unfinished_seconds: Callable[[], float], longest_seconds: Callable[[], float]
    ) -> None:
        """Record nothing."""


NO_WORKQUEUE_METRICS: Final = NoWorkQueueMetrics()
"""The shared do-nothing work queue metrics."""


class _Depth:
    """The ready keys of one ``workqueue_depth`` series, read by its gauge when scraped."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def __call__(self) -> float:
        return float(self.value)


class _QueueMetrics:
    """One queue's label children, bound once so the hot path does no label lookups.

    ``workqueue_depth`` is counted in plain integers that its gauges read when scraped
    (``set_function``), not by ``Gauge.inc``: the depth changes twice per processed key, and
    a locked increment costs more than the rest of the queue's bookkeeping for it.
    """

    __slots__ = (
        "_adds",
        "_depth_by_label",
        "_depth_children",
        "_depth_vec",
        "_labels",
        "_longest",
        "_queue_duration",
        "_retries",
        "_unfinished",
        "_work_duration",
    )

    def __init__(self, metrics: Metrics, name: str) -> None:
        self._labels = (name, name)  # name and controller carry the same value
        self._depth_vec = metrics.workqueue_depth
        self._depth_children: dict[int, _Depth] = {}
        self._depth_by_label: dict[str, _Depth] = {}
        self._adds = metrics.workqueue_adds_total.labels(name, name)
        self._retries = metrics.workqueue_retries_total.labels(name, name)
        self._queue_duration = metrics.workqueue_queue_duration_seconds.labels(name, name)
        self._work_duration = metrics.workqueue_work_duration_seconds.labels(name, name)
        self._unfinished = metrics.workqueue_unfinished_work_seconds.labels(name, name)
        self._longest = metrics.workqueue_longest_running_processor_seconds.labels(name, name)

    def _depth_child(self, priority: int) -> _Depth:
        # Unlike controller-runtime (which switches *all* later updates to the placeholder,
        # leaving earlier series stuck at their last value), a priority keeps the label it
        # got first, so every series' increments and decrements stay balanced.
        if len(self._depth_children) < PRIORITY_LABEL_LIMIT:
            label = str(int(priority))
        else:
            label = PRIORITY_OVERFLOW_LABEL
        depth = self._depth_by_label.get(label)
        if depth is None:
            depth = self._depth_by_label[label] = _Depth()
            self._depth_vec.labels(*self._labels, label).set_function(depth)
        self._depth_children[priority] = depth
        return depth

    def added(self) -> None:
        self._adds.inc()

    def depth_changed(self, priority: int, delta: int) -> None:
        depth = self._depth_children.get(priority)
        if depth is None:
            depth = self._depth_child(priority)
        depth.value += delta

    def observe_queue_duration(self, seconds: float) -> None:
        self._queue_duration.observe(seconds)

    def observe_work_duration(self, seconds: float) -> None:
        self._work_duration.observe(seconds)

    def retried(self) -> None:
        self._retries.inc()

    def track_in_flight(
        self, unfinished_seconds: Callable[[], float], longest_seconds: Callable[[], float]
    ) -> None:
        # Computed at scrape time instead of client-go's 500 ms ticker: always current, and no
        # background task that wakes up for nothing.
        self._unfinished.set_function(unfinished_seconds)
        self._longest.set_function(longest_seconds)


# --------------------------------------------------------------------------------------------
# The registry and the metric definitions

_lock = threading.RLock()
_default_registry: CollectorRegistry | None = None
_default_metrics: Metrics | None = None
_waiting_for_default: Metrics | None = None
"""A ``Metrics()`` built before the default registry existed: registered when it is made."""


def default_registry() -> CollectorRegistry:
    """Return setpoint's process-wide registry (created on first use), served by the manager.

    It is separate from prometheus_client's global ``REGISTRY``; register your own operator
    metrics here (``prometheus_client.Counter(..., registry=default_registry())``) to have
    them served too. Creating it imports prometheus_client and registers the
    :class:`Metrics` built for it (``Metrics.default()``), if there is one already.
    """
    global _default_registry, _waiting_for_default  # noqa: PLW0603 - created on first use
    with _lock:
        if _default_registry is None:
            # Deferred import: see the module docstring.
            from prometheus_client import CollectorRegistry  # noqa: PLC0415, RUF100

            _default_registry = CollectorRegistry()
            waiting, _waiting_for_default = _waiting_for_default, None
            if waiting is not None:
                waiting._register(_default_registry)
        return _default_registry


def _bind_to_default(metrics: Metrics) -> None:
    """Register ``metrics`` on the default registry now, or when it is created."""
    global _waiting_for_default  # noqa: PLW0603 - see default_registry
    with _lock:
        if _default_registry is not None:
            metrics._register(_default_registry)
        elif _waiting_for_default is not None:
            raise ValueError(
                "Duplicated timeseries in CollectorRegistry: setpoint's default registry "
                "already has a Metrics (use Metrics.default() to share it, or "
                "Metrics.isolated() for a separate set)"
            )
        else:
            _waiting_for_default = metrics


def register_runtime_collectors(registry: CollectorRegistry) -> None:
    """Add the process and Python runtime collectors to ``registry``.

    prometheus_client's own collectors, under the names every Prometheus client library
    uses, so existing dashboards read them: ``process_cpu_seconds_total``,
    ``process_resident_memory_bytes``, ``process_open_fds``, ``process_max_fds``,
    ``process_start_time_seconds`` (from ``/proc``, Linux only; elsewhere they are absent),
    ``python_gc_collections_total{generation}``, ``python_gc_objects_collected_total`` and
    ``python_info``. They are computed at scrape time and cost nothing in between.
    """
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class Metrics:
    """All of setpoint's metrics, registered on one registry.

    Build one per registry: ``Metrics()`` uses :func:`default_registry` (prefer
    :meth:`default`, which builds it once), ``Metrics(CollectorRegistry())`` gives tests an
    isolated set. Registering two ``Metrics`` on the same registry fails with prometheus_client's
    "Duplicated timeseries" error, because the names would clash. With the default registry,
    nothing is imported or registered until the registry is first needed (a scrape).

    The attributes are setpoint's own metric families
    (:mod:`setpoint.observability._families`) with prometheus_client's recording API: call
    ``.labels(...)`` with the label values in the documented order, then ``inc``, ``set``,
    ``set_function`` or ``observe``. A registry collects them as prometheus_client metrics.
    :meth:`new_queue_metrics` makes it a :class:`WorkQueueMetricsProvider`. With
    ``runtime=True`` (the default) the registry also gets the process and Python collectors
    (:func:`register_runtime_collectors`).
    """

    reconcile_total: Counter
    """``controller_runtime_reconcile_total{controller, result}``; result is one of
    :data:`RECONCILE_RESULTS`."""
    reconcile_errors_total: Counter
    """``controller_runtime_reconcile_errors_total{controller}``."""
    terminal_reconcile_errors_total: Counter
    """``controller_runtime_terminal_reconcile_errors_total{controller}``."""
    reconcile_panics_total: Counter
    """``controller_runtime_reconcile_panics_total{controller}``: reconciles that raised an
    unexpected exception (Go's panics)."""
    reconcile_time_seconds: Histogram
    """``controller_runtime_reconcile_time_seconds{controller}``, :data:`RECONCILE_TIME_BUCKETS`."""
    max_concurrent_reconciles: Gauge
    """``controller_runtime_max_concurrent_reconciles{controller}``."""
    active_workers: Gauge
    """``controller_runtime_active_workers{controller}``."""

    workqueue_depth: Gauge
    """``workqueue_depth{name, controller, priority}``: keys ready and waiting for a worker."""
    workqueue_adds_total: Counter
    """``workqueue_adds_total{name, controller}``."""
    workqueue_queue_duration_seconds: Histogram
    """``workqueue_queue_duration_seconds{name, controller}``."""
    workqueue_work_duration_seconds: Histogram
    """``workqueue_work_duration_seconds{name, controller}``."""
    workqueue_unfinished_work_seconds: Gauge
    """``workqueue_unfinished_work_seconds{name, controller}``."""
    workqueue_longest_running_processor_seconds: Gauge
    """``workqueue_longest_running_processor_seconds{name, controller}``."""
    workqueue_retries_total: Counter
    """``workqueue_retries_total{name, controller}``."""

    rest_client_requests_total: Counter
    """``rest_client_requests_total{code, method, host}``."""

    leader_election_master_status: Gauge
    """``leader_election_master_status{name}``: 1 while this process holds the lease."""
    leader_election_slowpath_total: Counter
    """``leader_election_slowpath_total{name}``: renewals that needed a full read-modify-write."""

    finalizer_pending_objects: Gauge
    """``setpoint_finalizer_pending_objects{finalizer}``: objects marked for deletion whose
    finalizer has not been removed yet."""
    finalizer_oldest_pending_seconds: Gauge
    """``setpoint_finalizer_oldest_pending_seconds{finalizer}``: age of the oldest of them,
    counted from its ``deletionTimestamp``."""
    finalizer_cleanup_failures_total: Counter
    """``setpoint_finalizer_cleanup_failures_total{controller, finalizer}``."""

    shard_objects: Gauge
    """``setpoint_shard_objects{ring, shard}``: objects labelled for each shard, counted by
    the ring's sharder (``shard=""``: unassigned)."""
    shard_ring_members: Gauge
    """``setpoint_shard_ring_members{ring}``: live shards the sharder sees."""
    shard_ring_changes_total: Counter
    """``setpoint_shard_ring_changes_total{ring}``: changes of the set of live shards."""
    shard_handover_seconds: Histogram
    """``setpoint_shard_handover_seconds{ring, reason}``: drain (or shard death) to new label."""
    shard_drains_total: Counter
    """``setpoint_shard_drains_total{ring}``: objects this replica handed over on request."""
    cluster_ready: Gauge
    """``setpoint_cluster_ready{cluster}``: 1 while a member cluster is reachable and synced."""

    webhook_requests_total: Counter
    """``controller_runtime_webhook_requests_total{webhook, code}``: requests per webhook path
    and HTTP status code."""
    webhook_latency_seconds: Histogram
    """``controller_runtime_webhook_latency_seconds{webhook}``, :data:`WEBHOOK_LATENCY_BUCKETS`."""
    webhook_requests_in_flight: Gauge
    """``controller_runtime_webhook_requests_in_flight{webhook}``."""
    webhook_panics_total: Counter
    """``controller_runtime_webhook_panics_total``: admission webhooks whose user code raised
    unexpectedly (Go's panics)."""
    conversion_webhook_panics_total: Counter
    """``controller_runtime_conversion_webhook_panics_total``: conversions whose converter
    raised, returned the wrong type or changed forbidden metadata (controller-runtime counts
    conversion panics under this name, apart from admission's)."""

    event_loop_lag_seconds: Histogram
    """``setpoint_event_loop_lag_seconds``: how late the event loop ran a timer
    (:class:`~setpoint.observability.runtime.LoopLagMonitor`), buckets
    :data:`~setpoint.observability.runtime.EVENT_LOOP_LAG_BUCKETS`. A blocked loop stalls
    every controller at once."""
    event_loop_blocked_total: Counter
    """``setpoint_event_loop_blocked_total``: stalls of the event loop past the blocked-loop
    threshold (:class:`~setpoint.observability.runtime.BlockedLoopDetector`), each logged
    with the reconcile and the stack that blocked it."""
    reconcile_threads_overdue: Gauge
    """``setpoint_reconcile_threads_overdue{controller}``: blocking (plain ``def``)
    reconciles and cleanups still running in their thread after their reconcile was
    cancelled (timeout, cleanup deadline, stop): Python cannot interrupt a thread."""
    reconcile_threads_overdue_total: Counter
    """``setpoint_reconcile_threads_overdue_total{controller}``: how many such threads
    outlived their reconcile's cancellation."""

    source_polls_total: Counter
    """``setpoint_source_polls_total{controller, source}``: polls an external polling source
    (:mod:`setpoint.controller.sources`) ran, failed ones included."""
    source_poll_errors_total: Counter
    """``setpoint_source_poll_errors_total{controller, source}``: polls that raised (for a
    per-object source, each object's failed poll counts)."""
    source_poll_duration_seconds: Histogram
    """``setpoint_source_poll_duration_seconds{controller, source}``: how long one poll took,
    on the controller's clock, :data:`RECONCILE_TIME_BUCKETS`."""
    source_enqueued_total: Counter
    """``setpoint_source_enqueued_total{controller, source}``: keys an external source handed
    to its controller's work queue."""
    source_dropped_total: Counter
    """``setpoint_source_dropped_total{controller, source}``: keys refused because the
    source's buffer was full (``ChannelSource.offer``)."""
    source_buffered: Gauge
    """``setpoint_source_buffered{controller, source}``: keys waiting in an external source's
    buffer for room in the work queue."""

    def __init__(self, registry: CollectorRegistry | None = None, *, runtime: bool = True) -> None:
        from setpoint.observability.runtime import EVENT_LOOP_LAG_BUCKETS

        self._registry: CollectorRegistry | None = None
        self._runtime = runtime
        ctrl = ("controller",)
        queue = ("name", "controller")

        # Help texts are controller-runtime's, so `# HELP` lines match Go operators too.
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ("controller", "result"),
        )
        self.reconcile_errors_total = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ctrl,
        )
        self.terminal_reconcile_errors_total = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ctrl,
        )
        self.reconcile_panics_total = Counter(
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics per controller",
            ctrl,
        )
        self.reconcile_time_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ctrl,
            buckets=RECONCILE_TIME_BUCKETS,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ctrl,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ctrl,
        )

        self.workqueue_depth = Gauge(
            "workqueue_depth",
            "Current depth of workqueue by workqueue and priority",
            (*queue, "priority"),
        )
        self.workqueue_adds_total = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            queue,
        )
        self.workqueue_queue_duration_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queue,
            buckets=WORKQUEUE_DURATION_BUCKETS,
        )
        self.workqueue_work_duration_seconds = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            queue,
            buckets=WORKQUEUE_DURATION_BUCKETS,
        )
        self.workqueue_unfinished_work_seconds = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads. One can deduce "
            "the number of stuck threads by observing the rate at which this increases.",
            queue,
        )
        self.workqueue_longest_running_processor_seconds = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            queue,
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            queue,
        )

        self.rest_client_requests_total = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ("code", "method", "host"),
        )

        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease. "
            "Please make sure to group by name.",
            ("name",),
        )
        self.leader_election_slowpath_total = Counter(
            "leader_election_slowpath_total",
            "Total number of slow path exercised in renewing leader leases. 'name' is the "
            "string used to identify the lease. Please make sure to group by name.",
            ("name",),
        )

        self.finalizer_pending_objects = Gauge(
            "setpoint_finalizer_pending_objects",
            "Objects marked for deletion that still carry the finalizer.",
            ("finalizer",),
        )
        self.finalizer_oldest_pending_seconds = Gauge(
            "setpoint_finalizer_oldest_pending_seconds",
            "Seconds since the deletionTimestamp of the oldest object still carrying the "
            "finalizer (0 when there is none).",
            ("finalizer",),
        )
        self.finalizer_cleanup_failures_total = Counter(
            "setpoint_finalizer_cleanup_failures_total",
            "Finalizer cleanups that failed and will be retried, per controller and finalizer.",
            ("controller", "finalizer"),
        )

        self.shard_objects = Gauge(
            "setpoint_shard_objects",
            "Objects of the sharded kinds labelled for each shard of a ring, as the ring's "
            'sharder counts them (shard="" for unassigned ones).',
            ("ring", "shard"),
        )
        self.shard_ring_members = Gauge(
            "setpoint_shard_ring_members",
            "Live shards of a ring, as the ring's sharder sees them.",
            ("ring",),
        )
        self.shard_ring_changes_total = Counter(
            "setpoint_shard_ring_changes_total",
            "Times the set of live shards of a ring changed, as the ring's sharder saw it.",
            ("ring",),
        )
        self.shard_handover_seconds = Histogram(
            "setpoint_shard_handover_seconds",
            "Seconds from asking an object's shard to let it go (reason=drain) or from "
            "finding its shard dead (reason=dead) until the object was labelled for its "
            "new shard.",
            ("ring", "reason"),
            buckets=SHARD_HANDOVER_BUCKETS,
        )
        self.shard_drains_total = Counter(
            "setpoint_shard_drains_total",
            "Objects this replica let go of after the sharder asked (drain acknowledged).",
            ("ring",),
        )
        self.cluster_ready = Gauge(
            "setpoint_cluster_ready",
            "1 while a member cluster of a multi-cluster manager is reachable and its "
            "caches have synced, else 0.",
            ("cluster",),
        )

        self.webhook_requests_total = Counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code.",
            ("webhook", "code"),
        )
        self.webhook_latency_seconds = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ("webhook",),
            buckets=WEBHOOK_LATENCY_BUCKETS,
        )
        self.webhook_requests_in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ("webhook",),
        )
        self.webhook_panics_total = Counter(
            "controller_runtime_webhook_panics_total",
            "Total number of webhook panics",
        )
        self.conversion_webhook_panics_total = Counter(
            "controller_runtime_conversion_webhook_panics_total",
            "Total number of conversion webhook panics",
        )

        self.event_loop_lag_seconds = Histogram(
            "setpoint_event_loop_lag_seconds",
            "How late the asyncio event loop ran a timer, in seconds; a blocked loop stalls "
            "every controller.",
            buckets=EVENT_LOOP_LAG_BUCKETS,
        )
        self.event_loop_blocked_total = Counter(
            "setpoint_event_loop_blocked_total",
            "Stalls of the asyncio event loop past the blocked-loop threshold.",
        )
        self.reconcile_threads_overdue = Gauge(
            "setpoint_reconcile_threads_overdue",
            "Blocking reconciles still running in their thread after their reconcile was "
            "cancelled (timeout or stop).",
            ctrl,
        )
        self.reconcile_threads_overdue_total = Counter(
            "setpoint_reconcile_threads_overdue_total",
            "Blocking reconciles whose thread outlived their reconcile's cancellation.",
            ctrl,
        )
        source = ("controller", "source")
        self.source_polls_total = Counter(
            "setpoint_source_polls_total",
            "Polls an external polling source ran, failed ones included.",
            source,
        )
        self.source_poll_errors_total = Counter(
            "setpoint_source_poll_errors_total",
            "Polls of an external polling source that raised.",
            source,
        )
        self.source_poll_duration_seconds = Histogram(
            "setpoint_source_poll_duration_seconds",
            "Seconds one poll of an external polling source took.",
            source,
            buckets=RECONCILE_TIME_BUCKETS,
        )
        self.source_enqueued_total = Counter(
            "setpoint_source_enqueued_total",
            "Keys an external source handed to its controller's work queue.",
            source,
        )
        self.source_dropped_total = Counter(
            "setpoint_source_dropped_total",
            "Keys an external source refused because its buffer was full.",
            source,
        )
        self.source_buffered = Gauge(
            "setpoint_source_buffered",
            "Keys waiting in an external source's buffer for room in the work queue.",
            source,
        )
        self._collector = FamilyCollector(
            [v for v in vars(self).values() if isinstance(v, (Counter, Gauge, Histogram))]
        )
        if registry is not None:
            self._register(registry)
        else:
            _bind_to_default(self)

    @property
    def registry(self) -> CollectorRegistry:
        """The registry every metric above is registered on.

        For ``Metrics()`` (and :meth:`default`), :func:`default_registry`, created (and
        prometheus_client imported) on first access.
        """
        if self._registry is None:
            default_registry()
        if self._registry is None:  # another Metrics holds the default registry
            raise RuntimeError("this Metrics is not registered on any registry")
        return self._registry

    def _register(self, registry: CollectorRegistry) -> None:
        registry.register(cast("Collector", self._collector))
        if self._runtime:
            register_runtime_collectors(registry)
        self._registry = registry

    @classmethod
    def default(cls) -> Metrics:
        """Return the process-wide instance on :func:`default_registry`, built on first call."""
        global _default_metrics  # noqa: PLW0603 - lazily created to keep import cheap
        with _lock:
            if _default_metrics is None:
                _default_metrics = cls()
            return _default_metrics

    @classmethod
    def isolated(cls) -> Metrics:
        """Return an instance on a fresh private registry (for tests and side-by-side managers).

        Two managers in one process (a test running two operators, say) would otherwise
        count into the same series.
        """
        from prometheus_client import CollectorRegistry  # noqa: PLC0415, RUF100

        return cls(CollectorRegistry())

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels``.

        ``metrics.value("controller_runtime_reconcile_total", controller="tenant",
        result="success")``; histogram parts are addressed by their sample names
        (``..._count``, ``..._sum``). 0.0 when nothing matches. For tests and tools: a
        scrape reads the same registry.
        """
        return sum(
            sample.value
            for metric in self.registry.collect()
            for sample in metric.samples
            if sample.name == name
            and all(sample.labels.get(key) == want for key, want in labels.items())
        )

    def init_controller(self, controller: str, *, max_concurrent_reconciles: int) -> None:
        """Publish a controller's series at their starting values before its first reconcile.

        As controller-runtime does on start: every ``result`` of the reconcile counter and the
        error/panic counters exist at 0 (so ``rate()`` and absence alerts work from the start),
        the worker limit is set and no worker is active.
        """
        for result in RECONCILE_RESULTS:
            self.reconcile_total.labels(controller, result)
        self.reconcile_errors_total.labels(controller)
        self.terminal_reconcile_errors_total.labels(controller)
        self.reconcile_panics_total.labels(controller)
        self.max_concurrent_reconciles.labels(controller).set(max_concurrent_reconciles)
        self.active_workers.labels(controller).set(0)

    def init_webhook(self, path: str) -> None:
        """Publish a webhook path's series before its first request, as controller-runtime does.

        The request counter exists at 0 for codes 200 and 500, and nothing is in flight.
        """
        for code in ("200", "500"):
            self.webhook_requests_total.labels(path, code)
        self.webhook_requests_in_flight.labels(path).set(0)
        self.webhook_latency_seconds.labels(path)

    def new_queue_metrics(self, name: str) -> WorkQueueMetrics:
        """Return work queue metrics labelled ``name`` = ``controller`` = ``name``.

        Give each queue on a registry its own name: two queues with one name share counters,
        and the later one's depth and in-flight gauges replace the earlier one's.
        """
        if not name:
            raise ValueError(
                "a work queue needs a non-empty name to report metrics: it becomes the 'name' "
                "and 'controller' labels"
            )
        return _QueueMetrics(self, name)


# --------------------------------------------------------------------------------------------
# Exposition


def _prefers_openmetrics(accept_header: str | None) -> bool:
    """Content negotiation on an ``Accept`` header, honouring ``q`` weights.

    OpenMetrics (versions 0.0.1 and 1.0.0, which share one text format) is chosen when the
    client accepts it at least as much as the classic format; anything else, including a
    missing or unparseable header, gets the classic text format that every scraper reads.
    """
    if not accept_header:
        return False
    openmetrics_q = 0.0
    text_q = 0.0
    for media_range in accept_header.split(","):
        media_type, *params = (part.strip() for part in media_range.split(";"))
        media_type = media_type.lower()
        quality = 1.0
        version: str | None = None
        for param in params:
            key, _, value = param.partition("=")
            key = key.strip().lower()
            value = value.strip().strip('"')
            if key == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
            elif key == "version":
                version = value
        if quality <= 0:
            continue
        if media_type == "application/openmetrics-text":
            if version is None or version in _OPENMETRICS_VERSIONS:
                openmetrics_q = max(openmetrics_q, quality)
        elif media_type in ("text/plain", "text/*", "*/*"):
            text_q = max(text_q, quality)
    return openmetrics_q > 0 and openmetrics_q >= text_q


class _WithoutCreatedSamples:
    """A view of a registry without the ``*_created`` samples prometheus_client adds.

    client_golang (so every Go operator) does not export them by default; in the classic text
    format prometheus_client would turn each into an extra gauge series. Dropping them here
    keeps the exposition identical to controller-runtime's without flipping
    prometheus_client's process-wide ``disable_created_metrics()`` switch.
    """

    _FAMILIES_WITH_CREATED: Final = frozenset({"counter", "histogram", "summary", "gaugehistogram"})

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if family.type in self._FAMILIES_WITH_CREATED:
                created = family.name + "_created"
                samples = [sample for sample in family.samples if sample.name != created]
                if len(samples) != len(family.samples):
                    # Copy: a custom collector may hand out the same family object every time.
                    trimmed = copy.copy(family)
                    trimmed.samples = samples
                    yield trimmed
                    continue
            yield family


def render(registry: CollectorRegistry, accept_header: str | None) -> tuple[bytes, str]:
    """Serialise ``registry`` for a scrape; returns the body and its ``Content-Type``.

    The format follows the request's ``Accept`` header: OpenMetrics when the scraper prefers it
    (Prometheus does by default), the classic text format otherwise. ``*_created`` samples are
    left out, as client_golang does.
    """
    view = cast("Collector", _WithoutCreatedSamples(registry))
    # Deferred imports: see the module docstring.
    if _prefers_openmetrics(accept_header):
        from prometheus_client.openmetrics import exposition  # noqa: PLC0415, RUF100

        # The library leaves this function unannotated; state the signature it has.
        generate_openmetrics = cast("Callable[[Collector], bytes]", exposition.generate_latest)
        return generate_openmetrics(view), CONTENT_TYPE_OPENMETRICS
    from prometheus_client.exposition import generate_latest  # noqa: PLC0415, RUF100

    return generate_latest(view), CONTENT_TYPE_TEXT
