"""Pausing one object: an annotation that makes setpoint's controllers leave it alone.

An operator's user sometimes needs the operator to stop touching one object: to repair it
by hand, to hold it on an old version while the operator is upgraded, to debug it
(operator-sdk#3418). Crossplane (``crossplane.io/paused``), Cluster API
(``cluster.x-k8s.io/paused``) and the RabbitMQ operator (``rabbitmq.com/pauseReconciliation``)
each rebuilt it; every setpoint controller honours one annotation instead::

    kubectl annotate tenant acme setpoint.dev/paused=true        # every controller
    kubectl annotate tenant acme setpoint.dev/paused=tenant-dns  # only these (a,b,c)
    kubectl annotate tenant acme setpoint.dev/paused-            # resume

The value of ``setpoint.dev/paused`` (:func:`pause_of`):

==========================  ==============================================================
value                       meaning
==========================  ==============================================================
``"true"`` (any case)       paused for every setpoint controller whose ``for_`` kind it is
``"false"``, ``""``         not paused (so a tool can flip the value instead of deleting
                            the key)
anything else               a comma-separated list of controller names; paused for those
                            only (a name no controller has pauses nothing)
==========================  ==============================================================

What a paused object gets from a controller it is paused for (see
:class:`~setpoint.controller.controller.Controller`):

- no reconcile: the controller's events, requeues and retries for its key end before the
  reconciler is called, and no finalizer is added;
- once per pause, a ``Paused`` status condition (``True``, reason ``PausedByAnnotation``)
  when the kind has a status subresource and the object does not carry it yet, and a
  Normal Event ``Paused`` naming the controller and the value (when the controller has an
  Event recorder). They are written when the controller first sees the pause, not on
  every event; a restarted operator writes the Event again for a kind without status
  (where nothing on the object says it was written);
- on resume (the annotation removed, ``"false"``, or a list without this controller), a
  Normal Event ``Resumed``, and the object is reconciled at once, even when the
  controller's predicates (``GenerationChanged``) filter annotation changes: a change of
  either annotation always passes a ``for_`` source's predicates. The condition says "the
  annotation pauses a controller": it is removed once the annotation pauses none (two
  controllers of one kind, one paused, share it);
- deletion: a paused object being deleted still gets its finalizer cleanups (a deleted
  object is not worth holding by default: ``kubectl delete`` means "go"), unless it also
  carries ``setpoint.dev/paused-deletion: "true"``, which holds the cleanups, and so the
  deletion, until the pause ends. Decision 0026 says why this differs from Crossplane and
  Cluster API, which hold the deletion of every paused object.

``setpoint doctor paused`` lists the paused objects of a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from setpoint.api.meta import annotations_of

__all__ = [
    "PAUSED_ANNOTATION",
    "PAUSED_CONDITION",
    "PAUSED_DELETION_ANNOTATION",
    "PAUSED_EVENT_REASON",
    "PAUSED_MESSAGE",
    "PAUSED_REASON",
    "RESUMED_EVENT_REASON",
    "Pause",
    "pause_changed",
    "pause_of",
]

PAUSED_ANNOTATION = "setpoint.dev/paused"
"""The annotation that pauses an object: ``"true"``, or a list of controller names."""

PAUSED_DELETION_ANNOTATION = "setpoint.dev/paused-deletion"
"""With ``"true"`` on a paused object, its finalizer cleanups wait for the pause to end too."""

PAUSED_CONDITION = "Paused"
"""The status condition a controller sets on an object it is paused for."""

PAUSED_REASON = "PausedByAnnotation"
"""The reason of the ``Paused`` condition setpoint writes (and the only one it removes)."""

PAUSED_MESSAGE = (
    f"Reconciliation is paused by the annotation {PAUSED_ANNOTATION} (its value says for "
    "which controllers); remove the annotation to resume"
)
"""The message of the ``Paused`` condition. It names the annotation, not its value, so it
stays true while the value changes; the Event of each controller paused names the value."""

PAUSED_EVENT_REASON = "Paused"
"""The reason of the Normal Event written when a controller first sees the pause."""

RESUMED_EVENT_REASON = "Resumed"
"""The reason of the Normal Event written when a controller sees the pause end."""


@dataclass(frozen=True, slots=True)
class Pause:
    """What an object's ``setpoint.dev/paused`` annotation asks (see the module docstring)."""

    value: str
    """The annotation's value, as written."""
    controllers: frozenset[str] | None
    """The controllers paused; ``None``: every controller (the value ``"true"``)."""
    hold_deletion: bool
    """Whether ``setpoint.dev/paused-deletion`` is ``"true"``: cleanups wait too."""

    def applies_to(self, controller: str) -> bool:
        """Whether the controller named ``controller`` must leave the object alone."""
        return self.controllers is None or controller in self.controllers

    def describe(self) -> str:
        """One line for a condition, an Event or ``setpoint doctor``: who is paused, and how."""
        who = (
            "every controller"
            if self.controllers is None
            else "controller(s) " + ", ".join(sorted(self.controllers))
        )
        deletion = (
            f"; deletion held too ({PAUSED_DELETION_ANNOTATION})" if self.hold_deletion else ""
        )
        return f'{PAUSED_ANNOTATION}="{self.value}" pauses {who}{deletion}'


def pause_of(obj: Mapping[str, Any]) -> Pause | None:
    """The pause ``obj`` (JSON form, or metadata only) asks for, or ``None`` if not paused."""
    annotations = annotations_of(obj)
    value = annotations.get(PAUSED_ANNOTATION)
    if not isinstance(value, str):
        return None
    word = value.strip().lower()
    if word in {"", "false"}:
        return None
    controllers: frozenset[str] | None = None
    if word != "true":
        controllers = frozenset(n.strip() for n in value.split(",") if n.strip())
        if not controllers:
            return None  # "," or " , ": no name at all
    hold = str(annotations.get(PAUSED_DELETION_ANNOTATION, "")).strip().lower() == "true"
    return Pause(value=value, controllers=controllers, hold_deletion=hold)


def pause_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an update changed what pauses the object (either annotation)."""
    before, after = annotations_of(old), annotations_of(new)
    return any(
        before.get(name) != after.get(name)
        for name in (PAUSED_ANNOTATION, PAUSED_DELETION_ANNOTATION)
    )
