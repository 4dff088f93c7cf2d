"""A manager against the real API server: probes, /metrics and Events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry

from setpoint.api import kinds
from setpoint.client import Client, load_kubeconfig
from setpoint.controller.workqueue import WorkQueue
from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions
from setpoint.observability.metrics import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT, Metrics
from setpoint.testing.waits import eventually

CONTROLLER_RUNTIME_NAMES = (
    "workqueue_adds_total",
    "workqueue_depth",
    "workqueue_queue_duration_seconds",
    "workqueue_work_duration_seconds",
    "workqueue_retries_total",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_max_concurrent_reconciles",
    "controller_runtime_active_workers",
    "rest_client_requests_total",
    'leader_election_master_status{name="endpoints-lease"} 1.0',
)


class RunningManager:
    def __init__(self, manager: Manager, metrics: Metrics, task: asyncio.Task[None]) -> None:
        self.manager = manager
        self.metrics = metrics
        self.task = task


@pytest_asyncio.fixture(loop_scope="session")
async def running(kubeconfig_path: Path, namespace: str) -> AsyncIterator[RunningManager]:
    """An elected manager with real servers on 127.0.0.1:0, its own client and registry."""
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    metrics = Metrics(CollectorRegistry())
    manager = Manager(
        client,
        ManagerOptions(
            leader_election=LeaderElectionOptions(name="endpoints-lease", namespace=namespace),
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            metrics=metrics,
            handle_signals=False,
        ),
    )
    manager.cache  # noqa: B018 - builds and adds the shared cache, so readiness covers it
    task = asyncio.create_task(manager.run())
    try:
        await manager.wait_elected(timeout=60)
        yield RunningManager(manager, metrics, task)
    finally:
        manager.stop()
        await asyncio.wait_for(task, 60)
        await client.close()


@pytest_asyncio.fixture(loop_scope="session")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def url(address: tuple[str, int] | None, path: str) -> str:
    assert address is not None
    return f"http://{address[0]}:{address[1]}{path}"


async def test_probes_answer(running: RunningManager, http: aiohttp.ClientSession) -> None:
    """The probe server answers /healthz and /readyz with the built-in checks.

    Once elected and synced, /readyz passes every check (ping, informer-sync, shutdown,
    leader-election); the verbose form lists them and /readyz/<name> answers one check.
    """
    probes = running.manager.health_probe_address
    async with http.get(url(probes, "/healthz")) as resp:
        assert (resp.status, await resp.text()) == (200, "ok")

    async def ready() -> bool:
        async with http.get(url(probes, "/readyz")) as resp:
            return resp.status == 200

    await eventually(ready, timeout=30, description="/readyz passes")
    async with http.get(url(probes, "/readyz?verbose")) as resp:
        body = await resp.text()
    for line in (
        "[+]ping ok",
        "[+]informer-sync ok",
        "[+]shutdown ok",
        "[+]leader-election ok",
        "readyz check passed",
    ):
        assert line in body, body
    async with http.get(url(probes, "/readyz/leader-election")) as resp:
        assert (resp.status, await resp.text()) == (200, "ok")
    async with http.get(url(probes, "/readyz/nope")) as resp:
        assert resp.status == 404


async def test_metrics_scrape_has_controller_runtime_names_in_both_formats(
    running: RunningManager, http: aiohttp.ClientSession, k8s: Client, namespace: str
) -> None:
    """A scrape of /metrics has controller-runtime's metric names, in text and OpenMetrics.

    A work queue and a controller's series exist on the manager's registry; requests to the
    API server (the lease renewals among them) are counted in rest_client_requests_total by
    the hook the manager installs. Prometheus's Accept header gets OpenMetrics; no header
    gets the classic text format.
    """
    metrics = running.metrics
    metrics.init_controller("endpoints-demo", max_concurrent_reconciles=2)
    queue: WorkQueue[str] = WorkQueue("endpoints-demo", metrics=metrics)
    queue.add("a")
    key = await queue.get()
    queue.done(key)
    await running.manager.client.list(kinds.ConfigMap, namespace=namespace)

    scrape = running.manager.metrics_address
    async with http.get(url(scrape, "/metrics")) as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE_TEXT
        text = await resp.text()
    prometheus_accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    async with http.get(url(scrape, "/metrics"), headers={"Accept": prometheus_accept}) as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE_OPENMETRICS
        openmetrics = await resp.text()
    assert openmetrics.endswith("# EOF\n") and "# EOF" not in text
    for body in (text, openmetrics):
        for name in CONTROLLER_RUNTIME_NAMES:
            assert name in body, f"{name} missing from\n{body[:2000]}"
        client = running.manager.client
        assert isinstance(client, Client)
        host = client.transport.server.split("://", 1)[1]
        assert f'rest_client_requests_total{{code="200",host="{host}",method="GET"}}' in body
    queue.shutdown()


def events_about(items: list[dict[str, Any]], uid: str) -> list[dict[str, Any]]:
    return [e for e in items if e.get("regarding", {}).get("uid") == uid]


async def test_events_are_visible_through_the_api(
    running: RunningManager, k8s: Client, namespace: str
) -> None:
    """Events recorded through the manager appear in the API, aggregated into a series.

    The Event names the ConfigMap as its regarding object (with uid), carries the reporting
    controller and instance, and a repeat within the aggregation window updates the same
    Event's series instead of creating another. Leader election's own Event ("became
    leader") is recorded on the Lease.
    """
    cm: dict[str, Any] = await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "subject", "namespace": namespace},
            "data": {"k": "v"},
        }
    )
    recorder = running.manager.event_recorder("setpoint.dev/endpoints-test")
    recorder.warning(cm, "ConfigInvalid", "key k is not allowed")
    uid = cm["metadata"]["uid"]

    async def one_event() -> list[dict[str, Any]]:
        listed = await k8s.list(kinds.Event, namespace=namespace)
        return events_about(listed.items, uid)

    (event,) = await eventually(one_event, timeout=30, description="the Event exists")
    assert event["regarding"]["kind"] == "ConfigMap"
    assert event["regarding"]["name"] == "subject"
    assert event["regarding"]["namespace"] == namespace
    assert event["type"] == "Warning" and event["reason"] == "ConfigInvalid"
    assert event["note"] == "key k is not allowed"
    assert event["reportingController"] == "setpoint.dev/endpoints-test"
    assert event["reportingInstance"].startswith("setpoint.dev/endpoints-test-")

    recorder.warning(cm, "ConfigInvalid", "key k is not allowed")

    async def series_of_two() -> bool:
        found = await one_event()
        return len(found) == 1 and found[0].get("series", {}).get("count") == 2

    await eventually(series_of_two, timeout=30, description="the repeat updates the series")

    async def leader_event() -> list[dict[str, Any]]:
        listed = await k8s.list(kinds.Event, namespace=namespace)
        return [
            e
            for e in listed.items
            if e["regarding"]["kind"] == "Lease" and e["reason"] == "LeaderElection"
        ]

    (became,) = await eventually(leader_event, timeout=30, description="leader Event")
    assert became["regarding"]["name"] == "endpoints-lease"
    assert became["note"] == f"{running.manager.identity} became leader"


async def _service_account_token(k8s: Client, namespace: str, name: str) -> str:
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace},
        }
    )
    answer = await k8s.create_subresource(
        kinds.ServiceAccount,
        name,
        "token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
        namespace=namespace,
    )
    return str(answer["status"]["token"])


async def test_secure_metrics_need_a_token_the_api_server_authorizes(
    kubeconfig_path: Path, k8s: Client, namespace: str, http: aiohttp.ClientSession
) -> None:
    """metrics_secure: HTTPS, and TokenReview + SubjectAccessReview decide who may scrape.

    A service account bound to a ClusterRole with `get` on the non-resource URL /metrics
    scrapes; one without it gets 403, a bad token or none 401 (issue 18, item 2).
    """
    scraper = await _service_account_token(k8s, namespace, "scraper")
    nobody = await _service_account_token(k8s, namespace, "nobody")
    role = f"{namespace}-metrics-reader"
    await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
        }
    )
    await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": namespace}],
        }
    )
    client = Client(load_kubeconfig(str(kubeconfig_path)))
    manager = Manager(
        client,
        ManagerOptions(
            metrics_bind_address="127.0.0.1:0",
            metrics_secure=True,
            health_probe_bind_address="0",
            metrics=Metrics(CollectorRegistry()),
            handle_signals=False,
        ),
    )
    task = asyncio.create_task(manager.run())
    try:
        await eventually(
            lambda: manager.metrics_address is not None, timeout=30, description="metrics up"
        )
        host, port = manager.metrics_address or ("", 0)
        target = f"https://{host}:{port}/metrics"

        async def scrape(token: str | None) -> tuple[int, str]:
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            # The certificate is self-signed (no metrics_tls given), as controller-runtime's.
            async with http.get(target, headers=headers, ssl=False) as resp:
                return resp.status, await resp.text()

        async def allowed() -> bool:
            # RBAC changes reach the authorizer's cache within a moment.
            return (await scrape(scraper))[0] == 200

        await eventually(allowed, timeout=30, description="the scraper is allowed")
        status, body = await scrape(scraper)
        assert "rest_client_requests_total" in body
        status, body = await scrape(nobody)
        assert status == 403, body
        assert f"system:serviceaccount:{namespace}:nobody" in body
        assert (await scrape("not-a-token"))[0] == 401
        assert (await scrape(None))[0] == 401
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"http://{host}:{port}/metrics") as resp:
                await resp.read()  # plain HTTP to an HTTPS port gets nothing
    finally:
        manager.stop()
        await asyncio.wait_for(task, 60)
        await client.close()
        for kind in (kinds.ClusterRoleBinding, kinds.ClusterRole):
            await k8s.delete(kind, role)
