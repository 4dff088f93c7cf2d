"""The fake API server's garbage collector and namespace teardown, done synchronously.

On a real cluster, kube-controller-manager's garbage collector deletes dependents whose
owners are gone, honours ``foregroundDeletion`` and ``orphan`` finalizers, and its
namespace controller empties a terminating namespace before removing it. All of that
happens eventually, through the API. :class:`GarbageCollector` does the same work at once,
inside the write that made it necessary, through the store's own write paths (so watchers
see every deletion and update it makes).

It keeps indexes so that a deletion costs O(dependents), not O(objects): objects by uid,
dependents by owner uid, objects by namespace. Dependents are collected only for owners
this fake saw deleted (a real collector also removes dependents whose owner never
existed); see the FakeClient docstring.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from setpoint.api.jsonvalues import deep_copy
from setpoint.api.meta import JsonObject
from setpoint.testing._fake_kinds import KindRules, storage_key

if TYPE_CHECKING:
    from setpoint.testing._fake_apply import Record

__all__ = ["GC_MANAGER", "Cluster", "GarbageCollector", "Slot"]

Slot = tuple[tuple[str, str], str]
"""Where a record lives: its (group, kind) and its storage key."""

GC_MANAGER = "fake-garbage-collector"
"""The field manager of the collector's own updates (ownerReferences, finalizers)."""


class Cluster(Protocol):
    """What the collector needs from the store: find records, write, delete, remove."""

    def resolve(self, slot: Slot) -> tuple[KindRules, Record] | None:
        """The rules and record at ``slot``, or ``None`` if nothing is stored there."""
        ...

    def system_update(self, rules: KindRules, record: Record, new: JsonObject) -> None:
        """Replace ``record``'s object with ``new`` as a system writer (no preconditions)."""
        ...

    def delete(
        self,
        rules: KindRules,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None,
        uid: str | None,
        resource_version: str | None,
        dry_run: bool,
    ) -> JsonObject:
        """Delete one object as a client would (marks it while finalizers remain)."""
        ...

    def remove(self, rules: KindRules, record: Record) -> None:
        """Take ``record`` out of storage now (its last finalizer is gone)."""
        ...


def slot_of(rules: KindRules, obj: JsonObject) -> Slot:
    """The slot of a stored object."""
    meta = obj["metadata"]
    return (rules.group_kind, storage_key(meta.get("namespace", ""), meta["name"]))


class GarbageCollector:
    """Indexes ownership and namespaces; collects what writes made collectable, at once.

    The store calls :meth:`index`/:meth:`unindex` around every change of a stored object,
    :meth:`enqueue` for objects that may now need work (marked for deletion),
    :meth:`removed` after an object left storage, and :meth:`collect` at the end of each
    request. With ``enabled=False`` nothing is ever collected (like a cluster without
    kube-controller-manager), but the indexes are still kept.
    """

    def __init__(self, cluster: Cluster, *, enabled: bool) -> None:
        self._cluster = cluster
        self._enabled = enabled
        self._deleted_uids: set[str] = set()
        self._uids: dict[str, Slot] = {}
        self._owned: dict[str, set[Slot]] = {}
        self._in_namespace: dict[str, set[Slot]] = {}
        self._queue: deque[Slot] = deque()
        self._collecting = False

    # -- indexes -----------------------------------------------------------------------------

    def index(self, rules: KindRules, obj: JsonObject) -> None:
        """Record a stored object's uid, owners and namespace."""
        slot = slot_of(rules, obj)
        meta = obj["metadata"]
        self._uids[meta["uid"]] = slot
        for ref in meta.get("ownerReferences") or []:
            uid = str(ref.get("uid"))
            self._owned.setdefault(uid, set()).add(slot)
            if uid in self._deleted_uids and uid not in self._uids:
                self._enqueue_slot(slot)  # created after its owner went
        if meta.get("namespace"):
            self._in_namespace.setdefault(meta["namespace"], set()).add(slot)

    def unindex(self, rules: KindRules, obj: JsonObject) -> None:
        """Forget what :meth:`index` recorded for ``obj`` (before it changes or goes)."""
        slot = slot_of(rules, obj)
        meta = obj["metadata"]
        if self._uids.get(meta["uid"]) == slot:
            del self._uids[meta["uid"]]
        for ref in meta.get("ownerReferences") or []:
            uid = str(ref.get("uid"))
            owned = self._owned.get(uid)
            if owned is not None:
                owned.discard(slot)
                if not owned:
                    del self._owned[uid]
        namespace = meta.get("namespace")
        if namespace and namespace in self._in_namespace:
            self._in_namespace[namespace].discard(slot)
            if not self._in_namespace[namespace]:
                del self._in_namespace[namespace]

    def removed(self, obj: JsonObject) -> None:
        """``obj`` left storage: wake whoever may act now, then collect."""
        meta = obj["metadata"]
        uid = meta["uid"]
        self._deleted_uids.add(uid)
        # Who may act now: dependents (their owner is gone), owners waiting in foreground
        # deletion, and a terminating namespace waiting for its content.
        for slot in self._owned.get(uid, ()):
            self._enqueue_slot(slot)
        for ref in meta.get("ownerReferences") or []:
            owner = self._uids.get(str(ref.get("uid")))
            if owner is not None:
                self._enqueue_slot(owner)
        if meta.get("namespace"):
            self._enqueue_slot((("", "Namespace"), meta["namespace"]))
        self.collect()

    def enqueue(self, rules: KindRules, obj: JsonObject) -> None:
        """Look at ``obj`` on the next :meth:`collect` (it is marked for deletion)."""
        self._enqueue_slot(slot_of(rules, obj))

    def _enqueue_slot(self, slot: Slot) -> None:
        if self._enabled:
            self._queue.append(slot)

    # -- collection --------------------------------------------------------------------------

    def collect(self) -> None:
        """Do at once what the garbage collector and namespace controller do eventually.

        Works through the objects that changes made interesting (dependents of a
        removed owner, objects marked for deletion, namespaces losing content)
        until none is left. Not re-entrant: work that collection causes is queued
        and picked up by the running loop.
        """
        if not self._enabled or self._collecting:
            return
        self._collecting = True
        try:
            while self._queue:
                found = self._cluster.resolve(self._queue.popleft())
                if found is not None:
                    self._collect_one(*found)
        finally:
            self._collecting = False

    def _dependents(self, uid: str) -> list[tuple[KindRules, Record]]:
        found = (self._cluster.resolve(slot) for slot in sorted(self._owned.get(uid, ())))
        return [f for f in found if f is not None]

    def _delete(self, rules: KindRules, record: Record, policy: str = "Background") -> None:
        meta = record.obj["metadata"]
        if meta.get("deletionTimestamp"):
            return
        self._cluster.delete(
            rules,
            meta.get("namespace", ""),
            meta["name"],
            propagation_policy=policy,
            uid=None,
            resource_version=None,
            dry_run=False,
        )

    def _collect_one(self, rules: KindRules, record: Record) -> None:
        obj = record.obj
        meta = obj["metadata"]
        finalizers = meta.get("finalizers") or []
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            if "orphan" in finalizers:
                self._orphan_dependents(uid)
                self._drop_finalizer(rules, record, "orphan")
                return
            if "foregroundDeletion" in finalizers:
                for dep_rules, dep in self._dependents(uid):
                    self._delete(dep_rules, dep, "Foreground")
                if not self._dependents(uid) and self._cluster.resolve(slot_of(rules, obj)):
                    self._drop_finalizer(rules, record, "foregroundDeletion")
                return
            if rules.group_kind == ("", "Namespace") and "kubernetes" in (
                (obj.get("spec") or {}).get("finalizers") or []
            ):
                self._empty_namespace(rules, record)
                return
        refs = meta.get("ownerReferences") or []
        gone = [
            r
            for r in refs
            if r.get("uid") in self._deleted_uids and str(r.get("uid")) not in self._uids
        ]
        if not gone:
            return
        if len(gone) == len(refs):
            self._delete(rules, record)
        else:
            new = _copy(obj)
            new["metadata"]["ownerReferences"] = [r for r in refs if r not in gone]
            self._cluster.system_update(rules, record, new)

    def _orphan_dependents(self, uid: str) -> None:
        for dep_rules, dep in self._dependents(uid):
            new = _copy(dep.obj)
            refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                del new["metadata"]["ownerReferences"]
            self._cluster.system_update(dep_rules, dep, new)

    def _empty_namespace(self, rules: KindRules, record: Record) -> None:
        obj = record.obj
        name = obj["metadata"]["name"]
        contents = [self._cluster.resolve(s) for s in sorted(self._in_namespace.get(name, ()))]
        for found in contents:
            if found is not None:
                self._delete(*found)
        if name in self._in_namespace or self._cluster.resolve(slot_of(rules, obj)) is None:
            return
        new = _copy(record.obj)
        new["spec"]["finalizers"] = [f for f in new["spec"]["finalizers"] if f != "kubernetes"]
        if not new["spec"]["finalizers"] and not new["metadata"].get("finalizers"):
            self._cluster.remove(rules, record)
        else:
            self._cluster.system_update(rules, record, new)

    def _drop_finalizer(self, rules: KindRules, record: Record, finalizer: str) -> None:
        new = _copy(record.obj)
        new["metadata"]["finalizers"] = [
            f for f in new["metadata"].get("finalizers") or [] if f != finalizer
        ]
        self._cluster.system_update(rules, record, new)


def _copy(obj: JsonObject) -> JsonObject:
    copied: JsonObject = deep_copy(obj)
    return copied
