"""Worker processes under one supervisor in one Pod: ``ManagerOptions.processes`` (decision 0038).

With ``processes=N`` (N > 1), :meth:`Manager.run() <setpoint.manager.Manager.run>` in a process
*without* the variable :data:`WORKER_INDEX_ENV` becomes the **supervisor**: it starts no
controller and no cache; it runs the same command line again N times (``sys.executable`` and
``sys.orig_argv``, as gunicorn's and uvicorn's ``--workers`` do), each with the environment
contract below, serves the public probe and metrics endpoints
(:mod:`setpoint.manager.workerendpoints`, which aggregate the workers'), restarts a worker
that dies, forwards SIGTERM and SIGINT, and owns the webhook server's listening socket (the
workers inherit it: one accept queue). Without ``ShardingOptions`` it also holds the leader
election Lease for the Pod and passes its fence to the workers
(:mod:`setpoint.manager.workersplit`).

In a **worker** (the variable is set) the manager runs as it always does, with
:func:`worker_options` applied to its options: split by key under the supervisor's Lease
(every controller with a ``for_`` kind), or with ``ShardingOptions`` a shard of that ring;
identities ``<group>-w<index>`` that a restarted worker keeps, and metrics and probe
servers on loopback, whose ports it reports to the supervisor over its channel (a socket
pair, :class:`WorkerChannel`). A worker stops when the supervisor goes away (the channel
reads end of file).

Environment contract (what a worker is started with):

- :data:`WORKER_INDEX_ENV` (``SETPOINT_WORKER_INDEX``): the worker's index, ``0`` to ``N-1``;
- :data:`WORKER_COUNT_ENV` (``SETPOINT_WORKER_COUNT``): ``N``;
- :data:`WORKER_CHANNEL_ENV` (``SETPOINT_WORKER_CHANNEL_FD``): the inherited file descriptor
  of its end of the channel;
- :data:`WORKER_GROUP_ENV` (``SETPOINT_WORKER_GROUP``): ``<pod name>-<6 hex digits>``,
  chosen once by the supervisor; the worker's identities are ``<group>-w<index>``;
- :data:`WORKER_WEBHOOK_FD_ENV` (``SETPOINT_WORKER_WEBHOOK_FD``), when the operator serves
  webhooks: the inherited listening socket of the webhook server.

The supervisor logs ``worker <i> started pid=<pid>`` for every start, so a test (or a person)
finds each worker's process. A dead worker is reaped (``waitpid``) *before* its successor
starts with the same index and identities: the successor then owns the same keys (or takes
its own shard and leader Leases at once, on a ring), and never runs beside its predecessor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from setpoint.api.clock import Clock, clock_sleep, clock_timeout
from setpoint.api.runnable import Runnable, RunnableGroup
from setpoint.manager.errors import ManagerError

if TYPE_CHECKING:
    from setpoint.manager.options import LeaderElectionOptions, ManagerOptions
    from setpoint.manager.workerendpoints import WorkerStatus

__all__ = [
    "WORKER_CHANNEL_ENV",
    "WORKER_COUNT_ENV",
    "WORKER_GROUP_ENV",
    "WORKER_INDEX_ENV",
    "WORKER_RETRY_PERIOD_MAX",
    "WORKER_WEBHOOK_FD_ENV",
    "Supervisor",
    "ThreadedRunnable",
    "WorkerChannel",
    "WorkerEnvironment",
    "WorkerStartupFailed",
    "check_options",
    "cpu_count",
    "resolve_processes",
    "split_leader_election",
    "worker_argv",
    "worker_environment",
    "worker_name",
    "worker_options",
]

log = logging.getLogger("setpoint.manager.processes")

WORKER_INDEX_ENV: Final = "SETPOINT_WORKER_INDEX"
"""Set in a worker: its index, ``0`` to ``N-1``. Its absence makes ``run()`` supervise."""

WORKER_COUNT_ENV: Final = "SETPOINT_WORKER_COUNT"
"""Set in a worker: how many workers the supervisor runs."""

WORKER_CHANNEL_ENV: Final = "SETPOINT_WORKER_CHANNEL_FD"
"""Set in a worker: the file descriptor of its end of the channel to the supervisor."""

WORKER_WEBHOOK_FD_ENV: Final = "SETPOINT_WORKER_WEBHOOK_FD"
"""Set in a worker when the operator serves webhooks: the inherited listening socket."""

WORKER_GROUP_ENV: Final = "SETPOINT_WORKER_GROUP"
"""Set in a worker: ``<host>-<6 hex digits>``, chosen once by its supervisor. The workers'
shard ids and leader election identities are ``<group>-w<index>``: the same for every
restart of worker ``index`` under this supervisor, and never the same as another
supervisor's (two operators started on one host, or a Pod's previous container)."""

WORKER_RETRY_PERIOD_MAX: Final = 0.5
"""The longest retry period of a split worker's elector (:func:`split_leader_election`).

Its lock is in memory, so an attempt costs nothing; the period bounds how long a worker
waits, after its supervisor is elected, before it leads, and how soon it notices that the
supervisor stopped leading."""

RESTART_BACKOFF: Final = 1.0
"""Seconds before the first restart of a dead worker; doubled for each further death."""

RESTART_BACKOFF_MAX: Final = 30.0
"""The longest wait between restarts of one worker."""

RESTART_RESET_AFTER: Final = 60.0
"""Seconds a worker must stay up for its backoff (and crash-loop count) to start over."""

CRASH_LOOP_RESTARTS: Final = 5
"""Deaths in a row (each before :data:`RESTART_RESET_AFTER`) after which a worker counts as
``failed``: the supervisor's ``/healthz`` then fails, so the kubelet restarts the Pod."""

READY_POLL_INTERVAL: Final = 0.5
"""Seconds between a worker's evaluations of its own readiness checks (reported on change)."""

_NOT_LABEL: Final = re.compile(r"[^a-z0-9-]+")


# -- how many ----------------------------------------------------------------------------------


def _cgroup_v2_quota(root: Path, proc_cgroup: str) -> float | None:
    """The tightest ``cpu.max`` quota (in CPUs) from this process's cgroup up to the root."""
    path = None
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            path = line[3:].strip()
    if path is None:
        return None
    best: float | None = None
    current = (root / path.lstrip("/")).resolve() if path not in ("", "/") else root
    for directory in (current, *current.parents):
        try:
            text = (directory / "cpu.max").read_text().split()
        except OSError:
            text = []
        if len(text) == 2 and text[0] != "max":
            with contextlib.suppress(ValueError):
                quota, period = int(text[0]), int(text[1])
                if quota > 0 and period > 0:
                    cpus = quota / period
                    best = cpus if best is None else min(best, cpus)
        if directory == root:
            break
    return best


def _cgroup_v1_quota(root: Path, proc_cgroup: str) -> float | None:
    """The ``cpu.cfs_quota_us / cpu.cfs_period_us`` quota (in CPUs) of cgroup v1, if any."""
    path = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpu" in parts[1].split(","):
            path = parts[2].strip()
    if path is None:
        return None
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        base = root / mount
        for directory in (base / path.lstrip("/"), base):
            try:
                quota = int((directory / "cpu.cfs_quota_us").read_text())
                period = int((directory / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            if quota > 0 and period > 0:
                return quota / period
            return None
    return None


def cpu_count(
    *,
    cgroup_root: str | Path = "/sys/fs/cgroup",
    proc_cgroup: str | None = None,
    affinity: int | None = None,
) -> int:
    """The CPUs this process may use: what ``processes="auto"`` resolves to.

    The cgroup's CPU quota (v2 ``cpu.max``, the tightest from the process's cgroup up; v1
    ``cpu.cfs_quota_us / cpu.cfs_period_us``), rounded up, capped by the CPUs the process may
    be scheduled on (``os.sched_getaffinity``), and at least 1. The arguments are test seams:
    ``proc_cgroup`` is the text of ``/proc/self/cgroup``, ``affinity`` the CPU count.
    """
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            proc_cgroup = ""
    root = Path(cgroup_root)
    quota = _cgroup_v2_quota(root, proc_cgroup)
    if quota is None:
        quota = _cgroup_v1_quota(root, proc_cgroup)
    cpus = affinity if quota is None else min(affinity, math.ceil(quota))
    return max(cpus, 1)


def resolve_processes(value: int | Literal["auto"]) -> int:
    """The number of processes ``ManagerOptions.processes`` asks for (``auto``: :func:`cpu_count`).

    Raises:
        ValueError: not ``"auto"`` and not a whole number of at least 1.

    """
    if value == "auto":
        return cpu_count()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"ManagerOptions.processes={value!r} must be a whole number of at least 1, or "
            "'auto' for the CPUs the Pod may use (its cgroup CPU quota)"
        )
    return value


# -- the worker's side -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkerEnvironment:
    """What a worker learns from its environment (see the module docstring's contract)."""

    index: int
    """This worker's index, ``0`` to ``count - 1``: stable across its restarts."""
    count: int
    """How many workers the supervisor runs."""
    channel_fd: int | None
    """Its end of the channel to the supervisor (``None``: started without one, by hand)."""
    webhook_fd: int | None = None
    """The inherited listening socket of the webhook server, if the operator serves any."""
    group: str | None = None
    """The supervisor's name for its workers (:data:`WORKER_GROUP_ENV`); ``None``: the host's."""


def worker_environment(environ: Mapping[str, str] | None = None) -> WorkerEnvironment | None:
    """The worker contract in ``environ`` (default ``os.environ``); ``None`` outside a worker.

    Raises:
        ValueError: a variable of the contract is set but is not a number.

    """
    env = os.environ if environ is None else environ
    raw = env.get(WORKER_INDEX_ENV)
    if raw is None or raw == "":
        return None

    def number(name: str, default: int | None) -> int | None:
        text = env.get(name, "")
        if not text:
            return default
        try:
            return int(text)
        except ValueError:
            raise ValueError(
                f"{name}={text!r} is not a number: it is set by the process supervisor of "
                "ManagerOptions.processes; unset it to run without one"
            ) from None

    index = number(WORKER_INDEX_ENV, None)
    count = number(WORKER_COUNT_ENV, None)
    assert index is not None
    if count is None:
        count = index + 1
    if index < 0 or index >= count:
        raise ValueError(f"{WORKER_INDEX_ENV}={index} is outside 0..{count - 1}")
    return WorkerEnvironment(
        index=index,
        count=count,
        channel_fd=number(WORKER_CHANNEL_ENV, None),
        webhook_fd=number(WORKER_WEBHOOK_FD_ENV, None),
        group=env.get(WORKER_GROUP_ENV) or None,
    )


def _host_label() -> str:
    host = os.environ.get("HOSTNAME") or socket.gethostname() or "operator"
    return _NOT_LABEL.sub("-", host.lower()).strip("-")[:50].strip("-") or "operator"


def worker_name(index: int, base: str | None = None) -> str:
    """``<base>-w<index>``: a worker's shard id and leader election identity (a DNS label).

    ``base`` is the supervisor's :data:`WORKER_GROUP_ENV` (``<pod name>-<random>``), so the
    name is the same for every restart of worker ``index`` under one supervisor and differs
    from every other supervisor's; without one, the host name.
    """
    prefix = _NOT_LABEL.sub("-", (base or _host_label()).lower()).strip("-")
    suffix = f"-w{index}"
    return prefix[: 63 - len(suffix)].strip("-") + suffix


def worker_options(options: ManagerOptions, worker: WorkerEnvironment) -> ManagerOptions:
    """The options of worker ``worker.index``: split or sharded, stable identity, loopback.

    - without ``options.sharding``, the workers split the objects among themselves
      (:mod:`setpoint.manager.workersplit`): leader election on a
      :class:`~setpoint.manager.workersplit.SupervisorLock` (the supervisor holds the
      Lease), with the renew deadline that fits between the supervisor's renew deadline
      and its lease duration (:func:`split_leader_election`); ``sharding`` stays ``None``;
    - with ``options.sharding``, the shard ring of decision 0011: those options with
      ``shard_id`` ``<shard_id or group>-w<i>``, the sharder waiting for at least the
      ``count`` workers (``wait_for_shards``), and leader election on the Lease itself;
    - leader election identity ``<identity or group>-w<i>`` (unless a lock is given), the
      group being the supervisor's (:data:`WORKER_GROUP_ENV`);
    - metrics and probes on ``127.0.0.1:0``, plain HTTP without authentication: only the
      supervisor (in the same Pod) reads them; a server turned off stays off;
    - ``record``: each worker writes ``<path>.w<i>``.
    """
    le = options.leader_election
    if le is None:
        raise ValueError(_needs_leader_election(options.processes))
    name = worker_name(worker.index, worker.group)
    identity = worker_name(worker.index, le.identity) if le.identity else name
    sharding = options.sharding
    if sharding is None:
        le = split_leader_election(le, identity)
    else:
        if le.lock is None:
            le = dataclasses.replace(le, identity=identity)
        shard_id = worker_name(worker.index, sharding.shard_id) if sharding.shard_id else name
        sharding = dataclasses.replace(
            sharding,
            shard_id=shard_id,
            wait_for_shards=max(sharding.wait_for_shards, worker.count),
        )
    changes: dict[str, Any] = {
        "leader_election": le,
        "sharding": sharding,
        "metrics_secure": False,
        "metrics_tls": None,
    }
    if options.metrics_bind_address != "0":
        changes["metrics_bind_address"] = "127.0.0.1:0"
    if options.health_probe_bind_address != "0":
        changes["health_probe_bind_address"] = "127.0.0.1:0"
    if options.record is not None:
        path = f"{options.record.path}.w{worker.index}"
        changes["record"] = dataclasses.replace(options.record, path=path)
    return dataclasses.replace(options, **changes)


def split_leader_election(le: LeaderElectionOptions, identity: str) -> LeaderElectionOptions:
    """A split worker's leader election: on a :class:`SupervisorLock`, inside its fence.

    The supervisor's fence is ``lease_duration`` after its latest renewal, and it renews
    for up to ``renew_deadline``; the worker's renew deadline is what is left between the
    two (5 s with the defaults), so it can renew for as long as the supervisor leads. Its
    retry period is at most a quarter of that and :data:`WORKER_RETRY_PERIOD_MAX`.
    """
    from setpoint.manager.workersplit import SupervisorLock

    renew = le.lease_duration - le.renew_deadline
    lock = SupervisorLock(
        identity, name=le.name, renew_deadline=renew, lease_duration=le.lease_duration
    )
    return dataclasses.replace(
        le,
        identity=None,
        renew_deadline=renew,
        retry_period=min(le.retry_period, renew / 4, WORKER_RETRY_PERIOD_MAX),
        request_timeout=None,
        release_on_cancel=False,
        lock=lock,
    )


def _needs_leader_election(processes: object) -> str:
    return (
        f"ManagerOptions.processes={processes!r} needs leader_election: the workers split the "
        "objects on a shard ring, whose sharder runs in the leader. Set leader_election="
        "LeaderElectionOptions(name=...) (setpoint run turns --leader-elect on by itself)"
    )


def check_options(options: ManagerOptions, count: int) -> None:
    """Reject options that cannot run in ``count`` processes (``count > 1``).

    Raises:
        ValueError: without leader election.

    """
    if count > 1 and options.leader_election is None:
        raise ValueError(_needs_leader_election(options.processes))


class WorkerChannel:
    """A worker's end of its channel to the supervisor: reports out, end of file in.

    Reports are JSON lines: ``{"metrics": [host, port] | null, "probes": [...]}`` once the
    servers listen, ``{"ready": true|false}`` when readiness changes, ``{"error": "..."}``
    when the manager fails. The supervisor of split workers writes JSON lines too,
    ``{"lead": <CLOCK_MONOTONIC instant> | null, "leader": "<holder>" | null}`` (its
    leadership's fence, :mod:`setpoint.manager.workersplit`); end of file means the
    supervisor is gone.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def connect(cls, fd: int) -> WorkerChannel:
        """Open the inherited channel ``fd`` on the running loop."""
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    def send(self, **message: object) -> None:
        """Queue one report (a few bytes; never blocks)."""
        if self._writer.is_closing():
            return
        self._writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def flush(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` seconds) until queued reports are written."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.drain(), timeout)

    async def wait_closed(
        self, on_message: Callable[[dict[str, object]], None] | None = None
    ) -> None:
        """Return when the supervisor's end is closed (it exited or was killed).

        Each JSON object the supervisor writes meanwhile is handed to ``on_message``; other
        lines are skipped.
        """
        with contextlib.suppress(ConnectionError, OSError, ValueError):
            while line := await self._reader.readline():
                if on_message is None:
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    on_message(message)

    def close(self) -> None:
        """Close this end."""
        with contextlib.suppress(Exception):
            self._writer.close()


def worker_argv() -> list[str]:
    """The command line that started this process, to run again as a worker.

    ``sys.executable`` and ``sys.orig_argv`` without its first item: the interpreter's own
    options (``-m``, ``-X``) and the script's arguments, exactly as given.
    """
    orig = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
    return [sys.executable, *orig[1:]]


# -- a runnable on a loop of its own -----------------------------------------------------------


class ThreadedRunnable:
    """Runs a runnable on an event loop of its own, in a thread of this process.

    A worker runs its ring's sharder this way (when it leads): the worker's own loop spends
    most of its time in reconciles that do real Python work, and every step of a label write
    (send, read the answer, next write) would wait for the reconcile running then. In a
    thread, the sharder gets the interpreter at least every ``sys.getswitchinterval()``
    (5 ms) instead. ``build`` runs in the thread and returns the runnable and what to close
    after it stopped (its own client: a client belongs to one loop).

    Args:
        name: The runnable's name.
        group: Its start group.
        needs_leader_election: Whether it is leader-only.
        build: Builds the runnable, on the thread's loop.

    """

    def __init__(
        self,
        name: str,
        group: RunnableGroup,
        needs_leader_election: bool,
        build: Callable[[], tuple[Runnable, Callable[[], Awaitable[None]]]],
    ) -> None:
        self._name = name
        self._group = group
        self._leader = needs_leader_election
        self._build = build
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inner: Runnable | None = None
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None
        self._timeout = 0.0
        self._failure: BaseException | None = None

    @property
    def name(self) -> str:
        """The inner runnable's name."""
        return self._name

    @property
    def group(self) -> RunnableGroup:
        """The inner runnable's start group."""
        return self._group

    @property
    def needs_leader_election(self) -> bool:
        """Whether the inner runnable is leader-only."""
        return self._leader

    async def start(self) -> None:
        """Start the thread and the runnable in it; return once its ``start()`` returned."""
        self._thread = threading.Thread(
            target=self._main, name=f"setpoint-{self._name}", daemon=True
        )
        self._thread.start()
        await asyncio.wrap_future(self._started)

    async def stop(self, timeout: float) -> None:
        """Stop the runnable (it gets ``timeout`` seconds) and wait for the thread to end."""
        loop, stop = self._loop, self._stop
        if loop is None or stop is None or self._done.done():
            return
        self._timeout = timeout
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(stop.set)
        await asyncio.wrap_future(self._done)

    def failure(self) -> BaseException | None:
        """The inner runnable's failure, or what ended its thread."""
        inner = self._inner
        return self._failure or (inner.failure() if inner is not None else None)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._run())
        except BaseException as exc:  # reported through the futures and failure()
            self._failure = exc
            if not self._started.done():
                self._started.set_exception(exc)
        finally:
            loop.close()
            if not self._started.done():
                self._started.set_exception(RuntimeError(f"{self._name} ended before it started"))
            if not self._done.done():
                self._done.set_result(None)

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        inner, close = self._build()
        self._inner = inner
        try:
            await inner.start()
            if not self._started.done():  # not cancelled by a manager that gave up waiting
                self._started.set_result(None)
            await self._stop.wait()
            await inner.stop(self._timeout)
        finally:
            await close()


# -- the supervisor ----------------------------------------------------------------------------


class WorkerStartupFailed(ManagerError):
    """A worker exited before it was ever ready: the supervisor stops the others and exits."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index
        """The worker's index."""


WorkerState = Literal["starting", "ready", "restarting", "failed", "stopped"]


@dataclass(eq=False)
class _Slot:
    """One worker index and the process that runs it now."""

    index: int
    state: WorkerState = "starting"
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    ever_ready: bool = False
    deaths_in_a_row: int = 0
    started_at: float = 0.0
    metrics_address: tuple[str, int] | None = None
    probe_address: tuple[str, int] | None = None
    error: str | None = None
    exited: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    writer: asyncio.StreamWriter | None = None


class Supervisor:
    """Starts ``count`` workers, restarts the dead ones, and stops them all on request.

    It is the :class:`~setpoint.manager.workerendpoints.WorkerTable` its endpoints read.
    Build it in the supervisor process and ``await run(stop)``; see the module docstring for
    the contract and decision 0038 for the guarantees.

    Args:
        count: How many workers (at least 1).
        argv: The command each worker runs (:func:`worker_argv`).
        environ: The workers' environment, to which the contract's variables are added.
        clock: Where backoffs and the shutdown budget are timed.
        graceful_shutdown_timeout: Seconds the workers get to stop after SIGTERM before
            they are killed.
        webhook_socket: A listening socket the workers inherit, or ``None``.

    """

    def __init__(
        self,
        count: int,
        *,
        argv: Sequence[str],
        environ: Mapping[str, str] | None = None,
        clock: Clock,
        graceful_shutdown_timeout: float,
        webhook_socket: socket.socket | None = None,
        restart_backoff: float = RESTART_BACKOFF,
        restart_backoff_max: float = RESTART_BACKOFF_MAX,
        restart_reset_after: float = RESTART_RESET_AFTER,
        crash_loop_restarts: int = CRASH_LOOP_RESTARTS,
    ) -> None:
        if count < 1:
            raise ValueError(f"Supervisor: count must be at least 1, not {count}")
        self.count = count
        """How many workers run."""
        self._argv = list(argv)
        self._environ = dict(os.environ if environ is None else environ)
        self._clock = clock
        self._grace = graceful_shutdown_timeout
        self._webhook_socket = webhook_socket
        self.group = f"{_host_label()[:40].strip('-')}-{secrets.token_hex(3)}"
        """The name of this supervisor's workers (:data:`WORKER_GROUP_ENV`)."""
        self._backoff = restart_backoff
        self._backoff_max = restart_backoff_max
        self._reset_after = restart_reset_after
        self._crash_loop = crash_loop_restarts
        self._slots = [_Slot(i) for i in range(count)]
        self._stopping = False
        self._fatal: WorkerStartupFailed | None = None
        self._wake = asyncio.Event()
        self._word = b""

    # -- WorkerTable ---------------------------------------------------------------------------

    def workers(self) -> Sequence[WorkerStatus]:
        """Every worker slot as it is now (the endpoints' view)."""
        from setpoint.manager.workerendpoints import WorkerStatus

        return [
            WorkerStatus(
                index=slot.index,
                pid=_pid(slot),
                state=self._state(slot),
                restarts=slot.restarts,
                metrics_address=slot.metrics_address,
                probe_address=slot.probe_address,
            )
            for slot in self._slots
        ]

    def _state(self, slot: _Slot) -> WorkerState:
        """``failed`` while a crash-looping worker has not stayed up long enough since."""
        if (
            slot.state != "stopped"
            and slot.deaths_in_a_row >= self._crash_loop
            and (_pid(slot) is None or self._clock.now() - slot.started_at < self._reset_after)
        ):
            return "failed"
        return slot.state

    def pids(self) -> dict[int, int | None]:
        """Each worker index's running process id (``None`` between restarts)."""
        return {slot.index: _pid(slot) for slot in self._slots}

    # -- running -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Run the workers until ``stop`` is set, then stop them within the grace period.

        Raises:
            WorkerStartupFailed: a worker exited before it was ever ready; the others were
                stopped first.
            TimeoutError: workers had to be killed after the grace period (named in the
                message).

        """
        tasks = [
            asyncio.create_task(self._keep(slot), name=f"setpoint-worker-{slot.index}")
            for slot in self._slots
        ]
        stopper = asyncio.create_task(stop.wait())
        waker = asyncio.create_task(self._wake.wait())
        try:
            await asyncio.wait({stopper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            waker.cancel()
            self._stopping = True
            killed = await self._stop_all(tasks)
        if self._fatal is not None:
            raise self._fatal
        if killed:
            raise TimeoutError(
                f"worker(s) {', '.join(map(str, killed))} did not stop within "
                f"{self._grace:g}s (graceful_shutdown_timeout) and were killed"
            )

    def tell(self, **message: object) -> None:
        """Write ``message`` to every running worker, and to each one that starts later.

        How the supervisor of split workers passes on its leadership
        (:mod:`setpoint.manager.workersplit`); the latest message replaces the previous one.
        """
        self._word = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        for slot in self._slots:
            _write(slot, self._word)

    def signal_all(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` to every running worker (forwarding a signal the supervisor got)."""
        for slot in self._slots:
            process = slot.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)

    async def _stop_all(self, tasks: list[asyncio.Task[None]]) -> list[int]:
        """SIGTERM every worker, wait the grace period, SIGKILL what remains; reap all."""
        self.signal_all(signal.SIGTERM)
        killed: list[int] = []
        if any(s.process is not None for s in self._slots):

            async def all_exited() -> None:
                await asyncio.gather(*(s.exited.wait() for s in self._slots if s.process))

            with contextlib.suppress(TimeoutError):
                await clock_timeout(self._clock, all_exited(), self._grace + 0.5)
            for slot in self._slots:
                process = slot.process
                if process is not None and process.returncode is None:
                    log.error(
                        "worker %d (pid %d) did not stop in time: killing it",
                        slot.index,
                        process.pid,
                    )
                    killed.append(slot.index)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for slot in self._slots:
            process = slot.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
            slot.state = "stopped"
        return killed

    async def _keep(self, slot: _Slot) -> None:
        """Run worker ``slot.index`` again and again until the supervisor stops."""
        backoff = self._backoff
        while not self._stopping:
            try:
                code: int | None = await self._run_once(slot)
            except (OSError, ValueError) as exc:  # the command cannot be started at all
                log.error("worker %d could not be started: %s", slot.index, exc)
                slot.error = f"it could not be started ({' '.join(self._argv[:2])} ...): {exc}"
                code = None
            if self._stopping:
                return
            uptime = self._clock.now() - slot.started_at
            if not slot.ever_ready and (code is None or code >= 0):
                # It ended by itself before it was ever ready: a start-up error that a
                # restart repeats. (Killed by a signal - an OOM kill, a person - it is
                # restarted like any dead worker.)
                message = slot.error or f"worker {slot.index} exited with {_describe(code)}"
                self._fatal = WorkerStartupFailed(
                    slot.index,
                    f"worker {slot.index} failed before it was ever ready: {message}",
                )
                slot.state = "stopped"
                self._wake.set()
                return
            if uptime >= self._reset_after:
                backoff = self._backoff
                slot.deaths_in_a_row = 0
            slot.deaths_in_a_row += 1
            slot.state = "restarting"
            log.warning(
                "worker %d exited with %s after %.1fs; restarting it in %gs (restart %d)",
                slot.index,
                _describe(code),
                uptime,
                backoff,
                slot.restarts + 1,
            )
            await clock_sleep(self._clock, backoff)
            backoff = min(backoff * 2, self._backoff_max)
            slot.restarts += 1

    async def _run_once(self, slot: _Slot) -> int:
        """Start worker ``slot.index``, follow its reports, return its exit code once reaped."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            env = {
                **self._environ,
                WORKER_INDEX_ENV: str(slot.index),
                WORKER_COUNT_ENV: str(self.count),
                WORKER_GROUP_ENV: self.group,
                WORKER_CHANNEL_ENV: str(child.fileno()),
            }
            fds = [child.fileno()]
            if self._webhook_socket is not None:
                env[WORKER_WEBHOOK_FD_ENV] = str(self._webhook_socket.fileno())
                fds.append(self._webhook_socket.fileno())
            slot.exited.clear()
            slot.metrics_address = slot.probe_address = None
            slot.error = None
            slot.state = "starting"
            process = await asyncio.create_subprocess_exec(
                *self._argv,
                env=env,
                pass_fds=fds,
                stdin=asyncio.subprocess.DEVNULL,
                # Its own process group: a terminal's Ctrl-C reaches the supervisor only,
                # which forwards it once (a second signal would cut the worker's grace).
                process_group=0,
            )
        except BaseException:
            parent.close()
            child.close()
            raise
        child.close()
        slot.process = process
        slot.started_at = self._clock.now()
        log.info("worker %d started pid=%d", slot.index, process.pid)
        parent.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=parent)
        slot.writer = writer
        _write(slot, self._word)
        follow = asyncio.create_task(self._follow(slot, reader))
        try:
            code = await process.wait()  # reaped: its Leases may be taken by a successor
        finally:
            slot.exited.set()
            # The reports it wrote before it died are still buffered: read them first.
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await clock_timeout(self._clock, asyncio.shield(follow), 1.0)
            follow.cancel()
            slot.writer = None
            writer.close()
        slot.metrics_address = slot.probe_address = None
        return code

    async def _follow(self, slot: _Slot, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await reader.readline()
            except (ConnectionError, OSError, ValueError):
                return
            if not line:
                return
            try:
                report = json.loads(line)
            except ValueError:
                log.warning("worker %d sent an unreadable report: %r", slot.index, line[:200])
                continue
            if not isinstance(report, dict):
                continue
            if "metrics" in report:
                slot.metrics_address = _address(report.get("metrics"))
            if "probes" in report:
                slot.probe_address = _address(report.get("probes"))
            if "ready" in report:
                if report["ready"]:
                    if not slot.ever_ready or slot.state != "ready":
                        log.info("worker %d is ready", slot.index)
                    slot.ever_ready = True
                    slot.state = "ready"
                elif slot.state == "ready":
                    slot.state = "starting"
            if "error" in report:
                slot.error = str(report["error"])


def _write(slot: _Slot, line: bytes) -> None:
    writer = slot.writer
    if line and writer is not None and not writer.is_closing():
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(line)


def _pid(slot: _Slot) -> int | None:
    process = slot.process
    return process.pid if process is not None and process.returncode is None else None


def _address(value: object) -> tuple[str, int] | None:
    if isinstance(value, list) and len(value) == 2:
        host, port = value
        if isinstance(host, str) and isinstance(port, int):
            return host, port
    return None


def _describe(code: int | None) -> str:
    if code is None:
        return "no process"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
