"""setpoint generate dashboard: the Grafana dashboard, ServiceMonitor and alerting rules."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest
import yaml

from setpoint.cli.generate import register
from setpoint.observability.dashboards import (
    RATE_INTERVAL,
    DashboardOptions,
    alert_rules,
    dashboard_panels,
)
from tests._support import prometheus
from tests.unit.observability.test_metrics_registry import EXPECTED

# Prometheus' own service account token, in its pod (what the scaffold's monitor.yaml sends).
SCRAPER_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
FILES = ("grafana/setpoint-runtime.json", "prometheus/monitor.yaml", "prometheus/alerts.yaml")

# PromQL words that are not metric names: functions, aggregations, modifiers.
_KEYWORDS = {"sum", "max", "min", "avg", "rate", "histogram_quantile", "by", "without"}


def series_names() -> set[str]:
    """Every series name the registry exposes (histograms with _bucket/_sum/_count)."""
    names = set()
    for name, (kind, _) in EXPECTED.items():
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def referenced_metrics(expr: str) -> set[str]:
    """The metric names an expression selects (what is left after grouping and functions)."""
    text = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", expr)  # grouping labels
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)  # matchers and ranges
    text = re.sub(r"[A-Za-z_][A-Za-z0-9_]*\s*\(", "(", text)  # function calls
    names = set(re.findall(r"[A-Za-z_][A-Za-z0-9_:]*", text))
    return {n for n in names if n not in _KEYWORDS and not re.fullmatch(r"e[0-9]*", n)}


def every_expression(options: DashboardOptions | None = None) -> list[str]:
    panels = [expr for panel in dashboard_panels() for _, expr in panel.exprs]
    return panels + [rule.expr for rule in alert_rules(options)]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="setpoint")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_every_expression_selects_only_metrics_setpoint_exports() -> None:
    """Each panel and alert expression names at least one metric, all of them in the registry.

    Parentheses and brackets balance, and the rate window is the only variable.
    """
    known = series_names()
    for expr in every_expression():
        used = referenced_metrics(expr)
        assert used, expr
        assert used <= known, f"{expr}: unknown {used - known}"
        assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), expr
        assert "$" not in expr.replace(RATE_INTERVAL, ""), expr


def test_the_dashboard_covers_the_runtime() -> None:
    """Panels cover reconciles, errors, latency, queue, API, leader, webhooks, finalizers, lag."""
    used = set().union(*(referenced_metrics(e) for e in every_expression()))
    for metric in (
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "workqueue_queue_duration_seconds_bucket",
        "rest_client_requests_total",
        "leader_election_master_status",
        "controller_runtime_webhook_requests_total",
        "controller_runtime_webhook_latency_seconds_bucket",
        "setpoint_finalizer_pending_objects",
        "setpoint_finalizer_oldest_pending_seconds",
        "setpoint_event_loop_lag_seconds_bucket",
    ):
        assert metric in used, metric
    names = {rule.name for rule in alert_rules()}
    assert names == {
        "SetpointFinalizerPendingTooLong",
        "SetpointReconcileErrors",
        "SetpointNoLeader",
        "SetpointEventLoopLag",
    }


def test_generate_dashboard_writes_three_deterministic_files(tmp_path: Path) -> None:
    """Two runs write the same bytes; the files parse as JSON/YAML of the expected kinds."""
    assert run(["generate", "dashboard", "--output-dir", str(tmp_path / "a")]) == 0
    assert run(["generate", "dashboard", "--output-dir", str(tmp_path / "b")]) == 0
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    dashboard = json.loads((tmp_path / "a" / FILES[0]).read_text())
    assert dashboard["uid"] == "setpoint-runtime"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs == [expr for panel in dashboard_panels() for _, expr in panel.exprs]
    monitor = yaml.safe_load((tmp_path / "a" / FILES[1]).read_text())
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["endpoints"] == [
        {
            "path": "/metrics",
            "port": "https",
            "scheme": "https",
            "bearerTokenFile": SCRAPER_TOKEN_FILE,
            "tlsConfig": {"insecureSkipVerify": True},
        }
    ]
    rules = yaml.safe_load((tmp_path / "a" / FILES[2]).read_text())
    assert rules["kind"] == "PrometheusRule"
    written = [r["expr"] for r in rules["spec"]["groups"][0]["rules"]]
    assert written == [rule.expr for rule in alert_rules()]


def test_check_mode_fails_on_a_stale_or_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--check writes nothing, exits 0 when up to date and 1 when a file differs or is gone."""
    out = ["--output-dir", str(tmp_path)]
    assert run(["generate", "dashboard", "--check", *out]) == 1
    assert not (tmp_path / "prometheus").exists()
    assert run(["generate", "dashboard", *out]) == 0
    assert run(["generate", "dashboard", "--check", *out]) == 0
    assert run(["generate", "dashboard", "--check", "--finalizer-pending-seconds", "60", *out]) == 1
    assert "out of date" in capsys.readouterr().err


def test_options_change_thresholds_and_scrape_settings(tmp_path: Path) -> None:
    """Thresholds, namespace, port and scheme reach the alert expressions and the monitor."""
    argv = ["generate", "dashboard", "--output-dir", str(tmp_path), "--namespace", "ops"]
    argv += ["--metrics-port", "web", "--metrics-scheme", "https"]
    argv += ["--finalizer-pending-seconds", "90", "--loop-lag-seconds", "0.25"]
    assert run(argv) == 0
    rules = yaml.safe_load((tmp_path / FILES[2]).read_text())
    exprs = {r["alert"]: r["expr"] for r in rules["spec"]["groups"][0]["rules"]}
    assert exprs["SetpointFinalizerPendingTooLong"].endswith("> 90")
    assert exprs["SetpointEventLoopLag"].endswith("> 0.25")
    assert rules["metadata"]["namespace"] == "ops"
    monitor = yaml.safe_load((tmp_path / FILES[1]).read_text())
    assert monitor["metadata"]["namespace"] == "ops"
    assert monitor["spec"]["endpoints"][0]["port"] == "web"
    assert monitor["spec"]["endpoints"][0]["scheme"] == "https"


def test_generated_monitor_scrapes_as_the_scaffolds_does(tmp_path: Path) -> None:
    """Finding 6 follow-up: `generate dashboard` writes the scaffold's monitor.yaml path.

    In a project `setpoint init` made, it must not turn the secure scrape (HTTPS on the
    ``https`` port with Prometheus' bearer token) back into plain HTTP: the endpoint and
    the object's name and namespace are the scaffold's, and the selector still picks the
    scaffold's metrics Service.
    """
    from setpoint.cli.scaffold.commands import init

    project = tmp_path / "shop-op"
    project.mkdir()
    init(project, domain="example.com")
    scaffolded = yaml.safe_load((project / "config" / FILES[1]).read_text())
    service = yaml.safe_load((project / "config/default/metrics_service.yaml").read_text())
    assert run(["generate", "dashboard", "--output-dir", str(tmp_path / "generated")]) == 0
    generated = yaml.safe_load((tmp_path / "generated" / FILES[1]).read_text())
    assert generated["spec"]["endpoints"] == scaffolded["spec"]["endpoints"]
    assert generated["metadata"]["name"] == scaffolded["metadata"]["name"]
    assert generated["metadata"]["namespace"] == scaffolded["metadata"]["namespace"]
    selector = generated["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert generated["spec"]["endpoints"][0]["port"] == port["name"]


def test_a_ca_secret_makes_the_monitor_verify_the_metrics_certificate(tmp_path: Path) -> None:
    """With a certificate served by --metrics-cert-dir, Prometheus verifies it: CA and name."""
    argv = ["generate", "dashboard", "--output-dir", str(tmp_path)]
    argv += ["--metrics-ca-secret", "metrics-server-cert"]
    argv += ["--metrics-server-name", "op-controller-manager-metrics-service.op-system.svc"]
    assert run(argv) == 0
    monitor = yaml.safe_load((tmp_path / FILES[1]).read_text())
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"] == SCRAPER_TOKEN_FILE
    assert endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": "metrics-server-cert", "key": "ca.crt"}},
        "serverName": "op-controller-manager-metrics-service.op-system.svc",
    }


def test_plain_http_scrapes_carry_no_token_or_tls_settings(tmp_path: Path) -> None:
    """--metrics-scheme http (an unauthenticated endpoint on a trusted network): no token sent."""
    argv = ["generate", "dashboard", "--output-dir", str(tmp_path)]
    argv += ["--metrics-scheme", "http", "--metrics-port", "http"]
    assert run(argv) == 0
    monitor = yaml.safe_load((tmp_path / FILES[1]).read_text())
    assert monitor["spec"]["endpoints"] == [{"path": "/metrics", "port": "http", "scheme": "http"}]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"metrics_ca_secret": "ca"},
            "DashboardOptions.metrics_ca_secret='ca' needs metrics_server_name",
        ),
        (
            {"metrics_server_name": "svc.ns.svc"},
            "DashboardOptions.metrics_server_name='svc.ns.svc' needs metrics_ca_secret",
        ),
        (
            {"metrics_scheme": "http", "metrics_ca_secret": "ca", "metrics_server_name": "a.b"},
            "DashboardOptions.metrics_ca_secret='ca' verifies an HTTPS endpoint",
        ),
        ({"metrics_ca_secret": "Bad/Name", "metrics_server_name": "a.b"}, "a Secret name"),
        ({"metrics_ca_secret": "ca", "metrics_server_name": "no spaces"}, "a DNS name"),
    ],
)
def test_verification_settings_that_cannot_work_name_the_field(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        DashboardOptions(**options)  # type: ignore[arg-type]


def test_verification_settings_on_the_command_line_are_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["generate", "dashboard", "--output-dir", str(tmp_path), "--metrics-ca-secret", "ca"]
    assert run(argv) == 1
    assert "needs metrics_server_name" in capsys.readouterr().err
    assert not (tmp_path / "prometheus").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_window", "5 minutes"),
        ("alert_for", ""),
        ("finalizer_pending_seconds", 0),
        ("loop_lag_seconds", float("nan")),
        ("namespace", "Not/A/Name"),
        ("metrics_scheme", "ftp"),
    ],
)
def test_bad_options_name_the_field(field: str, value: object) -> None:
    """A bad option raises ValueError naming DashboardOptions.<field>."""
    with pytest.raises(ValueError, match=f"DashboardOptions.{field}="):
        DashboardOptions(**{field: value})  # type: ignore[arg-type]


def test_bad_threshold_on_the_command_line_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative threshold exits 1 with a message naming the option."""
    argv = ["generate", "dashboard", "--output-dir", str(tmp_path), "--loop-lag-seconds", "-1"]
    assert run(argv) == 1
    assert "loop_lag_seconds=-1.0 must be a positive" in capsys.readouterr().err


def test_missing_prometheus_fails_and_says_make_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the built binary the dashboards test fails (never skips) naming the fix."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="run `make prometheus`"):
        prometheus.binary()
