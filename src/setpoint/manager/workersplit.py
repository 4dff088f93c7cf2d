"""How the workers of one supervisor split the objects and lead, without the API server.

With ``ManagerOptions.processes`` > 1 and no ``ShardingOptions`` (decision 0038), the
supervisor holds the leader election Lease for the whole Pod and its workers split each
controller's ``for_`` kind by a fixed hash of the object's key: worker ``i`` of ``N``
reconciles exactly the keys :func:`worker_of` maps to ``i``. Nothing is written to the
objects, and no Lease exists per worker.

Expected Flow:
    1. The supervisor campaigns for the leader election Lease (a Pod-level identity). While
       it leads, it sends each worker the instant before which no other candidate can take
       the Lease (:attr:`~setpoint.manager.leaderelection.LeaderElector.fenced_until`, on
       ``CLOCK_MONOTONIC``), every half retry period and to each worker as it starts.
    2. Each worker campaigns with its usual elector on a :class:`SupervisorLock`: the lock
       can be taken and renewed only while the supervisor's latest grant leaves at least the
       worker's renew deadline before that instant. The worker's leader-only runnables (its
       controllers) start once it holds it and stop at once when it is lost.
    3. :meth:`WorkerSplit.adopt` narrows each split controller's cache so the ``for_``
       kind's informer drops, as they arrive, objects whose key is another worker's
       (:meth:`~setpoint.cache.informer.Informer.narrow` with ``keys``), and sets the split
       as the controller's key gate: events of owned and watched kinds enqueue their
       owners' keys, and a key of another worker is refused before it is reconciled (and,
       for a controller that needs leader election, any key while the worker does not
       lead).
    4. A worker that dies is reaped by the supervisor before its successor, with the same
       index, starts: it takes over exactly the keys of its predecessor.

Guarantees:
    - A worker reconciles a key only if ``worker_of(key, N)`` is its index and, for a
      controller that needs leader election (the default), only while its own elector
      leads (checked with the clock right before each reconcile): no two workers of one
      supervisor ever own a key, and a restarted worker never runs beside its
      predecessor. A controller built with ``needs_leader_election(False)`` runs in every
      Pod, as it does without processes, split among each Pod's workers.
    - A worker's leadership ends before the supervisor's Lease could have been taken over:
      each renewal is accepted only if the worker's renew deadline ends before the fence
      the supervisor last sent. A supervisor that is paused, cut off or killed sends no
      fresh fence, so its workers stop in time without hearing from it.
    - Changing ``N`` (a rolling update to a Pod with another count) moves keys between
      workers of *different* supervisors only, and those never lead at once.

Caveats:
    - Every worker receives and decodes every object of a split kind (the API server cannot
      filter by a hash); it stores and handles only its own. Owned and watched kinds are
      cached whole by every worker, as with the ring.
    - The split is by key, not by load: keys spread evenly, expensive objects may not.
    - Replicas of the Deployment are standbys: only the leading Pod's workers reconcile
      (they all serve webhooks). To spread reconciles over Pods too, configure
      ``ShardingOptions`` (the shard ring of decision 0011), which ``--processes`` then
      uses instead.
    - The fence compares ``CLOCK_MONOTONIC`` readings of two processes on one host, which
      Linux keeps in step; it is not read through a test's
      :class:`~setpoint.api.clock.Clock`.

Errors:
    LeadershipNotGranted: raised by :class:`SupervisorLock` writes while the supervisor's
        grant is stale; the worker's elector treats it as a failed attempt and retries.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.manager.resourcelock import LeaderElectionRecord

if TYPE_CHECKING:
    from setpoint.api.clock import Clock
    from setpoint.controller.controller import Controller
    from setpoint.manager.leaderelection import LeaderElector

__all__ = [
    "LeadershipNotGranted",
    "SupervisorLock",
    "WorkerSplit",
    "grant_message",
    "worker_of",
]

STANDBY_HOLDER: Final = "(another Pod)"
"""The holder a :class:`SupervisorLock` reports while its supervisor leads nothing and has
seen no holder's name."""


def worker_of(key: ObjectKey, count: int) -> int:
    """The worker (``0`` .. ``count - 1``) that owns ``key``: a fixed hash of its key.

    BLAKE2b of ``<namespace>/<name>``, so it is the same in every process and Python run
    (unlike ``hash()``), and the same for an object and its tombstone.
    """
    text = f"{key.namespace}/{key.name}".encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def grant_message(
    elector: LeaderElector, clock: Clock, monotonic: Callable[[], float] = time.monotonic
) -> dict[str, object]:
    """What the supervisor tells its workers: its fence on ``CLOCK_MONOTONIC``, its leader.

    ``{"lead": <instant> | None, "leader": <holder> | None}``; the fence
    (:attr:`~setpoint.manager.leaderelection.LeaderElector.fenced_until`, on ``clock``) is
    moved to ``monotonic`` (``CLOCK_MONOTONIC``), the time base two processes of one host
    share.
    """
    fence = elector.fenced_until
    at = None if fence is None else monotonic() + (fence - clock.now())
    return {"lead": at, "leader": elector.leader}


class WorkerSplit:
    """Worker ``index`` of ``count``: the keys it owns, its informers' filter and key gate.

    See the module docstring for the flow and guarantees.

    Args:
        index: This worker's index.
        count: How many workers the supervisor runs.
        leading: Whether this worker leads right now (the manager's ``is_leader``).

    """

    def __init__(self, index: int, count: int, leading: Callable[[], bool]) -> None:
        if not 0 <= index < count:
            raise ValueError(f"WorkerSplit: index {index} is not among {count} workers")
        self.index = index
        """This worker's index."""
        self.count = count
        """How many workers split the keys."""
        self._leading = leading
        self._narrowed: set[tuple[int, GroupVersionKind]] = set()
        self._controllers: list[Controller] = []

    @property
    def controllers(self) -> list[Controller]:
        """The split controllers adopted so far."""
        return list(self._controllers)

    def owns(self, key: ObjectKey) -> bool:
        """Whether ``key`` is this worker's (:func:`worker_of`)."""
        return worker_of(key, self.count) == self.index

    def admits(self, key: ObjectKey) -> bool:
        """The key gate of a leader-only controller: this worker's key, while it leads."""
        return self._leading() and self.owns(key)

    def adopt(self, controller: Controller) -> None:
        """Split ``controller``: narrow its ``for_`` kind's informer to this worker's keys.

        Raises:
            ValueError: the controller has no ``for_`` kind.
            CacheError: the kind's informer has started already (adopt before running).

        """
        kind = controller.for_kind
        if kind is None:
            raise ValueError(
                f"controller {controller.controller_name!r} has no for_() kind: the workers "
                "split the objects a controller reconciles"
            )
        cache = controller.cache
        slot = (id(cache), kind)
        if slot not in self._narrowed:
            cache.narrow(kind, keys=self.owns)
            self._narrowed.add(slot)
        controller.set_key_gate(self if controller.needs_leader_election else _OwnKeys(self))
        self._controllers.append(controller)

    def describe(self) -> str:
        """``worker <index> of <count>``."""
        return f"worker {self.index} of {self.count}"


class _OwnKeys:
    """The key gate of a controller that runs without leader election: this worker's keys."""

    def __init__(self, split: WorkerSplit) -> None:
        self._split = split

    def admits(self, key: ObjectKey) -> bool:
        return self._split.owns(key)


class LeadershipNotGranted(SetpointError, RuntimeError):
    """A worker tried to take or renew its :class:`SupervisorLock` without a fresh grant."""


class SupervisorLock:
    """A worker's leader election lock: it holds while the supervisor's Lease fences it.

    A :class:`~setpoint.manager.resourcelock.ResourceLock` kept in memory and fed by the
    supervisor (:meth:`grant`). Writes succeed only while ``now + renew_deadline`` is before
    the latest fence, so the worker's elector, which leads until ``renew_deadline`` after
    the attempt it sent, stops before the fence. While no fresh grant is held, :meth:`get`
    reports the supervisor's view of the holder with a renew time that moves on every read,
    so the worker waits quietly as a candidate and, if it led, loses at its next renewal.

    Args:
        identity: The worker's identity.
        name: The leader election Lease's name (for messages).
        renew_deadline: The worker's elector's ``renew_deadline``, in seconds.
        lease_duration: The worker's elector's ``lease_duration``, in seconds.
        monotonic: ``CLOCK_MONOTONIC`` in seconds (tests replace it).

    """

    def __init__(
        self,
        identity: str,
        *,
        name: str,
        renew_deadline: float,
        lease_duration: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._identity = identity
        self._name = name
        self._renew_deadline = renew_deadline
        self._lease_duration = int(lease_duration)
        self._monotonic = monotonic
        self._fence: float | None = None
        self._leader: str | None = None
        self._record: LeaderElectionRecord | None = None

    @property
    def identity(self) -> str:
        """The worker's identity."""
        return self._identity

    def describe(self) -> str:
        """``Lease <name> (held by the supervisor)``."""
        return f"Lease {self._name} (held by the supervisor)"

    def grant(self, fenced_until: float | None, leader: str | None = None) -> None:
        """The supervisor's latest word: its fence on ``CLOCK_MONOTONIC``, or ``None``.

        ``leader`` is the holder the supervisor last saw (for the worker's messages).
        """
        self._fence = fenced_until
        self._leader = leader

    def hear(self, message: Mapping[str, object]) -> None:
        """Take a :func:`grant_message` read from the channel; other messages are ignored."""
        if "lead" not in message:
            return
        fence, leader = message["lead"], message.get("leader")
        self.grant(
            float(fence) if isinstance(fence, int | float) else None,
            leader if isinstance(leader, str) else None,
        )

    @property
    def granted(self) -> bool:
        """Whether a write now would still end its renew deadline before the fence."""
        fence = self._fence
        return fence is not None and self._monotonic() + self._renew_deadline < fence

    async def get(self) -> LeaderElectionRecord | None:
        """The worker's record while granted (``None`` before the first), else the holder's."""
        if self.granted:
            return self._record
        wall = datetime.now(UTC)
        return LeaderElectionRecord(
            holder_identity=self._leader or STANDBY_HOLDER,
            lease_duration_seconds=self._lease_duration,
            acquire_time=None,
            renew_time=wall,  # a change on every read: a candidate keeps waiting
            leader_transitions=0,
        )

    async def create(self, record: LeaderElectionRecord) -> None:
        """Take the lock (see :meth:`update`)."""
        await self.update(record)

    async def update(self, record: LeaderElectionRecord) -> None:
        """Write ``record`` if the grant is fresh enough.

        Raises:
            LeadershipNotGranted: the supervisor's fence is missing or too close.

        """
        if not self.granted:
            raise LeadershipNotGranted(
                f"{self.describe()}: the supervisor does not lead (or its latest renewal is "
                f"too old) for another {self._renew_deadline:g}s of leadership"
            )
        self._record = record

    def record_event(self, message: str) -> None:
        """Nothing: the supervisor records the Lease's Events."""
