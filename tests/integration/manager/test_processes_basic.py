"""`setpoint run --processes 2` on the real API server: a split, a SIGKILL, a restart.

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
from setpoint.client import Client, MergePatch
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


SHARD = re.compile(rf"^{HOST}-[0-9a-f]{{6}}-w[01]$")
"""A worker's shard id: the Pod (host) name, the supervisor's random group, the index."""


def _converged(state: dict[str, dict[str, str]], gen: str) -> bool:
    return len(state) == N and all(
        s.get("tinyop/seen") == gen == s["gen"] and SHARD.match(s["shard"]) for s in state.values()
    )


async def test_two_workers_split_the_objects_and_a_killed_one_comes_back_as_itself(
    operator: Supervisor, k8s: Client, namespace: str
) -> None:
    """Two workers split 30 ConfigMaps; one is SIGKILLed, restarted as itself, and all converge.

    `setpoint run --processes 2` (leader election turned on by itself) starts two workers
    that shard the tiny operator's one controller on the ring named after the leader Lease;
    every ConfigMap ends up labelled for shard `<host>-<group>-w0` or `-w1` and reconciled by
    that worker, and both workers own some. Worker 0 is SIGKILLed; the supervisor reaps it
    and starts a new process with index 0, which takes its shard Lease again at once (same
    identity): no object is relabelled to a third shard. Every ConfigMap is then changed
    and converges again; worker 0's objects are reconciled by the new process. The journal
    shows no moment when two processes reconciled one object. SIGTERM to the supervisor
    stops every process with exit code 0.
    """
    await create_configmaps(k8s, namespace, N)

    async def converged(gen: str) -> bool:
        state = await _state(k8s, namespace)
        shards = {s["shard"] for s in state.values()}
        return _converged(state, gen) and {shard[-3:] for shard in shards} == {"-w0", "-w1"}

    await eventually(
        lambda: converged("1"), timeout=60, description="both workers own and reconcile objects"
    )
    state = await _state(k8s, namespace)
    for name, s in state.items():
        assert s["tinyop/worker"] == s["shard"][-1], (name, s)

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
    after = await _state(k8s, namespace)
    assert {n: s["shard"] for n, s in after.items()} == {n: s["shard"] for n, s in state.items()}
    theirs = {f"{namespace}/{n}" for n, s in after.items() if s["shard"].endswith("-w0")}
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
