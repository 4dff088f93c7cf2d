"""Deletions while the operator was down: the tombstone sweep at start, on the real server."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import setpoint as sp
from setpoint.cache import CacheOptions
from setpoint.client import Client
from setpoint.client.errors import NotFound
from setpoint.controller.tombstones import TombstoneSweep
from setpoint.testing import eventually, run_operator
from tests._support.kinds import GIZMO, Gizmo


class Directory:
    """The external system: one record per Gizmo, keyed namespace/name."""

    def __init__(self) -> None:
        self.records: set[str] = set()
        self.deleted: list[str] = []

    async def keys(self) -> Iterable[str]:
        return set(self.records)

    async def delete(self, key: str) -> None:
        self.records.discard(key)
        self.deleted.append(key)


def operator(directory: Directory, sweeps: list[TombstoneSweep]) -> Any:
    """Creates a record per Gizmo, without a finalizer; sweeps the orphans at start."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        try:
            await ctx.reader.get(Gizmo, request.name, namespace=request.namespace)
        except NotFound:
            return
        directory.records.add(f"{request.namespace}/{request.name}")

    def setup(manager: sp.Manager) -> None:
        manager.controller("gizmo-directory").for_(Gizmo).build(reconcile)
        sweep = TombstoneSweep(cache=manager.cache, kind=Gizmo, records=directory)
        manager.add(sweep)
        sweeps.append(sweep)

    return setup


async def create(k8s: Client, namespace: str, name: str) -> None:
    await k8s.create(
        {
            "apiVersion": GIZMO.api_version,
            "kind": "Gizmo",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"color": "red"},
        }
    )


@pytest.mark.usefixtures("gizmo_crd")
async def test_records_of_objects_deleted_while_down_are_swept_at_start(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """The sweep at start deletes the records of objects deleted while no operator ran.

    A first run makes records for Gizmos a, b and c (no finalizer). With the operator
    stopped, b is deleted (gone at once, no event will ever reach an operator) and d is
    created. The second run's sweep, in the leader after the cache synced, finds b's record
    without a live object and deletes it, keeps a's and c's, and d gets its record from its
    reconcile. Without the sweep b's record stays forever.
    """
    directory = Directory()
    sweeps: list[TombstoneSweep] = []
    options = sp.ManagerOptions(
        new_cache=lambda client: sp.Cache(client, options=CacheOptions(namespaces=(namespace,)))
    )
    expected = {f"{namespace}/{name}" for name in ("a", "b", "c")}
    for name in ("a", "b", "c"):
        await create(k8s, namespace, name)
    async with run_operator(
        operator(directory, sweeps), kubeconfig=kubeconfig_path, options=options
    ):
        await eventually(lambda: directory.records == expected, timeout=30, description="records")
        first = await sweeps[0].wait_swept()
        assert first.deleted == ()

    await k8s.delete(GIZMO, "b", namespace=namespace)
    await create(k8s, namespace, "d")
    with pytest.raises(NotFound):
        await k8s.get(GIZMO, "b", namespace=namespace)

    async with run_operator(
        operator(directory, sweeps), kubeconfig=kubeconfig_path, options=options
    ):
        result = await sweeps[1].wait_swept()
        assert result.orphans == (f"{namespace}/b",)
        assert result.deleted == (f"{namespace}/b",)
        await eventually(
            lambda: directory.records == {f"{namespace}/{n}" for n in ("a", "c", "d")},
            timeout=30,
            description="d's record, and b's gone",
        )
    assert directory.deleted == [f"{namespace}/b"]
