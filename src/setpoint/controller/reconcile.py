"""What a reconcile receives and returns: :class:`Context`, :class:`Result` and its errors.

A reconciler is level-based: it is told *which* object to look at (a request, the object's
:class:`~setpoint.api.keys.ObjectKey`), never *what changed*. It reads the current state,
makes the world match it, and returns::

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        try:
            tenant = await ctx.reader.get(Tenant, request.name, namespace=request.namespace)
        except NotFound:
            return None  # deleted: owned objects are garbage-collected
        ...
        return Result(requeue_after=300)  # look again in five minutes

What the outcome means:

- return ``None`` or ``Result()``: done; the key's retry backoff is reset.
- return ``Result(requeue_after=s)``: done for now, look again in ``s`` seconds.
- raise any exception: recorded and retried with exponential backoff (per key).
- raise :class:`TerminalError` (or fail on bad input: an invalid selector, a 422 from the
  server naming a field): recorded on the object (a ``Stalled`` condition, a Warning Event)
  and *not* retried until the object itself changes (see :mod:`setpoint.controller.terminal`).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.observability.events import EventRecorder
from setpoint.observability.logging import Logger

if TYPE_CHECKING:
    from setpoint.client.protocols import ApiClient, IndexReader
    from setpoint.controller.blocking import SyncContext

__all__ = [
    "ClusterRequest",
    "Context",
    "ControllerError",
    "EventRecorder",
    "ReconcileError",
    "ReconcileFunc",
    "ReconcileTimeout",
    "Reconciler",
    "ReconcilerLike",
    "Request",
    "Result",
    "SyncReconcileFunc",
    "SyncReconciler",
    "TerminalError",
]

Request: TypeAlias = ObjectKey
"""A reconcile request: the namespace and name of the object to reconcile."""


@dataclass(frozen=True, slots=True)
class ClusterRequest:
    """A reconcile request of a multi-cluster controller: which cluster, which object.

    ``namespace`` and ``name`` are read like a :data:`Request`'s; :attr:`key` is the
    object's key within its cluster. ``ctx.client`` and ``ctx.reader`` of the reconcile are
    that cluster's (see ``setpoint.manager.clusters``).
    """

    cluster: str
    """The member cluster the object lives in (the name it joined under)."""
    namespace: str
    """The object's namespace (``""`` for a cluster-scoped object)."""
    name: str
    """The object's name."""

    @property
    def key(self) -> ObjectKey:
        """The object's key within its cluster."""
        return ObjectKey(self.namespace, self.name)

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.cluster}:{where}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """The outcome of a successful reconcile.

    ``Result()`` means "done". There is deliberately no boolean ``requeue`` flag:
    controller-runtime deprecated ``Result.Requeue`` because its meaning depended on the
    other fields. To be called again, say when.
    """

    requeue_after: float | None = None
    """Reconcile this key again after this many seconds (> 0). ``None``: only on the next
    event. The key's retry backoff is reset either way."""

    def __post_init__(self) -> None:
        value = self.requeue_after
        if value is not None and (
            isinstance(value, bool) or not math.isfinite(value) or value <= 0
        ):
            raise ValueError(
                f"Result(requeue_after={value!r}): give a number of seconds > 0, or None to "
                "wait for the next event (raise an exception to retry with backoff)"
            )


class ControllerError(SetpointError):
    """A controller was misconfigured or used out of order; the message says how to fix it."""


class ReconcileError(SetpointError):
    """An expected reconcile failure: retried with backoff and counted as an error.

    Raising any exception retries the reconcile. Subclass this (or raise it) for failures
    that are part of normal operation, such as "dependency not ready": they count in
    ``controller_runtime_reconcile_errors_total`` only. Other exceptions that are not API or
    cache errors (``KeyError``, ``TypeError``, ...) are bugs and also count in
    ``controller_runtime_reconcile_panics_total`` (see decision 0004).
    """

    __module__ = "setpoint"


class TerminalError(ReconcileError):
    """A failure retrying cannot fix (invalid spec, a policy refusal): recorded, not retried.

    The object gets a ``Stalled`` condition (reason: the class name) and a Warning Event, and
    is reconciled again only once it changes (its generation, labels, annotations or
    deletion; see :mod:`setpoint.controller.terminal`). Use ``raise TerminalError(...) from
    exc`` to keep the cause; subclass it to give the condition a more precise reason.
    """

    __module__ = "setpoint"


class ReconcileTimeout(ReconcileError, TimeoutError):
    """The reconcile exceeded its timeout and was cancelled; it is retried with backoff."""

    __module__ = "setpoint"


@dataclass(frozen=True, slots=True)
class Context:
    """Everything one reconcile gets besides the request. Built fresh for every reconcile."""

    request: Request
    """The object to reconcile (also passed as the ``request`` argument)."""

    reconcile_id: str
    """A UUID naming this reconcile in logs (as controller-runtime's ``reconcileID``)."""

    log: Logger
    """A logger bound with ``controller``, ``namespace``, ``name``, ``reconcile_id`` and
    ``gvk``: every line it writes names this reconcile."""

    client: ApiClient
    """The live client. In a running controller it is a
    :class:`~setpoint.cache.consistency.TrackingClient`: its writes are recorded, so
    :attr:`reader` never returns an object older than this process's own last write of it.
    In a unit test it may be a :class:`~setpoint.testing.FakeClient`."""

    reader: IndexReader
    """The cached reader. In a running controller it is a
    :class:`~setpoint.cache.consistency.ConsistentReader` (read-after-write, see
    :mod:`setpoint.cache.consistency`); in a unit test it may be the fake client itself."""

    recorder: EventRecorder | None
    """Records Kubernetes Events, when the controller was built with one."""

    controller: str
    """The controller's name."""

    gvk: GroupVersionKind | None = None
    """The kind the controller reconciles (its ``for_`` kind), when it has one."""
    cluster: str | None = None
    """The member cluster this reconcile is about, in a multi-cluster controller
    (``setpoint.manager.clusters``); ``None`` for a controller of one cluster."""


@runtime_checkable
class Reconciler(Protocol):
    """An object with an async ``reconcile(ctx, request)`` method."""

    async def reconcile(self, ctx: Context, request: Request) -> Result | None:
        """Make the world match the object named by ``request``; see the module docstring."""
        ...


@runtime_checkable
class SyncReconciler(Protocol):
    """An object with a plain (blocking) ``reconcile(ctx, request)`` method.

    It runs in a worker thread of the controller, and ``ctx`` is a
    :class:`~setpoint.controller.blocking.SyncContext` (see :mod:`setpoint.controller.blocking`).
    """

    def reconcile(self, ctx: SyncContext, request: Request) -> Result | None:
        """Make the world match the object named by ``request``, blocking as it needs to."""
        ...


ReconcileFunc = Callable[[Context, Request], Awaitable["Result | None"]]
"""A plain async function with the signature of :meth:`Reconciler.reconcile`."""

SyncReconcileFunc = Callable[["SyncContext", Request], "Result | None"]
"""A plain ``def`` function with the signature of :meth:`SyncReconciler.reconcile`: it may
block (a cloud SDK, a database driver), and runs in a worker thread of the controller."""

ReconcilerLike = Reconciler | ReconcileFunc | SyncReconciler | SyncReconcileFunc
"""What a controller accepts: an async :class:`Reconciler` or function, or a blocking
:class:`SyncReconciler` or function (run in threads, :mod:`setpoint.controller.blocking`)."""
