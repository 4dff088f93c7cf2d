"""Runtime health: the event loop's lag, which reconcile each task serves, and a task dump.

A blocked event loop is the asyncio form of a stuck goroutine, and the first suspect when an
operator stops converging: one synchronous call (a blocking HTTP library, a big JSON dump, a
``time.sleep``) stalls every controller, every watch and the probes at once. Three tools
answer "is the loop stuck, and where":

- :class:`LoopLagMonitor`, a runnable the manager starts: it asks the loop to wake it every
  ``interval`` seconds and records how late the wake-up came in
  ``setpoint_event_loop_lag_seconds`` (a histogram; see
  :class:`~setpoint.observability.metrics.Metrics`). A lag above ``warn_after`` is logged
  once per episode.
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
    "LoopLagMonitor",
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
    """

    def __init__(
        self,
        metrics: Metrics,
        *,
        interval: float = 0.25,
        warn_after: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        if not interval > 0 or not warn_after > 0:
            raise ValueError(
                "LoopLagMonitor: interval and warn_after must be positive numbers of seconds"
            )
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

    async def stop(self, timeout: float) -> None:
        """Stop measuring."""
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
