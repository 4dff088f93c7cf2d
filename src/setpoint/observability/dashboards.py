"""Grafana dashboard, ServiceMonitor and alerting rules for setpoint's runtime metrics.

``setpoint generate dashboard`` writes what this module builds (pure data, no I/O):

* :func:`grafana_dashboard`: one Grafana dashboard (reconciles by result, errors, reconcile
  latency p50/p99, work queue depth, wait and longest-running item, API requests by code,
  leader election, webhook requests and latency, finalizers pending and the oldest one's
  age, event loop lag), as kubebuilder's Grafana plugin writes for controller-runtime;
* :func:`service_monitor`: a prometheus-operator ``ServiceMonitor`` for the kubebuilder
  layout's metrics Service (``control-plane: controller-manager``); by default it scrapes
  as ``setpoint init``'s ``config/prometheus/monitor.yaml`` does (the same path), secure
  metrics: HTTPS on the ``https`` port with Prometheus' bearer token;
* :func:`alerting_rules`: a ``PrometheusRule`` with alerts for the failure modes setpoint
  knows: a finalizer pending too long, reconcile errors, no leader, event loop lag.

Every expression uses only metric names of :mod:`setpoint.observability.metrics` (a unit
test checks it against the registry; ``make test-dashboards`` evaluates each on a real
Prometheus scraping a running operator). Panel expressions use Grafana's
``$__rate_interval`` (:data:`RATE_INTERVAL`); alert expressions use
:attr:`DashboardOptions.rate_window`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final

from setpoint.api.validation import is_dns1123_subdomain

__all__ = [
    "METRICS_CA_KEY",
    "RATE_INTERVAL",
    "SCRAPER_TOKEN_FILE",
    "AlertRule",
    "DashboardOptions",
    "Panel",
    "alert_rules",
    "alerting_rules",
    "dashboard_panels",
    "grafana_dashboard",
    "service_monitor",
]

RATE_INTERVAL: Final = "$__rate_interval"
"""Grafana's rate window variable, used by every panel expression that takes a rate."""

SCRAPER_TOKEN_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
"""Where the kubelet mounts Prometheus' own service account token in its pod: the bearer token
an HTTPS scrape sends, which the manager checks with TokenReview and SubjectAccessReview
(``--metrics-secure``)."""

METRICS_CA_KEY: Final = "ca.crt"
"""The key of :attr:`DashboardOptions.metrics_ca_secret` holding the CA (cert-manager's and
the ``kubernetes.io/tls`` layout's name)."""

_DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d)$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True, kw_only=True)
class DashboardOptions:
    """What the generated dashboard, ServiceMonitor and alerts are configured with.

    Every field has a default that suits a kubebuilder-layout operator; validation runs at
    construction and a bad value raises :class:`ValueError` naming the field.
    """

    namespace: str = "system"
    """Namespace of the ServiceMonitor and PrometheusRule (kustomize's ``namespace:``
    rewrites it, as for the rest of ``config/``)."""

    metrics_port: str = "https"
    """Name of the metrics Service's port the ServiceMonitor scrapes (the scaffold's Service
    names its 8443 port ``https``)."""

    metrics_scheme: str = "https"
    """``https`` (the default, as ``setpoint run --metrics-secure`` serves): the scrape sends
    Prometheus' service account token (:data:`SCRAPER_TOKEN_FILE`) and verifies the server
    with :attr:`metrics_ca_secret`, or skips verification without it. ``http``: plain HTTP,
    no token and no TLS settings, for an endpoint served without ``--metrics-secure`` on a
    network you trust."""

    metrics_ca_secret: str | None = None
    """A Secret in :attr:`namespace` whose ``ca.crt`` signed the metrics certificate (the
    Secret cert-manager writes for a Certificate, mounted into the manager with
    ``setpoint run --metrics-cert-dir``): Prometheus verifies the server with it. ``None``:
    verification is skipped (``insecureSkipVerify``), as it must be for the self-signed
    certificate the manager makes without ``--metrics-cert-dir``. Needs
    :attr:`metrics_server_name`."""

    metrics_server_name: str | None = None
    """The name the metrics certificate is issued for, checked by Prometheus (which connects
    to the Pod's IP): the metrics Service's DNS name after kustomize's ``namePrefix`` and
    ``namespace``, e.g. ``my-op-controller-manager-metrics-service.my-op-system.svc``. Only
    with :attr:`metrics_ca_secret`."""

    rate_window: str = "5m"
    """Window of the ``rate()`` in alert expressions (a Prometheus duration, e.g. ``5m``)."""

    finalizer_pending_seconds: float = 600.0
    """``SetpointFinalizerPendingTooLong`` fires when an object has waited longer than this
    many seconds for a finalizer's cleanup (counted from its ``deletionTimestamp``)."""

    loop_lag_seconds: float = 0.1
    """``SetpointEventLoopLag`` fires when the event loop's p99 lag is above this."""

    alert_for: str = "5m"
    """How long each alert's condition must hold before it fires (``for:``)."""

    def __post_init__(self) -> None:
        for name in ("rate_window", "alert_for"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _DURATION.match(value):
                raise ValueError(
                    f"DashboardOptions.{name}={value!r} must be a Prometheus duration such as "
                    "'30s' or '5m'"
                )
        for name in ("finalizer_pending_seconds", "loop_lag_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"DashboardOptions.{name}={value!r} must be a number of seconds")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"DashboardOptions.{name}={value!r} must be a positive number of seconds"
                )
        for name in ("namespace", "metrics_port"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _LABEL_VALUE.match(value):
                raise ValueError(
                    f"DashboardOptions.{name}={value!r} must be a Kubernetes name "
                    "(letters, digits, '-', '.', '_')"
                )
        if self.metrics_scheme not in ("http", "https"):
            raise ValueError(
                f"DashboardOptions.metrics_scheme={self.metrics_scheme!r} must be 'http' or 'https'"
            )
        self._check_verification()

    def _check_verification(self) -> None:
        ca, server_name = self.metrics_ca_secret, self.metrics_server_name
        if ca is None and server_name is None:
            return
        if server_name is None:
            raise ValueError(
                f"DashboardOptions.metrics_ca_secret={ca!r} needs metrics_server_name "
                "(--metrics-server-name): the metrics Service's DNS name the certificate is "
                "issued for, e.g. my-op-controller-manager-metrics-service.my-op-system.svc"
            )
        if ca is None:
            raise ValueError(
                f"DashboardOptions.metrics_server_name={server_name!r} needs metrics_ca_secret "
                "(--metrics-ca-secret): the Secret whose ca.crt verifies that name"
            )
        if self.metrics_scheme != "https":
            raise ValueError(
                f"DashboardOptions.metrics_ca_secret={ca!r} verifies an HTTPS endpoint; drop it "
                "or set metrics_scheme='https'"
            )
        if not isinstance(ca, str) or not is_dns1123_subdomain(ca):
            raise ValueError(
                f"DashboardOptions.metrics_ca_secret={ca!r} must be a Secret name (lowercase "
                "letters, digits, '-' and '.')"
            )
        if not isinstance(server_name, str) or not is_dns1123_subdomain(server_name):
            raise ValueError(
                f"DashboardOptions.metrics_server_name={server_name!r} must be a DNS name "
                "(lowercase letters, digits, '-' and '.')"
            )


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: its title, unit and PromQL expressions (one series set each)."""

    title: str
    """The panel's title."""
    unit: str
    """Grafana unit of the y axis (``reqps``, ``s``, ``short``...)."""
    exprs: tuple[tuple[str, str], ...]
    """``(legend, expr)`` pairs; ``expr`` may contain :data:`RATE_INTERVAL`."""


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule: name, PromQL expression, ``for`` duration, severity and summary."""

    name: str
    """The alert's name (``alertname``)."""
    expr: str
    """The condition: the alert is pending while this returns data."""
    for_: str
    """How long the condition must hold before it fires."""
    severity: str
    """``warning`` or ``critical`` (the ``severity`` label)."""
    summary: str
    """One line for the notification; may use ``{{ $labels.x }}``."""
    description: str
    """What it means and what to look at first."""


def _quantile(q: float, metric: str, by: str, window: str) -> str:
    return f"histogram_quantile({q}, sum by ({by}) (rate({metric}_bucket[{window}])))"


def dashboard_panels() -> tuple[Panel, ...]:
    """The dashboard's panels, in display order."""
    w = RATE_INTERVAL
    reconcile_time = "controller_runtime_reconcile_time_seconds"
    return (
        Panel(
            "Reconciles per second by result",
            "ops",
            (
                (
                    "{{controller}} {{result}}",
                    f"sum by (controller, result) (rate(controller_runtime_reconcile_total[{w}]))",
                ),
            ),
        ),
        Panel(
            "Reconcile errors per second",
            "ops",
            (
                (
                    "{{controller}}",
                    f"sum by (controller) (rate(controller_runtime_reconcile_errors_total[{w}]))",
                ),
            ),
        ),
        Panel(
            "Reconcile latency",
            "s",
            (
                ("{{controller}} p50", _quantile(0.5, reconcile_time, "controller, le", w)),
                ("{{controller}} p99", _quantile(0.99, reconcile_time, "controller, le", w)),
            ),
        ),
        Panel(
            "Work queue depth",
            "short",
            (("{{name}}", "sum by (name) (workqueue_depth)"),),
        ),
        Panel(
            "Work queue wait (p99) and longest running item",
            "s",
            (
                (
                    "{{name}} wait p99",
                    _quantile(0.99, "workqueue_queue_duration_seconds", "name, le", w),
                ),
                (
                    "{{name}} longest running",
                    "max by (name) (workqueue_longest_running_processor_seconds)",
                ),
            ),
        ),
        Panel(
            "API requests per second by code",
            "reqps",
            (
                (
                    "{{method}} {{code}}",
                    f"sum by (method, code) (rate(rest_client_requests_total[{w}]))",
                ),
            ),
        ),
        Panel(
            "Leader election (1 = this replica leads)",
            "short",
            (
                (
                    "{{name}} {{instance}}",
                    "max by (name, instance) (leader_election_master_status)",
                ),
            ),
        ),
        Panel(
            "Webhook requests per second by code",
            "reqps",
            (
                (
                    "{{webhook}} {{code}}",
                    "sum by (webhook, code) "
                    f"(rate(controller_runtime_webhook_requests_total[{w}]))",
                ),
            ),
        ),
        Panel(
            "Webhook latency (p99)",
            "s",
            (
                (
                    "{{webhook}}",
                    _quantile(0.99, "controller_runtime_webhook_latency_seconds", "webhook, le", w),
                ),
            ),
        ),
        Panel(
            "Objects waiting for a finalizer",
            "short",
            (("{{finalizer}}", "sum by (finalizer) (setpoint_finalizer_pending_objects)"),),
        ),
        Panel(
            "Oldest object waiting for a finalizer",
            "s",
            (
                (
                    "{{finalizer}}",
                    "max by (finalizer) (setpoint_finalizer_oldest_pending_seconds)",
                ),
            ),
        ),
        Panel(
            "Event loop lag (p99)",
            "s",
            (
                (
                    "{{instance}}",
                    _quantile(0.99, "setpoint_event_loop_lag_seconds", "instance, le", w),
                ),
            ),
        ),
    )


def alert_rules(options: DashboardOptions | None = None) -> tuple[AlertRule, ...]:
    """The alerting rules, built with ``options`` (default :class:`DashboardOptions`)."""
    opts = options or DashboardOptions()
    w = opts.rate_window
    return (
        AlertRule(
            name="SetpointFinalizerPendingTooLong",
            expr="max by (namespace, job, finalizer) (setpoint_finalizer_oldest_pending_seconds)"
            f" > {opts.finalizer_pending_seconds:g}",
            for_=opts.alert_for,
            severity="warning",
            summary="An object has waited over "
            f"{opts.finalizer_pending_seconds:g}s for finalizer {{{{ $labels.finalizer }}}}",
            description="Its cleanup keeps failing or the operator is not running it. Run "
            "`setpoint doctor finalizers` to see which objects and the last error.",
        ),
        AlertRule(
            name="SetpointReconcileErrors",
            expr="sum by (namespace, job, controller) "
            f"(rate(controller_runtime_reconcile_errors_total[{w}])) > 0",
            for_=opts.alert_for,
            severity="warning",
            summary="Controller {{ $labels.controller }} keeps failing reconciles",
            description="Reconciles return errors and are retried with backoff. Look at the "
            "operator's error log lines for the controller, and the objects' Events.",
        ),
        AlertRule(
            name="SetpointNoLeader",
            expr="max by (namespace, job, name) (leader_election_master_status) < 1",
            for_=opts.alert_for,
            severity="critical",
            summary="No scraped replica holds the lease {{ $labels.name }}",
            description="No controller is running. Run `setpoint doctor leader-election` "
            "to see who holds the Lease and when it was last renewed.",
        ),
        AlertRule(
            name="SetpointEventLoopLag",
            expr="histogram_quantile(0.99, sum by (namespace, job, instance, le) "
            f"(rate(setpoint_event_loop_lag_seconds_bucket[{w}])))"
            f" > {opts.loop_lag_seconds:g}",
            for_=opts.alert_for,
            severity="warning",
            summary="The event loop of {{ $labels.instance }} lags over "
            f"{opts.loop_lag_seconds:g}s (p99)",
            description="Something blocks the asyncio loop (CPU-bound or blocking code in a "
            "reconcile). Send SIGUSR1 for a task dump, or read /debug/tasks if enabled.",
        ),
    )


def grafana_dashboard() -> dict[str, Any]:
    """The Grafana dashboard model (JSON), with a Prometheus data source variable."""
    panels: list[dict[str, Any]] = []
    for index, panel in enumerate(dashboard_panels()):
        targets = [
            {
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": expr,
                "legendFormat": legend,
                "refId": chr(ord("A") + n),
            }
            for n, (legend, expr) in enumerate(panel.exprs)
        ]
        panels.append(
            {
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "id": index + 1,
                "targets": targets,
                "title": panel.title,
                "type": "timeseries",
            }
        )
    return {
        "editable": True,
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["setpoint", "controller-runtime"],
        "templating": {
            "list": [
                {
                    "label": "Data source",
                    "name": "datasource",
                    "query": "prometheus",
                    "type": "datasource",
                }
            ]
        },
        "time": {"from": "now-1h", "to": "now"},
        "title": "setpoint runtime",
        "uid": "setpoint-runtime",
    }


def service_monitor(options: DashboardOptions | None = None) -> dict[str, Any]:
    """A prometheus-operator ServiceMonitor for the metrics Service of the kubebuilder layout.

    With the default options its endpoint is the one ``setpoint init`` scaffolds in
    ``config/prometheus/monitor.yaml``, so writing either file over the other keeps the
    scrape secure: HTTPS, Prometheus' bearer token (:data:`SCRAPER_TOKEN_FILE`), and
    ``insecureSkipVerify`` for the manager's self-signed certificate, or ``tlsConfig.ca`` and
    ``serverName`` with :attr:`DashboardOptions.metrics_ca_secret`.
    """
    opts = options or DashboardOptions()
    endpoint: dict[str, Any] = {
        "path": "/metrics",
        "port": opts.metrics_port,
        "scheme": opts.metrics_scheme,
    }
    if opts.metrics_scheme == "https":
        endpoint["bearerTokenFile"] = SCRAPER_TOKEN_FILE
        if opts.metrics_ca_secret is None:
            endpoint["tlsConfig"] = {"insecureSkipVerify": True}
        else:
            endpoint["tlsConfig"] = {
                "ca": {"secret": {"name": opts.metrics_ca_secret, "key": METRICS_CA_KEY}},
                "serverName": opts.metrics_server_name,
            }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {
            "labels": {"control-plane": "controller-manager"},
            "name": "controller-manager-metrics-monitor",
            "namespace": opts.namespace,
        },
        "spec": {
            "endpoints": [endpoint],
            "selector": {"matchLabels": {"control-plane": "controller-manager"}},
        },
    }


def alerting_rules(options: DashboardOptions | None = None) -> dict[str, Any]:
    """A prometheus-operator PrometheusRule holding :func:`alert_rules`.

    Its ``spec`` is also a plain Prometheus rule file (``groups:``), for a Prometheus not run
    by the operator.
    """
    opts = options or DashboardOptions()
    rules = [
        {
            "alert": rule.name,
            "annotations": {"description": rule.description, "summary": rule.summary},
            "expr": rule.expr,
            "for": rule.for_,
            "labels": {"severity": rule.severity},
        }
        for rule in alert_rules(opts)
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "labels": {"control-plane": "controller-manager"},
            "name": "controller-manager-alerts",
            "namespace": opts.namespace,
        },
        "spec": {"groups": [{"name": "setpoint", "rules": rules}]},
    }
