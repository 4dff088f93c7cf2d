"""Finalizer patches: add and remove one finalizer without ever dropping another's.

The handler registry (controller layer) builds on these two functions; they
are the only way setpoint writes ``metadata.finalizers``.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from setpoint.api.meta import finalizers_of, metadata_of
from setpoint.api.validation import is_qualified_name
from setpoint.client._safebase import (
    DEFAULT_RETRY,
    RetryOptions,
    SafeClient,
    as_json,
    backoff,
    describe_target,
    is_lost_race,
    resolve,
)
from setpoint.client.errors import ApiError, Invalid, NotFound
from setpoint.client.patch import JsonPatch, json_pointer

__all__ = [
    "FinalizerOutcome",
    "FinalizerResult",
    "add_finalizer",
    "has_finalizer",
    "remove_finalizer",
    "validate_finalizer_name",
]

# A qualified name "prefix/name": DNS-subdomain prefix, then a name part of up to 63
# characters (k8s.io/apimachinery/pkg/util/validation IsQualifiedName).

_FINALIZERS = json_pointer("metadata", "finalizers")


class FinalizerOutcome(enum.Enum):
    """What :func:`add_finalizer` or :func:`remove_finalizer` found and did."""

    ADDED = "added"
    """The finalizer was not there and was added."""
    REMOVED = "removed"
    """The finalizer was there and was removed."""
    ALREADY_PRESENT = "already-present"
    """Add: the finalizer was already there; no request was sent."""
    ALREADY_ABSENT = "already-absent"
    """Remove: the finalizer was not there; no request was sent."""
    DELETING = "deleting"
    """Add: refused, because the object is being deleted (``deletionTimestamp`` is set).

    The API server forbids new finalizers on a deleting object (422,
    "no new finalizers can be added if the object is being deleted"); a
    controller seeing this should run its cleanup, if it has anything to clean
    up, instead of protecting the object."""
    GONE = "gone"
    """The object does not exist (any more). For a remove this is success:
    nothing is left to finalize."""


class FinalizerResult(NamedTuple):
    """The outcome and the object as last seen (``None`` when ``GONE``).

    Unpacks as a pair: ``outcome, obj = await add_finalizer(...)``.
    """

    outcome: FinalizerOutcome
    """What happened."""
    object: Any
    """The object after the patch, or as read when no patch was needed."""


def validate_finalizer_name(finalizer: str) -> None:
    """Check that ``finalizer`` is a domain-qualified name (``example.com/cleanup``).

    The API server rejects unqualified names other than its own built-in ones
    (``kubernetes``, ``orphan``, ``foregroundDeletion``) for built-in kinds
    and warns for custom resources; qualified names also keep two controllers
    from sharing a finalizer by accident.

    Raises:
        ValueError: naming the finalizer and the rule.

    """
    if "/" not in finalizer or not is_qualified_name(finalizer):
        raise ValueError(
            f"finalizer {finalizer!r} must be a domain-qualified name like "
            "'example.com/cleanup' (a DNS subdomain, '/', then up to 63 letters, digits, "
            "'-', '_' or '.')"
        )


def has_finalizer(obj: Any, finalizer: str) -> bool:
    """Whether ``obj`` (dict or typed) lists ``finalizer`` in ``metadata.finalizers``."""
    return finalizer in finalizers_of(as_json(obj))


def _adds_to_deleting(error: ApiError) -> bool:
    # The server's answer to a new finalizer on a deleting object (verified on
    # kube-apiserver): 422 with a FieldValueForbidden cause on metadata.finalizers.
    return isinstance(error, Invalid) and any(
        c.field == "metadata.finalizers" and c.reason == "FieldValueForbidden" for c in error.causes
    )


async def add_finalizer(
    client: SafeClient,
    target: Any,
    finalizer: str,
    *,
    retry: RetryOptions = DEFAULT_RETRY,
) -> FinalizerResult:
    """Add ``finalizer`` to the object's ``metadata.finalizers``, keeping everyone else's.

    ``target`` is the object (dict or typed) or a ``(kind, ObjectKey)`` pair.

    Expected Flow:
        1. Start from ``target`` if it is an object, else GET it.
        2. Match the object's state:

           - gone (404): ``GONE``;
           - being deleted (``deletionTimestamp`` set): ``DELETING``, no request;
           - finalizer already listed: ``ALREADY_PRESENT``, no request;
           - otherwise send a JSON patch: ``test`` that ``/metadata/finalizers``
             is still exactly the list read (``null`` when there is none), then
             ``add`` the finalizer at its end (or the list ``[finalizer]``).
        3. Patch applied: ``ADDED``. The ``test`` failed (another writer
           changed the list), or the object started deleting meanwhile:
           wait, GET it again, and go back to 2.

    Guarantees:
        - Never drops or reorders another controller's finalizer: the patch
          applies only to the very list it was computed from, atomically.
        - Never adds a finalizer to an object being deleted (the server
          forbids it too; both the local check and the server's refusal end
          in ``DELETING``).
        - No request when there is nothing to do.

    Assumptions:
        - The finalizer name is owned by one controller (validated to be
          domain-qualified, ``example.com/cleanup``).

    Caveats:
        - Add the finalizer *before* creating anything outside the object that
          needs cleaning up; otherwise a delete in between leaks it.
        - ``ADDED`` on a stale ``target`` is still exact: the ``test`` makes a
          stale list fail and re-read rather than overwrite.

    Errors:
        ValueError: the finalizer name is not domain-qualified.
        Invalid: still losing the race after ``retry.attempts``, or another
            validation failure (its ``causes`` name the field).

    """
    validate_finalizer_name(finalizer)
    kind, key, current = resolve(target)
    what = f"adding finalizer {finalizer!r} to {describe_target(kind, key)}"
    delays = retry.delays()
    while True:
        if current is None:
            try:
                current = await client.get(kind, key.name, namespace=key.namespace or None)
            except NotFound:
                return FinalizerResult(FinalizerOutcome.GONE, None)
        data = as_json(current)
        if metadata_of(data).get("deletionTimestamp"):
            return FinalizerResult(FinalizerOutcome.DELETING, current)
        present = finalizers_of(data)
        if finalizer in present:
            return FinalizerResult(FinalizerOutcome.ALREADY_PRESENT, current)
        ops: list[dict[str, Any]]
        if present:
            ops = [
                {"op": "test", "path": _FINALIZERS, "value": present},
                {"op": "add", "path": _FINALIZERS + "/-", "value": finalizer},
            ]
        else:
            # JSON patch cannot append to a missing list; test that it is still
            # missing (a missing member tests equal to null) and create it.
            ops = [
                {"op": "test", "path": _FINALIZERS, "value": None},
                {"op": "add", "path": _FINALIZERS, "value": [finalizer]},
            ]
        try:
            written = await client.patch(
                kind, key.name, JsonPatch(ops), namespace=key.namespace or None
            )
        except NotFound:
            return FinalizerResult(FinalizerOutcome.GONE, None)
        except ApiError as error:
            if not (is_lost_race(error) or _adds_to_deleting(error)):
                raise
            await backoff(delays, error, what, retry.attempts)
            current = None
            continue
        return FinalizerResult(FinalizerOutcome.ADDED, written)


async def remove_finalizer(
    client: SafeClient,
    target: Any,
    finalizer: str,
    *,
    retry: RetryOptions = DEFAULT_RETRY,
) -> FinalizerResult:
    """Remove ``finalizer`` from the object's ``metadata.finalizers``, keeping everyone else's.

    ``target`` is the object (dict or typed) or a ``(kind, ObjectKey)`` pair.

    Expected Flow:
        1. Start from ``target`` if it is an object, else GET it.
        2. Match the object's state:

           - gone (404): ``GONE``;
           - finalizer not listed: ``ALREADY_ABSENT``, no request;
           - otherwise send a JSON patch that, for each index holding the
             finalizer (last first), tests that the index still holds it
             and removes it.
        3. Patch applied: ``REMOVED`` (if it was the last finalizer of a
           deleting object, the server deletes the object now). The ``test``
           failed (the list shifted): wait, GET it again, go back to 2. The
           object vanished meanwhile: ``GONE``.

    Guarantees:
        - Removes exactly this finalizer: each removal is tested at its index,
          so a list that changed meanwhile fails the patch instead of losing
          another controller's entry.
        - Works on deleting objects (removal is always allowed).
        - No request when there is nothing to do.

    Assumptions:
        - The caller finished its cleanup: once the last finalizer is gone the
          object is deleted and the controller gets no further chance.

    Caveats:
        - ``GONE`` after the patch was sent means someone else completed the
          deletion; nothing is left to do either way.

    Errors:
        Invalid: still losing the race after ``retry.attempts``.

    """
    kind, key, current = resolve(target)
    what = f"removing finalizer {finalizer!r} from {describe_target(kind, key)}"
    delays = retry.delays()
    while True:
        if current is None:
            try:
                current = await client.get(kind, key.name, namespace=key.namespace or None)
            except NotFound:
                return FinalizerResult(FinalizerOutcome.GONE, None)
        present = finalizers_of(as_json(current))
        indexes = [i for i, name in enumerate(present) if name == finalizer]
        if not indexes:
            return FinalizerResult(FinalizerOutcome.ALREADY_ABSENT, current)
        ops = []
        for i in reversed(indexes):  # last first, so earlier indexes stay valid
            pointer = json_pointer("metadata", "finalizers", i)
            ops.append({"op": "test", "path": pointer, "value": finalizer})
            ops.append({"op": "remove", "path": pointer})
        try:
            written = await client.patch(
                kind, key.name, JsonPatch(ops), namespace=key.namespace or None
            )
        except NotFound:
            return FinalizerResult(FinalizerOutcome.GONE, None)
        except ApiError as error:
            if not is_lost_race(error):
                raise
            await backoff(delays, error, what, retry.attempts)
            current = None
            continue
        return FinalizerResult(FinalizerOutcome.REMOVED, written)
