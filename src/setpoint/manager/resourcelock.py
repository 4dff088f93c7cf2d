"""The lock leader election campaigns on: a record, the lock protocol, a Lease lock.

:class:`LeaderElectionRecord` is what a lock stores (holder, lease duration, times);
:class:`ResourceLock` is the protocol the :class:`~setpoint.manager.leaderelection.LeaderElector`
reads and writes it through (client-go's ``resourcelock.Interface``), and :class:`LeaseLock`
keeps it in a ``coordination.k8s.io/v1`` Lease. Tests replace the lock with an in-memory one;
:attr:`~setpoint.manager.options.LeaderElectionOptions.lock` is that seam.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from setpoint.api import kinds
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.client.errors import NotFound
from setpoint.observability.events import EventRecorder

__all__ = [
    "LeaderElectionRecord",
    "LeaseClient",
    "LeaseLock",
    "LockNotInitialized",
    "ResourceLock",
]


def _format_micro_time(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_micro_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LeaderElectionRecord:
    """The lease's state as client-go's ``LeaderElectionRecord``: who holds it and since when.

    ``renew_time`` and ``acquire_time`` are the holder's wall clock and are only informative:
    candidates never compare them with their own clock (see :class:`LeaderElector`).
    """

    holder_identity: str
    """``spec.holderIdentity``; empty when the lease was released."""
    lease_duration_seconds: int
    """``spec.leaseDurationSeconds``: how long candidates wait after seeing a change."""
    acquire_time: datetime | None
    """``spec.acquireTime``: when the current holder acquired it."""
    renew_time: datetime | None
    """``spec.renewTime``: when the current holder last renewed it."""
    leader_transitions: int
    """``spec.leaseTransitions``: how many times the holder changed."""

    @classmethod
    def from_lease_spec(cls, spec: object) -> LeaderElectionRecord:
        """Read a Lease's ``spec``; missing fields read as empty, zero or ``None``."""
        data = spec if isinstance(spec, dict) else {}
        duration = data.get("leaseDurationSeconds")
        transitions = data.get("leaseTransitions")
        return cls(
            holder_identity=str(data.get("holderIdentity") or ""),
            lease_duration_seconds=duration if isinstance(duration, int) else 0,
            acquire_time=_parse_micro_time(data.get("acquireTime")),
            renew_time=_parse_micro_time(data.get("renewTime")),
            leader_transitions=transitions if isinstance(transitions, int) else 0,
        )

    def to_lease_spec(self) -> JsonObject:
        """The Lease ``spec`` fields this record owns."""
        return {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": _format_micro_time(self.acquire_time),
            "renewTime": _format_micro_time(self.renew_time),
            "leaseTransitions": self.leader_transitions,
        }


@runtime_checkable
class ResourceLock(Protocol):
    """A lease-like object candidates read and write with optimistic concurrency.

    The counterpart of client-go's ``resourcelock.Interface``. ``update`` must fail if the
    object changed since this lock last read or wrote it (``resourceVersion``), so two
    candidates can never both succeed from the same observation.
    """

    @property
    def identity(self) -> str:
        """The identity of this candidate."""
        ...

    def describe(self) -> str:
        """A name for logs and errors, such as ``Lease ns/name``."""
        ...

    async def get(self) -> LeaderElectionRecord | None:
        """Read the record; ``None`` if the lock object does not exist yet."""
        ...

    async def create(self, record: LeaderElectionRecord) -> None:
        """Create the lock object holding ``record``; raise if it already exists."""
        ...

    async def update(self, record: LeaderElectionRecord) -> None:
        """Write ``record`` over the version last read or written; raise on a conflict."""
        ...

    def record_event(self, message: str) -> None:
        """Record a Kubernetes Event about the lock (``"<identity> became leader"``)."""
        ...


class LockNotInitialized(SetpointError, RuntimeError):
    """``update`` was called before ``get`` or ``create`` gave the lock a version to update."""


class LeaseClient(Protocol):
    """What :class:`LeaseLock` needs from a client (``setpoint.client.Client`` has it)."""

    async def get(
        self, kind: GroupVersionKind, name: str, *, namespace: str | None = None
    ) -> JsonObject:
        """Read one object; raise ``NotFound`` if it does not exist."""
        ...

    async def create(self, obj: JsonObject) -> JsonObject:
        """Create an object; raise ``AlreadyExists`` if it exists."""
        ...

    async def update(self, obj: JsonObject) -> JsonObject:
        """Replace an object, checking its ``resourceVersion``; raise ``Conflict`` if stale."""
        ...


class LeaseLock:
    """A :class:`ResourceLock` on a ``coordination.k8s.io/v1`` Lease.

    It keeps the Lease as last read or written, and updates replace exactly that version
    (a PUT carrying its ``resourceVersion``), so a concurrent writer makes the update fail
    with ``Conflict`` instead of being overwritten. Fields of the Lease spec this lock does
    not own (``preferredHolder``, ``strategy``) are kept as they are.

    ``labels`` and ``annotations()`` are merged into the Lease's metadata on every create
    and update (the manager advertises there which finalizers its controllers handle, for
    ``setpoint doctor``); other labels and annotations are kept. ``annotations`` is called
    for each write, so what it returns may change while the process runs.
    """

    def __init__(
        self,
        client: LeaseClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        recorder: EventRecorder | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._name = name
        self._identity = identity
        self._recorder = recorder
        self._labels = dict(labels or {})
        self._annotations = annotations
        self._lease: JsonObject | None = None

    @property
    def identity(self) -> str:
        """The identity of this candidate."""
        return self._identity

    def describe(self) -> str:
        """``Lease <namespace>/<name>``."""
        return f"Lease {self._namespace}/{self._name}"

    async def get(self) -> LeaderElectionRecord | None:
        """Read the Lease; ``None`` if it does not exist."""
        try:
            lease = await self._client.get(kinds.Lease, self._name, namespace=self._namespace)
        except NotFound:
            return None
        self._lease = lease
        return LeaderElectionRecord.from_lease_spec(lease.get("spec"))

    async def create(self, record: LeaderElectionRecord) -> None:
        """Create the Lease holding ``record``."""
        lease: JsonObject = {
            "apiVersion": kinds.Lease.api_version,
            "kind": kinds.Lease.kind,
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": record.to_lease_spec(),
        }
        self._advertise(lease)
        self._lease = await self._client.create(lease)

    async def update(self, record: LeaderElectionRecord) -> None:
        """Replace the Lease last seen with one holding ``record``.

        Raises:
            LockNotInitialized: neither ``get`` nor ``create`` succeeded before.
            Conflict: the Lease changed since it was last seen.

        """
        if self._lease is None:
            raise LockNotInitialized(
                f"{self.describe()}: update() needs a version to replace; call get() or "
                "create() first"
            )
        lease = copy.deepcopy(self._lease)
        spec = lease.get("spec")
        lease["spec"] = {**(spec if isinstance(spec, dict) else {}), **record.to_lease_spec()}
        self._advertise(lease)
        self._lease = await self._client.update(lease)

    def _advertise(self, lease: JsonObject) -> None:
        """Merge this lock's labels and annotations into ``lease`` (a private copy)."""
        extra = dict(self._annotations()) if self._annotations is not None else {}
        if not self._labels and not extra:
            return
        metadata = lease.setdefault("metadata", {})
        for field_name, values in (("labels", self._labels), ("annotations", extra)):
            if values:
                current = metadata.get(field_name)
                metadata[field_name] = {**(current if isinstance(current, dict) else {}), **values}

    def record_event(self, message: str) -> None:
        """Record a ``Normal`` ``LeaderElection`` Event on the Lease (if it has a recorder)."""
        if self._recorder is not None and self._lease is not None:
            self._recorder.event(self._lease, "Normal", "LeaderElection", message)
