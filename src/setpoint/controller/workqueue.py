"""The controller's work queue: which key to reconcile next, and when.

Event handlers :meth:`~WorkQueue.add` keys; workers take them with :meth:`~WorkQueue.get` and
hand them back with :meth:`~WorkQueue.done`. The queue is modelled on client-go's
``util/workqueue`` and controller-runtime's priority queue::

    queue: WorkQueue[ObjectKey] = WorkQueue("configmap-controller", metrics=Metrics.default())

    async def worker() -> None:
        while True:
            try:
                key, priority = await queue.get_with_priority()
            except ShutDown:
                return
            try:
                await reconcile(key)
            except Exception:
                queue.add_rate_limited(key, priority=priority)  # back off, then retry
            else:
                queue.forget(key)  # success: reset the key's backoff
            finally:
                queue.done(key)

Guarantees
----------
- **Deduplication.** A key is waiting at most once, however often it is added while waiting.
- **Exclusivity.** A key is never handed to two workers at once. A key added while a worker
  holds it is marked *dirty* and becomes waiting again when :meth:`~WorkQueue.done` is called,
  so a change that arrives during a reconcile is never lost.
- **Seen changes.** An add may carry a *stamp*: a number that grows with every change the
  caller knows of (a controller uses the cache's count of applied changes). ``done(key,
  seen=n)`` says the processing that ends had already seen every change up to ``n``; a dirty
  mark whose adds all carried stamps ``<= n`` is then dropped instead of queued again, since
  it asks for nothing that processing did not see. An add without a stamp is never dropped.
- **Priorities.** Ready keys come out highest priority first, first-in first-out within one
  priority (in the order they became ready, so a delayed key queues behind keys that were
  ready before its deadline). Adding a waiting key again with a higher priority moves it up;
  a lower priority never moves it down. Events from an informer's initial list use
  :attr:`Priority.LOW`, so after a restart with 10,000 objects a new change is still handled
  promptly.
- **Delays.** :meth:`~WorkQueue.add_after` makes a key ready later. A key has one deadline:
  the earliest requested wins, and a plain :meth:`~WorkQueue.add` (deadline "now") makes a
  delayed key ready at once. Reconciles are level-based, so the one processing that results
  serves every request that was merged into it.
- **Retries.** :meth:`~WorkQueue.add_rate_limited` delays a key by what the rate limiter says
  (per-key exponential backoff, max-of a shared token bucket, by default).
- **Per-key cap** (optional, :class:`~setpoint.controller.ratelimit.PerKeyLimit`). A key starts
  processing at most N times per sliding window; adds beyond that are deferred until the window
  allows, never dropped. The cap holds against every kind of add, including plain ``add``.
- **Fairness** (optional, ``fair_by``). Keys are grouped by a function of the key (a
  controller uses the namespace), and within one priority the queue hands out the groups'
  ready keys round-robin, each group's first-in first-out, instead of in one global
  first-in first-out order. A namespace with 10,000 queued objects then delays a namespace
  with 10 by at most one key per turn instead of by its whole backlog (kubernetes#25744).
  Every other guarantee here holds unchanged; see "Fair order" below.
- **Shutdown.** :meth:`~WorkQueue.shutdown` stops handing out keys at once: every pending and
  future :meth:`~WorkQueue.get` raises :class:`ShutDown`, waiting keys are dropped and later adds
  are ignored. :meth:`~WorkQueue.shutdown_with_drain` then waits for in-flight keys.

How the states fit together
---------------------------
Every waiting key has one entry with a priority and a requested start time, and is in exactly
one state: *ready* (in a heap ordered by priority then arrival), *delayed* (in a heap ordered by
due time, served by one loop timer), or *dirty* (its key is being processed; no heap). A key
being processed that is not waiting is just *in flight*. ``done`` turns a dirty entry into a
ready or delayed one. Only ready entries can be handed out, and an entry becomes ready only when
its key is not in flight, so exclusivity holds without a scan. Heap entries are invalidated
lazily (a generation number), which keeps add, get and done at O(log n).

Fair order
----------
With ``fair_by``, a ready entry's place within its priority is not its arrival number but a
*tag*: ``max(V, last) + 1``, where ``last`` is the tag of the group's newest ready entry at
that priority and ``V`` the tag of the latest entry handed out at that priority (start-time
fair queueing with unit costs). Tags grow by one per key within a group, so the heap orders
the groups' keys in rounds: every group with ready keys gets one key per round, in its own
arrival order, and ties go to the earlier arrival. A group that was idle starts at ``V + 1``:
it neither saves up turns while idle nor waits behind the backlog of the others. A key moved
up to a higher priority takes a new tag there. Cost: one call of ``fair_by`` per key becoming
ready and two small dict updates per ready key; state is kept only for groups with ready keys.

The queue belongs to one event loop: call its methods from that loop's thread. Waiting uses
futures and one timer handle; nothing polls.

Metrics
-------
With a metrics provider the queue reports controller-runtime's ``workqueue_*`` family.
``workqueue_depth{priority}`` counts *ready* keys (not delayed ones, nor dirty keys waiting
for their own processing to end); ``adds_total`` counts keys becoming ready;
``queue_duration_seconds`` runs from becoming ready to being taken; ``retries_total`` counts
``add_after`` and ``add_rate_limited`` calls; the two in-flight gauges are computed when scraped.

Errors
------
:meth:`~WorkQueue.get` raises :class:`ShutDown` once the queue is shut down; a worker loop ends
there. An exception rather than a sentinel value keeps ``get()`` typed as returning a key and
cannot be mistaken for one. :meth:`~WorkQueue.done` raises :class:`NotProcessingError` for a key
that is not in flight (``done`` twice, or for a key never taken), since that is a bug in the
worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, Generic, TypeVar

from setpoint.api.clock import Clock, LoopClock, TimerHandle
from setpoint.api.errors import SetpointError
from setpoint.controller.ratelimit import (
    PerKeyLimit,
    PerKeyWindowLimiter,
    RateLimiter,
    RateLimiterOptions,
    default_controller_rate_limiter,
)
from setpoint.observability.metrics import (
    NO_WORKQUEUE_METRICS,
    WorkQueueMetrics,
    WorkQueueMetricsProvider,
)

__all__ = [
    "NotProcessingError",
    "Priority",
    "ShutDown",
    "WorkQueue",
    "WorkQueueError",
    "WorkQueueOptions",
]

K = TypeVar("K", bound=Hashable)


class Priority(IntEnum):
    """Well-known priorities; any ``int`` works, and higher runs first."""

    LOW = -100
    """Events that only restate what exists: an informer's initial list, periodic resyncs.
    Same value as controller-runtime's ``handler.LowPriority``."""

    NORMAL = 0
    """Live changes. The default."""


class WorkQueueError(SetpointError):
    """Base class of the work queue's errors."""


class ShutDown(WorkQueueError):
    """Raised by :meth:`WorkQueue.get` once the queue is shut down: the worker should return."""


class NotProcessingError(WorkQueueError, ValueError):
    """:meth:`WorkQueue.done` was called for a key that is not being processed."""


@dataclass(frozen=True, kw_only=True)
class WorkQueueOptions:
    """Settings of a :class:`WorkQueue`."""

    rate_limits: RateLimiterOptions = field(default_factory=RateLimiterOptions)
    """Backoff used by :meth:`WorkQueue.add_rate_limited`: 5 ms doubling to 1000 s per key,
    max-of 10 retries/s (burst 100) across the queue. See :class:`RateLimiterOptions`."""

    per_key_limit: PerKeyLimit | None = None
    """Optional cap on how often one key may start processing. Default ``None``: no cap."""

    def __post_init__(self) -> None:
        if not isinstance(self.rate_limits, RateLimiterOptions):
            raise TypeError(
                f"WorkQueueOptions.rate_limits must be a RateLimiterOptions, "
                f"not {type(self.rate_limits).__name__}"
            )
        if self.per_key_limit is not None and not isinstance(self.per_key_limit, PerKeyLimit):
            raise TypeError(
                f"WorkQueueOptions.per_key_limit must be a PerKeyLimit or None, "
                f"not {type(self.per_key_limit).__name__}"
            )


# Entry states. An entry exists only while its key is waiting to be processed.
_READY: Final = 0  # in the ready heap, may be handed out now
_DELAYED: Final = 1  # in the delayed heap, becomes ready at ``due``
_DIRTY: Final = 2  # its key is in flight; rescheduled by done()
_IDLE: Final = 3  # transient: in no heap, about to be scheduled


class _Entry(Generic[K]):
    __slots__ = (
        "counted_priority",
        "due",
        "fifo",
        "gen",
        "key",
        "priority",
        "ready_since",
        "requested",
        "stamp",
        "state",
        "tenant",
    )

    def __init__(self, key: K, priority: int, requested: float | None, stamp: int | None) -> None:
        self.key = key
        self.priority = priority
        # The highest stamp of the adds merged into it; None once any add had no stamp.
        self.stamp = stamp
        # Earliest start anyone asked for; None means "as soon as possible".
        self.requested = requested
        self.state = _IDLE
        # Matches the generation stored in this entry's one live heap item; any heap item
        # with another generation is stale and skipped. Heap generations start at 1, so 0
        # means "in no heap".
        self.gen = 0
        self.fifo = 0  # arrival order among ready entries
        self.due = 0.0  # when a delayed entry becomes ready
        self.ready_since = 0.0  # for workqueue_queue_duration_seconds
        self.counted_priority = priority  # the workqueue_depth series this entry is counted in
        self.tenant: Hashable = None  # the fair group it is counted in while ready (fair only)


# Heaps may hold this many stale items beyond twice their live count before being rebuilt.
_COMPACT_SLACK: Final = 64


class WorkQueue(Generic[K]):
    """An asyncio work queue of hashable keys; see the module docstring for its guarantees.

    Args:
        name: Names the queue in errors and, as the ``name`` and ``controller`` labels, in
            metrics. Use the controller's name.
        options: Backoff and per-key cap settings; defaults as documented on
            :class:`WorkQueueOptions`.
        rate_limiter: Replaces the limiter built from ``options.rate_limits``; passing both a
            limiter and non-default ``rate_limits`` is an error.
        metrics: Where to report ``workqueue_*`` metrics (e.g. ``Metrics.default()``).
            Default ``None``: report nothing.
        clock: Time source and timers. Default: the running loop's clock. Tests pass a
            :class:`~setpoint.api.clock.ManualClock`.
        fair_by: Groups keys for fair order (see "Fairness" in the module docstring): ready
            keys of one priority are handed out round-robin between the groups this function
            names. It is called once each time a key becomes ready, so keep it cheap and
            pure. Default ``None``: one first-in first-out order for all keys.

    """

    def __init__(
        self,
        name: str,
        options: WorkQueueOptions | None = None,
        *,
        rate_limiter: RateLimiter[K] | None = None,
        metrics: WorkQueueMetricsProvider | None = None,
        clock: Clock | None = None,
        fair_by: Callable[[K], Hashable] | None = None,
    ) -> None:
        if not name:
            raise ValueError(
                "a work queue needs a non-empty name (use the controller's name): it appears "
                "in errors and metrics"
            )
        options = options if options is not None else WorkQueueOptions()
        if fair_by is not None and not callable(fair_by):
            raise TypeError(
                f"work queue {name!r}: fair_by must be a function from a key to its group "
                f"(for example lambda key: key.namespace), not {fair_by!r}"
            )
        if rate_limiter is not None and options.rate_limits != RateLimiterOptions():
            raise ValueError(
                f"work queue {name!r}: pass either rate_limiter or options.rate_limits, not "
                "both; rate_limits only configures the default limiter"
            )
        self._name = name
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._rate_limiter: RateLimiter[K] = (
            rate_limiter
            if rate_limiter is not None
            else default_controller_rate_limiter(options.rate_limits, clock=self._clock)
        )
        self._window: PerKeyWindowLimiter[K] | None = (
            PerKeyWindowLimiter(options.per_key_limit)
            if options.per_key_limit is not None
            else None
        )

        self._entries: dict[K, _Entry[K]] = {}
        # (-priority, fifo, gen, entry): (priority, fifo) is unique among items, so entries
        # are never compared. An item is live while entry.gen == gen.
        self._ready: list[tuple[int, int, int, _Entry[K]]] = []
        self._ready_count = 0
        # (due, gen, entry): gen is unique, so entries are never compared.
        self._delayed: list[tuple[float, int, _Entry[K]]] = []
        self._delayed_count = 0
        # key -> processing start; insertion order is start order, so the first is the oldest.
        self._processing: dict[K, float] = {}
        self._seq = 0
        # Fair order (only with fair_by): per priority, the tag of the latest entry handed
        # out; per (priority, group) with ready entries, [newest tag, ready entries].
        self._fair_by = fair_by
        self._fair_vtime: dict[int, int] = {}
        self._fair_groups: dict[tuple[int, Hashable], list[int]] = {}

        self._waiters: deque[asyncio.Future[None]] = deque()
        self._drainers: list[asyncio.Future[bool]] = []
        self._timer: TimerHandle | None = None
        self._timer_when = math.inf
        self._shutting_down = False

        self._metrics: WorkQueueMetrics = (
            metrics.new_queue_metrics(name) if metrics is not None else NO_WORKQUEUE_METRICS
        )
        self._metrics.track_in_flight(self._unfinished_seconds, self._longest_running_seconds)

    # ----------------------------------------------------------------------------------------
    # Introspection

    @property
    def name(self) -> str:
        """The queue's name."""
        return self._name

    @property
    def shutting_down(self) -> bool:
        """Whether :meth:`shutdown` has been called."""
        return self._shutting_down

    @property
    def ready_count(self) -> int:
        """Keys that a worker could take right now (what ``workqueue_depth`` reports)."""
        return self._ready_count

    @property
    def fair(self) -> bool:
        """Whether the queue hands out ready keys round-robin between groups (``fair_by``)."""
        return self._fair_by is not None

    @property
    def in_flight_count(self) -> int:
        """Keys handed out by :meth:`get` and not yet passed to :meth:`done`."""
        return len(self._processing)

    def is_processing(self, key: K) -> bool:
        """Whether ``key`` is in flight: handed out by :meth:`get` and not yet :meth:`done`."""
        return key in self._processing

    def __len__(self) -> int:
        """Keys waiting to be processed: ready, delayed, or dirty behind their own processing."""
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"<WorkQueue {self._name!r} ready={self._ready_count} "
            f"delayed={self._delayed_count} in_flight={len(self._processing)}"
            f"{' shut down' if self._shutting_down else ''}>"
        )

    # ----------------------------------------------------------------------------------------
    # Adding

    def add(self, key: K, *, priority: int = Priority.NORMAL, stamp: int | None = None) -> None:
        """Make ``key`` ready now (or when its own processing ends, if it is in flight).

        A key already waiting is not added twice: it keeps its place, takes the higher of the
        two priorities, and loses any delay. ``stamp`` numbers the change behind the add
        (see "Seen changes" in the module docstring); without one, the add is always served.
        Ignored after :meth:`shutdown`.
        """
        if self._shutting_down:
            return
        self._request(key, priority, None, self._clock.now(), stamp)

    def add_after(self, key: K, delay: float, *, priority: int = Priority.NORMAL) -> None:
        """Make ``key`` ready in ``delay`` seconds (at once if ``delay <= 0``).

        If the key is already waiting, the earlier of its deadline and this one wins, and it
        takes the higher priority. Counts in ``workqueue_retries_total``. Ignored after
        :meth:`shutdown`.
        """
        if self._shutting_down:
            return
        self._metrics.retried()
        now = self._clock.now()
        self._request(key, priority, now + delay if delay > 0 else None, now, None)

    def add_rate_limited(self, key: K, *, priority: int = Priority.NORMAL) -> None:
        """Retry ``key`` after the delay the rate limiter gives (and count the retry there).

        Call :meth:`forget` once the key succeeds, or its backoff keeps growing.
        """
        if self._shutting_down:
            return
        self.add_after(key, self._rate_limiter.when(key), priority=priority)

    def forget(self, key: K) -> None:
        """Reset ``key``'s retry backoff; it stays queued if it is queued."""
        self._rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How often ``key`` went through :meth:`add_rate_limited` since it was last forgotten."""
        return self._rate_limiter.num_requeues(key)

    # ----------------------------------------------------------------------------------------
    # Taking and returning

    async def get(self) -> K:
        """Wait for the next ready key and take it; see :meth:`get_with_priority`."""
        key, _ = await self.get_with_priority()
        return key

    async def get_with_priority(self) -> tuple[K, int]:
        """Wait for the next ready key, take it, and return it with its priority.

        The key is in flight until :meth:`done` is called for it; no other worker gets it
        meanwhile. Pass the priority back when re-adding the key after processing it.

        Raises:
            ShutDown: the queue is shut down (also raised to workers already waiting).

        """
        while True:
            if self._shutting_down:
                raise ShutDown(f"work queue {self._name!r} is shut down; the worker should stop")
            entry = self._pop_ready()
            if entry is not None:
                return self._start(entry)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.cancelled():
                    self._discard_waiter(waiter)
                else:
                    # We were woken for a ready key but will not take it: wake someone else,
                    # or that key could sit there with idle workers waiting.
                    self._wake_one()
                raise

    def done(self, key: K, *, seen: int | None = None) -> None:
        """Mark ``key``'s processing finished; if it was added meanwhile, it waits again.

        ``seen``: the processing had seen every change stamped up to this number, so a
        dirty mark made only of adds stamped ``<= seen`` is dropped rather than queued
        (see "Seen changes" in the module docstring). ``None`` (the default) drops nothing.

        Raises:
            NotProcessingError: ``key`` is not in flight (``done`` called twice, or for a key
                that :meth:`get` never returned).

        """
        try:
            started = self._processing.pop(key)
        except KeyError:
            raise NotProcessingError(
                f"work queue {self._name!r}: done({key!r}) was called, but {key!r} is not being "
                "processed; call done() exactly once for each key that get() returned"
            ) from None
        now = self._clock.now()
        self._metrics.observe_work_duration(now - started)
        entry = self._entries.get(key)
        if entry is not None:  # dirty: it changed while being processed
            if seen is not None and entry.stamp is not None and entry.stamp <= seen:
                del self._entries[key]  # nothing the processing did not see
            else:
                entry.state = _IDLE
                self._schedule(entry, now)
        if self._shutting_down and not self._processing:
            self._resolve_drainers(True)

    # ----------------------------------------------------------------------------------------
    # Shutting down

    def shutdown(self) -> None:
        """Stop handing out keys: waiting and later :meth:`get` calls raise :class:`ShutDown`.

        Keys still waiting are dropped and later adds are ignored. Keys in flight stay in
        flight; their workers should still call :meth:`done`. Calling it again does nothing.
        """
        if self._shutting_down:
            return
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for entry in self._entries.values():
            if entry.state == _READY:
                self._metrics.depth_changed(entry.counted_priority, -1)
        self._entries.clear()
        self._ready.clear()
        self._delayed.clear()
        self._ready_count = 0
        self._delayed_count = 0
        self._fair_vtime.clear()
        self._fair_groups.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    # The deadline runs on the queue's clock (injectable, unlike asyncio.timeout's loop time).
    async def shutdown_with_drain(self, timeout: float) -> bool:  # noqa: ASYNC109, RUF100
        """Shut down, then wait up to ``timeout`` seconds for in-flight keys to be done.

        Returns:
            ``True`` if every in-flight key was passed to :meth:`done` in time, ``False`` if
            some were still in flight at the deadline.

        """
        if math.isnan(timeout) or timeout < 0:
            raise ValueError(
                f"work queue {self._name!r}: shutdown_with_drain(timeout={timeout!r}) needs a "
                "number of seconds >= 0 (math.inf waits without a deadline)"
            )
        self.shutdown()
        if not self._processing:
            return True
        if timeout == 0:
            return False
        drained: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._drainers.append(drained)

        def expire() -> None:
            if not drained.done():
                drained.set_result(False)

        deadline = (
            self._clock.call_at(self._clock.now() + timeout, expire)
            if math.isfinite(timeout)
            else None
        )
        try:
            return await drained
        finally:
            if deadline is not None:
                deadline.cancel()
            if drained in self._drainers:
                self._drainers.remove(drained)

    # ----------------------------------------------------------------------------------------
    # Internals

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _request(
        self, key: K, priority: int, when: float | None, now: float, stamp: int | None
    ) -> None:
        """Merge one request (a priority, an earliest start, a stamp) into ``key``'s entry."""
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(key, priority, when, stamp)
            self._entries[key] = entry
            if key in self._processing:
                entry.state = _DIRTY
                entry.gen = self._next_seq()
            else:
                self._schedule(entry, now)
            return
        if stamp is None or entry.stamp is None:
            entry.stamp = None
        elif stamp > entry.stamp:
            entry.stamp = stamp
        if entry.state == _READY:
            # Already as early as it gets; only the priority can change.
            if priority > entry.priority:
                self._raise_ready(entry, priority)
            return
        entry.priority = max(entry.priority, priority)
        if entry.requested is not None and (when is None or when < entry.requested):
            entry.requested = when
            if entry.state == _DELAYED:
                self._schedule(entry, now)

    def _schedule(self, entry: _Entry[K], now: float) -> None:
        """Put an entry whose key is not in flight into the ready or the delayed heap."""
        requested = entry.requested
        due = now if requested is None or requested < now else requested
        if self._window is not None:
            due = max(due, self._window.earliest(entry.key, now))
        if due <= now:
            if entry.state == _DELAYED:
                self._delayed_count -= 1
            self._enter_ready(entry, now)
        elif entry.state == _DELAYED and due >= entry.due:
            return  # already due no later than that
        else:
            if entry.state != _DELAYED:
                self._delayed_count += 1
            self._enter_delayed(entry, due)

    def _enter_ready(self, entry: _Entry[K], now: float) -> None:
        gen = self._next_seq()
        entry.state = _READY
        entry.gen = gen
        if self._fair_by is None:
            entry.fifo = gen
        else:
            entry.tenant = self._fair_by(entry.key)
            entry.fifo = self._fair_tag(entry.priority, entry.tenant)
        entry.requested = None
        entry.ready_since = now
        entry.counted_priority = entry.priority
        heapq.heappush(self._ready, (-entry.priority, entry.fifo, gen, entry))
        self._ready_count += 1
        self._metrics.added()
        self._metrics.depth_changed(entry.priority, 1)
        self._wake_one()

    def _raise_ready(self, entry: _Entry[K], priority: int) -> None:
        self._metrics.depth_changed(entry.counted_priority, -1)
        gen = self._next_seq()
        if self._fair_by is not None:
            # A new tag among the groups of the new priority.
            self._fair_leave(entry.priority, entry.tenant)
            entry.fifo = self._fair_tag(priority, entry.tenant)
        entry.priority = priority
        entry.counted_priority = priority
        entry.gen = gen
        # Same arrival order, new priority; the old heap item is now stale.
        heapq.heappush(self._ready, (-priority, entry.fifo, gen, entry))
        self._metrics.depth_changed(priority, 1)
        if len(self._ready) > 2 * self._ready_count + _COMPACT_SLACK:
            # In place: callers may hold a reference to the list.
            self._ready[:] = [item for item in self._ready if item[3].gen == item[2]]
            heapq.heapify(self._ready)

    def _enter_delayed(self, entry: _Entry[K], due: float) -> None:
        gen = self._next_seq()
        entry.state = _DELAYED
        entry.gen = gen
        entry.due = due
        heapq.heappush(self._delayed, (due, gen, entry))
        if len(self._delayed) > 2 * self._delayed_count + _COMPACT_SLACK:
            # In place: _on_timer iterates this list while scheduling may compact it.
            self._delayed[:] = [item for item in self._delayed if item[2].gen == item[1]]
            heapq.heapify(self._delayed)
        if due < self._timer_when:
            self._arm_timer(due)

    def _pop_ready(self) -> _Entry[K] | None:
        if not self._ready_count:
            return None
        ready = self._ready
        while ready:
            _, _, gen, entry = heapq.heappop(ready)
            if entry.gen == gen:
                del self._entries[entry.key]
                entry.gen = 0  # leaves the queue: no heap item may match it again
                self._ready_count -= 1
                if self._fair_by is not None:
                    vtime = self._fair_vtime
                    if entry.fifo > vtime.get(entry.priority, 0):
                        vtime[entry.priority] = entry.fifo
                    self._fair_leave(entry.priority, entry.tenant)
                return entry
        return None  # unreachable while _ready_count is right; kept for safety

    def _start(self, entry: _Entry[K]) -> tuple[K, int]:
        now = self._clock.now()
        key = entry.key
        self._processing[key] = now
        if self._window is not None:
            self._window.record(key, now)
        self._metrics.depth_changed(entry.counted_priority, -1)
        self._metrics.observe_queue_duration(now - entry.ready_since)
        return key, entry.priority

    def _fair_tag(self, priority: int, tenant: Hashable) -> int:
        """Give one more ready entry of ``tenant`` at ``priority`` its place in the rounds."""
        group = self._fair_groups.get((priority, tenant))
        start = self._fair_vtime.get(priority, 0)
        if group is None:
            self._fair_groups[(priority, tenant)] = [start + 1, 1]
            return start + 1
        tag = max(start, group[0]) + 1
        group[0] = tag
        group[1] += 1
        return tag

    def _fair_leave(self, priority: int, tenant: Hashable) -> None:
        """One ready entry of ``tenant`` at ``priority`` left it (taken or moved up)."""
        group = self._fair_groups[(priority, tenant)]
        group[1] -= 1
        if not group[1]:
            # Nothing of it is ready: it restarts at the current round when it comes back.
            del self._fair_groups[(priority, tenant)]

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _discard_waiter(self, waiter: asyncio.Future[None]) -> None:
        # ValueError: already popped by _wake_one or shutdown.
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    def _arm_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_when = when
        self._timer = self._clock.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        # The timer stands for its deadline: loops may fire a hair early (clock resolution),
        # and treating that as "not due yet" would only re-arm the same timer.
        now = max(self._clock.now(), self._timer_when)
        self._timer_when = math.inf
        delayed = self._delayed
        while delayed:
            due, gen, entry = delayed[0]
            if entry.gen != gen:
                heapq.heappop(delayed)  # stale
                continue
            if due > now:
                self._arm_timer(due)
                return
            heapq.heappop(delayed)
            self._delayed_count -= 1
            entry.state = _IDLE
            self._schedule(entry, now)

    def _resolve_drainers(self, drained: bool) -> None:
        for future in self._drainers:
            if not future.done():
                future.set_result(drained)

    def _unfinished_seconds(self) -> float:
        # May run on a scrape thread: copy the values in one C-level step before using them.
        starts = tuple(self._processing.values())
        if not starts:
            return 0.0
        now = self._clock.now()
        return sum(now - started for started in starts)

    def _longest_running_seconds(self) -> float:
        oldest = next(iter(self._processing.values()), None)
        return 0.0 if oldest is None else max(0.0, self._clock.now() - oldest)
