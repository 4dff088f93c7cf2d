"""Optional controllers: a controller that runs only while the server serves its kinds.

::

    manager.controller("gizmo").for_(Gizmo).owns(kinds.ConfigMap).optional().build(reconcile)

A controller whose CustomResourceDefinition is not installed makes the manager's start-up
fail (``KindNotServed``), as in controller-runtime (controller-runtime#2589, #935). An
*optional* controller waits for it instead, and follows the CRD for as long as the manager
runs:

1. **Waiting.** The manager starts and is Ready; ``setpoint_controller_waiting{controller,
   kind}`` is 1 for each kind the server does not serve, the manager's Lease carries the
   ``setpoint.dev/waiting`` annotation ``setpoint doctor`` reads, and a log line says what
   waits for what. No informer of the missing kinds exists, so nothing keeps the cache from
   reporting itself synced.
2. **Starting.** CustomResourceDefinitions are watched metadata-only (one shared informer,
   names only): an added or changed CRD of a waited kind's group triggers a discovery check
   at once, and while kinds are missing discovery is checked again with backoff (0.5 s
   doubling to ``recheck_max``), since a CRD is served a moment after it is created. Once
   every watched kind is served, a new controller is built from the builder and started;
   its informers list, and it reconciles every object, as any controller on start.
3. **Stopping.** When the CRD of a watched kind is deleted (its DELETE event), intake stops,
   reconciles in flight drain for up to ``drain_timeout`` seconds, the informers of the
   deleted kinds are removed from the cache (``Cache.remove_informer``: watch closed,
   store and indexes released) and the controller's metrics series are dropped; then it
   waits again (step 1). Deletion is followed only once the CRD is gone: while the server
   deletes its objects, the controller still runs their finalizers' cleanups, without
   which the CRD would never go.

A controller is built anew for each served period (a :class:`~setpoint.controller.Controller`
runs once), so its queue, backoff and reported-state memory start empty each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from setpoint.api import kinds as builtin_kinds
from setpoint.api.clock import Clock, LoopClock
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, annotations_of, metadata_of
from setpoint.api.metadata import Metadata
from setpoint.api.runnable import RunnableGroup
from setpoint.cache.cache import Cache
from setpoint.cache.errors import CacheError
from setpoint.cache.informer import FuncHandler, HandlerRegistration, Informer
from setpoint.client.errors import ClientError, UnknownKind
from setpoint.client.preflight import AccessNeed
from setpoint.client.protocols import ApiClient
from setpoint.controller.controller import Controller, ControllerError
from setpoint.observability.logging import get_logger
from setpoint.observability.metrics import Metrics

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily

__all__ = [
    "WAITING_ANNOTATION",
    "WAITING_METRIC",
    "OptionalController",
    "drop_controller_series",
    "kind_label",
    "parse_waiting",
]

WAITING_METRIC: Final = "setpoint_controller_waiting"
"""The gauge an optional controller reports per watched kind: 1 while the kind is not served."""

WAITING_ANNOTATION: Final = "setpoint.dev/waiting"
"""The manager's Lease annotation listing the optional controllers waiting and for which kinds
(JSON ``{"<controller>": ["<kind>.<version>.<group>", ...]}``), for ``setpoint doctor``."""

_CRD_METADATA: Final = Metadata(builtin_kinds.CustomResourceDefinition)


def kind_label(gvk: GroupVersionKind) -> str:
    """``Gizmo.v1.test.setpoint.dev``: a kind as the waiting metric and annotation name it."""
    return f"{gvk.kind}.{gvk.version}.{gvk.group}" if gvk.group else f"{gvk.kind}.{gvk.version}"


class OptionalController:
    """A controller that starts when its kinds are served and stops when their CRDs go.

    Built by ``manager.controller(name)...optional().build(reconciler)``; see the module
    docstring for the states. It is a :class:`~setpoint.api.runnable.Runnable` of the
    ``CONTROLLERS`` group named ``controller/<name>`` like the controller it runs; its
    ``start`` returns at once, whether or not the kinds are served.

    Args:
        name: The controller's name.
        build: Makes a new, unstarted controller (called once per served period).
        kinds: The kinds to wait for (the controller's watched kinds).
        client: The live client (discovery).
        cache: The shared cache (the CRD informer; informers removed on deletion).
        metrics: Where the waiting gauge is reported and the series are dropped from.
        needs_leader_election: As the controller's option.
        clock: Time for the discovery rechecks (the running loop's by default).
        drain_timeout: Seconds in-flight reconciles may finish when a CRD is deleted.
        recheck_max: The longest wait between two discovery checks while kinds are missing.

    """

    def __init__(
        self,
        name: str,
        build: Callable[[], Controller],
        *,
        kinds: Iterable[GroupVersionKind],
        client: ApiClient,
        cache: Cache,
        metrics: Metrics | None = None,
        needs_leader_election: bool = True,
        clock: Clock | None = None,
        drain_timeout: float = 30.0,
        recheck_max: float = 30.0,
    ) -> None:
        if drain_timeout < 0 or recheck_max <= 0:
            raise ValueError("OptionalController: drain_timeout >= 0 and recheck_max > 0 seconds")
        self._name = name
        self._build = build
        self._kinds = tuple(dict.fromkeys(kinds))
        if not self._kinds:
            raise ControllerError(f"optional controller {name!r} watches no kind")
        self._groups = {k.group for k in self._kinds}
        self._client = client
        self._cache = cache
        self._metrics = metrics
        self._leader = needs_leader_election
        self._clock: Clock | None = clock
        self._drain_timeout = drain_timeout
        self._recheck_max = recheck_max
        self._log = get_logger("setpoint.controller", controller=name)
        # The CRDs' names, learnt once a kind was served: (group, kind) -> "<plural>.<group>".
        self._crd_names: dict[tuple[str, str], str] = {}
        self._waiting: tuple[GroupVersionKind, ...] = ()
        self._controller: Controller | None = None
        self._gone: set[tuple[str, str]] = set()
        self._gone_event = asyncio.Event()
        self._changed = asyncio.Event()
        self._running = asyncio.Event()
        self._idle = asyncio.Event()  # set while waiting for kinds, no controller running
        self._task: asyncio.Task[None] | None = None
        # A retirement in progress: shielded from the follower's cancellation, so a shutdown
        # that comes meanwhile waits for its drain instead of cutting it short.
        self._retiring: asyncio.Task[None] | None = None
        self._registration: HandlerRegistration | None = None
        self._stopping = False
        self.runs = 0
        """How many times a controller was started (a test and ``doctor`` aid)."""
        # Created now, so it starts (and syncs) with the cache, before the controllers.
        self._crds: Informer = cache.informer(_CRD_METADATA)
        if metrics is not None:
            _waiting_collector(metrics).add(self)

    # -- Runnable ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"controller/<name>"``, as the controller it runs."""
        return f"controller/{self._name}"

    @property
    def controller_name(self) -> str:
        """The controller's own name (the ``controller`` label of its metrics)."""
        return self._name

    @property
    def group(self) -> RunnableGroup:
        """:attr:`RunnableGroup.CONTROLLERS`."""
        return RunnableGroup.CONTROLLERS

    @property
    def needs_leader_election(self) -> bool:
        """As the controller's ``ControllerOptions.needs_leader_election``."""
        return self._leader

    @property
    def controller(self) -> Controller | None:
        """The controller running now; ``None`` while waiting."""
        return self._controller

    @property
    def kinds(self) -> tuple[GroupVersionKind, ...]:
        """The kinds this controller waits for and follows."""
        return self._kinds

    @property
    def waiting_for(self) -> tuple[GroupVersionKind, ...]:
        """The kinds not served at the last check (empty once the controller runs)."""
        return self._waiting

    @property
    def finalizers(self) -> tuple[str, ...]:
        """The running controller's finalizers (none while waiting: no object exists)."""
        return self._controller.finalizers if self._controller is not None else ()

    def access_needs(self) -> list[AccessNeed]:
        """``list`` and ``watch`` on CustomResourceDefinitions (the kinds' own come later)."""
        why = f"optional controller {self._name!r} follows its CRDs"
        return [AccessNeed(builtin_kinds.CustomResourceDefinition, why=why)]

    async def start(self) -> None:
        """Begin following the kinds; returns at once (the controller starts when served).

        Raises:
            ControllerError: started already.

        """
        if self._task is not None or self._stopping:
            raise ControllerError(f"optional controller {self._name!r} was started already")
        if self._clock is None:
            self._clock = LoopClock()
        self._registration = self._crds.add_handler(
            FuncHandler(add=self._crd_seen, update=self._crd_changed, delete=self._crd_deleted)
        )
        self._task = asyncio.create_task(self._follow(), name=f"{self.name} follower")

    async def stop(self, timeout: float) -> None:
        """Stop following; stop the running controller (draining up to ``timeout`` s)."""
        if self._stopping:
            return
        self._stopping = True
        if self._registration is not None:
            self._registration.remove()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._retiring is not None and not self._retiring.done():
            await asyncio.wait({self._retiring}, timeout=max(timeout, 0.0) + 0.5)
        self._running.clear()
        controller, self._controller = self._controller, None
        if controller is not None:
            await controller.stop(timeout)

    def failure(self) -> BaseException | None:
        """What ended the follower unexpectedly, or the running controller's failure."""
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                return error
        controller = self._controller
        return controller.failure() if controller is not None else None

    async def wait_running(self, timeout: float) -> Controller:
        """Wait until a controller runs (for tests); return it.

        Raises:
            TimeoutError: none runs within ``timeout`` seconds.

        """
        async with asyncio.timeout(timeout):
            await self._running.wait()
        assert self._controller is not None  # set before _running, cleared after it
        return self._controller

    async def wait_waiting(self, timeout: float) -> None:
        """Wait until no controller runs and the follower waits for a kind (for tests).

        Raises:
            TimeoutError: not waiting within ``timeout`` seconds.

        """
        async with asyncio.timeout(timeout):
            await self._idle.wait()

    # -- CRD events ---------------------------------------------------------------------------

    def _ours(self, crd: JsonObject) -> bool:
        name = str(metadata_of(crd).get("name") or "")
        return any(name.endswith(f".{group}") for group in self._groups if group)

    def _crd_seen(self, crd: JsonObject, _initial: bool) -> None:
        if self._ours(crd):
            self._changed.set()

    def _crd_changed(self, _old: JsonObject, new: JsonObject) -> None:
        self._crd_seen(new, False)

    def _crd_deleted(self, crd: JsonObject, _unknown: bool) -> None:
        name = str(metadata_of(crd).get("name") or "")
        gone = {gk for gk, crd_name in self._crd_names.items() if crd_name == name}
        if gone:
            self._gone |= gone
            self._gone_event.set()
            self._changed.set()

    # -- the follower ---------------------------------------------------------------------------

    async def _follow(self) -> None:
        await self._crds.wait_for_sync(self._cache.options.sync_timeout)
        delay = 0.5
        while True:
            missing = await self._missing()
            if missing:
                self._wait(missing)
                changed = await self._changed_within(delay)
                delay = 0.5 if changed else min(delay * 2, self._recheck_max)
                continue
            delay = 0.5
            if not await self._run_once():
                await self._changed_within(delay)

    async def _missing(self) -> tuple[GroupVersionKind, ...]:
        """The kinds the server does not serve now (discovery, and the CRDs seen deleted)."""
        missing: list[GroupVersionKind] = []
        crds = self._crds.store
        for kind in self._kinds:
            gk = (kind.group, kind.kind)
            known = self._crd_names.get(gk)
            if known is not None and ObjectKey("", known) not in crds:
                # Gone (discovery may still remember the kind: a hit is never refreshed).
                missing.append(kind)
                continue
            try:
                info = await self._client.resource_info(kind)
            except UnknownKind:
                missing.append(kind)
                continue
            except ClientError as error:
                self._log.warning("Cannot check whether a kind is served", error=str(error))
                missing.append(kind)
                continue
            crd = f"{info.plural}.{kind.group}"
            if ObjectKey("", crd) in crds:
                self._crd_names[gk] = crd
        return tuple(missing)

    def _wait(self, missing: tuple[GroupVersionKind, ...]) -> None:
        if missing != self._waiting:
            self._log.info(
                "Waiting for kinds to be served (their CRDs installed) before starting",
                waiting_for=[kind_label(k) for k in missing],
            )
        self._waiting = missing
        if self._controller is None:
            self._idle.set()

    async def _changed_within(self, seconds: float) -> bool:
        """Wait for a CRD event of our groups or ``seconds``; whether an event came."""
        clock = self._clock
        assert clock is not None  # set by start()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            self._changed.set()

        timer = clock.call_at(clock.now() + seconds, expire)
        try:
            await self._changed.wait()
        finally:
            timer.cancel()
        self._changed.clear()
        return not expired

    async def _run_once(self) -> bool:
        """Start a controller and run it until a CRD goes; whether it started."""
        self._waiting = ()
        self._idle.clear()
        self._gone.clear()
        self._gone_event.clear()
        controller = self._build()
        self._controller = controller
        try:
            await controller.start()
        except (CacheError, ClientError, TimeoutError) as error:
            # A kind served by discovery but not yet listable (a CRD just created), or gone
            # again meanwhile: retire what was created and check again.
            self._log.warning("Optional controller could not start; waiting", error=str(error))
            followed = {(k.group, k.kind) for k in self._kinds}
            unsynced = {
                (i.kind.group, i.kind.kind)
                for i in self._cache.informers()
                if not i.synced and (i.kind.group, i.kind.kind) in followed
            }
            await self._retire(controller, unsynced)
            return False
        self.runs += 1
        self._running.set()
        self._log.info("Optional controller started: its kinds are served", runs=self.runs)
        await self._gone_event.wait()
        gone = set(self._gone)
        self._log.info(
            "A CRD of the controller was deleted: stopping it",
            kinds=[f"{kind}.{group}" if group else kind for group, kind in sorted(gone)],
        )
        await self._retire(controller, gone)
        return True

    async def _retire(self, controller: Controller, gone: set[tuple[str, str]]) -> None:
        """Retire ``controller`` in a task of its own (see ``_retire_now``) and wait for it."""
        self._retiring = asyncio.create_task(
            self._retire_now(controller, gone), name=f"{self.name} retire"
        )
        await asyncio.shield(self._retiring)

    async def _retire_now(self, controller: Controller, gone: set[tuple[str, str]]) -> None:
        """Stop ``controller`` (draining), remove the gone kinds' informers, drop its series."""
        self._running.clear()
        await controller.stop(self._drain_timeout)
        for informer in self._cache.informers():
            if (informer.kind.group, informer.kind.kind) in gone:
                key = Metadata(informer.kind) if informer.metadata_only else informer.kind
                await self._cache.remove_informer(key)
        if self._metrics is not None:
            drop_controller_series(self._metrics, self._name)
        self._controller = None

    # -- reporting ------------------------------------------------------------------------------

    def waiting_samples(self) -> Iterator[tuple[str, float]]:
        """``(kind label, 1.0 or 0.0)`` per followed kind: 1 while it is not served."""
        waiting = set(self._waiting)
        for kind in self._kinds:
            yield kind_label(kind), 1.0 if kind in waiting else 0.0

    def __repr__(self) -> str:
        state = (
            "running"
            if self._controller is not None
            else f"waiting for {', '.join(kind_label(k) for k in self._waiting)}"
            if self._waiting
            else "new"
        )
        return f"<OptionalController {self._name!r} {state} runs={self.runs}>"


def parse_waiting(lease: Mapping[str, Any]) -> dict[str, list[str]]:
    """What a manager's Lease says its optional controllers wait for: ``{controller: [kind]}``.

    Empty when nothing waits, or the Lease does not carry a valid ``setpoint.dev/waiting``.
    """
    text = annotations_of(lease).get(WAITING_ANNOTATION)
    if not isinstance(text, str):
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(controller): [str(k) for k in kinds_]
        for controller, kinds_ in data.items()
        if isinstance(kinds_, list)
    }


def drop_controller_series(metrics: Metrics, controller: str) -> int:
    """Remove every series labelled ``controller=<controller>`` from ``metrics``; how many.

    A stopped optional controller's ``controller_runtime_*`` and ``workqueue_*`` series
    would otherwise stay at their last values (an ``active_workers`` gauge reading a dead
    controller, a depth that never drains) until the process ends.
    """
    removed = 0
    for metric in vars(metrics).values():
        remove_matching = getattr(metric, "remove_matching", None)
        if remove_matching is not None:
            removed += remove_matching("controller", controller)
    return removed


class _WaitingCollector:
    """``setpoint_controller_waiting`` of the optional controllers of one registry."""

    def __init__(self) -> None:
        self._controllers: weakref.WeakSet[OptionalController] = weakref.WeakSet()

    def add(self, controller: OptionalController) -> None:
        self._controllers.add(controller)

    def _family(self) -> GaugeMetricFamily:
        from prometheus_client.core import GaugeMetricFamily

        return GaugeMetricFamily(
            WAITING_METRIC,
            "1 while an optional controller waits for the kind to be served (its CRD "
            "installed), 0 while it is served.",
            labels=["controller", "kind"],
        )

    def describe(self) -> list[GaugeMetricFamily]:
        return [self._family()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for controller in list(self._controllers):
            for kind, value in controller.waiting_samples():
                family.add_metric([controller.controller_name, kind], value)
        yield family


_collectors: weakref.WeakKeyDictionary[Metrics, _WaitingCollector] = weakref.WeakKeyDictionary()


def _waiting_collector(metrics: Metrics) -> _WaitingCollector:
    """The waiting gauge's collector on ``metrics``' registry (registered on first use)."""
    collector = _collectors.get(metrics)
    if collector is None:
        collector = _collectors[metrics] = _WaitingCollector()
        metrics.registry.register(collector)
    return collector
