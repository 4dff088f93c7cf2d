"""``manager.controller(name)``: a controller builder pre-filled from a manager.

::

    manager.controller("tenant").for_(Tenant).owns(kinds.ConfigMap).build(reconcile)

``build`` fills in what ``Builder.build`` otherwise needs explicitly (the manager's client,
shared cache, metrics and an Event recorder reporting as the controller) and adds the
controller to the manager, as controller-runtime's ``NewControllerManagedBy(mgr)...Complete``
does. Any of the four can still be passed to override the manager's.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

from setpoint.api.runnable import Runnable
from setpoint.cache.cache import Cache
from setpoint.client.protocols import ApiClient
from setpoint.controller.builder import Builder
from setpoint.controller.controller import Controller
from setpoint.controller.reconcile import EventRecorder, ReconcilerLike
from setpoint.manager.optional import OptionalController
from setpoint.observability.metrics import Metrics

if TYPE_CHECKING:
    from setpoint.manager.options import ManagerOptions

__all__ = ["ManagedBuilder", "ManagerParts", "OptionalBuilder"]


class ManagerParts(Protocol):
    """What :class:`ManagedBuilder` takes from a manager (a :class:`~setpoint.manager.Manager`)."""

    @property
    def client(self) -> ApiClient:
        """The manager's client."""
        ...

    @property
    def cache(self) -> Cache:
        """The shared cache."""
        ...

    @property
    def metrics(self) -> Metrics:
        """The metrics controllers record into."""
        ...

    @property
    def options(self) -> ManagerOptions:
        """The manager's settings (controllers take its ``cache_sync_timeout``)."""
        ...

    @property
    def runnables(self) -> list[Runnable]:
        """Everything added so far (controllers are ``controller/<name>``)."""
        ...

    def add(self, runnable: Runnable) -> None:
        """Run ``runnable`` with the manager."""
        ...

    def event_recorder(self, reporting_controller: str) -> EventRecorder:
        """A recorder of Events reported by ``reporting_controller``."""
        ...


class ManagedBuilder(Builder):
    """A :class:`~setpoint.controller.Builder` whose ``build`` uses and feeds a manager."""

    def __init__(self, name: str, manager: ManagerParts) -> None:
        super().__init__(name)
        self._manager = manager

    def build(
        self,
        reconciler: ReconcilerLike,
        *,
        client: ApiClient | None = None,
        cache: Cache | None = None,
        metrics: Metrics | None = None,
        recorder: EventRecorder | None = None,
        cluster: str | None = None,
    ) -> Controller:
        """Make the controller with the manager's parts, add it to the manager, return it.

        Defaults: ``manager.client``, ``manager.cache``, ``manager.metrics`` and
        ``manager.event_recorder(<controller name>)``; a controller without its own
        ``cache_sync_timeout`` or ``clock`` takes the manager's.

        Raises:
            ControllerError: as :meth:`Builder.build`.
            ValueError: a controller with this name was added to the manager already.

        """
        manager = self._manager
        self._take_managers_defaults()
        controller = super().build(
            reconciler,
            client=client if client is not None else manager.client,
            cache=cache if cache is not None else manager.cache,
            metrics=metrics if metrics is not None else manager.metrics,
            recorder=recorder if recorder is not None else manager.event_recorder(self.name),
            cluster=cluster,
        )
        manager.add(controller)
        return controller

    def _take_managers_defaults(self) -> None:
        """Check the name is free; take the manager's sync timeout and clock where unset."""
        manager = self._manager
        taken = {runnable.name for runnable in manager.runnables}
        if f"controller/{self.name}" in taken:
            raise ValueError(
                f"the manager already runs a controller named {self.name!r}: names label "
                "metrics and name work queues, so each controller needs its own"
            )
        if self.options.cache_sync_timeout is None:
            self._options = dataclasses.replace(
                self.options, cache_sync_timeout=manager.options.cache_sync_timeout
            )
        if self.options.clock is None:
            self._options = dataclasses.replace(self.options, clock=manager.options.clock)

    def optional(self, *, drain_timeout: float = 30.0) -> OptionalBuilder:
        """Make the controller wait for its kinds to be served, and follow their CRDs.

        Call it last: its ``build(reconciler)`` returns an
        :class:`~setpoint.manager.optional.OptionalController` added to the manager, which
        starts a controller built from this description once every watched kind is
        served, stops it (informers removed, reconciles drained for up to
        ``drain_timeout`` seconds, metrics series dropped) when one of their CRDs is
        deleted, and starts a new one when it returns. Without it, a kind that is not
        served makes the manager's start-up fail. See :mod:`setpoint.manager.optional`::

            manager.controller("gizmo").for_(Gizmo).owns(kinds.ConfigMap).optional().build(r)
        """
        return OptionalBuilder(self, drain_timeout=drain_timeout)


class OptionalBuilder:
    """What ``manager.controller(name)...optional()`` returns: its :meth:`build` follows CRDs."""

    def __init__(self, builder: ManagedBuilder, *, drain_timeout: float) -> None:
        if drain_timeout < 0:
            raise ValueError("optional(drain_timeout=...) must be >= 0 seconds")
        self._builder = builder
        self._drain_timeout = drain_timeout

    def build(
        self,
        reconciler: ReconcilerLike,
        *,
        client: ApiClient | None = None,
        cache: Cache | None = None,
        metrics: Metrics | None = None,
        recorder: EventRecorder | None = None,
    ) -> OptionalController:
        """Add an optional controller running ``reconciler`` to the manager; return it.

        The description is checked now (a controller is built once and dropped, without
        metrics), so its errors surface here, not when a CRD appears. Defaults as
        :meth:`ManagedBuilder.build`.

        Raises:
            ControllerError: as :meth:`Builder.build`.
            ValueError: a controller with this name was added to the manager already.

        """
        builder = self._builder
        manager = builder._manager
        builder._take_managers_defaults()
        client = client if client is not None else manager.client
        cache = cache if cache is not None else manager.cache
        metrics = metrics if metrics is not None else manager.metrics
        recorder = recorder if recorder is not None else manager.event_recorder(builder.name)
        probe = Builder.build(builder, reconciler, client=client, cache=cache)

        def make() -> Controller:
            return Builder.build(
                builder, reconciler, client=client, cache=cache, metrics=metrics, recorder=recorder
            )

        options = builder.options
        controller = OptionalController(
            builder.name,
            make,
            kinds=probe.watched_kinds,
            client=client,
            cache=cache,
            metrics=metrics,
            needs_leader_election=options.needs_leader_election,
            clock=options.clock,
            drain_timeout=self._drain_timeout,
        )
        manager.add(controller)
        return controller
