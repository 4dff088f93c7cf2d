"""Kubernetes Events (``events.k8s.io/v1``), recorded without ever slowing or failing the caller.

::

    broadcaster = EventBroadcaster(client)           # one per process; the manager owns one
    await broadcaster.start()
    recorder = broadcaster.recorder("example.com/tenant-controller")
    recorder.event(tenant, "Warning", "QuotaExceeded", "namespace quota is full")

:meth:`BroadcastRecorder.event` only validates and enqueues; a background task sends. Guarantees:

- **Non-blocking.** ``event()`` takes a lock for a few dictionary operations and returns. It
  may be called from the event loop or from worker threads.
- **Never raises.** Bad input and a full queue are logged (and counted in
  :attr:`EventBroadcaster.dropped`); failed requests are retried, then logged and dropped.
  An Event is a diagnostic, never a reason to fail a reconcile.
- **Bounded.** At most ``queue_size`` sends wait; beyond that new Events are dropped.
- **Aggregated.** An Event with the same regarding object, related object, type, reason,
  action, note and reporter as one recorded within ``aggregation_window`` does not create a
  new object: the existing Event's ``series.count`` and ``series.lastObservedTime`` are
  updated (as client-go's events broadcaster does). A burst of repeats costs at most one
  pending update, because repeats that arrive while an update waits are folded into it.

Layering: observability sits below the client, so the broadcaster takes the client as the
structural :class:`EventClient` protocol (``create`` and ``patch``), which
:class:`setpoint.client.Client` satisfies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal, Protocol, runtime_checkable

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.api.runnable import RunnableGroup
from setpoint.api.types import TypedObject, is_typed
from setpoint.api.validation import (
    DNS1123_SUBDOMAIN_MAX_LENGTH,
    is_dns1123_subdomain,
    is_qualified_name,
)

__all__ = [
    "NORMAL",
    "WARNING",
    "BroadcastRecorder",
    "EventBroadcaster",
    "EventBroadcasterOptions",
    "EventClient",
    "EventRecorder",
    "EventType",
    "JsonMergePatch",
]

log = logging.getLogger("setpoint.events")

EventType = Literal["Normal", "Warning"]
"""The two Event types the API server accepts."""

NORMAL: Final = "Normal"
"""An Event about normal operation (``type: Normal``)."""

WARNING: Final = "Warning"
"""An Event about something that may need attention (``type: Warning``)."""

REASON_LIMIT: Final = 128
"""Longest ``reason`` and ``action`` the API server accepts (characters)."""

NOTE_LIMIT_BYTES: Final = 1024
"""Longest ``note`` the API server accepts (bytes); longer notes are truncated."""

REPORTING_INSTANCE_LIMIT: Final = 128
"""Longest ``reportingInstance`` the API server accepts."""

_NOT_NAME_CHARS: Final = re.compile(r"[^a-z0-9.-]+")


class EventClient(Protocol):
    """What the broadcaster needs from a client: create an Event, and patch one.

    :class:`setpoint.client.Client` satisfies it. ``patch`` receives a
    :class:`JsonMergePatch`, which has the shape of the client's patch types
    (``content_type`` and ``body()``). Errors are told apart by their HTTP ``code`` attribute
    (``404``, ``409``, ...), which the client's ``ApiError`` carries.
    """

    async def create(self, obj: JsonObject) -> Any:
        """Create ``obj``; raise an error with ``code == 409`` if the name is taken."""
        ...

    async def patch(
        self, kind: GroupVersionKind, name: str, patch: Any, *, namespace: str | None = None
    ) -> Any:
        """Apply ``patch`` to the named object; raise an error with ``code == 404`` if gone."""
        ...


@dataclass(frozen=True, slots=True)
class JsonMergePatch:
    """An RFC 7386 merge patch, in the shape of ``setpoint.client.patch.MergePatch``."""

    patch: Mapping[str, Any]
    content_type: str = field(default="application/merge-patch+json", init=False)

    def body(self) -> Any:
        """The request body."""
        return self.patch


@dataclass(frozen=True, kw_only=True)
class EventBroadcasterOptions:
    """How Events are queued, aggregated and sent. Every default is documented here."""

    queue_size: int = 1000
    """Most Events (creates and series updates) waiting to be sent; more are dropped."""

    aggregation_window: float = 360.0
    """Seconds after an Event was last seen during which a repeat updates its series instead
    of creating a new Event (client-go's 6 minutes)."""

    max_tracked: int = 4096
    """Most distinct Events remembered for aggregation; the least recently seen are forgotten
    first (a forgotten Event's next repeat creates a new Event)."""

    request_timeout: float = 10.0
    """Seconds one create or patch may take."""

    max_attempts: int = 3
    """Attempts per Event for transient failures (timeouts, 429, 5xx); then it is dropped."""

    retry_backoff: float = 1.0
    """Seconds before the first retry; doubles with each further attempt."""

    def __post_init__(self) -> None:
        where = "EventBroadcasterOptions"
        if self.queue_size < 1 or self.max_tracked < 1 or self.max_attempts < 1:
            raise ValueError(f"{where}: queue_size, max_tracked and max_attempts must be >= 1")
        if self.aggregation_window < 0:
            raise ValueError(f"{where}.aggregation_window must be >= 0 seconds (0 disables)")
        if self.request_timeout <= 0 or self.retry_backoff < 0:
            raise ValueError(f"{where}: request_timeout must be > 0 and retry_backoff >= 0")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def micro_time(moment: datetime) -> str:
    """Format ``moment`` as a Kubernetes ``MicroTime`` (RFC 3339, microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _reference(obj: Mapping[str, Any] | TypedObject) -> JsonObject:
    data = obj.to_object() if is_typed(obj) else obj
    metadata = data.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    api_version, kind, name = data.get("apiVersion"), data.get("kind"), metadata.get("name")
    if not (isinstance(api_version, str) and isinstance(kind, str) and kind and name):
        raise ValueError(
            "the object needs apiVersion, kind and metadata.name to be the subject of an Event"
        )
    ref: JsonObject = {"apiVersion": api_version, "kind": kind, "name": str(name)}
    for source, target in (
        ("namespace", "namespace"),
        ("uid", "uid"),
        ("resourceVersion", "resourceVersion"),
    ):
        value = metadata.get(source)
        if value:
            ref[target] = str(value)
    return ref


def _ref_key(ref: Mapping[str, Any] | None) -> tuple[str, ...]:
    if ref is None:
        return ()
    return tuple(str(ref.get(k, "")) for k in ("apiVersion", "kind", "namespace", "name", "uid"))


def _truncate_note(note: str) -> str:
    encoded = note.encode()
    if len(encoded) <= NOTE_LIMIT_BYTES:
        return note
    return encoded[:NOTE_LIMIT_BYTES].decode("utf-8", "ignore")


def _event_name(regarding_name: str) -> str:
    # client-go names Events "<object name>.<timestamp in hex>". A random tail keeps two
    # processes reporting on one object in the same nanosecond apart.
    suffix = f"{time.time_ns():x}{uuid.uuid4().hex[:4]}"
    base = _NOT_NAME_CHARS.sub("-", regarding_name.lower()).strip("-.")
    base = base[: DNS1123_SUBDOMAIN_MAX_LENGTH - len(suffix) - 1].rstrip("-.")
    name = f"{base}.{suffix}" if base else suffix
    return name if is_dns1123_subdomain(name) else suffix


def _validate_reporting_controller(value: str) -> None:
    if not is_qualified_name(value):
        raise ValueError(
            f"reporting controller {value!r} must be a qualified name such as "
            "'example.com/tenant-controller' or 'tenant-controller' (an optional DNS prefix and "
            "'/', then at most 63 letters, digits, '-', '_' or '.'): the API server rejects "
            "Events whose reportingController is not"
        )


_Key = tuple[object, ...]


@dataclass(eq=False)
class _Series:
    """One Event the broadcaster created (or will), and how often it was seen since."""

    event: JsonObject
    """The Event as first created (without ``series``)."""
    count: int
    last_seen: float
    last_observed: datetime
    sent_count: int = 0
    """The count the API server has (0 before the Event was created)."""
    patch_pending: bool = False

    @property
    def namespace(self) -> str:
        return str(self.event["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.event["metadata"]["name"])

    def series(self) -> JsonObject:
        return {"count": self.count, "lastObservedTime": micro_time(self.last_observed)}


_Job = tuple[Literal["create", "series"], _Series]


class _Dropped(Exception):
    """An Event that will not be sent; the message says why (logged once per cause)."""


@runtime_checkable
class EventRecorder(Protocol):
    """Records Kubernetes Events about objects: what controllers and the lease lock take.

    ``event`` must return at once and never raise: implementations queue the Event and send
    it in the background. :class:`BroadcastRecorder` (``Manager.event_recorder(...)``) is the
    implementation; ``setpoint.testing.FakeRecorder`` keeps Events in memory for tests.
    """

    def event(
        self, obj: Mapping[str, Any] | TypedObject, type: str, reason: str, message: str
    ) -> None:
        """Record an Event of ``type`` (``"Normal"`` or ``"Warning"``) about ``obj``."""
        ...


class BroadcastRecorder:
    """The :class:`EventRecorder` of one reporting controller, sending through a broadcaster.

    Built by :meth:`EventBroadcaster.recorder` (the manager's ``event_recorder``).
    """

    def __init__(
        self, broadcaster: EventBroadcaster, reporting_controller: str, reporting_instance: str
    ) -> None:
        self._broadcaster = broadcaster
        self.reporting_controller = reporting_controller
        """``reportingController`` of every Event this recorder records."""
        self.reporting_instance = reporting_instance
        """``reportingInstance`` of every Event this recorder records."""

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
        """Record an Event about ``obj``; returns at once and never raises.

        Args:
            obj: the object the Event is about (``regarding``): a JSON object or a typed one,
                with ``apiVersion``, ``kind`` and ``metadata.name``.
            type: ``"Normal"`` or ``"Warning"``.
            reason: why, in UpperCamelCase (``"QuotaExceeded"``); at most 128 characters.
            message: the human-readable ``note``; truncated to 1024 bytes.
            action: what was done or failed (``"Reconcile"``, ``"Scale"``); defaults to
                ``reason``. At most 128 characters.
            related: an optional second object involved (``related``).

        """
        try:
            self._broadcaster._record(self, obj, type, reason, message, action, related)
        except Exception as exc:
            self._broadcaster._drop(f"{exc}", reason=reason)

    def normal(self, obj: Mapping[str, Any] | TypedObject, reason: str, message: str) -> None:
        """Record a ``Normal`` Event (see :meth:`event`)."""
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: Mapping[str, Any] | TypedObject, reason: str, message: str) -> None:
        """Record a ``Warning`` Event (see :meth:`event`)."""
        self.event(obj, WARNING, reason, message)


class EventBroadcaster:
    """Queues Events from any number of recorders and sends them in the background.

    A runnable (group ``OTHERS``, not leader-only): ``start()`` begins sending, ``stop(timeout)``
    sends what is queued within ``timeout`` and drops the rest. Events recorded before
    ``start()`` wait in the queue. The manager starts its broadcaster before every other
    runnable and stops it after them, so the last Events of a shutdown are still sent.
    """

    def __init__(
        self,
        client: EventClient,
        options: EventBroadcasterOptions | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._client = client
        self.options = options or EventBroadcasterOptions()
        """Queueing, aggregation and retry settings."""
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._series: OrderedDict[_Key, _Series] = OrderedDict()
        self._jobs: deque[_Job] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._stopped = False
        self._busy = False
        self._dropped = 0
        self._sent = 0
        self._last_drop_log = -1e18

    # -- runnable ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"event-broadcaster"``."""
        return "event-broadcaster"

    @property
    def group(self) -> RunnableGroup:
        """``OTHERS``; a manager starts it ahead of all groups anyway."""
        return RunnableGroup.OTHERS

    @property
    def needs_leader_election(self) -> bool:
        """Standby replicas record Events too (leader election itself records some)."""
        return False

    async def start(self) -> None:
        """Start sending queued and future Events."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._stopped = False
        self._task = asyncio.create_task(self._run(), name="setpoint-event-broadcaster")
        self._wakeup.set()

    async def stop(self, timeout: float) -> None:
        """Send what is queued within ``timeout`` seconds, then drop the rest and stop."""
        task = self._task
        self._stopped = True
        if task is None:
            return
        assert self._idle is not None and self._wakeup is not None
        deadline = time.monotonic() + max(timeout, 0.0)
        while (self._jobs or self._busy) and not task.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._idle.clear()
            self._wakeup.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=remaining)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self._task = None
        with self._lock:
            left = len(self._jobs)
            self._jobs.clear()
        if left:
            self._dropped += left
            log.warning("dropped %d Events still queued at shutdown", left)

    def failure(self) -> BaseException | None:
        """The error that ended the sending task unexpectedly (a bug), or ``None``."""
        return self._failure

    # -- recorders -------------------------------------------------------------------

    def recorder(
        self, reporting_controller: str, *, reporting_instance: str | None = None
    ) -> BroadcastRecorder:
        """A recorder whose Events name ``reporting_controller`` as their reporter.

        ``reporting_instance`` defaults to ``"<reporting_controller>-<host name>"`` (as
        client-go does), cut to 128 characters.

        Raises:
            ValueError: ``reporting_controller`` is not a qualified name (the API server
                would reject every Event), or ``reporting_instance`` is empty or too long.

        """
        _validate_reporting_controller(reporting_controller)
        if reporting_instance is None:
            host = os.environ.get("HOSTNAME") or socket.gethostname()
            reporting_instance = f"{reporting_controller}-{host}"[:REPORTING_INSTANCE_LIMIT]
        if not reporting_instance or len(reporting_instance) > REPORTING_INSTANCE_LIMIT:
            raise ValueError(f"reporting instance {reporting_instance!r} must be 1-128 characters")
        return BroadcastRecorder(self, reporting_controller, reporting_instance)

    @property
    def dropped(self) -> int:
        """Events dropped so far: invalid, queue full, permanently rejected or out of retries."""
        return self._dropped

    @property
    def sent(self) -> int:
        """Successful requests so far (creates and series updates)."""
        return self._sent

    @property
    def queued(self) -> int:
        """Sends waiting in the queue right now."""
        return len(self._jobs)

    # -- recording (caller side: must not block, must not raise) ------------------------

    def _record(  # noqa: PLR0917 - private; mirrors BroadcastRecorder.event's parameters
        self,
        recorder: BroadcastRecorder,
        obj: Mapping[str, Any] | TypedObject,
        type: str,
        reason: str,
        message: str,
        action: str | None,
        related: Mapping[str, Any] | TypedObject | None,
    ) -> None:
        if self._stopped and self._task is None and self._loop is not None:
            raise _Dropped("the event broadcaster is stopped")
        if type not in (NORMAL, WARNING):
            raise _Dropped(f"type must be 'Normal' or 'Warning', not {type!r}")
        action = reason if action is None else action
        for label, value in (("reason", reason), ("action", action)):
            if not value or len(value) > REASON_LIMIT:
                raise _Dropped(f"{label} must be 1-{REASON_LIMIT} characters, got {value!r}")
        regarding = _reference(obj)
        related_ref = _reference(related) if related is not None else None
        note = _truncate_note(str(message))
        key: _Key = (
            _ref_key(regarding),
            _ref_key(related_ref),
            type,
            reason,
            action,
            note,
            recorder.reporting_controller,
            recorder.reporting_instance,
        )
        now = self._monotonic()
        wall = self._wall_clock()
        with self._lock:
            series = self._series.get(key)
            window = self.options.aggregation_window
            if series is not None and now - series.last_seen <= window:
                series.count += 1
                series.last_seen = now
                series.last_observed = wall
                self._series.move_to_end(key)
                if series.patch_pending:
                    return  # the queued update will carry this repeat too
                series.patch_pending = True
                self._enqueue_locked(("series", series))
                return
            event: JsonObject = {
                "apiVersion": kinds.Event.api_version,
                "kind": kinds.Event.kind,
                "metadata": {
                    "name": _event_name(regarding["name"]),
                    # Events about cluster-scoped objects live in "default", as in client-go.
                    "namespace": regarding.get("namespace") or "default",
                },
                "eventTime": micro_time(wall),
                "reportingController": recorder.reporting_controller,
                "reportingInstance": recorder.reporting_instance,
                "action": action,
                "reason": reason,
                "note": note,
                "type": type,
                "regarding": regarding,
            }
            if related_ref is not None:
                event["related"] = related_ref
            series = _Series(event=event, count=1, last_seen=now, last_observed=wall)
            self._series[key] = series
            self._series.move_to_end(key)
            while len(self._series) > self.options.max_tracked:
                self._series.popitem(last=False)
            self._enqueue_locked(("create", series))

    def _enqueue_locked(self, job: _Job) -> None:
        if len(self._jobs) >= self.options.queue_size:
            job[1].patch_pending = False
            raise _Dropped(f"the queue is full ({self.options.queue_size} Events waiting)")
        self._jobs.append(job)
        loop, wakeup = self._loop, self._wakeup
        if loop is None or wakeup is None:
            return  # not started: the queue is drained once start() runs
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            wakeup.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to wake
                loop.call_soon_threadsafe(wakeup.set)

    def _drop(self, why: str, *, reason: str) -> None:
        self._dropped += 1
        now = time.monotonic()
        # A broken caller or a full queue could log on every call; once per 10 s is enough to
        # notice, and `dropped` keeps the exact count.
        if now - self._last_drop_log >= 10.0:
            self._last_drop_log = now
            log.warning(
                "Event dropped (reason %r): %s (%d dropped so far)", reason, why, self._dropped
            )

    # -- sending (background task) ------------------------------------------------------

    async def _run(self) -> None:
        assert self._wakeup is not None and self._idle is not None
        try:
            while True:
                with self._lock:
                    job = self._jobs.popleft() if self._jobs else None
                if job is None:
                    self._idle.set()
                    self._wakeup.clear()
                    with self._lock:
                        if self._jobs:
                            continue
                    await self._wakeup.wait()
                    continue
                self._busy = True
                try:
                    await self._send(*job)
                finally:
                    self._busy = False
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug here must surface, not silently stop Events
            self._failure = exc
            log.exception("the event broadcaster stopped unexpectedly")
            raise

    async def _send(self, kind: Literal["create", "series"], series: _Series) -> None:
        options = self.options
        for attempt in range(options.max_attempts):
            try:
                if kind == "create":
                    await self._create(series)
                else:
                    await self._patch_series(series)
                self._sent += 1
                return
            except asyncio.CancelledError:
                raise
            except _Dropped as exc:
                self._drop(str(exc), reason=str(series.event["reason"]))
                return
            except Exception as exc:
                code = getattr(exc, "code", None)
                transient = not isinstance(code, int) or code == 429 or code >= 500
                if not transient:
                    self._drop(
                        f"the API server rejected Event {series.namespace}/{series.name}: {exc}",
                        reason=str(series.event["reason"]),
                    )
                    return
                if attempt + 1 >= options.max_attempts or self._stopped:
                    self._drop(
                        f"sending Event {series.namespace}/{series.name} failed "
                        f"{attempt + 1} times, last with: {exc}",
                        reason=str(series.event["reason"]),
                    )
                    return
                await asyncio.sleep(options.retry_backoff * 2**attempt)

    async def _create(self, series: _Series) -> None:
        with self._lock:
            count = series.count
            # Repeats that arrived before the Event was ever created go into the create.
            extra = {"series": series.series()} if count > 1 else {}
        for _ in range(3):
            # A fresh body per attempt: the client may keep what it was given.
            body = {**series.event, "metadata": dict(series.event["metadata"]), **extra}
            try:
                await asyncio.wait_for(
                    self._client.create(body), timeout=self.options.request_timeout
                )
            except Exception as exc:
                if getattr(exc, "code", None) == 409:
                    # Name taken (another process, same nanosecond): pick another.
                    self._rename(series)
                    continue
                raise
            with self._lock:
                series.sent_count = max(series.sent_count, count)
            return
        raise _Dropped(f"no free name for an Event about {series.event['regarding']['name']}")

    async def _patch_series(self, series: _Series) -> None:
        with self._lock:
            series.patch_pending = False  # repeats from now on queue a new update
            count = series.count
            patch = {"series": series.series()}
        if count <= series.sent_count:
            return  # the create already carried this count
        try:
            await asyncio.wait_for(
                self._client.patch(
                    kinds.Event, series.name, JsonMergePatch(patch), namespace=series.namespace
                ),
                timeout=self.options.request_timeout,
            )
        except Exception as exc:
            if getattr(exc, "code", None) != 404:
                raise
            # The Event expired (the API server keeps Events for an hour by default) or was
            # deleted: start a new one, carrying the series so far.
            self._rename(series)
            series.sent_count = 0
            await self._create(series)
            return
        with self._lock:
            series.sent_count = max(series.sent_count, count)

    @staticmethod
    def _rename(series: _Series) -> None:
        metadata = series.event["metadata"]
        name = _event_name(str(series.event["regarding"]["name"]))
        series.event = {**series.event, "metadata": {**metadata, "name": name}}
