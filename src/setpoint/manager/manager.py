"""The manager: runs runnables in a fixed order, with leader election, probes and metrics.

::

    manager = Manager(client, ManagerOptions(
        leader_election=LeaderElectionOptions(name="tenant-operator"),
    ))
    manager.add(my_controller)                 # any setpoint.api.runnable.Runnable
    manager.add_readyz_check("db", check_db)   # sync or async callable
    await manager.run()                        # until SIGTERM/SIGINT or manager.stop()

Lifecycle (as controller-runtime's ``pkg/manager``):

1. The event broadcaster starts, so every later step can record Events.
2. Runnables that do not need leadership start group by group: servers (``/metrics``,
   ``/healthz``, ``/readyz``), webhooks, caches (the manager waits until each cache has
   synced, at most ``cache_sync_timeout``), others, controllers. Runnables of one group
   start concurrently; a group starts only when the previous one is up.
3. Leader election starts (without it, the process counts as elected at once). Once elected,
   leader-only runnables start, again group by group.
4. ``run()`` waits for a signal, ``stop()``, a runnable's ``failure()``, a start error or the
   loss of the lease.
5. Shutdown, within ``graceful_shutdown_timeout`` in total: leader-only runnables stop
   (controllers first, reverse group order); then leader election stops (releasing the lease
   with ``release_on_cancel``); then the other runnables in reverse group order (servers
   last, so probes answer until the end); then the event broadcaster flushes.

Losing the lease stops every leader-only runnable at once (``stop(0)``: no draining) at the
moment the renew deadline passes; then the manager shuts down and ``run()`` raises
:class:`~setpoint.manager.errors.LeaderElectionLost` (or returns, with
``LeadershipLossPolicy.SHUTDOWN``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Self, cast

from setpoint.api.runnable import Runnable, RunnableGroup
from setpoint.cache.errors import KindNotServed
from setpoint.controller.controller import Controller
from setpoint.controller.finalizers import ADVERTISES_FINALIZERS_LABEL, OWNED_FINALIZERS_ANNOTATION
from setpoint.manager.builder import ManagedBuilder
from setpoint.manager.errors import (
    LeaderElectionLost,
    ManagerStateError,
    RunnableFailed,
    ShardLeaseLost,
    ShutdownIncomplete,
    StartupSyncTimeout,
)
from setpoint.manager.healthz import Check, HealthChecks
from setpoint.manager.optional import WAITING_ANNOTATION, OptionalController, kind_label
from setpoint.manager.options import LeadershipLossPolicy, ManagerOptions
from setpoint.manager.sharedcache import CacheLike
from setpoint.observability import recording, tracing
from setpoint.observability.events import BroadcastRecorder, EventBroadcaster
from setpoint.observability.metrics import Metrics, render
from setpoint.observability.runtime import LoopLagMonitor, install_task_dump_signal, task_dump
from setpoint.server.address import parse_bind_address
from setpoint.server.http import (
    SMALL_BODY_SIZE,
    HttpRequest,
    HttpResponse,
    HttpServer,
    HttpServerOptions,
)
from setpoint.server.tls import ServerTLS

if TYPE_CHECKING:
    import socket

    from setpoint.api.clock import Clock
    from setpoint.cache import Cache
    from setpoint.client.client import Client
    from setpoint.client.protocols import ApiClient
    from setpoint.client.transport import RequestHook
    from setpoint.manager.clusters import ClusterSet
    from setpoint.manager.leaderelection import LeaderElector
    from setpoint.manager.metricsauth import ReviewClient
    from setpoint.manager.options import LeaderElectionOptions
    from setpoint.manager.processes import Supervisor, WorkerChannel, WorkerEnvironment
    from setpoint.manager.shardmember import ShardMember
    from setpoint.manager.workerendpoints import SupervisorEndpoints
    from setpoint.manager.workersplit import WorkerSplit
    from setpoint.webhook.server import WebhookServer

__all__ = ["Manager"]

log = logging.getLogger("setpoint.manager")

_STOP_SLACK: Final = 0.5
"""Seconds a runnable's ``stop(timeout)`` may overrun its timeout before it is abandoned."""

_LEADER_ELECTION_REPORTER: Final = "setpoint-leader-election"


class _State(Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


@dataclass(eq=False)
class _Entry:
    """One added runnable and where it is in its lifecycle."""

    runnable: Runnable
    group: RunnableGroup
    leader_only: bool
    state: _State = _State.NEW
    sharded: bool = False
    """A sharded controller: it runs while this replica holds its shard Lease."""
    in_supervisor: bool = False
    """Also run in the supervisor of ``ManagerOptions.processes`` (``add(in_supervisor=)``)."""
    split: bool = False
    """A controller split among the workers of ``ManagerOptions.processes`` by key."""

    @property
    def name(self) -> str:
        return self.runnable.name

    @property
    def active(self) -> bool:
        return self.state in (_State.STARTING, _State.RUNNING)


def _self_signed_metrics_tls() -> ServerTLS:
    """A throwaway CA and a certificate for localhost, in memory.

    controller-runtime's default for secure metrics without a certificate directory.
    """
    from setpoint.tls.certs import CertificateAuthority

    ca = CertificateAuthority("setpoint-metrics-ca")
    return ServerTLS(ca.serving_cert("setpoint-metrics", ("localhost", "127.0.0.1", "::1")))


async def _ping() -> None:
    """The built-in ``ping`` check: the process answers HTTP."""


class Manager:
    """Runs runnables with a fixed lifecycle, leader election, probes and metrics.

    See the module docstring for the lifecycle. A manager runs once: build a new one to run
    again. Its methods are meant for the event loop's thread, except :meth:`stop`, which may
    be called from any thread.
    """

    def __init__(self, client: ApiClient, options: ManagerOptions | None = None) -> None:
        self.client = client
        """The client shared by everything the manager builds: the live
        :class:`~setpoint.client.Client`, or in unit tests a
        :class:`~setpoint.testing.FakeClient`."""
        options = options or ManagerOptions()
        self._worker: WorkerEnvironment | None = None
        self._supervise = 0
        self._supervisor: Supervisor | None = None
        self._endpoints: SupervisorEndpoints | None = None
        """The supervisor's public ``/metrics`` and probes (``processes`` > 1 only)."""
        self._channel: WorkerChannel | None = None
        self._split: WorkerSplit | None = None
        if options.processes != 1:
            options = self._processes_mode(options)
        self.options = options
        """The validated settings."""
        opts = self.options
        self.metrics: Metrics = opts.metrics or Metrics.default()
        """Where the manager and its runnables record metrics; served on ``/metrics``."""

        le = opts.leader_election
        self._identity: str | None = None
        if le is not None:
            from setpoint.manager.leaderelection import default_identity

            self._identity = le.identity or default_identity()
            if le.lock is not None:
                if le.identity is not None and le.identity != le.lock.identity:
                    raise ValueError(
                        f"LeaderElectionOptions.identity={le.identity!r} differs from the "
                        f"identity of the given lock ({le.lock.identity!r}); set only one"
                    )
                self._identity = le.lock.identity
        self._lease_namespace = (
            (le.namespace or client.default_namespace or "default") if le is not None else None
        )
        self._owns_client = False
        self._entries: list[_Entry] = []
        self._state = _State.NEW
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._fatal: BaseException | None = None
        self._signals = 0
        self._deadline = 0.0

        self._started_groups: set[RunnableGroup] = set()
        self._leader_groups: set[RunnableGroup] = set()
        self._leading = False
        self._elected = asyncio.Event()
        self._elector: LeaderElector | None = None
        self._election_client: Client | None = None
        self._shard_client: Client | None = None
        self._leader_task: asyncio.Task[None] | None = None
        self._lost_task: asyncio.Task[None] | None = None
        self._late_tasks: set[asyncio.Task[None]] = set()

        self._cache: Cache | None = None
        self._shards: ShardMember | None = None
        self._shard_elector: LeaderElector | None = None
        self._shard_groups: set[RunnableGroup] = set()
        self._shard_task: asyncio.Task[None] | None = None
        self._shard_lost_task: asyncio.Task[None] | None = None
        if opts.sharding is not None:
            assert self._lease_namespace is not None  # sharding requires leader election
            from setpoint.manager.shardmember import ShardMember

            self._shards = ShardMember(
                client,
                opts.sharding,
                namespace=opts.sharding.namespace or self._lease_namespace,
                metrics=self.metrics,
            )
        self._webhook_server: WebhookServer | None = None
        self._clusters: ClusterSet | None = None
        self._broadcaster: EventBroadcaster | None = None

        show = opts.health_probe_show_reasons
        self._healthz = HealthChecks(
            "healthz", timeout=opts.health_check_timeout, show_reasons=show
        )
        self._readyz = HealthChecks("readyz", timeout=opts.health_check_timeout, show_reasons=show)
        self._healthz.add("ping", _ping)
        self._readyz.add("ping", _ping)
        self._readyz.add("informer-sync", self._check_caches_synced)
        self._readyz.add("shutdown", self._check_not_shutting_down)
        if le is not None:
            self._readyz.add("leader-election", self._check_leader_election)
        if self._shards is not None:
            self._readyz.add("shard-lease", self._check_shard_lease)

        self._metrics_server: HttpServer | None = None
        self._probe_server: HttpServer | None = None
        metrics_at = parse_bind_address(
            opts.metrics_bind_address, option="ManagerOptions.metrics_bind_address"
        )
        if metrics_at is not None:
            if opts.metrics_secure:
                from setpoint.manager.metricsauth import ApiServerAuth

                auth = ApiServerAuth(cast("ReviewClient", client))
                self._metrics_server = opts.new_http_server(
                    "metrics-server",
                    metrics_at,
                    auth.wrap(self.serve_metrics),
                    options=HttpServerOptions(
                        tls=opts.metrics_tls or _self_signed_metrics_tls(),
                        max_body_size=SMALL_BODY_SIZE,
                    ),
                )
            else:
                self._metrics_server = opts.new_http_server(
                    "metrics-server",
                    metrics_at,
                    self.serve_metrics,
                    options=HttpServerOptions(max_body_size=SMALL_BODY_SIZE),
                )
            self.add(self._metrics_server)
        probes_at = parse_bind_address(
            opts.health_probe_bind_address, option="ManagerOptions.health_probe_bind_address"
        )
        if probes_at is not None:
            # Probes and scrapes are GETs: no body larger than a few KiB (issue 27, finding 1).
            self._probe_server = opts.new_http_server(
                "probe-server",
                probes_at,
                self.serve_probes,
                options=HttpServerOptions(max_body_size=SMALL_BODY_SIZE),
            )
            self.add(self._probe_server)
        self.loop_lag: LoopLagMonitor | None = None
        """The event loop lag monitor (``None`` when ``event_loop_lag_interval`` is)."""
        if opts.event_loop_lag_interval is not None:
            self.loop_lag = LoopLagMonitor(
                self.metrics,
                interval=opts.event_loop_lag_interval,
                blocked_after=opts.blocked_loop_threshold,
            )
            self.add(self.loop_lag)

    def _processes_mode(self, options: ManagerOptions) -> ManagerOptions:
        """Supervisor or worker of ``options.processes`` (decision 0038); the options to use."""
        from setpoint.manager import processes

        count = processes.resolve_processes(options.processes)
        if count == 1:
            return options
        processes.check_options(options, count)
        worker = processes.worker_environment()
        if worker is None:
            self._supervise = count
            return options
        self._worker = worker
        options = processes.worker_options(options, worker)
        if options.sharding is None:
            from setpoint.manager.workersplit import WorkerSplit

            self._split = WorkerSplit(worker.index, worker.count, lambda: self.is_leader)
        return options

    @property
    def worker(self) -> WorkerEnvironment | None:
        """The worker this process is among ``ManagerOptions.processes`` (``None``: not one)."""
        return self._worker

    @property
    def supervisor(self) -> Supervisor | None:
        """The worker supervisor, while this manager supervises workers (``None`` otherwise)."""
        return self._supervisor

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        *,
        context: str | None = None,
        options: ManagerOptions | None = None,
    ) -> Self:
        """A manager with its own client from a kubeconfig; ``run()`` closes the client."""
        from setpoint.client.client import Client

        manager = cls(Client.from_kubeconfig(path, context=context), options)
        manager._owns_client = True
        return manager

    @classmethod
    def from_environment(cls, options: ManagerOptions | None = None) -> Self:
        """A manager with its own client from the kubeconfig or, in a pod, the service account.

        ``run()`` closes the client at the end.
        """
        from setpoint.client.client import Client

        manager = cls(Client.from_environment(), options)
        manager._owns_client = True
        return manager

    # -- what runs -----------------------------------------------------------------------

    def add(self, runnable: Runnable, *, in_supervisor: bool = False) -> None:
        """Run ``runnable`` with the manager, in its group's place in the lifecycle.

        Adding while the manager runs starts it at once if its group has started already
        (and, for a leader-only runnable, while this process leads).

        ``in_supervisor=True`` runs it in the supervisor of ``ManagerOptions.processes`` too
        (decision 0038), which otherwise runs nothing that was added: for work of the process
        that serves the public endpoints, such as reloading the metrics certificate
        (``setpoint run --metrics-cert-dir``). There it starts once the supervisor's
        ``/metrics`` and probes are up, before the workers, and stops after the workers,
        before the endpoints; its ``failure()`` shuts the supervisor down as it does a
        manager. In one process, and in each worker, it runs as any other runnable.

        Raises:
            TypeError: it does not satisfy :class:`~setpoint.api.runnable.Runnable`.
            ValueError: it was added already, or ``in_supervisor`` with a runnable that needs
                leader election (the supervisor never leads).
            ManagerStateError: the manager is shutting down or finished.

        """
        if not isinstance(runnable, Runnable):
            raise TypeError(
                f"{runnable!r} is not a Runnable: it needs name, group, needs_leader_election, "
                "start(), stop(timeout) and failure() (see setpoint.api.runnable)"
            )
        if self._state in (_State.STOPPING, _State.STOPPED):
            raise ManagerStateError(
                f"cannot add {runnable.name!r}: the manager is shutting down or finished"
            )
        if any(entry.runnable is runnable for entry in self._entries):
            raise ValueError(f"runnable {runnable.name!r} was added to this manager already")
        entry = _Entry(
            runnable,
            RunnableGroup(runnable.group),
            bool(runnable.needs_leader_election),
            in_supervisor=in_supervisor,
        )
        if in_supervisor and entry.leader_only:
            raise ValueError(
                f"runnable {runnable.name!r} needs leader election, so it cannot run in the "
                "supervisor, which runs none of the operator's leader-only work: add it "
                "without in_supervisor=True"
            )
        sharded = self._is_sharded(runnable)
        split = (
            not sharded
            and self._split is not None
            and isinstance(runnable, Controller)
            and runnable.for_kind is not None
        )
        if sharded or split:
            assert isinstance(runnable, Controller)
            if self._state is not _State.NEW:
                share = "this shard" if sharded else "this worker's objects"
                raise ManagerStateError(
                    f"cannot add controller {runnable.controller_name!r} while the manager "
                    f"runs: its cache must be narrowed to {share} before it starts; build "
                    "controllers before run()"
                )
            if sharded:
                assert self._shards is not None
                self._shards.adopt(runnable)
                entry.leader_only = False
                entry.sharded = True
            else:
                assert self._split is not None
                self._split.adopt(runnable)
                entry.split = True
        self._entries.append(entry)
        if self._state is not _State.RUNNING or (self._supervise and not in_supervisor):
            return
        reached = self._leader_groups if entry.leader_only else self._started_groups
        if entry.group in reached and self._runs_here(entry):
            task = asyncio.create_task(self._start_late(entry), name=f"start-{entry.name}")
            self._late_tasks.add(task)
            task.add_done_callback(self._late_tasks.discard)

    def _runs_here(self, entry: _Entry) -> bool:
        """Whether this process runs ``entry`` once its group starts (and, if leader-only, leads).

        Every split worker leads under its supervisor's Lease, so leader-only work that is
        not split by key (an optional controller, a cluster set, the tombstone sweep, the
        operator's own runnables) runs in worker 0 only, as it runs in one replica.
        """
        split = self._split
        return split is None or split.index == 0 or entry.split or not entry.leader_only

    def _is_sharded(self, runnable: Runnable) -> bool:
        sharding = self.options.sharding
        if sharding is None or not isinstance(runnable, Controller):
            return False
        if sharding.every_controller:
            return runnable.for_kind is not None
        return runnable.controller_name in sharding.controllers

    @property
    def shard(self) -> ShardMember | None:
        """The shard of this replica (its name, Lease and gates), when sharding is on."""
        return self._shards

    @property
    def runnables(self) -> list[Runnable]:
        """Every added runnable, in the order added (the servers first)."""
        return [entry.runnable for entry in self._entries]

    @property
    def cache(self) -> Cache:
        """The shared cache, built by ``ManagerOptions.new_cache`` and added on first use.

        Add indexes here (``manager.cache.add_index(kind, name, fn)``) before the manager
        runs; controllers built with :meth:`controller` read through it.
        """
        if self._cache is None:
            cache = self.options.new_cache(self.client)
            self.add(cache)
            self._cache = cache
        return self._cache

    @property
    def webhook_server(self) -> WebhookServer:
        """The webhook server, built from ``ManagerOptions.webhook_server`` and added on first use.

        It runs in the ``WEBHOOKS`` group (before caches and controllers) in every replica,
        and adds the ``webhook-server`` readiness check (listening with a certificate)::

            manager.webhook_server.add_conversion(Tenant, TenantV1Alpha1)
        """
        if self._webhook_server is None:
            from setpoint.webhook.server import WebhookServer

            server = WebhookServer(self.options.webhook_server, metrics=self.metrics)
            if self._worker is not None and self._worker.webhook_fd is not None:
                import socket

                # The supervisor's listening socket (decision 0038): one accept queue.
                server.serve_socket(socket.socket(fileno=self._worker.webhook_fd))
            self.add(server)
            self._readyz.add("webhook-server", server.ready)
            self._webhook_server = server
        return self._webhook_server

    @property
    def clusters(self) -> ClusterSet:
        """The member clusters and multi-cluster controllers, built and added on first use.

        The manager's own client is the home cluster (leader election, Secrets that describe
        members); see ``setpoint.manager.clusters``::

            manager.clusters.add_kubeconfig(contexts=("east", "west"))
            manager.clusters.controller("gizmo").for_(Gizmo).build(reconcile)
        """
        if self._clusters is None:
            from setpoint.manager.clusters import ClusterSet

            clusters = ClusterSet(
                self.client,
                options=self.options.clusters,
                metrics=self.metrics,
                events=self.options.events,
            )
            self.add(clusters)
            self._clusters = clusters
        return self._clusters

    def controller(self, name: str) -> ManagedBuilder:
        """A controller builder whose ``build(reconciler)`` uses this manager's parts.

        ``build`` fills in the manager's client, shared cache, metrics and an Event recorder
        reporting as ``name``, and adds the controller to the manager::

            manager.controller("tenant").for_(Tenant).owns(kinds.ConfigMap).build(reconcile)

        Raises:
            ControllerError: ``name`` is not a valid controller name.

        """
        return ManagedBuilder(name, self)

    def event_recorder(self, reporting_controller: str) -> BroadcastRecorder:
        """A recorder of Kubernetes Events reported by ``reporting_controller``.

        All recorders share the manager's broadcaster (one queue, one sender), which starts
        before every runnable and stops after them.

        Raises:
            ValueError: ``reporting_controller`` is not a qualified name
                (``"example.com/tenant-controller"``).

        """
        return self._event_broadcaster().recorder(reporting_controller)

    def _event_broadcaster(self) -> EventBroadcaster:
        if self._broadcaster is None:
            self._broadcaster = EventBroadcaster(self.client, self.options.events)
            if self._state is _State.RUNNING:
                task = asyncio.create_task(self._broadcaster.start())
                self._late_tasks.add(task)
                task.add_done_callback(self._late_tasks.discard)
        return self._broadcaster

    # -- probes ----------------------------------------------------------------------------

    def add_healthz_check(self, name: str, check: Check) -> None:
        """Add a liveness check, served on ``/healthz`` and ``/healthz/<name>``.

        A check returns ``None``/``True`` when healthy and returns ``False`` or raises when
        not; it may be sync (run in a thread) or async.

        Raises:
            DuplicateCheckError: a liveness check named ``name`` exists.

        """
        self._healthz.add(name, check)

    def add_readyz_check(self, name: str, check: Check) -> None:
        """Add a readiness check, served on ``/readyz`` and ``/readyz/<name>``.

        Built in: ``ping``, ``informer-sync`` (every started cache has synced), ``shutdown``
        (fails once shutdown begins) and, with leader election, ``leader-election``.

        Raises:
            DuplicateCheckError: a readiness check named ``name`` exists.

        """
        self._readyz.add(name, check)

    @property
    def healthz(self) -> HealthChecks:
        """The liveness checks (``/healthz``)."""
        return self._healthz

    @property
    def readyz(self) -> HealthChecks:
        """The readiness checks (``/readyz``)."""
        return self._readyz

    async def serve_probes(self, request: HttpRequest) -> HttpResponse:
        """The probe server's handler: ``/healthz``, ``/readyz`` and maybe ``/debug/tasks``.

        ``/healthz[/<name>]`` and ``/readyz[/<name>]`` always; ``/debug/tasks`` with
        ``ManagerOptions.debug_endpoints``, to loopback callers only.
        """
        for checks in (self._healthz, self._readyz):
            prefix = f"/{checks.endpoint}"
            if request.path == prefix or request.path.startswith(prefix + "/"):
                return await checks.handle(request, request.path[len(prefix) :])
        if request.path.rstrip("/") == "/debug/tasks" and self.options.debug_endpoints:
            if not request.is_loopback:
                return HttpResponse.text(
                    403,
                    "/debug/tasks answers loopback callers only: use kubectl port-forward or "
                    "kubectl exec\n",
                )
            return HttpResponse.text(200, task_dump())
        return HttpResponse.text(404, "404 page not found\n")

    async def serve_metrics(self, request: HttpRequest) -> HttpResponse:
        """The metrics server's handler: ``GET /metrics`` in the format the scraper prefers."""
        if request.path.rstrip("/") != "/metrics":
            return HttpResponse.text(404, "404 page not found\n")
        if request.method not in ("GET", "HEAD"):
            return HttpResponse.text(405, "method not allowed\n")
        # Serialising a large registry is CPU work; keep it off the event loop.
        body, content_type = await asyncio.to_thread(
            render, self.metrics.registry, request.headers.get("Accept")
        )
        return HttpResponse(200, body, content_type)

    async def _check_caches_synced(self) -> None:
        waiting = [
            entry.name
            for entry in self._entries
            if entry.group is RunnableGroup.CACHES
            and isinstance(entry.runnable, CacheLike)
            and (entry.active or not entry.leader_only)
            and not entry.runnable.synced
        ]
        if waiting:
            raise RuntimeError(f"caches not synced yet: {', '.join(waiting)}")

    async def _check_not_shutting_down(self) -> None:
        if self._state in (_State.STOPPING, _State.STOPPED):
            raise RuntimeError("the manager is shutting down")

    async def _check_shard_lease(self) -> None:
        if self._shard_elector is None:
            raise RuntimeError("the shard Lease is not being campaigned for yet")
        problem = self._shard_elector.check()
        if problem is not None:
            raise RuntimeError(problem)

    async def _check_leader_election(self) -> None:
        if self._elector is None:
            raise RuntimeError("leader election has not started yet")
        problem = self._elector.check()
        if problem is not None:
            raise RuntimeError(problem)

    def lease_annotations(self) -> dict[str, str]:
        """What the manager writes on its Lease: which finalizers its controllers handle.

        ``{"setpoint.dev/finalizers": '{"<finalizer>": "<controller>", ...}'}`` (JSON, ``{}``
        when none), so ``setpoint doctor finalizers`` can tell whether the controller that
        owns a stuck object's finalizer is running: its Lease is then fresh. Written on every
        create and renewal of the Lease; without leader election there is no Lease.

        And ``{"setpoint.dev/waiting": '{"<controller>": ["<Kind>.<version>.<group>"]}'}``,
        the optional controllers waiting for kinds to be served (``{}`` when none;
        :mod:`setpoint.manager.optional`), for ``setpoint doctor``.
        """
        owned: dict[str, str] = {}
        waiting: dict[str, list[str]] = {}
        for entry in self._entries:
            runnable = entry.runnable
            if isinstance(runnable, Controller | OptionalController):
                for finalizer in runnable.finalizers:
                    owned[finalizer] = runnable.controller_name
            if isinstance(runnable, OptionalController) and runnable.waiting_for:
                waiting[runnable.controller_name] = [kind_label(k) for k in runnable.waiting_for]
        return {
            OWNED_FINALIZERS_ANNOTATION: json.dumps(owned, sort_keys=True, separators=(",", ":")),
            WAITING_ANNOTATION: json.dumps(waiting, sort_keys=True, separators=(",", ":")),
        }

    # -- state -------------------------------------------------------------------------------

    @property
    def identity(self) -> str | None:
        """The leader election identity of this process (``None`` without leader election)."""
        return self._identity

    @property
    def is_leader(self) -> bool:
        """Whether leader-only work may act right now.

        Without leader election: true once running. With it: true while this process holds
        the lease and its renew deadline has not passed, checked against the clock on each
        call. Leader-only code may test it immediately before each side effect (with no
        ``await`` in between) to stay safe even after the process was paused.
        """
        if self._elector is None:
            return self._leading
        return self._leading and self._elector.is_leader

    async def wait_elected(self, timeout: float | None = None) -> None:
        """Return once this process leads (at once without leader election, once running).

        Raises:
            TimeoutError: not elected within ``timeout`` seconds.

        """
        async with asyncio.timeout(timeout):
            await self._elected.wait()

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """Where ``/metrics`` is served, once started (``None`` when disabled or not up yet).

        In the supervisor of ``ManagerOptions.processes``: its public, merged ``/metrics``.
        """
        if self._endpoints is not None:
            return self._endpoints.metrics_address
        return self._metrics_server.address if self._metrics_server is not None else None

    @property
    def health_probe_address(self) -> tuple[str, int] | None:
        """Where ``/healthz`` and ``/readyz`` are served, once started.

        In the supervisor of ``ManagerOptions.processes``: its probes over every worker's.
        """
        if self._endpoints is not None:
            return self._endpoints.health_probe_address
        return self._probe_server.address if self._probe_server is not None else None

    # -- run and stop ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask ``run()`` to shut down gracefully and return; safe from any thread, idempotent."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._request_stop)
                return
        self._request_stop()

    def _request_stop(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Start everything, run until asked to stop, then shut down gracefully.

        Returns ``None`` after a clean shutdown (SIGTERM/SIGINT, :meth:`stop`, or a lost lease
        under ``LeadershipLossPolicy.SHUTDOWN``). Cancelling the task running it also shuts
        down gracefully before the cancellation propagates.

        Raises:
            RunnableFailed: a runnable failed to start or its work died (``StartupSyncTimeout``
                when a cache did not sync in time); the cause is chained.
            LeaderElectionLost: the lease was lost (``LeadershipLossPolicy.FAIL``).
            ShutdownIncomplete: everything else went well, but a runnable did not stop
                within the graceful shutdown timeout.
            ManagerStateError: the manager ran before.
            PrivateFileError: ``options.record.path`` exists or cannot be created; nothing
                was started, so the manager may run once the path is fixed.

        """
        if self._state is not _State.NEW:
            raise ManagerStateError("a Manager runs once; build a new one to run again")
        if self._supervise:
            await self._run_supervisor()
            return
        recorder = self._start_recording()  # first: a refused file leaves nothing started
        self._state = _State.RUNNING
        self._loop = loop = asyncio.get_running_loop()
        restore_hooks = self._install_request_metrics(self.client)
        restore_signals = self._install_signal_handlers() if self.options.handle_signals else None
        restore_dump = install_task_dump_signal(loop) if self.options.task_dump_signal else None
        traced = (
            tracing.active_tracing() is None and tracing.configure_from_environment() is not None
            if self.options.tracing
            else False
        )
        cancelled = False
        problems: list[tuple[str, str]] = []
        try:
            startup = asyncio.create_task(self._startup(), name="setpoint-manager-startup")
            watcher = asyncio.create_task(self._watch_failures(), name="setpoint-manager-watch")
            reporter = None
            if self._worker is not None and self._worker.channel_fd is not None:
                reporter = asyncio.create_task(
                    self._report_to_supervisor(self._worker.channel_fd),
                    name="setpoint-manager-worker-reports",
                )
            try:
                await self._wake.wait()
            except asyncio.CancelledError:
                cancelled = True
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()  # shut down gracefully first; re-raised below
                log.info("the task running the manager was cancelled: shutting down")
            # The shutdown budget is read on the manager's clock (a test's ManualClock
            # then gives each stop exactly what is left of it).
            self._deadline = self.options.clock.now() + self.options.graceful_shutdown_timeout
            if self._signals > 1:
                self._deadline = self.options.clock.now()
            await _cancel_and_wait([t for t in (startup, watcher, reporter) if t is not None])
            problems = await self._shutdown()
        finally:
            self._state = _State.STOPPED
            if self._channel is not None:
                if self._fatal is not None:
                    self._channel.send(error=str(self._fatal))
                await self._channel.flush()
                self._channel.close()
            restore_hooks()
            if restore_signals is not None:
                restore_signals()
            if restore_dump is not None:
                restore_dump()
            if recorder is not None:
                recording.set_recorder(None)
                recorder.close()
                log.info("recording written to %s", recorder.options.path)
            if traced:
                # Flush the spans of the last reconciles before the process exits.
                await asyncio.to_thread(tracing.shutdown)
            if self._owns_client:
                await self.client.close()
        if cancelled:
            raise asyncio.CancelledError
        if self._fatal is not None:
            for name, problem in problems:
                log.error("during shutdown after an error, %s: %s", name, problem)
            raise self._fatal
        if problems:
            raise ShutdownIncomplete(problems)
        log.info("manager stopped cleanly")

    # -- processes (decision 0038) ------------------------------------------------------------

    async def _run_supervisor(self) -> None:
        """Supervise ``options.processes`` workers; here run only ``add(in_supervisor=True)``."""
        from setpoint.manager.processes import Supervisor, WorkerStartupFailed, worker_argv

        opts = self.options
        self._state = _State.RUNNING
        self._loop = asyncio.get_running_loop()
        restore_signals = self._install_signal_handlers() if opts.handle_signals else None
        webhook_socket: socket.socket | None = None
        watcher: asyncio.Task[None] | None = None
        leading: asyncio.Task[None] | None = None
        problems: list[tuple[str, str]] = []
        try:
            webhook_socket = self._listen_for_webhooks()
            supervisor = self._supervisor = Supervisor(
                self._supervise,
                argv=worker_argv(),
                clock=opts.clock,
                graceful_shutdown_timeout=opts.graceful_shutdown_timeout,
                webhook_socket=webhook_socket,
            )
            endpoints = self._endpoints = self._supervisor_endpoints(supervisor)
            log.info("supervising %d worker processes", self._supervise)
            await endpoints.start()
            for group in RunnableGroup:
                # Marked first: add(in_supervisor=True) from now on starts it at once.
                self._started_groups.add(group)
                await self._start_all(
                    [e for e in self._entries if e.in_supervisor and e.group is group]
                )
            watcher = asyncio.create_task(self._watch_failures(), name="setpoint-manager-watch")
            if opts.sharding is None:
                leading = asyncio.create_task(
                    self._lead_for_workers(supervisor), name="setpoint-supervisor-lead"
                )
            await supervisor.run(self._wake)
        except WorkerStartupFailed as exc:
            raise RunnableFailed(f"worker-{exc.index}", str(exc)) from exc
        except TimeoutError as exc:
            problems.append(("workers", str(exc)))
        finally:
            await _cancel_and_wait(
                [t for t in (watcher, leading, *self._late_tasks) if t is not None]
            )
            self._state = _State.STOPPING
            self._deadline = opts.clock.now() + opts.graceful_shutdown_timeout
            # Released (with release_on_cancel) only now that every worker has exited.
            await self._stop_supervisor_leadership(problems)
            for group in reversed(RunnableGroup):
                await self._stop_all(
                    [e for e in self._entries if e.in_supervisor and e.group is group and e.active],
                    problems,
                )
            self._state = _State.STOPPED
            if self._endpoints is not None:
                with contextlib.suppress(Exception):
                    await self._endpoints.stop(1.0)
            if restore_signals is not None:
                restore_signals()
            if webhook_socket is not None:
                webhook_socket.close()
            if self._owns_client:
                await self.client.close()
        if self._fatal is not None:
            raise self._fatal
        if problems:
            raise ShutdownIncomplete(problems)
        log.info("manager stopped cleanly")

    async def _lead_for_workers(self, supervisor: Supervisor) -> None:
        """Hold the leader election Lease for split workers and pass its fence on to them.

        See :mod:`setpoint.manager.workersplit`: every half retry period (and to each
        worker as it starts) the workers hear the instant before which nobody else can hold
        the Lease, on ``CLOCK_MONOTONIC``, or ``null`` while this supervisor does not lead.
        """
        from setpoint.api.clock import clock_sleep
        from setpoint.manager.workersplit import grant_message

        le = self.options.leader_election
        assert le is not None
        clock = self.options.clock
        try:
            elector = self._elector = self._new_elector(le)
        except Exception as exc:  # without it no worker would ever lead: say so and stop
            self._fail(exc)
            return

        def elected() -> None:
            self._leading = True
            self._elected.set()
            tell()

        def lost() -> None:
            self._leading = False
            self._elected.clear()
            tell()
            self._end_for_lost_leadership()

        def tell() -> None:
            supervisor.tell(**grant_message(elector, clock))

        elector.start(elected, lost)
        while True:
            tell()
            await clock_sleep(clock, le.retry_period / 2)

    async def _stop_supervisor_leadership(self, problems: list[tuple[str, str]]) -> None:
        """Stop the supervisor's elector (after the workers), its Events and its client."""
        await self._stop_elector(problems)
        await self._close_events_and_election()

    async def _stop_elector(self, problems: list[tuple[str, str]]) -> None:
        """Stop leading; release the lease (``release_on_cancel``) once leader work stopped."""
        self._leading = False
        if self._elector is not None:
            try:
                await asyncio.wait_for(self._elector.stop(), self._remaining() + _STOP_SLACK)
            except TimeoutError:
                problems.append(("leader-election", "releasing the lease timed out"))

    async def _close_events_and_election(self) -> None:
        """Flush and stop the Event broadcaster; close the leader election's own client."""
        if self._broadcaster is not None:
            await self._broadcaster.stop(self._remaining())
        if self._election_client is not None:
            await self._election_client.close()

    def _supervisor_endpoints(self, supervisor: Supervisor) -> SupervisorEndpoints:
        """The supervisor's public ``/metrics``, ``/healthz`` and ``/readyz``, over the workers'."""
        from setpoint.manager.workerendpoints import SupervisorEndpoints

        opts = self.options
        return SupervisorEndpoints(
            supervisor,
            metrics_bind_address=opts.metrics_bind_address,
            health_probe_bind_address=opts.health_probe_bind_address,
            metrics_secure=opts.metrics_secure,
            metrics_tls=opts.metrics_tls,
            client=self.client,
            clock=opts.clock,
            new_http_server=opts.new_http_server,
        )

    def _listen_for_webhooks(self) -> socket.socket | None:
        """The webhook server's listening socket, opened here and inherited by every worker."""
        server = self._webhook_server
        if server is None:
            return None
        sock = server.listen()
        host, port = sock.getsockname()[:2]
        log.info("webhook server socket listening on %s:%s, served by the workers", host, port)
        return sock

    async def _report_to_supervisor(self, fd: int) -> None:
        """Tell the supervisor where this worker's servers listen and whether it is ready."""
        from setpoint.api.clock import clock_sleep
        from setpoint.manager.processes import READY_POLL_INTERVAL, WorkerChannel
        from setpoint.manager.workersplit import SupervisorLock

        channel = self._channel = await WorkerChannel.connect(fd)

        def gone(task: asyncio.Task[None]) -> None:
            if not task.cancelled():
                log.warning("the process supervisor is gone: shutting down")
                self._request_stop()

        le = self.options.leader_election
        lock = le.lock if le is not None else None

        heard = lock.hear if isinstance(lock, SupervisorLock) else None
        watch = asyncio.create_task(channel.wait_closed(heard), name="setpoint-worker-supervisor")
        watch.add_done_callback(gone)
        opts = self.options
        addresses_sent = False
        ready: bool | None = None
        try:
            while True:
                if not addresses_sent:
                    metrics, probes = self.metrics_address, self.health_probe_address
                    if (metrics is not None or self._metrics_server is None) and (
                        probes is not None or self._probe_server is None
                    ):
                        channel.send(metrics=metrics, probes=probes)
                        addresses_sent = True
                now_ready = addresses_sent and await self._all_ready()
                if now_ready != ready:
                    channel.send(ready=now_ready)
                    ready = now_ready
                await clock_sleep(opts.clock, READY_POLL_INTERVAL)
        finally:
            watch.cancel()

    async def _all_ready(self) -> bool:
        for name in self._readyz.names:
            if await self._readyz.run(name) is not None:
                return False
        return True

    def _start_recording(self) -> recording.Recorder | None:
        """Start ``options.record``'s recorder (one per process: a second one is refused)."""
        options = self.options.record
        if options is None:
            return None
        current = recording.active_recorder()
        if current is not None:
            raise ManagerStateError(
                f"ManagerOptions.record: this process already records to "
                f"{current.options.path}; one recording at a time"
            )
        recorder = recording.Recorder(options)
        recording.set_recorder(recorder)
        log.info("recording informer events and API requests to %s", options.path)
        return recorder

    def _fail(self, error: BaseException) -> None:
        if self._fatal is None and self._state is _State.RUNNING:
            self._fatal = error
            log.error("shutting down: %s", error)
        self._wake.set()

    # -- startup -------------------------------------------------------------------------------

    async def _preflight(self) -> None:
        """Check the connection and the access the runnables need (``ManagerOptions.preflight``)."""
        from setpoint.client.client import Client
        from setpoint.client.preflight import AccessNeed, preflight

        client = self.client
        if not self.options.preflight or not isinstance(client, Client):
            return
        needs: list[AccessNeed] = []
        for entry in self._entries:
            if isinstance(entry.runnable, Controller | OptionalController):
                needs.extend(entry.runnable.access_needs())
        if self._cache is not None:
            for informer in self._cache.informers():
                why = "the manager's cache"
                scopes = informer.options.namespaces or (None,)
                needs.extend(AccessNeed(informer.kind, namespace=ns, why=why) for ns in scopes)
        le = self.options.leader_election
        if le is not None and le.lock is None:
            from setpoint.api import kinds

            needs.append(
                AccessNeed(
                    kinds.Lease,
                    verbs=("get", "create", "update"),
                    namespace=self._lease_namespace,
                    why=f"leader election on Lease {self._lease_namespace}/{le.name}",
                )
            )
        if self._shards is not None:
            from setpoint.api import kinds

            shards = self._shards
            why = f"sharding ring {shards.ring!r}"
            needs.append(
                AccessNeed(
                    kinds.Lease,
                    verbs=("get", "create", "update", "list", "watch", "delete"),
                    namespace=shards.namespace,
                    why=why,
                )
            )
            needs.extend(AccessNeed(k, verbs=("patch",), why=why) for k in shards.kinds)
        user = await preflight(client, needs)
        log.info("connected to %s as %s (%s)", client.config.server, user, client.config.source)
        await self._log_server_features(client)

    async def _log_server_features(self, client: Client) -> None:
        """Say, once, which optional server features are missing and what happens instead."""
        from setpoint.client.errors import ClientError
        from setpoint.client.features import probe_server_features

        try:
            features = await probe_server_features(client)
        except ClientError as exc:  # the preflight just reached the server: only log it
            log.warning("could not probe the server's optional features: %s", exc)
            return
        for line in features.degradations():
            log.info("%s", line)

    async def _startup(self) -> None:
        try:
            self._add_sharder()
            await self._preflight()
            if self._broadcaster is not None:
                await self._broadcaster.start()
            for group in RunnableGroup:
                # Mark the group first: a runnable added while it starts is started by add().
                self._started_groups.add(group)
                await self._start_all(
                    [
                        e
                        for e in self._entries
                        if e.group is group and not e.leader_only and not e.sharded
                    ]
                )
            self._start_shard_lease()
            le = self.options.leader_election
            if le is None:
                self._on_elected()
                return
            self._elector = self._new_elector(le)
            self._elector.start(self._on_elected, self._on_lost)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _lease_client(self) -> Client | None:
        """A client of its own for Lease renewals, or ``None`` if ``self.client`` is a fake.

        Renewals must not queue behind a busy controller's requests in a shared connection
        pool. A client that is not the live one (a fake in tests) has no pool to share, so
        it is used as it is. The caller closes the client it gets.
        """
        from setpoint.client.client import Client

        client = self.client
        if not isinstance(client, Client):
            return None
        own = Client(client.config, client.options)
        self._install_request_metrics(own)
        return own

    def _new_elector(self, le: LeaderElectionOptions) -> LeaderElector:
        """The elector of ``le``: its lock, or a Lease with this manager's annotations."""
        assert self._identity is not None and self._lease_namespace is not None
        lock = le.lock
        if lock is None:
            from setpoint.manager.resourcelock import LeaseLock

            self._election_client = self._lease_client()
            lock = LeaseLock(
                self._election_client or self.client,
                namespace=self._lease_namespace,
                name=le.name,
                identity=self._identity,
                recorder=self._event_broadcaster().recorder(_LEADER_ELECTION_REPORTER),
                labels={ADVERTISES_FINALIZERS_LABEL: "true"},
                annotations=self.lease_annotations,
            )
        from setpoint.manager.leaderelection import LeaderElector

        return LeaderElector(lock, le, clock=self.options.clock, metrics=self.metrics)

    def _add_sharder(self) -> None:
        """Check the sharded controllers and add the ring's sharder (leader-only)."""
        shards, sharding = self._shards, self.options.sharding
        if shards is None or sharding is None:
            return
        adopted = {c.controller_name for c in shards.controllers}
        missing = [name for name in sharding.controllers if name not in adopted]
        if missing:
            raise ValueError(
                f"ShardingOptions.controllers names {', '.join(map(repr, missing))}, but no "
                "controller of that name was added to the manager; build it with "
                "manager.controller(name) before run(), or remove it from the list"
            )
        from setpoint.manager.sharder import Sharder

        assert self._identity is not None
        identity, namespace, kinds = self._identity, shards.namespace, shards.kinds
        from setpoint.client.client import Client

        def new_sharder(client: ApiClient, clock: Clock) -> Sharder:
            return Sharder(
                client,
                sharding,
                namespace=namespace,
                kinds=kinds,
                identity=identity,
                metrics=self.metrics,
                sync_timeout=self.options.cache_sync_timeout,
                clock=clock,
            )

        client = self.client
        if self._worker is not None and isinstance(client, Client):
            # A worker's loop is busy with reconciles; the sharder gets a loop (and a
            # client) of its own in a thread, so label writes do not wait for them.
            from setpoint.api.clock import LoopClock
            from setpoint.manager.processes import ThreadedRunnable

            def build() -> tuple[Runnable, Callable[[], Awaitable[None]]]:
                own = Client(client.config, client.options)
                return new_sharder(own, LoopClock()), own.close

            self.add(
                ThreadedRunnable(f"sharder/{sharding.ring}", RunnableGroup.OTHERS, True, build)
            )
            return
        self.add(new_sharder(self.client, self.options.clock))

    def _start_shard_lease(self) -> None:
        """Campaign for this replica's shard Lease; sharded controllers start once held."""
        shards = self._shards
        if shards is None:
            return
        self._shard_client = self._lease_client()
        self._shard_elector = shards.elector(
            self._shard_client or self.client, clock=self.options.clock, metrics=self.metrics
        )
        self._shard_elector.start(self._on_shard_held, self._on_shard_lost)

    def _on_shard_held(self) -> None:
        assert self._shards is not None
        log.info("holding %s: starting the sharded controllers", self._shards.describe())
        self._shard_task = asyncio.create_task(
            self._start_sharded(), name="setpoint-manager-shard-start"
        )

    async def _start_sharded(self) -> None:
        try:
            for group in RunnableGroup:
                self._shard_groups.add(group)
                await self._start_all([e for e in self._entries if e.group is group and e.sharded])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _on_shard_lost(self) -> None:
        """At the shard Lease's renew deadline: stop the sharded controllers right now."""
        self._shard_groups.clear()
        if self._shard_task is not None:
            self._shard_task.cancel()
        entries = [e for e in self._entries if e.sharded and e.active]
        for entry in entries:
            entry.state = _State.STOPPING
        self._shard_lost_task = asyncio.create_task(
            self._stop_all(entries, [], immediately=True), name="setpoint-manager-shard-lost"
        )
        elector = self._shard_elector
        assert elector is not None and self._shards is not None
        le = self.options.leader_election
        if le is None or le.on_lost is LeadershipLossPolicy.FAIL:
            self._fail(ShardLeaseLost(elector.lock.describe(), self._shards.shard))
        else:
            log.warning("lost %s: shutting down", self._shards.describe())
            self._request_stop()

    async def _start_all(self, entries: list[_Entry]) -> None:
        entries = [e for e in entries if e.state is _State.NEW]
        if not entries:
            return
        for entry in entries:
            entry.state = _State.STARTING
        tasks = [
            asyncio.create_task(self._start_one(entry), name=f"start-{entry.name}")
            for entry in entries
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            await _cancel_and_wait(tasks)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                raise cast("BaseException", task.exception())

    async def _start_one(self, entry: _Entry) -> None:
        runnable = entry.runnable
        log.info("starting %s", entry.name)
        try:
            await runnable.start()
        except Exception as exc:
            message = f"{entry.name} failed to start: {exc}"
            if isinstance(exc, KindNotServed) and isinstance(runnable, Controller):
                message += (
                    ". To start without the kind and run the controller once its CRD is "
                    "installed, build it with manager.controller(name)...optional()"
                )
            raise _failed(entry.name, message, exc) from exc
        if entry.state is _State.STARTING:
            entry.state = _State.RUNNING
        if entry.group is RunnableGroup.CACHES and isinstance(runnable, CacheLike):
            await self._wait_synced(entry.name, runnable)

    async def _wait_synced(self, name: str, cache: CacheLike) -> None:
        timeout = self.options.cache_sync_timeout
        try:
            # The outer bound guards against a cache that does not honour its own timeout.
            async with asyncio.timeout(timeout + 1.0):
                await cache.wait_for_sync(timeout)
        except TimeoutError as exc:
            detail = f" ({exc})" if str(exc) else ""
            error = StartupSyncTimeout(
                name,
                f"{name} did not sync within {timeout:g}s (ManagerOptions.cache_sync_timeout)"
                f"{detail}: check that the service account may list and watch every kind it "
                "caches, that their CRDs are installed, and the API server's health",
                timeout=timeout,
            )
            raise error from exc
        except Exception as exc:
            raise _failed(name, f"{name} failed to sync: {exc}", exc) from exc
        log.info("%s synced", name)

    async def _start_late(self, entry: _Entry) -> None:
        try:
            await self._start_all([entry])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    # -- leadership ----------------------------------------------------------------------------

    def _on_elected(self) -> None:
        self._leading = True
        self._elected.set()
        self._leader_task = asyncio.create_task(
            self._start_leader_runnables(), name="setpoint-manager-leader-start"
        )

    async def _start_leader_runnables(self) -> None:
        try:
            for group in RunnableGroup:
                self._leader_groups.add(group)
                await self._start_all(
                    [
                        e
                        for e in self._entries
                        if e.group is group and e.leader_only and self._runs_here(e)
                    ]
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    def _on_lost(self) -> None:
        """Called by the elector at the renew deadline: stop leader-only work right now."""
        self._leading = False
        self._elected.clear()
        self._leader_groups.clear()
        if self._leader_task is not None:
            self._leader_task.cancel()
        entries = [e for e in self._entries if e.leader_only and e.active]
        for entry in entries:
            entry.state = _State.STOPPING
        self._lost_task = asyncio.create_task(
            self._stop_all(entries, [], immediately=True), name="setpoint-manager-lost"
        )
        self._end_for_lost_leadership()

    def _end_for_lost_leadership(self) -> None:
        """Fail or stop the manager, as ``LeaderElectionOptions.on_lost`` says."""
        elector = self._elector
        assert elector is not None
        le = self.options.leader_election
        assert le is not None
        if le.on_lost is LeadershipLossPolicy.FAIL:
            self._fail(LeaderElectionLost(elector.lock.describe(), elector.identity))
        else:
            log.warning("lost leadership of %s: shutting down", elector.lock.describe())
            self._request_stop()

    # -- failures and shutdown -----------------------------------------------------------------

    async def _watch_failures(self) -> None:
        interval = self.options.failure_check_interval
        while True:
            # The loop's time, not options.clock: a failed runnable must stop the manager
            # while a test's ManualClock stands still (its next deadline stays the test's).
            await asyncio.sleep(interval)
            for entry in list(self._entries):
                if entry.state is not _State.RUNNING:
                    continue
                error = entry.runnable.failure()
                if error is not None:
                    self._fail(_failed(entry.name, f"{entry.name} failed: {error}", error))
            broadcaster = self._broadcaster
            if broadcaster is not None and broadcaster.failure() is not None:
                error = broadcaster.failure()
                assert error is not None
                self._fail(_failed(broadcaster.name, f"{broadcaster.name} failed: {error}", error))
            shard_elector = self._shard_elector
            if (
                shard_elector is not None
                and shard_elector.failure() is not None
                and not shard_elector.lost
            ):
                error = shard_elector.failure()
                assert error is not None
                self._fail(_failed("shard-lease", f"the shard Lease failed: {error}", error))
            elector = self._elector
            if elector is not None and elector.failure() is not None and not elector.lost:
                error = elector.failure()
                assert error is not None
                self._fail(_failed("leader-election", f"leader election failed: {error}", error))

    def _remaining(self) -> float:
        assert self._loop is not None
        return max(self._deadline - self.options.clock.now(), 0.0)

    async def _shutdown(self) -> list[tuple[str, str]]:
        self._state = _State.STOPPING
        problems: list[tuple[str, str]] = []
        log.info("shutting down (%.1fs left for it)", self._remaining())
        await _cancel_and_wait([t for t in (self._leader_task, self._shard_task) if t is not None])
        await _cancel_and_wait(list(self._late_tasks))
        for lost in (self._lost_task, self._shard_lost_task):
            if lost is not None:
                await asyncio.wait({lost}, timeout=self._remaining() + _STOP_SLACK)

        for group in reversed(RunnableGroup):
            await self._stop_all(
                [
                    e
                    for e in self._entries
                    if e.group is group and (e.leader_only or e.sharded) and e.active
                ],
                problems,
            )
        if self._shards is not None:
            await self._shards.close()
        if self._shard_elector is not None:
            # Released (empty holder) only now that no sharded controller runs: the sharder
            # then moves this shard's objects at once.
            try:
                await asyncio.wait_for(self._shard_elector.stop(), self._remaining() + _STOP_SLACK)
            except TimeoutError:
                problems.append(("shard-lease", "releasing the shard Lease timed out"))
        await self._stop_elector(problems)
        for group in reversed(RunnableGroup):
            await self._stop_all(
                [e for e in self._entries if e.group is group and not e.leader_only and e.active],
                problems,
            )
        await self._close_events_and_election()
        if self._shard_client is not None:
            await self._shard_client.close()
        return problems

    async def _stop_all(
        self, entries: list[_Entry], problems: list[tuple[str, str]], *, immediately: bool = False
    ) -> None:
        if not entries:
            return
        for entry in entries:
            entry.state = _State.STOPPING

        async def stop(entry: _Entry) -> None:
            timeout = 0.0 if immediately else self._remaining()
            log.info("stopping %s (%.1fs to finish)", entry.name, timeout)
            try:
                await asyncio.wait_for(entry.runnable.stop(timeout), timeout + _STOP_SLACK)
            except TimeoutError:
                problems.append((entry.name, f"did not stop within {timeout:.1f}s"))
                log.error("%s did not stop within %.1fs", entry.name, timeout)
            except Exception as exc:
                problems.append((entry.name, f"stop() raised {type(exc).__name__}: {exc}"))
                log.exception("%s failed to stop", entry.name)
            finally:
                entry.state = _State.STOPPED

        await asyncio.gather(*(stop(entry) for entry in entries))

    # -- process plumbing ------------------------------------------------------------------------

    def _install_request_metrics(self, client: object) -> Callable[[], None]:
        """Count every request of ``client`` in ``rest_client_requests_total``."""
        transport = getattr(client, "transport", None)
        if transport is None or not hasattr(transport, "on_request"):
            return lambda: None
        previous: RequestHook | None = transport.on_request
        counter = self.metrics.rest_client_requests_total
        series: dict[tuple[str, str, str], Any] = {}

        def on_request(method: str, host: str, code: str) -> None:
            key = (code, method, host)
            child = series.get(key)
            if child is None:
                child = series[key] = counter.labels(code, method, host)
            child.inc()
            if previous is not None:
                previous(method, host, code)

        transport.on_request = on_request

        def restore() -> None:
            if transport.on_request is on_request:
                transport.on_request = previous

        return restore

    def _install_signal_handlers(self) -> Callable[[], None] | None:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError) as exc:
                # Not the main thread, or a platform without loop signal handlers.
                log.debug("not handling %s: %s", sig.name, exc)
                continue
            installed.append(sig)

        def restore() -> None:
            for sig in installed:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(sig)

        return restore

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._supervisor is not None and self._signals > 1:
            log.warning("received %s again: passing it on to the workers", sig.name)
            self._supervisor.signal_all(signal.SIGTERM)
            return
        if self._signals == 1:
            log.info("received %s: shutting down gracefully", sig.name)
            self._request_stop()
        else:
            log.warning("received %s again: stopping what remains without waiting", sig.name)
            if self._loop is not None:
                self._deadline = self.options.clock.now()


def _failed(name: str, message: str, cause: BaseException) -> RunnableFailed:
    error = RunnableFailed(name, message)
    error.__cause__ = cause
    return error


async def _cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for them to finish, without raising their errors."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
