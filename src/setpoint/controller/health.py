"""kstatus conditions: ``Ready``, ``Reconciling``, ``Stalled`` and ``observedGeneration``.

Argo CD, Flux and ``kstatus`` (``sigs.k8s.io/cli-utils/pkg/kstatus``) decide whether a
custom resource is healthy from ``status.observedGeneration`` and three conditions. With
``ControllerOptions.kstatus_conditions`` (``Builder.kstatus_conditions()``) the controller
maintains them from each reconcile's outcome, on ``for_`` objects whose kind has a status
subresource:

======================================  ============================================  =========
outcome                                 status written                                kstatus
======================================  ============================================  =========
clean return (``None``, ``Result()``,   ``observedGeneration``: the generation the    Current
``Result(requeue_after=...)``)          reconcile acted on; ``Ready`` True
                                        (``Succeeded``); ``Reconciling`` and
                                        ``Stalled`` removed
retryable error (retried with backoff)  ``Reconciling`` True and ``Ready`` False,     InProgress
                                        both ``ProgressingWithRetry``, the error as
                                        message; ``observedGeneration``
terminal error                          ``Stalled`` True (its reason, as without the  Failed
                                        option); ``Ready`` False (``Stalled``);
                                        ``Reconciling`` removed; ``observedGeneration``
a new generation not reconciled yet     nothing: ``observedGeneration`` is behind     InProgress
======================================  ============================================  =========

Rules (decision 0029):

- **Transitions only.** A condition is rewritten when its status, reason or observed
  generation changes, never for a new message: a status write is a watch event that
  queues the key at once, so writing on every retry would defeat the per-key backoff.
  A run of failures costs one write (and one extra, immediate retry: the event of that
  write); a periodic ``requeue_after`` operator that keeps succeeding writes nothing.
- **``requeue_after`` is success.** A periodic re-check is not work in progress.
- **The author's conditions win.** A ``Ready`` or ``Reconciling`` condition whose reason
  is not one of setpoint's (:data:`SETPOINT_REASONS`) is the reconciler's own: setpoint
  neither changes nor removes it (it still maintains the other types).
  ``Stalled`` is set and removed as without the option.
- A kind whose status schema drops the fields (a CRD status without
  ``observedGeneration`` or ``conditions``, and without
  ``x-kubernetes-preserve-unknown-fields``) gets one warning and no further writes:
  a write the server prunes would look like a transition again on every reconcile.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from setpoint.api.conditions import remove_condition, set_condition
from setpoint.api.meta import JsonObject

__all__ = [
    "READY_CONDITION",
    "RECONCILING_CONDITION",
    "RETRY_REASON",
    "SETPOINT_REASONS",
    "STALLED_READY_REASON",
    "SUCCEEDED_REASON",
    "Outcome",
    "apply_outcome",
    "holds_outcome",
]

READY_CONDITION = "Ready"
"""The condition Flux and Argo CD read as "healthy"."""

RECONCILING_CONDITION = "Reconciling"
"""kstatus' "in progress" condition (abnormal-true: present only while it holds)."""

SUCCEEDED_REASON = "Succeeded"
"""``Ready`` True: the reconcile returned cleanly for the generation it names."""

RETRY_REASON = "ProgressingWithRetry"
"""``Reconciling`` True and ``Ready`` False: an error is being retried (Flux's reason)."""

STALLED_READY_REASON = "Stalled"
"""``Ready`` False beside ``Stalled`` True: a terminal error (``Stalled`` has the cause)."""

SETPOINT_REASONS = frozenset({SUCCEEDED_REASON, RETRY_REASON, STALLED_READY_REASON})
"""The reasons setpoint writes on ``Ready`` and ``Reconciling``; any other is the author's."""


class Outcome(enum.Enum):
    """What a reconcile ended in, as the kstatus conditions report it."""

    SUCCEEDED = "succeeded"
    """Returned cleanly (with or without ``requeue_after``)."""
    RETRYING = "retrying"
    """Failed, and retried with backoff."""
    STALLED = "stalled"
    """Failed terminally: not retried until the object changes."""


def _conditions(status: Mapping[str, Any]) -> list[Any]:
    items = status.get("conditions")
    return items if isinstance(items, list) else []


def _find(status: Mapping[str, Any], type: str) -> Mapping[str, Any] | None:
    for item in _conditions(status):
        if isinstance(item, Mapping) and item.get("type") == type:
            return item
    return None


def _ours(status: Mapping[str, Any], type: str) -> bool:
    """Whether setpoint may change condition ``type``: absent, or with one of its reasons."""
    found = _find(status, type)
    return found is None or found.get("reason") in SETPOINT_REASONS


def _put(  # noqa: PLR0917 - mirrors set_condition's arguments
    status: JsonObject, type: str, value: bool, reason: str, message: str, generation: int
) -> None:
    """Set a condition, unless only its message would change (transitions only)."""
    found = _find(status, type)
    if (
        found is not None
        and found.get("status") == ("True" if value else "False")
        and found.get("reason") == reason
        and found.get("observedGeneration") == generation
    ):
        return
    set_condition(status, type, value, reason, message, observed_generation=generation)


def apply_outcome(  # noqa: PLR0917 - one call site, each argument needed
    obj: JsonObject,
    outcome: Outcome,
    generation: int,
    stalled_condition: str,
    reason: str = "",
    message: str = "",
) -> None:
    """Change ``obj``'s status (in place) to report ``outcome`` for ``generation``.

    ``reason`` and ``message`` describe a failure (``Stalled``'s reason is the terminal
    reason; a retry's message is the error). An unchanged outcome changes nothing, so
    :func:`~setpoint.client.safe.update_status` sends no request. See the module doc.
    """
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    previous = status.get("observedGeneration")
    if not isinstance(previous, int) or previous < generation:
        status["observedGeneration"] = generation
    ready = _ours(status, READY_CONDITION)
    reconciling = _ours(status, RECONCILING_CONDITION)
    if outcome is Outcome.SUCCEEDED:
        if ready:
            _put(status, READY_CONDITION, True, SUCCEEDED_REASON, "Reconciled", generation)
        if reconciling:
            remove_condition(status, RECONCILING_CONDITION)
        remove_condition(status, stalled_condition)
    elif outcome is Outcome.RETRYING:
        text = message or "retrying with backoff"
        if reconciling:
            _put(status, RECONCILING_CONDITION, True, RETRY_REASON, text, generation)
        if ready:
            _put(status, READY_CONDITION, False, RETRY_REASON, text, generation)
    else:
        set_condition(
            status, stalled_condition, True, reason, message, observed_generation=generation
        )
        if reconciling:
            remove_condition(status, RECONCILING_CONDITION)
        if ready:
            _put(status, READY_CONDITION, False, STALLED_READY_REASON, message, generation)


def holds_outcome(obj: Mapping[str, Any], generation: int) -> bool:
    """Whether a written ``obj`` kept ``status.observedGeneration`` (not pruned by the schema)."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return False
    observed = status.get("observedGeneration")
    return isinstance(observed, int) and observed >= generation
