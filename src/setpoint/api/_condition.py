"""The typed :class:`Condition` model (see :mod:`setpoint.api.conditions`).

Kept apart so that the condition helpers, which work on JSON statuses too, do not
load pydantic for programs that never use typed statuses.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

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

    The generated schema describes it (and each field) in the plain words a user of the
    CRD reads in ``kubectl explain``, not with this docstring.
    """

    __schema_doc__: ClassVar[str] = (
        "One aspect of the object's current state, as observed by its controller."
    )

    type: str = field(
        pattern=CONDITION_TYPE_PATTERN,
        max_length=CONDITION_TYPE_MAX_LENGTH,
        description="The aspect this condition reports on, in CamelCase (for example Ready), "
        "optionally prefixed with a domain (example.com/Ready).",
    )
    """What the condition is about, in CamelCase (``Ready``), optionally domain-prefixed."""
    status: ConditionStatus = field(
        description="Whether the condition holds: True, False or Unknown."
    )
    """``True``, ``False`` or ``Unknown``."""
    observed_generation: int | None = field(
        default=None,
        minimum=0,
        description="The metadata.generation of the object this condition was computed from. "
        "Lower than the object's current generation when the condition is out of date.",
    )
    """The ``metadata.generation`` the condition was computed from; unset when not tracked."""
    last_transition_time: datetime = field(
        description="When the status last changed from one value to another."
    )
    """When ``status`` last changed (not when the condition was last written)."""
    reason: str = field(
        pattern=CONDITION_REASON_PATTERN,
        min_length=1,
        max_length=CONDITION_REASON_MAX_LENGTH,
        description="A short CamelCase word or phrase saying why the condition last changed, "
        "for programs to match on.",
    )
    """Machine-readable CamelCase reason for the last transition (``MinimumReplicasAvailable``)."""
    message: str = field(
        default="",
        max_length=CONDITION_MESSAGE_MAX_LENGTH,
        description="Details for people about the last change; may be empty.",
    )
    """Human-readable details; may be empty."""
