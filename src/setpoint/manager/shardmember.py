"""One replica's part in a ring: its shard Lease, its key gates and its drain acknowledgements.

The manager builds one :class:`ShardMember` when ``ManagerOptions.sharding`` is set and hands
it every sharded controller before the manager runs (decision 0011).

Expected Flow:
    1. :meth:`ShardMember.adopt` (per sharded controller, before the cache starts) narrows
       the controller's cache so the ``for_`` kind's informer lists and watches only objects
       labelled ``shard.sharding.setpoint.dev/<ring>=<this shard>``, registers this kind's
       :class:`ShardGate` on that informer, and sets it as the controller's key gate.
    2. :meth:`ShardMember.elector` campaigns for the shard Lease (named after the shard,
       labelled with the ring, uncontended); the manager starts the sharded controllers only
       once it is held, and stops them at once (``stop(0)``) if it is lost.
    3. An object in this replica's cache is reconciled only while its hand-over record
       (annotation ``handover.sharding.setpoint.dev/<ring>``, a
       :class:`~setpoint.manager.sharding.Handover`) names this shard and the object's UID:
       the sharder writes it, with the label, only after the previous owner released the
       object or was fenced. A label edited by anyone else brings the object into this
       cache without such a record; it is refused (and never acknowledged) until the
       sharder repairs it.
    4. When the sharder asks for an object back (the drain label appears on it), the gate
       refuses the key from that moment, waits until no sharded controller of this replica
       holds the key, then removes the shard and drain labels and writes a *release* record
       in one merge patch that carries the resourceVersion it saw. The object then leaves
       this replica's informer.
    5. On shutdown the manager stops the sharded controllers (draining in-flight reconciles),
       then releases the Lease, so the sharder reassigns the objects at once.

Guarantees:
    - A key's reconcile starts only while the shard Lease is held (checked with the clock,
      as ``LeaderElector.is_leader`` does), while its object is in this replica's cache with
      a record assigning it to this shard and without a drain label, or after it left this
      cache while it was assigned here (a tombstone: it was deleted, or relabelled by
      someone else; the reconcile of a deletion still runs).
    - The release is written only after the last reconcile of the key in this process has
      ended, and no reconcile of it starts afterwards until the sharder assigns it to this
      shard again.
    - An object that was never confirmed for this shard leaves no tombstone and is never
      acknowledged: its record (and so its previous owner's hand-over) is not this
      replica's to end.

Caveats:
    - An object deleted while it is being handed over (no finalizer) is not reconciled for
      its deletion by either replica; reconciles are level-based and the garbage collector
      removes its children.
    - An object relabelled away by someone else looks, to this replica, like a deletion
      (the server sends the last matching state): the reconcile of its deletion runs here,
      while no other replica reconciles it, until the sharder restores the label.
    - Only the ``for_`` kind is sharded. Objects of ``owns``/``watches`` kinds are cached by
      every replica; their events enqueue keys the gate then refuses unless they are ours.
    - The record is not a secret: a writer who forges the label and the record as the
      sharder would write them is refused only by the admission policy
      (:mod:`setpoint.manager.shardpolicy`).

Errors:
    ClientError: never escapes. A failed acknowledgement is retried with backoff (up to
        5 s apart) for as long as the object carries the drain label.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, key_of, resource_version_of, uid_of
from setpoint.client.errors import ClientError, Conflict, NotFound
from setpoint.client.patch import MergePatch
from setpoint.manager.options import LeaderElectionOptions, LeadershipLossPolicy
from setpoint.manager.resourcelock import LeaseLock
from setpoint.manager.sharding import (
    ANNOTATION_CONTROLLERS,
    ANNOTATION_KINDS,
    ANNOTATION_VIRTUAL_NODES,
    RING_LABEL,
    Handover,
    ShardingOptions,
    default_shard_id,
    drain_label,
    draining,
    handover_annotation,
    shard_label,
    verified_shard,
)

if TYPE_CHECKING:
    from setpoint.api.clock import Clock
    from setpoint.cache.cache import Cache
    from setpoint.cache.store import Store
    from setpoint.client.protocols import ApiClient
    from setpoint.controller.controller import Controller
    from setpoint.manager.leaderelection import LeaderElector
    from setpoint.observability.metrics import Metrics

__all__ = ["ShardGate", "ShardMember"]

log = logging.getLogger("setpoint.manager.sharding")

TOMBSTONE_TTL: Final = 600.0
"""Seconds a deleted object's key stays admitted for the reconcile of its deletion."""

_HOLD_POLL: Final = 0.02
_ACK_BACKOFF_MAX: Final = 5.0


@dataclass(eq=False)
class ShardGate:
    """The key gate of one sharded kind in one replica (see the module docstring).

    It is both the :class:`~setpoint.controller.controller.KeyGate` of the kind's sharded
    controllers and a handler on the kind's (narrowed) informer, where it notices drain
    requests, deletions and objects coming back.
    """

    member: ShardMember
    kind: GroupVersionKind
    store: Store
    controllers: list[Controller] = field(default_factory=list)
    released: set[ObjectKey] = field(default_factory=set)
    """Keys handed over (or being handed over) by this replica."""
    tombstones: dict[ObjectKey, float] = field(default_factory=dict)
    """Keys deleted while they belonged here, and when (monotonic)."""
    acking: set[ObjectKey] = field(default_factory=set)

    # -- KeyGate ----------------------------------------------------------------------------

    def admits(self, key: ObjectKey) -> bool:
        """Whether a reconcile of ``key`` may start now (see the module's Guarantees)."""
        if not self.member.holding or key in self.released:
            return False
        obj = self.store.get(key)
        if obj is None:
            return key in self.tombstones
        return self.mine(obj) and not draining(obj, self.member.ring)

    def mine(self, obj: JsonObject) -> bool:
        """Whether ``obj``'s label and hand-over record both assign it to this shard."""
        return verified_shard(obj, self.member.ring) == self.member.shard

    # -- ResourceEventHandler ---------------------------------------------------------------

    def on_add(self, obj: JsonObject, *, is_initial_list: bool) -> None:
        """An object labelled for this shard appeared: admit it again if it came back."""
        self._seen(obj)

    def on_update(self, old: JsonObject, new: JsonObject) -> None:
        """A change: start handing the object over when it carries the drain label.

        An object whose record now confirms this shard (the sharder repaired or assigned it
        in place) is queued, since a change of annotations alone may pass no predicate.
        """
        self._seen(new)
        if self.mine(new) and not self.mine(old):
            for controller in self.controllers:
                controller.enqueue(key_of(new))

    def on_delete(self, obj: JsonObject, *, final_state_unknown: bool) -> None:
        """Gone from this shard: handed over, or never ours, or gone while it was ours.

        Handed over or never confirmed for this shard: nothing to do. Deleted, or relabelled
        by someone else, while it was ours: reconcile it as a deletion (a tombstone).
        """
        key = key_of(obj)
        if key in self.released or not self.mine(obj):
            return
        now = time.monotonic()
        self.tombstones[key] = now
        if len(self.tombstones) > 1024:
            cutoff = now - TOMBSTONE_TTL
            for old in [k for k, t in self.tombstones.items() if t < cutoff]:
                del self.tombstones[old]

    def _seen(self, obj: JsonObject) -> None:
        key = key_of(obj)
        self.tombstones.pop(key, None)
        if not self.mine(obj):
            return  # not confirmed for this shard: refused, never acknowledged
        if draining(obj, self.member.ring):
            if key not in self.acking:
                self.acking.add(key)
                self.member.spawn(self._acknowledge(key), f"drain {self.kind.kind} {key}")
        elif key in self.released and key not in self.acking:
            # Labelled for this shard again (the ring moved it back).
            self.released.discard(key)
            for controller in self.controllers:
                controller.enqueue(key)

    # -- the handover -------------------------------------------------------------------------

    async def _acknowledge(self, key: ObjectKey) -> None:
        """Let ``key`` go: wait for in-flight reconciles, then release it.

        The release removes both labels and writes the release record, in one patch.
        """
        ring = self.member.ring
        delay = 0.2
        try:
            while True:
                # The queue has no per-key "done" signal; a short poll, bounded by the
                # reconcile timeout of whatever holds the key.
                while any(c.holds(key) for c in self.controllers):  # noqa: ASYNC110
                    await asyncio.sleep(_HOLD_POLL)
                obj = self.store.get(key)
                if obj is None or not self.mine(obj):
                    # Gone (deleted, or relabelled), or its record was edited: not ours to
                    # release; _seen starts again once the sharder has repaired it.
                    return
                if not draining(obj, ring):
                    self.released.discard(key)
                    for controller in self.controllers:
                        controller.enqueue(key)
                    return
                self.released.add(key)
                release = Handover(self.member.shard, uid_of(obj), released=True)
                patch = MergePatch(
                    {
                        "metadata": {
                            "resourceVersion": resource_version_of(obj),
                            "labels": {shard_label(ring): None, drain_label(ring): None},
                            "annotations": {handover_annotation(ring): release.render()},
                        }
                    }
                )
                try:
                    await self.member.client.patch(
                        self.kind, key.name, patch, namespace=key.namespace or None
                    )
                except NotFound:
                    return
                except Conflict:
                    # Changed meanwhile: wait for the newer version, then look again.
                    await asyncio.sleep(min(delay, 1.0))
                    continue
                except ClientError as exc:
                    log.warning(
                        "could not hand %s %s over (retrying): %s", self.kind.kind, key, exc
                    )
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _ACK_BACKOFF_MAX)
                    continue
                self.member.drained()
                return
        finally:
            self.acking.discard(key)


class ShardMember:
    """The shard of this replica in a ring: the Lease, the gates, the acknowledgements.

    See the module docstring for the flow and guarantees.

    Args:
        client: The client for the Lease and the label patches.
        options: The validated sharding options.
        namespace: Where the shard Lease lives.
        metrics: Where ``setpoint_shard_drains_total`` is counted.

    """

    def __init__(
        self,
        client: ApiClient,
        options: ShardingOptions,
        *,
        namespace: str,
        metrics: Metrics | None = None,
    ) -> None:
        self.client = client
        """The client used for label patches (and by default for the Lease)."""
        self.options = options
        """The sharding options."""
        self.ring = options.ring
        """The ring's name."""
        self.shard = options.shard_id or default_shard_id()
        """This replica's shard name (the Lease's name, the label value)."""
        self.namespace = namespace
        """The shard Lease's namespace."""
        self._metrics = metrics
        self._gates: dict[tuple[int, GroupVersionKind], ShardGate] = {}
        self._controllers: list[Controller] = []
        self._elector: LeaderElector | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def selector(self) -> str:
        """The label selector of this shard: ``shard.sharding.setpoint.dev/<ring>=<shard>``."""
        return f"{shard_label(self.ring)}={self.shard}"

    @property
    def controllers(self) -> list[Controller]:
        """The sharded controllers adopted so far."""
        return list(self._controllers)

    @property
    def kinds(self) -> tuple[GroupVersionKind, ...]:
        """The sharded kinds (the ``for_`` kinds of the adopted controllers), in order."""
        return tuple(dict.fromkeys(kind for _, kind in self._gates))

    @property
    def holding(self) -> bool:
        """Whether the shard Lease is held right now (read with the clock, never stale)."""
        return self._elector is not None and self._elector.is_leader

    def adopt(self, controller: Controller) -> None:
        """Shard ``controller``: narrow its cache to this shard, gate its keys.

        Raises:
            ValueError: the controller has no ``for_`` kind (there is nothing to shard).
            CacheError: the kind's informer has started already (adopt before running).

        """
        kind = controller.for_kind
        if kind is None:
            raise ValueError(
                f"ShardingOptions.controllers names {controller.controller_name!r}, which has "
                "no for_() kind: sharding splits the objects a controller reconciles"
            )
        cache = controller.cache
        slot = (id(cache), kind)
        gate = self._gates.get(slot)
        if gate is None:
            if self.selector not in cache.narrowed(kind):
                cache.narrow(kind, self.selector)
            informer = cache.informer(kind)
            gate = ShardGate(self, kind, informer.store)
            informer.add_handler(gate)
            self._gates[slot] = gate
        gate.controllers.append(controller)
        controller.set_key_gate(gate)
        self._controllers.append(controller)

    def gate(self, cache: Cache, kind: GroupVersionKind) -> ShardGate | None:
        """The gate of ``kind`` in ``cache``, if a controller of it was adopted."""
        return self._gates.get((id(cache), kind))

    def annotations(self) -> Mapping[str, str]:
        """What the Lease advertises: sharded kinds, controllers, ring points (for ``doctor``)."""
        return {
            ANNOTATION_KINDS: ",".join(
                f"{k.group}/{k.version}/{k.kind}" if k.group else f"{k.version}/{k.kind}"
                for k in self.kinds
            ),
            ANNOTATION_CONTROLLERS: ",".join(c.controller_name for c in self._controllers),
            ANNOTATION_VIRTUAL_NODES: str(self.options.virtual_nodes),
        }

    def elector(
        self, lease_client: ApiClient, *, clock: Clock, metrics: Metrics | None
    ) -> LeaderElector:
        """Build the elector that holds this shard's Lease (once; the manager starts it)."""
        from setpoint.manager.leaderelection import LeaderElector

        opts = self.options
        labels = {**opts.labels, RING_LABEL: self.ring}
        lock = LeaseLock(
            lease_client,
            namespace=self.namespace,
            name=self.shard,
            identity=self.shard,
            labels=labels,
            annotations=self.annotations,
        )
        self._elector = LeaderElector(
            lock,
            LeaderElectionOptions(
                name=self.shard,
                namespace=self.namespace,
                identity=self.shard,
                lease_duration=opts.lease_duration,
                renew_deadline=opts.renew_deadline,
                retry_period=opts.retry_period,
                release_on_cancel=True,
                on_lost=LeadershipLossPolicy.FAIL,
            ),
            clock=clock,
            metrics=metrics,
        )
        return self._elector

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run an acknowledgement in a task this member owns (cancelled by :meth:`close`)."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def drained(self) -> None:
        """Count one acknowledged drain."""
        if self._metrics is not None:
            self._metrics.shard_drains_total.labels(self.ring).inc()

    async def close(self) -> None:
        """Cancel acknowledgements still running (the manager calls it after the controllers)."""
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def describe(self) -> str:
        """``shard <name> of ring <ring> (Lease <namespace>/<name>)``."""
        return f"shard {self.shard} of ring {self.ring} (Lease {self.namespace}/{self.shard})"
