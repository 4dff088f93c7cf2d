"""Every setting of the manager, defaulted and validated in one place.

As controller-runtime's ``setOptionsDefaults``: :class:`ManagerOptions` and
:class:`LeaderElectionOptions` hold all defaults (each documented on its attribute) and reject
inconsistent settings when they are built, with a message that states the rule. The test seams
(the resource lock, the HTTP server factory, the cache factory, the clock) are options too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final, Literal

from setpoint.api.clock import Clock, LoopClock
from setpoint.api.validation import is_dns1123_label, is_dns1123_subdomain
from setpoint.manager.sharedcache import CacheFactory, default_new_cache
from setpoint.observability.events import EventBroadcasterOptions
from setpoint.observability.recording import RecordOptions
from setpoint.server.address import parse_bind_address
from setpoint.server.http import Http1Server, HttpServerFactory
from setpoint.server.tls import ServerTLS
from setpoint.webhook.options import WebhookServerOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from setpoint.client.client import ClientOptions
    from setpoint.client.config import ClientConfig
    from setpoint.client.protocols import ApiClient
    from setpoint.manager.resourcelock import ResourceLock
    from setpoint.manager.sharding import ShardingOptions
    from setpoint.observability.metrics import Metrics

__all__ = [
    "ClusterSetOptions",
    "LeaderElectionOptions",
    "LeadershipLossPolicy",
    "ManagerOptions",
]

RENEW_JITTER_FACTOR: Final = 1.2
"""client-go's ``JitterFactor``: ``renew_deadline`` must exceed ``retry_period`` times this."""


class LeadershipLossPolicy(Enum):
    """What the manager does after losing its lease (leader-only work is stopped either way)."""

    FAIL = "fail"
    """Shut down the rest gracefully and make ``run()`` raise
    :class:`~setpoint.manager.errors.LeaderElectionLost`. The default: the process exits
    non-zero and its restart is visible, as with controller-runtime (which exits at once)."""

    SHUTDOWN = "shutdown"
    """Shut down gracefully and return from ``run()`` without an error, as after a signal."""


@dataclass(frozen=True, kw_only=True)
class LeaderElectionOptions:
    """Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

    Timing rules, checked here (each one protects the guarantee that two processes never act
    as leader at once):

    - ``renew_deadline < lease_duration``: a leader gives up ``renew_deadline`` after it sent
      its last successful renewal; other candidates wait ``lease_duration`` after they *saw*
      that renewal, which is later. The difference is the safety margin for clock-rate drift
      and scheduling delay.
    - ``renew_deadline > 1.2 * retry_period``: a leader retries a failed renewal every
      ``retry_period``; at least one retry must fit before it has to give up (client-go's rule).
    - ``request_timeout < renew_deadline``: one hung renewal request must not outlast the
      renew deadline.
    """

    name: str
    """Name of the Lease (for example ``"my-operator"``); also the ``name`` label of
    ``leader_election_master_status``. Required."""

    namespace: str | None = None
    """Namespace of the Lease. ``None``: the client's default namespace, which is the pod's own
    namespace in-cluster, or the kubeconfig context's namespace outside a cluster."""

    identity: str | None = None
    """This candidate's identity, written to ``spec.holderIdentity``. ``None``: the host name
    plus a random UUID (client-go's convention), unique per process."""

    lease_duration: float = 15.0
    """Seconds a candidate waits, after it last saw the lease renewed, before it takes over.
    Written to ``spec.leaseDurationSeconds``, so it must be a whole number of seconds."""

    renew_deadline: float = 10.0
    """Seconds after its last successful renewal was sent that a leader keeps acting while
    renewals fail; then it stops all leader-only work."""

    retry_period: float = 2.0
    """Seconds between renewals by the leader, and between attempts to acquire by the others
    (which add up to 20% jitter)."""

    request_timeout: float | None = None
    """Seconds one lease request may take. ``None``: half of ``renew_deadline`` (5 s with the
    defaults)."""

    release_on_cancel: bool = False
    """On a clean shutdown, give the lease up (after leader-only work stopped), so another
    candidate takes over at once instead of after ``lease_duration``. Only safe when nothing
    leader-only runs after ``Manager.run()`` returns."""

    on_lost: LeadershipLossPolicy = LeadershipLossPolicy.FAIL
    """What ``run()`` does after the lease is lost; see :class:`LeadershipLossPolicy`."""

    lock: ResourceLock | None = None
    """The lock to campaign on (a test seam). ``None``: a
    :class:`~setpoint.manager.resourcelock.LeaseLock` on ``namespace/name``, through a
    dedicated client so a busy controller's connection pool cannot delay renewals."""

    @property
    def effective_request_timeout(self) -> float:
        """``request_timeout``, or its default when it is ``None``."""
        return self.request_timeout if self.request_timeout is not None else self.renew_deadline / 2

    def __post_init__(self) -> None:
        where = "LeaderElectionOptions"
        if not is_dns1123_subdomain(self.name):
            raise ValueError(
                f"{where}.name={self.name!r} must be a valid Lease name (a DNS subdomain: "
                "lowercase letters, digits, '-' and '.', at most 253 characters)"
            )
        if self.namespace is not None and not is_dns1123_label(self.namespace):
            raise ValueError(f"{where}.namespace={self.namespace!r} is not a namespace name")
        if self.identity is not None and not self.identity:
            raise ValueError(f"{where}.identity must not be empty (None picks a unique one)")
        for attr in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, attr)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{where}.{attr} must be a positive number of seconds")
        if self.lease_duration != int(self.lease_duration):
            raise ValueError(
                f"{where}.lease_duration={self.lease_duration} must be a whole number of "
                "seconds: it is written to the Lease as leaseDurationSeconds, and other "
                "candidates wait exactly that long"
            )
        if self.renew_deadline >= self.lease_duration:
            raise ValueError(
                f"{where}.renew_deadline ({self.renew_deadline:g} s) must be shorter than "
                f"lease_duration ({self.lease_duration:g} s): a leader that cannot renew stops "
                "acting renew_deadline after its last successful renewal, and that must happen "
                "before other candidates may consider the lease expired (lease_duration after "
                "they saw that renewal). Lower renew_deadline or raise lease_duration"
            )
        if self.renew_deadline <= RENEW_JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"{where}.retry_period ({self.retry_period:g} s) is too long for renew_deadline "
                f"({self.renew_deadline:g} s): renew_deadline must exceed "
                f"{RENEW_JITTER_FACTOR} x retry_period (client-go's rule) so a leader can retry "
                "a failed renewal at least once before it must give up. Lower retry_period or "
                "raise renew_deadline"
            )
        timeout = self.effective_request_timeout
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"{where}.request_timeout must be a positive number of seconds")
        if timeout >= self.renew_deadline:
            raise ValueError(
                f"{where}.request_timeout ({timeout:g} s) must be shorter than renew_deadline "
                f"({self.renew_deadline:g} s): a single lease request that hangs for "
                "request_timeout would otherwise outlast the renew deadline. Lower "
                "request_timeout (or leave it None for half the renew deadline)"
            )


@dataclass(frozen=True, kw_only=True)
class ClusterSetOptions:
    """How a :class:`~setpoint.manager.clusters.ClusterSet` runs its members.

    Every default is documented here. It is defined with the manager's other options (and
    re-exported by :mod:`setpoint.manager.clusters`) because every :class:`ManagerOptions`
    holds one: building a manager must not import the multi-cluster machinery.
    """

    sync_timeout: float = 60.0
    """Seconds a member's caches may take to sync before the member is torn down and tried
    again (with backoff)."""

    probe_period: float = 5.0
    """Seconds between reachability probes (``GET /version``) of a running member."""

    probe_timeout: float = 3.0
    """Seconds one probe may take before the member counts as unreachable."""

    backoff_max: float = 30.0
    """Longest wait, in seconds, between attempts to start a member (from 1 s, doubling)."""

    needs_leader_election: bool = True
    """Run the members' controllers only in the leader (the home cluster's lease)."""

    client_options: ClientOptions | None = None
    """Options of the members' clients (timeouts, QPS). ``None``: the client defaults."""

    new_client: Callable[[ClientConfig], ApiClient] | None = None
    """Builds a member's client from its config (a test seam). ``None``: ``Client(config)``."""

    def __post_init__(self) -> None:
        for name in ("sync_timeout", "probe_period", "probe_timeout", "backoff_max"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"ClusterSetOptions.{name} must be a positive number of seconds")
        if self.probe_timeout >= self.probe_period:
            raise ValueError(
                f"ClusterSetOptions.probe_timeout ({self.probe_timeout:g} s) must be shorter "
                f"than probe_period ({self.probe_period:g} s)"
            )


@dataclass(frozen=True, kw_only=True)
class ManagerOptions:
    """Settings of a :class:`~setpoint.manager.Manager`; every default is documented here."""

    leader_election: LeaderElectionOptions | None = None
    """Leader election settings; ``None`` (the default) runs without it: every runnable,
    including leader-only ones, runs in every replica."""

    metrics_bind_address: str = "127.0.0.1:8080"
    """Where ``/metrics`` is served (``host:port``, ``":8080"`` for every interface, port 0
    for any free port, ``"0"`` to disable). Loopback only by default: metrics describe the
    operator's work and the cluster's objects, and the endpoint has no authentication unless
    :attr:`metrics_secure` is set. To let Prometheus scrape it, either serve
    ``":8443"`` with ``metrics_secure=True`` (as kubebuilder does) or, on a network you
    trust, ``":8080"`` (see ``docs/security.md``)."""

    metrics_secure: bool = False
    """Serve ``/metrics`` over HTTPS, and only to callers whose bearer token the API server
    authenticates (TokenReview) and authorizes for ``get`` on the path (SubjectAccessReview):
    kubebuilder's secure metrics. The operator needs ``create`` on ``tokenreviews`` and
    ``subjectaccessreviews``; the scraper a ClusterRole allowing ``get`` on the non-resource
    URL ``/metrics``."""

    metrics_tls: ServerTLS | None = None
    """The serving certificate for :attr:`metrics_secure`. ``None``: a self-signed
    certificate made in memory at start-up (scrapers then skip verification, as with
    controller-runtime's default)."""

    health_probe_bind_address: str = ":8081"
    """Where ``/healthz`` and ``/readyz`` are served (same forms; ``"0"`` disables). Every
    interface by default: the kubelet probes the pod's IP."""

    health_probe_show_reasons: bool = False
    """Serve the reasons checks failed to every caller. By default they are served only over
    loopback (``kubectl port-forward``, ``kubectl exec``) and logged: the probe port has no
    authentication, and a reason is an exception message that may carry anything."""

    graceful_shutdown_timeout: float = 30.0
    """Seconds the whole shutdown may take; each runnable gets what is left of it."""

    cache_sync_timeout: float = 120.0
    """Seconds each cache may take for its initial list before startup fails; also the
    default of controllers built with ``manager.controller(...)`` (their
    ``ControllerOptions.cache_sync_timeout``, unless they set their own)."""

    preflight: bool = True
    """Before starting anything, check once that the API server is reachable, that the
    client trusts its certificate and that it accepts the credentials, and that they allow
    ``list`` and ``watch`` on every kind the controllers watch (and the Lease verbs with
    leader election); fail at once with a message naming the kubeconfig, the server and the
    fix (:func:`setpoint.client.preflight.preflight`). Only for the live ``Client`` (a fake
    needs no check). ``False`` skips it, for example when RBAC is granted only after the
    operator started."""

    health_check_timeout: float = 10.0
    """Seconds one health or readiness check may take before it counts as failed."""

    failure_check_interval: float = 0.5
    """Seconds between checks of the runnables' ``failure()``; a runnable whose work died is
    noticed within this time."""

    handle_signals: bool = True
    """Shut down gracefully on SIGTERM and SIGINT while ``run()`` runs (main thread only).
    A second signal cuts the remaining grace period to zero."""

    metrics: Metrics | None = None
    """The metrics to record into and serve. ``None``: ``Metrics.default()`` (the
    process-wide registry)."""

    events: EventBroadcasterOptions = field(default_factory=EventBroadcasterOptions)
    """Queueing, aggregation and retries of the Kubernetes Event recorder."""

    new_cache: CacheFactory = default_new_cache
    """Builds the manager's shared cache from its client on first use of ``Manager.cache``
    (a test seam). The default builds ``setpoint.cache.Cache(client)``."""

    new_http_server: HttpServerFactory = Http1Server
    """Builds the probe and metrics servers (a test seam). The default is setpoint's own
    HTTP/1.1 server (:class:`~setpoint.server.http.Http1Server`)."""

    clock: Clock = field(default_factory=LoopClock)
    """Where leader election reads time and sets timers, the shutdown reads what is left
    of ``graceful_shutdown_timeout``, and the controllers' work queues and reconcile timeouts
    run (unless their ``ControllerOptions.clock`` says otherwise): a test seam."""

    webhook_server: WebhookServerOptions = field(default_factory=WebhookServerOptions)
    """Address and certificate of the webhook server, built on first use of
    ``Manager.webhook_server`` (an operator without webhooks never starts one)."""

    event_loop_lag_interval: float | None = 0.25
    """Seconds between two measurements of the event loop's lag
    (``setpoint_event_loop_lag_seconds``, :class:`~setpoint.observability.runtime.LoopLagMonitor`);
    one timer wake-up each time, nothing else. ``None`` disables the measurement."""

    blocked_loop_threshold: float | None = 0.1
    """Seconds the event loop may go without running a callback before the blocked-loop
    detector (:class:`~setpoint.observability.runtime.BlockedLoopDetector`, a watchdog
    thread) logs the reconcile running on it and the stack that blocks it, and counts
    ``setpoint_event_loop_blocked_total``. Default 0.1. ``None`` turns it off; it runs
    only with the lag measurement (``event_loop_lag_interval``)."""

    task_dump_signal: bool = True
    """On ``SIGUSR1``, write every asyncio task with its await chain and the reconcile it
    serves to stderr, plus the code running on the loop's thread at that moment (what blocks
    a stuck loop). Installed while ``run()`` runs, from the main thread only, and only when
    no other handler owns ``SIGUSR1``."""

    tracing: bool = True
    """Turn OpenTelemetry tracing on when the standard ``OTEL_*`` variables ask for it and
    the ``setpoint[otel]`` extra is installed
    (``setpoint.observability.tracing.configure_from_environment``): spans per reconcile, per
    watch event that queued one and per API request inside it. Without those variables
    nothing is imported. ``False`` leaves tracing to the application."""

    record: RecordOptions | None = None
    """Record every informer event and every API request with its answer to a bounded,
    redacted JSONL file while ``run()`` runs (``setpoint run --record FILE``; see
    :mod:`setpoint.observability.recording`), for :func:`setpoint.testing.replay`.
    ``None`` (the default): nothing is recorded and nothing costs."""

    debug_endpoints: bool = False
    """Serve ``/debug/tasks`` (the same task dump) on the probe server. Off by default, and
    answered only to loopback callers (``kubectl port-forward``, ``kubectl exec``) even when
    on: a dump names the code paths and objects the operator is working on, and the probe
    port has no authentication."""

    clusters: ClusterSetOptions = field(default_factory=ClusterSetOptions)
    """How member clusters of ``Manager.clusters`` run (sync timeout, probes, backoff); used
    only by managers with multi-cluster controllers."""

    sharding: ShardingOptions | None = None
    """Split the objects of the controllers it names across the replicas (decision 0011):
    each replica holds a shard Lease, caches and reconciles only the objects labelled for its
    shard, and the leader assigns objects and moves them when replicas come and go. Needs
    :attr:`leader_election` (the sharder runs in the leader). ``None`` (default): no
    sharding."""

    processes: int | Literal["auto"] = 1
    """Worker processes to run the operator in (decision 0038). ``1`` (the default): this
    process runs everything, as always. ``N > 1``: ``run()`` becomes a supervisor that runs
    the same command line N times as workers, each reconciling its share of every
    controller's objects (split by key under the supervisor's leader election Lease, or the
    shards of :attr:`sharding`'s ring when it is set), restarts a worker that dies, and
    serves the probe and metrics endpoints aggregated over the workers
    (:mod:`setpoint.manager.processes`, :mod:`setpoint.manager.workersplit`). ``"auto"``:
    the CPUs the Pod may use (its cgroup CPU quota, rounded up). More than one needs
    :attr:`leader_election`."""

    def __post_init__(self) -> None:
        processes = self.processes
        if processes != "auto" and (
            isinstance(processes, bool) or not isinstance(processes, int) or processes < 1
        ):
            raise ValueError(
                f"ManagerOptions.processes={processes!r} must be a whole number of at least 1, "
                "or 'auto' for the CPUs the Pod may use (its cgroup CPU quota)"
            )
        if isinstance(processes, int) and processes > 1 and self.leader_election is None:
            raise ValueError(
                f"ManagerOptions.processes={processes} needs leader_election: the workers "
                "split the objects on a shard ring, whose sharder runs in the leader. Set "
                "leader_election=LeaderElectionOptions(name=...) (setpoint run turns "
                "--leader-elect on by itself)"
            )
        if self.sharding is not None and self.leader_election is None:
            raise ValueError(
                "ManagerOptions.sharding needs leader_election: the sharder that assigns "
                "objects to shards runs in the leader only. Set leader_election="
                "LeaderElectionOptions(name=...)"
            )
        metrics = parse_bind_address(
            self.metrics_bind_address, option="ManagerOptions.metrics_bind_address"
        )
        probes = parse_bind_address(
            self.health_probe_bind_address, option="ManagerOptions.health_probe_bind_address"
        )
        if self.metrics_tls is not None and not self.metrics_secure:
            raise ValueError(
                "ManagerOptions.metrics_tls is set but metrics_secure is False; set "
                "metrics_secure=True to serve /metrics over HTTPS with authentication"
            )
        if metrics is not None and probes is not None and metrics.port != 0 and metrics == probes:
            raise ValueError(
                f"ManagerOptions: metrics_bind_address and health_probe_bind_address are both "
                f"{self.metrics_bind_address!r}; give the servers different ports (or '0' to "
                "disable one)"
            )
        lag = self.event_loop_lag_interval
        if lag is not None and (not math.isfinite(lag) or lag <= 0):
            raise ValueError(
                f"ManagerOptions.event_loop_lag_interval={lag!r} must be a positive number of "
                "seconds, or None to turn the measurement off"
            )
        blocked = self.blocked_loop_threshold
        if blocked is not None and (
            isinstance(blocked, bool) or not math.isfinite(blocked) or blocked <= 0
        ):
            raise ValueError(
                f"ManagerOptions.blocked_loop_threshold={blocked!r} must be a positive number "
                "of seconds, or None to turn the blocked-loop detector off"
            )
        for attr in (
            "graceful_shutdown_timeout",
            "cache_sync_timeout",
            "health_check_timeout",
            "failure_check_interval",
        ):
            value = getattr(self, attr)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"ManagerOptions.{attr}={value!r} must be a positive number of seconds"
                )
