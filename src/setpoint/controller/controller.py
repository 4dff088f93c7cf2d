"""The controller: event sources feed a work queue, workers run the reconciler.

Build one with :class:`~setpoint.controller.builder.Builder`; the manager runs it as a
:class:`~setpoint.api.runnable.Runnable` (group ``CONTROLLERS``, leader election by default).

Expected flow
-------------
``start()`` registers a handler on the shared informer of every source, waits for those
informers to sync (``cache_sync_timeout``), publishes the controller's metrics and starts
``max_concurrent_reconciles`` workers. Each worker takes a key from the queue, runs one
reconcile with a fresh :class:`~setpoint.controller.reconcile.Context`, and acts on the
outcome:

========================================  =================================================
outcome                                   what happens
========================================  =================================================
``None`` / ``Result()``                   backoff reset; ``reconcile_total{result=success}``
``Result(requeue_after=s)``               backoff reset; queued again in ``s`` seconds;
                                          ``result=requeue_after``
:class:`TerminalError`, an invalid       not retried until the object changes; a
selector, a 422 naming a field            ``Stalled`` condition and a Warning Event;
                                          ``errors_total`` and
                                          ``terminal_reconcile_errors_total``; ``result=error``
an API, cache or :class:`ReconcileError`  retried with per-key exponential backoff;
error, or the reconcile timeout           ``errors_total``; ``result=error``
any other exception (a bug)               as above, and ``reconcile_panics_total`` too
:class:`CleanupFailed` (a finalizer's     retried after its own :class:`CleanupRetry`
cleanup)                                  backoff; ``errors_total`` (and ``panics`` as above)
========================================  =================================================

With ``ControllerOptions.kstatus_conditions`` the outcome is also reported on the object,
in ``status.observedGeneration`` and the ``Ready``, ``Reconciling`` and ``Stalled``
conditions Argo CD, Flux and kstatus read (:mod:`setpoint.controller.health`).

With finalizer handlers (``Builder.finalizer``), each reconcile first runs the finalizer
step (:mod:`setpoint.controller.finalizers`): missing finalizers are added before reconcile
is called, and for an object being deleted (or gone) the cleanups run *instead of*
reconcile.

An object annotated ``setpoint.dev/paused`` for this controller is not reconciled: the
worker ends before the finalizer step and the reconciler, sets a ``Paused`` condition and
an Event once, and reconciles it again when the pause ends; a paused object being deleted
still has its cleanups run unless ``setpoint.dev/paused-deletion`` holds them
(:mod:`setpoint.controller.pause`).

Guarantees
----------
- A key is never reconciled by two workers at once (the queue's exclusivity); a change that
  arrives meanwhile is reconciled again afterwards.
- A worker never dies: every exception from a reconcile is recorded and handled as above. A
  reconcile that exceeds ``reconcile_timeout`` is cancelled and counts as an error.
- A blocking reconciler (a plain ``def``) runs in the controller's pool of
  ``max_concurrent_reconciles`` threads with a synchronous context; past its timeout its
  context refuses further calls, and its worker keeps the key until the thread ends
  (Python cannot interrupt a thread), reported by ``setpoint_reconcile_threads_overdue``
  and a log line. See :mod:`setpoint.controller.blocking`.
- A traceback is logged once per distinct error: identical repeats are counted, with an
  error-level line at the 2nd, 4th, 8th, ... repeat and debug lines in between.
- ``ctx.reader`` never returns an object older than this process's own last write of it
  made through ``ctx.client`` (see :mod:`setpoint.cache.consistency`).

Shutdown
--------
``stop(timeout)`` stops intake (handlers removed, the queue shut down), waits up to
``timeout`` seconds for in-flight reconciles to finish, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import orjson

from setpoint.api.clock import Clock, LoopClock, TimerHandle
from setpoint.api.conditions import validate_condition
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.jsonvalues import copy_json
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, generation_of, key_of
from setpoint.api.runnable import RunnableGroup
from setpoint.api.validation import is_qualified_name
from setpoint.cache.cache import Cache, decode_typed
from setpoint.cache.errors import CacheError
from setpoint.cache.informer import HandlerRegistration
from setpoint.cache.store import Store, changes_applied, marking_reads
from setpoint.client.errors import ClientError, NotFound
from setpoint.client.preflight import AccessNeed
from setpoint.client.protocols import ApiClient
from setpoint.controller.blocking import ReconcileThreads, is_blocking
from setpoint.controller.finalizers import CleanupFailed, Finalizers
from setpoint.controller.handlers import (
    EnqueueHandler,
    Source,
    check_keys,
    controller_owner_key,
    mapper_takes_reader,
)
from setpoint.controller.health import Outcome, apply_outcome, holds_outcome
from setpoint.controller.pause import (
    PAUSED_ANNOTATION,
    PAUSED_CONDITION,
    PAUSED_EVENT_REASON,
    PAUSED_MESSAGE,
    PAUSED_REASON,
    RESUMED_EVENT_REASON,
    pause_of,
)
from setpoint.controller.predicates import Predicate
from setpoint.controller.ratelimit import RateLimiterOptions
from setpoint.controller.reconcile import (
    Context,
    ControllerError,
    EventRecorder,
    ReconcileError,
    ReconcileFunc,
    ReconcilerLike,
    ReconcileTimeout,
    Result,
    SyncReconcileFunc,
    TerminalError,
)
from setpoint.controller.reporting import ConditionReporter
from setpoint.controller.sources import ExternalSource, SourceTarget
from setpoint.controller.terminal import (
    STALLED_CONDITION,
    fingerprint,
    message_of,
    terminal_reason,
)
from setpoint.controller.workqueue import ShutDown, WorkQueue, WorkQueueOptions
from setpoint.observability.logging import Logger, RepeatedErrors, get_logger
from setpoint.observability.metrics import Metrics
from setpoint.observability.runtime import ReconcileInfo, reconcile_scope
from setpoint.observability.tracing import MAX_LINKS, ReconcileSpan, active_tracing

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

__all__ = [
    "Controller",
    "ControllerError",
    "ControllerOptions",
    "KeyGate",
    "as_reconcile_function",
    "validate_name",
]

DEFAULT_CACHE_SYNC_TIMEOUT = 120.0
"""Seconds a controller waits for its informers when neither it nor a manager says."""


def validate_name(name: str) -> str:
    """Check a controller name: it labels metrics and logs, and names the work queue."""
    # The name part of a qualified name: it must fit a metrics label and a Lease name part.
    if not isinstance(name, str) or "/" in name or not is_qualified_name(name):
        raise ControllerError(
            f"controller name {name!r} is not valid: use 1-63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit (it becomes a metrics label)"
        )
    return name


@dataclass(frozen=True, kw_only=True)
class ControllerOptions:
    """How a controller runs. Every default is documented on its attribute."""

    max_concurrent_reconciles: int = 1
    """Workers reconciling in parallel (different keys only; a key is never reconciled
    twice at once). Default 1, as controller-runtime. A blocking (plain ``def``)
    reconciler gets a pool of this many threads."""

    reconcile_timeout: float | None = 300.0
    """Seconds one reconcile may take before it is cancelled and retried with backoff.
    Default 300; ``None`` disables the limit (not recommended: a hung await then holds a
    worker forever). A blocking reconciler's thread cannot be interrupted: past the
    timeout its context's calls raise ``CancelledError`` and the worker waits for the
    thread (see :mod:`setpoint.controller.blocking`)."""

    needs_leader_election: bool = True
    """Whether the controller runs only in the replica holding the leader lease. Default
    ``True``: two replicas reconciling the same objects would fight."""

    cache_sync_timeout: float | None = None
    """Seconds ``start()`` waits for the informers of the watched kinds to sync. ``None``:
    the manager's ``ManagerOptions.cache_sync_timeout`` for a controller built with
    ``manager.controller(...)`` (``setpoint run --cache-sync-timeout``), else 120."""

    read_after_write_timeout: float | None = None
    """Seconds ``ctx.reader`` waits for the cache to reflect this process's own writes.
    ``None``: the cache's ``read_after_write_timeout`` (10 s by default)."""

    rate_limits: RateLimiterOptions = field(default_factory=RateLimiterOptions)
    """Retry backoff: per key 5 ms doubling to 1000 s, max-of a 10 qps (burst 100) bucket
    across the controller, as controller-runtime."""

    mapper_timeout: float = 30.0
    """Seconds an async ``watches`` mapper may take per event before it is abandoned."""

    terminal_condition: str | None = STALLED_CONDITION
    """The status condition a terminal error sets on the ``for_`` object (when its kind has
    a status subresource) and the next successful reconcile removes; see
    :mod:`setpoint.controller.terminal`. Default ``"Stalled"``; ``None``: no condition
    (the Event and the log line remain)."""

    fair_by: Literal["namespace"] | Callable[[ObjectKey], Hashable] | None = None
    """Share the workers fairly between groups of objects (kubernetes#25744): ready keys of
    one priority are handed out round-robin between groups, each group first-in first-out,
    so a namespace with 10,000 queued objects cannot starve one with 10. ``"namespace"``
    groups by ``key.namespace``; a function groups by what it returns for each
    :class:`~setpoint.api.keys.ObjectKey` (called once per key becoming ready: keep it cheap).
    Default ``None``: one first-in first-out order, as controller-runtime (decision 0030
    says why fairness is not the default)."""

    kstatus_conditions: bool = False
    """Maintain ``status.observedGeneration`` and the ``Ready``, ``Reconciling`` and
    ``Stalled`` conditions that Argo CD, Flux and kstatus read, from each reconcile's outcome
    (on ``for_`` objects of a kind with a status subresource; see
    :mod:`setpoint.controller.health`). Default ``False``; the scaffold turns it on. Needs
    ``terminal_condition="Stalled"``, kstatus' name."""

    clock: Clock | None = None
    """Where the work queue (``Result(requeue_after=...)`` requeues, retry backoff) and the
    reconcile timeout read time and set timers (a test seam). ``None``: the manager's
    ``ManagerOptions.clock`` for a controller built with ``manager.controller(...)``, else
    the running loop's clock."""

    def __post_init__(self) -> None:
        if isinstance(self.max_concurrent_reconciles, bool) or self.max_concurrent_reconciles < 1:
            raise ValueError(
                f"ControllerOptions.max_concurrent_reconciles must be >= 1, "
                f"not {self.max_concurrent_reconciles!r}"
            )
        for name in ("reconcile_timeout", "read_after_write_timeout"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise ValueError(
                    f"ControllerOptions.{name} must be a number of seconds > 0, or None"
                )
        if self.terminal_condition is not None:
            problems = validate_condition(self.terminal_condition, "True", "Reason")
            if problems:
                raise ValueError(
                    f"ControllerOptions.terminal_condition={self.terminal_condition!r} is not "
                    f"a condition type: {'; '.join(problems)}"
                )
        if isinstance(self.fair_by, str):
            if self.fair_by != "namespace":
                raise ValueError(
                    f"ControllerOptions.fair_by={self.fair_by!r}: the only named grouping is "
                    "'namespace'; pass a function of the ObjectKey for another"
                )
        elif self.fair_by is not None and not callable(self.fair_by):
            raise TypeError(
                f"ControllerOptions.fair_by must be 'namespace', a function of the ObjectKey "
                f"or None, not {type(self.fair_by).__name__}"
            )
        if self.kstatus_conditions and self.terminal_condition != STALLED_CONDITION:
            raise ValueError(
                "ControllerOptions.kstatus_conditions needs terminal_condition='Stalled' (the "
                f"condition kstatus reads as failed), not {self.terminal_condition!r}"
            )
        sync = self.cache_sync_timeout
        if (sync is not None and sync <= 0) or self.mapper_timeout <= 0:
            raise ValueError(
                "ControllerOptions: cache_sync_timeout and mapper_timeout must be > 0 seconds"
            )


def _namespace_of(key: ObjectKey) -> str:
    """The group of ``ControllerOptions(fair_by="namespace")``."""
    return key.namespace


@runtime_checkable
class KeyGate(Protocol):
    """Decides, right before each reconcile, whether this process may reconcile a key.

    Sharding's hook (decision 0011): a replica reconciles only the keys of its own shard, and
    stops admitting a key the moment it is asked to hand the object over. The controller
    calls :meth:`admits` in the worker that took the key, with no ``await`` between the call
    and the start of the reconcile, so once ``admits`` turns false for a key, no reconcile of
    it starts; :meth:`Controller.holds` tells when the last one has ended.
    """

    def admits(self, key: ObjectKey) -> bool:
        """Whether ``key`` may be reconciled now; a key refused is dropped (not retried)."""
        ...


# Exceptions that are "returned errors" in controller-runtime's terms: failures a reconcile
# meets in normal operation. Anything else escaping a reconcile is a bug (a Go panic).
_EXPECTED: tuple[type[BaseException], ...] = (ReconcileError, ClientError, CacheError, TimeoutError)


def as_reconcile_function(reconciler: ReconcilerLike) -> ReconcileFunc | SyncReconcileFunc:
    """The function a reconciler stands for (its ``reconcile`` method, or itself).

    An ``async def`` is awaited on the event loop; a plain ``def`` (:func:`is_blocking`) runs
    in the controller's threads (:mod:`setpoint.controller.blocking`).

    Raises:
        ControllerError: it is neither an object with ``reconcile`` nor a callable.

    """
    method = getattr(reconciler, "reconcile", None)
    if method is not None and callable(method):
        function: Any = method
    elif callable(reconciler):
        function = reconciler
    else:
        raise ControllerError(
            f"{reconciler!r} is not a reconciler: pass an object with a reconcile(ctx, "
            "request) method, or a function (ctx, request), 'async def' or plain 'def'"
        )
    return function  # type: ignore[no-any-return]


class Controller:
    """Reconciles the keys its sources enqueue. Build it with :class:`Builder`.

    See the module docstring for the flow, the outcome table and the guarantees.
    """

    def __init__(
        self,
        name: str,
        reconciler: ReconcilerLike,
        *,
        client: ApiClient,
        cache: Cache,
        sources: Iterable[Source],
        predicates: Iterable[Predicate] = (),
        options: ControllerOptions | None = None,
        metrics: Metrics | None = None,
        recorder: EventRecorder | None = None,
        for_kind: GroupVersionKind | None = None,
        finalizers: Finalizers | None = None,
        cluster: str | None = None,
        external: Iterable[ExternalSource] = (),
    ) -> None:
        self._name = validate_name(name)
        self._cluster = cluster
        self._reconcile: Any = as_reconcile_function(reconciler)
        self._blocking = is_blocking(self._reconcile)
        self._reconciler = reconciler
        self._live = client
        self._cache = cache
        self._sources = tuple(sources)
        self._external = tuple(external)
        if not self._sources and not self._external:
            raise ControllerError(
                f"controller {name!r} watches nothing: add for_(Kind), owns(Kind), "
                "watches(Kind, mapper) or watches_source(source) before build()"
            )
        if for_kind is None and any(s.role == "owns" for s in self._sources):
            raise ControllerError(
                f"controller {name!r} uses owns() without for_(): owns() enqueues the owner, "
                "whose kind for_() names"
            )
        if finalizers is not None and finalizers.kind != for_kind:
            raise ControllerError(
                f"controller {name!r}: finalizers are for {finalizers.kind.kind} but the "
                f"controller reconciles {for_kind.kind if for_kind else 'no for_() kind'}; "
                "finalizer handlers need for_() of the kind they finalize"
            )
        self._finalizers = finalizers
        self._predicates = tuple(predicates)
        self._options = options if options is not None else ControllerOptions()
        self._metrics = metrics
        # Labelled series, looked up once: prometheus_client's labels() costs microseconds on
        # every call, and a reconcile touches four series.
        self._series: dict[tuple[str, ...], Any] = {}
        self._recorder = recorder
        self._for_kind = for_kind
        self._queue: WorkQueue[ObjectKey] = WorkQueue(
            self._name,
            WorkQueueOptions(rate_limits=self._options.rate_limits),
            metrics=metrics,
            clock=self._options.clock,
            fair_by=_namespace_of
            if self._options.fair_by == "namespace"
            else self._options.fair_by,
        )
        self._client = cache.tracking_client(client)
        self._reader = cache.reader(read_after_write_timeout=self._options.read_after_write_timeout)
        bound: dict[str, Any] = {"controller": self._name}
        if for_kind is not None:
            bound["gvk"] = str(for_kind)
        if cluster is not None:
            bound["cluster"] = cluster
        self._log = get_logger("setpoint.controller", **bound)
        self._registrations: list[HandlerRegistration] = []
        self._workers: list[asyncio.Task[None]] = []
        self._mapper_tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self._stopping = False
        self._failure: BaseException | None = None
        self._active = 0
        self._terminal: dict[ObjectKey, Hashable] = {}
        self._links: dict[ObjectKey, list[SpanContext]] = {}
        self._repeats = RepeatedErrors()
        self._conditions = ConditionReporter(for_kind) if for_kind is not None else None
        # The terminal condition's type as JSON: absent from a stored object's bytes, the
        # object cannot carry the condition, and a success need not decode it to check.
        terminal = self._options.terminal_condition
        self._condition_json = orjson.dumps(terminal) if terminal is not None else b""
        # kstatus conditions (ControllerOptions.kstatus_conditions), until the kind's status
        # schema is seen to prune them.
        self._health = self._options.kstatus_conditions and self._conditions is not None
        # Keys this process has seen paused (its Event was written): the Event is written once.
        self._paused_keys: set[ObjectKey] = set()
        self._gate: KeyGate | None = None
        self._for_store_: Store | None = None
        timeout = self._options.reconcile_timeout
        self._deadlines = _Deadlines(timeout, self._options.clock) if timeout is not None else None
        # Blocking reconcilers and cleanups run in a pool of one thread per worker.
        self._threads: ReconcileThreads | None = None
        if self._blocking or (finalizers is not None and finalizers.blocking):
            self._threads = ReconcileThreads(
                self._name, self._options.max_concurrent_reconciles, metrics=metrics
            )
            if finalizers is not None:
                finalizers.use_threads(self._threads)

    # -- Runnable ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"controller/<name>"``, for the manager's logs and errors."""
        return f"controller/{self._name}"

    @property
    def controller_name(self) -> str:
        """The controller's own name (the ``controller`` label of its metrics and logs)."""
        return self._name

    @property
    def group(self) -> RunnableGroup:
        """:attr:`RunnableGroup.CONTROLLERS`: started after the caches, stopped first."""
        return RunnableGroup.CONTROLLERS

    @property
    def needs_leader_election(self) -> bool:
        """From :attr:`ControllerOptions.needs_leader_election` (default ``True``)."""
        return self._options.needs_leader_election

    @property
    def options(self) -> ControllerOptions:
        """The controller's options."""
        return self._options

    @property
    def queue(self) -> WorkQueue[ObjectKey]:
        """The work queue (for introspection and tests; enqueue with :meth:`enqueue`)."""
        return self._queue

    @property
    def active_workers(self) -> int:
        """Reconciles running right now."""
        return self._active

    def failure(self) -> BaseException | None:
        """The error that killed a worker (never expected: workers catch everything)."""
        return self._failure

    @property
    def idle(self) -> bool:
        """Nothing ready to reconcile and nothing reconciling (delayed re-queues may wait)."""
        return self._queue.ready_count == 0 and self._queue.in_flight_count == 0

    async def wait_idle(self, *, timeout: float = 30.0, settle: float = 0.5) -> None:
        """Wait until the controller has been :attr:`idle` for ``settle`` seconds.

        After a reconcile writes, the events of its own writes queue the key again a
        moment later; ``settle`` covers that gap, so "idle" means the controller has
        caught up with the world, not that it paused between two reconciles. For tests
        (a drift test must not have its edit repaired by a reconcile already queued) and
        for benchmarks.

        Raises:
            TimeoutError: not idle for ``settle`` seconds within ``timeout``, naming the
                queue's state.

        """
        deadline = time.monotonic() + timeout
        quiet_since: float | None = None
        while True:
            now = time.monotonic()
            if self.idle:
                quiet_since = quiet_since if quiet_since is not None else now
                if now - quiet_since >= settle:
                    return
            else:
                quiet_since = None
            if now >= deadline:
                raise TimeoutError(
                    f"controller {self._name!r} was not idle for {settle}s within {timeout}s "
                    f"(ready={self._queue.ready_count}, "
                    f"in flight={self._queue.in_flight_count})"
                )
            await asyncio.sleep(min(0.05, settle / 4))

    @property
    def finalizers(self) -> tuple[str, ...]:
        """The finalizers this controller handles (``Builder.finalizer``), in registration order.

        The manager advertises them on its leader-election Lease for ``setpoint doctor``.
        """
        return self._finalizers.names if self._finalizers is not None else ()

    @property
    def watched_kinds(self) -> tuple[GroupVersionKind, ...]:
        """Every kind the controller watches (its sources' kinds, without repeats)."""
        kinds = [s.kind for s in self._sources]
        if self._finalizers is not None:
            kinds.append(self._finalizers.kind)
        return tuple(dict.fromkeys(kinds))

    def access_needs(self) -> list[AccessNeed]:
        """What the controller's informers need, checked by the manager before it starts.

        ``list`` and ``watch`` on every watched kind, in each namespace its cache watches.
        """
        needs: list[AccessNeed] = []
        why = f"controller {self._name!r}"
        for kind in self.watched_kinds:
            namespaces = self._cache.options.informer_options(kind).namespaces
            needs.extend(AccessNeed(kind, namespace=ns, why=why) for ns in namespaces or (None,))
        return needs

    @property
    def cache(self) -> Cache:
        """The cache the controller's sources read (the manager's shared cache, usually)."""
        return self._cache

    @property
    def for_kind(self) -> GroupVersionKind | None:
        """The kind the controller reconciles (``for_``), if it has one."""
        return self._for_kind

    def set_key_gate(self, gate: KeyGate | None) -> None:
        """Reconcile only keys ``gate`` admits (see :class:`KeyGate`); ``None`` removes it.

        The manager sets it on sharded controllers before they start.

        Raises:
            ControllerError: the controller has started already.

        """
        if self._started:
            raise ControllerError(
                f"controller {self._name!r}: set the key gate before the controller starts"
            )
        self._gate = gate

    def holds(self, key: ObjectKey) -> bool:
        """Whether a worker is reconciling ``key`` right now (it was taken and not done)."""
        return self._queue.is_processing(key)

    def enqueue(self, key: ObjectKey, *, after: float = 0.0) -> None:
        """Ask for a reconcile of ``key`` (now, or ``after`` seconds from now)."""
        if after > 0:
            self._queue.add_after(key, after)
        else:
            self._queue.add(key)

    async def start(self) -> None:
        """Watch the sources, wait for their informers to sync, then start the workers.

        Raises:
            ControllerError: already started, stopped, or the cache is not started.
            KindNotServed: a watched kind is not served.
            CacheSyncTimeout: a watched kind's informer did not sync within
                ``cache_sync_timeout``.

        """
        if self._started or self._stopping:
            raise ControllerError(
                f"controller {self._name!r} was already started; build a new controller to "
                "start again"
            )
        if not self._cache.started:
            raise ControllerError(
                f"controller {self._name!r}: start the cache before the controller (the "
                "manager does this in order)"
            )
        self._started = True
        owner_namespaced = True
        if self._for_kind is not None and any(s.role == "owns" for s in self._sources):
            owner_namespaced = (await self._live.resource_info(self._for_kind)).namespaced
        informers = []
        try:
            for source in self._sources:
                informer = self._cache.informer(source.watched)
                informers.append(informer)
                handler = EnqueueHandler(
                    source,
                    self._predicates,
                    map_keys=self._key_mapper(source, owner_namespaced),
                    add=self._add,
                    spawn=self._spawn_mapping,
                    log=self._log,
                    controller=self._name,
                    link=self._remember_event,
                )
                self._registrations.append(informer.add_handler(handler))
            if self._finalizers is not None:
                # Feeds the pending-objects gauges from the for_ kind's events.
                informer = self._cache.informer(self._finalizers.kind)
                self._registrations.append(informer.add_handler(self._finalizers.pending))
            timeout = self._options.cache_sync_timeout or DEFAULT_CACHE_SYNC_TIMEOUT
            async with asyncio.timeout(timeout + 1):
                await asyncio.gather(*(i.wait_for_sync(timeout) for i in informers))
        except BaseException:
            for registration in self._registrations:
                registration.remove()
            self._registrations.clear()
            self._queue.shutdown()
            raise
        if self._metrics is not None:
            self._metrics.init_controller(
                self._name, max_concurrent_reconciles=self._options.max_concurrent_reconciles
            )
            # Read when scraped rather than changed twice per reconcile (a locked increment
            # each); weakly, so the registry does not keep a stopped controller alive.
            this = weakref.ref(self)

            def active() -> float:
                controller = this()
                return 0.0 if controller is None else float(controller._active)

            self._series_of("active_workers").set_function(active)
        if self._finalizers is not None:
            self._finalizers.publish_metrics()
        for index in range(self._options.max_concurrent_reconciles):
            task = asyncio.create_task(self._worker(), name=f"{self.name} worker {index}")
            task.add_done_callback(self._worker_done)
            self._workers.append(task)
        await self._start_external()
        self._log.info(
            "Controller started",
            workers=self._options.max_concurrent_reconciles,
            sources=[f"{s.role}:{s.kind.kind}" for s in self._sources]
            + [f"source:{s.name}" for s in self._external],
        )

    async def stop(self, timeout: float) -> None:
        """Stop intake, drain in-flight reconciles for up to ``timeout`` s, then cancel them."""
        if self._stopping:
            return
        self._stopping = True
        for source in self._external:
            try:
                await source.stop()
            except Exception:
                self._log.exception("Stopping an external source failed", source=source.name)
        for registration in self._registrations:
            registration.remove()
        self._registrations.clear()
        for task in list(self._mapper_tasks):
            task.cancel()
        deadline = time.monotonic() + max(0.0, timeout)
        drained = await self._queue.shutdown_with_drain(max(0.0, timeout))
        if not drained:
            self._log.warning(
                "Reconciles still running at the stop deadline; cancelling them",
                in_flight=self._queue.in_flight_count,
                timeout=timeout,
            )
        if self._threads is not None:
            self._threads.close()  # cancelled workers stop waiting for their threads
        for task in self._workers:
            if not drained:
                task.cancel()
        if self._workers:
            remaining = max(0.1, deadline - time.monotonic())
            await asyncio.wait(self._workers, timeout=remaining)
        if self._deadlines is not None:
            self._deadlines.close()
        if self._threads is not None:
            self._threads.shutdown()
        if self._finalizers is not None:
            self._finalizers.unpublish_metrics()
        if self._started:
            self._log.info("Controller stopped", drained=drained)

    # -- sources ---------------------------------------------------------------------------------

    async def _start_external(self) -> None:
        """Start the external sources (``Builder.watches_source``) on this controller's queue."""
        if not self._external:
            return

        def keys() -> Iterable[ObjectKey]:
            store = self._for_store()
            return () if store is None else list(store.keys())

        target = SourceTarget(
            controller=self._name,
            add=self._queue_add,
            ready_count=lambda: self._queue.ready_count,
            keys=keys,
            clock=self._options.clock if self._options.clock is not None else LoopClock(),
            log=self._log,
            metrics=self._metrics,
        )
        for source in self._external:
            await source.start(target)

    def _queue_add(self, key: ObjectKey, priority: int) -> None:
        self._queue.add(key, priority=priority)

    def _key_mapper(self, source: Source, owner_namespaced: bool) -> Any:
        if source.role == "for":

            def own_key(obj: JsonObject) -> tuple[ObjectKey]:
                return (key_of(obj),)

            return own_key
        if source.role == "owns":
            owner = self._for_kind
            assert owner is not None  # checked in __init__

            def owner_key(obj: JsonObject) -> tuple[ObjectKey, ...]:
                key = controller_owner_key(obj, owner, owner_namespaced=owner_namespaced)
                return () if key is None else (key,)

            return owner_key
        mapper = source.mapper
        assert mapper is not None
        typed = source.typed
        where = f"the watches({source.kind.kind}) mapper of controller {self._name!r}"

        reader = self._reader if mapper_takes_reader(mapper) else None

        def mapped(obj: JsonObject) -> Iterable[ObjectKey] | Awaitable[Iterable[ObjectKey]]:
            arg = decode_typed(typed, copy_json(obj)) if typed is not None else obj
            result = mapper(arg) if reader is None else mapper(arg, reader)  # type: ignore[call-arg]
            if inspect.isawaitable(result):
                return _checked_later(result, where)
            return check_keys(result, where)

        return mapped

    def _add(self, key: ObjectKey, priority: int) -> None:
        # Called by the sources' handlers while the informer delivers the event, right after
        # the event's change reached the store: the count of applied changes stamps it.
        self._queue.add(key, priority=priority, stamp=changes_applied())

    def _spawn_mapping(self, keys: Awaitable[Iterable[ObjectKey]], priority: int) -> None:
        if self._stopping:
            close = getattr(keys, "close", None)
            if close is not None:
                close()
            return

        async def run() -> None:
            try:
                async with asyncio.timeout(self._options.mapper_timeout):
                    resolved = await keys
                for key in resolved:
                    self._queue.add(key, priority=priority)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log.exception("An async watches mapper failed; the event is dropped")

        task = asyncio.create_task(run(), name=f"{self.name} mapper")
        self._mapper_tasks.add(task)
        task.add_done_callback(self._mapper_tasks.discard)

    # -- workers -----------------------------------------------------------------------------

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()

    async def _worker(self) -> None:
        while True:
            try:
                key, priority = await self._queue.get_with_priority()
            except ShutDown:
                return
            seen: int | None = None
            try:
                seen = await self._process(key, priority)
            finally:
                self._queue.done(key, seen=seen)

    def _context(self, key: ObjectKey) -> Context:
        reconcile_id = _reconcile_id()
        log: Logger = self._log.bind(
            namespace=key.namespace, name=key.name, reconcile_id=reconcile_id
        )
        return Context(
            request=key,
            reconcile_id=reconcile_id,
            log=log,
            client=self._client,
            reader=self._reader,
            recorder=self._recorder,
            controller=self._name,
            gvk=self._for_kind,
            cluster=self._cluster,
        )

    def _for_store(self) -> Store | None:
        """The store of the ``for_`` kind's informer (a cache never replaces either)."""
        store = self._for_store_
        if store is None and self._for_kind is not None:
            store = self._for_store_ = self._cache.informer(self._for_kind).store
        return store

    def _snapshot(self, key: ObjectKey) -> bytes | JsonObject | None:
        """The ``for_`` object's stored form now, not decoded (see :meth:`Store.snapshot`)."""
        store = self._for_store()
        return None if store is None else store.snapshot(key)

    async def _process(self, key: ObjectKey, priority: int) -> int | None:
        """Reconcile ``key`` once; return what it saw (see below) if it succeeded.

        The return value is the cache's count of applied changes at the reconcile's first
        cache read (``None`` if it failed or read nothing from the cache): events that queued
        the key again while it ran, and whose changes were applied by then, were seen, so
        the queue drops them rather than reconciling again for nothing (decision 0015).
        """
        gate = self._gate
        if gate is not None and not gate.admits(key):
            # Not ours (another shard's, or being handed over): drop it, with its backoff.
            self._queue.forget(key)
            self._links.pop(key, None)
            return None
        # The stored object as this reconcile starts (its immutable encoded form, decoded
        # only when a terminal error needs its fingerprint).
        seen = self._snapshot(key)
        if seen is not None and (
            key in self._paused_keys or type(seen) is not bytes or _PAUSE_BYTES in seen
        ):
            # Paused before, or the annotation's name is in the object (or in the message
            # of the condition a pause left): one substring search in the common case.
            if await self._paused(key, seen):
                return None
        elif seen is None:
            self._paused_keys.discard(key)  # gone
        if key in self._terminal:
            if self._terminal[key] == _fingerprint_of(seen):
                # Failed terminally, and nothing that could fix it changed since.
                self._queue.forget(key)
                return None
            del self._terminal[key]
        ctx = self._context(key)
        metrics = self._metrics
        self._active += 1  # active_workers reads it when scraped
        started = time.monotonic()
        info = ReconcileInfo(self._name, key.namespace, key.name, ctx.reconcile_id, started)
        tracing = active_tracing()
        links = self._links.pop(key, ()) if self._links else ()
        traced: contextlib.AbstractContextManager[ReconcileSpan | None] = (
            tracing.reconcile(
                controller=self._name,
                namespace=key.namespace,
                name=key.name,
                reconcile_id=ctx.reconcile_id,
                links=links,
            )
            if tracing is not None
            else contextlib.nullcontext()
        )
        read: int | None = None
        with traced as span:
            try:
                with reconcile_scope(info), marking_reads() as reads:
                    result = await self._run(ctx, key)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the controller is stopping
                error = ReconcileError("the reconcile was cancelled")
                if span is not None:
                    span.failed(error)
                self._failed(ctx, key, priority, error)
                if self._health:
                    await self._report_health(ctx, key, seen, Outcome.RETRYING, error)
            except Exception as exc:
                if span is not None:
                    span.failed(exc)
                subject = (self._for_kind, key) if self._for_kind is not None else None
                reason = None if isinstance(exc, CleanupFailed) else terminal_reason(exc, subject)
                if reason is not None:
                    await self._terminal_failure(ctx, key, seen, exc, reason)
                else:
                    self._failed(ctx, key, priority, exc)
                    if self._health and not isinstance(exc, CleanupFailed):
                        await self._report_health(ctx, key, seen, Outcome.RETRYING, exc)
            else:
                read = reads.first
                self._queue.forget(key)
                if self._health:
                    await self._report_health(ctx, key, seen, Outcome.SUCCEEDED)
                else:
                    await self._clear_stalled(ctx, key)
                if result.requeue_after is not None:
                    self._queue.add_after(key, result.requeue_after, priority=priority)
                    self._count("requeue_after")
                else:
                    self._count("success")
                if span is not None:
                    span.result(
                        "success" if result.requeue_after is None else "requeue_after",
                        result.requeue_after,
                    )
                if self._log.is_enabled_for(logging.DEBUG):  # skip the arguments' cost
                    ctx.log.debug(
                        "Reconcile finished",
                        seconds=round(time.monotonic() - started, 6),
                        requeue_after=result.requeue_after,
                    )
            finally:
                self._active -= 1
                if metrics is not None:
                    self._series_of("reconcile_time_seconds").observe(time.monotonic() - started)
        return read

    def _remember_event(self, key: ObjectKey, event: SpanContext) -> None:
        """Keep the watch event that queued ``key`` for its next reconcile span's links."""
        linked = self._links.setdefault(key, [])
        linked.append(event)
        if len(linked) > MAX_LINKS:
            del linked[0]

    async def _run(self, ctx: Context, key: ObjectKey) -> Result:
        if self._finalizers is not None:
            # Cleanups are bounded by their own deadlines, not by reconcile_timeout.
            handled = await self._finalizers.prepare(ctx)
            if handled is not None:
                return handled
        deadlines = self._deadlines
        if deadlines is None:
            outcome = await self._call(ctx, key)
        else:
            watch = deadlines.watch()
            try:
                outcome = await self._call(ctx, key)
            except asyncio.CancelledError as exc:
                if deadlines.release(watch):
                    raise ReconcileTimeout(
                        f"reconcile of {key} exceeded reconcile_timeout ({deadlines.timeout}s) "
                        "and was cancelled; it is retried with backoff"
                    ) from exc
                raise
            except BaseException:
                deadlines.release(watch)
                raise
            deadlines.release(watch)
        if outcome is None:
            return Result()
        if not isinstance(outcome, Result):
            raise TypeError(
                f"the reconciler of controller {self._name!r} returned {outcome!r}; return a "
                "Result (or None), and raise an exception to report a failure"
            )
        return outcome

    def _call(self, ctx: Context, key: ObjectKey) -> Awaitable[Result | None]:
        """The reconciler's call: awaited on the loop, or a blocking one in a thread."""
        threads = self._threads
        if self._blocking and threads is not None:
            timeout = self._options.reconcile_timeout
            return threads.call(self._reconcile, ctx, key, limit=f"reconcile_timeout ({timeout}s)")
        return self._reconcile(ctx, key)  # type: ignore[no-any-return]

    async def _terminal_failure(
        self,
        ctx: Context,
        key: ObjectKey,
        seen: bytes | JsonObject | None,
        exc: Exception,
        reason: str,
    ) -> None:
        """Record a terminal error: no retry until the object changes, an Event, a condition."""
        self._queue.forget(key)
        self._count("error", terminal=True)
        if self._for_kind is not None:
            self._terminal[key] = _fingerprint_of(seen)
        message = message_of(exc)
        repeats = self._repeats.seen(exc)
        traceback = isinstance(exc, TerminalError) and repeats == 1
        ctx.log.error(
            "Reconcile failed with a terminal error; not retried until the object changes",
            exc_info=exc if traceback else None,
            error=message,
            reason=reason,
        )
        kind = self._for_kind
        if kind is None:
            return
        try:
            obj = await ctx.reader.get(kind, key.name, namespace=key.namespace or None)
        except NotFound:
            return
        except (ClientError, CacheError) as error:
            ctx.log.warning("Could not read the object to report the error", error=str(error))
            return
        if ctx.recorder is not None:
            ctx.recorder.event(
                obj, "Warning", reason, f"{message} (retried when the object changes)"
            )
        condition = self._options.terminal_condition
        if self._health:
            await self._write_health(ctx, obj, seen, Outcome.STALLED, reason, message)
        elif condition is not None and self._conditions is not None:
            await self._conditions.set(ctx.client, obj, condition, reason, message, ctx.log)

    async def _report_health(
        self,
        ctx: Context,
        key: ObjectKey,
        seen: bytes | JsonObject | None,
        outcome: Outcome,
        error: BaseException | None = None,
    ) -> None:
        """Write the kstatus conditions for a reconcile's ``outcome`` (see ``_write_health``)."""
        reporter = self._conditions
        if reporter is None or seen is None:
            return
        try:
            obj = await ctx.reader.get(reporter.kind, key.name, namespace=key.namespace or None)
        except NotFound:
            return
        except (ClientError, CacheError) as problem:
            ctx.log.warning("Could not read the object to report its health", error=str(problem))
            return
        message = message_of(error) if error is not None else ""
        await self._write_health(ctx, obj, seen, outcome, "", message)

    async def _write_health(  # noqa: PLR0917 - private, one shape for both callers
        self,
        ctx: Context,
        obj: JsonObject,
        seen: bytes | JsonObject | None,
        outcome: Outcome,
        reason: str,
        message: str,
    ) -> None:
        """Report ``outcome`` for the generation the reconcile acted on (``seen``'s).

        Transitions only (:func:`~setpoint.controller.health.apply_outcome`); nothing for an
        object being deleted (kstatus reads it as Terminating) or of a kind without
        generations. A write the kind's status schema prunes turns the conditions off for
        this controller, with a warning, instead of rewriting them on every reconcile.
        """
        reporter = self._conditions
        if reporter is None or seen is None or not self._health:
            return
        generation = generation_of(Store.decode(seen))
        if generation <= 0 or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        stalled = self._options.terminal_condition or STALLED_CONDITION

        def mutate(current: JsonObject) -> None:
            apply_outcome(current, outcome, generation, stalled, reason, message)

        written = await reporter.update(
            ctx.client, obj, mutate, ctx.log, "Could not write the kstatus conditions"
        )
        if written is not None and not holds_outcome(written, generation):
            self._health = False
            ctx.log.warning(
                "The status schema dropped status.observedGeneration: kstatus conditions are "
                "off for this controller. Declare observedGeneration and conditions in the "
                "kind's status schema",
                kind=str(reporter.kind),
            )

    async def _paused(self, key: ObjectKey, snapshot: bytes | JsonObject) -> bool:
        """Whether ``key`` is paused for this controller; report a pause's start and end.

        Paused: the key's backoff is dropped, and the first time (per process) the pause is
        seen a ``Paused`` condition (kinds with a status subresource, when absent) and a
        Normal Event are written. Not paused (any more): a ``Paused`` condition setpoint set
        is removed. A paused object being deleted is not paused for a controller with
        finalizer handlers unless ``setpoint.dev/paused-deletion`` holds it, so its
        cleanups run.
        """
        cached = Store.decode(snapshot)
        pause = pause_of(cached)
        ours = _our_pause_condition(cached)
        if pause is None or not pause.applies_to(self._name):
            resumed = key in self._paused_keys
            self._paused_keys.discard(key)
            # The condition says "the annotation pauses a controller": while it pauses
            # another one (of the same kind, maybe), it stays.
            remove = ours and pause is None
            if resumed or remove:
                ctx = self._context(key)
                ctx.log.info("Pause ended; reconciling again")
                if remove and self._conditions is not None:
                    await self._conditions.remove(ctx.client, cached, PAUSED_CONDITION, ctx.log)
                if ctx.recorder is not None:
                    ctx.recorder.event(
                        cached, "Normal", RESUMED_EVENT_REASON, "Reconciliation resumed"
                    )
            return False
        deleting = bool((cached.get("metadata") or {}).get("deletionTimestamp"))
        if deleting and self._finalizers is not None and not pause.hold_deletion:
            return False  # the finalizer step runs the cleanups; reconcile is not called
        self._queue.forget(key)
        self._links.pop(key, None)
        first = key not in self._paused_keys
        if not first and ours:
            return True  # reported already: nothing to write
        self._paused_keys.add(key)
        ctx = self._context(key)
        if first:
            ctx.log.info("Object paused; not reconciled until the pause ends", pause=pause.value)
            if ctx.recorder is not None:
                ctx.recorder.event(
                    cached,
                    "Normal",
                    PAUSED_EVENT_REASON,
                    f"Controller {self._name} does not reconcile this object: "
                    f"{pause.describe()}; remove the annotation to resume",
                )
        if not ours and self._conditions is not None:
            await self._conditions.set(
                ctx.client, cached, PAUSED_CONDITION, PAUSED_REASON, PAUSED_MESSAGE, ctx.log
            )
        return True

    async def _clear_stalled(self, ctx: Context, key: ObjectKey) -> None:
        """After a success, remove the condition a terminal error set (if the cache shows it)."""
        condition = self._options.terminal_condition
        if condition is None or self._conditions is None:
            return
        stored = self._snapshot(key)
        if stored is None or (type(stored) is bytes and self._condition_json not in stored):
            return  # the condition's type appears nowhere in the object: nothing to clear
        cached = Store.decode(stored)
        status = cached.get("status")
        conditions = status.get("conditions") if isinstance(status, dict) else None
        if not isinstance(conditions, list) or not any(
            isinstance(c, dict) and c.get("type") == condition for c in conditions
        ):
            return
        try:
            obj = await ctx.reader.get(
                self._conditions.kind, key.name, namespace=key.namespace or None
            )
        except NotFound:
            return
        except (ClientError, CacheError) as error:
            ctx.log.warning("Could not read the object to clear its condition", error=str(error))
            return
        await self._conditions.remove(ctx.client, obj, condition, ctx.log)

    def _failed(self, ctx: Context, key: ObjectKey, priority: int, exc: BaseException) -> None:
        if isinstance(exc, CleanupFailed):
            # A cleanup has its own backoff (CleanupRetry), which also gates early events.
            panic = not isinstance(exc.cause, _EXPECTED)
            self._queue.add_after(key, exc.retry_after, priority=priority)
        else:
            panic = not isinstance(exc, _EXPECTED)
            self._queue.add_rate_limited(key, priority=priority)
        self._count("error", panic=panic)
        retries = self._queue.num_requeues(key)
        cause = exc.cause if isinstance(exc, CleanupFailed) else exc
        quiet = not panic and isinstance(cause, ClientError | CacheError | TimeoutError)
        message = (
            "Reconcile raised an unexpected exception (counted as a panic); retrying with backoff"
            if panic
            else "Reconcile failed; retrying with backoff"
        )
        error = f"{type(exc).__name__}: {exc}"
        if quiet:
            ctx.log.error(message, error=error, retries=retries)
            return
        # A traceback is printed the first time; identical repeats are counted instead.
        repeats = self._repeats.seen(exc)
        if repeats == 1:
            ctx.log.error(message, exc_info=exc, error=error, retries=retries)
        elif RepeatedErrors.worth_logging(repeats):
            ctx.log.error(
                f"{message} (the same error as before; its traceback was logged the first time)",
                error=error,
                retries=retries,
                repeats=repeats,
            )
        else:
            ctx.log.debug(message, error=error, retries=retries, repeats=repeats)

    def _count(self, result: str, *, terminal: bool = False, panic: bool = False) -> None:
        metrics = self._metrics
        if metrics is None:
            return
        self._series_of("reconcile_total", result).inc()
        if result == "error":
            metrics.reconcile_errors_total.labels(self._name).inc()
        if terminal:
            metrics.terminal_reconcile_errors_total.labels(self._name).inc()
        if panic:
            metrics.reconcile_panics_total.labels(self._name).inc()

    def _series_of(self, metric: str, *labels: str) -> Any:
        """The series of ``Metrics.<metric>`` for this controller (and ``labels``), cached."""
        key = (metric, *labels)
        series = self._series.get(key)
        if series is None:
            series = getattr(self._metrics, metric).labels(self._name, *labels)
            self._series[key] = series
        return series

    def __repr__(self) -> str:
        state = "stopping" if self._stopping else "running" if self._started else "new"
        return f"<Controller {self._name!r} {state} queue={self._queue!r}>"


class _Deadline:
    """One running reconcile's deadline (see :class:`_Deadlines`)."""

    __slots__ = ("at", "cancelling", "expired", "task")

    def __init__(self, task: asyncio.Task[Any], at: float) -> None:
        self.task = task
        self.at = at
        self.cancelling = task.cancelling()
        self.expired = False


class _Deadlines:
    """``reconcile_timeout`` for every running reconcile of a controller, with one timer.

    ``asyncio.timeout`` per reconcile schedules a timer and cancels it again every time
    (about 5 us, most reconciles take milliseconds). Every reconcile of a controller has the
    same timeout, so deadlines come in the order reconciles start: one timer, armed for the
    oldest running reconcile, serves them all. When it fires, each reconcile past its
    deadline has its task cancelled, exactly as ``asyncio.timeout`` does it (the
    cancellation is taken back with ``Task.uncancel`` when the reconcile ends, and told
    apart from a cancellation from outside, such as the controller stopping, by the task's
    cancel count); then the timer is armed again for the oldest one left.

    Time and the timer are ``clock``'s (the running loop's by default; a test passes a
    :class:`~setpoint.api.clock.ManualClock` and moves it).
    """

    __slots__ = ("_clock", "_running", "_timer", "timeout")

    def __init__(self, timeout: float, clock: Clock | None = None) -> None:
        self.timeout = timeout
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._running: dict[_Deadline, None] = {}  # in start order: the oldest first
        self._timer: TimerHandle | None = None

    def watch(self) -> _Deadline:
        """Start the deadline of the reconcile the current task runs."""
        task = asyncio.current_task()
        assert task is not None  # reconciles run in the controller's worker tasks
        entry = _Deadline(task, self._clock.now() + self.timeout)
        self._running[entry] = None
        if self._timer is None:
            self._timer = self._clock.call_at(entry.at, self._expire)
        return entry

    def release(self, entry: _Deadline) -> bool:
        """End ``entry``'s deadline; whether the reconcile ended because it had passed.

        True only when this timer's cancellation is the only one the task got: a
        cancellation from outside (the controller stopping) stays a cancellation.
        """
        self._running.pop(entry, None)
        if not entry.expired:
            return False
        return entry.task.uncancel() <= entry.cancelling

    def close(self) -> None:
        """Disarm the timer (the controller has stopped; its workers are done or cancelled)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._running.clear()

    def _expire(self) -> None:
        self._timer = None
        now: float | None = None
        for entry in list(self._running):
            now = self._clock.now() if now is None else now
            if entry.at > now:
                self._timer = self._clock.call_at(entry.at, self._expire)
                return
            del self._running[entry]
            if not entry.task.done():
                entry.expired = True
                entry.task.cancel()


def _reconcile_id() -> str:
    """A random version-4 UUID naming one reconcile in logs and traces.

    From Python's ``random`` rather than the OS's entropy (``uuid.uuid4`` makes a system call
    and a ``UUID`` object per reconcile): the id only has to be unique, it protects nothing.
    """
    h = f"{_random_bits(128) & _UUID4_CLEAR | _UUID4_SET:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_random_bits = random.getrandbits
_UUID4_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET = (0x4000 << 64) | (0x8000 << 48)


_PAUSE_BYTES = PAUSED_ANNOTATION.encode()


def _our_pause_condition(obj: JsonObject) -> bool:
    """Whether ``obj`` carries the ``Paused`` condition setpoint sets (not an author's own)."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") == PAUSED_CONDITION
        and c.get("reason") == PAUSED_REASON
        for c in conditions
    )


def _fingerprint_of(snapshot: bytes | JsonObject | None) -> Hashable:
    """:func:`fingerprint` of a store snapshot (``None``: the object was not stored)."""
    return fingerprint(None if snapshot is None else Store.decode(snapshot))


async def _checked_later(keys: Awaitable[Any], where: str) -> list[ObjectKey]:
    return check_keys(await keys, where)
