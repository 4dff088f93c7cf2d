"""`setpoint run --processes 2` on the real API server: a split by key, a SIGKILL, a restart.

The tiny operator and the supervisor's helpers are in processes_support.py: every ConfigMap
of the test's namespace is annotated with its worker's index and the ``gen`` it saw, and every
reconcile is journalled with its process id.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.client import Client, MergePatch
from setpoint.manager.workersplit import worker_of
from setpoint.testing.waits import eventually
from tests._support.shard_cluster import Interval, overlaps

from .processes_support import (
    Supervisor,
    configmap_state,
    create_configmaps,
    intervals,
    setpoint_run,
)

N = 30
LEASE_ID = "tiny-ops"
HOST = "tinypod"


@pytest.fixture
def operator(tmp_path: Path, kubeconfig_path: Path, namespace: str) -> Iterator[Supervisor]:
    made = Supervisor(tmp_path, setpoint_run(kubeconfig_path, namespace, LEASE_ID), HOST)
    yield made
    made.close()


async def _state(k8s: Client, namespace: str) -> dict[str, dict[str, str]]:
    return await configmap_state(k8s, namespace, LEASE_ID)


def _worker(name: str, namespace: str) -> str:
    """The index of the worker that owns ConfigMap ``name`` (the split's hash of its key)."""
    return str(worker_of(ObjectKey(namespace, name), 2))


def _converged(state: dict[str, dict[str, str]], gen: str, namespace: str) -> bool:
    return len(state) == N and all(
        s.get("tinyop/seen") == gen == s["gen"] and s.get("tinyop/worker") == _worker(n, namespace)
        for n, s in state.items()
    )


async def test_two_workers_split_the_objects_and_a_killed_one_comes_back_as_itself(
    operator: Supervisor, k8s: Client, namespace: str
) -> None:
    """Two workers split 30 ConfigMaps; one is SIGKILLed, restarted as itself, and all converge.

    `setpoint run --processes 2` (leader election turned on by itself): the supervisor holds
    the leader Lease for the Pod (an identity of its own, not a worker's) and its two
    workers split the tiny operator's ConfigMaps by the hash of their keys, without a label
    or a shard Lease: every ConfigMap ends up annotated by the worker the split names, and
    both workers own some. Worker 0 is SIGKILLed; the supervisor reaps it and starts a new
    process with index 0. Every ConfigMap is then changed and converges again; worker 0's
    objects are reconciled last by the new process. The journal shows no moment when two
    processes reconciled one object. SIGTERM to the supervisor stops every process with
    exit code 0.
    """
    await create_configmaps(k8s, namespace, N)

    async def converged(gen: str) -> bool:
        return _converged(await _state(k8s, namespace), gen, namespace)

    await eventually(
        lambda: converged("1"), timeout=60, description="both workers own and reconcile objects"
    )
    state = await _state(k8s, namespace)
    assert {s["tinyop/worker"] for s in state.values()} == {"0", "1"}
    assert {s["shard"] for s in state.values()} == {""}  # nothing was written to the objects
    lease = await k8s.get(kinds.Lease, LEASE_ID, namespace=namespace)
    holder = lease["spec"]["holderIdentity"]
    assert holder.startswith(HOST) and not re.search(r"-w\d+$", holder), holder
    leases = await k8s.list(kinds.Lease, namespace=namespace)
    assert [item["metadata"]["name"] for item in leases] == [LEASE_ID]  # no shard Leases

    (victim,) = [pid for index, pid in operator.starts() if index == 0]
    os.kill(victim, signal.SIGKILL)
    operator.killed[victim] = time.time()
    await eventually(
        lambda: len([i for i, _ in operator.starts() if i == 0]) == 2,
        timeout=30,
        description="worker 0 restarted",
    )
    successor = [pid for index, pid in operator.starts() if index == 0][-1]
    await asyncio.gather(
        *(
            k8s.patch(
                kinds.ConfigMap, name, MergePatch({"data": {"gen": "2"}}), namespace=namespace
            )
            for name in state
        )
    )
    await eventually(lambda: converged("2"), timeout=60, description="every object converges again")
    theirs = {f"{namespace}/{n}" for n in state if _worker(n, namespace) == "0"}
    last_by_key: dict[str, Interval] = {}
    for interval in sorted(intervals(operator.journal, operator.killed), key=lambda i: i.start):
        last_by_key[interval.key] = interval
    assert {last_by_key[k].shard for k in theirs} == {str(successor)}
    assert overlaps(intervals(operator.journal, operator.killed)) == [], operator.text()[-3000:]

    operator.process.send_signal(signal.SIGTERM)
    assert operator.process.wait(timeout=30) == 0, operator.text()[-3000:]
    for _, pid in operator.starts():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
