"""The status writer: mutation-based, conflict-retrying writes through the status subresource."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from setpoint.api.errors import SetpointError
from setpoint.api.jsonvalues import deep_copy, json_equal
from setpoint.api.kinds import ResourceInfo
from setpoint.api.types import is_typed
from setpoint.client._safebase import (
    DEFAULT_RETRY,
    MutateFn,
    OperationResult,
    RetryOptions,
    SafeClient,
    WriteResult,
    as_json,
    backoff,
    call_mutate,
    describe_target,
    gvk_for,
    is_lost_race,
    resolve,
)
from setpoint.client.errors import ApiError

__all__ = ["MutationScopeError", "require_status_subresource", "update_status"]


class MutationScopeError(SetpointError, ValueError):
    """A mutation changed a part of the object the chosen write must not touch.

    A status write changed spec or metadata, or a spec write changed status.
    The server would silently drop those changes; setpoint refuses instead,
    naming the fields, so the bug is found on the first run.
    """

    __module__ = "setpoint"


def changed_top_level(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Top-level fields (``metadata`` split per key) that differ between two JSON objects."""
    if json_equal(before, after):  # the usual answer of a reconcile with nothing to do
        return []
    changed: list[str] = []
    for key in sorted(set(before) | set(after)):
        if json_equal(before.get(key), after.get(key)):
            continue
        if key == "metadata":
            old, new = before.get(key) or {}, after.get(key) or {}
            changed.extend(
                f"metadata.{k}"
                for k in sorted(set(old) | set(new))
                if not json_equal(old.get(k), new.get(k))
            )
        else:
            changed.append(key)
    return changed


async def require_status_subresource(client: SafeClient, kind: Any, what: str) -> ResourceInfo:
    """The kind's ResourceInfo; raise ``ValueError`` if it serves no ``status`` subresource."""
    info = await client.resource_info(kind)
    if "status" not in info.subresources:
        raise ValueError(
            f"{what}: {gvk_for(kind).kind} has no status subresource, so there is no separate "
            "status to write. Enable it in the CRD (subresources: {status: {}}), or write the "
            "field with create_or_patch"
        )
    return info


async def update_status(
    client: SafeClient,
    target: Any,
    mutate: MutateFn,
    *,
    field_manager: str | None = None,
    retry: RetryOptions = DEFAULT_RETRY,
) -> WriteResult[Any]:
    """Change an object's status with ``mutate`` and write it through the ``status`` subresource.

    ``target`` is the object (dict or typed; its kind and key are taken from
    it) or a ``(kind, ObjectKey)`` pair. ``mutate`` receives a private copy of
    the object and changes its ``status`` in place (or returns a replacement);
    it may be sync or async.

    Expected Flow:
        1. Start from ``target`` if it is an object (no extra read), else GET it.
        2. Copy it and run ``mutate`` on the copy.
        3. If the status did not change, stop: ``UNCHANGED``, no request sent.
        4. PUT the object to ``.../status``, carrying the resourceVersion it
           was read at. The server replaces the status only, and only if the
           object has not changed since.
        5. On Conflict: wait a jittered, growing delay, GET the object again
           and go back to 2 with the fresh copy.

    Guarantees:
        - Only ``.../status`` is written; spec and metadata are never sent as
          changes (a mutation that changes them is refused, see Errors).
        - No write is lost: every write is conditional on the resourceVersion
          it was computed from, and a retry recomputes from a fresh read, so
          concurrent writers' status changes survive (each writer's mutation
          is re-applied on top of the others').
        - No request is sent when the mutation changes nothing.
        - The caller's object is never modified.

    Assumptions:
        - ``mutate`` is a function of the object it receives (and of state it
          captured that does not depend on an earlier read), and is safe to
          run several times.
        - The kind serves a ``status`` subresource.

    Caveats:
        - A retry runs ``mutate`` on a fresher copy, whose spec may be newer
          than the one the reconcile acted on. Capture what you acted on
          before calling (``generation = obj.metadata.generation``) and write
          that (``set_observed_generation(o, generation)``), never the fresh
          copy's own generation.
        - A stale ``target`` costs one failed write (Conflict) before the
          re-read; pass ``(kind, key)`` to always read first.
        - Starting from a stale ``target`` whose status already looks
          right returns ``UNCHANGED`` without reading; the newer version that
          made it stale triggers another reconcile, which then sees the truth.

    Errors:
        Conflict: still losing after ``retry.attempts`` writes; a note says so.
        MutationScopeError: ``mutate`` changed spec or metadata.
        NotFound: the object does not exist (any more).
        ValueError: the kind has no status subresource.

    Returns:
        ``WriteResult(UPDATED, written object)`` or ``WriteResult(UNCHANGED, object)``.

    """
    kind, key, current = resolve(target)
    what = f"status write of {describe_target(kind, key)}"
    await require_status_subresource(client, kind, what)
    delays: Iterator[float] | None = None  # made on the first Conflict only
    while True:
        if current is None:
            current = await client.get(kind, key.name, namespace=key.namespace or None)
        # ``current`` is only read (the mutation gets its own copy), so it needs no copy.
        before = as_json(current)
        working = await call_mutate(mutate, deep_copy(current))
        after = as_json(working)
        if json_equal(before, after):  # the usual answer of a reconcile with nothing to do
            return WriteResult(OperationResult.UNCHANGED, current)
        outside = [f for f in changed_top_level(before, after) if f != "status"]
        if outside:
            raise MutationScopeError(
                f"{what}: the mutation changed {', '.join(outside)}; a status write sends status "
                "only (the server would drop the rest). Change spec and metadata with "
                "create_or_patch, and finalizers with add_finalizer/remove_finalizer"
            )
        if json_equal(before.get("status"), after.get("status")) or _same_values(current, working):
            return WriteResult(OperationResult.UNCHANGED, current)
        try:
            written = await client.update(
                working, subresource="status", field_manager=field_manager
            )
        except ApiError as error:
            if not is_lost_race(error):
                raise
            delays = retry.delays() if delays is None else delays
            await backoff(delays, error, what, retry.attempts)
            current = None
            continue
        return WriteResult(OperationResult.UPDATED, written)


def _same_values(current: Any, working: Any) -> bool:
    """Whether two typed objects hold the same status values (an equal assignment is no change).

    A field assigned its default value counts as set and appears in the JSON; compared by
    value (:func:`~setpoint.api.resource.semantic_json`) the status did not change.
    """
    if not (is_typed(current) and is_typed(working)):
        return False
    from setpoint.api.resource import Model, semantic_json  # typed objects loaded pydantic

    if not (isinstance(current, Model) and isinstance(working, Model)):
        return False
    return json_equal(semantic_json(current).get("status"), semantic_json(working).get("status"))
