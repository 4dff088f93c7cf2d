"""Tombstone sweeps: orphaned external records found and deleted, and when not (issue 32).

The sweep on the real plane, after objects were deleted while no operator ran, is
tests/integration/controller/test_tombstones.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

import pytest

from setpoint.api.clock import ManualClock
from setpoint.api.meta import uid_of
from setpoint.cache import Cache
from setpoint.controller.tombstones import TombstoneSweep, sweep_orphans
from tests._support.kinds import GIZMO


def gizmo(name: str, uid: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "test.setpoint.dev/v1",
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}"},
    }


class Live:
    """A cache stand-in: the live objects, and the order of calls."""

    def __init__(self, objects: list[dict[str, Any]], calls: list[str]) -> None:
        self.objects = objects
        self.calls = calls

    async def list(self, kind: object, *, namespace: str | None = None) -> list[dict[str, Any]]:
        self.calls.append("list objects")
        return self.objects


class Records:
    """External records in memory; ``broken`` keys fail to delete."""

    def __init__(
        self, keys: Iterable[str], calls: list[str], broken: frozenset[str] = frozenset()
    ) -> None:
        self.stored = set(keys)
        self.calls = calls
        self.broken = broken

    async def keys(self) -> Iterable[str]:
        self.calls.append("list records")
        return set(self.stored)

    async def delete(self, key: str) -> None:
        if key in self.broken:
            raise ConnectionError("the directory is down")
        self.stored.discard(key)


def cache(objects: list[dict[str, Any]], calls: list[str]) -> Cache:
    return cast(Cache, Live(objects, calls))


async def test_records_without_a_live_object_are_deleted_records_first() -> None:
    calls: list[str] = []
    records = Records(["ns/a", "ns/b", "ns/c"], calls)
    result = await sweep_orphans(cache([gizmo("a"), gizmo("c")], calls), GIZMO, records)
    assert result.orphans == ("ns/b",)
    assert result.deleted == ("ns/b",)
    assert records.stored == {"ns/a", "ns/c"}
    assert calls == ["list records", "list objects"]


async def test_keyed_by_uid_a_recreated_name_is_an_orphan() -> None:
    records = Records(["uid-old"], [])
    live = cache([gizmo("a", uid="uid-new"), gizmo("b")], [])
    result = await sweep_orphans(live, GIZMO, records, key_of=uid_of)
    assert result.deleted == ("uid-old",)


async def test_a_failed_deletion_is_reported_and_the_others_go_on() -> None:
    records = Records(["ns/a", "ns/x", "ns/y"], [], broken=frozenset({"ns/x"}))
    live = cache([gizmo("a"), gizmo("b"), gizmo("c")], [])
    result = await sweep_orphans(live, GIZMO, records, max_fraction=1.0)
    assert result.deleted == ("ns/y",)
    assert result.failed == (("ns/x", "ConnectionError: the directory is down"),)


async def test_too_many_orphans_are_refused_and_nothing_is_deleted() -> None:
    records = Records(["ns/a", "ns/b", "ns/c"], [])
    result = await sweep_orphans(cache([gizmo("a")], []), GIZMO, records)
    assert result.orphans == ("ns/b", "ns/c")
    assert result.deleted == ()
    assert result.refused is not None and "max_fraction=0.5" in result.refused
    assert records.stored == {"ns/a", "ns/b", "ns/c"}


async def test_the_runnable_sweeps_at_start_and_every_period() -> None:
    clock = ManualClock()
    objects = [gizmo("a")]
    records = Records(["ns/a"], [])
    sweep = TombstoneSweep(
        cache=cache(objects, []), kind=GIZMO, records=records, period=60.0, clock=clock
    )
    assert (sweep.name, sweep.needs_leader_election) == ("tombstones/Gizmo", True)
    await sweep.start()
    first = await sweep.wait_swept()
    assert first.orphans == ()
    objects.clear()  # a deleted while the sweep waits
    for _ in range(20):
        await asyncio.sleep(0)
    clock.advance(60.0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert [r.deleted for r in sweep.results] == [(), ("ns/a",)]
    await sweep.stop(1.0)
    assert sweep.failure() is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="period"):
        TombstoneSweep(cache=cache([], []), kind=GIZMO, records=Records([], []), period=0)
    with pytest.raises(ValueError, match="max_fraction"):
        TombstoneSweep(cache=cache([], []), kind=GIZMO, records=Records([], []), max_fraction=0)
