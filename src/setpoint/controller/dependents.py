"""Dependents in order: children applied one after another, each once the ones it needs are ready.

An operator with several children (a database before the app that uses it, a Secret before
the Deployment that mounts it) writes the ordering by hand around ``apply_child``. A
:class:`Dependents` declares it instead, as JOSDK's workflows do::

    dependents = Dependents(
        Dependent("credentials", credentials_secret),
        Dependent("database", database, depends_on=["credentials"], ready="Ready"),
        Dependent(
            "app", app_deployment, depends_on=["database"], ready=rollout_complete,
            activate=lambda parent: parent.spec.app_enabled,
        ),
        field_manager="shop-operator",
    )

    async def reconcile(ctx, request):
        shop = await ctx.reader.get(Shop, request.name, namespace=request.namespace)
        outcome = await dependents.reconcile(ctx, shop)
        ...

Each :class:`Dependent` says:

- what it is: ``desired(parent)`` returns the child (a dict or a typed object; a plain or
  ``async`` function), applied with :func:`~setpoint.client.safe.apply_child` and the parent
  as its controller owner;
- what it depends on (``depends_on``: names of other dependents);
- when it is ready: ``ready`` is a condition type that must be ``True`` on the live child
  (and, when the condition records an ``observedGeneration``, be about the child's current
  generation), or a function of the live child, or ``None``: ready once applied;
- when it applies: ``activate(parent)``; an inactive dependent is deleted if it exists
  (and is controlled by the parent), and the dependents that depend on it are inactive too;
- how it is deleted: by the garbage collector through the owner reference (the default),
  or by ``cleanup(ctx, parent, child)`` too, which :meth:`Dependents.cleanup` runs in
  reverse dependency order (call it from a finalizer's cleanup).

Expected flow
-------------
:meth:`Dependents.reconcile` walks the dependents in dependency order (declaration order
among independent ones). A dependent whose dependencies are all ready is applied and its
readiness checked; one whose dependency is not ready, or failed, is not applied (it is
*blocked*), so a chain stops at its first dependent that is not ready. Independent
branches still go on. Then one condition on the parent (``DependentsReady`` by default)
says the outcome: ``True``/``AllReady``; ``False``/``Waiting`` naming the dependents not
ready and the ones blocked behind them; ``False``/``Failed`` naming the one whose apply
failed and why. A failed apply then raises :class:`DependentFailed` (retried with
backoff), or :class:`DependentInvalid` when the server refused the child as invalid (a
terminal error: not retried until the parent changes).

A dependent that is not ready is not an error: the reconcile returns normally. The
controller should ``owns()`` the dependents' kinds, so a child turning ready reconciles
the parent again; :attr:`DependentsOutcome.requeue_after` is there for children whose
readiness no watch reports.

Errors
------
:class:`~setpoint.controller.reconcile.ControllerError` at declaration: two dependents of
one name, a dependency on a name not declared, or a cycle (the message shows it,
``a -> b -> a``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from setpoint.api.conditions import set_condition
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, generation_of, key_of
from setpoint.api.owners import OwnerError, is_controlled_by
from setpoint.api.types import is_typed
from setpoint.client._apply import apply_child
from setpoint.client._status import update_status
from setpoint.client.errors import ClientError, NotFound
from setpoint.controller.reconcile import (
    Context,
    ControllerError,
    ReconcileError,
    TerminalError,
)
from setpoint.controller.terminal import terminal_reason

__all__ = [
    "DEPENDENTS_CONDITION",
    "Dependent",
    "DependentFailed",
    "DependentInvalid",
    "DependentState",
    "Dependents",
    "DependentsOutcome",
    "rollout_complete",
]

DEPENDENTS_CONDITION = "DependentsReady"
"""The parent's condition that reports the dependents, unless ``Dependents(condition=)``."""

DependentState = Literal["ready", "waiting", "blocked", "failed", "inactive"]
"""Where a dependent stands after a reconcile: applied and ready; applied and not ready;
not applied because a dependency is not ready (or failed); its apply failed; not active
(deleted if it existed)."""

Desired = Callable[[Any], Any]
Readiness = str | Callable[[Any], bool] | None
Cleanup = Callable[[Context, Any, Any], Awaitable[None]]


class DependentFailed(ReconcileError):
    """Applying a dependent failed; the reconcile is retried with backoff.

    The parent's condition names the dependent and the cause (``__cause__``).
    """

    __module__ = "setpoint"

    def __init__(self, dependent: str, message: str) -> None:
        super().__init__(message)
        self.dependent = dependent
        """The name of the dependent that failed."""


class DependentInvalid(TerminalError):
    """The server refused a dependent as invalid: not retried until the parent changes.

    The child is computed from the parent's spec, so only a change of the parent (or of
    the code) can fix it; the controller records it as a terminal error (``Stalled``).
    """

    __module__ = "setpoint"

    def __init__(self, dependent: str, message: str) -> None:
        super().__init__(message)
        self.dependent = dependent
        """The name of the dependent the server refused."""


@dataclass(frozen=True, slots=True)
class Dependent:
    """One child of a :class:`Dependents` workflow (see the module docstring)."""

    name: str
    """Its name within the workflow (in ``depends_on`` and in the parent's condition)."""
    desired: Desired
    """``desired(parent)``: the child to apply (dict or typed; plain or ``async``). For an
    inactive dependent it is called too, to know which object to delete."""
    depends_on: Iterable[str] = ()
    """Names of the dependents that must be ready before this one is applied."""
    ready: Readiness = None
    """A condition type that must be ``True`` on the live child, a function of the live
    child, or ``None`` (ready once applied)."""
    activate: Callable[[Any], bool] | None = None
    """``activate(parent)``: whether the dependent applies now (``None``: always)."""
    cleanup: Cleanup | None = None
    """``async cleanup(ctx, parent, child)``: explicit deletion work, run by
    :meth:`Dependents.cleanup` (and before deleting a dependent that became inactive).
    ``None``: the garbage collector deletes the child with its owner."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ControllerError(f"a dependent needs a name, not {self.name!r}")
        if not callable(self.desired):
            raise ControllerError(
                f"dependent {self.name!r}: desired must be a function of the parent returning "
                f"the child, not {self.desired!r}"
            )
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        if isinstance(self.ready, str) and not self.ready:
            raise ControllerError(f"dependent {self.name!r}: ready='' names no condition")


@dataclass
class DependentsOutcome:
    """What :meth:`Dependents.reconcile` did, dependent by dependent."""

    states: dict[str, DependentState] = field(default_factory=dict)
    """Each dependent's state, in the order they were walked."""
    children: dict[str, Any] = field(default_factory=dict)
    """The live child of each applied dependent (as ``apply_child`` returned it)."""
    errors: dict[str, BaseException] = field(default_factory=dict)
    """The error of each dependent whose apply (or deletion) failed."""
    deleting: set[str] = field(default_factory=set)
    """The failed dependents whose failure was deleting an inactive child."""
    requeue_after: float | None = None
    """Seconds after which to look again when something is not ready (``Dependents``'
    ``poll_not_ready``), else ``None``."""

    @property
    def ready(self) -> bool:
        """Whether every active dependent is applied and ready."""
        return all(state in ("ready", "inactive") for state in self.states.values())

    def named(self, state: DependentState) -> list[str]:
        """The dependents in ``state``, in walk order."""
        return [name for name, s in self.states.items() if s == state]


class Dependents:
    """A declared set of dependents, applied in dependency order (see the module docstring).

    Args:
        dependents: The dependents, in the order to walk independent ones.
        field_manager: The field manager of the applies.
        condition: The parent's condition type that reports the outcome; ``None`` writes
            none (the caller reports :class:`DependentsOutcome` itself).
        poll_not_ready: Seconds after which a reconcile should look again while something
            is not ready (:attr:`DependentsOutcome.requeue_after`); ``None``: rely on
            ``owns()`` events.

    Raises:
        ControllerError: a repeated name, a dependency on an unknown name, or a cycle.

    """

    def __init__(
        self,
        *dependents: Dependent,
        field_manager: str,
        condition: str | None = DEPENDENTS_CONDITION,
        poll_not_ready: float | None = None,
    ) -> None:
        if not dependents:
            raise ControllerError("Dependents() needs at least one Dependent")
        by_name: dict[str, Dependent] = {}
        for dependent in dependents:
            if not isinstance(dependent, Dependent):
                raise ControllerError(f"Dependents() takes Dependent objects, not {dependent!r}")
            if dependent.name in by_name:
                raise ControllerError(
                    f"two dependents are named {dependent.name!r}; give each its own name"
                )
            by_name[dependent.name] = dependent
        for dependent in dependents:
            for needed in dependent.depends_on:
                if needed not in by_name:
                    raise ControllerError(
                        f"dependent {dependent.name!r} depends on {needed!r}, which is not "
                        f"declared (declared: {', '.join(by_name)})"
                    )
        self._by_name = by_name
        self._order = _dependency_order(dependents)
        self.field_manager = field_manager
        """The field manager of the applies."""
        self.condition = condition
        """The parent's condition type that reports the outcome (``None``: none)."""
        self.poll_not_ready = poll_not_ready
        """Seconds after which to look again while something is not ready."""
        self._warned_no_status = False

    @property
    def order(self) -> tuple[str, ...]:
        """The dependents' names in the order :meth:`reconcile` walks them."""
        return tuple(d.name for d in self._order)

    async def reconcile(self, ctx: Context, parent: Any) -> DependentsOutcome:
        """Apply the dependents in order, report them on ``parent``, return what happened.

        Raises:
            DependentFailed: a dependent's apply failed (after the condition was written).
            DependentInvalid: the server refused a dependent as invalid.

        """
        outcome = DependentsOutcome()
        states = outcome.states
        for dependent in self._order:
            needs = [states[name] for name in dependent.depends_on]
            if any(state == "inactive" for state in needs) or not _active(dependent, parent):
                states[dependent.name] = "inactive"
                try:
                    await self._deactivate(ctx, parent, dependent)
                except ClientError as exc:
                    states[dependent.name] = "failed"
                    outcome.errors[dependent.name] = exc
                    outcome.deleting.add(dependent.name)
                    ctx.log.warning(
                        "Deleting an inactive dependent failed",
                        dependent=dependent.name,
                        error=str(exc),
                    )
                continue
            if any(state != "ready" for state in needs):
                states[dependent.name] = "blocked"
                continue
            try:
                desired = await _in_namespace(
                    ctx, await _maybe_await(dependent.desired(parent)), parent
                )
                _, live = await apply_child(
                    ctx.client, desired, field_manager=self.field_manager, owner=parent
                )
            except (ClientError, ReconcileError, OwnerError) as exc:
                states[dependent.name] = "failed"
                outcome.errors[dependent.name] = exc
                ctx.log.warning(
                    "Applying a dependent failed", dependent=dependent.name, error=str(exc)
                )
                continue
            outcome.children[dependent.name] = live
            states[dependent.name] = "ready" if _is_ready(dependent, live) else "waiting"
        if not outcome.ready and self.poll_not_ready is not None:
            outcome.requeue_after = self.poll_not_ready
        await self._report(ctx, parent, outcome)
        failed = outcome.named("failed")
        if failed:
            name = failed[0]
            error = outcome.errors[name]
            verb = "deleting" if name in outcome.deleting else "applying"
            message = f"{verb} dependent {name!r} failed: {error}"
            if terminal_reason(error) is not None:
                raise DependentInvalid(name, message) from error
            raise DependentFailed(name, message) from error
        return outcome

    async def cleanup(self, ctx: Context, parent: Any) -> None:
        """Run the explicit cleanups, dependents before what they depend on.

        For a finalizer's cleanup: each dependent with a ``cleanup`` gets its live child
        (``None`` when it does not exist). Dependents without one are left to the garbage
        collector.
        """
        for dependent in reversed(self._order):
            if dependent.cleanup is None:
                continue
            live = await self._live(ctx, parent, dependent)
            await dependent.cleanup(ctx, parent, live)

    def describe(self, outcome: DependentsOutcome) -> tuple[bool, str, str]:
        """The condition reporting ``outcome``: ``(status, reason, message)``."""
        failed = outcome.named("failed")
        waiting = outcome.named("waiting")
        blocked = outcome.named("blocked")
        if failed:
            name = failed[0]
            verb = "deleting" if name in outcome.deleting else "applying"
            message = f"{verb} {name} failed: {outcome.errors[name]}"
            if blocked:
                message += f"; not applied until it succeeds: {', '.join(blocked)}"
            return False, "Failed", _clip(message)
        if waiting or blocked:
            message = f"waiting for {', '.join(waiting)} to be ready"
            if blocked:
                message += f"; not applied yet: {', '.join(blocked)}"
            return False, "Waiting", _clip(message)
        ready = outcome.named("ready")
        inactive = outcome.named("inactive")
        message = f"ready: {', '.join(ready)}" if ready else "no active dependents"
        if inactive:
            message += f"; inactive: {', '.join(inactive)}"
        return True, "AllReady", _clip(message)

    async def _report(self, ctx: Context, parent: Any, outcome: DependentsOutcome) -> None:
        condition = self.condition
        if condition is None:
            return
        status, reason, message = self.describe(outcome)
        generation = generation_of(_json(parent)) or None

        def mutate(obj: Any) -> None:
            set_condition(
                _status_of(obj),
                condition,
                status,
                reason,
                message,
                observed_generation=generation,
            )

        try:
            await update_status(ctx.client, parent, mutate)
        except NotFound:
            return
        except ClientError as exc:
            ctx.log.warning(
                "Could not write the dependents' condition", condition=condition, error=str(exc)
            )
        except ValueError as exc:  # the parent's kind has no status subresource
            if not self._warned_no_status:
                self._warned_no_status = True
                ctx.log.warning(
                    "The dependents' condition cannot be written; pass Dependents("
                    "condition=None) and report DependentsOutcome yourself",
                    condition=condition,
                    error=str(exc),
                )

    async def _deactivate(self, ctx: Context, parent: Any, dependent: Dependent) -> None:
        """Delete an inactive dependent's child if it exists and the parent controls it."""
        live = await self._live(ctx, parent, dependent)
        if live is None or not is_controlled_by(live, parent):
            return
        if dependent.cleanup is not None:
            await dependent.cleanup(ctx, parent, live)
        data = _json(live)
        key = key_of(data)
        kind = _kind_of(data)
        try:
            await ctx.client.delete(kind, key.name, namespace=key.namespace or None)
        except NotFound:
            return
        ctx.log.info("Deleted an inactive dependent", dependent=dependent.name, child=str(key))

    async def _live(self, ctx: Context, parent: Any, dependent: Dependent) -> JsonObject | None:
        """The dependent's child as it exists now (from ``ctx.reader``), or ``None``."""
        try:
            desired = _json(await _maybe_await(dependent.desired(parent)))
        except Exception as exc:
            ctx.log.debug(
                "The dependent's object could not be computed; nothing to delete",
                dependent=dependent.name,
                error=str(exc),
            )
            return None
        key = key_of(desired)
        if not key.namespace:
            # apply_child puts a namespaced owner's children in its namespace.
            key = ObjectKey(key_of(_json(parent)).namespace, key.name)
        try:
            got: JsonObject = await ctx.reader.get(
                _kind_of(desired), key.name, namespace=key.namespace or None
            )
        except NotFound:
            return None
        return got


# -- readiness -------------------------------------------------------------------------------


def rollout_complete(child: Any) -> bool:
    """Readiness of a Deployment or StatefulSet: its rollout of the current spec finished.

    ``status.observedGeneration`` has caught up with ``metadata.generation``, and the
    updated, ready (and, when reported, available) replicas all equal ``spec.replicas``
    (default 1), as ``kubectl rollout status`` checks.
    """
    data = _json(child)
    spec = data.get("spec") or {}
    status = data.get("status") or {}
    replicas = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < generation_of(data):
        return False
    counts = [status.get("updatedReplicas", 0), status.get("readyReplicas", 0)]
    if "availableReplicas" in status or data.get("kind") == "Deployment":
        counts.append(status.get("availableReplicas", 0))
    return all(count == replicas for count in counts)


def _is_ready(dependent: Dependent, live: Any) -> bool:
    ready = dependent.ready
    if ready is None:
        return True
    if callable(ready):
        return bool(ready(live))
    data = _json(live)
    conditions = (data.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == ready:
            observed = condition.get("observedGeneration")
            current = observed is None or observed == generation_of(data)
            return bool(condition.get("status") == "True" and current)
    return False


# -- helpers -------------------------------------------------------------------------------


def _dependency_order(dependents: Iterable[Dependent]) -> list[Dependent]:
    """Dependents after what they depend on; declaration order among independent ones.

    Raises:
        ControllerError: the dependencies form a cycle (named in the message).

    """
    listed = list(dependents)
    by_name = {d.name: d for d in listed}
    order: list[Dependent] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: placed

    def visit(dependent: Dependent, path: list[str]) -> None:
        mark = state.get(dependent.name)
        if mark == 2:
            return
        if mark == 1:
            cycle = [*path[path.index(dependent.name) :], dependent.name]
            raise ControllerError(
                f"dependents form a cycle: {' -> '.join(cycle)}; a dependent cannot wait, "
                "directly or through others, for itself"
            )
        state[dependent.name] = 1
        for needed in dependent.depends_on:
            visit(by_name[needed], [*path, dependent.name])
        state[dependent.name] = 2
        order.append(dependent)

    for dependent in listed:
        visit(dependent, [])
    return order


async def _in_namespace(ctx: Context, desired: Any, parent: Any) -> Any:
    """``desired`` in its namespaced parent's namespace when it names none.

    A dict is copied with the namespace; a typed child (a pydantic model with
    ``metadata.namespace``) is copied with ``model_copy`` and the namespace set, so the
    author's object is never changed.
    """
    data = _json(desired)
    namespace = key_of(_json(parent)).namespace
    if (data.get("metadata") or {}).get("namespace") or not namespace:
        return desired
    info = await ctx.client.resource_info(_kind_of(data))
    if not info.namespaced:
        return desired
    if isinstance(desired, dict):
        metadata = desired.get("metadata") or {}
        return {**desired, "metadata": {**metadata, "namespace": namespace}}
    copy = getattr(desired, "model_copy", None)
    if copy is None or getattr(desired, "metadata", None) is None:
        return desired  # apply_child says what is missing
    placed = copy(deep=True)
    placed.metadata.namespace = namespace
    return placed


def _active(dependent: Dependent, parent: Any) -> bool:
    return dependent.activate is None or bool(dependent.activate(parent))


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _json(obj: Any) -> JsonObject:
    if is_typed(obj):
        return obj.to_object()
    if isinstance(obj, dict):
        return obj
    raise TypeError(f"expected a Kubernetes object (dict or typed), not {type(obj).__name__}")


def _kind_of(data: JsonObject) -> GroupVersionKind:
    return GroupVersionKind.from_api_version(str(data.get("apiVersion")), str(data.get("kind")))


def _status_of(obj: Any) -> Any:
    """The status of a parent copy, created empty when it has none (dict or typed)."""
    if not is_typed(obj):
        status = obj.get("status")
        if not isinstance(status, dict):
            status = obj["status"] = {}
        return status
    status = getattr(obj, "status", None)
    if status is None:
        info = getattr(type(obj), "model_fields", {}).get("status")
        annotation = info.annotation if info is not None else None
        for candidate in getattr(annotation, "__args__", ()) or (annotation,):
            if isinstance(candidate, type) and candidate is not type(None):
                status = candidate()
                break
        else:
            raise TypeError(
                f"{type(obj).__name__} has no status class to hold the dependents' condition"
            )
        obj.status = status  # type: ignore[attr-defined]
    return status


_MESSAGE_MAX = 1024


def _clip(message: str) -> str:
    return message if len(message) <= _MESSAGE_MAX else message[: _MESSAGE_MAX - 3] + "..."
