"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

:class:`LeaderElector` campaigns for and renews a lease through a
:class:`~setpoint.manager.resourcelock.ResourceLock` (a
:class:`~setpoint.manager.resourcelock.LeaseLock` by default). The manager runs one
elector and starts its leader-only runnables only while it leads. See
:class:`LeaderElector` for the protocol, its guarantees and what they rest on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from setpoint.api.clock import Clock, clock_sleep, clock_timeout
from setpoint.manager.options import LeaderElectionOptions
from setpoint.manager.resourcelock import LeaderElectionRecord, ResourceLock

if TYPE_CHECKING:
    from setpoint.observability.metrics import Metrics

__all__ = ["LeaderElector", "default_identity"]

log = logging.getLogger("setpoint.manager.leaderelection")

CAMPAIGN_JITTER: Final = 0.2
"""Candidates wait ``retry_period`` plus up to this fraction of it between attempts, so that
many replicas started together do not all knock at once."""


def default_identity() -> str:
    """``<host name>_<random UUID>``: unique per process, readable in ``holderIdentity``."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4()}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaigns for a lease, renews it while leading, and reports when leadership ends.

    Expected Flow:
        1. ``start(on_elected, on_lost)`` begins campaigning. Every ``retry_period`` (plus up
           to 20% jitter) the candidate reads the lock. It takes the lock when it does not
           exist, holds no holder (released), or is *expired*: its record has not changed for
           ``leaseDurationSeconds`` (the holder's value) on this process's own monotonic
           clock, counted from when this process first saw that record. Taking it is an
           ``update`` over the version just read, so of several candidates at most one wins;
           ``leaseTransitions`` goes up by one.
        2. On winning, ``on_elected()`` is called once.
        3. While leading, it renews every ``retry_period``: an optimistic update of the
           version it last wrote (the fast path), falling back to read-then-update (the slow
           path, counted in ``leader_election_slowpath_total``). A failed renewal is retried
           every ``retry_period``.
        4. If no renewal succeeds within ``renew_deadline`` of *sending* the last one that
           succeeded, or the lock turns out to be held by someone else, leadership is lost:
           ``on_lost()`` is called at once (synchronously, at the deadline) and the elector
           stops. It never campaigns again; build a new elector to do so.
        5. ``stop()`` ends campaigning or leading; with ``release_on_cancel`` a leader first
           writes an empty holder (and ``leaseDurationSeconds: 1``) so others take over at
           once.

    Guarantees:
        - ``leader_election_master_status{name}`` is 1 from ``on_elected`` until
          ``on_lost`` (or ``stop()``), 0 otherwise.
        - ``is_leader`` turns false the instant the renew deadline passes, even before the
          timer that calls ``on_lost`` runs (it reads the clock on every call).
        - Two electors on one lock never both consider themselves leader at the same time,
          under the assumptions below: a leader stops at most ``renew_deadline`` after it sent
          its last successful renewal; that renewal was written after it was sent and seen by
          others after it was written, and others wait ``lease_duration`` from then. The gap,
          ``lease_duration - renew_deadline``, absorbs clock-rate differences and scheduling
          delay.
        - Every request is bounded by ``request_timeout`` and, while leading, by the time left
          until the renew deadline, so a hung request cannot extend leadership.

    Assumptions:
        - Candidates' monotonic clocks run at nearly the same *rate* (their wall clocks may
          disagree arbitrarily; ``renewTime`` is never compared across processes).
        - The API server provides optimistic concurrency on the lock (``resourceVersion``).
        - All candidates use this protocol (client-go's is the same, so Go and Python
          replicas may share a lock) and the lease's ``leaseDurationSeconds`` is honoured.
        - The process reacts to ``on_lost`` promptly: leader-only work is cancelled
          immediately, not drained. An event loop blocked for longer than the safety margin
          by CPU-bound code breaks this assumption, as would a paused process (SIGSTOP, a VM
          freeze).

    Caveats:
        - Takeover after a leader dies without releasing takes between ``lease_duration`` and
          about ``lease_duration + 1.2 * retry_period``: candidates wake exactly when the
          lease they watch expires, but may have seen its last renewal up to one jittered
          retry period late.
        - Leadership is a lease, not a lock on the world: work that outlives cancellation (a
          request already sent, a thread in an executor) may still land after leadership
          ended. Make writes idempotent, or guard them with preconditions.
        - A lost elector does not restart; the manager shuts down (``LeadershipLossPolicy``).

    Errors:
        ClientError: never escapes. Lock errors (an unreachable API server, ``Conflict``,
            ``Forbidden`` on leases) count as a failed attempt, are logged, and make
            :meth:`check` report unhealthy.
        Exception: an unexpected error inside the elector itself ends it; :meth:`failure`
            reports it, and a leader calls ``on_lost`` first.
    """

    def __init__(
        self,
        lock: ResourceLock,
        options: LeaderElectionOptions,
        *,
        clock: Clock,
        metrics: Metrics | None = None,
        wall_clock: Callable[[], datetime] = _utcnow,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.lock = lock
        """The lock campaigned on."""
        self.options = options
        """The timing settings (validated)."""
        self._clock = clock
        self._metrics = metrics
        self._wall_clock = wall_clock
        self._jitter = jitter
        self._request_timeout = options.effective_request_timeout
        self._observed: LeaderElectionRecord | None = None
        self._observed_time = 0.0
        self._leading = False
        self._lost = False
        self._renew_deadline_at = 0.0
        self._last_contact: float | None = None
        self._last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._on_lost: Callable[[], None] | None = None
        self._set_gauge(0)

    # -- state ---------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        """The identity of this candidate."""
        return self.lock.identity

    @property
    def is_leader(self) -> bool:
        """Whether this process leads right now.

        True between ``on_elected`` and ``on_lost``, *and* only while the renew deadline has
        not passed. The deadline is checked against the clock on every call, so leader-only
        code that tests it right before each action is fenced even when the process was
        paused (SIGSTOP, a frozen VM) and the timer that calls ``on_lost`` has not fired yet.
        """
        return self._leading and self._clock.now() < self._renew_deadline_at

    @property
    def fenced_until(self) -> float | None:
        """While leading: the clock instant before which no other candidate can hold the lease.

        ``lease_duration`` after this leader *sent* its latest successful renewal (others
        wait ``lease_duration`` from when they *saw* it, which is later). Work this leader
        delegates (the workers of ``--processes``, decision 0038) stays fenced as long as it
        stops before this instant. ``None`` while not leading.
        """
        if not self.is_leader:
            return None
        options = self.options
        return self._renew_deadline_at - options.renew_deadline + options.lease_duration

    @property
    def lost(self) -> bool:
        """Whether this elector led and lost (it does not campaign again)."""
        return self._lost

    @property
    def leader(self) -> str | None:
        """The holder identity last observed on the lock (``None`` before the first read)."""
        return self._observed.holder_identity if self._observed is not None else None

    def failure(self) -> BaseException | None:
        """The unexpected error that ended the elector, or ``None``."""
        return self._failure

    def check(self) -> str | None:
        """``None`` when leader election is healthy, else what is wrong (for ``/readyz``).

        Healthy means: a leader's latest renewal succeeded; a candidate's latest contact with
        the lock (reading it, or trying to take it) got an answer within the lease duration.
        """
        if self._failure is not None:
            return f"leader election stopped unexpectedly: {self._failure}"
        if self._lost:
            return f"leadership of {self.lock.describe()} was lost"
        now = self._clock.now()
        if self._leading:
            if self._last_error is not None:
                left = self._renew_deadline_at - now
                return (
                    f"renewing {self.lock.describe()} failed ({self._last_error}); "
                    f"{max(left, 0.0):.1f}s left before the renew deadline"
                )
            return None
        if self._task is None:
            return "leader election has not started"
        if self._last_contact is None:
            problem = f": {self._last_error}" if self._last_error else ""
            return f"{self.lock.describe()} has not been reached yet{problem}"
        if now - self._last_contact > self.options.lease_duration:
            return (
                f"{self.lock.describe()} not reached for {now - self._last_contact:.1f}s "
                f"(last error: {self._last_error})"
            )
        return None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        """Start campaigning in a background task (see the class docstring for the flow).

        ``on_elected`` and ``on_lost`` run synchronously inside the elector's task; they must
        not block. ``on_lost`` is called at the moment leadership ends.
        """
        if self._task is not None:
            raise RuntimeError("a LeaderElector starts once; build a new one to campaign again")
        self._on_lost = on_lost
        self._task = asyncio.create_task(
            self._run(on_elected, on_lost), name=f"setpoint-leader-election-{self.options.name}"
        )

    async def stop(self) -> None:
        """Stop campaigning or leading; release the lease first if configured and leading.

        Call it only after leader-only work has stopped: releasing lets another candidate
        take over at once.
        """
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        was_leading = self._leading
        self._leading = False
        self._set_gauge(0)
        if was_leading and self.options.release_on_cancel:
            await self._release()

    # -- the protocol ------------------------------------------------------------------------

    async def _run(self, on_elected: Callable[[], None], on_lost: Callable[[], None]) -> None:
        try:
            log.info("%s: campaigning as %r", self.lock.describe(), self.identity)
            await self._acquire()
            self._leading = True
            self._set_gauge(1)
            log.info("%s: %r became leader", self.lock.describe(), self.identity)
            self.lock.record_event(f"{self.identity} became leader")
            on_elected()
            await self._renew()
            self._lose()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failure = exc
            log.exception("%s: leader election failed unexpectedly", self.lock.describe())
            if self._leading:
                self._lose()

    def _lose(self) -> None:
        self._leading = False
        self._lost = True
        self._set_gauge(0)
        log.error(
            "%s: %r lost leadership (last error: %s)",
            self.lock.describe(),
            self.identity,
            self._last_error,
        )
        self.lock.record_event(f"{self.identity} stopped leading")
        if self._on_lost is not None:
            self._on_lost()

    async def _acquire(self) -> None:
        clock = self._clock
        while True:
            sent = clock.now()
            if await self._attempt(self._request_timeout):
                self._renew_deadline_at = sent + self.options.renew_deadline
                return
            delay = self.options.retry_period * (1 + CAMPAIGN_JITTER * self._jitter())
            now = clock.now()
            if self._observed is not None and self._observed.holder_identity:
                expiry = self._observed_time + self._observed.lease_duration_seconds
                if expiry > now:
                    # Wake exactly when the holder's lease runs out on our clock, if sooner.
                    delay = min(delay, expiry - now)
            await clock_sleep(clock, delay)

    async def _renew(self) -> None:
        """Renew until leadership is lost; return at that moment."""
        clock, options = self._clock, self.options
        while True:
            await clock_sleep(clock, options.retry_period)
            while True:
                now = clock.now()
                remaining = self._renew_deadline_at - now
                if remaining <= 0:
                    return
                ok = await self._attempt(min(self._request_timeout, remaining))
                if ok:
                    self._renew_deadline_at = now + options.renew_deadline
                    break
                if not self._observed_is_us() and self._lease_valid(clock.now()):
                    self._last_error = (
                        f"the lease is held by {self.leader!r}" if self.leader else self._last_error
                    )
                    return
                remaining = self._renew_deadline_at - clock.now()
                if remaining <= 0:
                    return
                await clock_sleep(clock, min(options.retry_period, remaining))

    async def _attempt(self, timeout: float) -> bool:
        try:
            ok = await clock_timeout(self._clock, self._try_acquire_or_renew(), timeout)
        except TimeoutError:
            self._last_error = f"no answer from the API server within {timeout:.3g}s"
            log.warning("%s: %s", self.lock.describe(), self._last_error)
            return False
        except Exception as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            log.warning("%s: attempt failed: %s", self.lock.describe(), self._last_error)
            return False
        if ok:
            self._last_error = None
        return ok

    async def _try_acquire_or_renew(self) -> bool:
        """One step of client-go's ``tryAcquireOrRenew``; ``True`` if we hold the lease now."""
        now = self._clock.now()
        wall = self._wall_clock()
        record = LeaderElectionRecord(
            holder_identity=self.identity,
            lease_duration_seconds=int(self.options.lease_duration),
            acquire_time=wall,
            renew_time=wall,
            leader_transitions=0,
        )
        lock = self.lock

        # 1. Fast path: the leader updates the version it wrote last, without reading first.
        observed = self._observed
        if observed is not None and self._observed_is_us() and self._lease_valid(now):
            renewed = replace(
                record,
                acquire_time=observed.acquire_time,
                leader_transitions=observed.leader_transitions,
            )
            try:
                await lock.update(renewed)
            except Exception as exc:
                log.info("%s: optimistic renewal failed (%s); reading it", lock.describe(), exc)
            else:
                self._observe(renewed)
                return True

        # 2. Read the record, or create it. The server answered the read: a create that then
        # loses the race to another candidate (Conflict) leaves this one a healthy candidate.
        current = await lock.get()
        self._last_contact = now
        if current is None:
            await lock.create(record)
            self._observe(record)
            return True

        # 3. Someone else holds an unexpired lease: wait. The expiry clock restarts whenever
        # the record changes, measured on our clock from the moment we see the change.
        if current != self._observed:
            self._observe(current)
        if current.holder_identity and self._lease_valid(now) and not self._observed_is_us():
            return False

        # 4. Take it over, or renew it (the slow path).
        if self._observed_is_us():
            update = replace(
                record,
                acquire_time=current.acquire_time,
                leader_transitions=current.leader_transitions,
            )
            if self._metrics is not None:
                self._metrics.leader_election_slowpath_total.labels(self.options.name).inc()
        else:
            update = replace(record, leader_transitions=current.leader_transitions + 1)
        await lock.update(update)
        self._observe(update)
        return True

    def _observe(self, record: LeaderElectionRecord) -> None:
        self._observed = record
        self._observed_time = self._clock.now()
        self._last_contact = self._observed_time

    def _observed_is_us(self) -> bool:
        return self._observed is not None and self._observed.holder_identity == self.identity

    def _lease_valid(self, now: float) -> bool:
        observed = self._observed
        return observed is not None and self._observed_time + observed.lease_duration_seconds > now

    async def _release(self) -> None:
        """Give the lease up (client-go's ``release``): empty holder, 1 s duration."""
        try:
            current = await clock_timeout(self._clock, self.lock.get(), self._request_timeout)
            if current is None or current.holder_identity != self.identity:
                return
            wall = self._wall_clock()
            released = replace(
                current,
                holder_identity="",
                lease_duration_seconds=1,
                acquire_time=wall,
                renew_time=wall,
            )
            await clock_timeout(self._clock, self.lock.update(released), self._request_timeout)
        except Exception as exc:
            log.warning(
                "%s: could not release the lease (%s); others take over once it expires",
                self.lock.describe(),
                exc,
            )
            return
        self._observe(released)
        log.info("%s: released by %r", self.lock.describe(), self.identity)

    def _set_gauge(self, value: int) -> None:
        if self._metrics is not None:
            self._metrics.leader_election_master_status.labels(self.options.name).set(value)
