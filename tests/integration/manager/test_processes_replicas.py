"""Two `--processes 2` supervisors as two replicas of one operator: four shards, a Pod killed.

The tiny operator and the supervisor's helpers are in processes_support.py. Both supervisors
run it with the same leader Lease (so the same ring) and 4 s leases, each as another "Pod"
(``HOSTNAME``), as two replicas of one Deployment would.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.cli.doctor_shards import scan_rings
from setpoint.client import Client, MergePatch
from setpoint.manager.sharding import RING_LABEL
from setpoint.testing.waits import eventually
from tests._support.shard_cluster import Interval, overlaps

from .processes_support import (
    Supervisor,
    configmap_state,
    create_configmaps,
    intervals,
    running,
    short_leases,
)

N = 40
LEASE_ID = "tiny-replicas"
RING = LEASE_ID
"""The shard ring: tinyrun.py names it after the leader election Lease."""
PODS = ("tinypod-a", "tinypod-b")
LEASE_DURATION = 4.0
WORK = "0.3"
"""Seconds each reconcile of the second round sleeps: the kill lands mid-convergence."""


class Pods:
    """The two supervisors, sharing one journal."""

    def __init__(self, tmp_path: Path, kubeconfig: Path, namespace: str) -> None:
        command = short_leases(kubeconfig, namespace, LEASE_ID)
        self.by_host = {host: Supervisor(tmp_path, command, host) for host in PODS}
        self.journal = tmp_path / "journal.jsonl"

    def pod_of(self, identity: str) -> str:
        """The Pod (host) whose worker has shard id or leader identity ``identity``."""
        found = re.fullmatch(r"(.+)-[0-9a-f]{6}-w[01]", identity)
        assert found is not None and found.group(1) in self.by_host, identity
        return found.group(1)

    def intervals(self) -> list[Interval]:
        """Every process's reconciles; a killed process's open ones end at its kill."""
        killed = {pid: t for pod in self.by_host.values() for pid, t in pod.killed.items()}
        return intervals(self.journal, killed)

    def logs(self) -> str:
        """The end of both Pods' logs (for a failed assertion)."""
        return "\n".join(f"--- {h}\n{p.text()[-2500:]}" for h, p in self.by_host.items())

    def close(self) -> None:
        for pod in self.by_host.values():
            pod.close()


@pytest.fixture
def pods(tmp_path: Path, kubeconfig_path: Path, namespace: str) -> Iterator[Pods]:
    made = Pods(tmp_path, kubeconfig_path, namespace)
    yield made
    made.close()


async def _shard_leases(k8s: Client, namespace: str) -> dict[str, dict[str, Any]]:
    leases = await k8s.list(kinds.Lease, namespace=namespace, labels={RING_LABEL: RING})
    return {lease["metadata"]["name"]: lease for lease in leases}


async def test_two_supervisors_share_one_ring_and_survive_a_pod_sigkill(
    pods: Pods, k8s: Client, namespace: str
) -> None:
    """Two Pods of `--processes 2` make four shards; SIGKILL the leader's Pod; the other takes all.

    Two supervisors run the same operator with the same leader Lease, each as another Pod
    name, so their four workers are four shards (`<pod>-<group>-w<i>`) on the one ring named
    after that Lease, and the leader worker of whichever Pod holds the Lease runs the
    sharder. Forty ConfigMaps converge with each of the four shard labels present on some,
    each reconciled by the worker its label names. Every ConfigMap is then changed (each
    reconcile now sleeps 0.3 s), and while the leader's Pod is still working through its
    share, its supervisor and both its workers are SIGKILLed by process group, as the
    kubelet kills a Pod: nothing is released. After the 4 s leases expire, a worker of the
    other Pod becomes leader, its sharder fences the two dead shards and moves their objects,
    and every ConfigMap converges on the surviving Pod's two workers, which reconciled last
    every object the dead Pod owned. The journal of every process shows no moment when two
    processes reconciled one object. SIGTERM then stops the surviving Pod with exit code 0.
    """
    await create_configmaps(k8s, namespace, N)

    async def four_shards() -> dict[str, set[str]] | None:
        leases = await _shard_leases(k8s, namespace)
        by_pod: dict[str, set[str]] = {host: set() for host in PODS}
        for name in leases:
            by_pod[pods.pod_of(name)].add(name)
        return by_pod if all(len(s) == 2 for s in by_pod.values()) else None

    shards_of = await eventually(four_shards, timeout=30, description="four shard Leases")
    every_shard = shards_of[PODS[0]] | shards_of[PODS[1]]

    async def converged(gen: str, shards: set[str]) -> bool:
        state = await configmap_state(k8s, namespace, LEASE_ID)
        return (
            len(state) == N
            and all(
                s.get("tinyop/seen") == gen == s["gen"]
                and s["shard"] in shards
                and s.get("tinyop/worker") == s["shard"][-1]
                for s in state.values()
            )
            and {s["shard"] for s in state.values()} == shards
        )

    await eventually(
        lambda: converged("1", every_shard),
        timeout=60,
        description="40 ConfigMaps converge, spread over all four shards",
    )
    first = await configmap_state(k8s, namespace, LEASE_ID)
    leader = (await k8s.get(kinds.Lease, LEASE_ID, namespace=namespace))["spec"]["holderIdentity"]
    victim_host = pods.pod_of(leader)
    (survivor_host,) = set(PODS) - {victim_host}
    victim, survivor = pods.by_host[victim_host], pods.by_host[survivor_host]
    theirs = {n for n, s in first.items() if s["shard"] in shards_of[victim_host]}

    await asyncio.gather(
        *(
            k8s.patch(
                kinds.ConfigMap,
                name,
                MergePatch({"data": {"gen": "2", "work": WORK}}),
                namespace=namespace,
            )
            for name in first
        )
    )

    async def victim_busy() -> bool:
        state = await configmap_state(k8s, namespace, LEASE_ID)
        return any(state[n].get("tinyop/seen") == "2" for n in theirs)

    await eventually(victim_busy, timeout=30, description=f"{victim_host} reconciles round 2")
    killed_at = victim.kill_pod()
    at_kill = await configmap_state(k8s, namespace, LEASE_ID)
    unfinished = sorted(n for n in theirs if at_kill[n].get("tinyop/seen") != "2")
    assert unfinished, f"the kill came after {victim_host} had finished: {at_kill}"

    await eventually(
        lambda: converged("2", shards_of[survivor_host]),
        timeout=60,
        description=f"{survivor_host}'s two workers take over and converge every ConfigMap",
    )
    print(
        f"\nSIGKILL of {victim_host} ({len(unfinished)} of its {len(theirs)} unfinished) to "
        f"all converged on {survivor_host}: {time.time() - killed_at:.1f}s"
    )
    leader = (await k8s.get(kinds.Lease, LEASE_ID, namespace=namespace))["spec"]["holderIdentity"]
    assert pods.pod_of(leader) == survivor_host, leader
    (report,) = await scan_rings(k8s, namespace=namespace, ring=RING)
    states = {lease.name: lease.state for lease in report.leases}
    for shard in shards_of[victim_host]:
        assert states.get(shard, "taken over") == "taken over", states
    assert len(survivor.starts()) == 2, survivor.text()[-3000:]

    last_by_key: dict[str, Interval] = {}
    for interval in sorted(pods.intervals(), key=lambda i: i.start):
        last_by_key[interval.key] = interval
    survivor_pids = {str(pid) for pid in survivor.pids()}
    assert {last_by_key[f"{namespace}/{n}"].shard for n in theirs} <= survivor_pids
    assert overlaps(pods.intervals()) == [], pods.logs()

    survivor.process.send_signal(signal.SIGTERM)
    assert survivor.process.wait(timeout=30) == 0, survivor.text()[-3000:]
    assert not any(running(pid) for pid in survivor.pids()), survivor.text()[-3000:]
