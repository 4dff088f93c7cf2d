"""Sharding across replica processes on the real API server (decision 0011), small and quick.

Replicas are tests/_support/shard_replica.py processes (lease 4 s, renew deadline 3 s, retry
1 s) journalling the start and end of every reconcile. The large runs (3 replicas, 3,000
objects; and the 1/2/3-replica benchmark at 6,000) are `make test-sharding-scale` and
`make bench-sharding`, recorded in docs/benchmarks.md.

Foreign relabels (issue 27, finding 5): the test itself, as a writer other than the sharder
(no admission policy installed here), moves shard labels of objects while their owner is in
the middle of reconciling them (`ShardCluster.relabel_mid_reconcile`): to another live shard,
to the killed shard, or off. Before hand-over records, the new label's shard started its own
reconcile at once, overlapping the owner's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.cli.doctor_shards import scan_rings
from setpoint.client import Client
from setpoint.testing.waits import eventually
from tests._support.shard_cluster import (
    RING,
    ShardCluster,
    assignment,
    converged,
    create_gizmos,
    overlaps,
)

N = 300
LEASE, RENEW, RETRY = 4.0, 3.0, 1.0
FOREIGN = 12
"""Objects relabelled by the test in each foreign-edit round."""


@pytest.fixture
def cluster(tmp_path: Path, kubeconfig_path: Path, namespace: str) -> Iterator[ShardCluster]:
    made = ShardCluster(tmp_path / "journal", kubeconfig_path, namespace, (LEASE, RENEW, RETRY))
    yield made
    made.close()


async def test_two_replicas_split_300_objects_survive_a_sigkill_and_rebalance(
    cluster: ShardCluster, k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """Two replica processes split 300 objects; SIGKILL one; a new one joins; never overlapping.

    Every object converges (labelled for a live shard and reconciled by it) and each replica
    caches only its own share. After the non-leader replica is SIGKILLed, the leader's sharder
    fences its Lease and reassigns its objects: the first of them is reconciled by the
    survivor within lease_duration + retry_period (plus 2 s for a busy machine) of the kill,
    and all converge. A third replica then joins and takes its share through drains. The
    journals show no moment when two replicas reconciled one object, and `doctor shards`
    counts the objects per shard.

    Someone other than the sharder relabels objects mid-reconcile three times: between the
    two live replicas, right after the SIGKILL (to and from the killed shard), and while the
    third replica's join is rebalancing. No relabel makes a second replica reconcile an
    object while its owner does, and everything still converges (the sharder repairs).
    """
    await create_gizmos(k8s, namespace, N)
    for shard in ("alpha", "beta"):
        cluster.spawn(shard)

    async def settled(shards: set[str]) -> bool:
        return converged(await assignment(k8s, namespace), shards, N)

    await eventually(
        lambda: settled({"alpha", "beta"}),
        timeout=180,
        description="300 objects converge on two replicas",
    )
    state = await assignment(k8s, namespace)
    for shard in ("alpha", "beta"):
        mine = sum(1 for label, _ in state.values() if label == shard)
        await eventually(
            lambda s=shard, m=mine: cluster.stats(s).get("cached") == m,  # type: ignore[misc]
            timeout=30,
            description=f"{shard} caches exactly its {mine} objects",
        )
        assert 0.25 * N <= mine <= 0.75 * N, (shard, mine)

    caught = await cluster.foreign_relabels(k8s, ["alpha", "beta"], FOREIGN)
    assert caught >= FOREIGN // 2, "the foreign relabels landed while their owner reconciled"
    await eventually(
        lambda: settled({"alpha", "beta"}),
        timeout=60,
        description="relabelled objects are repaired",
    )
    assert overlaps(cluster.intervals()) == []

    state = await assignment(k8s, namespace)
    leader = next(s for s in ("alpha", "beta") if cluster.stats(s).get("leader"))
    victim = "beta" if leader == "alpha" else "alpha"
    theirs = {f"{namespace}/{name}" for name, (label, _) in state.items() if label == victim}
    killed_at = cluster.kill(victim)
    await cluster.foreign_relabels(k8s, [leader, victim], FOREIGN, off=False, wait=0)
    await eventually(
        lambda: settled({leader}),
        timeout=60,
        description=f"{leader} takes over {victim}'s objects",
    )
    taken = [
        i.start
        for i in cluster.intervals()
        if i.shard == leader and i.key in theirs and i.start > killed_at
    ]
    takeover = min(taken) - killed_at
    print(f"\nfirst reconcile of a killed shard's object after SIGKILL: {takeover:.2f}s")
    assert takeover <= LEASE + RETRY + 2.0, cluster.log_tail(leader)

    cluster.spawn("gamma")
    await eventually(
        lambda: bool(cluster.stats("gamma").get("holding")),
        timeout=30,
        description="gamma holds its shard Lease",
    )
    await cluster.foreign_relabels(k8s, [leader, "gamma"], FOREIGN)
    await eventually(
        lambda: settled({leader, "gamma"}),
        timeout=120,
        description="gamma joins and takes its share",
    )
    assert overlaps(cluster.intervals()) == []

    (report,) = await scan_rings(k8s, namespace=namespace, ring=RING)
    by_name = {lease.name: lease for lease in report.leases}
    assert by_name[leader].state == "alive" and by_name["gamma"].state == "alive"
    assert by_name[leader].objects + by_name["gamma"].objects == N
    assert report.unassigned == 0 and report.objects == N
    assert victim not in by_name or by_name[victim].state == "taken over"
