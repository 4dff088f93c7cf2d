"""Shared pieces of the safe-write helpers: the client they need, results, retries.

Private: the public names are re-exported by :mod:`setpoint.client.safe`.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeAlias, TypeVar

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, gvk_of, key_of
from setpoint.api.types import TypedObject, is_typed
from setpoint.client.errors import ApiError, Conflict, Invalid
from setpoint.client.protocols import ReadWriter

__all__ = [
    "MutateFn",
    "OperationResult",
    "RetryOptions",
    "SafeClient",
    "Target",
    "WriteResult",
]

T = TypeVar("T")

MutateFn: TypeAlias = Callable[[Any], Any | Awaitable[Any]]
"""A mutation: takes the object (dict or typed) and changes it in place, sync or async.

It may instead return a replacement object (a dict or typed object); any
other return value (``None``, or the bool that helpers such as
``set_condition`` return, so a lambda can call one) means "I changed it in
place". It is called again on a freshly read object after every
conflict, so it must compute the change from the object it is given (and any
captured desired state), never from an earlier read.
"""

Target: TypeAlias = "JsonObject | TypedObject | tuple[Any, ObjectKey]"
"""Which object to write: the object itself (its kind and key are read from it), or
``(kind, ObjectKey(namespace, name))`` where kind is a GVK or a typed class."""


SafeClient: TypeAlias = ReadWriter
"""The client surface the safe-write helpers use (:class:`~setpoint.client.protocols.ReadWriter`).

:class:`setpoint.client.Client` satisfies it, and so do the tracking client and the
testing fake client (the helpers run unchanged against all of them)."""


class OperationResult(enum.Enum):
    """What a safe write did to the object on the server."""

    CREATED = "created"
    """The object did not exist and was created."""
    UPDATED = "updated"
    """The object existed and was changed."""
    UNCHANGED = "unchanged"
    """The object already matched; no write request was sent (or the server changed nothing)."""


class WriteResult(NamedTuple, Generic[T]):
    """The outcome of a safe write: what happened, and the object as the server now has it.

    Unpacks as a pair: ``outcome, obj = await create_or_patch(...)``. The fields are named
    as :class:`~setpoint.client.safe.FinalizerResult`'s: ``outcome`` and ``object``.
    """

    outcome: OperationResult
    """Created, updated or unchanged."""
    object: T
    """The object after the write (for ``UNCHANGED``, the object as last read)."""


@dataclass(frozen=True, kw_only=True)
class RetryOptions:
    """How safe writes retry after losing a race (Conflict, or a failed JSON-patch ``test``).

    Each retry re-reads the object and re-applies the mutation, so retrying
    never resends stale data. Delays grow exponentially with jitter, so many
    writers contending for one object spread out instead of colliding again.
    """

    attempts: int = 16
    """Writes to try before giving up and raising the last error. With the default
    delays the last attempt starts at most about 17 seconds after the first (half
    that on average); two or three contending writers rarely need more than three."""
    initial_delay: float = 0.01
    """Seconds to wait before the first retry."""
    factor: float = 2.0
    """Each further delay is this many times the previous one."""
    max_delay: float = 2.0
    """Upper bound of one delay, in seconds."""
    jitter: float = 1.0
    """Each delay is scaled by a random factor in ``[1 - jitter, 1]``. The default, "full
    jitter", spreads contending writers over the whole window, which resolves
    contention fastest (fewer writers collide again in the next round)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryOptions.attempts must be >= 1 (1 means: never retry)")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("RetryOptions delays must not be negative")
        if self.max_delay < self.initial_delay:
            raise ValueError(
                "RetryOptions.max_delay must be >= initial_delay, or no delay could be honoured"
            )
        if self.factor < 1:
            raise ValueError("RetryOptions.factor must be >= 1 (delays must not shrink)")
        if not 0 <= self.jitter <= 1:
            raise ValueError("RetryOptions.jitter must be between 0 and 1")

    def delays(self) -> Iterator[float]:
        """The delays before attempts 2, 3, ... (``attempts - 1`` values)."""
        delay = self.initial_delay
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_delay) * (1 - self.jitter * random.random())
            delay *= self.factor


DEFAULT_RETRY = RetryOptions()


# --------------------------------------------------------------------------- objects


def as_json(obj: JsonObject | TypedObject) -> JsonObject:
    """The JSON form of a dict or typed object (a dict is returned as is)."""
    return obj.to_object() if is_typed(obj) else obj


def kind_of(obj: JsonObject | TypedObject) -> Any:
    """The kind to address ``obj`` by: its typed class, or the GVK of a dict."""
    return type(obj) if is_typed(obj) else gvk_of(obj)


def gvk_for(kind: Any) -> GroupVersionKind:
    """The GVK of a kind given as a GVK or a typed class."""
    return kind if isinstance(kind, GroupVersionKind) else kind.gvk


def resolve(target: Any) -> tuple[Any, ObjectKey, Any]:
    """``(kind, key, object or None)`` for a :data:`Target`."""
    if isinstance(target, tuple):
        if len(target) != 2 or not isinstance(target[1], ObjectKey):
            raise TypeError(
                "a target tuple must be (kind, ObjectKey(namespace, name)), e.g. "
                "(kinds.ConfigMap, ObjectKey('prod', 'settings'))"
            )
        return target[0], target[1], None
    data = as_json(target)
    key = key_of(data)
    if not key.name:
        raise ValueError(f"{_short(data)} has no metadata.name; name the object to write")
    return kind_of(target), key, target


def _short(data: JsonObject) -> str:
    return f"{data.get('kind') or 'object'} (unnamed)"


def describe_target(kind: Any, key: ObjectKey) -> str:
    """``Widget ns/name`` for messages."""
    return f"{gvk_for(kind).kind} {key}"


async def call_mutate(mutate: MutateFn, obj: Any) -> Any:
    """Run a sync or async mutation on ``obj``; return the (possibly replaced) object."""
    result = mutate(obj)
    if inspect.isawaitable(result):
        result = await result
    if result is None or isinstance(result, bool):  # changed in place (the usual case)
        return obj
    # is_typed, not isinstance(result, TypedObject): a protocol check costs ~15 us.
    return result if isinstance(result, Mapping) or is_typed(result) else obj


def is_lost_race(error: ApiError) -> bool:
    """Whether ``error`` means "the object changed under us": re-read and try again.

    A Conflict (stale resourceVersion), or a 422 for a JSON patch whose
    ``test`` failed. The server reports the latter as ``Invalid`` with no
    causes and no details (verified against kube-apiserver), which no real
    validation failure produces: those always name the invalid field.
    """
    if isinstance(error, Conflict):
        return True
    return isinstance(error, Invalid) and not error.causes and not error.details


async def backoff(delays: Iterator[float], error: ApiError, what: str, attempts: int) -> None:
    """Sleep the next delay, or re-raise ``error`` (with a note) when retries are spent."""
    delay = next(delays, None)
    if delay is None:
        error.add_note(
            f"setpoint gave up on {what} after {attempts} attempts that each lost a race with "
            "another writer; the reconcile should be retried (RetryOptions.attempts)"
        )
        raise error
    await asyncio.sleep(delay)
