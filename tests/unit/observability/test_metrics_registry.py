"""The metrics registry: controller-runtime's names, labels and buckets; isolation; exposition."""

from __future__ import annotations

import subprocess
import sys

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from setpoint.observability.metrics import (
    CONTENT_TYPE_OPENMETRICS,
    CONTENT_TYPE_TEXT,
    RECONCILE_RESULTS,
    Metrics,
    default_registry,
    render,
)

# Exposed name -> (type, label names), as controller-runtime exports them (plus setpoint's own).
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "controller_runtime_reconcile_total": ("counter", ("controller", "result")),
    "controller_runtime_reconcile_errors_total": ("counter", ("controller",)),
    "controller_runtime_terminal_reconcile_errors_total": ("counter", ("controller",)),
    "controller_runtime_reconcile_panics_total": ("counter", ("controller",)),
    "controller_runtime_reconcile_time_seconds": ("histogram", ("controller",)),
    "controller_runtime_max_concurrent_reconciles": ("gauge", ("controller",)),
    "controller_runtime_active_workers": ("gauge", ("controller",)),
    "workqueue_depth": ("gauge", ("name", "controller", "priority")),
    "workqueue_adds_total": ("counter", ("name", "controller")),
    "workqueue_queue_duration_seconds": ("histogram", ("name", "controller")),
    "workqueue_work_duration_seconds": ("histogram", ("name", "controller")),
    "workqueue_unfinished_work_seconds": ("gauge", ("name", "controller")),
    "workqueue_longest_running_processor_seconds": ("gauge", ("name", "controller")),
    "workqueue_retries_total": ("counter", ("name", "controller")),
    "rest_client_requests_total": ("counter", ("code", "method", "host")),
    "leader_election_master_status": ("gauge", ("name",)),
    "leader_election_slowpath_total": ("counter", ("name",)),
    "setpoint_finalizer_pending_objects": ("gauge", ("finalizer",)),
    "setpoint_finalizer_oldest_pending_seconds": ("gauge", ("finalizer",)),
    "setpoint_finalizer_cleanup_failures_total": ("counter", ("controller", "finalizer")),
    "controller_runtime_webhook_requests_total": ("counter", ("webhook", "code")),
    "controller_runtime_webhook_latency_seconds": ("histogram", ("webhook",)),
    "controller_runtime_webhook_requests_in_flight": ("gauge", ("webhook",)),
    "controller_runtime_webhook_panics_total": ("counter", ()),
    "controller_runtime_conversion_webhook_panics_total": ("counter", ()),
    "setpoint_event_loop_lag_seconds": ("histogram", ()),
    "setpoint_event_loop_blocked_total": ("counter", ()),
    "setpoint_reconcile_threads_overdue": ("gauge", ("controller",)),
    "setpoint_reconcile_threads_overdue_total": ("counter", ("controller",)),
    "setpoint_shard_objects": ("gauge", ("ring", "shard")),
    "setpoint_shard_ring_members": ("gauge", ("ring",)),
    "setpoint_shard_ring_changes_total": ("counter", ("ring",)),
    "setpoint_shard_handover_seconds": ("histogram", ("ring", "reason")),
    "setpoint_shard_drains_total": ("counter", ("ring",)),
    "setpoint_cluster_ready": ("gauge", ("cluster",)),
    "setpoint_source_polls_total": ("counter", ("controller", "source")),
    "setpoint_source_poll_errors_total": ("counter", ("controller", "source")),
    "setpoint_source_poll_duration_seconds": ("histogram", ("controller", "source")),
    "setpoint_source_enqueued_total": ("counter", ("controller", "source")),
    "setpoint_source_dropped_total": ("counter", ("controller", "source")),
    "setpoint_source_buffered": ("gauge", ("controller", "source")),
}

CONTROLLER_RUNTIME_RECONCILE_BUCKETS = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
]  # fmt: skip


def _touch_every_metric(metrics: Metrics) -> None:
    """Create one child of every metric so each family has samples to inspect."""
    metrics.init_controller("c", max_concurrent_reconciles=1)
    metrics.reconcile_time_seconds.labels("c").observe(0.1)
    queue = metrics.new_queue_metrics("q")
    queue.added()
    queue.depth_changed(0, 1)
    queue.observe_queue_duration(0.1)
    queue.observe_work_duration(0.1)
    queue.retried()
    queue.track_in_flight(lambda: 0.0, lambda: 0.0)
    metrics.rest_client_requests_total.labels("200", "GET", "api:6443").inc()
    metrics.leader_election_master_status.labels("lease").set(1)
    metrics.leader_election_slowpath_total.labels("lease").inc()
    metrics.finalizer_pending_objects.labels("f").set(0)
    metrics.finalizer_oldest_pending_seconds.labels("f").set(0)
    metrics.finalizer_cleanup_failures_total.labels("c", "f").inc()
    metrics.init_webhook("/convert")
    metrics.webhook_latency_seconds.labels("/convert").observe(0.001)
    metrics.event_loop_lag_seconds.observe(0.001)
    metrics.reconcile_threads_overdue.labels("c").set(0)
    metrics.reconcile_threads_overdue_total.labels("c").inc()
    metrics.shard_objects.labels("r", "s").set(1)
    metrics.shard_ring_members.labels("r").set(1)
    metrics.shard_ring_changes_total.labels("r").inc()
    metrics.shard_handover_seconds.labels("r", "drain").observe(0.1)
    metrics.shard_drains_total.labels("r").inc()
    metrics.cluster_ready.labels("c").set(1)
    metrics.source_polls_total.labels("c", "s").inc()
    metrics.source_poll_errors_total.labels("c", "s").inc()
    metrics.source_poll_duration_seconds.labels("c", "s").observe(0.1)
    metrics.source_enqueued_total.labels("c", "s").inc()
    metrics.source_dropped_total.labels("c", "s").inc()
    metrics.source_buffered.labels("c", "s").set(1)


def _families(registry: CollectorRegistry) -> dict[str, tuple[str, set[frozenset[str]]]]:
    """Parse the classic text exposition: family name -> (type, label-name sets seen)."""
    body, _ = render(registry, "text/plain")
    found: dict[str, tuple[str, set[frozenset[str]]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        labelsets = {frozenset(set(sample.labels) - {"le"}) for sample in family.samples}
        name = family.name + ("_total" if family.type == "counter" else "")
        found[name] = (family.type, labelsets)
    return found


def test_names_types_and_labels_match_controller_runtime() -> None:
    # The process and Python collectors are prometheus_client's (test_runtime.py checks them).
    metrics = Metrics(CollectorRegistry(), runtime=False)
    _touch_every_metric(metrics)
    found = _families(metrics.registry)
    assert set(found) == set(EXPECTED)
    for name, (kind, labels) in EXPECTED.items():
        assert found[name][0] == kind, name
        assert found[name][1] == {frozenset(labels)}, name


def test_histogram_buckets_match_controller_runtime() -> None:
    metrics = Metrics(CollectorRegistry())
    _touch_every_metric(metrics)
    registry = metrics.registry

    def bucket_bounds(family: str) -> list[float]:
        bounds = [
            float(sample.labels["le"])
            for metric in registry.collect()
            if metric.name == family
            for sample in metric.samples
            if sample.name.endswith("_bucket")
        ]
        assert bounds[-1] == float("inf")
        return bounds[:-1]

    assert bucket_bounds("controller_runtime_reconcile_time_seconds") == (
        CONTROLLER_RUNTIME_RECONCILE_BUCKETS
    )
    # controller-runtime: prometheus.ExponentialBuckets(10e-9, 10, 12)
    expected = [10e-9 * 10**i for i in range(12)]
    assert bucket_bounds("workqueue_queue_duration_seconds") == pytest.approx(expected)
    assert bucket_bounds("workqueue_work_duration_seconds") == pytest.approx(expected)
    assert bucket_bounds("controller_runtime_webhook_latency_seconds") == pytest.approx(expected)


def test_init_controller_publishes_zeroed_series() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.init_controller("web", max_concurrent_reconciles=4)
    get = metrics.registry.get_sample_value
    for result in RECONCILE_RESULTS:
        assert (
            get("controller_runtime_reconcile_total", {"controller": "web", "result": result}) == 0
        )
    for name in (
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_terminal_reconcile_errors_total",
        "controller_runtime_reconcile_panics_total",
        "controller_runtime_active_workers",
    ):
        assert get(name, {"controller": "web"}) == 0, name
    assert get("controller_runtime_max_concurrent_reconciles", {"controller": "web"}) == 4


def test_separate_registries_are_isolated() -> None:
    first, second = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    first.reconcile_errors_total.labels("c").inc()
    assert (
        first.registry.get_sample_value(
            "controller_runtime_reconcile_errors_total", {"controller": "c"}
        )
        == 1
    )
    assert (
        second.registry.get_sample_value(
            "controller_runtime_reconcile_errors_total", {"controller": "c"}
        )
        is None
    )


def test_two_metrics_on_one_registry_clash() -> None:
    registry = CollectorRegistry()
    Metrics(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Metrics(registry)


def test_default_metrics_live_on_setpoints_registry_not_the_global_one() -> None:
    metrics = Metrics.default()
    assert Metrics.default() is metrics
    assert metrics.registry is default_registry()
    assert metrics.registry is not prometheus_client.REGISTRY
    global_names = {m.name for m in prometheus_client.REGISTRY.collect()}
    assert "controller_runtime_reconcile" not in global_names


# --------------------------------------------------------------------------------------------
# Exposition and content negotiation

PROMETHEUS_DEFAULT_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        (None, False),
        ("", False),
        ("text/plain", False),
        ("text/plain;version=0.0.4", False),
        ("*/*", False),
        ("application/openmetrics-text", True),
        ("application/openmetrics-text; version=1.0.0; charset=utf-8", True),
        ("Application/OpenMetrics-Text;version=0.0.1", True),
        (PROMETHEUS_DEFAULT_ACCEPT, True),
        ("text/plain;q=0.9,application/openmetrics-text;q=0.5", False),
        ("text/plain;q=0.5,application/openmetrics-text;q=0.9", True),
        ("application/openmetrics-text;version=2.0.0", False),
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;q=bogus,text/plain", False),
        ("image/png", False),
        (",,;;=", False),
    ],
)
def test_render_negotiates_the_format(accept: str | None, openmetrics: bool) -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.reconcile_errors_total.labels("c").inc()
    body, content_type = render(metrics.registry, accept)
    text = body.decode()
    if openmetrics:
        assert content_type == CONTENT_TYPE_OPENMETRICS
        assert text.endswith("# EOF\n")
    else:
        assert content_type == CONTENT_TYPE_TEXT
        assert "# EOF" not in text
    assert 'controller_runtime_reconcile_errors_total{controller="c"} 1.0' in text


def test_prometheus_client_is_imported_only_when_a_registry_is_needed() -> None:
    """Building the metrics and recording into them import nothing; the first scrape does."""
    code = (
        "import sys\n"
        "import setpoint.observability.metrics, setpoint.controller.workqueue\n"
        "assert 'prometheus_client' not in sys.modules, 'imported eagerly'\n"
        "from setpoint.observability.metrics import Metrics, render\n"
        "m = Metrics.default()\n"
        "m.init_controller('c', max_concurrent_reconciles=2)\n"
        "m.reconcile_total.labels('c', 'success').inc()\n"
        "m.reconcile_time_seconds.labels('c').observe(0.2)\n"
        "m.event_loop_lag_seconds.observe(0.001)\n"
        "assert 'prometheus_client' not in sys.modules, 'imported by recording'\n"
        "body, _ = render(m.registry, None)\n"
        "assert 'prometheus_client' in sys.modules\n"
        'assert b\'controller_runtime_reconcile_total{controller="c",result="success"} 1.0\''
        " in body, body\n"
        "assert b'process_cpu_seconds_total' in body, body\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("accept", ["text/plain", "application/openmetrics-text"])
def test_render_leaves_out_created_samples_like_client_golang(accept: str) -> None:
    metrics = Metrics(CollectorRegistry())
    _touch_every_metric(metrics)
    body, _ = render(metrics.registry, accept)
    assert "_created" not in body.decode()
    # ...without hiding a gauge whose own name happens to end in "_created".
    registry = CollectorRegistry()
    prometheus_client.Gauge("objects_created", "A gauge.", registry=registry).set(3)
    body, _ = render(registry, accept)
    assert "objects_created 3.0" in body.decode()


def test_isolated_instances_do_not_share_series() -> None:
    from setpoint.observability.metrics import Metrics

    a, b = Metrics.isolated(), Metrics.isolated()
    a.reconcile_total.labels(controller="c", result="success").inc(3)
    assert a.value("controller_runtime_reconcile_total", controller="c", result="success") == 3
    assert b.value("controller_runtime_reconcile_total", controller="c") == 0
    assert a.value("controller_runtime_reconcile_total", controller="other") == 0
