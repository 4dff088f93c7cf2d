"""Probe and metrics endpoints: checks, HTTP answers, content negotiation, real servers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from setpoint.manager import DuplicateCheckError, HealthChecks, Manager, ManagerOptions
from setpoint.observability.metrics import CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_TEXT, Metrics
from setpoint.server import BindAddress, Http1Server, HttpRequest, HttpResponse
from setpoint.testing import FakeClient
from tests._support.manager_fakes import FakeCache, FakeHttpServer


def get(path: str, **query: tuple[str, ...]) -> HttpRequest:
    return HttpRequest("GET", path, query)


def new_manager(**overrides: Any) -> Manager:
    values: dict[str, Any] = {
        "metrics": Metrics(CollectorRegistry()),
        "new_http_server": FakeHttpServer,
        "handle_signals": False,
    }
    values.update(overrides)
    return Manager(FakeClient(), ManagerOptions(**values))


# -- HealthChecks ---------------------------------------------------------------------------


async def test_registering_a_check_name_twice_is_an_error() -> None:
    checks = HealthChecks("readyz", timeout=1)
    checks.add("db", lambda: True)
    with pytest.raises(DuplicateCheckError, match="readyz check named 'db' is already registered"):
        checks.add("db", lambda: True)


async def test_manager_built_in_check_names_are_taken() -> None:
    manager = new_manager()
    with pytest.raises(DuplicateCheckError):
        manager.add_readyz_check("informer-sync", lambda: True)
    with pytest.raises(DuplicateCheckError):
        manager.add_healthz_check("ping", lambda: True)
    manager.add_healthz_check("informer-sync", lambda: True)  # separate namespaces


@pytest.mark.parametrize("name", ["", "a/b", "-x", "sp ace"])
async def test_check_names_must_be_path_segments(name: str) -> None:
    with pytest.raises(ValueError, match="must be letters, digits"):
        HealthChecks("healthz", timeout=1).add(name, lambda: None)


async def test_checks_must_be_callable() -> None:
    with pytest.raises(TypeError, match="must be callable"):
        not_callable: Any = "not callable"  # deliberately the wrong type
        HealthChecks("healthz", timeout=1).add("x", not_callable)


async def test_sync_and_async_checks_pass_and_fail() -> None:
    checks = HealthChecks("readyz", timeout=1)
    main_thread = threading.get_ident()
    threads: list[int] = []

    def sync_ok() -> None:
        threads.append(threading.get_ident())

    async def async_ok() -> bool:
        return True

    async def async_raises() -> None:
        raise RuntimeError("db down")

    class CallableObject:
        async def __call__(self) -> bool:
            return False

    checks.add("sync-ok", sync_ok)
    checks.add("async-ok", async_ok)
    checks.add("sync-false", lambda: False)
    checks.add("async-raises", async_raises)
    checks.add("object", CallableObject())
    assert await checks.run("sync-ok") is None
    assert threads and threads[0] != main_thread  # sync checks run off the event loop
    assert await checks.run("async-ok") is None
    assert await checks.run("sync-false") == "check returned False"
    assert await checks.run("async-raises") == "db down"
    assert await checks.run("object") == "check returned False"


async def test_a_slow_check_times_out() -> None:
    checks = HealthChecks("readyz", timeout=0.05)

    async def slow() -> None:
        await asyncio.Event().wait()

    checks.add("slow", slow)
    assert await checks.run("slow") == "no answer within 0.05s"


async def test_aggregate_answers_like_kubernetes() -> None:
    checks = HealthChecks("readyz", timeout=1)
    checks.add("ping", lambda: None)
    checks.add("db", lambda: False)

    failed = await checks.handle(get("/readyz"), "")
    assert failed.status == 500
    assert failed.body.decode() == (
        "[-]db failed: reason withheld\n[+]ping ok\nreadyz check failed\n"
    )

    excluded = await checks.handle(get("/readyz", exclude=("db", "nope")), "")
    assert excluded.status == 200 and excluded.body == b"ok"

    verbose = await checks.handle(get("/readyz", exclude=("db", "nope"), verbose=("",)), "")
    assert verbose.status == 200
    assert verbose.body.decode() == (
        "[+]db excluded: ok\n[+]ping ok\n"
        'warn: some health checks cannot be excluded: no matches for "nope"\n'
        "readyz check passed\n"
    )


def local(path: str, **query: tuple[str, ...]) -> HttpRequest:
    return HttpRequest("GET", path, query, remote="127.0.0.1")


async def test_per_check_paths_show_the_reason_only_over_loopback() -> None:
    """/readyz/<name> shows why a check fails to loopback callers, never to the network."""
    checks = HealthChecks("readyz", timeout=1)
    checks.add("ping", lambda: None)

    def db() -> None:
        raise ConnectionError("db unreachable")

    checks.add("db", db)
    assert await checks.handle(get("/readyz/ping"), "/ping") == HttpResponse(200, b"ok")
    failing = await checks.handle(local("/readyz/db"), "/db")
    assert failing.status == 500
    assert failing.body == b"internal server error: db unreachable\n"
    remote = HttpRequest("GET", "/readyz/db", remote="10.244.0.7")
    withheld = await checks.handle(remote, "/db")
    assert (withheld.status, withheld.body) == (500, b"internal server error: reason withheld\n")
    assert (await checks.handle(get("/readyz/db"), "/db")).body.endswith(b"reason withheld\n")
    verbose = await checks.handle(local("/readyz", verbose=("",)), "")
    assert b"[-]db failed: db unreachable" in verbose.body
    assert (await checks.handle(get("/readyz/nope"), "/nope")).status == 404
    assert (await checks.handle(HttpRequest("POST", "/readyz"), "")).status == 405


# -- the manager's probe endpoints -----------------------------------------------------------


async def test_manager_probes_include_cache_sync_and_shutdown() -> None:
    manager = new_manager()
    cache = FakeCache("cache", [])
    manager.add(cache)
    healthz = await manager.serve_probes(get("/healthz"))
    assert (healthz.status, healthz.body) == (200, b"ok")
    readyz = await manager.serve_probes(get("/readyz", verbose=("",)))
    assert readyz.status == 500
    assert b"[-]informer-sync failed: reason withheld" in readyz.body
    assert b"[+]shutdown ok" in readyz.body and b"[+]ping ok" in readyz.body
    detail = await manager.serve_probes(local("/readyz/informer-sync"))
    assert detail.body == b"internal server error: caches not synced yet: cache\n"
    cache.synced_event.set()
    assert (await manager.serve_probes(get("/readyz"))).status == 200
    assert (await manager.serve_probes(get("/livez"))).status == 404
    manager.add_readyz_check("custom", lambda: False)
    assert (await manager.serve_probes(get("/readyz/custom"))).status == 500


async def test_readiness_fails_once_shutdown_begins() -> None:
    manager = new_manager()
    manager.stop()
    await manager.run()
    response = await manager.serve_probes(local("/readyz/shutdown"))
    assert response.body == b"internal server error: the manager is shutting down\n"


async def test_leader_election_adds_a_readiness_check() -> None:
    from setpoint.manager import LeaderElectionOptions

    manager = new_manager(leader_election=LeaderElectionOptions(name="x"))
    assert "leader-election" in manager.readyz.names
    assert await manager.readyz.run("leader-election") == "leader election has not started yet"
    assert "leader-election" not in new_manager().readyz.names


# -- /metrics ------------------------------------------------------------------------------


def metrics_request(accept: str | None) -> HttpRequest:
    headers = {"Accept": accept} if accept is not None else {}
    return HttpRequest("GET", "/metrics", {}, headers)


async def test_metrics_content_negotiation() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.rest_client_requests_total.labels("200", "GET", "h").inc()
    manager = new_manager(metrics=metrics)

    classic = await manager.serve_metrics(metrics_request(None))
    assert classic.status == 200 and classic.content_type == CONTENT_TYPE_TEXT
    assert b'rest_client_requests_total{code="200",host="h",method="GET"} 1.0' in classic.body
    assert b"# EOF" not in classic.body

    prometheus_accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    openmetrics = await manager.serve_metrics(metrics_request(prometheus_accept))
    assert openmetrics.content_type == CONTENT_TYPE_OPENMETRICS
    assert openmetrics.body.endswith(b"# EOF\n")
    assert b"rest_client_requests_total{" in openmetrics.body

    assert (await manager.serve_metrics(HttpRequest("GET", "/other"))).status == 404
    assert (await manager.serve_metrics(HttpRequest("POST", "/metrics"))).status == 405


# -- real servers -------------------------------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_real_servers_bind_port_zero_and_answer(http: aiohttp.ClientSession) -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.leader_election_master_status.labels("x").set(1)
    manager = Manager(
        FakeClient(),
        ManagerOptions(
            metrics=metrics,
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="127.0.0.1:0",
            handle_signals=False,
        ),
    )
    assert manager.metrics_address is None  # not bound before run()
    task = asyncio.create_task(manager.run())
    try:
        await manager.wait_elected(timeout=10)
        probes, scrape = manager.health_probe_address, manager.metrics_address
        assert probes is not None and scrape is not None
        assert probes[0] == "127.0.0.1" and probes[1] > 0 and scrape[1] > 0
        assert probes[1] != scrape[1]

        async with http.get(f"http://127.0.0.1:{probes[1]}/healthz") as resp:
            assert (resp.status, await resp.text()) == (200, "ok")
        async with http.get(f"http://127.0.0.1:{probes[1]}/readyz?verbose") as resp:
            body = await resp.text()
            assert resp.status == 200, body
            assert "[+]informer-sync ok" in body
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
        async with http.get(
            f"http://127.0.0.1:{scrape[1]}/metrics",
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
        ) as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE_OPENMETRICS
            assert 'leader_election_master_status{name="x"} 1.0' in await resp.text()
        async with http.get(f"http://127.0.0.1:{scrape[1]}/metrics") as resp:
            assert resp.headers["Content-Type"] == CONTENT_TYPE_TEXT
    finally:
        manager.stop()
        await asyncio.wait_for(task, 10)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.get(f"http://127.0.0.1:{probes[1]}/healthz") as resp:
            pass


async def test_a_busy_port_fails_start_with_the_address() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        return HttpResponse.text(200, "ok")

    first = Http1Server("probe-server", BindAddress("127.0.0.1", 0), handler)
    await first.start()
    try:
        assert first.address is not None
        port = first.address[1]
        second = Http1Server("metrics-server", BindAddress("127.0.0.1", port), handler)
        with pytest.raises(OSError, match=rf"metrics-server cannot listen on 127.0.0.1:{port}"):
            await second.start()
        await second.stop(1.0)  # safe on a server that never started
    finally:
        await first.stop(1.0)


async def test_a_handler_error_becomes_a_500(http: aiohttp.ClientSession) -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        raise RuntimeError("bug")

    server = Http1Server("probe-server", BindAddress("127.0.0.1", 0), handler)
    await server.start()
    try:
        assert server.address is not None
        async with http.get(f"http://127.0.0.1:{server.address[1]}/x") as resp:
            assert resp.status == 500
        assert server.failure() is None
    finally:
        await server.stop(1.0)


async def test_disabled_servers_are_not_built() -> None:
    manager = new_manager(
        metrics_bind_address="0", health_probe_bind_address="0", event_loop_lag_interval=None
    )
    assert manager.runnables == []
    assert manager.metrics_address is None and manager.health_probe_address is None


async def test_a_secret_in_a_failing_check_never_reaches_a_remote_probe() -> None:
    """Issue 18 item 1: a check's exception text (say, a token) stays off the probe port."""
    manager = new_manager()

    def leaky() -> None:
        raise RuntimeError("plugin printed: {'token': 'SECRET-TOKEN'}")

    manager.add_readyz_check("leaky", leaky)
    for path in ("/readyz/leaky", "/readyz?verbose"):
        query = {"verbose": ("",)} if "verbose" in path else {}
        response = await manager.serve_probes(
            HttpRequest("GET", path.split("?")[0], query, remote="10.244.0.7")
        )
        assert response.status == 500
        assert b"SECRET-TOKEN" not in response.body, path


async def test_show_reasons_option_serves_them_to_everyone() -> None:
    """ManagerOptions.health_probe_show_reasons=True: reasons on every path, to every caller."""
    manager = new_manager(health_probe_show_reasons=True)
    manager.add_readyz_check("custom", lambda: False)
    response = await manager.serve_probes(HttpRequest("GET", "/readyz/custom", remote="10.244.0.7"))
    assert response.body == b"internal server error: check returned False\n"


# -- the debug endpoint ---------------------------------------------------------------------


async def test_the_task_dump_endpoint_is_opt_in_and_answers_loopback_callers_only() -> None:
    off = new_manager()
    response = await off.serve_probes(HttpRequest("GET", "/debug/tasks", remote="127.0.0.1"))
    assert response.status == 404
    on = new_manager(debug_endpoints=True)
    remote = await on.serve_probes(HttpRequest("GET", "/debug/tasks", remote="10.244.0.7"))
    assert remote.status == 403 and b"loopback callers only" in remote.body
    local = await on.serve_probes(HttpRequest("GET", "/debug/tasks", remote="127.0.0.1"))
    assert local.status == 200
    assert local.body.startswith(b"setpoint task dump: pid ")
    # The test's own task is in the dump, with the await chain down to this function.
    assert b"test_the_task_dump_endpoint_is_opt_in_and_answers_loopback_callers_only" in local.body


async def test_the_manager_measures_its_event_loop_lag_unless_told_not_to() -> None:
    manager = new_manager()
    assert manager.loop_lag is not None and manager.loop_lag in manager.runnables
    assert new_manager(event_loop_lag_interval=None).loop_lag is None
    with pytest.raises(ValueError, match=r"event_loop_lag_interval=0 must be a positive number"):
        ManagerOptions(event_loop_lag_interval=0)
