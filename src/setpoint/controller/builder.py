"""Build a controller: what it reconciles, what it watches, how it runs.

::

    controller = (
        Builder("tenant")
        .for_(Tenant, predicates=[GenerationChanged()])
        .owns(kinds.ConfigMap)
        .watches(kinds.Secret, secret_to_tenants)
        .finalizer("tenants.example.com/directory", release_directory, deadline=30)
        .max_concurrent_reconciles(4)
        .reconcile_timeout(60)
        .build(TenantReconciler(), client=client, cache=cache)
    )

The manager offers ``manager.controller(name)``, a builder whose ``build`` fills in the
client, cache, metrics and event recorder. Every builder method returns the builder;
``build`` validates the whole and returns a :class:`~setpoint.controller.Controller`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Literal, Self

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.metadata import Metadata
from setpoint.api.types import Kind, TypedObject, split_kind
from setpoint.cache.cache import Cache
from setpoint.client.protocols import ApiClient
from setpoint.controller.controller import (
    Controller,
    ControllerError,
    ControllerOptions,
    validate_name,
)
from setpoint.controller.finalizers import (
    Cleanup,
    CleanupRetry,
    FinalizerHandler,
    Finalizers,
    SyncCleanup,
)
from setpoint.controller.handlers import KeyMapper, Source
from setpoint.controller.predicates import Predicate, check_predicates
from setpoint.controller.reconcile import EventRecorder, ReconcilerLike
from setpoint.controller.sources import ExternalSource
from setpoint.observability.metrics import Metrics

__all__ = ["Builder"]


class Builder:
    """Describes a controller step by step; :meth:`build` makes it.

    Args:
        name: The controller's name: the ``controller`` label of its metrics and logs, and
            its work queue's name. Unique per process.

    """

    def __init__(self, name: str) -> None:
        self._name = validate_name(name)
        self._for: Source | None = None
        self._sources: list[Source] = []
        self._predicates: list[Predicate] = []
        self._finalizers: list[FinalizerHandler] = []
        self._external: list[ExternalSource] = []
        self._options = ControllerOptions()

    @property
    def name(self) -> str:
        """The controller's name."""
        return self._name

    def for_(self, kind: Kind[object], *, predicates: Iterable[Predicate] = ()) -> Self:
        """Reconcile objects of ``kind``: each event enqueues the object's own key.

        Raises:
            ControllerError: ``for_`` was already given (a controller reconciles one kind).

        """
        if self._for is not None:
            raise ControllerError(
                f"controller {self._name!r}: for_() was already called with "
                f"{self._for.kind.kind}; a controller reconciles one kind (watch others with "
                "owns() or watches())"
            )
        gvk, typed = split_kind(kind)
        self._for = Source(gvk, "for", check_predicates(predicates), typed=typed)
        return self

    def owns(
        self,
        kind: Kind[object],
        *,
        predicates: Iterable[Predicate] = (),
        metadata_only: bool = False,
    ) -> Self:
        """Watch ``kind`` and enqueue each object's controlling owner of the ``for_`` kind.

        The owner is the ownerReference with ``controller: true`` whose apiVersion group and
        kind match the ``for_`` kind (any version); objects controlled by something else are
        ignored.

        ``metadata_only=True`` (or ``kind`` given as ``Metadata(kind)``) watches and caches
        the children's ``PartialObjectMetadata`` only (:mod:`setpoint.api.metadata`), as
        controller-runtime's ``WatchesMetadata`` does: the owner references are in the
        metadata, and the cache does not hold a Secret's data or a Pod's spec. Read them in
        the reconcile as ``ctx.reader.get(Metadata(kind), ...)``; a read of ``kind`` itself
        starts a second, full informer.
        """
        gvk, typed, metadata_only = _source_kind(kind, metadata_only)
        self._sources.append(
            Source(
                gvk,
                "owns",
                check_predicates(predicates),
                typed=typed,
                metadata_only=metadata_only,
            )
        )
        return self

    def watches(
        self,
        kind: Kind[object],
        mapper: KeyMapper,
        *,
        predicates: Iterable[Predicate] = (),
        metadata_only: bool = False,
    ) -> Self:
        """Watch ``kind`` and enqueue the keys ``mapper(obj)`` returns.

        ``mapper`` may be a plain or an async function returning an iterable of
        :class:`~setpoint.api.keys.ObjectKey`; it receives a typed instance when ``kind``
        is a typed class. For updates it is called with the old and the new object.

        ``metadata_only=True`` (or ``kind`` given as ``Metadata(kind)``) watches and caches
        ``PartialObjectMetadata`` only (:mod:`setpoint.api.metadata`), as
        controller-runtime's ``WatchesMetadata``: ``mapper`` then receives those dicts
        (names, labels, annotations, owner references; no spec, data or status).
        """
        if not callable(mapper):
            raise ControllerError(
                f"controller {self._name!r}: watches({kind!r}, ...) needs a mapper function "
                "returning the ObjectKeys to reconcile"
            )
        gvk, typed, metadata_only = _source_kind(kind, metadata_only)
        self._sources.append(
            Source(
                gvk,
                "watches",
                check_predicates(predicates),
                mapper,
                typed,
                metadata_only=metadata_only,
            )
        )
        return self

    def watches_source(self, source: ExternalSource) -> Self:
        """Reconcile the keys an external source sends: state outside Kubernetes.

        ``source`` is a :class:`~setpoint.controller.sources.ChannelSource` (a queue you
        feed), a :class:`~setpoint.controller.sources.PollingSource` or a
        :class:`~setpoint.controller.sources.PerObjectPollingSource` (or your own
        :class:`~setpoint.controller.sources.ExternalSource`). It starts after the
        controller's informers synced and stops with the controller; one source object
        serves one controller.

        Raises:
            ControllerError: ``source`` is not an external source, or one of that name
                was added already.

        """
        if not isinstance(source, ExternalSource):
            raise ControllerError(
                f"controller {self._name!r}: watches_source({source!r}) needs an external "
                "source (ChannelSource, PollingSource, PerObjectPollingSource); watch a "
                "Kubernetes kind with watches(Kind, mapper)"
            )
        if any(s.name == source.name for s in self._external):
            raise ControllerError(
                f"controller {self._name!r}: a source named {source.name!r} was added "
                "already; give each source its own name (it labels the metrics)"
            )
        self._external.append(source)
        return self

    def finalizer(
        self,
        name: str,
        cleanup: Cleanup | SyncCleanup,
        *,
        deadline: float = 30.0,
        retry: CleanupRetry | None = None,
    ) -> Self:
        """Protect each ``for_`` object with finalizer ``name``; run ``cleanup`` before it goes.

        ``cleanup`` is ``async def cleanup(ctx, obj) -> None``, or a plain ``def`` that may
        block (run in the controller's threads with a
        :class:`~setpoint.controller.blocking.SyncContext`); ``obj`` is typed when the
        ``for_`` kind is a typed class. With a finalizer registered, the controller adds it to
        every live object *before* calling reconcile, and for an object being deleted runs
        the cleanup (cancelled after ``deadline`` seconds, retried with ``retry`` backoff on
        failure) and removes the finalizer once it succeeded; reconcile is then not called
        for deleting or deleted objects. Cleanups must be idempotent. See
        :mod:`setpoint.controller.finalizers` for the states, guarantees and failure
        reporting. Call it once per finalizer; several run last-registered first.

        Raises:
            ControllerError: ``name`` is not domain-qualified, was registered already, the
                cleanup is not callable, or ``deadline`` is not > 0.

        """
        if any(h.name == name for h in self._finalizers):
            raise ControllerError(
                f"controller {self._name!r}: finalizer {name!r} is registered twice; give each "
                "cleanup its own finalizer name"
            )
        try:
            handler = FinalizerHandler(
                name=name,
                cleanup=cleanup,
                deadline=deadline,
                retry=retry if retry is not None else CleanupRetry(),
            )
        except (TypeError, ValueError) as exc:
            raise ControllerError(f"controller {self._name!r}: {exc}") from exc
        self._finalizers.append(handler)
        return self

    def renamed(self, name: str) -> Builder:
        """A copy of this builder under another name (same sources, predicates, options).

        A multi-cluster manager builds one controller per member cluster from one
        description this way (``setpoint.manager.clusters``).

        Raises:
            ControllerError: ``name`` is not a valid controller name.

        """
        copy = Builder(name)
        copy._for = self._for
        copy._sources = list(self._sources)
        copy._predicates = list(self._predicates)
        copy._finalizers = list(self._finalizers)
        copy._external = list(self._external)
        copy._options = self._options
        return copy

    def with_event_filter(self, *predicates: Predicate) -> Self:
        """Add predicates every event of every source must pass."""
        self._predicates.extend(check_predicates(predicates))
        return self

    def with_options(self, options: ControllerOptions) -> Self:
        """Replace all run options at once (see :class:`ControllerOptions`)."""
        if not isinstance(options, ControllerOptions):
            raise TypeError(f"with_options() takes a ControllerOptions, not {options!r}")
        self._options = options
        return self

    def max_concurrent_reconciles(self, n: int) -> Self:
        """Reconcile up to ``n`` different keys at once (default 1)."""
        self._options = dataclasses.replace(self._options, max_concurrent_reconciles=n)
        return self

    def reconcile_timeout(self, seconds: float | None) -> Self:
        """Cancel a reconcile after ``seconds`` (default 300) and retry it with backoff."""
        self._options = dataclasses.replace(self._options, reconcile_timeout=seconds)
        return self

    def needs_leader_election(self, needed: bool) -> Self:
        """Whether the controller runs only while this process leads (default ``True``)."""
        self._options = dataclasses.replace(self._options, needs_leader_election=needed)
        return self

    def fair_by(
        self, by: Literal["namespace"] | Callable[[ObjectKey], Hashable] | None = "namespace"
    ) -> Self:
        """Hand out queued keys round-robin between namespaces (or groups ``by`` returns).

        Off by default; see ``ControllerOptions.fair_by`` and the guide's "Fair queues".
        """
        self._options = dataclasses.replace(self._options, fair_by=by)
        return self

    def kstatus_conditions(self, enabled: bool = True) -> Self:
        """Maintain the conditions Argo CD, Flux and kstatus read (default off).

        ``status.observedGeneration``, ``Ready``, ``Reconciling`` and ``Stalled`` follow each
        reconcile's outcome; see ``ControllerOptions.kstatus_conditions`` and
        :mod:`setpoint.controller.health`.
        """
        self._options = dataclasses.replace(self._options, kstatus_conditions=enabled)
        return self

    @property
    def options(self) -> ControllerOptions:
        """The run options so far."""
        return self._options

    @property
    def for_kind(self) -> GroupVersionKind | None:
        """The ``for_`` kind, once given."""
        return self._for.kind if self._for is not None else None

    def build(
        self,
        reconciler: ReconcilerLike,
        *,
        client: ApiClient,
        cache: Cache,
        metrics: Metrics | None = None,
        recorder: EventRecorder | None = None,
        cluster: str | None = None,
    ) -> Controller:
        """Make the controller (not started: the manager, or you, call ``start``).

        Args:
            reconciler: An object with ``async reconcile(ctx, request)``, or such a function;
                or a blocking one (plain ``def``), run in a pool of
                ``max_concurrent_reconciles`` threads (:mod:`setpoint.controller.blocking`).
            client: The live client; ``ctx.client`` wraps it to record writes.
            cache: The shared cache the sources' informers come from.
            metrics: Where to report ``controller_runtime_*`` and ``workqueue_*`` metrics
                (the manager passes ``Metrics.default()``); ``None`` reports nothing.
            recorder: Records Kubernetes Events (``ctx.recorder``); optional.
            cluster: The member cluster the controller serves (``ctx.cluster``), for
                multi-cluster managers; ``None`` otherwise.

        Raises:
            ControllerError: nothing to watch, ``owns`` or ``finalizer`` without ``for_``, or
                a reconciler that is not callable.

        """
        finalizers: Finalizers | None = None
        if self._finalizers:
            if self._for is None:
                raise ControllerError(
                    f"controller {self._name!r}: finalizer() needs for_(Kind): a finalizer "
                    "protects the objects the controller reconciles"
                )
            finalizers = Finalizers(
                self._name,
                self._finalizers,
                kind=self._for.kind,
                typed=self._for.typed,
                metrics=metrics,
            )
        sources: list[Source] = []
        if self._for is not None:
            sources.append(self._for)
        sources.extend(self._sources)
        return Controller(
            self._name,
            reconciler,
            client=client,
            cache=cache,
            sources=sources,
            predicates=self._predicates,
            options=self._options,
            metrics=metrics,
            recorder=recorder,
            for_kind=self.for_kind,
            finalizers=finalizers,
            cluster=cluster,
            external=self._external,
        )

    def __repr__(self) -> str:
        kinds: list[Any] = [f"{s.role}:{s.kind.kind}" for s in ([self._for] if self._for else [])]
        kinds += [
            f"{s.role}:{s.kind.kind}{'(metadata)' if s.metadata_only else ''}"
            for s in self._sources
        ]
        kinds += [f"source:{s.name}" for s in self._external]
        return f"<Builder {self._name!r} {kinds}>"


def _source_kind(
    kind: Kind[object], metadata_only: bool
) -> tuple[GroupVersionKind, type[TypedObject] | None, bool]:
    """A watched kind's GVK, typed class and whether it is metadata-only.

    ``Metadata(kind)`` is ``kind`` with ``metadata_only=True``; a metadata-only source has
    no typed class (its objects are ``PartialObjectMetadata`` dicts).
    """
    if isinstance(kind, Metadata):
        return kind.gvk, None, True
    gvk, typed = split_kind(kind)
    return gvk, None if metadata_only else typed, metadata_only
