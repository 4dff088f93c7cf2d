"""Safe writes: the easy way to write status, finalizers, owner references and children.

Three failures hurt operator authors most: status updates that race and
overwrite each other (or fail with "the object has been modified"),
finalizers that leak or get dropped, and metadata lost to a whole-object
update from a stale copy. Each helper here makes the safe way the short one:

- :func:`update_status` changes status with a *mutation function*, writes it
  through the ``status`` subresource only, and on Conflict re-reads and
  re-applies the mutation with bounded, jittered backoff.
  :func:`apply_status` is the server-side-apply alternative.
- :func:`add_finalizer` / :func:`remove_finalizer` change
  ``metadata.finalizers`` with JSON patches guarded by ``test``, so another
  controller's finalizer is never dropped, and refuse to add to an object
  being deleted.
- :func:`create_or_update` / :func:`create_or_patch` make an object exist
  and match a mutation: an Update guarded by the resourceVersion read, or a
  JSON patch of only the changed fields guarded value by value; nothing is
  sent when nothing changed.
- :func:`apply_child` applies a controller's declared child with
  server-side apply, comparing only the fields its field manager owns, so it
  neither rewrites the child every reconcile nor fights over server defaults
  or other writers' fields, and restores drift in its own. It stamps a
  ``setpoint.dev/applied-<hash>`` annotation on the child (see its docstring;
  ``applied_annotation=False`` turns it off).

Every helper returns what it did (:class:`OperationResult` or
:class:`FinalizerOutcome`) together with the object, and none sends a
request when nothing would change. They take any client with the
:class:`SafeClient` surface: the live client and the testing fake alike.

The pure halves live in :mod:`setpoint.api.conditions` (conditions,
``observedGeneration``) and :mod:`setpoint.api.owners` (owner references)::

    async def reconcile(client, widget):
        await add_finalizer(client, widget, "example.com/cleanup")
        await apply_child(client, desired_config_map(widget),
                          field_manager="widget-controller", owner=widget)

        def status(obj):
            set_observed_generation(obj)
            set_condition(obj.setdefault("status", {}), "Ready", True, "ChildApplied")

        await update_status(client, widget, status)
"""

from setpoint.client._apply import (
    APPLIED_ANNOTATION_PREFIX,
    Adoption,
    apply_child,
    apply_status,
    create_or_patch,
    create_or_update,
)
from setpoint.client._finalizers import (
    FinalizerOutcome,
    FinalizerResult,
    add_finalizer,
    has_finalizer,
    remove_finalizer,
    validate_finalizer_name,
)
from setpoint.client._safebase import (
    MutateFn,
    OperationResult,
    RetryOptions,
    SafeClient,
    Target,
    WriteResult,
)
from setpoint.client._status import MutationScopeError, update_status
from setpoint.client._tracked import delete_tracked_children

__all__ = [
    "APPLIED_ANNOTATION_PREFIX",
    "Adoption",
    "FinalizerOutcome",
    "FinalizerResult",
    "MutateFn",
    "MutationScopeError",
    "OperationResult",
    "RetryOptions",
    "SafeClient",
    "Target",
    "WriteResult",
    "add_finalizer",
    "apply_child",
    "apply_status",
    "create_or_patch",
    "create_or_update",
    "delete_tracked_children",
    "has_finalizer",
    "remove_finalizer",
    "update_status",
    "validate_finalizer_name",
]
