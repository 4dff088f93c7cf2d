"""External event sources: reconcile requests from outside Kubernetes.

A controller's informers see what changes in the cluster. What changes elsewhere (a row in a
database, a cloud resource, a message on a bus) reaches the controller through an *external
source*, declared with ``Builder.watches_source(source)``:

- :class:`ChannelSource`: a queue the author feeds (``await source.send(key)``), as
  controller-runtime's ``source.Channel``.
- :class:`PollingSource`: a function returning the whole external state, called every
  ``period`` seconds (with jitter); the keys whose value appeared, changed or vanished since
  the last poll are reconciled, as JOSDK's ``PollingEventSource``.
- :class:`PerObjectPollingSource`: a function called for each object the controller
  reconciles (the ``for_`` objects in the cache), as JOSDK's
  ``PerResourcePollingEventSource``.

::

    directory = PollingSource("directory", fetch_rows, period=30)
    manager.controller("tenant").for_(Tenant).watches_source(directory).build(reconcile)

    async def reconcile(ctx, request):
        row = directory.get(request)  # the last polled value: no second call outside

Expected flow
-------------
The controller starts its sources after its informers synced and its workers started, and
stops them first when it stops. A polling source polls once at start, then ``period`` seconds
after the previous poll *ended* (fixed delay: a slow poll never overlaps the next one), each
delay spread by ``jitter`` (0.1: from 90% to 110% of ``period``) so replicas and sources do not
poll in step. A poll compares the values with the previous poll's by ``==`` (a comparison
that raises counts as a change); the first poll's keys are queued at low priority (the
informers' initial list queued the same objects), later changes at normal priority.

Backpressure
------------
Every source has a buffer of at most ``capacity`` keys (duplicates merge). It hands keys to
the controller's work queue while that queue holds fewer than ``capacity`` ready keys
(waiting for a worker); when the controller falls behind, keys wait in the buffer, and
``setpoint_source_buffered`` shows them. When the buffer is full:

- :meth:`ChannelSource.send` waits for room; :meth:`ChannelSource.offer` returns ``False``
  and counts the key in ``setpoint_source_dropped_total`` (the caller decides).
- a polling source does not start its next poll until the buffer has room again: polls
  are skipped, never piled up, and nothing polled is dropped.

Errors
------
A poll that raises is counted (``setpoint_source_poll_errors_total``) and logged (the
traceback once, identical repeats counted), the previous values are kept, and the next
poll runs on schedule. A source never stops its controller.

Metrics: ``setpoint_source_polls_total``, ``setpoint_source_poll_errors_total``,
``setpoint_source_poll_duration_seconds`` (on the controller's clock),
``setpoint_source_enqueued_total``, ``setpoint_source_dropped_total`` and
``setpoint_source_buffered``, each labelled ``{controller, source}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from setpoint.api.clock import Clock, TimerHandle, clock_sleep
from setpoint.api.keys import ObjectKey
from setpoint.controller.reconcile import ControllerError
from setpoint.controller.workqueue import Priority
from setpoint.observability.logging import Logger, RepeatedErrors
from setpoint.observability.metrics import Metrics

__all__ = [
    "ChannelSource",
    "ExternalSource",
    "PerObjectPollingSource",
    "PollingSource",
    "SourceTarget",
]

V = TypeVar("V")

RECHECK_SECONDS = 0.05
"""How often a source with keys waiting looks again whether the work queue has room."""


@dataclass(frozen=True, slots=True)
class SourceTarget:
    """What a controller gives an external source when it starts it.

    Built by the controller; a test can build one around a plain list to drive a source
    without a controller.
    """

    controller: str
    """The controller's name (the ``controller`` label of the source's metrics)."""
    add: Callable[[ObjectKey, int], None]
    """Queue a key for reconcile at a priority (:class:`~setpoint.controller.Priority`)."""
    ready_count: Callable[[], int]
    """How many keys wait in the work queue for a worker now (the backpressure signal)."""
    keys: Callable[[], Iterable[ObjectKey]]
    """The keys of the objects the controller reconciles (its ``for_`` objects in the
    cache); empty without ``for_``."""
    clock: Clock
    """The controller's clock: the polling period, jitter and durations run on it."""
    log: Logger
    """The controller's logger."""
    metrics: Metrics | None = None
    """Where the source reports its metrics; ``None`` reports nothing."""


@runtime_checkable
class ExternalSource(Protocol):
    """An event source outside Kubernetes: started and stopped with its controller."""

    @property
    def name(self) -> str:
        """The source's name: the ``source`` label of its metrics, unique per controller."""
        ...

    async def start(self, target: SourceTarget) -> None:
        """Begin feeding ``target``; return at once (background work runs in tasks)."""
        ...

    async def stop(self) -> None:
        """Stop feeding: cancel background work; keys still buffered are dropped."""
        ...


class _BufferedSource:
    """The buffer, backpressure, binding and metrics every external source shares."""

    def __init__(self, name: str, *, capacity: int) -> None:
        if not isinstance(name, str) or not name or len(name) > 63:
            raise ValueError(f"source name {name!r}: give 1-63 characters (it labels metrics)")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"source {name!r}: capacity must be an int >= 1, not {capacity!r}")
        self._name = name
        self._capacity = capacity
        self._buffer: dict[ObjectKey, int] = {}
        self._target: SourceTarget | None = None
        self._stopped = False
        self._recheck: TimerHandle | None = None
        self._room = asyncio.Event()
        self._room.set()
        self._series: dict[str, Any] = {}

    @property
    def name(self) -> str:
        """The source's name (the ``source`` label of its metrics)."""
        return self._name

    @property
    def capacity(self) -> int:
        """The most keys the buffer holds, and the work-queue depth above which it holds."""
        return self._capacity

    @property
    def buffered(self) -> int:
        """Keys waiting in the buffer now."""
        return len(self._buffer)

    async def start(self, target: SourceTarget) -> None:
        """Bind to the controller's ``target`` and hand over what was buffered before.

        Raises:
            ControllerError: the source was started already (one source, one controller).

        """
        if self._target is not None or self._stopped:
            raise ControllerError(
                f"source {self._name!r} was already started (by controller "
                f"{self._target.controller if self._target else '?'!r}); give each "
                "controller its own source object"
            )
        self._target = target
        if target.metrics is not None:
            this = self

            def buffered() -> float:
                return float(len(this._buffer))

            self._metric("source_buffered").set_function(buffered)
            self._metric("source_enqueued_total")
            self._metric("source_dropped_total")
        self._drain()

    async def stop(self) -> None:
        """Stop handing keys over; what is still buffered is dropped."""
        self._stopped = True
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        self._buffer.clear()
        self._room.set()  # wake senders: they return (their keys are not taken any more)

    # -- the buffer -----------------------------------------------------------------------

    def _put(self, key: ObjectKey, priority: int) -> bool:
        """Buffer ``key`` (merging a duplicate, keeping its higher priority); False if full."""
        if not isinstance(key, ObjectKey):
            raise TypeError(
                f"source {self._name!r}: {key!r} is not an ObjectKey; send "
                "ObjectKey(namespace, name) of the object to reconcile"
            )
        if self._stopped:
            return True  # nowhere to go; the controller is gone
        buffer = self._buffer
        if key in buffer:
            buffer[key] = max(buffer[key], priority)
            return True
        if len(buffer) >= self._capacity:
            self._room.clear()
            return False
        buffer[key] = priority
        self._drain()
        return True

    def _drain(self) -> None:
        """Hand buffered keys to the work queue while it has room; look again later if not."""
        target = self._target
        if target is None or self._stopped:
            return
        buffer = self._buffer
        room = self._capacity - target.ready_count()
        moved = 0
        while buffer and room > 0:
            key = next(iter(buffer))
            priority = buffer.pop(key)
            target.add(key, priority)
            room -= 1
            moved += 1
        if moved and target.metrics is not None:
            self._metric("source_enqueued_total").inc(moved)
        if len(buffer) < self._capacity:
            self._room.set()
        if buffer and self._recheck is None:
            self._recheck = target.clock.call_at(
                target.clock.now() + RECHECK_SECONDS, self._recheck_now
            )

    def _recheck_now(self) -> None:
        self._recheck = None
        self._drain()

    async def _wait_room(self) -> None:
        """Wait until the buffer can take a key (or the source stopped)."""
        while len(self._buffer) >= self._capacity and not self._stopped:
            self._room.clear()
            await self._room.wait()

    def _metric(self, name: str) -> Any:
        series = self._series.get(name)
        if series is None:
            target = self._target
            assert target is not None and target.metrics is not None
            series = getattr(target.metrics, name).labels(target.controller, self._name)
            self._series[name] = series
        return series


class ChannelSource(_BufferedSource):
    """A queue of reconcile requests the author feeds, as controller-runtime's ``source.Channel``.

    ``await source.send(key)`` from any coroutine on the controller's event loop (a
    message-bus consumer, a webhook handler of your own), or
    ``source.send_threadsafe(key)`` from another thread: the key is reconciled like one an
    informer queued. Keys sent before the controller starts wait in the buffer.

    Args:
        name: The source's name (its metrics' ``source`` label).
        capacity: The buffer's size, and the work-queue depth above which keys stay in it
            (see the module docstring's "Backpressure").

    """

    def __init__(self, name: str = "channel", *, capacity: int = 1024) -> None:
        super().__init__(name, capacity=capacity)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, target: SourceTarget) -> None:
        """Bind to the controller and remember its event loop (for :meth:`send_threadsafe`)."""
        self._loop = asyncio.get_running_loop()
        await super().start(target)

    def send_threadsafe(
        self, key: ObjectKey, *, priority: int = Priority.NORMAL
    ) -> concurrent.futures.Future[None]:
        """:meth:`send` from another thread (an SDK's callback, a consumer thread).

        Returns a ``concurrent.futures.Future`` that completes once the key is buffered:
        ``.result()`` blocks the calling thread while the buffer is full (backpressure).
        Never call ``.result()`` from the event loop's own thread.

        Raises:
            ControllerError: the source's controller has not started (no loop to send to).

        """
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ControllerError(
                f"source {self._name!r}: send_threadsafe() needs a started controller; before "
                "that, call send() or offer() from the event loop"
            )
        return asyncio.run_coroutine_threadsafe(self.send(key, priority=priority), loop)

    async def send(self, key: ObjectKey, *, priority: int = Priority.NORMAL) -> None:
        """Queue ``key`` for reconcile, waiting while the buffer is full.

        Returns at once if the source was stopped (the key is then dropped).

        Raises:
            TypeError: ``key`` is not an :class:`~setpoint.api.keys.ObjectKey`.

        """
        while not self._put(key, priority):
            await self._wait_room()

    def offer(self, key: ObjectKey, *, priority: int = Priority.NORMAL) -> bool:
        """Queue ``key`` if the buffer has room; ``False`` (and a dropped count) if it is full.

        Raises:
            TypeError: ``key`` is not an :class:`~setpoint.api.keys.ObjectKey`.

        """
        if self._put(key, priority):
            return True
        target = self._target
        if target is not None and target.metrics is not None:
            self._metric("source_dropped_total").inc()
        return False


PollResult = Mapping[ObjectKey, Any]


class _Poller(_BufferedSource):
    """The schedule, jitter, error handling and poll metrics of the polling sources."""

    def __init__(
        self,
        name: str,
        poll: Callable[..., Any],
        *,
        period: float,
        jitter: float,
        capacity: int,
        rng: random.Random | None,
    ) -> None:
        super().__init__(name, capacity=capacity)
        if not callable(poll):
            raise TypeError(f"source {name!r}: poll must be a function, not {poll!r}")
        self._poll_function = poll
        if isinstance(period, bool) or not period > 0:
            raise ValueError(f"source {name!r}: period must be > 0 seconds, not {period!r}")
        if not 0 <= jitter < 1:
            raise ValueError(
                f"source {name!r}: jitter is a fraction of the period in [0, 1), not {jitter!r}"
            )
        self._period = float(period)
        self._jitter = float(jitter)
        self._rng = rng if rng is not None else random.Random()
        self._task: asyncio.Task[None] | None = None
        self._repeats = RepeatedErrors()
        self._polls = 0

    @property
    def period(self) -> float:
        """Seconds between the end of one poll and the start of the next (before jitter)."""
        return self._period

    @property
    def polls(self) -> int:
        """Polls run so far (failed ones included)."""
        return self._polls

    def next_delay(self) -> float:
        """The delay before the next poll: ``period`` spread by ``jitter`` either way."""
        if not self._jitter:
            return self._period
        return self._period * (1 + self._rng.uniform(-self._jitter, self._jitter))

    async def start(self, target: SourceTarget) -> None:
        """Bind to ``target`` and start polling (the first poll runs at once)."""
        await super().start(target)
        if target.metrics is not None:
            for name in ("source_polls_total", "source_poll_errors_total"):
                self._metric(name)
        self._task = asyncio.create_task(self._loop(), name=f"source {self._name} poller")

    async def stop(self) -> None:
        """Cancel the poll in flight (if any) and the schedule; drop what is buffered."""
        await super().stop()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _loop(self) -> None:
        target = self._target
        assert target is not None
        while not self._stopped:
            await self._wait_room()
            if self._stopped:
                return
            try:
                await self._poll_once(target)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The poll function's errors are handled in _timed; this is a value whose
                # comparison raised, or a bug: the source keeps polling.
                target.log.exception(
                    "Handling a poll's result failed; the source keeps polling",
                    source=self._name,
                )
            await clock_sleep(target.clock, self.next_delay())

    async def _poll_once(self, target: SourceTarget) -> None:
        raise NotImplementedError

    async def _timed(self, target: SourceTarget, call: Awaitable[V]) -> tuple[V | None, bool]:
        """Await one poll call, timed and counted; ``(value, True)`` or ``(None, False)``."""
        started = target.clock.now()
        self._polls += 1
        try:
            value = await call
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._count(target, started, failed=True)
            repeats = self._repeats.seen(exc)
            if repeats == 1 or RepeatedErrors.worth_logging(repeats):
                target.log.error(
                    "A poll of an external source failed; the previous values are kept",
                    exc_info=exc if repeats == 1 else None,
                    source=self._name,
                    error=f"{type(exc).__name__}: {exc}",
                    repeats=repeats,
                )
            return None, False
        self._count(target, started, failed=False)
        return value, True

    def _count(self, target: SourceTarget, started: float, *, failed: bool) -> None:
        if target.metrics is None:
            return
        self._metric("source_polls_total").inc()
        if failed:
            self._metric("source_poll_errors_total").inc()
        self._metric("source_poll_duration_seconds").observe(max(0.0, target.clock.now() - started))


def _differs(old: object, new: object) -> bool:
    """Whether a polled value changed; a comparison that raises counts as a change."""
    try:
        return bool(old != new)
    except Exception:  # e.g. an array's ambiguous truth value
        return True


async def _call(function: Callable[..., Any], *args: Any) -> Any:
    """Call ``function``: an ``async def`` is awaited, a plain ``def`` runs in a thread."""
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 - an object with async __call__
    ):
        return await function(*args)
    result = await asyncio.to_thread(function, *args)
    if inspect.isawaitable(result):  # a plain def returning a coroutine
        result = await result
    return result


class PollingSource(_Poller, Generic[V]):
    """Polls the whole external state; reconciles the keys whose value changed.

    As JOSDK's ``PollingEventSource``. ``poll()`` returns a mapping of
    :class:`~setpoint.api.keys.ObjectKey` (the object to reconcile) to the external value
    that concerns it (a row, a record; compared with ``==``, so use values that compare by
    content: dataclasses, tuples, dicts). Keys that appear, change or disappear between two
    polls are queued. ``poll`` may be ``async def``, or a plain ``def`` that blocks (a
    database driver, an SDK): it then runs in a thread.

    :meth:`get` returns the last polled value of a key, so the reconcile reads the
    external state without calling the external system again.

    Args:
        name: The source's name (its metrics' ``source`` label).
        poll: Returns ``{key: value}`` for everything that exists outside now.
        period: Seconds between the end of a poll and the start of the next.
        jitter: Each delay is ``period`` times a random factor in ``[1 - jitter, 1 + jitter]``.
        capacity: See the module docstring's "Backpressure".
        rng: Where jitter comes from (a seeded ``random.Random`` in tests).

    """

    def __init__(
        self,
        name: str,
        poll: Callable[[], Awaitable[PollResult]] | Callable[[], PollResult],
        *,
        period: float,
        jitter: float = 0.1,
        capacity: int = 1024,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(name, poll, period=period, jitter=jitter, capacity=capacity, rng=rng)
        self._values: dict[ObjectKey, V] = {}
        self._seen_once = False

    def get(self, key: ObjectKey) -> V | None:
        """The value the last successful poll returned for ``key`` (``None``: absent)."""
        return self._values.get(key)

    def snapshot(self) -> dict[ObjectKey, V]:
        """A copy of every value of the last successful poll."""
        return dict(self._values)

    async def _poll_once(self, target: SourceTarget) -> None:
        result, ok = await self._timed(target, _call(self._poll_function))
        if not ok:
            return
        if not isinstance(result, Mapping):
            exc = TypeError(
                f"the poll of source {self._name!r} returned {type(result).__name__}; return a "
                "mapping of ObjectKey to value"
            )
            target.log.error("A poll returned the wrong type", source=self._name, error=str(exc))
            if target.metrics is not None:
                self._metric("source_poll_errors_total").inc()
            return
        fresh: dict[ObjectKey, V] = dict(result)
        old = self._values
        priority = Priority.NORMAL if self._seen_once else Priority.LOW
        changed = [k for k, v in fresh.items() if k not in old or _differs(old[k], v)]
        changed += [k for k in old if k not in fresh]
        self._values = fresh
        self._seen_once = True
        for key in changed:
            self._put_polled(key, priority)

    def _put_polled(self, key: ObjectKey, priority: int) -> None:
        # The loop waits for room before each poll; one poll may still bring more keys
        # than the buffer holds: those go over the bound rather than be lost.
        if not self._put(key, priority):
            self._buffer[key] = priority


class PerObjectPollingSource(_Poller, Generic[V]):
    """Polls the external state of each object the controller reconciles, one by one.

    As JOSDK's ``PerResourcePollingEventSource``. Every ``period``, ``poll(key)`` runs for
    each ``for_`` object in the cache (at most ``concurrency`` at once) and returns the
    external value for it (``None``: nothing outside). A key whose value changed since its
    previous poll is queued; its first poll only records the value (the informer's initial
    list reconciled the object already). A failed poll of one key keeps that key's previous
    value. ``poll`` may be ``async def`` or a plain blocking ``def`` (run in a thread).

    Args:
        name: The source's name (its metrics' ``source`` label).
        poll: Returns the external value for one object's key.
        period: Seconds between the end of one round of polls and the start of the next.
        jitter: As :class:`PollingSource`'s.
        concurrency: Polls running at once within a round.
        capacity: See the module docstring's "Backpressure".
        rng: Where jitter comes from.

    """

    def __init__(
        self,
        name: str,
        poll: Callable[[ObjectKey], Awaitable[Any]] | Callable[[ObjectKey], Any],
        *,
        period: float,
        jitter: float = 0.1,
        concurrency: int = 4,
        capacity: int = 1024,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(name, poll, period=period, jitter=jitter, capacity=capacity, rng=rng)
        if isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"source {name!r}: concurrency must be >= 1, not {concurrency!r}")
        self._concurrency = concurrency
        self._values: dict[ObjectKey, V | None] = {}

    def get(self, key: ObjectKey) -> V | None:
        """The value the last successful poll of ``key`` returned (``None``: none yet)."""
        return self._values.get(key)

    async def _poll_once(self, target: SourceTarget) -> None:
        keys = list(dict.fromkeys(target.keys()))
        live = set(keys)
        for gone in [k for k in self._values if k not in live]:
            del self._values[gone]  # the object left the cache: forget its value
        limit = asyncio.Semaphore(self._concurrency)

        async def one(key: ObjectKey) -> None:
            async with limit:
                value, ok = await self._timed(target, _call(self._poll_function, key))
            if not ok or self._stopped:
                return
            known = key in self._values
            previous = self._values.get(key)
            self._values[key] = value
            if known and _differs(previous, value) and not self._put(key, Priority.NORMAL):
                self._buffer[key] = Priority.NORMAL  # over the bound rather than lost

        await asyncio.gather(*(one(key) for key in keys))
