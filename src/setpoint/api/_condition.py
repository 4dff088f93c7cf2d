"""The typed :class:`Condition` model (see :mod:`setpoint.api.conditions`).

Kept apart so that the condition helpers, which work on JSON statuses too, do not
load pydantic for programs that never use typed statuses.
"""

from __future__ import annotations

from datetime import datetime

from setpoint.api.declaration import field
from setpoint.api.resource import Model
from setpoint.api.validation import (
    CONDITION_MESSAGE_MAX_LENGTH,
    CONDITION_REASON_MAX_LENGTH,
    CONDITION_REASON_PATTERN,
    CONDITION_TYPE_MAX_LENGTH,
    CONDITION_TYPE_PATTERN,
    ConditionStatus,
)

__all__ = ["Condition"]


class Condition(Model):
    """One status condition, field for field ``metav1.Condition``.

    Use it as the item type of a typed status's ``conditions`` list; the CRD
    schema generated from it carries the API server's validation rules.
    Build and change conditions with :func:`set_condition`, which keeps
    ``lastTransitionTime`` right.
    """

    type: str = field(pattern=CONDITION_TYPE_PATTERN, max_length=CONDITION_TYPE_MAX_LENGTH)
    """What the condition is about, in CamelCase (``Ready``), optionally domain-prefixed."""
    status: ConditionStatus
    """``True``, ``False`` or ``Unknown``."""
    observed_generation: int | None = field(default=None, minimum=0)
    """The ``metadata.generation`` the condition was computed from; unset when not tracked."""
    last_transition_time: datetime
    """When ``status`` last changed (not when the condition was last written)."""
    reason: str = field(
        pattern=CONDITION_REASON_PATTERN, min_length=1, max_length=CONDITION_REASON_MAX_LENGTH
    )
    """Machine-readable CamelCase reason for the last transition (``MinimumReplicasAvailable``)."""
    message: str = field(default="", max_length=CONDITION_MESSAGE_MAX_LENGTH)
    """Human-readable details; may be empty."""
