"""The supervisor's public ``/metrics``, ``/healthz`` and ``/readyz``, for every worker at once.

With ``ManagerOptions.processes`` above 1 (decision 0038), one supervisor process runs N
worker processes. Each worker serves its own metrics and probes on loopback only
(``127.0.0.1:0``, plain HTTP, no authentication: the kube-rbac-proxy pattern, loopback is the
Pod's own). The supervisor serves the endpoints the Pod's users see, on the addresses the
manager's own servers would use, built by :class:`SupervisorEndpoints`:

- ``/metrics``: each live worker's exposition, fetched over loopback concurrently, merged into
  one: every family once (``HELP`` and ``TYPE`` once), label ``worker="<index>"`` added to
  every sample; plus the supervisor's own families (``setpoint_workers{state}``,
  ``setpoint_worker_restarts_total{worker}``, ``setpoint_worker_scrape_errors_total{worker}``).
  A worker that does not answer within the scrape timeout is left out of that scrape and
  counted. With ``metrics_secure`` the endpoint is HTTPS behind the manager's own
  authentication and authorization (:class:`~setpoint.manager.metricsauth.ApiServerAuth`).
- ``/healthz``: 200 unless a worker crash-loops (``failed``).
- ``/readyz``: 200 only when every worker is ``ready``.
- ``?verbose`` on either lists each worker (``[+]worker-0 ready pid=123``,
  ``[-]worker-1 restarting (restarts=2)``).

The supervisor owns the worker table; this module only reads it (:class:`WorkerTable`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol, cast

from setpoint.api.clock import Clock, LoopClock, clock_timeout
from setpoint.api.runnable import RunnableGroup
from setpoint.client._http import HttpPool
from setpoint.observability.metrics import render
from setpoint.server.address import parse_bind_address
from setpoint.server.http import (
    SMALL_BODY_SIZE,
    Http1Server,
    HttpRequest,
    HttpResponse,
    HttpServer,
    HttpServerFactory,
    HttpServerOptions,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client.metrics_core import Metric

    from setpoint.client.protocols import ApiClient
    from setpoint.manager.metricsauth import ReviewClient
    from setpoint.server.tls import ServerTLS

__all__ = [
    "SCRAPE_TIMEOUT",
    "WORKER_LABEL",
    "WORKER_STATES",
    "SupervisorEndpoints",
    "WorkerState",
    "WorkerStatus",
    "WorkerTable",
]

WorkerState = Literal["starting", "ready", "restarting", "failed", "stopped"]
"""Where a worker slot is: ``starting`` (spawned, not yet ready), ``ready`` (its own readyz
passes), ``restarting`` (dead, waiting out its backoff), ``failed`` (crash-looping: the
supervisor gave up or is backing off at the cap), ``stopped`` (shut down on purpose)."""

SCRAPE_TIMEOUT = 2.0
"""Seconds the supervisor waits for one worker's exposition before leaving it out."""

WORKER_STATES: Final[tuple[WorkerState, ...]] = (
    "starting",
    "ready",
    "restarting",
    "failed",
    "stopped",
)
"""Every :data:`WorkerState`, in the order ``setpoint_workers`` lists them."""

WORKER_LABEL: Final = "worker"
"""The label the merged exposition adds to every worker sample (``worker="0"``). A worker's
own label of that name is kept as ``exported_worker``, as Prometheus does with
``honor_labels: false``."""

MAX_EXPOSITION: Final = 64 * 1024 * 1024
"""The largest exposition read from one worker, in bytes; a larger one counts as an error."""

log = logging.getLogger("setpoint.manager")


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker slot, as the supervisor sees it at one moment."""

    index: int
    """The worker's index, ``0 .. N-1``; stable across its restarts."""
    pid: int | None
    """Its process id, ``None`` while no process runs in the slot."""
    state: WorkerState
    """See :data:`WorkerState`."""
    restarts: int
    """How many times the slot's process has been restarted since the supervisor started."""
    metrics_address: tuple[str, int] | None
    """The worker's loopback metrics endpoint (plain HTTP), once it reported it."""
    probe_address: tuple[str, int] | None
    """The worker's loopback ``/healthz`` ``/readyz`` endpoint, once it reported it."""


class WorkerTable(Protocol):
    """What the endpoints read of the supervisor: the current status of every worker slot."""

    def workers(self) -> Sequence[WorkerStatus]:
        """Every slot, by index; called on the event loop at each request."""
        ...


class SupervisorEndpoints:
    """The supervisor's metrics and probe servers: a Runnable in the ``SERVERS`` group.

    Expected flow:
        The supervisor builds it with its worker table and the manager's options, then
        ``await start()`` (both servers bound) and, at shutdown, ``await stop(timeout)``.

    Guarantees:
        - A scrape waits at most ``scrape_timeout`` for the workers, whatever they do; a
          worker that does not answer in time (or answers with an error or an exposition
          that does not parse) is left out of that scrape and counted in
          ``setpoint_worker_scrape_errors_total``; the others are served.
        - Each family appears once in the merged exposition (``HELP`` and ``TYPE`` once),
          every worker sample labelled ``worker="<index>"``. When two sources disagree on a
          family's type, the first (the supervisor, then workers by index) keeps it and the
          others' samples of it are left out (and logged).
        - With ``metrics_secure``, no scrape is answered without a token the API server
          authenticated and authorized (the manager's own
          :class:`~setpoint.manager.metricsauth.ApiServerAuth`), over HTTPS.
        - Probes read only the table: they never wait on a worker.

    Args:
        table: The supervisor's worker table.
        metrics_bind_address: As ``ManagerOptions.metrics_bind_address`` (``"0"`` disables).
        health_probe_bind_address: As ``ManagerOptions.health_probe_bind_address``.
        metrics_secure: Serve ``/metrics`` over HTTPS with authentication and authorization.
        metrics_tls: The serving certificate for ``metrics_secure`` (``None``: self-signed,
            as the manager does).
        client: Creates the TokenReviews and SubjectAccessReviews (required when secure).
        registry: The supervisor's own metrics, served beside the workers' (the scrape
            error counter is registered on it); ``None``: a registry of its own.
        clock: Times the scrape timeout (``LoopClock`` by default).
        scrape_timeout: Seconds to wait for the workers' expositions.
        new_http_server: Builds the two servers (``ManagerOptions.new_http_server``).

    Raises:
        ValueError: a bind address does not parse, or ``metrics_secure`` without a client.

    """

    def __init__(
        self,
        table: WorkerTable,
        *,
        metrics_bind_address: str,
        health_probe_bind_address: str,
        metrics_secure: bool,
        metrics_tls: ServerTLS | None,
        client: ApiClient | None,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        scrape_timeout: float = SCRAPE_TIMEOUT,
        new_http_server: HttpServerFactory = Http1Server,
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter

        self._table = table
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._scrape_timeout = scrape_timeout
        self.registry: CollectorRegistry = (
            registry if registry is not None else CollectorRegistry(auto_describe=True)
        )
        """The supervisor's own metrics, served beside the workers'."""
        self.scrape_errors: Counter = Counter(
            "setpoint_worker_scrape_errors",
            "Scrapes of a worker's metrics that failed (no answer in time, an error status, "
            "an exposition that does not parse); that worker is left out of that scrape.",
            [WORKER_LABEL],
            registry=self.registry,
        )
        """``setpoint_worker_scrape_errors_total{worker}``."""
        self._pools: dict[tuple[str, int], HttpPool] = {}
        self._warned: set[str] = set()
        self._servers: list[HttpServer] = []
        self._metrics_server: HttpServer | None = None
        self._probe_server: HttpServer | None = None
        small = HttpServerOptions(max_body_size=SMALL_BODY_SIZE)
        metrics_at = parse_bind_address(
            metrics_bind_address, option="ManagerOptions.metrics_bind_address"
        )
        if metrics_at is not None:
            if metrics_secure:
                if client is None:
                    raise ValueError(
                        "SupervisorEndpoints: metrics_secure needs a client to ask the API "
                        "server for TokenReviews and SubjectAccessReviews"
                    )
                from setpoint.manager.manager import _self_signed_metrics_tls
                from setpoint.manager.metricsauth import ApiServerAuth

                auth = ApiServerAuth(cast("ReviewClient", client))
                self._metrics_server = new_http_server(
                    "metrics-server",
                    metrics_at,
                    auth.wrap(self.serve_metrics),
                    options=HttpServerOptions(
                        tls=metrics_tls or _self_signed_metrics_tls(),
                        max_body_size=SMALL_BODY_SIZE,
                    ),
                )
            else:
                self._metrics_server = new_http_server(
                    "metrics-server", metrics_at, self.serve_metrics, options=small
                )
            self._servers.append(self._metrics_server)
        probes_at = parse_bind_address(
            health_probe_bind_address, option="ManagerOptions.health_probe_bind_address"
        )
        if probes_at is not None:
            self._probe_server = new_http_server(
                "probe-server", probes_at, self.serve_probes, options=small
            )
            self._servers.append(self._probe_server)

    @property
    def name(self) -> str:
        """``"supervisor-endpoints"``."""
        return "supervisor-endpoints"

    @property
    def group(self) -> RunnableGroup:
        """``SERVERS``: up first, stopped last."""
        return RunnableGroup.SERVERS

    @property
    def needs_leader_election(self) -> bool:
        """``False``: probes and metrics answer in every Pod."""
        return False

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where ``/metrics`` is served, once started (``None`` when disabled)."""
        return self._metrics_server.address if self._metrics_server is not None else None

    @property
    def health_probe_address(self) -> tuple[str, int] | None:
        """Where ``/healthz`` and ``/readyz`` are served, once started."""
        return self._probe_server.address if self._probe_server is not None else None

    async def start(self) -> None:
        """Bind both servers (a server that cannot bind raises, and the other is stopped)."""
        started: list[HttpServer] = []
        try:
            for server in self._servers:
                await server.start()
                started.append(server)
        except BaseException:
            for server in reversed(started):
                await server.stop(0)
            raise

    async def stop(self, timeout: float) -> None:
        """Stop both servers and close the connections to the workers."""
        await asyncio.gather(*(server.stop(timeout) for server in self._servers))
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(pool.close() for pool in pools), return_exceptions=True)

    def failure(self) -> BaseException | None:
        """The first server failure, if any."""
        for server in self._servers:
            error = server.failure()
            if error is not None:
                return error
        return None

    # -- /metrics ----------------------------------------------------------------------------

    async def serve_metrics(self, request: HttpRequest) -> HttpResponse:
        """``GET /metrics``: the workers' expositions merged, and the supervisor's own.

        The format follows the scraper's ``Accept`` header, as the manager's does.
        """
        if request.path.rstrip("/") != "/metrics":
            return HttpResponse.text(404, "404 page not found\n")
        if request.method not in ("GET", "HEAD"):
            return HttpResponse.text(405, "method not allowed\n")
        workers = list(self._table.workers())
        texts = await self.scrape_workers(workers)
        # Parsing and serialising hundreds of samples is CPU work; keep it off the loop.
        body, content_type = await asyncio.to_thread(
            self._merge_and_render, workers, texts, request.headers.get("Accept")
        )
        return HttpResponse(200, body, content_type)

    async def scrape_workers(self, workers: Sequence[WorkerStatus]) -> dict[int, str]:
        """Fetch every live worker's exposition concurrently: worker index -> text.

        A worker is live when it has a process and reported its metrics address. One that
        does not answer within the scrape timeout, or answers other than 200, is missing
        from the result and counted in ``setpoint_worker_scrape_errors_total``.
        """
        live = [w for w in workers if w.pid is not None and w.metrics_address is not None]
        self._close_stale_pools({cast("tuple[str, int]", w.metrics_address) for w in live})
        answers = await asyncio.gather(*(self._fetch(w) for w in live))
        return {
            worker.index: text
            for worker, text in zip(live, answers, strict=True)
            if text is not None
        }

    async def _fetch(self, worker: WorkerStatus) -> str | None:
        address = cast("tuple[str, int]", worker.metrics_address)
        pool = self._pools.get(address)
        if pool is None:
            host, port = address
            netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            pool = HttpPool(
                f"http://{netloc}",
                ssl_context=None,
                limit=4,
                connect_timeout=self._scrape_timeout,
                clock=self._clock,
            )
            self._pools[address] = pool
        try:
            answer = await clock_timeout(
                self._clock,
                pool.request(
                    "GET",
                    "/metrics",
                    [("Accept", "text/plain; version=0.0.4")],
                    max_body=MAX_EXPOSITION,
                ),
                self._scrape_timeout,
            )
            if answer.status != 200:
                raise _ScrapeError(f"status {answer.status}")
            return answer.body.decode("utf-8")
        except (OSError, TimeoutError, UnicodeDecodeError, _ScrapeError) as exc:
            self._count_error(worker.index, exc)
            return None

    def _count_error(self, index: int, exc: BaseException) -> None:
        why = str(exc) or type(exc).__name__
        log.info("worker %d's metrics left out of this scrape: %s", index, why)
        self.scrape_errors.labels(str(index)).inc()

    def _close_stale_pools(self, addresses: set[tuple[str, int]]) -> None:
        """Close the connections to workers no longer at an address (restarted, stopped)."""
        for address in [a for a in self._pools if a not in addresses]:
            pool = self._pools.pop(address)
            task = asyncio.ensure_future(pool.close())
            _background.add(task)
            task.add_done_callback(_background.discard)

    def _merge_and_render(
        self, workers: Sequence[WorkerStatus], texts: dict[int, str], accept: str | None
    ) -> tuple[bytes, str]:
        """Runs in a worker thread: one exposition of the supervisor's and workers' families."""
        parsed: dict[int, list[Metric]] = {}
        for index in sorted(texts):
            try:
                parsed[index] = _parse(texts[index])
            except ValueError as exc:
                self._count_error(index, exc)
        # The supervisor's own families after the parses, so this scrape's errors count.
        merged = _Merged(self._warned)
        for family in self.registry.collect():
            merged.add(family, None)
        for family in worker_families(workers):
            merged.add(family, None)
        for index, families in parsed.items():
            for family in families:
                merged.add(family, str(index))
        return render(cast("CollectorRegistry", merged), accept)

    # -- /healthz /readyz --------------------------------------------------------------------

    async def serve_probes(self, request: HttpRequest) -> HttpResponse:
        """``/healthz`` and ``/readyz``, each for every worker or ``/<endpoint>/worker-<i>``.

        ``/healthz`` fails only for a ``failed`` worker; ``/readyz`` for any worker that is
        not ``ready`` (and while the table is empty). ``?verbose`` lists every worker on
        success too; ``?exclude=worker-<i>`` leaves one out, as the manager's probes do.
        """
        for endpoint in ("healthz", "readyz"):
            prefix = f"/{endpoint}"
            if request.path == prefix or request.path.startswith(prefix + "/"):
                if request.method not in ("GET", "HEAD"):
                    return HttpResponse.text(405, "method not allowed\n")
                return self._probe(endpoint, request, request.path[len(prefix) :].strip("/"))
        return HttpResponse.text(404, "404 page not found\n")

    def _probe(self, endpoint: str, request: HttpRequest, name: str) -> HttpResponse:
        workers = sorted(self._table.workers(), key=lambda w: w.index)
        passes = _healthy if endpoint == "healthz" else _ready
        if name:
            for worker in workers:
                if worker_name(worker) == name:
                    if passes(worker):
                        return HttpResponse.text(200, "ok")
                    return HttpResponse.text(500, f"internal server error: {describe(worker)}\n")
            return HttpResponse.text(404, "404 page not found\n")
        excluded = set(request.query.get("exclude", ()))
        lines: list[str] = []
        failed = False
        for worker in workers:
            if worker_name(worker) in excluded:
                lines.append(f"[+]{worker_name(worker)} excluded: ok")
            elif passes(worker):
                lines.append(f"[+]{describe(worker)}")
            else:
                failed = True
                lines.append(f"[-]{describe(worker)}")
        if not workers and endpoint == "readyz":
            failed = True
            lines.append("[-]workers none started yet")
        unknown = sorted(excluded - {worker_name(w) for w in workers})
        if unknown:
            quoted = ",".join(f'"{n}"' for n in unknown)
            lines.append(f"warn: some health checks cannot be excluded: no matches for {quoted}")
        if not failed and "verbose" not in request.query:
            return HttpResponse.text(200, "ok")
        lines.append(f"{endpoint} check {'failed' if failed else 'passed'}")
        return HttpResponse.text(500 if failed else 200, "\n".join(lines) + "\n")


def worker_name(worker: WorkerStatus) -> str:
    """The name a worker has in the probes: ``worker-<index>``."""
    return f"worker-{worker.index}"


def describe(worker: WorkerStatus) -> str:
    """One probe line's text: ``worker-0 ready pid=123``, ``worker-1 restarting (restarts=2)``."""
    text = f"{worker_name(worker)} {worker.state}"
    if worker.pid is not None:
        text += f" pid={worker.pid}"
    if worker.restarts:
        text += f" (restarts={worker.restarts})"
    return text


def _healthy(worker: WorkerStatus) -> bool:
    return worker.state != "failed"


def _ready(worker: WorkerStatus) -> bool:
    return worker.state == "ready"


def worker_families(workers: Sequence[WorkerStatus]) -> list[Metric]:
    """The supervisor's families about its workers, from one look at the table.

    ``setpoint_workers{state}`` (a gauge: how many slots are in each state, every state
    listed) and ``setpoint_worker_restarts_total{worker}`` (a counter per slot).
    """
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    states = GaugeMetricFamily(
        "setpoint_workers",
        "Worker processes of this supervisor, by state (starting, ready, restarting, failed, "
        "stopped).",
        labels=["state"],
    )
    for state in WORKER_STATES:
        states.add_metric([state], sum(1 for w in workers if w.state == state))
    restarts = CounterMetricFamily(
        "setpoint_worker_restarts",
        "Times each worker slot's process was restarted after it died.",
        labels=[WORKER_LABEL],
    )
    for worker in sorted(workers, key=lambda w: w.index):
        restarts.add_metric([str(worker.index)], worker.restarts)
    return [states, restarts]


class _ScrapeError(Exception):
    """A worker answered, but not with an exposition."""


_background: set[asyncio.Future[None]] = set()
"""Pool closes in flight (held so they are not garbage-collected half-way)."""


def _parse(text: str) -> list[Metric]:
    """Every family of a classic text exposition (raises ``ValueError`` when malformed)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return list(text_string_to_metric_families(text))
    except ValueError:
        raise
    except Exception as exc:  # the parser raises IndexError, KeyError... on some garbage
        raise ValueError(f"the exposition does not parse: {type(exc).__name__}: {exc}") from exc


class _Merged:
    """Families collected from several sources, each once; a collector ``render`` accepts.

    A family is known by the name it is exposed under: a counter ``x`` by ``x_total``. The
    text parser names the family of counter ``x_total`` ``x``, so keyed by that name it
    would collide with a gauge ``x`` beside it (setpoint's ``reconcile_threads_overdue``).
    ``warned`` holds the families whose type conflict was already logged (once each).
    """

    def __init__(self, warned: set[str]) -> None:
        self._families: dict[str, Metric] = {}
        self._warned = warned

    def add(self, family: Metric, worker: str | None) -> None:
        """Add ``family``'s samples, labelled ``worker=<worker>`` unless ``worker`` is None."""
        from prometheus_client.metrics_core import Metric

        key = family.name + "_total" if family.type == "counter" else family.name
        merged = self._families.get(key)
        if merged is None:
            merged = Metric(family.name, family.documentation, family.type, family.unit)
            self._families[key] = merged
        elif merged.type != family.type:
            if key not in self._warned:
                self._warned.add(key)
                log.warning(
                    "metric family %s is a %s in worker %s but a %s elsewhere; its samples "
                    "there are left out (logged once)",
                    key,
                    family.type,
                    worker if worker is not None else "supervisor",
                    merged.type,
                )
            return
        if worker is None:
            merged.samples.extend(family.samples)
            return
        for sample in family.samples:
            if WORKER_LABEL in sample.labels:
                own = dict(sample.labels)
                labels = {WORKER_LABEL: worker, f"exported_{WORKER_LABEL}": own.pop(WORKER_LABEL)}
                labels.update(own)
            else:
                labels = {WORKER_LABEL: worker, **sample.labels}
            merged.samples.append(sample._replace(labels=labels))

    def collect(self) -> Iterator[Metric]:
        """Every family, in the order first seen."""
        return iter(self._families.values())
