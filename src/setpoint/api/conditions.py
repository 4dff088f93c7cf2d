"""Status conditions with ``metav1.Condition`` semantics, on JSON dicts and on typed models.

A condition reports one aspect of an object's state (``Ready``, ``Degraded``)
as ``status`` ``True``/``False``/``Unknown`` with a machine-readable
``reason``, a human ``message``, the ``observedGeneration`` it was computed
for, and ``lastTransitionTime``. These helpers keep the rules the Kubernetes
API conventions give (and ``k8s.io/apimachinery/pkg/api/meta`` implements):

- one condition per ``type``: setting a type that exists updates it in place;
- ``lastTransitionTime`` changes only when ``status`` flips, never when only
  the reason, message or observed generation change, so it tells when the
  state last *changed*, not when a controller last looked;
- ``type``, ``reason``, ``message`` and ``observedGeneration`` are validated
  with the API server's own rules (``reason`` is CamelCase: a letter, then
  letters, digits, ``_``, ``,`` or ``:``), so a bad condition fails here, with
  the field named, instead of as a 422 from the status write.

Every function takes the *conditions holder* as its first argument: a status
dict (``obj["status"]``, whose ``conditions`` list is created on demand), a
typed status model with a ``conditions`` field, or the list itself::

    status = obj.setdefault("status", {})
    changed = set_condition(status, "Ready", True, "Available", "all replicas up",
                            observed_generation=generation_of(obj))
    if is_condition_true(status, "Ready"): ...

Typed statuses declare the field with :class:`Condition`::

    class WidgetStatus(sp.Model):
        conditions: list[Condition] = sp.field(default_factory=list,
                                               list_type="map", list_map_keys=["type"])

Functions here are pure (no I/O) and mutate the holder in place; they return
whether anything changed, so a caller can skip a write that changes nothing.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, MutableMapping, MutableSequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from setpoint.api.errors import SetpointError
from setpoint.api.meta import describe, generation_of
from setpoint.api.validation import (
    CONDITION_MESSAGE_MAX_LENGTH,
    CONDITION_REASON_MAX_LENGTH,
    CONDITION_REASON_PATTERN,
    CONDITION_TYPE_MAX_LENGTH,
    CONDITION_TYPE_PATTERN,
    ConditionStatus,
)

__all__ = [
    "Condition",
    "ConditionError",
    "ConditionStatus",
    "find_condition",
    "is_condition_false",
    "is_condition_true",
    "remove_condition",
    "set_condition",
    "set_observed_generation",
    "validate_condition",
]

_TYPE_RE = re.compile(CONDITION_TYPE_PATTERN)
_REASON_RE = re.compile(CONDITION_REASON_PATTERN)
_STATUSES: tuple[ConditionStatus, ...] = ("True", "False", "Unknown")

# Python attribute name -> JSON name, for reading and writing either representation.
_JSON_NAMES = {
    "type": "type",
    "status": "status",
    "reason": "reason",
    "message": "message",
    "observed_generation": "observedGeneration",
    "last_transition_time": "lastTransitionTime",
}


if TYPE_CHECKING:
    from setpoint.api._condition import Condition


def __getattr__(name: str) -> Any:
    # Condition is a pydantic model: it loads pydantic only when a program uses it (typed
    # statuses do), so helpers over JSON statuses stay light (about 8 MiB less).
    if name == "Condition":
        return _condition_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _condition_class() -> type[Condition]:
    from setpoint.api._condition import Condition

    return Condition


class ConditionError(SetpointError, ValueError):
    """A condition the API server would reject. The message names the field and the rule."""

    __module__ = "setpoint"


def validate_condition(
    type: str,
    status: str,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
) -> list[str]:
    """The problems the API server would report for this condition (empty when valid).

    The rules are those of ``metav1.Condition``: ``type`` is an optionally
    domain-prefixed name of at most 316 characters; ``status`` is ``True``,
    ``False`` or ``Unknown``; ``reason`` is 1-1024 characters, starts with a
    letter and continues with letters, digits, ``_``, ``,`` or ``:`` (CamelCase
    by convention: ``ReplicasReady``, not ``replicas ready``); ``message`` is at
    most 32768 characters; ``observedGeneration`` is not negative.
    """
    problems: list[str] = []
    if not type or len(type) > CONDITION_TYPE_MAX_LENGTH or not _TYPE_RE.match(type):
        problems.append(
            f"type {type!r} must be a name like 'Ready' or 'example.com/Ready' "
            f"(letters, digits, '-', '_', '.'; at most {CONDITION_TYPE_MAX_LENGTH} characters)"
        )
    if status not in _STATUSES:
        problems.append(f"status {status!r} must be one of 'True', 'False', 'Unknown'")
    if not reason or len(reason) > CONDITION_REASON_MAX_LENGTH or not _REASON_RE.match(reason):
        problems.append(
            f"reason {reason!r} must be CamelCase like 'ReplicasReady': a letter, then letters, "
            f"digits, '_', ',' or ':' (1-{CONDITION_REASON_MAX_LENGTH} characters, no spaces)"
        )
    if len(message) > CONDITION_MESSAGE_MAX_LENGTH:
        problems.append(
            f"message is {len(message)} characters; at most "
            f"{CONDITION_MESSAGE_MAX_LENGTH} are allowed"
        )
    if observed_generation is not None and observed_generation < 0:
        problems.append(f"observedGeneration {observed_generation} must not be negative")
    return problems


# --------------------------------------------------------------------------- the holder


def _list_item_type(annotation: Any) -> type | None:
    """The item class of ``list[X]`` (also inside ``list[X] | None``), if it is a class."""
    origin = typing.get_origin(annotation)
    if origin in (list, MutableSequence):
        (item,) = typing.get_args(annotation) or (None,)
        return item if isinstance(item, type) else None
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _list_item_type(arg)
            if found is not None:
                return found
    return None


def _holder_list(target: Any, *, create: bool) -> tuple[MutableSequence[Any], type | None]:
    """The conditions list of ``target`` and the class new items must have (None: dicts)."""
    if type(target) is dict:  # a status dict (the common case), without the ABC checks
        items = target.get("conditions")
        if type(items) is list:
            return items, None
    if isinstance(target, MutableSequence):
        for item in target:
            return target, (None if isinstance(item, Mapping) else type(item))
        return target, None
    if isinstance(target, MutableMapping):
        items = target.get("conditions")
        if items is None:
            items = []
            if create:
                target["conditions"] = items
        if not isinstance(items, MutableSequence):
            raise TypeError(f"status.conditions is a {type(items).__name__}, not a list")
        return items, None
    if hasattr(target, "conditions"):
        fields = getattr(type(target), "model_fields", {})
        info = fields.get("conditions")
        item_type = _list_item_type(info.annotation) if info is not None else None
        items = target.conditions
        if items is None:
            items = []
            if create:
                target.conditions = items
                items = target.conditions
        return items, item_type or _condition_class()
    raise TypeError(
        f"cannot find conditions in a {type(target).__name__}: pass the status dict, a typed "
        "status model with a 'conditions' field, or the conditions list itself"
    )


def _read(item: Any, name: str) -> Any:
    if type(item) is dict or isinstance(item, Mapping):
        return item.get(_JSON_NAMES[name])
    return getattr(item, name, None)


def _write(item: Any, name: str, value: Any) -> None:
    if type(item) is dict or isinstance(item, MutableMapping):
        key = _JSON_NAMES[name]
        if value is None:
            item.pop(key, None)
        else:
            item[key] = _format_time(value) if isinstance(value, datetime) else value
    else:
        setattr(item, name, value)


def _format_time(when: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, the wire form of ``metav1.Time``."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _index(items: MutableSequence[Any], condition_type: str) -> int:
    for i, item in enumerate(items):
        if _read(item, "type") == condition_type:
            return i
    return -1


# --------------------------------------------------------------------------- public functions


_VALID: set[tuple[str, str, str, str, int | None]] = set()
"""Conditions :func:`validate_condition` passed: a reconcile sets the same few each time."""
_VALID_MAX = 4096
_VALID_MESSAGE_MAX = 512  # longer messages are checked every time rather than kept


def _whole_seconds(now: datetime | None) -> datetime:
    """``now`` (default: the current time) truncated to whole seconds, as the server keeps it."""
    return (now or datetime.now(UTC)).replace(microsecond=0)


def set_condition(
    target: Any,
    /,
    type: str,
    status: ConditionStatus | bool,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    now: datetime | None = None,
) -> bool:
    """Add or update the condition of this ``type``; return whether anything changed.

    ``status`` may be a bool (``True`` -> ``"True"``). A new condition gets
    ``lastTransitionTime = now``; an existing one keeps its
    ``lastTransitionTime`` unless ``status`` flips, and takes the new reason,
    message and observed generation (``None`` removes a recorded generation,
    as ``metav1`` writes 0). ``now`` defaults to the current time, truncated
    to whole seconds as the API server stores it.

    Raises:
        ConditionError: the condition breaks the API server's rules; the
            message names each bad field. Nothing is changed then.
        TypeError: ``target`` holds no conditions list.

    """
    status_text: str = ("True" if status else "False") if isinstance(status, bool) else status
    if (type, status_text, reason, message, observed_generation) not in _VALID:
        problems = validate_condition(type, status_text, reason, message, observed_generation)
        if problems:
            raise ConditionError(f"condition {type!r} is invalid: " + "; ".join(problems))
        if len(message) <= _VALID_MESSAGE_MAX:
            if len(_VALID) >= _VALID_MAX:
                _VALID.clear()
            _VALID.add((type, status_text, reason, message, observed_generation))
    if now is not None and now.tzinfo is None:
        raise ConditionError("now= must be timezone-aware (for example datetime.now(UTC))")
    items, item_type = _holder_list(target, create=True)
    i = _index(items, type)
    if i < 0:
        when = _whole_seconds(now)
        values: dict[str, Any] = {
            "type": type,
            "status": status_text,
            "observed_generation": observed_generation,
            "last_transition_time": when,
            "reason": reason,
            "message": message,
        }
        if item_type is None:
            new_item: dict[str, Any] = {}
            for name, value in values.items():
                _write(new_item, name, value)
            items.append(new_item)
        else:
            # Pass every field, message included: an explicitly set field is always written,
            # and metav1.Condition requires 'message' even when empty.
            items.append(item_type(**values))
        return True
    item = items[i]
    changed = False
    if _read(item, "status") != status_text:
        _write(item, "status", status_text)
        _write(item, "last_transition_time", _whole_seconds(now))
        changed = True
    for name, value in (
        ("reason", reason),
        ("message", message),
        ("observed_generation", observed_generation),
    ):
        if _read(item, name) != value:
            _write(item, name, value)
            changed = True
    return changed


def remove_condition(target: Any, /, type: str) -> bool:
    """Remove the condition of this ``type``; return whether there was one."""
    items, _ = _holder_list(target, create=False)
    i = _index(items, type)
    if i < 0:
        return False
    del items[i]
    return True


def find_condition(target: Any, /, type: str) -> Condition | None:
    """The condition of this ``type`` as a :class:`Condition`, or ``None``.

    For typed lists of :class:`Condition` this is the stored item itself; for
    dicts it is a parsed copy. Change conditions with :func:`set_condition`.

    Raises:
        ConditionError: the stored condition is malformed (the message says how).

    """
    items, _ = _holder_list(target, create=False)
    i = _index(items, type)
    if i < 0:
        return None
    item = items[i]
    condition = _condition_class()
    if isinstance(item, condition):
        return item
    data = (
        dict(item)
        if isinstance(item, Mapping)
        else {json: _read(item, name) for name, json in _JSON_NAMES.items()}
    )
    try:
        return condition.model_validate(data)
    except ValueError as exc:
        raise ConditionError(f"stored condition {type!r} is malformed: {exc}") from exc


def is_condition_true(target: Any, /, type: str) -> bool:
    """Whether the condition of this ``type`` exists and its status is ``"True"``."""
    items, _ = _holder_list(target, create=False)
    i = _index(items, type)
    return i >= 0 and _read(items[i], "status") == "True"


def is_condition_false(target: Any, /, type: str) -> bool:
    """Whether the condition of this ``type`` exists and its status is ``"False"``.

    Absent and ``Unknown`` are neither true nor false.
    """
    items, _ = _holder_list(target, create=False)
    i = _index(items, type)
    return i >= 0 and _read(items[i], "status") == "False"


def set_observed_generation(obj: Any, generation: int | None = None) -> bool:
    """Set ``status.observedGeneration``; return whether it changed.

    Works on a JSON object (``status`` is created when missing) and on a typed
    resource whose status model declares ``observed_generation``. Call it in the
    status mutation after acting on the spec: readers then know the status
    describes the current spec.

    Pass ``generation``: the ``metadata.generation`` of the object the reconcile
    *acted on*. Without it the object's own generation is used, which is wrong
    inside a mutation that :func:`~setpoint.client.safe.update_status` re-runs
    on a fresher copy after a Conflict: that copy may carry a newer spec the
    reconcile never saw, and the status would claim it was handled.

    Raises:
        ValueError: the object has no ``metadata.generation`` (it was not read
            from the server), or its typed status declares no ``observed_generation``.

    """
    if isinstance(obj, MutableMapping):
        if generation is None:
            generation = generation_of(obj)
        if generation <= 0:
            raise ValueError(
                f"{describe(obj)} has no metadata.generation; pass the object as read from "
                "the API server"
            )
        status = obj.get("status")
        if not isinstance(status, MutableMapping):
            status = obj["status"] = {}
        if status.get("observedGeneration") == generation:
            return False
        status["observedGeneration"] = generation
        return True
    metadata = getattr(obj, "metadata", None)
    typed_generation = (
        generation if generation is not None else getattr(metadata, "generation", None)
    )
    if not isinstance(typed_generation, int) or typed_generation <= 0:
        raise ValueError(
            f"{type(obj).__name__} {getattr(metadata, 'name', '')!r} has no metadata.generation; "
            "pass the object as read from the API server"
        )
    status = getattr(obj, "status", None)
    if status is None:
        info = getattr(type(obj), "model_fields", {}).get("status")
        status_type = _optional_class(info.annotation) if info is not None else None
        if status_type is None:
            raise ValueError(f"{type(obj).__name__} declares no typed 'status' field")
        status = status_type()
        obj.status = status
    if "observed_generation" not in getattr(type(status), "model_fields", {}):
        raise ValueError(
            f"{type(status).__name__} has no 'observed_generation' field; declare "
            "`observed_generation: int | None = None` in the status model"
        )
    if status.observed_generation == typed_generation:
        return False
    status.observed_generation = typed_generation
    return True


def _optional_class(annotation: Any) -> type | None:
    """``X`` from ``X | None`` (or ``X`` itself), when ``X`` is a class."""
    if isinstance(annotation, type):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and arg is not type(None):
            return arg
    return None
