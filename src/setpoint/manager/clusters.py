"""One manager, several clusters: member clusters, each with its own client, cache and controllers.

::

    clusters = manager.clusters                          # a ClusterSet, added on first use
    clusters.add_kubeconfig("~/.kube/fleet", contexts=("east", "west"))
    clusters.watch_secrets("fleet-system")              # Secrets labelled setpoint.dev/cluster
    clusters.controller("gizmo").for_(Gizmo).build(reconcile)

    async def reconcile(ctx: Context, request: ClusterRequest) -> None:
        gizmo = await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
        ...                                              # ctx.client is request.cluster's

The manager's own client is the *home* cluster: leader election, Events about the manager
and the Secrets that describe members live there. The home cluster is a member only if it is
added like any other (``clusters.add("home", client.config)``). See decision 0011.

Expected Flow:
    1. Describe the multi-cluster controllers (``controller(name)``, a controller builder)
       before the manager runs. Members may be added before or while it runs, from
       :class:`~setpoint.client.config.ClientConfig` objects, kubeconfig contexts, or Secrets
       in the home cluster (loaded in restricted mode: no ``exec`` plugins, no file
       references; :func:`~setpoint.client.kubeconfig.kubeconfig_from_secret`).
    2. The set runs in the leader (``needs_leader_election``, the default). For each member it
       starts, in a task of the member's own: its client, an Event broadcaster to that
       cluster, its cache, and one controller per description (named
       ``<name>-<cluster>``), whose reconciles get a :class:`ClusterRequest` and a context
       whose ``client``, ``reader``, ``recorder`` and ``cluster`` are the member's.
    3. A member that cannot be reached or whose caches do not sync within
       ``sync_timeout`` is torn down and tried again with backoff (up to ``backoff_max``);
       a running member is probed every ``probe_period`` (``GET /version``); the result is
       ``setpoint_cluster_ready{cluster}`` and :attr:`ClusterSet.members`.
    4. :meth:`ClusterSet.remove` (or deleting its Secret) stops a member's controllers
       (draining in-flight reconciles), its cache and its client.

Guarantees:
    - A member's failure never fails the manager or another member: its work, queue,
      informers and connection pool are its own. ``failure()`` reports only errors of the
      set itself.
    - Requests name their cluster; two members' objects with the same namespace and name are
      different keys in different queues.

Caveats:
    - Multi-cluster controllers run in one replica (the leader); they are not sharded.
    - ``/readyz`` does not fail for an unreachable member (that would take the whole
      operator out of service for one cluster); watch ``setpoint_cluster_ready``.

Errors:
    ConfigError: a Secret's kubeconfig is unusable (logged, the member shows the error and
        is not started; fixing the Secret retries it).
    ValueError: a member name that is not a DNS label, or a name already taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, runtime_checkable

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, labels_of, metadata_of
from setpoint.api.runnable import RunnableGroup
from setpoint.api.validation import is_dns1123_label
from setpoint.cache.cache import Cache, CacheOptions, KindOptions
from setpoint.cache.informer import FuncHandler
from setpoint.client.client import Client
from setpoint.client.config import ClientConfig, ConfigError
from setpoint.client.errors import ClientError
from setpoint.client.kubeconfig import kubeconfig_from_secret, load_kubeconfig
from setpoint.controller.blocking import SyncContext, is_blocking
from setpoint.controller.builder import Builder
from setpoint.controller.controller import (
    Controller,
    ControllerError,
    ControllerOptions,
    as_reconcile_function,
)
from setpoint.controller.reconcile import ClusterRequest, Context, ReconcilerLike, Result
from setpoint.manager.options import ClusterSetOptions
from setpoint.observability.events import EventBroadcaster, EventBroadcasterOptions

if TYPE_CHECKING:
    from setpoint.client.protocols import ApiClient
    from setpoint.observability.metrics import Metrics

__all__ = [
    "CLUSTER_LABEL",
    "ClusterBuilder",
    "ClusterReconcileFunc",
    "ClusterReconciler",
    "ClusterReconcilerLike",
    "ClusterSet",
    "ClusterSetOptions",
    "MemberStatus",
    "SyncClusterReconcileFunc",
]

log = logging.getLogger("setpoint.manager.clusters")

CLUSTER_LABEL: Final = "setpoint.dev/cluster"
"""Label on a Secret that holds a member cluster's kubeconfig; its value names the member."""


ClusterReconcileFunc = Callable[[Context, ClusterRequest], Awaitable["Result | None"]]
"""A multi-cluster reconcile function: ``async def reconcile(ctx, request: ClusterRequest)``."""


@runtime_checkable
class ClusterReconciler(Protocol):
    """An object with an async ``reconcile(ctx, request: ClusterRequest)`` method."""

    async def reconcile(self, ctx: Context, request: ClusterRequest) -> Result | None:
        """Make the world match the object ``request`` names, in ``request.cluster``."""
        ...


SyncClusterReconcileFunc = Callable[[SyncContext, ClusterRequest], "Result | None"]
"""A blocking multi-cluster reconcile function: ``def reconcile(ctx, request)``, run in the
member controller's threads (:mod:`setpoint.controller.blocking`)."""

ClusterReconcilerLike = ClusterReconciler | ClusterReconcileFunc | SyncClusterReconcileFunc
"""What a multi-cluster controller accepts (an async reconciler, or a blocking function)."""


@dataclass
class MemberStatus:
    """What the set knows about one member cluster."""

    name: str
    """The member's name."""
    ready: bool = False
    """Started, synced and answering its last probe."""
    error: str = ""
    """Why it is not ready (empty when ready)."""
    since: float = field(default_factory=time.monotonic)
    """When ``ready`` last changed (monotonic)."""
    attempts: int = 0
    """Start attempts so far."""
    source: str = ""
    """Where its config came from (``config``, ``kubeconfig <path> context <c>``,
    ``Secret <ns>/<name>``)."""


@dataclass(eq=False)
class _Template:
    builder: Builder
    reconciler: ClusterReconcilerLike


class ClusterBuilder(Builder):
    """A controller builder whose ``build`` registers it for every member cluster."""

    def __init__(self, name: str, clusters: ClusterSet) -> None:
        super().__init__(name)
        self._clusters = clusters

    def build(  # type: ignore[override]
        self,
        reconciler: ClusterReconcilerLike,
    ) -> None:
        """Register the controller: one instance per member, each ``<name>-<cluster>``.

        ``reconciler`` receives ``(ctx, request: ClusterRequest)``.

        Raises:
            ControllerError: as ``Builder.build`` (checked now, with a trial build), or the
                set is running already.

        """
        as_reconcile_function(cast("ReconcilerLike", reconciler))
        if self.for_kind is None and not self._sources:
            raise ControllerError(
                f"controller {self.name!r} watches nothing: add for_(Kind) before build()"
            )
        self._clusters._register(_Template(self, reconciler))


def _member_controller_name(controller: str, cluster: str) -> str:
    return f"{controller}-{cluster}"[:63].rstrip("-_.")


def _for_cluster(reconciler: ClusterReconcilerLike, cluster: str) -> Any:
    """The reconciler as a single-cluster controller calls it, handing it a ClusterRequest."""
    function: Any = as_reconcile_function(cast("ReconcilerLike", reconciler))
    if is_blocking(function):  # a plain def: the member controller runs it in its threads

        def blocking(ctx: Any, request: ObjectKey) -> Result | None:
            result: Result | None = function(
                ctx, ClusterRequest(cluster, request.namespace, request.name)
            )
            return result

        return blocking

    async def reconcile(ctx: Context, request: ObjectKey) -> Result | None:
        result: Result | None = await function(
            ctx, ClusterRequest(cluster, request.namespace, request.name)
        )
        return result

    return reconcile


class _Member:
    """One member cluster: its client, broadcaster, cache and controllers, in its own task."""

    def __init__(
        self,
        clusters: ClusterSet,
        name: str,
        *,
        config: ClientConfig | None,
        client: ApiClient | None,
        source: str,
        fingerprint: str = "",
    ) -> None:
        self.clusters = clusters
        self.name = name
        self.config = config
        self.given_client = client
        self.fingerprint = fingerprint
        self.status = MemberStatus(name, source=source)
        self.client: ApiClient | None = None
        self.cache: Cache | None = None
        self.broadcaster: EventBroadcaster | None = None
        self.controllers: list[Controller] = []
        self.task: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()

    def set_ready(self, ready: bool, error: str = "") -> None:
        if ready != self.status.ready:
            self.status.since = time.monotonic()
            log.info(
                "cluster %s is %s%s",
                self.name,
                "ready" if ready else "not ready",
                f": {error}" if error else "",
            )
        self.status.ready = ready
        self.status.error = error
        metrics = self.clusters.metrics
        if metrics is not None:
            metrics.cluster_ready.labels(self.name).set(1 if ready else 0)

    def _build(self) -> None:
        options = self.clusters.options
        if self.given_client is not None:
            client: ApiClient = self.given_client
        elif options.new_client is not None:
            assert self.config is not None
            client = options.new_client(self.config)
        else:
            assert self.config is not None
            client = Client(self.config, options.client_options)
        self.client = client
        self.cache = Cache(client)
        self.broadcaster = EventBroadcaster(client, self.clusters.events)
        self.controllers = []
        for template in self.clusters.templates:
            builder = template.builder.renamed(
                _member_controller_name(template.builder.name, self.name)
            )
            builder = builder.with_options(
                _with_sync_timeout(builder.options, options.sync_timeout)
            )
            self.controllers.append(
                builder.build(
                    _for_cluster(template.reconciler, self.name),
                    client=client,
                    cache=self.cache,
                    metrics=self.clusters.metrics,
                    recorder=self.broadcaster.recorder(template.builder.name),
                    cluster=self.name,
                )
            )

    async def _teardown(self, timeout: float) -> None:
        for controller in self.controllers:
            with contextlib.suppress(Exception):
                await controller.stop(timeout)
        if self.cache is not None:
            with contextlib.suppress(Exception):
                await self.cache.stop(max(0.1, timeout / 2))
        if self.broadcaster is not None:
            with contextlib.suppress(Exception):
                await self.broadcaster.stop(0.5)
        client = self.client
        if client is not None and client is not self.given_client and isinstance(client, Client):
            with contextlib.suppress(Exception):
                await client.close()
        self.client, self.cache, self.broadcaster, self.controllers = None, None, None, []

    async def run(self) -> None:
        options = self.clusters.options
        delay = 1.0
        while not self.stopping.is_set():
            self.status.attempts += 1
            try:
                self._build()
                assert self.cache is not None and self.broadcaster is not None
                await self.broadcaster.start()
                await self.cache.start()
                async with asyncio.timeout(options.sync_timeout + 1):
                    await asyncio.gather(*(c.start() for c in self.controllers))
                    await self.cache.wait_for_sync(options.sync_timeout)
            except asyncio.CancelledError:
                await self._teardown(0.5)
                raise
            except Exception as exc:
                self.set_ready(False, f"{type(exc).__name__}: {exc}")
                await self._teardown(1.0)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self.stopping.wait()
                delay = min(delay * 2, options.backoff_max)
                continue
            self.set_ready(True)
            await self._probe_until_stopped()
            return

    async def _probe_until_stopped(self) -> None:
        options = self.clusters.options
        client = self.client
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(options.probe_period):
                    await self.stopping.wait()
            if self.stopping.is_set() or client is None:
                return
            server_version = getattr(client, "server_version", None)
            if server_version is None:
                continue
            try:
                async with asyncio.timeout(options.probe_timeout):
                    await server_version()
            except (ClientError, TimeoutError, OSError) as exc:
                self.set_ready(False, f"unreachable: {type(exc).__name__}: {exc}")
            else:
                self.set_ready(True)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run(), name=f"cluster {self.name}")

    async def stop(self, timeout: float) -> None:
        self.stopping.set()
        task = self.task
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait({task}, timeout=0.1)
        await self._teardown(timeout)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.set_ready(False, "removed")


def _with_sync_timeout(options: ControllerOptions, seconds: float) -> ControllerOptions:
    if options.cache_sync_timeout is not None:
        return options
    return dataclasses.replace(options, cache_sync_timeout=seconds)


class ClusterSet:
    """The member clusters of a manager and the controllers that run in each of them.

    See the module docstring for the flow and guarantees. Built by ``Manager.clusters``.
    """

    def __init__(
        self,
        home: ApiClient,
        *,
        options: ClusterSetOptions | None = None,
        metrics: Metrics | None = None,
        events: EventBroadcasterOptions | None = None,
    ) -> None:
        self.home = home
        """The manager's own client (the home cluster)."""
        self.options = options or ClusterSetOptions()
        """How members run."""
        self.metrics = metrics
        """Where member controllers and ``setpoint_cluster_ready`` report."""
        self.events = events or EventBroadcasterOptions()
        """Options of each member's Event broadcaster."""
        self.templates: list[_Template] = []
        """The multi-cluster controllers described so far."""
        self._members: dict[str, _Member] = {}
        self._running = False
        self._stopped = False
        self._secret_watches: list[tuple[str, str, str]] = []
        self._secret_caches: list[Cache] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None

    # -- Runnable -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"clusters"``."""
        return "clusters"

    @property
    def group(self) -> RunnableGroup:
        """:attr:`RunnableGroup.CONTROLLERS`: started last, stopped first."""
        return RunnableGroup.CONTROLLERS

    @property
    def needs_leader_election(self) -> bool:
        """From :attr:`ClusterSetOptions.needs_leader_election` (default ``True``)."""
        return self.options.needs_leader_election

    def failure(self) -> BaseException | None:
        """An unexpected error of the set itself (a member's problems are never reported)."""
        return self._failure

    async def start(self) -> None:
        """Start every member (each in its own task) and the Secret watches; returns at once.

        Raises:
            CacheSyncTimeout: a Secret watch's cache did not sync (the home cluster is the
                manager's own: if it cannot list Secrets, the manager cannot work).

        """
        self._running = True
        for member in self._members.values():
            member.start()
        for namespace, label, key in self._secret_watches:
            await self._start_secret_watch(namespace, label, key)

    async def stop(self, timeout: float) -> None:
        """Stop every member (draining in-flight reconciles within ``timeout``) and the watches."""
        self._running = False
        self._stopped = True
        for cache in self._secret_caches:
            await cache.stop(0.5)
        for task in list(self._tasks):
            task.cancel()
        members = list(self._members.values())
        if members:
            await asyncio.gather(*(m.stop(timeout) for m in members), return_exceptions=True)

    # -- describing controllers ---------------------------------------------------------------

    def controller(self, name: str) -> ClusterBuilder:
        """A builder for a controller that runs in every member cluster.

        ``build(reconciler)`` registers it; the reconciler receives a :class:`ClusterRequest`.

        Raises:
            ControllerError: ``name`` is not a valid controller name.

        """
        return ClusterBuilder(name, self)

    def _register(self, template: _Template) -> None:
        if self._running or self._stopped:
            raise ControllerError(
                f"controller {template.builder.name!r}: describe multi-cluster controllers "
                "before the manager runs"
            )
        if any(t.builder.name == template.builder.name for t in self.templates):
            raise ValueError(
                f"a multi-cluster controller named {template.builder.name!r} exists already"
            )
        self.templates.append(template)

    # -- members ------------------------------------------------------------------------------

    @property
    def members(self) -> dict[str, MemberStatus]:
        """Every member's status, by name."""
        return {name: m.status for name, m in self._members.items()}

    def client(self, name: str) -> ApiClient | None:
        """Member ``name``'s client while it runs (``None`` between attempts)."""
        member = self._members.get(name)
        return member.client if member is not None else None

    def cache(self, name: str) -> Cache | None:
        """Member ``name``'s cache while it runs (``None`` between attempts)."""
        member = self._members.get(name)
        return member.cache if member is not None else None

    def add(
        self,
        name: str,
        config: ClientConfig | None = None,
        *,
        client: ApiClient | None = None,
        source: str = "config",
    ) -> None:
        """Join member ``name`` (from a config, or a client the caller keeps and closes).

        While the set runs, the member starts at once.

        Raises:
            ValueError: ``name`` is not a DNS label, is taken, or neither or both of
                ``config`` and ``client`` are given.

        """
        self._add(name, config=config, client=client, source=source)

    def _add(
        self,
        name: str,
        *,
        config: ClientConfig | None,
        client: ApiClient | None,
        source: str,
        fingerprint: str = "",
    ) -> None:
        if not is_dns1123_label(name):
            raise ValueError(
                f"cluster name {name!r} must be a DNS label (lowercase letters, digits and "
                "'-', at most 63): it becomes part of controller names and metric labels"
            )
        if name in self._members:
            raise ValueError(f"a member cluster named {name!r} exists already; remove it first")
        if (config is None) == (client is None):
            raise ValueError(f"cluster {name!r}: give either config= or client=")
        member = _Member(
            self, name, config=config, client=client, source=source, fingerprint=fingerprint
        )
        self._members[name] = member
        if self._running:
            member.start()

    def add_kubeconfig(
        self, path: str | Path | None = None, *, contexts: Iterable[str]
    ) -> list[str]:
        """Join one member per kubeconfig context (named after the context); returns the names.

        The file is the operator's own configuration, so it is loaded as ``$KUBECONFIG``
        would be (``exec`` plugins allowed). Context names must be DNS labels.

        Raises:
            ConfigError: the file or a context cannot be used.
            ValueError: as :meth:`add`.

        """
        added = []
        for context in contexts:
            config = load_kubeconfig(
                str(path) if path is not None else None, context=context, context_option="contexts"
            )
            self._add(
                context,
                config=config,
                client=None,
                source=f"kubeconfig {path or '$KUBECONFIG'} context {context}",
            )
            added.append(context)
        return added

    async def remove(self, name: str, timeout: float = 10.0) -> None:
        """Stop member ``name`` (draining in-flight reconciles within ``timeout``) and forget it.

        Raises:
            KeyError: there is no such member.

        """
        member = self._members.pop(name)
        await member.stop(timeout)
        if self.metrics is not None:
            with contextlib.suppress(KeyError):
                self.metrics.cluster_ready.remove(name)

    # -- Secrets ------------------------------------------------------------------------------

    def watch_secrets(
        self, namespace: str, *, label: str = CLUSTER_LABEL, key: str = "value"
    ) -> None:
        """Join (and leave) a member for every Secret in ``namespace`` labelled ``label``.

        The label's value names the member (else the Secret's name); the kubeconfig is under
        data ``key`` (``value``, as Cluster API's ``<cluster>-kubeconfig`` Secrets), loaded in
        restricted mode. A changed Secret restarts its member; a deleted one removes it.

        Raises:
            ValueError: ``namespace`` is not a namespace name.

        """
        if not is_dns1123_label(namespace):
            raise ValueError(f"watch_secrets: {namespace!r} is not a namespace name")
        self._secret_watches.append((namespace, label, key))

    async def _start_secret_watch(self, namespace: str, label: str, key: str) -> None:
        cache = Cache(
            self.home,
            options=CacheOptions(
                namespaces=(namespace,), by_kind={kinds.Secret: KindOptions(labels=label)}
            ),
        )
        self._secret_caches.append(cache)
        informer = cache.informer(kinds.Secret)

        def changed(secret: JsonObject) -> None:
            self._spawn(self._join_secret(cache, secret, key))

        def deleted(secret: JsonObject) -> None:
            self._spawn(self._leave_secret(secret, label))

        informer.add_handler(
            FuncHandler(
                add=lambda obj, _: changed(obj),
                update=lambda _, obj: changed(obj),
                delete=lambda obj, _: deleted(obj),
            )
        )
        await cache.start()
        await cache.wait_for_sync(self.options.sync_timeout)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()

    @staticmethod
    def _secret_member_name(secret: JsonObject, label: str) -> str:
        value = labels_of(secret).get(label, "")
        return value if is_dns1123_label(value) else str(metadata_of(secret).get("name") or "")

    async def _join_secret(self, cache: Cache, secret: JsonObject, key: str) -> None:
        m = metadata_of(secret)
        secret_name, namespace = str(m.get("name") or ""), str(m.get("namespace") or "")
        label = next(lbl for ns, lbl, k in self._secret_watches if ns == namespace and k == key)
        name = self._secret_member_name(secret, label)
        data = secret.get("data") if isinstance(secret.get("data"), dict) else {}
        fingerprint = str((data or {}).get(key, ""))
        source = f"Secret {namespace}/{secret_name}"
        current = self._members.get(name)
        if current is not None:
            if current.fingerprint == fingerprint and current.status.source == source:
                return
            await self.remove(name)
        try:
            config = await kubeconfig_from_secret(cache, secret_name, namespace=namespace, key=key)
        except (ConfigError, ClientError) as exc:
            log.error("cluster %s from %s cannot be used: %s", name, source, exc)
            return
        try:
            self._add(name, config=config, client=None, source=source, fingerprint=fingerprint)
        except ValueError as exc:
            log.error("cluster from %s cannot join: %s", source, exc)

    async def _leave_secret(self, secret: JsonObject, label: str) -> None:
        name = self._secret_member_name(secret, label)
        member = self._members.get(name)
        m = metadata_of(secret)
        source = f"Secret {m.get('namespace')}/{m.get('name')}"
        if member is not None and member.status.source == source:
            await self.remove(name)
