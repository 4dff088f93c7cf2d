"""Reconcile contexts for unit tests: call a reconciler directly, with a fake behind it.

A reconciler is an async function (or a ``reconcile`` method) taking a
:class:`~setpoint.controller.Context` and a :class:`~setpoint.controller.Request`. In
production the controller builds the context; in a unit test :func:`context_for` builds
one around a :class:`~setpoint.testing.FakeClient`, so the reconciler can be called as
it is called for real::

    fake = FakeClient(objects=[web])
    events = FakeRecorder()
    ctx = context_for(fake, ObjectKey("prod", "web"), recorder=events)
    result = await reconcile(ctx, ctx.request)
    assert [e.reason for e in events.events] == ["ConfigWritten"]

docs/guide/testing.md has the complete pattern (run verbatim by
tests/unit/testing/test_context.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.api.types import TypedObject, is_typed
from setpoint.controller.reconcile import Context, EventRecorder, Request
from setpoint.observability.logging import Logger, get_logger

if TYPE_CHECKING:
    from setpoint.testing.fake import FakeClient

__all__ = ["FakeRecorder", "RecordedEvent", "context_for"]

_REASON_LIMIT = 128


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """One Event a :class:`FakeRecorder` recorded, as the real recorder would send it."""

    type: str
    """``"Normal"`` or ``"Warning"``."""
    reason: str
    """Why, in UpperCamelCase (``"QuotaExceeded"``)."""
    message: str
    """The human-readable note."""
    action: str
    """What was done or failed; the reason when the caller named none."""
    regarding: JsonObject
    """A reference to the object the Event is about: apiVersion, kind, name and, when the
    object has them, namespace, uid and resourceVersion."""
    related: JsonObject | None = None
    """A reference to a second object involved, if any."""


@dataclass
class FakeRecorder:
    """An EventRecorder that keeps Events in memory, in order, so tests can assert on them.

    It takes what the manager's recorder takes (``event``, ``normal``, ``warning``) and
    refuses what it refuses: an Event whose type is not ``Normal``/``Warning``, whose
    reason or action is empty or longer than 128 characters, or whose object has no
    apiVersion, kind and name is not recorded. The real recorder drops such an Event (it
    never raises into a reconcile); this one drops it too and says why in
    :attr:`dropped`, so a test can assert that nothing was dropped. Repeats are recorded
    one by one (the real recorder folds them into one Event with a count).
    """

    events: list[RecordedEvent] = field(default_factory=list)
    """Every Event recorded, oldest first."""
    dropped: list[str] = field(default_factory=list)
    """Why each refused Event was refused, oldest first."""

    def event(
        self,
        obj: Mapping[str, Any] | TypedObject,
        type: str,
        reason: str,
        message: str,
        *,
        action: str | None = None,
        related: Mapping[str, Any] | TypedObject | None = None,
    ) -> None:
        """Record an Event of ``type`` about ``obj`` (see :class:`RecordedEvent`)."""
        action = reason if action is None else action
        problem = _problem(type, reason, action)
        regarding = _reference(obj)
        related_ref = _reference(related) if related is not None else None
        if problem is None and regarding is None:
            problem = "the object needs apiVersion, kind and metadata.name"
        if problem is not None or regarding is None:
            self.dropped.append(f"{type} {reason}: {problem}")
            return
        self.events.append(
            RecordedEvent(type, reason, str(message), action, regarding, related_ref)
        )

    def normal(self, obj: Mapping[str, Any] | TypedObject, reason: str, message: str) -> None:
        """Record a ``Normal`` Event."""
        self.event(obj, "Normal", reason, message)

    def warning(self, obj: Mapping[str, Any] | TypedObject, reason: str, message: str) -> None:
        """Record a ``Warning`` Event."""
        self.event(obj, "Warning", reason, message)

    def reasons(self) -> list[str]:
        """The reasons of the recorded Events, in order (the usual thing to assert)."""
        return [e.reason for e in self.events]


def _problem(type: str, reason: str, action: str) -> str | None:
    if type not in ("Normal", "Warning"):
        return f"type must be 'Normal' or 'Warning', not {type!r}"
    for label, value in (("reason", reason), ("action", action)):
        if not value or len(value) > _REASON_LIMIT:
            return f"{label} must be 1-{_REASON_LIMIT} characters, got {value!r}"
    return None


def _reference(obj: Mapping[str, Any] | TypedObject) -> JsonObject | None:
    data = obj.to_object() if is_typed(obj) else obj
    metadata = data.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    api_version, kind, name = data.get("apiVersion"), data.get("kind"), metadata.get("name")
    if not (isinstance(api_version, str) and isinstance(kind, str) and kind and name):
        return None
    ref: JsonObject = {"apiVersion": api_version, "kind": kind, "name": str(name)}
    for key in ("namespace", "uid", "resourceVersion"):
        if metadata.get(key):
            ref[key] = str(metadata[key])
    return ref


_NO_RECORDER: Any = object()


def context_for(
    client: FakeClient,
    request: Request,
    *,
    gvk: GroupVersionKind | type[TypedObject] | None = None,
    controller: str = "test",
    recorder: EventRecorder | None = _NO_RECORDER,
    log: Logger | None = None,
) -> Context:
    """A reconcile :class:`~setpoint.controller.Context` over ``client``, for a unit test.

    Expected Flow:
        Build the fake with the objects the test starts from, build the context for the
        object to reconcile, call the reconciler with ``(ctx, ctx.request)``, then assert on
        the fake's contents, the result and the recorded Events.

    Guarantees:
        - ``ctx.client`` is ``client``: every write goes to the fake (and through its
          fault rules, and into ``client.faults.calls``).
        - ``ctx.reader`` is ``client`` too: reads see every write at once, which is what
          the production reader guarantees for this process's own writes (it waits for
          the cache to catch up with them).
        - ``ctx.recorder`` is a fresh :class:`FakeRecorder` unless ``recorder`` is given
          (pass your own to keep a handle on it, or ``None`` for a controller built
          without one).
        - ``ctx.log`` is bound with the controller, namespace, name and reconcile id, as
          the controller binds it.
        - ``ctx.reconcile_id`` is a fresh UUID and ``ctx.gvk`` the ``gvk`` given (the
          controller's ``for_`` kind; a typed class stands for its GVK).

    Caveats:
        - Reads are not served from a cache: cache indexes (``list(..., index=...)``)
          and a cache's lag behind the server are not simulated. Test those with the
          controller running over the fake (``Builder(...).build(...)``) or against the
          control plane.
        - Nothing requeues: the returned :class:`~setpoint.controller.Result` is for the
          test to inspect.

    Errors:
        TypeError: ``request`` is not an :class:`~setpoint.api.keys.ObjectKey`.

    """
    if not isinstance(request, ObjectKey):
        raise TypeError(
            "context_for() takes the request as an ObjectKey(namespace, name) (what a "
            f"reconciler receives), not {type(request).__name__}: build one with "
            "ObjectKey(namespace, name), or key_of(obj) from setpoint.api.meta"
        )
    kind = gvk if gvk is None or isinstance(gvk, GroupVersionKind) else gvk.gvk
    reconcile_id = str(uuid.uuid4())
    bound = log or get_logger("setpoint.controller", controller=controller)
    if kind is not None:
        bound = bound.bind(gvk=str(kind))
    return Context(
        request=request,
        reconcile_id=reconcile_id,
        log=bound.bind(namespace=request.namespace, name=request.name, reconcile_id=reconcile_id),
        client=client,
        reader=client,
        recorder=FakeRecorder() if recorder is _NO_RECORDER else recorder,
        controller=controller,
        gvk=kind,
    )
