"""Finalizer handlers: cleanup code that runs before an object goes, and leaks you can see.

::

    async def release_directory(ctx: Context, tenant: Tenant) -> None:
        await directory.delete_group(tenant.spec.group)  # idempotent: see below

    manager.controller("tenant").for_(Tenant).finalizer(
        "tenants.example.com/directory", release_directory, deadline=30.0
    ).build(reconcile)

A controller with finalizer handlers runs :meth:`Finalizers.prepare` before every reconcile.
It reads the object from the cache, decides which of five states it is in, and either lets
the reconcile run, or runs the cleanups instead. The five states and what happens in each:

=========================================  ====================================================
state                                      what the controller does
=========================================  ====================================================
live, without (all of) our finalizers      adds each missing one (a guarded JSON patch), then
                                           calls reconcile
live, with all of our finalizers           calls reconcile
deleting, with one or more of ours         runs their cleanups (last registered first), each
                                           with its deadline; removes each finalizer (guarded
                                           patch) right after its cleanup succeeded; reconcile
                                           is **not** called
deleting, with none of ours                nothing; reconcile is **not** called
gone (not in the cache)                    nothing; reconcile is **not** called
=========================================  ====================================================

**Reconcile is never called for an object being deleted or gone** once a controller has a
finalizer handler. Everything that must happen when the object goes belongs in the cleanup,
and keeping it out of reconcile gives reconcile one simple precondition: the object exists,
is not being deleted, and carries every registered finalizer, so any external resource it
creates is protected. (Reconcile reads the object itself, so a delete that lands between
the check and that read can still show it a ``deletionTimestamp`` or a ``NotFound``; treat
those as "nothing to do", as without finalizers.)

Failures and leaks
------------------
A cleanup that raises or outlives its deadline is retried with exponential backoff
(:class:`CleanupRetry`; per object and finalizer), and the failure is reported four ways:

- the annotation ``cleanup.setpoint.dev/<finalizer>`` on the object (:class:`CleanupRecord`:
  the error, how many failures, since when). This is the durable record ``setpoint doctor
  finalizers`` reads: every kind has annotations (a status may not exist, and a CRD's schema
  may prune unknown status fields), they survive an operator restart, and they come with
  metadata-only lists, which keeps the doctor cheap on big clusters;
- a status condition ``<finalizer>.CleanupFailed`` (``True``; reason ``CleanupFailed`` or
  ``CleanupDeadlineExceeded``), when the kind has a status subresource: what ``kubectl
  describe`` users look at;
- a ``Warning`` Event (reason as the condition's), when the controller has a recorder;
- ``setpoint_finalizer_cleanup_failures_total{controller, finalizer}``.

The error text in the annotation, the condition and the Event is
:func:`~setpoint.controller.terminal.message_of` the exception: what looks like a
credential (a bearer token, a JWT, a private key, a URL's password, a ``password=`` value)
is masked, because everyone who may read the object reads it. Masking recognises common
shapes only: keep secrets out of exception messages in the first place.

``setpoint_finalizer_pending_objects{finalizer}`` and
``setpoint_finalizer_oldest_pending_seconds{finalizer}`` are computed at scrape time from a
small index the controller keeps from the cache's events (object key to deletionTimestamp,
for deleting objects that carry the finalizer): no API calls, no per-scrape scan of the
cache.

The idempotency contract for cleanup code
-----------------------------------------
A cleanup may run more than once for the same object, and may be interrupted at any point:

- the process can crash (or be killed) after the cleanup did its work but before the
  finalizer was removed; the next leader runs the cleanup again;
- the deadline cancels it mid-way (``asyncio.CancelledError`` at an ``await``) and it is
  retried; work it started (a request already sent, a thread in an executor) may still land;
- leadership can be lost mid-way: the controller is stopped at once and another replica
  runs the cleanup, possibly while the tail of the first run still lands;
- it can fail after doing part of its work.

So write cleanups that converge: "make sure X no longer exists", treating "already gone"
(404) as success, never "delete X once". Look external resources up by a stable name or ID
derived from the object (its UID, or a name recorded in its status before the external
resource was created), not by something only the first run knew. Do not swallow
``asyncio.CancelledError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeAlias

import orjson

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.jsonvalues import copy_json
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, annotations_of, finalizers_of, key_of, metadata_of
from setpoint.api.types import TypedObject
from setpoint.cache.cache import decode_typed
from setpoint.client._finalizers import (
    FinalizerOutcome,
    add_finalizer,
    remove_finalizer,
    validate_finalizer_name,
)
from setpoint.client.errors import ClientError, NotFound
from setpoint.client.patch import MergePatch
from setpoint.controller.blocking import is_blocking
from setpoint.controller.reconcile import Context, ReconcileError, Result
from setpoint.controller.reporting import ConditionReporter
from setpoint.controller.terminal import message_of

if TYPE_CHECKING:
    from setpoint.controller.blocking import ReconcileThreads, SyncContext
    from setpoint.observability.metrics import Metrics

__all__ = [
    "ADVERTISES_FINALIZERS_LABEL",
    "CLEANUP_ANNOTATION_PREFIX",
    "OWNED_FINALIZERS_ANNOTATION",
    "Cleanup",
    "CleanupFailed",
    "CleanupRecord",
    "CleanupRetry",
    "FinalizerHandler",
    "Finalizers",
    "ObjectState",
    "PendingIndex",
    "SyncCleanup",
    "classify",
    "cleanup_annotation",
    "cleanup_condition_type",
    "parse_owned_finalizers",
    "read_cleanup_records",
]

Cleanup: TypeAlias = Callable[[Context, Any], Awaitable[None]]
"""``async def cleanup(ctx, obj) -> None``: undo what reconcile did outside the object.

``obj`` is the object being deleted, as the cache holds it: an instance of the ``for_``
class when that kind is typed, else its JSON form (a private copy either way). Raise to
report a failure; the cleanup is then retried with backoff. See the module docstring for the
idempotency contract."""

SyncCleanup: TypeAlias = Callable[["SyncContext", Any], None]
"""``def cleanup(ctx, obj) -> None``: a blocking cleanup (a cloud SDK's delete call, say).

It runs in the controller's threads with a
:class:`~setpoint.controller.blocking.SyncContext` (see :mod:`setpoint.controller.blocking`);
its ``deadline`` cancels it as far as threads allow: the context's calls refuse to run on,
and a thread still running is reported and waited for."""

CLEANUP_ANNOTATION_PREFIX: Final = "cleanup.setpoint.dev/"
"""Prefix of the annotations that record a finalizer's last cleanup failure on the object."""

OWNED_FINALIZERS_ANNOTATION: Final = "setpoint.dev/finalizers"
"""Annotation a manager writes on its leader-election Lease: a JSON object mapping each
finalizer its controllers handle to the controller's name (``{}`` when none)."""

ADVERTISES_FINALIZERS_LABEL: Final = "setpoint.dev/advertises-finalizers"
"""Label (``"true"``) on a manager's Lease, so ``setpoint doctor`` lists only those Leases
(a cluster has one Lease per node besides)."""

_NAME_PART_LIMIT: Final = 63
_ERROR_LIMIT: Final = 2048  # characters of an error message kept in the annotation


@dataclass(frozen=True, kw_only=True)
class CleanupRetry:
    """How a failed cleanup is retried: per object and finalizer, doubling delays.

    The n-th consecutive failure waits ``min(base_delay * 2**(n-1), max_delay)`` seconds. A
    restarted process starts again from ``base_delay`` (it runs a pending cleanup at once).
    """

    base_delay: float = 1.0
    """Seconds before the first retry. Default 1: a cleanup usually calls another system,
    and retrying it within milliseconds (the reconcile default) only adds load."""

    max_delay: float = 300.0
    """Longest wait between retries. Default 300 s: a stuck deletion is retried at least
    every five minutes, so a fixed dependency is noticed soon without a manual nudge."""

    def __post_init__(self) -> None:
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"CleanupRetry.{name} must be a number of seconds > 0")
        if self.max_delay < self.base_delay:
            raise ValueError(
                f"CleanupRetry.max_delay ({self.max_delay}) must be >= base_delay "
                f"({self.base_delay}): it caps the doubling delays"
            )

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based)."""
        exponent = min(max(failures, 1) - 1, 64)  # 2**64 * any sane base is past any cap
        return float(min(self.base_delay * 2.0**exponent, self.max_delay))


@dataclass(frozen=True, kw_only=True)
class FinalizerHandler:
    """One registered finalizer: its name, its cleanup, and how the cleanup runs."""

    name: str
    """The finalizer, domain-qualified (``tenants.example.com/directory``)."""
    cleanup: Cleanup | SyncCleanup
    """What runs before the finalizer is removed: an ``async def``, or a plain ``def`` the
    controller runs in a thread."""
    deadline: float = 30.0
    """Seconds one cleanup run may take before it is cancelled and counted as a failure.
    Default 30."""
    retry: CleanupRetry = field(default_factory=CleanupRetry)
    """Backoff between failed runs."""

    def __post_init__(self) -> None:
        validate_finalizer_name(self.name)
        if (
            isinstance(self.deadline, bool)
            or not isinstance(self.deadline, int | float)
            or not math.isfinite(self.deadline)
            or self.deadline <= 0
        ):
            raise ValueError(
                f"finalizer {self.name!r}: deadline must be a number of seconds > 0, not "
                f"{self.deadline!r} (a cleanup without a deadline can hold a worker forever)"
            )
        if not callable(self.cleanup):
            raise TypeError(
                f"finalizer {self.name!r}: cleanup must be a function (ctx, obj) -> None, "
                f"'async def' or plain 'def', not {self.cleanup!r}"
            )

    @property
    def blocking(self) -> bool:
        """Whether the cleanup is a plain ``def``, run in the controller's threads."""
        return is_blocking(self.cleanup)


class CleanupFailed(ReconcileError):
    """A cleanup raised or exceeded its deadline; the controller retries it after ``retry_after``.

    It counts in ``controller_runtime_reconcile_errors_total`` (and in
    ``reconcile_panics_total`` when ``cause`` is not an API, cache or reconcile error, as
    for a reconcile), and in ``setpoint_finalizer_cleanup_failures_total``.
    """

    __module__ = "setpoint"

    def __init__(
        self, message: str, *, finalizer: str, retry_after: float, cause: BaseException
    ) -> None:
        super().__init__(message)
        self.finalizer = finalizer
        """The finalizer whose cleanup failed."""
        self.retry_after = retry_after
        """Seconds until the cleanup is tried again."""
        self.cause = cause
        """What the cleanup raised (a ``TimeoutError`` when the deadline passed)."""


# -- the durable record -------------------------------------------------------------------


def cleanup_annotation(finalizer: str) -> str:
    """The annotation key recording ``finalizer``'s last cleanup failure on an object.

    ``cleanup.setpoint.dev/<prefix>_<name>``: the finalizer with its ``/`` spelled ``_``.
    That is one-to-one, because a finalizer's prefix (a DNS subdomain) has no ``_``. A
    result longer than the 63 characters an annotation name may have keeps its first 50
    and appends a hash of the whole finalizer name.
    """
    prefix, _, name = finalizer.partition("/")
    part = f"{prefix}_{name}" if name else prefix
    if len(part) > _NAME_PART_LIMIT:
        digest = hashlib.sha256(finalizer.encode()).hexdigest()[:12]
        part = f"{part[:50]}-{digest}"
    return CLEANUP_ANNOTATION_PREFIX + part


def cleanup_condition_type(finalizer: str) -> str:
    """The status condition type reporting ``finalizer``'s cleanup failure.

    ``<finalizer>.CleanupFailed`` (``tenants.example.com/directory.CleanupFailed``): one
    condition per finalizer, so two controllers finalizing the same object never overwrite
    each other's condition.
    """
    return f"{finalizer}.CleanupFailed"


@dataclass(frozen=True, kw_only=True)
class CleanupRecord:
    """The last cleanup failure of one finalizer, as recorded on the object (JSON)."""

    finalizer: str
    """The finalizer whose cleanup failed."""
    controller: str
    """The controller that ran it."""
    error: str
    """``<exception type>: <message>`` of the last failure, credentials masked (see below)."""
    reason: str
    """``CleanupFailed`` or ``CleanupDeadlineExceeded``."""
    failures: int
    """Consecutive failures recorded (across restarts of the operator)."""
    first_failure: str
    """RFC 3339 time of the first failure of this streak."""
    last_failure: str
    """RFC 3339 time of the last failure."""

    def to_json(self) -> str:
        """The annotation value."""
        return orjson.dumps(
            {
                "finalizer": self.finalizer,
                "controller": self.controller,
                "reason": self.reason,
                "error": self.error,
                "failures": self.failures,
                "firstFailure": self.first_failure,
                "lastFailure": self.last_failure,
            }
        ).decode()

    @classmethod
    def from_json(cls, text: str) -> CleanupRecord | None:
        """Parse an annotation value; ``None`` if it is not a record (hand-edited, foreign)."""
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("finalizer"), str):
            return None
        failures = data.get("failures")
        return cls(
            finalizer=data["finalizer"],
            controller=str(data.get("controller") or ""),
            reason=str(data.get("reason") or ""),
            error=str(data.get("error") or ""),
            failures=failures if isinstance(failures, int) and failures > 0 else 1,
            first_failure=str(data.get("firstFailure") or ""),
            last_failure=str(data.get("lastFailure") or ""),
        )


def read_cleanup_records(obj: Mapping[str, Any]) -> dict[str, CleanupRecord]:
    """Every cleanup record on ``obj`` (JSON form), by finalizer name."""
    records: dict[str, CleanupRecord] = {}
    for key, value in annotations_of(obj).items():
        if key.startswith(CLEANUP_ANNOTATION_PREFIX) and isinstance(value, str):
            record = CleanupRecord.from_json(value)
            if record is not None and cleanup_annotation(record.finalizer) == key:
                records[record.finalizer] = record
    return records


def parse_owned_finalizers(lease: Mapping[str, Any]) -> dict[str, str] | None:
    """What a manager's Lease says its controllers finalize: ``{finalizer: controller}``.

    ``None`` when the Lease does not carry the annotation (or it is not valid JSON).
    """
    text = annotations_of(lease).get(OWNED_FINALIZERS_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(timestamp: object) -> float | None:
    if not isinstance(timestamp, str) or not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp).timestamp()
    except ValueError:
        return None


# -- states -------------------------------------------------------------------------------


class ObjectState(enum.Enum):
    """Where an object stands with respect to a controller's finalizers."""

    LIVE_WITHOUT = "live-without"
    """Not being deleted; at least one registered finalizer is missing."""
    LIVE_WITH = "live-with"
    """Not being deleted; every registered finalizer is there."""
    DELETING_WITH_OURS = "deleting-with-ours"
    """``deletionTimestamp`` set; at least one registered finalizer is still there."""
    DELETING_WITHOUT_OURS = "deleting-without-ours"
    """``deletionTimestamp`` set; none of the registered finalizers is there (any more)."""
    GONE = "gone"
    """The object does not exist."""


def classify(obj: Mapping[str, Any] | None, finalizers: Sequence[str]) -> ObjectState:
    """The :class:`ObjectState` of ``obj`` (JSON form, ``None`` when it does not exist)."""
    if obj is None:
        return ObjectState.GONE
    present = set(finalizers_of(obj))
    if metadata_of(obj).get("deletionTimestamp"):
        if present.intersection(finalizers):
            return ObjectState.DELETING_WITH_OURS
        return ObjectState.DELETING_WITHOUT_OURS
    if all(name in present for name in finalizers):
        return ObjectState.LIVE_WITH
    return ObjectState.LIVE_WITHOUT


# -- leak visibility ----------------------------------------------------------------------


class PendingIndex:
    """Deleting objects that still carry each finalizer, kept from the cache's events.

    A :class:`~setpoint.cache.informer.ResourceEventHandler` on the ``for_`` kind's informer:
    each notification costs a dictionary update per finalizer, and the metrics read
    :meth:`count` and :meth:`oldest_age` when scraped.
    """

    def __init__(self, finalizers: Sequence[str]) -> None:
        self._pending: dict[str, dict[ObjectKey, float]] = {name: {} for name in finalizers}

    def on_add(self, obj: JsonObject, *, is_initial_list: bool) -> None:
        """Index an object as it appears."""
        self._see(obj)

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        """Re-index an object that changed."""
        self._see(new)

    def on_delete(self, obj: JsonObject, *, final_state_unknown: bool) -> None:
        """Forget a deleted object."""
        key = key_of(obj)
        for waiting in self._pending.values():
            waiting.pop(key, None)

    def _see(self, obj: JsonObject) -> None:
        key = key_of(obj)
        since = _epoch(metadata_of(obj).get("deletionTimestamp"))
        present = finalizers_of(obj) if since is not None else ()
        for name, waiting in self._pending.items():
            if since is not None and name in present:
                waiting[key] = since
            else:
                waiting.pop(key, None)

    def count(self, finalizer: str) -> int:
        """Objects being deleted that still carry ``finalizer``."""
        return len(self._pending.get(finalizer, ()))

    def oldest_age(self, finalizer: str, now: float | None = None) -> float:
        """Seconds since the oldest such object's ``deletionTimestamp`` (0 when none)."""
        waiting = self._pending.get(finalizer)
        if not waiting:
            return 0.0
        current = time.time() if now is None else now
        return max(0.0, current - min(waiting.values()))

    def keys(self, finalizer: str) -> list[ObjectKey]:
        """The keys of those objects (for tests and debugging)."""
        return sorted(self._pending.get(finalizer, {}))


# -- the registry -------------------------------------------------------------------------


class Finalizers:
    """A controller's finalizer handlers: the state machine run before each reconcile.

    Built by :meth:`Builder.finalizer <setpoint.controller.builder.Builder.finalizer>`; the
    controller calls :meth:`prepare` first in every reconcile and publishes the metrics while
    it runs.

    Expected Flow:
        1. Read the object from the cache (``ctx.reader``: never older than this
           controller's own last write of it) and :func:`classify` it.
        2. Match the state:

           - ``LIVE_WITHOUT``: add each missing finalizer in registration order with
             :func:`~setpoint.client.safe.add_finalizer` (a JSON patch testing the
             list it read). If the server says the object started deleting meanwhile
             (``DELETING``), continue as step 2 with the object it returned; if it is
             ``GONE``, stop. Then return ``None``: the controller calls reconcile.
           - ``LIVE_WITH``: return ``None``; reconcile runs.
           - ``DELETING_WITH_OURS``: for each of our finalizers still on the object, last
             registered first: if its previous failure's backoff has not passed, return
             ``Result(requeue_after=<the rest>)``; else run its cleanup under its deadline.
             On success remove the finalizer (a JSON patch testing its index) and
             go on with the object the server returned. On failure record it (annotation,
             condition, Event, metric) and raise :class:`CleanupFailed`, which the
             controller retries after ``retry_after``. When all are removed, return
             ``Result()``: reconcile is not called.
           - ``DELETING_WITHOUT_OURS`` and ``GONE``: forget retry state; return ``Result()``.

    Guarantees:
        - Reconcile runs only after every registered finalizer is on the object, so
          whatever it creates outside the object is protected before it exists.
        - No finalizer is added to an object that is being deleted: the state check, and the
          helper's own check and the server's refusal behind it.
        - A finalizer is removed only after its cleanup returned without error within its
          deadline, and only that finalizer: other controllers' entries are never dropped
          (the patch tests the index it removes).
        - A failing cleanup is retried with :class:`CleanupRetry` backoff: events on the
          object (including the writes that record the failure) do not run it sooner.

    Assumptions:
        - Each finalizer name is handled by one controller, and the object's kind is the
          controller's ``for_`` kind.
        - Cleanups are idempotent (see the module docstring): a crash, a deadline or a lost
          lease can make one run again after it did its work.

    Caveats:
        - Cleanups of one object run one after another (last registered first), and a
          failure stops the ones after it until it succeeds: later-registered resources may
          depend on earlier ones, so they are released first.
        - The backoff state is in memory: a restarted or newly elected process runs a
          pending cleanup at once.
        - The failure record stays on the object after a later success when other
          finalizers keep the object alive; it names its finalizer, which is gone from the
          object, and ``setpoint doctor`` ignores it.

    Errors:
        CleanupFailed: a cleanup raised or timed out (also after recording failed).
        ClientError / CacheError: reading or patching the object failed; the controller
            retries with its usual backoff.
    """

    def __init__(
        self,
        controller: str,
        handlers: Sequence[FinalizerHandler],
        *,
        kind: GroupVersionKind,
        typed: type[TypedObject] | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not handlers:
            raise ValueError(f"controller {controller!r}: Finalizers needs at least one handler")
        names = [h.name for h in handlers]
        if len(set(names)) != len(names):
            raise ValueError(f"controller {controller!r}: a finalizer is registered twice")
        self._controller = controller
        self._handlers = tuple(handlers)
        self._names = tuple(names)
        self._kind = kind
        self._typed = typed
        self._metrics = metrics
        self._clock = clock
        self._conditions = ConditionReporter(kind)
        self._threads: ReconcileThreads | None = None
        # (key, finalizer) -> consecutive failures in this process, and when to try again.
        self._failures: dict[tuple[ObjectKey, str], int] = {}
        self._retry_at: dict[tuple[ObjectKey, str], float] = {}
        self.pending = PendingIndex(self._names)
        """The index behind the pending-objects metrics (registered on the ``for_`` informer)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The finalizers, in registration order."""
        return self._names

    @property
    def handlers(self) -> tuple[FinalizerHandler, ...]:
        """The handlers, in registration order."""
        return self._handlers

    @property
    def kind(self) -> GroupVersionKind:
        """The kind finalized (the controller's ``for_`` kind)."""
        return self._kind

    @property
    def blocking(self) -> bool:
        """Whether a cleanup is a plain ``def`` (the controller then gives its threads)."""
        return any(handler.blocking for handler in self._handlers)

    def use_threads(self, threads: ReconcileThreads) -> None:
        """Run blocking cleanups in ``threads`` (the controller's; it calls this once)."""
        self._threads = threads

    # -- metrics ---------------------------------------------------------------------------

    def publish_metrics(self) -> None:
        """Serve the pending gauges from :attr:`pending`, computed when scraped."""
        metrics = self._metrics
        if metrics is None:
            return
        index = self.pending
        for name in self._names:
            metrics.finalizer_pending_objects.labels(name).set_function(
                functools.partial(index.count, name)
            )
            metrics.finalizer_oldest_pending_seconds.labels(name).set_function(
                functools.partial(index.oldest_age, name)
            )
            # Make the failure counter visible at 0 before the first failure.
            metrics.finalizer_cleanup_failures_total.labels(self._controller, name)

    def unpublish_metrics(self) -> None:
        """Drop the pending gauges: a stopped controller (not the leader) has no view."""
        metrics = self._metrics
        if metrics is None:
            return
        for name in self._names:
            for gauge in (
                metrics.finalizer_pending_objects,
                metrics.finalizer_oldest_pending_seconds,
            ):
                with contextlib.suppress(KeyError):
                    gauge.remove(name)

    # -- the state machine -------------------------------------------------------------------

    async def prepare(self, ctx: Context) -> Result | None:
        """Run the finalizer step for ``ctx.request``; ``None`` means "now call reconcile".

        See the class docstring for the flow, guarantees and errors.
        """
        key = ctx.request
        try:
            obj: JsonObject | None = await ctx.reader.get(
                self._kind, key.name, namespace=key.namespace or None
            )
        except NotFound:
            obj = None
        state = classify(obj, self._names)
        while True:
            match state:
                case ObjectState.GONE | ObjectState.DELETING_WITHOUT_OURS:
                    self._forget(key)
                    return Result()
                case ObjectState.LIVE_WITH:
                    return None
                case ObjectState.LIVE_WITHOUT:
                    assert obj is not None
                    obj, state = await self._add_missing(ctx, obj)
                    if state is ObjectState.LIVE_WITH:
                        return None
                    # The object started deleting (or vanished) under us: handle that.
                case ObjectState.DELETING_WITH_OURS:
                    assert obj is not None
                    return await self._finalize(ctx, obj)

    async def _add_missing(
        self, ctx: Context, obj: JsonObject
    ) -> tuple[JsonObject | None, ObjectState]:
        current: JsonObject = obj
        for name in self._names:
            if name in finalizers_of(current):
                continue
            outcome, written = await add_finalizer(ctx.client, current, name)
            match outcome:
                case FinalizerOutcome.ADDED | FinalizerOutcome.ALREADY_PRESENT:
                    if outcome is FinalizerOutcome.ADDED:
                        ctx.log.debug("Finalizer added", finalizer=name)
                    current = written
                case FinalizerOutcome.DELETING:
                    return written, classify(written, self._names)
                case FinalizerOutcome.GONE:
                    return None, ObjectState.GONE
                case _:  # REMOVED / ALREADY_ABSENT are answers to a remove
                    raise AssertionError(f"add_finalizer answered {outcome}")
        return current, classify(current, self._names)

    async def _finalize(self, ctx: Context, obj: JsonObject) -> Result:
        key = ctx.request
        current: JsonObject | None = obj
        for handler in reversed(self._handlers):
            if current is None:
                break
            if handler.name not in finalizers_of(current):
                self._forget_one(key, handler.name)
                continue
            wait = self._retry_at.get((key, handler.name), 0.0) - self._clock()
            if wait > 0:
                # An event (often our own failure record) arrived before the backoff ended.
                return Result(requeue_after=wait)
            await self._run_cleanup(ctx, handler, current)
            outcome, written = await remove_finalizer(ctx.client, current, handler.name)
            self._forget_one(key, handler.name)
            if outcome is FinalizerOutcome.REMOVED and not finalizers_of(written):
                # The server deletes the object now. ctx.client (a TrackingClient) saw a
                # deleting object lose its last finalizer and makes reads wait for the
                # deletion, so the stale copy with the finalizer is never read again.
                written = None
            ctx.log.info(
                "Cleanup finished; finalizer removed",
                finalizer=handler.name,
                outcome=outcome.value,
            )
            current = None if outcome is FinalizerOutcome.GONE else written
        return Result()

    async def _run_cleanup(self, ctx: Context, handler: FinalizerHandler, obj: JsonObject) -> None:
        copy: JsonObject = copy_json(obj)
        arg: Any = decode_typed(self._typed, copy) if self._typed is not None else copy
        started = time.monotonic()
        ctx.log.info("Running cleanup", finalizer=handler.name, deadline=handler.deadline)
        scope = asyncio.timeout(handler.deadline)
        threads = self._threads
        try:
            async with scope:
                if handler.blocking:
                    if threads is None:
                        raise RuntimeError(
                            f"finalizer {handler.name!r}: a blocking cleanup needs the "
                            "controller's threads (Finalizers.use_threads)"
                        )
                    await threads.call(
                        handler.cleanup,  # type: ignore[arg-type]
                        ctx,
                        arg,
                        limit=f"the cleanup deadline ({handler.deadline:g}s)",
                    )
                else:
                    await handler.cleanup(ctx, arg)  # type: ignore[arg-type,misc]
        except asyncio.CancelledError:
            raise  # the controller is stopping: no failure to record
        except Exception as exc:
            timed_out = isinstance(exc, TimeoutError) and scope.expired()
            await self._failed(
                ctx, handler, obj, exc, timed_out=timed_out, seconds=time.monotonic() - started
            )

    async def _failed(
        self,
        ctx: Context,
        handler: FinalizerHandler,
        obj: JsonObject,
        exc: Exception,
        *,
        timed_out: bool,
        seconds: float,
    ) -> NoReturn:
        key = ctx.request
        slot = (key, handler.name)
        failures = self._failures.get(slot, 0) + 1
        self._failures[slot] = failures
        delay = handler.retry.delay(failures)
        self._retry_at[slot] = self._clock() + delay
        if timed_out:
            reason = "CleanupDeadlineExceeded"
            error = (
                f"TimeoutError: cleanup did not finish within its deadline of {handler.deadline:g}s"
            )
        else:
            reason = "CleanupFailed"
            error = message_of(exc, limit=_ERROR_LIMIT)
        if self._metrics is not None:
            self._metrics.finalizer_cleanup_failures_total.labels(
                self._controller, handler.name
            ).inc()
        if ctx.recorder is not None:
            ctx.recorder.event(
                obj,
                "Warning",
                reason,
                f"cleanup for finalizer {handler.name} failed: {error}; retrying with backoff",
            )
        await self._record(ctx, handler.name, obj, reason, error, failures)
        raise CleanupFailed(
            f"cleanup for finalizer {handler.name!r} of {self._kind.kind} {key} failed after "
            f"{seconds:.3g}s ({error}); retrying in {delay:g}s",
            finalizer=handler.name,
            retry_after=delay,
            cause=exc,
        ) from exc

    async def _record(  # noqa: PLR0917 - private, called once
        self, ctx: Context, finalizer: str, obj: JsonObject, reason: str, error: str, seen: int
    ) -> None:
        """Write the annotation and the condition; a failure to record is logged, not raised."""
        key = ctx.request
        now = _rfc3339(datetime.now(UTC))
        previous = read_cleanup_records(obj).get(finalizer)
        record = CleanupRecord(
            finalizer=finalizer,
            controller=self._controller,
            reason=reason,
            error=error,
            # The object's count survives restarts; ours covers a cache that lags a write.
            failures=max(previous.failures + 1 if previous is not None else 1, seen),
            first_failure=previous.first_failure if previous is not None else now,
            last_failure=now,
        )
        # A merge patch of one annotation key: it cannot touch anyone else's metadata, and it
        # is allowed on an object being deleted (only new finalizers are refused).
        annotations = {cleanup_annotation(finalizer): record.to_json()}
        patch = MergePatch({"metadata": {"annotations": annotations}})
        target: JsonObject = obj
        try:
            target = await ctx.client.patch(
                self._kind, key.name, patch, namespace=key.namespace or None
            )
        except NotFound:
            return
        except ClientError as exc:
            ctx.log.warning("Could not record the cleanup failure on the object", error=str(exc))
        # From the object the annotation patch returned: its resourceVersion is current.
        await self._conditions.set(
            ctx.client, target, cleanup_condition_type(finalizer), reason, error, ctx.log
        )

    def _forget(self, key: ObjectKey) -> None:
        for name in self._names:
            self._forget_one(key, name)

    def _forget_one(self, key: ObjectKey, name: str) -> None:
        self._failures.pop((key, name), None)
        self._retry_at.pop((key, name), None)

    def __repr__(self) -> str:
        return f"<Finalizers {self._controller!r} {list(self._names)}>"
