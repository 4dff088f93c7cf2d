"""Errors retrying cannot fix: stop, say so on the object, and wait for the object to change.

A reconcile that fails on bad input (a label selector typed wrong in a spec, a child name
the API server refuses, a desired object the server rejects as invalid) fails the same way
on every retry. Retrying with backoff only fills the logs. Such a failure is *terminal for
that object*:

- the key is not retried, and events for it (from its children, a resync, its own status
  write) do not reconcile it again until the object itself changes: its ``generation``,
  labels, annotations or deletion (its ``resourceVersion`` for kinds without a generation);
- a ``Warning`` Event says what failed (reason: see :func:`terminal_reason`);
- with a status subresource, a ``Stalled`` condition (``ControllerOptions.terminal_condition``)
  holds the reason and the error; the next successful reconcile removes it;
- the metrics count it in ``controller_runtime_terminal_reconcile_errors_total``.

Which errors are terminal (:func:`terminal_reason`):

======================================================  =====================
error                                                   reason
======================================================  =====================
:class:`~setpoint.controller.TerminalError` (raise it)  its class name
:class:`~setpoint.cache.selectors.SelectorError`        ``InvalidSelector``
``Invalid`` (422) with field causes: a name, a label,   ``Invalid``
a schema violation the server names
``BadRequest`` (400): a malformed selector or request   ``BadRequest``
:class:`~setpoint.cache.errors.UndecodableObject` for   ``InvalidObject``
the object being reconciled: the cache holds it, but
its typed class refuses it
======================================================  =====================

Everything else (conflicts, timeouts, 5xx, a missing dependency, a bug) is retried with
backoff as before. A 422 *without* causes is a failed JSON-patch ``test`` (a lost race),
which is retried.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.api.redaction import redact_text
from setpoint.cache.errors import UndecodableObject
from setpoint.cache.selectors import SelectorError
from setpoint.client.errors import BadRequest, Invalid
from setpoint.controller.reconcile import TerminalError

__all__ = ["STALLED_CONDITION", "fingerprint", "terminal_reason"]

STALLED_CONDITION = "Stalled"
"""The condition type a terminal error sets (kstatus' name for "cannot progress without a
change"); ``ControllerOptions.terminal_condition`` changes it."""

MESSAGE_LIMIT = 1024
"""Characters of the error kept in the condition and the Event."""


def terminal_reason(
    error: BaseException, subject: tuple[GroupVersionKind, ObjectKey] | None = None
) -> str | None:
    """The CamelCase reason for a terminal ``error``, or ``None`` when retrying may help.

    ``subject`` is the kind and key being reconciled. An
    :class:`~setpoint.cache.errors.UndecodableObject` is terminal only when it is about
    that object (a change to it is what can fix it); about another object (a child, an
    item of a list) it is retried, since that object's own change does not reconcile this
    one when it is stalled.
    """
    if isinstance(error, UndecodableObject):
        if subject is None:
            return None
        kind, key = subject
        same = (error.gvk.group, error.gvk.kind) == (kind.group, kind.kind)
        return "InvalidObject" if same and error.key == key else None
    if isinstance(error, TerminalError):
        return type(error).__name__
    if isinstance(error, SelectorError):
        return "InvalidSelector"
    if isinstance(error, Invalid):
        return "Invalid" if error.causes else None
    if isinstance(error, BadRequest):
        return "BadRequest"
    return None


def fingerprint(obj: Mapping[str, Any] | None) -> Hashable:
    """What must change for a terminally failed object to be reconciled again.

    ``generation`` (which moves with the spec, not with status writes), labels,
    annotations and the deletion timestamp; for kinds without a generation, the
    ``resourceVersion``. ``None`` for an object that is gone.
    """
    if obj is None:
        return None
    metadata: JsonObject = obj.get("metadata") or {}
    generation = metadata.get("generation")
    if generation is None:
        return (metadata.get("uid"), metadata.get("resourceVersion"))
    return (
        metadata.get("uid"),
        generation,
        tuple(sorted((metadata.get("labels") or {}).items())),
        tuple(sorted((metadata.get("annotations") or {}).items())),
        metadata.get("deletionTimestamp"),
    )


def message_of(error: BaseException, *, limit: int = MESSAGE_LIMIT) -> str:
    """The error as Events, conditions and annotations show it: redacted, cut to ``limit``.

    ``<type>: <message>``, with what looks like a credential masked first
    (:func:`setpoint.api.redaction.redact_text`: bearer tokens, JWTs, private keys, URL
    passwords, ``password=``-style values). The text of an exception raised by user code or
    a library goes onto the object, where everyone who may read the object (and its
    Events) sees it; a token in it would leak beyond the operator.
    """
    text = redact_text(f"{type(error).__name__}: {error}")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text
