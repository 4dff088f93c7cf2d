"""The sharder: assigns a ring's objects to its live shards and moves them safely.

It runs in the leader replica (a leader-only runnable the manager adds when
``ManagerOptions.sharding`` is set), so exactly one process assigns at a time (decision 0011).

Expected Flow:
    1. On start it builds a cache of its own: the ring's shard Leases (label
       ``sharding.setpoint.dev/ring=<ring>`` in the Lease namespace) and every object of the
       sharded kinds, watched metadata-only (``Metadata(kind)``: the API server sends
       ``PartialObjectMetadata``, so neither spec nor status is sent, decoded or cached).
    2. **Membership.** A shard is alive while its Lease names it as holder and the Lease's
       record has changed within ``leaseDurationSeconds`` on the sharder's own clock, counted
       from when the sharder first saw that record (leader election's expiry rule). The live
       shards form a :class:`~setpoint.manager.sharding.HashRing`; when the set changes, every
       object is looked at again, and a timer re-evaluates at the next possible expiry.
    3. **Per object** (a work queue, ``sharder_workers`` at a time), :func:`next_step` decides
       from ``desired`` (the ring's owner of the object's hash key), the shard label, the
       drain label and the hand-over record (:class:`~setpoint.manager.sharding.Handover`,
       annotation ``handover.sharding.setpoint.dev/<ring>``), whose *owner* is the shard the
       record assigns the object to:
       - label, record and ``desired`` agree, no drain label: nothing to do;
       - the owner is alive and labelled, but is not ``desired``: add the drain label, once,
         and wait for the owner to release the object (``ShardMember``'s acknowledgement
         removes both labels and writes a release record);
       - a drain label on an object its live owner still holds: wait;
       - the label (or the record) disagrees with a live owner: someone other than the
         sharder edited it. *Repair*: label the object for its owner again (with the drain
         label if it should move), restoring the record; nobody else ever acted on the
         edited label, and the move then goes through the drain;
       - the owner is dead: first *fence* it by taking its Lease over (holder
         ``sharder:<identity>``; a replica that was only frozen then finds its Lease held by
         someone else and stops), then assign ``desired`` (and drop any drain label);
       - a release record: assign ``desired`` (the previous owner's last reconcile ended);
       - no record (a new object; or one created with a label, or restored from a backup):
         unlabelled or labelled for a dead shard, assign ``desired`` (fencing a labelled dead
         shard first); labelled for a live shard, confirm that shard (``adopted``: it never
         reconciled the object without a record), and move it by drain if need be.
       Each assignment writes the label and the record in one merge patch carrying the
       resourceVersion the sharder saw, so a concurrent change makes it fail with
       ``Conflict`` and the object is looked at again. A record that an update removed or
       garbled is remembered (in memory) and treated as still there. An update that leaves
       the ring's shard label, drain label and record as they were (a status write, another
       label) queues nothing: the step depends on nothing else that can change.
    4. Periodically (``resync_period``) every object is looked at again; counts per shard
       are published (``setpoint_shard_objects``); Leases the sharder took over more than
       four Lease durations ago are deleted (with a resourceVersion precondition).

Guarantees:
    - A record assigning an object to a new shard is written only after its previous owner
      released it (after its last reconcile ended), or after that owner was dead and fenced,
      or when no record says anyone owned it. With ``renew_deadline < lease_duration`` a
      dead shard stopped reconciling before the sharder considers it dead (decision 0005's
      margin).
    - The sharder never removes a drain label from an object whose owner is alive; a drain
      always completes by the owner's acknowledgement or the owner's death.
    - A shard label edited by anyone else never moves an object: replicas act only on a
      label the record confirms, and the sharder gives the object back to the record's
      owner.

Caveats:
    - The sharder caches the metadata of every sharded object: its memory grows with the
      number of objects, in the leader only (``docs/benchmarks.md`` measures it).
    - A record that someone else removed is remembered only by the sharder that saw it go;
      if the leader changes before the repair, the object counts as unrecorded. Edits of
      the record (and of the labels) by anyone but the operator are refused by the
      admission policy of :mod:`setpoint.manager.shardpolicy`.
    - A new object waits one watch round trip and one PATCH before its shard sees it.
    - Objects stay unassigned while the ring is empty (no replica holds a shard Lease).

Errors:
    ClientError: never escapes. Failed writes are retried with the work queue's per-object
        backoff; a failed fence leaves the shard's objects where they are until it works.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from setpoint.api import kinds
from setpoint.api.clock import Clock, LoopClock, TimerHandle, clock_sleep
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import (
    JsonObject,
    annotations_of,
    key_of,
    labels_of,
    metadata_of,
    resource_version_of,
    uid_of,
)
from setpoint.api.metadata import Metadata
from setpoint.api.runnable import RunnableGroup
from setpoint.cache.cache import Cache, CacheOptions, KindOptions
from setpoint.cache.informer import FuncHandler, strip_managed_fields
from setpoint.client.client import Preconditions
from setpoint.client.errors import ClientError, Conflict, NotFound
from setpoint.client.patch import MergePatch
from setpoint.controller.workqueue import ShutDown, WorkQueue
from setpoint.manager.resourcelock import LeaderElectionRecord
from setpoint.manager.sharding import (
    RING_LABEL,
    SHARDER_HOLDER_PREFIX,
    Handover,
    HashRing,
    ShardingOptions,
    drain_label,
    draining,
    handover_annotation,
    handover_of,
    hash_key_of,
    shard_label,
    shard_of,
)

if TYPE_CHECKING:
    from setpoint.client.protocols import ApiClient
    from setpoint.observability.metrics import Metrics

__all__ = ["ShardState", "ShardStep", "Sharder", "metadata_only", "next_step", "same_assignment"]

log = logging.getLogger("setpoint.manager.sharder")

_COUNT_PERIOD: Final = 5.0
_FENCE_RETRY: Final = 1.0
_CLEANUP_LEASE_DURATIONS: Final = 4


def metadata_only(obj: JsonObject) -> JsonObject:
    """A cache transform keeping ``apiVersion``, ``kind`` and ``metadata`` (no managedFields).

    The sharder's objects come metadata-only from the server already (``Metadata(kind)``);
    this also cuts down a whole object, should one arrive (a server that ignored the
    ``as=PartialObjectMetadata`` request, or a test double).
    """
    m = obj.get("metadata")
    if isinstance(m, dict):
        m.pop("managedFields", None)
    return {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}


def same_assignment(old: JsonObject, new: JsonObject, ring: str) -> bool:
    """Whether an update kept everything :func:`next_step` reads of ``ring``.

    The shard label, the drain label, the hand-over record's text and the UID (a relist
    can report an object deleted and created again under its name as an update); the hash
    key (UID or namespace) does not change otherwise. A status write, or an edit of any
    other label or annotation, keeps the assignment; the sharder skips such updates.
    """
    if uid_of(old) != uid_of(new):  # replaced under its name, a delete the watch missed
        return False
    old_labels, new_labels = labels_of(old), labels_of(new)
    shard_key, drain_key = shard_label(ring), drain_label(ring)
    if old_labels.get(shard_key) != new_labels.get(shard_key):
        return False
    if (drain_key in old_labels) != (drain_key in new_labels):
        return False
    record = handover_annotation(ring)
    return annotations_of(old).get(record) == annotations_of(new).get(record)


@dataclass
class ShardState:
    """What the sharder knows about one shard Lease."""

    name: str
    """The Lease's (and the shard's) name."""
    record: LeaderElectionRecord
    """The Lease's record as last seen."""
    seen_at: float
    """When (sharder's clock) this record was first seen."""
    resource_version: str
    """The Lease's resourceVersion as last seen."""

    @property
    def released(self) -> bool:
        """No holder, or held by a sharder (taken over): not a live shard whatever its age."""
        holder = self.record.holder_identity
        return not holder or holder.startswith(SHARDER_HOLDER_PREFIX) or holder != self.name

    def expires_at(self) -> float:
        """When the shard counts as dead if its record does not change again."""
        return self.seen_at + max(self.record.lease_duration_seconds, 1)

    def alive(self, now: float) -> bool:
        """Held by the shard itself and renewed within its lease duration."""
        return not self.released and now < self.expires_at()


@dataclass(frozen=True, slots=True)
class ShardStep:
    """What the sharder does next about one object: the result of :func:`next_step`."""

    action: Literal["none", "wait", "drain", "restore", "assign"]
    """``none``: in line; ``wait``: for the owner's release; ``drain``: add the drain label;
    ``restore``: give an edited object back to its owner; ``assign``: a new owner."""
    shard: str = ""
    """``restore``: the owner the record names; ``assign``: the shard assigned."""
    labels: Mapping[str, str | None] = field(default_factory=dict)
    """Labels to merge (``None`` removes one)."""
    record: Handover | None = None
    """The hand-over record to write with the labels."""
    fence: str = ""
    """``assign``: a shard whose Lease must be taken over before the write."""
    reason: str = ""
    """``assign``: ``drain`` or ``dead`` when it completes a hand-over (for the metric)."""


def next_step(
    obj: JsonObject,
    *,
    ring: str,
    desired: str,
    alive: frozenset[str] | set[str],
    lost: Handover | None = None,
) -> ShardStep:
    """Decide the sharder's next step for ``obj`` (the rules of the module docstring).

    Args:
        obj: The object (metadata is enough).
        ring: The ring's name.
        desired: The ring's owner of the object's hash key.
        alive: The live shards.
        lost: A record an update removed or garbled, if the sharder saw it go.

    """
    shard_key, drain_key = shard_label(ring), drain_label(ring)
    current, drain = shard_of(obj, ring), draining(obj, ring)
    uid = uid_of(obj)
    record = handover_of(obj, ring)
    written = record is not None
    if record is None and lost is not None and lost.uid == uid:
        record = lost
    if record is not None and not record.released:
        owner = record.shard
        if owner in alive:
            if current == owner and written:
                if drain:
                    return ShardStep("wait", owner)
                if owner == desired:
                    return ShardStep("none", owner)
                return ShardStep("drain", owner, {drain_key: "true"})
            # Edited by someone other than the sharder: back to the owner, who alone may
            # have been reconciling it; a move goes through the drain from there.
            labels: dict[str, str | None] = {shard_key: owner}
            if owner != desired:
                labels[drain_key] = "true"
            return ShardStep("restore", owner, labels, record)
        return ShardStep(
            "assign",
            desired,
            {shard_key: desired, drain_key: None},
            Handover(desired, uid, previous=owner, via="fenced"),
            fence=owner,
            reason="dead",
        )
    if record is not None:  # released by its owner, after its last reconcile
        return ShardStep(
            "assign",
            desired,
            {shard_key: desired, drain_key: None},
            Handover(desired, uid, previous=record.shard, via="drain"),
            reason="drain",
        )
    if current and current in alive:
        # Labelled, never confirmed: that shard refused it, and nobody else has it cached.
        return ShardStep(
            "assign",
            current,
            {shard_key: current, drain_key: None},
            Handover(current, uid, via="adopted"),
        )
    if current:
        return ShardStep(
            "assign",
            desired,
            {shard_key: desired, drain_key: None},
            Handover(desired, uid, previous=current, via="fenced"),
            fence=current,
            reason="dead",
        )
    return ShardStep(
        "assign", desired, {shard_key: desired, drain_key: None}, Handover(desired, uid, via="new")
    )


class Sharder:
    """Assigns the objects of one ring to its shards (see the module docstring).

    Args:
        client: Reads Leases and objects; writes labels and fences Leases.
        options: The ring's options.
        namespace: The shard Leases' namespace.
        kinds: The sharded kinds.
        identity: This process's identity (the sharder writes ``sharder:<identity>`` into
            Leases it takes over).
        metrics: Where the ``setpoint_shard_*`` metrics go.
        sync_timeout: Seconds the sharder's cache may take to sync on start.
        clock: Time for Lease expiry (a test seam).

    """

    def __init__(
        self,
        client: ApiClient,
        options: ShardingOptions,
        *,
        namespace: str,
        kinds: Iterable[GroupVersionKind],
        identity: str,
        metrics: Metrics | None = None,
        sync_timeout: float = 120.0,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._options = options
        self._ring_name = options.ring
        self._namespace = namespace
        self._kinds = tuple(dict.fromkeys(kinds))
        self._views = {kind: Metadata(kind) for kind in self._kinds}
        self._identity = identity
        self._metrics = metrics
        self._sync_timeout = sync_timeout
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._cache: Cache | None = None
        self._queue: WorkQueue[tuple[GroupVersionKind, ObjectKey]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self._shards: dict[str, ShardState] = {}
        self._ring = HashRing((), virtual_nodes=options.virtual_nodes)
        self._alive: frozenset[str] = frozenset()
        self._dead_since: dict[str, float] = {}
        self._fenced: set[str] = set()
        self._drain_started: dict[tuple[GroupVersionKind, ObjectKey], float] = {}
        self._lost: dict[tuple[GroupVersionKind, ObjectKey], Handover] = {}
        self._timer: TimerHandle | None = None
        self._published: set[str] = set()
        self._settled = options.wait_for_shards <= 1
        self._settle_timer: TimerHandle | None = None

    # -- Runnable ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"sharder/<ring>"``."""
        return f"sharder/{self._ring_name}"

    @property
    def group(self) -> RunnableGroup:
        """:attr:`RunnableGroup.OTHERS`."""
        return RunnableGroup.OTHERS

    @property
    def needs_leader_election(self) -> bool:
        """``True``: one sharder per ring, in the leader."""
        return True

    def failure(self) -> BaseException | None:
        """An unexpected error that ended a sharder task (never expected)."""
        return self._failure

    @property
    def ring(self) -> HashRing:
        """The ring of live shards as the sharder sees it now."""
        return self._ring

    @property
    def shards(self) -> dict[str, ShardState]:
        """Every shard Lease of the ring the sharder has seen, by name."""
        return dict(self._shards)

    async def start(self) -> None:
        """Sync the sharder's cache, then start assigning (returns once synced).

        Raises:
            CacheSyncTimeout, KindNotServed: the Leases or a sharded kind could not be listed.

        """
        by_kind: dict[Any, KindOptions] = {
            kinds.Lease: KindOptions(
                namespaces=(self._namespace,),
                labels=f"{RING_LABEL}={self._ring_name}",
                transform=strip_managed_fields,
            )
        }
        cache = Cache(
            self._client,
            options=CacheOptions(transform=metadata_only, by_kind=by_kind),
        )
        self._cache = cache
        self._queue = WorkQueue(f"sharder-{self._ring_name}"[:63], metrics=self._metrics)
        leases = cache.informer(kinds.Lease)
        leases.add_handler(
            FuncHandler(
                add=lambda obj, _: self._lease_seen(obj),
                update=lambda _, obj: self._lease_seen(obj),
                delete=lambda obj, _: self._lease_gone(obj),
            )
        )
        for kind in self._kinds:
            informer = cache.informer(self._views[kind])
            informer.add_handler(
                FuncHandler(
                    add=lambda obj, _, k=kind: self._enqueue(k, obj),  # type: ignore[misc]
                    update=lambda old, obj, k=kind: self._updated(k, old, obj),  # type: ignore[misc]
                    delete=lambda obj, _, k=kind: self._forget(k, obj),  # type: ignore[misc]
                )
            )
        await cache.start()
        try:
            await cache.wait_for_sync(self._sync_timeout)
        except BaseException:
            await cache.stop(1.0)
            raise
        if not self._settled:
            when = self._clock.now() + self._options.lease_duration
            self._settle_timer = self._clock.call_at(when, self._settle)
        self._evaluate()
        loop = asyncio.get_running_loop()
        for index in range(self._options.sharder_workers):
            self._tasks.append(loop.create_task(self._worker(), name=f"{self.name} worker {index}"))
        self._tasks.append(loop.create_task(self._periodic(), name=f"{self.name} periodic"))
        for task in self._tasks:
            task.add_done_callback(self._task_done)
        log.info(
            "sharder for ring %s started: %d live shards, kinds %s",
            self._ring_name,
            len(self._ring.shards),
            ", ".join(k.kind for k in self._kinds),
        )

    async def stop(self, timeout: float) -> None:
        """Stop assigning (in-flight writes get ``timeout`` seconds) and stop the cache."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        queue = self._queue
        if queue is not None:
            await queue.shutdown_with_drain(max(0.0, timeout / 2))
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._cache is not None:
            await self._cache.stop(max(0.1, timeout / 2))

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()

    # -- membership ----------------------------------------------------------------------------

    def _lease_seen(self, lease: JsonObject) -> None:
        name = str(metadata_of(lease).get("name") or "")
        record = LeaderElectionRecord.from_lease_spec(lease.get("spec"))
        state = self._shards.get(name)
        rv = resource_version_of(lease)
        if state is None or state.record != record:
            self._shards[name] = ShardState(name, record, self._clock.now(), rv)
        else:
            state.resource_version = rv
        self._evaluate()

    def _lease_gone(self, lease: JsonObject) -> None:
        name = str(metadata_of(lease).get("name") or "")
        self._shards.pop(name, None)
        self._fenced.add(name)  # no Lease, nobody can renew it: nothing left to fence
        self._evaluate()

    def _settle(self) -> None:
        """Start assigning: ``wait_for_shards`` shards are live, or waiting for them ended."""
        if self._settled:
            return
        self._settled = True
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        log.info("ring %s: assigning objects to %d live shards", self._ring_name, len(self._alive))
        self._enqueue_all()

    def _evaluate(self) -> None:
        """Recompute the live shards; on a change rebuild the ring and look at everything."""
        now = self._clock.now()
        alive = frozenset(name for name, state in self._shards.items() if state.alive(now))
        if not self._settled and len(alive) >= self._options.wait_for_shards:
            self._settled = True
            if self._settle_timer is not None:
                self._settle_timer.cancel()
                self._settle_timer = None
        for name in self._shards:
            if name not in alive:
                self._dead_since.setdefault(name, now)
            else:
                self._dead_since.pop(name, None)
                self._fenced.discard(name)
        if alive != self._alive:
            joined, left = sorted(alive - self._alive), sorted(self._alive - alive)
            self._alive = alive
            self._ring = HashRing(alive, virtual_nodes=self._options.virtual_nodes)
            if self._metrics is not None:
                self._metrics.shard_ring_changes_total.labels(self._ring_name).inc()
                self._metrics.shard_ring_members.labels(self._ring_name).set(len(alive))
            log.info(
                "ring %s changed: %d live shards (joined %s, left %s)",
                self._ring_name,
                len(alive),
                ", ".join(joined) or "-",
                ", ".join(left) or "-",
            )
            self._enqueue_all()
        self._arm_timer(now)

    def _arm_timer(self, now: float) -> None:
        upcoming = [s.expires_at() for n, s in self._shards.items() if n in self._alive]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if upcoming:
            when = max(min(upcoming), now) + 0.01
            self._timer = self._clock.call_at(when, self._evaluate)

    async def _fence(self, shard: str) -> bool:
        """Take a dead shard's Lease over so a frozen replica cannot resume; ``True`` if fenced."""
        if shard in self._fenced:
            return True
        state = self._shards.get(shard)
        if state is None:
            # No Lease seen for it: either long gone or never existed; nobody can renew it.
            self._fenced.add(shard)
            return True
        if state.released:
            self._fenced.add(shard)
            return True
        if state.alive(self._clock.now()):
            return False
        try:
            lease = await self._client.get(kinds.Lease, shard, namespace=self._namespace)
        except NotFound:
            self._fenced.add(shard)
            return True
        current = LeaderElectionRecord.from_lease_spec(lease.get("spec"))
        if current != state.record:
            return False  # it renewed after all; the watch will say so
        now = datetime.now(UTC)
        spec = lease.setdefault("spec", {})
        spec.update(
            {
                "holderIdentity": f"{SHARDER_HOLDER_PREFIX}{self._identity}"[:253],
                "acquireTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "leaseTransitions": current.leader_transitions + 1,
            }
        )
        try:
            await self._client.update(lease)
        except (Conflict, NotFound):
            return False
        log.info("ring %s: shard %s is dead; took its Lease over", self._ring_name, shard)
        self._fenced.add(shard)
        return True

    # -- objects -------------------------------------------------------------------------------

    def _enqueue(self, kind: GroupVersionKind, obj: JsonObject) -> None:
        if self._queue is not None:
            self._queue.add((kind, key_of(obj)))

    def _updated(self, kind: GroupVersionKind, old: JsonObject, new: JsonObject) -> None:
        """Remember a record an update removed or garbled, then look at the object.

        Nobody but the sharder and the owner writes the record, and neither removes it. An
        update that kept the ring's labels and record (:func:`same_assignment`) is not
        looked at: :func:`next_step` decides by nothing else that can change, and the
        object was looked at (or is queued) since they last changed; a change of the ring
        looks at every object anyway.
        """
        ring = self._ring_name
        if same_assignment(old, new, ring):
            return
        item = (kind, key_of(new))
        if handover_of(new, ring) is not None:
            self._lost.pop(item, None)
        else:
            before = handover_of(old, ring)
            if before is not None:
                self._lost[item] = before
        self._enqueue(kind, new)

    def _forget(self, kind: GroupVersionKind, obj: JsonObject) -> None:
        self._lost.pop((kind, key_of(obj)), None)

    def _enqueue_all(self) -> None:
        cache, queue = self._cache, self._queue
        if cache is None or queue is None:
            return
        for kind in self._kinds:
            for key in list(cache.informer(self._views[kind]).store):
                queue.add((kind, key))

    async def _worker(self) -> None:
        queue = self._queue
        assert queue is not None
        while True:
            try:
                item = await queue.get()
            except ShutDown:
                return
            try:
                retry_after = await self._sync(*item)
            except asyncio.CancelledError:
                raise
            except (ClientError, TimeoutError) as exc:
                log.info("sharder: %s %s: %s (retrying)", item[0].kind, item[1], exc)
                queue.add_rate_limited(item)
            except Exception:
                log.exception("sharder: unexpected error on %s %s", item[0].kind, item[1])
                queue.add_rate_limited(item)
            else:
                queue.forget(item)
                if retry_after is not None:
                    queue.add_after(item, retry_after)
            finally:
                queue.done(item)

    async def _sync(self, kind: GroupVersionKind, key: ObjectKey) -> float | None:
        """Bring one object's labels in line with the ring; a delay means "look again then"."""
        cache = self._cache
        assert cache is not None
        obj = cache.informer(self._views[kind]).store.get(key)
        item = (kind, key)
        if obj is None:
            self._drain_started.pop(item, None)
            self._lost.pop(item, None)
            return None
        if not self._ring:
            return None
        if not self._settled and not shard_of(obj, self._ring_name):
            return None  # an unlabelled object waits for wait_for_shards; _settle looks again
        ring = self._ring_name
        desired = self._ring.owner(hash_key_of(obj, self._options.key))
        assert desired is not None
        step = next_step(
            obj, ring=ring, desired=desired, alive=self._alive, lost=self._lost.get(item)
        )
        if step.action in ("none", "wait"):
            return None
        if step.action == "drain":
            await self._patch(kind, key, obj, step)
            self._drain_started.setdefault(item, self._clock.now())
            return None
        if step.action == "restore":
            log.warning(
                "ring %s: someone other than the sharder changed the shard label or the "
                "hand-over record of %s %s (label %r, record %r; it belongs to %s): giving "
                "it back to %s. `setpoint generate sharding-policy` refuses such edits",
                ring,
                kind.kind,
                key,
                shard_of(obj, ring),
                annotations_of(obj).get(handover_annotation(ring), ""),
                step.shard,
                step.shard,
            )
            await self._patch(kind, key, obj, step)
            self._lost.pop(item, None)
            return None
        if step.fence and not await self._fence(step.fence):
            return _FENCE_RETRY
        await self._patch(kind, key, obj, step)
        self._lost.pop(item, None)
        self._observe_handover(item, step.fence, step.reason)
        return None

    def _observe_handover(
        self, item: tuple[GroupVersionKind, ObjectKey], previous: str, reason: str
    ) -> None:
        started = self._drain_started.pop(item, None)
        if self._metrics is None:
            return
        if reason == "dead":
            dead_since = self._dead_since.get(previous)
            if dead_since is not None:
                seconds = max(0.0, self._clock.now() - dead_since)
                self._metrics.shard_handover_seconds.labels(self._ring_name, "dead").observe(
                    seconds
                )
        elif started is not None:
            self._metrics.shard_handover_seconds.labels(self._ring_name, "drain").observe(
                self._clock.now() - started
            )

    async def _patch(
        self, kind: GroupVersionKind, key: ObjectKey, obj: JsonObject, step: ShardStep
    ) -> None:
        metadata: dict[str, Any] = {
            "resourceVersion": resource_version_of(obj),
            "labels": dict(step.labels),
        }
        if step.record is not None:
            metadata["annotations"] = {handover_annotation(self._ring_name): step.record.render()}
        await self._client.patch(
            kind, key.name, MergePatch({"metadata": metadata}), namespace=key.namespace or None
        )

    # -- periodic work ---------------------------------------------------------------------

    async def _periodic(self) -> None:
        clock = self._clock
        last_resync = clock.now()
        while True:
            await clock_sleep(clock, _COUNT_PERIOD)
            self._evaluate()
            self.publish_counts()
            await self._clean_up_leases()
            if clock.now() - last_resync >= self._options.resync_period:
                last_resync = clock.now()
                self._enqueue_all()

    def counts(self) -> Counter[str]:
        """Objects per shard label value across the sharded kinds (``""``: unassigned)."""
        counted: Counter[str] = Counter()
        cache = self._cache
        if cache is None:
            return counted
        for kind in self._kinds:
            for _, obj in cache.informer(self._views[kind]).store.items():
                counted[shard_of(obj, self._ring_name)] += 1
        return counted

    def publish_counts(self) -> None:
        """Set ``setpoint_shard_objects`` from :meth:`counts` (0 for live shards with none)."""
        if self._metrics is None:
            return
        counted = self.counts()
        for shard in self._alive:
            counted.setdefault(shard, 0)
        counted.setdefault("", 0)
        gauge = self._metrics.shard_objects
        for shard, count in counted.items():
            gauge.labels(self._ring_name, shard).set(count)
        for gone in self._published - set(counted):
            gauge.remove(self._ring_name, gone)
        self._published = set(counted)

    async def _clean_up_leases(self) -> None:
        """Delete Leases the sharder took over long ago (their objects have moved)."""
        now = self._clock.now()
        for name, state in list(self._shards.items()):
            holder = state.record.holder_identity
            if not holder.startswith(SHARDER_HOLDER_PREFIX):
                continue
            age = now - state.seen_at
            if age < _CLEANUP_LEASE_DURATIONS * self._options.lease_duration:
                continue
            try:
                await self._client.delete(
                    kinds.Lease,
                    name,
                    namespace=self._namespace,
                    preconditions=Preconditions(resource_version=state.resource_version),
                )
            except (Conflict, NotFound):
                continue
            except ClientError as exc:
                log.info("sharder: could not delete the Lease of dead shard %s: %s", name, exc)
