"""Controllers: reconcilers driven by cache events through a work queue.

::

    from setpoint.controller import Builder, Context, Request, Result

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        ...

    controller = Builder("tenant").for_(Tenant).owns(kinds.ConfigMap).build(
        reconcile, client=client, cache=cache
    )

A reconciler may also be a plain ``def`` taking a :class:`SyncContext`: it runs in the
controller's threads (:mod:`setpoint.controller.blocking`).

See :mod:`setpoint.controller.controller` for the lifecycle and outcome semantics,
:mod:`setpoint.controller.builder` for the builder, :mod:`setpoint.controller.predicates`
for event filters, :mod:`setpoint.controller.workqueue` for the queue,
:mod:`setpoint.controller.sources` for event sources outside Kubernetes and
:mod:`setpoint.controller.dependents` for children applied in dependency order.
"""

from setpoint.controller.blocking import SyncClient, SyncContext, SyncReader, run_blocking
from setpoint.controller.builder import Builder
from setpoint.controller.controller import (
    Controller,
    ControllerError,
    ControllerOptions,
    KeyGate,
)
from setpoint.controller.dependents import (
    Dependent,
    DependentFailed,
    DependentInvalid,
    Dependents,
    DependentsOutcome,
    rollout_complete,
)
from setpoint.controller.finalizers import (
    Cleanup,
    CleanupFailed,
    CleanupRetry,
    FinalizerHandler,
    Finalizers,
)
from setpoint.controller.handlers import KeyMapper, Source, controller_owner_key
from setpoint.controller.mappers import (
    enqueue_all,
    enqueue_from_annotation,
    enqueue_from_label,
    enqueue_tracked_owner,
)
from setpoint.controller.predicates import (
    AddEvent,
    AnnotationsChanged,
    DeleteEvent,
    GenerationChanged,
    InformerEvent,
    LabelsChanged,
    LabelSelectorPredicate,
    Predicate,
    ResourceVersionChanged,
    UpdateEvent,
    all_of,
    any_of,
    not_,
)
from setpoint.controller.reconcile import (
    ClusterRequest,
    Context,
    EventRecorder,
    ReconcileError,
    ReconcileFunc,
    Reconciler,
    ReconcilerLike,
    ReconcileTimeout,
    Request,
    Result,
    SyncReconcileFunc,
    SyncReconciler,
    TerminalError,
)
from setpoint.controller.sources import (
    ChannelSource,
    ExternalSource,
    PerObjectPollingSource,
    PollingSource,
    SourceTarget,
)
from setpoint.controller.workqueue import Priority, WorkQueue, WorkQueueOptions

__all__ = [
    "AddEvent",
    "AnnotationsChanged",
    "Builder",
    "ChannelSource",
    "Cleanup",
    "CleanupFailed",
    "CleanupRetry",
    "ClusterRequest",
    "Context",
    "Controller",
    "ControllerError",
    "ControllerOptions",
    "DeleteEvent",
    "Dependent",
    "DependentFailed",
    "DependentInvalid",
    "Dependents",
    "DependentsOutcome",
    "EventRecorder",
    "ExternalSource",
    "FinalizerHandler",
    "Finalizers",
    "GenerationChanged",
    "InformerEvent",
    "KeyGate",
    "KeyMapper",
    "LabelSelectorPredicate",
    "LabelsChanged",
    "PerObjectPollingSource",
    "PollingSource",
    "Predicate",
    "Priority",
    "ReconcileError",
    "ReconcileFunc",
    "ReconcileTimeout",
    "Reconciler",
    "ReconcilerLike",
    "Request",
    "ResourceVersionChanged",
    "Result",
    "Source",
    "SourceTarget",
    "SyncClient",
    "SyncContext",
    "SyncReader",
    "SyncReconcileFunc",
    "SyncReconciler",
    "TerminalError",
    "UpdateEvent",
    "WorkQueue",
    "WorkQueueOptions",
    "all_of",
    "any_of",
    "controller_owner_key",
    "enqueue_all",
    "enqueue_from_annotation",
    "enqueue_from_label",
    "enqueue_tracked_owner",
    "not_",
    "rollout_complete",
    "run_blocking",
]
