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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from setpoint.api.runnable import RunnableGroup
from setpoint.server.http import Http1Server, HttpRequest, HttpResponse, HttpServerFactory

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from setpoint.api.clock import Clock
    from setpoint.client.protocols import ApiClient
    from setpoint.server.tls import ServerTLS

__all__ = [
    "SCRAPE_TIMEOUT",
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
        - A scrape answers within about :data:`SCRAPE_TIMEOUT` whatever the workers do; a
          worker that does not answer is left out and counted in
          ``setpoint_worker_scrape_errors_total``.
        - Each family appears once in the merged exposition, every worker sample labelled
          ``worker="<index>"``.
        - With ``metrics_secure``, no scrape is answered without a token the API server
          authenticated and authorized (as the manager's own metrics).

    Args:
        table: The supervisor's worker table.
        metrics_bind_address: As ``ManagerOptions.metrics_bind_address`` (``"0"`` disables).
        health_probe_bind_address: As ``ManagerOptions.health_probe_bind_address``.
        metrics_secure: Serve ``/metrics`` over HTTPS with authentication and authorization.
        metrics_tls: The serving certificate for ``metrics_secure`` (``None``: self-signed).
        client: Creates the TokenReviews and SubjectAccessReviews (needed when secure).
        registry: The supervisor's own metrics, served beside the workers'; ``None``: a
            registry of its own.
        clock: Times the scrape timeout (``LoopClock`` by default).
        scrape_timeout: Seconds to wait for one worker's exposition.
        new_http_server: Builds the two servers (``ManagerOptions.new_http_server``).

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
        raise NotImplementedError  # skeleton: the interface for the supervisor

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
        raise NotImplementedError

    @property
    def health_probe_address(self) -> tuple[str, int] | None:
        """Where ``/healthz`` and ``/readyz`` are served, once started."""
        raise NotImplementedError

    async def start(self) -> None:
        """Bind both servers."""
        raise NotImplementedError

    async def stop(self, timeout: float) -> None:
        """Stop both servers and close the connections to the workers."""
        raise NotImplementedError

    def failure(self) -> BaseException | None:
        """The first server failure, if any."""
        raise NotImplementedError

    async def serve_metrics(self, request: HttpRequest) -> HttpResponse:
        """``GET /metrics``: the workers' expositions merged, and the supervisor's own."""
        raise NotImplementedError

    async def serve_probes(self, request: HttpRequest) -> HttpResponse:
        """``/healthz`` and ``/readyz`` (``?verbose`` lists every worker)."""
        raise NotImplementedError
