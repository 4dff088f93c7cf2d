"""Clean up external state of objects deleted while no replica ran: a tombstone sweep.

A finalizer guarantees a cleanup runs before its object goes, but only for objects that
carry it: an object created and deleted while the operator was down, one deleted before the
finalizer was added (a race at creation), one whose finalizer someone removed by hand, or
every object of an operator that never used finalizers leaves its external record behind
(a database, a DNS name, a bucket). Nothing in Kubernetes remembers the object any more,
so no event will ever come for it. The way back is from the other side: list the external
records, compare them with the live objects, and delete the records no live object claims.

:func:`sweep_orphans` does it once; :class:`TombstoneSweep` runs it when the operator starts
(in the leader, once its cache has synced) and, with ``period``, again on a timer. The
author supplies the external side as :class:`ExternalRecords`: the keys of every record the
operator made, and how to delete one.

Expected flow of one sweep:
    1. List the external records' keys (first: a record created after this listing is
       never considered, whatever the cache says).
    2. List the live objects of ``kind`` from the cache (which waits for its first sync),
       objects being deleted included (their finalizers, if any, clean up).
    3. The orphans are the keys no live object's ``key_of`` gives. If they are more than
       ``max_fraction`` of the records, stop without deleting (:attr:`SweepResult.refused`):
       a cache scoped to fewer objects than the records cover (another namespace, a
       rollout's label selector) would otherwise make every record look orphaned.
    4. Delete each orphan; a failure is recorded and the sweep goes on with the next one.

Guarantees:
    - A record whose object exists is never deleted (step 1 before step 2: an object's
      record is created by a reconcile of an object already in the cache).
    - Keys by name (the default, ``namespace/name``) treat an object deleted and recreated
      with the same name while down as live; key records by ``metadata.uid`` (``key_of=
      uid_of``) where the external system can store it, to clean those too.

Caveats:
    - ``delete`` must be idempotent (a sweep that died half-way runs again at the next start).
    - The sweep does not replace finalizers: it runs at start and on its timer, so an
      orphan lives until then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from setpoint.api.clock import Clock, LoopClock, clock_sleep
from setpoint.api.meta import key_of
from setpoint.api.runnable import RunnableGroup
from setpoint.api.types import Kind, split_kind
from setpoint.cache import Cache

__all__ = [
    "ExternalRecords",
    "SweepResult",
    "TombstoneSweep",
    "namespaced_name",
    "sweep_orphans",
]

log = logging.getLogger("setpoint.controller.tombstones")


class ExternalRecords(Protocol):
    """The external side of a sweep: the records the operator made, and their deletion."""

    async def keys(self) -> Iterable[str]:
        """The key of every external record this operator made (and not yet deleted)."""
        ...

    async def delete(self, key: str) -> None:
        """Delete the record with this key; deleting one already gone must succeed."""
        ...


def namespaced_name(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (``name`` for a cluster-scoped object): the default record key."""
    key = key_of(obj)
    return f"{key.namespace}/{key.name}" if key.namespace else key.name


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """What one sweep found and did."""

    records: int
    """External records listed."""
    live: int
    """Live objects of the kind in the cache."""
    orphans: tuple[str, ...]
    """Keys of records no live object claims, sorted."""
    deleted: tuple[str, ...] = ()
    """The orphans deleted."""
    failed: tuple[tuple[str, str], ...] = ()
    """``(key, error)`` of the deletions that raised."""
    refused: str | None = None
    """Why nothing was deleted, when the orphans were too many to trust."""


async def sweep_orphans(
    cache: Cache,
    kind: Kind[Any],
    records: ExternalRecords,
    *,
    key_of: Callable[[Mapping[str, Any]], str] = namespaced_name,
    namespace: str | None = None,
    max_fraction: float = 0.5,
) -> SweepResult:
    """One sweep (see the module doc): delete the records no live object of ``kind`` claims.

    ``key_of`` maps a live object (as JSON) to the key its record has; ``namespace`` limits
    the live objects to one namespace (the records must be limited alike). More than
    ``max_fraction`` of the records orphaned (and more than one) is refused.
    """
    if not 0 < max_fraction <= 1:
        raise ValueError(f"max_fraction={max_fraction!r} must be in (0, 1]")
    keys = sorted(set(await records.keys()))
    live_objects = await cache.list(kind, namespace=namespace)
    live = {key_of(_as_json(obj)) for obj in live_objects}
    orphans = tuple(key for key in keys if key not in live)
    result = SweepResult(records=len(keys), live=len(live), orphans=orphans)
    if len(orphans) > 1 and len(orphans) > max_fraction * len(keys):
        refused = (
            f"{len(orphans)} of {len(keys)} records have no live object, more than "
            f"max_fraction={max_fraction}: is the cache scoped to fewer objects than the "
            "records cover (a namespace, a label selector)? Nothing deleted; raise "
            "max_fraction if this many objects really were deleted while the operator was down"
        )
        return SweepResult(records=len(keys), live=len(live), orphans=orphans, refused=refused)
    deleted: list[str] = []
    failed: list[tuple[str, str]] = []
    for key in orphans:
        try:
            await records.delete(key)
        except Exception as exc:  # one failure must not keep the other orphans
            failed.append((key, f"{type(exc).__name__}: {exc}"))
        else:
            deleted.append(key)
    return SweepResult(
        records=result.records,
        live=result.live,
        orphans=orphans,
        deleted=tuple(deleted),
        failed=tuple(failed),
    )


def _as_json(obj: Any) -> Mapping[str, Any]:
    if isinstance(obj, Mapping):
        return obj
    to_object = getattr(obj, "to_object", None)
    if to_object is None:
        raise TypeError(f"cannot read the metadata of {type(obj).__name__}")
    result: Mapping[str, Any] = to_object()
    return result


@dataclass(kw_only=True)
class TombstoneSweep:
    """A runnable that sweeps orphaned external records at start (and every ``period``).

    ``manager.add(TombstoneSweep(cache=manager.cache, kind=Tenant, records=MyRecords()))``.
    It runs in the leader only, after the manager's caches: each sweep is
    :func:`sweep_orphans`; its result goes to the log and to :attr:`results`. A sweep that
    raises (the external system is down) is logged and retried at the next period; it never
    stops the manager.
    """

    cache: Cache
    """The manager's cache (``manager.cache``): it must see every object the records cover."""
    kind: Kind[Any]
    """The kind whose objects own the records."""
    records: ExternalRecords
    """The external side."""
    key_of: Callable[[Mapping[str, Any]], str] = namespaced_name
    """A live object's record key (see :func:`sweep_orphans`)."""
    namespace: str | None = None
    """Limit the live objects to one namespace."""
    max_fraction: float = 0.5
    """Refuse to delete when more than this fraction of the records look orphaned."""
    period: float | None = None
    """Sweep again every ``period`` seconds; ``None`` (default): at start only."""
    clock: Clock = field(default_factory=LoopClock)
    """The clock of the period (a ``ManualClock`` in tests)."""
    results: list[SweepResult] = field(default_factory=list)
    """Every sweep's result, oldest first (the last 100)."""
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _done: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.period is not None and not self.period > 0:
            raise ValueError(f"TombstoneSweep.period={self.period!r} must be > 0 seconds or None")
        if not 0 < self.max_fraction <= 1:
            raise ValueError(f"TombstoneSweep.max_fraction={self.max_fraction!r} must be in (0, 1]")

    @property
    def name(self) -> str:
        """``tombstones/<kind>``."""
        return f"tombstones/{split_kind(self.kind)[0].kind}"

    @property
    def group(self) -> RunnableGroup:
        """Others: after the caches."""
        return RunnableGroup.OTHERS

    @property
    def needs_leader_election(self) -> bool:
        """Only the leader deletes records."""
        return True

    async def sweep_once(self) -> SweepResult:
        """Run one sweep now, log and record its result."""
        result = await sweep_orphans(
            self.cache,
            self.kind,
            self.records,
            key_of=self.key_of,
            namespace=self.namespace,
            max_fraction=self.max_fraction,
        )
        self.results.append(result)
        del self.results[:-100]
        if result.refused is not None:
            log.error("%s: %s", self.name, result.refused)
        elif result.orphans:
            log.info(
                "%s: deleted %d orphaned record(s) of %d (%s); %d failed",
                self.name,
                len(result.deleted),
                result.records,
                ", ".join(result.deleted[:10]),
                len(result.failed),
            )
        for key, error in result.failed:
            log.warning("%s: could not delete the orphaned record %s: %s", self.name, key, error)
        self._done.set()
        return result

    async def wait_swept(self) -> SweepResult:
        """Wait for the first sweep to finish; return the latest result."""
        await self._done.wait()
        return self.results[-1]

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: the sweep failed; next try in the next period", self.name)
            if self.period is None:
                return
            await clock_sleep(self.clock, self.period)

    async def start(self) -> None:
        """Start the first sweep in the background."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, timeout: float) -> None:
        """Cancel a sweep in progress (a deletion may be cut short; the next start retries)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=timeout)

    def failure(self) -> BaseException | None:
        """Never: a failing sweep is logged and retried, not fatal."""
        return None
