"""Sharding's vocabulary: options, label keys, hand-over records, the hash ring, the hash key.

Decision 0011 (``docs/decisions/0011-sharding.md``) describes the design. In short: every
replica holds a shard Lease (:mod:`setpoint.manager.shardmember`); the live Leases of a ring
form a :class:`HashRing`; the leader's sharder (:mod:`setpoint.manager.sharder`) writes each
object's shard as the label :func:`shard_label`, together with a :class:`Handover` record in
the annotation :func:`handover_annotation`, moving objects between live shards through the
drain label :func:`drain_label`; each replica's informers select only its own shard, and it
reconciles an object only while the record confirms the label (:func:`verified_shard`), so
a label edited by anyone else moves nothing::

    manager = Manager(client, ManagerOptions(
        leader_election=LeaderElectionOptions(name="widgets"),
        sharding=ShardingOptions(ring="widgets", controllers=("widget",)),
    ))
    manager.controller("widget").for_(Widget).build(reconcile)   # sharded

This module is pure: no I/O, so the CLI (``setpoint doctor shards``) and tests use it too.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import re
import socket
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from setpoint.api.meta import JsonObject, annotations_of, labels_of, metadata_of, uid_of
from setpoint.api.validation import is_dns1123_label, is_qualified_name

__all__ = [
    "ANNOTATION_CONTROLLERS",
    "ANNOTATION_KINDS",
    "ANNOTATION_VIRTUAL_NODES",
    "RING_LABEL",
    "SHARDER_HOLDER_PREFIX",
    "VIRTUAL_NODES",
    "Handover",
    "HashRing",
    "ShardKey",
    "ShardingOptions",
    "default_shard_id",
    "drain_label",
    "draining",
    "handover_annotation",
    "handover_of",
    "hash_key_of",
    "shard_label",
    "shard_of",
    "verified_shard",
]

RING_LABEL: Final = "sharding.setpoint.dev/ring"
"""Label on a shard Lease naming its ring; the sharder and ``setpoint doctor shards`` select
the ring's Leases by it."""

ANNOTATION_KINDS: Final = "sharding.setpoint.dev/kinds"
"""Annotation on a shard Lease: the sharded kinds, ``group/version/Kind`` joined by ``,``."""

ANNOTATION_CONTROLLERS: Final = "sharding.setpoint.dev/controllers"
"""Annotation on a shard Lease: the sharded controllers of that replica, joined by ``,``."""

ANNOTATION_VIRTUAL_NODES: Final = "sharding.setpoint.dev/virtual-nodes"
"""Annotation on a shard Lease: that replica's :attr:`ShardingOptions.virtual_nodes`, so
``setpoint doctor shards`` rebuilds the ring the sharder uses (absent: :data:`VIRTUAL_NODES`)."""

SHARDER_HOLDER_PREFIX: Final = "sharder:"
"""``holderIdentity`` prefix the sharder writes when it takes over a dead shard's Lease."""

VIRTUAL_NODES: Final = 100
"""Points each shard puts on the ring by default: the largest of 2 shards owns a median 52.7%
of the hash space (p90 55.6%) over random shard names, of 3 shards 35.8% (p90 38.1%)
(``bench/sharder_cpu.py --ring``, docs/benchmarks.md). Kept as the default because other
points move objects of running rings (:attr:`ShardingOptions.virtual_nodes`)."""

_SHARD_LABEL_PREFIX: Final = "shard.sharding.setpoint.dev/"
_DRAIN_LABEL_PREFIX: Final = "drain.sharding.setpoint.dev/"
_HANDOVER_PREFIX: Final = "handover.sharding.setpoint.dev/"


def shard_label(ring: str) -> str:
    """The label key holding an object's shard in ``ring``.

    ``shard.sharding.setpoint.dev/<ring>``.
    """
    return _SHARD_LABEL_PREFIX + ring


def drain_label(ring: str) -> str:
    """The label key asking an object's owner to let it go.

    ``drain.sharding.setpoint.dev/<ring>``.
    """
    return _DRAIN_LABEL_PREFIX + ring


def handover_annotation(ring: str) -> str:
    """The annotation key holding an object's :class:`Handover` record in ``ring``.

    ``handover.sharding.setpoint.dev/<ring>``. Only the sharder writes an assignment into
    it, and only an owner writes its release; a replica reconciles an object only while the
    record confirms the shard label (:func:`verified_shard`).
    """
    return _HANDOVER_PREFIX + ring


@dataclass(frozen=True, slots=True)
class Handover:
    """The hand-over record of one object in one ring: who may reconcile it, and why.

    The sharder writes it together with the shard label, in one merge patch carrying the
    object's resourceVersion, only once the previous owner is known to have stopped (it
    released the object, its Lease was fenced, or nobody ever owned it). The owner replaces
    it by a *release* in the same patch that removes its labels, after its last reconcile
    of the object ended. A shard label that this record does not confirm (edited by anyone
    else) is not acted on by any replica; the sharder repairs it (decision 0011).

    Text form (the annotation's value)::

        shard=<shard>,uid=<uid>,from=<previous shard>,via=<new|drain|fenced|adopted>
        released=<shard>,uid=<uid>

    The UID ties the record to this object: labels and annotations copied onto another
    object, or restored from a backup (a new UID), confirm nothing.
    """

    shard: str
    """The shard assigned (or, when :attr:`released`, the shard that let the object go)."""
    uid: str
    """The object's ``metadata.uid``."""
    released: bool = False
    """``True``: a release, written by :attr:`shard` after its last reconcile ended."""
    previous: str = ""
    """An assignment's previous owner (``""``: none)."""
    via: str = ""
    """How the previous owner stopped: ``new`` (there was none), ``drain`` (it released the
    object), ``fenced`` (its Lease was taken over) or ``adopted`` (a shard label nobody had
    confirmed, so nobody reconciled it)."""

    def render(self) -> str:
        """The annotation's value (see the class docstring)."""
        if self.released:
            return f"released={self.shard},uid={self.uid}"
        return f"shard={self.shard},uid={self.uid},from={self.previous},via={self.via}"

    @classmethod
    def parse(cls, text: object) -> Handover | None:
        """The record in ``text``, or ``None`` when it is not one (missing, edited, garbled)."""
        if not isinstance(text, str) or len(text) > 512:
            return None
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            if not sep or name in fields:
                return None
            fields[name] = value
        uid = fields.get("uid", "")
        if not uid:
            return None
        if set(fields) == {"released", "uid"}:
            shard = fields["released"]
            return cls(shard, uid, released=True) if is_dns1123_label(shard) else None
        if set(fields) != {"shard", "uid", "from", "via"}:
            return None
        shard, previous, via = fields["shard"], fields["from"], fields["via"]
        if not is_dns1123_label(shard) or (previous and not is_dns1123_label(previous)):
            return None
        if via not in ("new", "drain", "fenced", "adopted"):
            return None
        return cls(shard, uid, previous=previous, via=via)


def handover_of(obj: JsonObject, ring: str) -> Handover | None:
    """``obj``'s hand-over record in ``ring``, if it has one for this very object (its UID)."""
    record = Handover.parse(annotations_of(obj).get(handover_annotation(ring)))
    if record is None or record.uid != uid_of(obj):
        return None
    return record


def verified_shard(obj: JsonObject, ring: str) -> str:
    """The shard that may reconcile ``obj``: its shard label, when its record confirms it.

    ``""`` when the label is missing, or the record is missing, a release, for another
    object (UID), or names another shard (the label was edited by someone other than the
    sharder). The drain label is not looked at here.
    """
    shard = shard_of(obj, ring)
    if not shard:
        return ""
    record = handover_of(obj, ring)
    if record is None or record.released or record.shard != shard:
        return ""
    return shard


class ShardKey(Enum):
    """What an object is hashed by to find its shard."""

    UID = "uid"
    """``metadata.uid``: an even spread, independent of names (the default)."""

    NAMESPACE = "namespace"
    """``metadata.namespace``: every object of a namespace lands on one shard, so related
    objects stay together (and a namespace's load is not split). Cluster-scoped objects have
    no namespace and fall back to their UID."""


def hash_key_of(obj: JsonObject, key: ShardKey) -> str:
    """The text ``obj`` is hashed by under ``key`` (its UID, or its namespace)."""
    m = metadata_of(obj)
    if key is ShardKey.NAMESPACE:
        namespace = m.get("namespace")
        if isinstance(namespace, str) and namespace:
            return "ns/" + namespace
    uid = m.get("uid")
    return "uid/" + (uid if isinstance(uid, str) else "")


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Consistent hashing over a set of shard names.

    Each shard puts ``virtual_nodes`` points (default :data:`VIRTUAL_NODES`) on a 64-bit
    circle (``blake2b`` of ``"<shard>#<i>"``); a key belongs to the shard owning the first
    point at or after the key's hash, wrapping around. Adding or removing one of ``n`` shards
    moves about ``1/n`` of the keys, and only to or from that shard. The same shard names
    give the same ring in every process (no randomness, no process-specific hash seed).
    """

    __slots__ = ("_owners", "_points", "shards")

    def __init__(self, shards: Iterable[str], *, virtual_nodes: int = VIRTUAL_NODES) -> None:
        if virtual_nodes < 1:
            raise ValueError(f"HashRing: virtual_nodes must be >= 1, not {virtual_nodes}")
        self.shards: tuple[str, ...] = tuple(sorted(set(shards)))
        """The member shards, sorted."""
        points = sorted(
            (_point(f"{shard}#{i}"), shard) for shard in self.shards for i in range(virtual_nodes)
        )
        self._points = [p for p, _ in points]
        self._owners = [s for _, s in points]

    def __bool__(self) -> bool:
        return bool(self.shards)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashRing) and other.shards == self.shards

    def __hash__(self) -> int:
        return hash(self.shards)

    def __repr__(self) -> str:
        return f"HashRing({list(self.shards)!r})"

    def owner(self, key: str) -> str | None:
        """The shard ``key`` belongs to, or ``None`` when the ring is empty."""
        if not self._points:
            return None
        index = bisect.bisect_left(self._points, _point(key))
        return self._owners[index % len(self._owners)]

    def shares(self) -> dict[str, float]:
        """The fraction of the hash space each shard owns (sums to 1; for ``doctor``)."""
        if not self._points:
            return {}
        space = 2**64
        shares = dict.fromkeys(self.shards, 0.0)
        previous = self._points[-1] - space
        for point, owner in zip(self._points, self._owners, strict=True):
            shares[owner] += (point - previous) / space
            previous = point
        return shares


_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def default_shard_id() -> str:
    """``<host name>-<8 hex digits>``: a DNS label unique per process, readable on the Lease."""
    host = os.environ.get("HOSTNAME") or socket.gethostname() or "shard"
    host = _NOT_LABEL.sub("-", host.lower()).strip("-")[:50].strip("-") or "shard"
    return f"{host}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, kw_only=True)
class ShardingOptions:
    """Sharding of chosen controllers across the manager's replicas (decision 0011).

    Timing rules are leader election's (:class:`~setpoint.manager.options.LeaderElectionOptions`)
    and are checked the same way: a shard stops acting ``renew_deadline`` after its last
    successful renewal, before the sharder may consider it dead (``lease_duration`` after it
    saw that renewal).
    """

    ring: str
    """The ring's name: a DNS label of at most 50 characters (it becomes part of label keys).
    Replicas of one operator share it; two operators sharding one kind need two rings.
    Required."""

    controllers: tuple[str, ...] = ()
    """Names of the controllers to shard (as given to ``manager.controller(name)``). The
    ``for_`` kind of each is sharded; every replica runs them, each on its own share.
    At least one, unless :attr:`every_controller` is set."""

    every_controller: bool = False
    """Shard every controller that has a ``for_`` kind, whatever its name (:attr:`controllers`
    must then be empty). With ``ManagerOptions.processes``, it makes every worker of every
    replica a shard of one ring (decision 0038); without sharding options the workers of one
    Pod split by key instead."""

    key: ShardKey = ShardKey.UID
    """What objects are hashed by: ``UID`` (default) or ``NAMESPACE``."""

    shard_id: str | None = None
    """This replica's shard name: the Lease's name and the shard label's value (a DNS label).
    ``None``: :func:`default_shard_id`, unique per process. Set it only to something unique
    per running process (a pod name): two processes with one id would share a shard."""

    namespace: str | None = None
    """Namespace of the shard Leases. ``None``: the leader election Lease's namespace."""

    lease_duration: float = 15.0
    """Seconds the sharder waits after it last saw a shard's Lease renewed before it
    considers the shard dead and moves its objects. A whole number."""

    renew_deadline: float = 10.0
    """Seconds after its last successful renewal was sent that a shard keeps reconciling
    while renewals fail; then its sharded controllers stop and the manager fails."""

    retry_period: float = 2.0
    """Seconds between renewals of the shard Lease."""

    sharder_workers: int = 8
    """Label writes the sharder has in flight at most (assignments, drains)."""

    resync_period: float = 60.0
    """Seconds between the sharder's full passes over every sharded object (besides the
    passes a ring change or an object event triggers)."""

    virtual_nodes: int = VIRTUAL_NODES
    """Points per shard on the ring (at least 1): more points split the hash space more evenly,
    at a ring build cost (on each change of the live shards) linear in shards x points.

    Measured over random shard names (``bench/sharder_cpu.py --ring``, docs/benchmarks.md),
    the largest of 2 shards owns a median 52.7% of the objects with 100 points (p90 55.6%),
    51.2% with 400 and 50.8% with 1000 (p90 51.8%); of 4 shards 27.6%, 26.1% and 25.7%. A
    4-shard ring of 1000 points builds in about 4 ms and a lookup costs the same as with
    100. 1000 suits siblings that split one machine's cores evenly (the workers of
    ``ManagerOptions.processes`` on a ring).

    Changing it on a running ring moves objects (each through a drain), as the leader's
    sharder alone places them: give every replica the same value, or the ring changes each
    time leadership moves. Each replica advertises its value on its shard Lease
    (:data:`ANNOTATION_VIRTUAL_NODES`) for ``setpoint doctor shards``."""

    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra labels for this replica's shard Lease."""

    wait_for_shards: int = 1
    """Before its first assignment of an unlabelled object, the sharder waits until this many
    shards are live, or :attr:`lease_duration` seconds after it started, whichever comes
    first; objects already labelled keep their owners meanwhile. 1 (default): assign at once.
    The workers of ``ManagerOptions.processes`` on a ring raise it to their count, so that workers
    started together split the objects from the start instead of the first one taking all
    and draining half of them away again."""

    def __post_init__(self) -> None:
        where = "ShardingOptions"
        if not is_dns1123_label(self.ring) or len(self.ring) > 50:
            raise ValueError(
                f"{where}.ring={self.ring!r} must be a DNS label of at most 50 characters "
                "(lowercase letters, digits and '-'): it is part of the shard and drain label "
                "keys"
            )
        if self.every_controller:
            if self.controllers:
                raise ValueError(
                    f"{where}: every_controller=True shards every controller with a for_() "
                    f"kind; leave controllers empty (it names {self.controllers!r})"
                )
        elif isinstance(self.controllers, str) or not self.controllers:
            raise ValueError(
                f"{where}.controllers={self.controllers!r} must be a tuple of at least one "
                "controller name, e.g. controllers=('widget',), or set every_controller=True"
            )
        for name in self.controllers:
            if not isinstance(name, str) or not is_qualified_name(name) or "/" in name:
                raise ValueError(f"{where}.controllers: {name!r} is not a controller name")
        if self.shard_id is not None and not is_dns1123_label(self.shard_id):
            raise ValueError(
                f"{where}.shard_id={self.shard_id!r} must be a DNS label (lowercase letters, "
                "digits and '-', at most 63): it names the Lease and is a label value"
            )
        if self.namespace is not None and not is_dns1123_label(self.namespace):
            raise ValueError(f"{where}.namespace={self.namespace!r} is not a namespace name")
        if isinstance(self.sharder_workers, bool) or self.sharder_workers < 1:
            raise ValueError(f"{where}.sharder_workers must be >= 1, not {self.sharder_workers}")
        if not math.isfinite(self.resync_period) or self.resync_period <= 0:
            raise ValueError(f"{where}.resync_period must be a positive number of seconds")
        if isinstance(self.wait_for_shards, bool) or self.wait_for_shards < 1:
            raise ValueError(f"{where}.wait_for_shards must be >= 1, not {self.wait_for_shards}")
        if isinstance(self.virtual_nodes, bool) or self.virtual_nodes < 1:
            raise ValueError(f"{where}.virtual_nodes must be >= 1, not {self.virtual_nodes}")
        for key in self.labels:
            if key == RING_LABEL:
                raise ValueError(f"{where}.labels must not set {key!r}: the manager sets it")
        # The timing rules are leader election's; reuse its checks and name our fields.
        from setpoint.manager.options import LeaderElectionOptions

        try:
            LeaderElectionOptions(
                name="shard",
                lease_duration=self.lease_duration,
                renew_deadline=self.renew_deadline,
                retry_period=self.retry_period,
            )
        except ValueError as exc:
            raise ValueError(str(exc).replace("LeaderElectionOptions", where)) from None


def shard_of(obj: JsonObject, ring: str) -> str:
    """The shard ``obj`` is labelled with in ``ring`` (``""`` when unassigned)."""
    return labels_of(obj).get(shard_label(ring), "")


def draining(obj: JsonObject, ring: str) -> bool:
    """Whether ``obj`` carries ``ring``'s drain label."""
    return drain_label(ring) in labels_of(obj)
