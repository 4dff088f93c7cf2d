"""Runtime health: the event loop's lag, which reconcile each task serves, and a task dump.

A blocked event loop is the asyncio form of a stuck goroutine, and the first suspect when an
operator stops converging: one synchronous call (a blocking HTTP library, a big JSON dump, a
``time.sleep``) stalls every controller, every watch and the probes at once. Four tools
answer "is the loop stuck, and where":

- :class:`LoopLagMonitor`, a runnable the manager starts: it asks the loop to wake it every
  ``interval`` seconds and records how late the wake-up came in
  ``setpoint_event_loop_lag_seconds`` (a histogram; see
  :class:`~setpoint.observability.metrics.Metrics`). A lag above ``warn_after`` is logged
  once per episode.
- :class:`BlockedLoopDetector`, which the lag monitor starts (``blocked_after``, 100 ms by
  default): a watchdog *thread* that pings the loop and, when the loop has not answered for
  the threshold, samples the loop thread's stack (``sys._current_frames()``) and logs one
  line naming the reconcile running on the loop and the code that blocks it
  (``setpoint_event_loop_blocked_total`` counts them). The pytest plugin's
  ``--setpoint-blocked-loop`` fails a test during which this happens.
- :func:`reconcile_scope`: the controller marks the task running each reconcile with the
  controller, the object key and the reconcile ID, and the *context* of the reconcile
  (:func:`current_reconcile`) carries the same, so logs, traces and recordings can name it.
- :func:`task_dump`: every asyncio task of the loop with its await chain (the coroutine
  frames from the task down to where it waits) and the reconcile it serves. Taken from a
  signal handler (``SIGUSR1``, see :func:`install_task_dump_signal`), it also shows the
  stack of the code running on the loop's thread right now: if the loop is blocked, that is
  the culprit.

Import cost: the standard library only.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TextIO

from setpoint.api.clock import Clock, LoopClock, clock_sleep
from setpoint.api.runnable import RunnableGroup

if TYPE_CHECKING:
    from setpoint.observability.metrics import Metrics

__all__ = [
    "EVENT_LOOP_LAG_BUCKETS",
    "BlockedLoopDetector",
    "LoopLagMonitor",
    "LoopStall",
    "ReconcileInfo",
    "TaskInfo",
    "collect_tasks",
    "current_reconcile",
    "format_task_dump",
    "install_task_dump_signal",
    "reconcile_scope",
    "task_dump",
]

log = logging.getLogger("setpoint.runtime")

EVENT_LOOP_LAG_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
"""Buckets of ``setpoint_event_loop_lag_seconds``: from a healthy millisecond to a loop that
was blocked for half a minute."""

_MAX_AWAIT_DEPTH: Final = 64

DEFAULT_BLOCKED_AFTER: Final = 0.1
"""Seconds without an answer from the loop after which :class:`BlockedLoopDetector` reports
it blocked: long enough for a large JSON decode, short enough that a blocking call stands
out (a probe or a lease renewal waits that long behind it)."""

_STALL_STACK_LIMIT: Final = 10
_STDLIB: Final = re.compile(r"/lib/python\d+\.\d+/")
_STALLS_KEPT: Final = 100


@dataclass(frozen=True, slots=True)
class ReconcileInfo:
    """The reconcile a task or a log line belongs to."""

    controller: str
    """The controller's name."""
    namespace: str
    """The object's namespace (empty when cluster-scoped)."""
    name: str
    """The object's name."""
    reconcile_id: str
    """The reconcile's unique ID (also on its log lines)."""
    started: float
    """When it started, by ``time.monotonic()``."""

    @property
    def key(self) -> str:
        """``namespace/name`` (or ``name``)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def describe(self, now: float | None = None) -> str:
        """``controller=tenant key=prod/acme reconcile_id=... running 1.2s``."""
        age = (time.monotonic() if now is None else now) - self.started
        return (
            f"controller={self.controller} key={self.key} reconcile_id={self.reconcile_id} "
            f"running {age:.1f}s"
        )


_CURRENT: contextvars.ContextVar[ReconcileInfo | None] = contextvars.ContextVar(
    "setpoint_reconcile", default=None
)
_BY_TASK: dict[asyncio.Task[Any], ReconcileInfo] = {}


def current_reconcile() -> ReconcileInfo | None:
    """The reconcile the calling code runs in (inherited by tasks it creates), or ``None``."""
    return _CURRENT.get()


class reconcile_scope:  # used as a function: ``with reconcile_scope(info):``
    """Mark the current task and context as running ``info`` while the block runs.

    The controller wraps each reconcile in it; it costs a dictionary insert and a context
    variable set. Tasks the reconcile creates inherit :func:`current_reconcile`. A class
    rather than a generator context manager: it runs on every reconcile, and a generator's
    set-up costs more than the two steps it wraps.
    """

    __slots__ = ("_info", "_task", "_token")

    def __init__(self, info: ReconcileInfo) -> None:
        self._info = info
        self._task: asyncio.Task[Any] | None = None
        self._token: contextvars.Token[ReconcileInfo | None] | None = None

    def __enter__(self) -> None:
        self._token = _CURRENT.set(self._info)
        task = self._task = asyncio.current_task()
        if task is not None:
            _BY_TASK[task] = self._info

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            _BY_TASK.pop(self._task, None)
        if self._token is not None:
            _CURRENT.reset(self._token)


# -- the loop's lag ------------------------------------------------------------------------------


class LoopLagMonitor:
    """Measures how late the event loop runs a timer: its *lag* (a runnable).

    Every ``interval`` seconds it sleeps on the loop and, when woken, observes
    ``woken - due`` in ``setpoint_event_loop_lag_seconds``. A healthy loop answers within a
    millisecond or two; a lag of a second means something ran for a second without awaiting.
    A lag above ``warn_after`` is logged at WARNING, once per episode (until the lag is back
    under it), with the hint to take a task dump.

    It runs in every replica (no leader election) in the ``SERVERS`` group, so it measures
    from the start. It sleeps and reads time on ``clock``, the running loop's by default
    (what it measures); a test passes a :class:`~setpoint.api.clock.ManualClock` and makes a
    wake-up late by moving the clock past the timer.

    While it runs, a :class:`BlockedLoopDetector` with threshold ``blocked_after`` (100 ms by
    default; ``None`` turns it off) names what blocks the loop; the manager passes
    ``ManagerOptions.blocked_loop_threshold``.
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        interval: float = 0.25,
        warn_after: float = 1.0,
        blocked_after: float | None = DEFAULT_BLOCKED_AFTER,
        clock: Clock | None = None,
    ) -> None:
        if not interval > 0 or not warn_after > 0:
            raise ValueError(
                "LoopLagMonitor: interval and warn_after must be positive numbers of seconds"
            )
        self._metrics = metrics
        self.blocked_after = blocked_after
        """Seconds the loop may go without answering before the blocked-loop detector logs
        what blocks it; ``None``: no detector. Read when the monitor starts."""
        self.detector: BlockedLoopDetector | None = None
        """The running blocked-loop detector, while the monitor runs with one."""
        self._histogram = metrics.event_loop_lag_seconds
        self._clock: Clock = clock if clock is not None else LoopClock()
        self.interval = interval
        """Seconds between two measurements."""
        self.warn_after = warn_after
        """A lag above this many seconds is logged."""
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self.last_lag = 0.0
        """The most recent lag measured, in seconds."""
        self.max_lag = 0.0
        """The largest lag measured so far, in seconds."""

    @property
    def name(self) -> str:
        """``"event-loop-lag"``."""
        return "event-loop-lag"

    @property
    def group(self) -> RunnableGroup:
        """:attr:`RunnableGroup.SERVERS`: measured from the start."""
        return RunnableGroup.SERVERS

    @property
    def needs_leader_election(self) -> bool:
        """``False``: every replica's loop is measured."""
        return False

    async def start(self) -> None:
        """Start measuring."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="setpoint-event-loop-lag")
            self._task.add_done_callback(self._done)
            if self.blocked_after is not None and self.detector is None:
                self.detector = BlockedLoopDetector(
                    threshold=self.blocked_after, metrics=self._metrics
                )
                self.detector.start()

    async def stop(self, timeout: float) -> None:
        """Stop measuring."""
        detector, self.detector = self.detector, None
        if detector is not None:
            detector.stop()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task}, timeout=max(timeout, 0.1))

    def failure(self) -> BaseException | None:
        """The error that stopped the measurements (never expected)."""
        return self._failure

    def _done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._failure = task.exception()

    def observe(self, lag: float) -> None:
        """Record one measurement (what the background task does after each wake-up)."""
        lag = max(lag, 0.0)
        self._histogram.observe(lag)
        previous, self.last_lag = self.last_lag, lag
        self.max_lag = max(self.max_lag, lag)
        if lag >= self.warn_after and previous < self.warn_after:
            log.warning(
                "the event loop was blocked for %.2fs: something ran that long without "
                "awaiting (a blocking call in async code?); send SIGUSR1 while it happens "
                "for a task dump with the stack of the code that blocks it",
                lag,
            )

    async def _run(self) -> None:
        clock = self._clock
        while True:
            due = clock.now() + self.interval
            await clock_sleep(clock, self.interval)
            self.observe(clock.now() - due)


# -- the blocked-loop detector --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopStall:
    """One stall of the event loop past the threshold, as the watchdog saw it."""

    seconds: float
    """How long the loop had not answered when the watchdog sampled it (>= the threshold)."""
    threshold: float
    """The detector's threshold."""
    reconcile: ReconcileInfo | None
    """The reconcile running on the loop at that moment (see :func:`reconcile_scope`)."""
    task: str | None
    """The name of the asyncio task running on the loop, if a task (not a callback) runs."""
    stack: tuple[tuple[str, int, str], ...]
    """The loop thread's stack, ``(file, line, function)`` outermost first, cut to the
    innermost frames."""

    def describe(self) -> str:
        """The one line the detector logs."""
        where = (
            self.reconcile.describe()
            if self.reconcile is not None
            else (f"task {self.task!r}" if self.task else "no task (a callback)")
        )
        stack = " > ".join(f"{_short(f)}:{line} in {fn}" for f, line, fn in self.stack)
        return (
            f"the event loop is blocked: no answer for {self.seconds:.3f}s (threshold "
            f"{self.threshold:g}s); running on it: {where}; blocking stack (innermost last): "
            f"{stack or 'not available'}"
        )


class BlockedLoopDetector:
    """Watches an event loop from a thread and reports each stall past ``threshold``.

    Expected flow: :meth:`start` on the loop's thread (it records the loop and the thread);
    a daemon thread then calls :meth:`poll` over and over. Each poll posts a ping to the
    loop (``call_soon_threadsafe``) once the previous one was answered and ``threshold / 4``
    has passed; when a ping has waited ``threshold`` seconds, the loop is blocked: the
    watchdog samples the loop thread's stack and the task running on it, logs one WARNING
    line (:meth:`LoopStall.describe`; at most one per ``log_every`` seconds, the next line
    counting those left out), counts ``setpoint_event_loop_blocked_total`` and keeps the
    stall in :attr:`stalls`. One report per stall: the next comes after the loop answered
    again. :meth:`stop` ends the thread.

    Guarantees: a stall of ``threshold * 1.25`` or more is always reported (shorter ones
    past ``threshold`` may be); the loop pays one callback per ping (four per threshold
    period, about 40 a second at the default 100 ms); nothing on the loop waits for the
    watchdog.

    Caveats: the stack is sampled once, at the threshold: a loop blocked by several calls in
    a row shows the one running then. Code holding the GIL in one C call (a huge JSON
    decode) delays the watchdog too; the stall is reported when the call returns, with the
    stack of whatever runs then.

    Time is ``clock``'s (the loop's by default), so a test drives :meth:`poll` with a
    :class:`~setpoint.api.clock.ManualClock` and no thread at all.
    """

    def __init__(
        self,
        *,
        threshold: float = DEFAULT_BLOCKED_AFTER,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        on_stall: Callable[[LoopStall], None] | None = None,
        log_every: float = 10.0,
    ) -> None:
        if not threshold > 0:
            raise ValueError(
                f"BlockedLoopDetector: threshold={threshold!r} must be a positive number of seconds"
            )
        self.threshold = threshold
        """Seconds without an answer from the loop that make a stall."""
        self._metrics = metrics
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._on_stall = on_stall
        self.log_every = log_every
        """At most one stall is logged per this many seconds; the next line counts the ones
        left out (each is still counted in the metric and kept in :attr:`stalls`)."""
        self._logged_at: float | None = None
        self._unlogged = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread_id: int | None = None
        self._lock = threading.Lock()
        self._sent = 0  # pings posted, and answered
        self._answered = 0
        self._sent_at = 0.0
        self._answered_at = 0.0
        self._reported = False
        self._stop = threading.Event()
        self._go = threading.Event()  # the loop ran a callback after start(): watch from then
        self._wake = threading.Event()  # set by an answer (and by stop): poll again now
        self._watchdog: threading.Thread | None = None
        self.stalls: list[LoopStall] = []
        """The stalls reported so far (the last 100)."""

    def attach(self, loop: asyncio.AbstractEventLoop, thread_id: int) -> None:
        """Watch ``loop``, run by thread ``thread_id``, without starting the watchdog thread.

        :meth:`start` does this for the running loop; a test calls it and then :meth:`poll`.
        """
        self._loop = loop
        self._thread_id = thread_id
        self._answered_at = self._clock.now()

    def start(self) -> None:
        """Watch the running loop from a new daemon thread (call it on the loop's thread)."""
        if self._watchdog is not None:
            return
        loop = asyncio.get_running_loop()
        self.attach(loop, threading.get_ident())
        self._stop.clear()
        # The first ping waits until the loop runs again: starting a thread can itself hold
        # the loop's thread for a while on a loaded machine, and that is not the code's stall.
        self._go.clear()
        loop.call_soon(self._go.set)
        self._watchdog = threading.Thread(
            target=self._watch, name="setpoint-loop-watchdog", daemon=True
        )
        self._watchdog.start()

    def stop(self) -> None:
        """End the watchdog thread (it exits within one poll interval)."""
        self._stop.set()
        self._go.set()
        self._wake.set()
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout=1.0)

    def _watch(self) -> None:
        self._go.wait()
        with self._lock:
            self._answered_at = self._clock.now()
        while not self._stop.is_set():
            self._wake.clear()  # before the poll: an answer from now on ends the wait
            try:
                delay = self.poll()
            except Exception:  # the watchdog must never die of a report
                log.exception("the blocked-loop watchdog failed; it keeps watching")
                delay = self.threshold
            self._wake.wait(delay)

    def _pong(self, seq: int) -> None:
        """On the loop: the ping ``seq`` was answered."""
        with self._lock:
            if seq > self._answered:
                self._answered = seq
                self._answered_at = self._clock.now()
        self._wake.set()

    def poll(self) -> float:
        """One watchdog step: ping, or report a stall; returns the seconds until the next step."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("BlockedLoopDetector.poll() before start() or attach()")
        now = self._clock.now()
        interval = self.threshold / 4
        with self._lock:
            if self._answered >= self._sent:  # nothing outstanding
                self._reported = False
                wait = self._answered_at + interval - now
                if wait > 0 and self._sent:
                    return wait
                self._sent += 1
                self._sent_at = now
                seq = self._sent
            else:
                seq = 0
                waited = now - self._sent_at
                if self._reported or waited < self.threshold:
                    return interval if self._reported else self.threshold - waited
                self._reported = True
        if seq:
            try:
                loop.call_soon_threadsafe(self._pong, seq)
            except RuntimeError:  # the loop is closed: nothing left to watch
                self._stop.set()
            return self.threshold
        self._report(loop, waited)
        return interval

    def _report(self, loop: asyncio.AbstractEventLoop, waited: float) -> None:
        frame = sys._current_frames().get(self._thread_id) if self._thread_id else None
        stack = (
            tuple(
                (entry.filename, entry.lineno or 0, entry.name)
                for entry in traceback.extract_stack(frame)[-_STALL_STACK_LIMIT:]
            )
            if frame is not None
            else ()
        )
        task = asyncio.current_task(loop) if loop.is_running() else None
        stall = LoopStall(
            seconds=waited,
            threshold=self.threshold,
            reconcile=_BY_TASK.get(task) if task is not None else None,
            task=task.get_name() if task is not None else None,
            stack=stack,
        )
        self.stalls.append(stall)
        del self.stalls[:-_STALLS_KEPT]
        if self._metrics is not None:
            self._metrics.event_loop_blocked_total.inc()
        now = self._clock.now()
        if self._logged_at is None or now - self._logged_at >= self.log_every:
            more = (
                f" ({self._unlogged} more stalls since the last line, not logged)"
                if self._unlogged
                else ""
            )
            log.warning("%s%s", stall.describe(), more)
            self._logged_at, self._unlogged = now, 0
        else:
            self._unlogged += 1
        if self._on_stall is not None:
            self._on_stall(stall)


# -- the task dump -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One task in a dump."""

    name: str
    """The task's name."""
    state: str
    """``pending``, ``done``, ``cancelled`` or ``cancelling``."""
    frames: tuple[tuple[str, int, str], ...]
    """The await chain, outermost first: ``(file, line, function)`` of each coroutine or
    generator frame the task is suspended in."""
    waiting_on: str
    """What the innermost frame awaits (a future, a sleep, a lock), when known."""
    reconcile: ReconcileInfo | None
    """The reconcile the task runs, if it is a controller worker inside one."""


def _await_chain(task: asyncio.Task[Any]) -> tuple[tuple[tuple[str, int, str], ...], str]:
    """Walk from the task's coroutine down its ``cr_await`` chain, collecting frames."""
    frames: list[tuple[str, int, str]] = []
    current: Any = task.get_coro()
    waiting = ""
    for _ in range(_MAX_AWAIT_DEPTH):
        if current is None:
            break
        frame: types.FrameType | None = getattr(current, "cr_frame", None) or getattr(
            current, "gi_frame", None
        )
        if frame is None and isinstance(current, types.CoroutineType | types.GeneratorType):
            break
        if frame is not None:
            code = frame.f_code
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
        nxt = getattr(current, "cr_await", None)
        if nxt is None:
            nxt = getattr(current, "gi_yieldfrom", None)
        if nxt is None:
            break
        if not isinstance(nxt, types.CoroutineType | types.GeneratorType) and not hasattr(
            nxt, "cr_frame"
        ):
            waiting = _describe_awaitable(nxt)
            break
        current = nxt
    return tuple(frames), waiting


def _describe_awaitable(awaitable: object) -> str:
    if isinstance(awaitable, asyncio.Future):
        callbacks = getattr(awaitable, "_callbacks", None) or ()
        return f"{type(awaitable).__name__} ({'done' if awaitable.done() else 'pending'}" + (
            f", {len(callbacks)} callbacks)" if callbacks else ")"
        )
    return type(awaitable).__name__


def _state(task: asyncio.Task[Any]) -> str:
    if task.cancelled():
        return "cancelled"
    if task.done():
        return "done"
    if task.cancelling():
        return "cancelling"
    return "pending"


def collect_tasks(loop: asyncio.AbstractEventLoop | None = None) -> list[TaskInfo]:
    """Every unfinished task of ``loop`` (default: the running one), sorted by name.

    Safe to call from a signal handler on the loop's thread, while another callback runs.
    """
    if loop is None:
        loop = asyncio.get_running_loop()
    tasks = list(asyncio.all_tasks(loop))
    infos = []
    for task in tasks:
        frames, waiting = _await_chain(task)
        infos.append(
            TaskInfo(
                name=task.get_name(),
                state=_state(task),
                frames=frames,
                waiting_on=waiting,
                reconcile=_BY_TASK.get(task),
            )
        )
    infos.sort(key=lambda info: info.name)
    return infos


def _short(path: str) -> str:
    """The path from its package on: ``setpoint/controller/controller.py``."""
    for marker in ("site-packages/", "/src/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    stdlib = _STDLIB.search(path)
    if stdlib is not None:
        return path[stdlib.end() :]
    return path


def format_task_dump(
    tasks: list[TaskInfo],
    *,
    running: traceback.StackSummary | None = None,
    now: float | None = None,
) -> str:
    """The human form of a dump: the running code (if given), then each task.

    Reconciling tasks come first: they are what a stuck operator is usually waiting on.
    """
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [f"setpoint task dump: pid {os.getpid()}, {len(tasks)} tasks, {when}"]
    if running is not None:
        lines.append("")
        lines.append("Running on the event loop's thread right now (if the loop is blocked,")
        lines.append("this is what blocks it):")
        lines.extend(
            f"  {_short(frame.filename)}:{frame.lineno} in {frame.name}" for frame in running
        )
    ordered = sorted(tasks, key=lambda t: (t.reconcile is None, t.name))
    for info in ordered:
        lines.append("")
        head = f"Task {info.name!r} ({info.state})"
        if info.reconcile is not None:
            head += f" reconciling: {info.reconcile.describe(now)}"
        lines.append(head)
        for filename, lineno, function in info.frames:
            lines.append(f"  {_short(filename)}:{lineno} in {function}")
        if info.waiting_on:
            lines.append(f"  waiting on {info.waiting_on}")
    return "\n".join(lines) + "\n"


def task_dump(loop: asyncio.AbstractEventLoop | None = None) -> str:
    """:func:`collect_tasks` then :func:`format_task_dump`: the text ``/debug/tasks`` serves."""
    return format_task_dump(collect_tasks(loop))


def install_task_dump_signal(
    loop: asyncio.AbstractEventLoop,
    *,
    stream: Callable[[], TextIO] = lambda: sys.stderr,
    signum: int = signal.SIGUSR1,
) -> Callable[[], None] | None:
    """Write a task dump to ``stream()`` (stderr) whenever the process receives ``signum``.

    The handler is a plain :mod:`signal` handler, not a loop callback: Python runs it on the
    main thread between two bytecodes even while the loop is blocked in a long computation,
    so the dump then shows the blocking code (``Running on the event loop's thread``).
    Installed only from the main thread, and only when ``signum`` still has its default
    action (an application's own handler is left alone). Returns a function that restores
    the previous handler, or ``None`` when nothing was installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signum)
    if previous is not signal.SIG_DFL:
        log.debug("not installing the task dump on signal %s: it has a handler already", signum)
        return None

    def handler(_signum: int, frame: types.FrameType | None) -> None:
        running = traceback.extract_stack(frame) if frame is not None else None
        try:
            text = format_task_dump(collect_tasks(loop), running=running)
        except Exception as exc:  # a dump must never kill the process
            text = f"setpoint task dump failed: {type(exc).__name__}: {exc}\n"
        out = stream()
        out.write(text)
        out.flush()

    signal.signal(signum, handler)

    def restore() -> None:
        if signal.getsignal(signum) is handler:
            signal.signal(signum, previous)

    return restore
