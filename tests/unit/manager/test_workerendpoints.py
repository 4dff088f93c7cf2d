"""The supervisor's endpoints: merged worker metrics, per-worker probes, authentication.

Fake workers are real loopback HTTP servers (``Http1Server``) serving expositions rendered
from their own prometheus_client registries, as a worker's manager does; the worker table
is a list the test edits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, cast

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families

from setpoint.api.clock import ManualClock
from setpoint.manager.workerendpoints import SupervisorEndpoints, WorkerState, WorkerStatus
from setpoint.observability.metrics import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT, render
from setpoint.server import BindAddress, Http1Server, HttpRequest, HttpResponse
from tests._support.manager_fakes import FakeHttpServer

# The library leaves this function unannotated; state the signature it has.
parse_openmetrics = cast(
    "Callable[[str], Iterator[Metric]]", openmetrics_parser.text_string_to_metric_families
)

ESCAPED = 'quote " backslash \\ newline \n end'
"""A label value every exposition must escape."""


class Table:
    """The supervisor's worker table, as a list the test edits."""

    def __init__(self, rows: Sequence[WorkerStatus] = ()) -> None:
        self.rows = list(rows)

    def workers(self) -> Sequence[WorkerStatus]:
        return self.rows


def worker_registry(index: int) -> CollectorRegistry:
    """What worker ``index`` exposes: a counter, a gauge, a histogram; worker 1 one more."""
    registry = CollectorRegistry()
    reconciles = Counter(
        "controller_runtime_reconcile_total",
        "Total number of reconciliations per controller",
        ["controller", "result"],
        registry=registry,
    )
    reconciles.labels("tenant", "success").inc(10 + index)
    reconciles.labels(ESCAPED, "error").inc(1)
    Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=registry).labels(
        "tenant"
    ).set(index)
    latency = Histogram(
        "controller_runtime_reconcile_time_seconds",
        "Length of time per reconciliation per controller",
        ["controller"],
        buckets=(0.01, 0.1, 1.0),
        registry=registry,
    )
    latency.labels("tenant").observe(0.05 + 0.5 * index)
    # A user metric with its own "worker" label: kept, as exported_worker.
    Gauge("app_pool_size", "A user's pool", ["worker"], registry=registry).labels("db").set(3)
    if index == 1:
        Gauge("only_in_worker_one", "A family one worker has", registry=registry).set(7)
    return registry


class FakeWorker:
    """A loopback HTTP server serving a registry's exposition, or hanging when told to."""

    def __init__(self, registry: CollectorRegistry, *, hang: bool = False) -> None:
        self.registry = registry
        self.hang = hang
        self.asked = asyncio.Event()
        self.release = asyncio.Event()
        self.accepts: list[str | None] = []
        self.server = Http1Server("worker", BindAddress("127.0.0.1", 0), self.handle)

    async def handle(self, request: HttpRequest) -> HttpResponse:
        self.accepts.append(request.headers.get("Accept"))
        self.asked.set()
        if self.hang:
            await self.release.wait()
        body, content_type = render(self.registry, request.headers.get("Accept"))
        return HttpResponse(200, body, content_type)

    @property
    def address(self) -> tuple[str, int]:
        assert self.server.address is not None
        return self.server.address


def status(
    index: int,
    worker: FakeWorker | None = None,
    *,
    state: WorkerState = "ready",
    restarts: int = 0,
    pid: int | None = None,
) -> WorkerStatus:
    return WorkerStatus(
        index=index,
        pid=pid if pid is not None else (1000 + index if worker is not None else None),
        state=state,
        restarts=restarts,
        metrics_address=worker.address if worker is not None else None,
        probe_address=None,
    )


@pytest.fixture
async def workers() -> AsyncIterator[Callable[..., Awaitable[FakeWorker]]]:
    started: list[FakeWorker] = []

    async def start(registry: CollectorRegistry, *, hang: bool = False) -> FakeWorker:
        worker = FakeWorker(registry, hang=hang)
        await worker.server.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.release.set()
        await worker.server.stop(1)


def endpoints(table: Table, **overrides: Any) -> SupervisorEndpoints:
    values: dict[str, Any] = {
        "metrics_bind_address": "127.0.0.1:0",
        "health_probe_bind_address": "127.0.0.1:0",
        "metrics_secure": False,
        "metrics_tls": None,
        "client": None,
        "registry": CollectorRegistry(),
        "new_http_server": FakeHttpServer,
    }
    values.update(overrides)
    return SupervisorEndpoints(table, **values)


def scrape(accept: str | None = None) -> HttpRequest:
    headers = {"Accept": accept} if accept is not None else {}
    return HttpRequest("GET", "/metrics", headers=headers, remote="10.0.0.9")


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a classic exposition: (name, labels) -> value."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"sample {key} twice"
            found[key] = sample.value
    return found


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


# -- /metrics -------------------------------------------------------------------------------


async def test_metrics_merge_every_worker_once_per_family_with_a_worker_label(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """Two workers: each family once, each sample labelled, the supervisor's own families."""
    zero = await workers(worker_registry(0))
    one = await workers(worker_registry(1))
    table = Table([status(0, zero, restarts=2), status(1, one)])
    supervisor = endpoints(table)

    answer = await supervisor.serve_metrics(scrape())

    assert answer.status == 200
    assert answer.content_type == CONTENT_TYPE_TEXT
    text = answer.body.decode()
    for family in (
        "controller_runtime_reconcile_total",
        "workqueue_depth",
        "controller_runtime_reconcile_time_seconds",
        "only_in_worker_one",
        "setpoint_workers",
        "setpoint_worker_restarts_total",
    ):
        assert text.count(f"# TYPE {family} ") == 1, family
        assert text.count(f"# HELP {family} ") == 1, family
    got = samples(text)
    reconciles = "controller_runtime_reconcile_total"
    assert got[reconciles, labels(worker="0", controller="tenant", result="success")] == 10
    assert got[reconciles, labels(worker="1", controller="tenant", result="success")] == 11
    assert got[reconciles, labels(worker="1", controller=ESCAPED, result="error")] == 1
    assert got["workqueue_depth", labels(worker="1", name="tenant")] == 1
    histogram = "controller_runtime_reconcile_time_seconds"
    for worker, le, count in (("0", "0.01", 0), ("0", "0.1", 1), ("1", "0.1", 0), ("1", "1.0", 1)):
        assert got[histogram + "_bucket", labels(worker=worker, controller="tenant", le=le)] == (
            count
        )
    assert got[histogram + "_count", labels(worker="1", controller="tenant")] == 1
    assert got["only_in_worker_one", labels(worker="1")] == 7
    assert not any(name == "only_in_worker_one" and ("worker", "0") in k for name, k in got)
    assert got["app_pool_size", labels(worker="0", exported_worker="db")] == 3
    assert got["setpoint_workers", labels(state="ready")] == 2
    assert got["setpoint_workers", labels(state="failed")] == 0
    assert got["setpoint_worker_restarts_total", labels(worker="0")] == 2
    assert got["setpoint_worker_restarts_total", labels(worker="1")] == 0
    assert zero.accepts == ["text/plain; version=0.0.4"]  # asks the parser's format
    await supervisor.stop(1)


async def test_metrics_in_openmetrics_when_the_scraper_prefers_it(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """The merged exposition follows the scraper's Accept header, and parses as OpenMetrics."""
    zero = await workers(worker_registry(0))
    one = await workers(worker_registry(1))
    supervisor = endpoints(Table([status(0, zero), status(1, one)]))

    answer = await supervisor.serve_metrics(
        scrape("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
    )

    assert answer.content_type == CONTENT_TYPE_OPENMETRICS
    families = {f.name: f for f in parse_openmetrics(answer.body.decode())}
    reconciles = families["controller_runtime_reconcile"]
    assert reconciles.type == "counter"
    assert {s.labels["worker"] for s in reconciles.samples} == {"0", "1"}
    assert families["controller_runtime_reconcile_time_seconds"].type == "histogram"
    await supervisor.stop(1)


async def test_a_worker_that_hangs_is_left_out_after_the_timeout_and_counted(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """The scrape waits the timeout (on the clock) for a hung worker, then serves the others."""
    clock = ManualClock()
    zero = await workers(worker_registry(0))
    hung = await workers(worker_registry(1), hang=True)
    supervisor = endpoints(
        Table([status(0, zero), status(1, hung)]), clock=clock, scrape_timeout=2.0
    )

    task = asyncio.create_task(supervisor.serve_metrics(scrape()))
    await asyncio.wait_for(hung.asked.wait(), 10)
    await asyncio.wait_for(zero.asked.wait(), 10)
    for _ in range(1000):  # until worker 0's answer is read: only the hung scrape's timer left
        if clock.pending_timers == 1:
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError(f"{clock.pending_timers} timers pending, not 1")
    clock.advance(1.9)
    await asyncio.sleep(0.05)
    assert not task.done()  # the timeout is honoured, not cut short
    clock.advance(0.1)
    answer = await asyncio.wait_for(task, 10)

    assert answer.status == 200
    got = samples(answer.body.decode())
    assert any(("worker", "0") in key for _, key in got)
    assert not any(("worker", "1") in key for name, key in got if not name.startswith("setpoint"))
    assert got["setpoint_worker_scrape_errors_total", labels(worker="1")] == 1
    assert ("setpoint_worker_scrape_errors_total", labels(worker="0")) not in got
    await supervisor.stop(1)


async def test_workers_without_a_process_or_address_are_not_asked(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """A restarting slot (no process) is skipped, not an error; a dead address is an error."""
    zero = await workers(worker_registry(0))
    gone = await workers(worker_registry(2))
    gone_status = status(2, gone)
    await gone.server.stop(1)  # its process died; the table still has the old address
    table = Table([status(0, zero), status(1, None, state="restarting", restarts=1), gone_status])
    supervisor = endpoints(table)

    got = samples((await supervisor.serve_metrics(scrape())).body.decode())

    assert got["workqueue_depth", labels(worker="0", name="tenant")] == 0
    assert ("setpoint_worker_scrape_errors_total", labels(worker="1")) not in got
    assert got["setpoint_worker_scrape_errors_total", labels(worker="2")] == 1
    assert got["setpoint_workers", labels(state="restarting")] == 1

    # The worker comes back at a new address: the next scrape asks it there.
    back = await workers(worker_registry(2))
    table.rows[2] = replace(gone_status, metrics_address=back.address, restarts=1)
    got = samples((await supervisor.serve_metrics(scrape())).body.decode())
    assert got["workqueue_depth", labels(worker="2", name="tenant")] == 2
    assert set(supervisor._pools) == {zero.address, back.address}  # the old one's closed
    await supervisor.stop(1)
    assert supervisor._pools == {}


async def test_workers_are_asked_concurrently(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """Both workers have the request before either answers; then both are served."""
    zero = await workers(worker_registry(0), hang=True)
    one = await workers(worker_registry(1), hang=True)
    supervisor = endpoints(Table([status(0, zero), status(1, one)]), clock=ManualClock())

    task = asyncio.create_task(supervisor.serve_metrics(scrape()))
    await asyncio.wait_for(asyncio.gather(zero.asked.wait(), one.asked.wait()), 10)
    assert not task.done()
    zero.release.set()
    one.release.set()
    got = samples((await asyncio.wait_for(task, 10)).body.decode())

    assert {key for name, key in got if name == "workqueue_depth"} == {
        labels(worker="0", name="tenant"),
        labels(worker="1", name="tenant"),
    }
    await supervisor.stop(1)


async def test_an_exposition_that_does_not_parse_is_left_out_and_counted(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """Garbage from one worker costs that worker's samples, not the scrape."""
    zero = await workers(worker_registry(0))
    bad = await workers(worker_registry(1))

    async def garbage(request: HttpRequest) -> HttpResponse:
        return HttpResponse.text(200, 'metric{label="unterminated 1\n')

    bad.server._handler = garbage
    supervisor = endpoints(Table([status(0, zero), status(1, bad)]))

    got = samples((await supervisor.serve_metrics(scrape())).body.decode())

    assert got["workqueue_depth", labels(worker="0", name="tenant")] == 0
    assert got["setpoint_worker_scrape_errors_total", labels(worker="1")] == 1
    await supervisor.stop(1)


async def test_metrics_paths_and_methods() -> None:
    supervisor = endpoints(Table())
    assert (await supervisor.serve_metrics(HttpRequest("GET", "/other"))).status == 404
    assert (await supervisor.serve_metrics(HttpRequest("POST", "/metrics"))).status == 405


async def test_real_servers_serve_metrics_and_probes(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """Started with real servers: both answer on their own ports, and stop."""
    zero = await workers(worker_registry(0))
    supervisor = endpoints(Table([status(0, zero)]), new_http_server=Http1Server)
    await supervisor.start()
    assert supervisor.metrics_address is not None
    assert supervisor.health_probe_address is not None
    assert supervisor.metrics_address != supervisor.health_probe_address
    try:
        async with aiohttp.ClientSession() as session:
            host, port = supervisor.metrics_address
            async with session.get(f"http://{host}:{port}/metrics") as response:
                assert response.status == 200
                got = samples(await response.text())
                assert got["workqueue_depth", labels(worker="0", name="tenant")] == 0
            host, port = supervisor.health_probe_address
            async with session.get(f"http://{host}:{port}/readyz") as response:
                assert (response.status, await response.text()) == (200, "ok")
    finally:
        await supervisor.stop(1)
    assert supervisor.failure() is None


# -- authentication ------------------------------------------------------------------------


class Reviews:
    """Answers TokenReviews and SubjectAccessReviews: token ``good`` may get /metrics."""

    def __init__(self) -> None:
        self.tokens = {"good": "prometheus", "nobody": "nobody"}
        self.allowed = {"prometheus"}

    async def create(
        self, obj: Any, *, dry_run: bool = False, field_manager: str | None = None
    ) -> Any:
        if obj["kind"] == "TokenReview":
            user = self.tokens.get(obj["spec"]["token"])
            found: dict[str, Any] = {"authenticated": user is not None}
            if user is not None:
                found["user"] = {"username": user}
            return {**obj, "status": found}
        assert obj["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return {**obj, "status": {"allowed": obj["spec"]["user"] in self.allowed}}


async def test_secure_metrics_need_an_authorized_token(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """metrics_secure: 401 without a good token, 403 without RBAC, the merge otherwise; HTTPS."""
    zero = await workers(worker_registry(0))
    supervisor = endpoints(Table([status(0, zero)]), metrics_secure=True, client=Reviews())
    server = supervisor._metrics_server
    assert isinstance(server, FakeHttpServer)
    assert server.options is not None and server.options.tls is not None

    def with_token(token: str | None) -> HttpRequest:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return HttpRequest("GET", "/metrics", headers=headers, remote="10.0.0.9")

    assert (await server.handler(with_token(None))).status == 401
    assert (await server.handler(with_token("bad"))).status == 401
    assert (await server.handler(with_token("nobody"))).status == 403
    assert zero.accepts == []  # refused scrapes never reach the workers
    allowed = await server.handler(with_token("good"))
    assert allowed.status == 200
    assert b'worker="0"' in allowed.body
    await supervisor.stop(1)


def test_secure_metrics_need_a_client() -> None:
    with pytest.raises(ValueError, match="metrics_secure needs a client"):
        endpoints(Table(), metrics_secure=True, client=None)


def test_a_disabled_server_is_not_built() -> None:
    supervisor = endpoints(Table(), metrics_bind_address="0", health_probe_bind_address="0")
    assert supervisor._servers == []


# -- /healthz /readyz ----------------------------------------------------------------------


def probe(path: str, **query: tuple[str, ...]) -> HttpRequest:
    return HttpRequest("GET", path, query, remote="10.0.0.9")


async def test_probes_pass_when_every_worker_is_ready() -> None:
    table = Table([status(0, pid=123), status(1, pid=124, restarts=1)])
    supervisor = endpoints(table)
    for path in ("/healthz", "/readyz"):
        answer = await supervisor.serve_probes(probe(path))
        assert (answer.status, answer.body) == (200, b"ok")
    verbose = await supervisor.serve_probes(probe("/readyz", verbose=("",)))
    assert verbose.status == 200
    assert verbose.body.decode() == (
        "[+]worker-0 ready pid=123\n[+]worker-1 ready pid=124 (restarts=1)\nreadyz check passed\n"
    )


async def test_a_restarting_worker_fails_readiness_but_not_liveness() -> None:
    table = Table([status(0, pid=123), status(1, state="restarting", restarts=2)])
    supervisor = endpoints(table)

    ready = await supervisor.serve_probes(probe("/readyz"))
    assert ready.status == 500
    assert ready.body.decode() == (
        "[+]worker-0 ready pid=123\n[-]worker-1 restarting (restarts=2)\nreadyz check failed\n"
    )
    alive = await supervisor.serve_probes(probe("/healthz", verbose=("",)))
    assert alive.status == 200
    assert alive.body.decode() == (
        "[+]worker-0 ready pid=123\n[+]worker-1 restarting (restarts=2)\nhealthz check passed\n"
    )
    assert (await supervisor.serve_probes(probe("/healthz"))).body == b"ok"


async def test_a_failed_worker_fails_liveness() -> None:
    table = Table([status(0, pid=123), status(1, state="failed", restarts=7)])
    supervisor = endpoints(table)
    alive = await supervisor.serve_probes(probe("/healthz"))
    assert alive.status == 500
    assert alive.body.decode() == (
        "[+]worker-0 ready pid=123\n[-]worker-1 failed (restarts=7)\nhealthz check failed\n"
    )


async def test_a_starting_worker_and_an_empty_table_are_not_ready() -> None:
    supervisor = endpoints(Table([status(0, pid=9, state="starting")]))
    assert (await supervisor.serve_probes(probe("/readyz"))).status == 500
    assert (await supervisor.serve_probes(probe("/healthz"))).status == 200
    empty = endpoints(Table())
    assert (await empty.serve_probes(probe("/readyz"))).status == 500
    assert (await empty.serve_probes(probe("/healthz"))).status == 200


async def test_one_worker_exclude_and_unknown_paths() -> None:
    table = Table([status(0, pid=123), status(1, state="restarting", restarts=2)])
    supervisor = endpoints(table)
    assert (await supervisor.serve_probes(probe("/readyz/worker-0"))).body == b"ok"
    one = await supervisor.serve_probes(probe("/readyz/worker-1"))
    assert (one.status, one.body) == (
        500,
        b"internal server error: worker-1 restarting (restarts=2)\n",
    )
    assert (await supervisor.serve_probes(probe("/readyz/worker-9"))).status == 404
    excluded = await supervisor.serve_probes(
        probe("/readyz", exclude=("worker-1", "worker-5"), verbose=("",))
    )
    assert excluded.status == 200
    assert excluded.body.decode() == (
        "[+]worker-0 ready pid=123\n[+]worker-1 excluded: ok\n"
        'warn: some health checks cannot be excluded: no matches for "worker-5"\n'
        "readyz check passed\n"
    )
    assert (await supervisor.serve_probes(probe("/livez"))).status == 404
    post = HttpRequest("POST", "/readyz")
    assert (await supervisor.serve_probes(post)).status == 405


async def test_a_gauge_and_a_counter_sharing_a_stem_are_both_kept(
    workers: Callable[..., Awaitable[FakeWorker]],
) -> None:
    """``x`` (gauge) beside ``x_total`` (counter), as setpoint's overdue-threads metrics are.

    The text parser names the counter's family ``x`` too; neither may displace the other.
    """
    one = await workers(worker_registry(0))
    canned = (
        "# HELP jobs_overdue Jobs overdue now.\n# TYPE jobs_overdue gauge\njobs_overdue 2.0\n"
        "# HELP jobs_overdue_total Jobs that went overdue.\n# TYPE jobs_overdue_total counter\n"
        "jobs_overdue_total 5.0\n"
    )

    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse.text(200, canned)

    one.server._handler = handler
    supervisor = endpoints(Table([status(0, one)]))
    for accept in (None, "application/openmetrics-text;version=1.0.0"):
        text = (await supervisor.serve_metrics(scrape(accept))).body.decode()
        assert 'jobs_overdue{worker="0"} 2.0' in text
        assert 'jobs_overdue_total{worker="0"} 5.0' in text
    got = samples((await supervisor.serve_metrics(scrape())).body.decode())
    assert got["jobs_overdue", labels(worker="0")] == 2
    assert got["jobs_overdue_total", labels(worker="0")] == 5


async def test_a_family_whose_type_differs_keeps_the_first_and_warns_once(
    workers: Callable[..., Awaitable[FakeWorker]], caplog: pytest.LogCaptureFixture
) -> None:
    """Worker 0 says gauge, worker 1 summary: worker 0's stays, worker 1's is left out."""
    zero = await workers(worker_registry(0))
    one = await workers(worker_registry(1))
    texts = {
        0: "# TYPE pool_size gauge\npool_size 4.0\n",
        1: '# TYPE pool_size summary\npool_size{quantile="0.5"} 9.0\npool_size_count 1.0\n',
    }
    for index, worker in ((0, zero), (1, one)):

        async def handler(request: HttpRequest, text: str = texts[index]) -> HttpResponse:
            return HttpResponse.text(200, text)

        worker.server._handler = handler
    supervisor = endpoints(Table([status(0, zero), status(1, one)]))
    caplog.set_level("WARNING", logger="setpoint.manager")

    for _ in range(2):
        got = samples((await supervisor.serve_metrics(scrape())).body.decode())
        assert got["pool_size", labels(worker="0")] == 4
        assert not any(name.startswith("pool_size") and ("worker", "1") in k for name, k in got)
    warnings = [r.getMessage() for r in caplog.records if "pool_size" in r.getMessage()]
    assert len(warnings) == 1
    assert "summary in worker 1 but a gauge" in warnings[0]
