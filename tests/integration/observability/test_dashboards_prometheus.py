"""The generated dashboard and alerts, evaluated by a real Prometheus scraping running operators."""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import setpoint as sp
from setpoint.api import kinds
from setpoint.client import Client, load_kubeconfig
from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions
from setpoint.observability.dashboards import (
    RATE_INTERVAL,
    DashboardOptions,
    alert_rules,
    alerting_rules,
    dashboard_panels,
)
from setpoint.observability.metrics import Metrics
from setpoint.server.http import HttpRequest, HttpResponse
from setpoint.testing import eventually, eventually_passes
from setpoint.testing.webhook import serving_certificate
from setpoint.webhook.server import StaticCertificate, WebhookServerOptions
from tests._support import prometheus

pytestmark = [pytest.mark.integration, pytest.mark.dashboards]

FINALIZER = "dashboards.setpoint.dev/hold"
NAMES = ("fine", "bad", "slow", "held")
WINDOW = "30s"
"""The rate window of the test (Grafana's ``$__rate_interval`` is replaced by it)."""
OPTIONS = DashboardOptions(rate_window=WINDOW, finalizer_pending_seconds=1.0)
"""Alert thresholds the scenario crosses: a finalizer held over 1 s; the default 0.1 s lag."""


def operator(namespace: str) -> Any:
    """A controller of ConfigMaps whose cleanup never succeeds, that fails on ``bad`` and
    blocks the event loop for 0.2 s on each reconcile of ``slow``; and a ``/ping`` webhook."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> sp.Result | None:
        if request.name == "bad":
            raise RuntimeError("this object always fails")
        if request.name == "slow":
            time.sleep(0.2)  # noqa: ASYNC251 - a blocking call: what the loop lag alert is for
            return sp.Result(requeue_after=0.5)
        return None

    async def cleanup(ctx: sp.Context, obj: Any) -> None:
        raise RuntimeError("the external resource cannot be released")

    async def ping(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"pong")

    def setup(manager: sp.Manager) -> None:
        manager.controller("dash").for_(
            kinds.ConfigMap,
            predicates=[
                lambda event: (
                    sp.meta.namespace_of(event.object) == namespace
                    and sp.meta.name_of(event.object) in NAMES
                )
            ],
        ).finalizer(FINALIZER, cleanup, deadline=5.0).build(reconcile)
        manager.webhook_server.register("/ping", ping)

    return setup


async def hold_lease(k8s: Client, namespace: str, name: str) -> None:
    """Create Lease ``name`` held by a foreign identity for an hour, so nobody scraped leads."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await k8s.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "holderIdentity": "someone-else",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        }
    )


async def call_webhook(address: tuple[str, int], ca_pem: bytes, times: int) -> None:
    """POST to the operator's ``/ping`` webhook ``times`` times over TLS."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    async with aiohttp.ClientSession() as session:
        for _ in range(times):
            url = f"https://{address[0]}:{address[1]}/ping"
            async with session.post(url, data=b"{}", ssl=context) as response:
                assert response.status == 200, await response.text()


async def test_every_dashboard_query_and_alert_returns_data_on_a_real_prometheus(
    k8s: Client, namespace: str, kubeconfig_path: Path, tmp_path: Path
) -> None:
    """Prometheus scraping two managers answers every dashboard query, and every alert fires.

    One manager reconciles ConfigMaps (one always fails, one blocks the loop, one is
    deleted while its finalizer's cleanup keeps failing) and serves a webhook that is
    called; a standby manager waits for a Lease a foreign identity holds. Prometheus 3.16.0 (built
    by `make prometheus`) scrapes both every second with the generated alerting rules; each
    panel expression (``$__rate_interval`` = 30s) and each alert expression returns samples
    through /api/v1/query, and each alert is pending in /api/v1/alerts.
    """
    prometheus.binary()  # fail at once, with how to fix it, when Prometheus is not built
    lease = "dash-standby"
    await hold_lease(k8s, namespace, lease)
    ca, pair = serving_certificate()
    clients = [Client(load_kubeconfig(str(kubeconfig_path))) for _ in range(2)]
    op = Manager(
        clients[0],
        ManagerOptions(
            metrics=Metrics.isolated(),
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="0",
            handle_signals=False,
            webhook_server=WebhookServerOptions(
                bind_address="127.0.0.1:0", certificate=StaticCertificate(pair)
            ),
        ),
    )
    operator(namespace)(op)
    standby = Manager(
        clients[1],
        ManagerOptions(
            metrics=Metrics.isolated(),
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="0",
            handle_signals=False,
            leader_election=LeaderElectionOptions(
                name=lease, namespace=namespace, identity="standby", retry_period=1.0
            ),
        ),
    )
    tasks = [asyncio.create_task(m.run()) for m in (op, standby)]
    try:

        def scrape_targets() -> list[str] | None:
            addresses = [m.metrics_address for m in (op, standby)]
            return [f"{a[0]}:{a[1]}" for a in addresses if a] if all(addresses) else None

        targets = await eventually(scrape_targets)
        assert targets is not None
        rules = alerting_rules(OPTIONS)["spec"]
        with prometheus.running(tmp_path, targets, rules) as prom:
            for name in NAMES:
                await k8s.create(
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": name, "namespace": namespace}}
                )  # fmt: skip

            async def protected() -> None:
                held = await k8s.get(kinds.ConfigMap, "held", namespace=namespace)
                assert FINALIZER in held["metadata"].get("finalizers", [])

            await eventually_passes(protected)
            await k8s.delete(kinds.ConfigMap, "held", namespace=namespace)
            webhook = op.webhook_server.address
            assert webhook is not None
            await call_webhook(webhook, ca.cert_pem, times=5)
            await prometheus.wait_ready(prom)

            panel_exprs = [
                (panel.title, legend, expr.replace(RATE_INTERVAL, WINDOW))
                for panel in dashboard_panels()
                for legend, expr in panel.exprs
            ]
            alert_exprs = [(rule.name, "", rule.expr) for rule in alert_rules(OPTIONS)]

            async def every_expression_returns_data() -> None:
                # The webhook's histogram has observations in the window only while the test
                # keeps calling it: call it on every attempt, and check the quantiles here.
                await call_webhook(webhook, ca.cert_pem, times=1)
                empty = [
                    f"{title} [{legend}]: {expr}"
                    for title, legend, expr in panel_exprs + alert_exprs
                    if not await prom.query(expr)
                ]
                assert not empty, "no data for:\n" + "\n".join(empty)
                # finite numbers, not only NaN: the histograms had observations in the window
                for title, _, expr in panel_exprs:
                    if expr.startswith("histogram_quantile"):
                        values = [float(s["value"][1]) for s in await prom.query(expr)]
                        assert any(not math.isnan(v) for v in values), f"{title}: only NaN: {expr}"

            await eventually_passes(every_expression_returns_data, timeout=60, interval=1.0)

            async def every_alert_is_active() -> None:
                data = await prom.get("/api/v1/alerts")
                active = {a["labels"]["alertname"] for a in data["alerts"]}
                assert active >= {rule.name for rule in alert_rules(OPTIONS)}, active

            await eventually_passes(every_alert_is_active, timeout=30, interval=1.0)
            groups = (await prom.get("/api/v1/rules"))["groups"]
            health = {r["name"]: r["health"] for g in groups for r in g["rules"]}
            assert set(health.values()) == {"ok"}, health
    finally:
        for manager in (op, standby):
            manager.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        for name in NAMES:  # the cleanup never succeeds: let the namespace go
            await k8s.patch(
                kinds.ConfigMap,
                name,
                sp.MergePatch({"metadata": {"finalizers": None}}),
                namespace=namespace,
            )
        for client in clients:
            await client.close()
