"""Leader election between separate processes, against the real API server.

Each candidate is ``le_candidate.py`` run with ``sys.executable`` (lease 4 s, renew deadline
3 s, retry period 1 s). Its leader-only runnable journals every action with a wall-clock
timestamp to a shared file; the tests read the journal to check who acted when.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.client import Client
from setpoint.testing.waits import eventually

SCRIPT = Path(__file__).with_name("le_candidate.py")
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 1.0
ACTIONS = ("start", "tick")


@dataclass
class Candidate:
    identity: str
    process: subprocess.Popen[bytes]


class Cluster:
    """Candidate processes sharing one journal; all are killed at the end of the test."""

    def __init__(self, tmp_path: Path, kubeconfig: Path, namespace: str) -> None:
        self.journal = tmp_path / "journal.jsonl"
        self.journal.touch()
        self._tmp = tmp_path
        self._kubeconfig = kubeconfig
        self._namespace = namespace
        self.candidates: dict[str, Candidate] = {}

    def spawn(self, identity: str, *extra: str) -> Candidate:
        output = (self._tmp / f"{identity}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--kubeconfig",
                str(self._kubeconfig),
                "--namespace",
                self._namespace,
                "--identity",
                identity,
                "--journal",
                str(self.journal),
                *extra,
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        candidate = Candidate(identity, process)
        self.candidates[identity] = candidate
        return candidate

    def records(self) -> list[dict[str, Any]]:
        lines = self.journal.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def times(self, identity: str, *what: str) -> list[float]:
        return [r["t"] for r in self.records() if r["id"] == identity and r["what"] in what]

    def log_of(self, identity: str) -> str:
        return (self._tmp / f"{identity}.log").read_text(errors="replace")[-3000:]

    def leader(self) -> str | None:
        starters = {r["id"] for r in self.records() if r["what"] == "start"}
        return starters.pop() if len(starters) == 1 else None

    def close(self) -> None:
        for candidate in self.candidates.values():
            if candidate.process.poll() is None:
                os.kill(candidate.process.pid, signal.SIGCONT)  # in case a test paused it
                candidate.process.kill()
            candidate.process.wait(timeout=30)


@pytest.fixture
def cluster(tmp_path: Path, kubeconfig_path: Path, namespace: str) -> Iterator[Cluster]:
    made = Cluster(tmp_path, kubeconfig_path, namespace)
    yield made
    made.close()


async def elect_one_of_two(cluster: Cluster) -> tuple[Candidate, Candidate]:
    """Start two candidates at once; return (leader, standby) once both are settled."""
    cluster.spawn("alpha")
    cluster.spawn("beta")
    leader_id = await eventually(
        cluster.leader, timeout=60, description="one candidate starts acting"
    )
    assert leader_id is not None
    standby_id = "beta" if leader_id == "alpha" else "alpha"
    await eventually(
        lambda: cluster.times(standby_id, "ready"), timeout=60, description="standby is up"
    )
    ready_at = cluster.times(standby_id, "ready")[0]

    def leader_acted_well_after_standby_was_up() -> bool:
        return any(t > ready_at + 2 * RETRY_PERIOD for t in cluster.times(leader_id, "tick"))

    await eventually(
        leader_acted_well_after_standby_was_up, timeout=30, description="leader keeps acting"
    )
    return cluster.candidates[leader_id], cluster.candidates[standby_id]


async def test_only_one_process_acts_and_the_other_takes_over_after_sigkill(
    cluster: Cluster, k8s: Client, namespace: str
) -> None:
    """Two manager processes: one acts; SIGKILL it and the other takes over within the lease.

    Both candidates campaign on one Lease. Only the elected one ever starts its leader-only
    runnable, while the standby runs its other work. After the leader is killed with SIGKILL
    (no release, no goodbye), the standby takes over once the lease expires on its own clock:
    at least lease_duration after the last renewal it saw, and at most one jittered retry
    period later. The journal shows no moment when both acted: the new leader's first action
    comes after the old leader's last, by at least lease_duration - retry_period.
    """
    leader, standby = await elect_one_of_two(cluster)
    assert cluster.times(standby.identity, *ACTIONS) == [], "the standby must not act"

    killed_at = time.time()
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=10)

    await eventually(
        lambda: cluster.times(standby.identity, "start"),
        timeout=LEASE_DURATION + 5 * RETRY_PERIOD + 10,
        description=f"{standby.identity} takes over",
    )
    took_over_at = cluster.times(standby.identity, "start")[0]
    takeover = took_over_at - killed_at
    print(f"\ntakeover after SIGKILL: {takeover:.2f}s (lease 4s, retry 1s)")
    # Upper bound: the lease expires at most lease_duration after the kill, and the standby
    # wakes at expiry of the record it saw (seen up to 1.2 retry periods late); plus process
    # scheduling slack on a busy machine.
    assert takeover <= LEASE_DURATION + 1.2 * RETRY_PERIOD + 1.0, cluster.log_of(standby.identity)

    old_last_action = max(cluster.times(leader.identity, *ACTIONS))
    gap = took_over_at - old_last_action
    assert gap > 0, "the two leaders' acting intervals overlap"
    # The old leader renewed at most one retry period before it died; the new one waited a
    # full lease duration after seeing that renewal.
    assert gap >= LEASE_DURATION - RETRY_PERIOD - 0.5

    lease = await k8s.get(kinds.Lease, "le-test", namespace=namespace)
    assert lease["spec"]["holderIdentity"] == standby.identity
    assert lease["spec"]["leaseTransitions"] >= 1
    assert lease["spec"]["leaseDurationSeconds"] == 4

    standby.process.send_signal(signal.SIGTERM)
    assert standby.process.wait(timeout=30) == 0, cluster.log_of(standby.identity)
    assert [r["what"] for r in cluster.records() if r["id"] == standby.identity][-2:] == [
        "stop",
        "exit",
    ]


async def test_a_paused_leader_never_acts_after_another_took_over(cluster: Cluster) -> None:
    """A leader frozen past its lease (SIGSTOP) does not act after it resumes, and exits.

    The standby takes over while the old leader is stopped. When the old leader resumes
    (SIGCONT), its timers are all overdue; its leader-only runnable checks
    ``manager.is_leader`` right before each action, which reads the renew deadline from the
    clock, so not a single action lands after the takeover. The old process then exits with
    LeaderElectionLost (exit code 3).
    """
    leader, standby = await elect_one_of_two(cluster)
    leader.process.send_signal(signal.SIGSTOP)
    await eventually(
        lambda: cluster.times(standby.identity, "start"),
        timeout=LEASE_DURATION + 5 * RETRY_PERIOD + 10,
        description=f"{standby.identity} takes over from the paused leader",
    )
    took_over_at = cluster.times(standby.identity, "start")[0]

    leader.process.send_signal(signal.SIGCONT)
    assert leader.process.wait(timeout=30) == 3, cluster.log_of(leader.identity)
    late = [t for t in cluster.times(leader.identity, *ACTIONS) if t >= took_over_at]
    assert late == [], f"the old leader acted {len(late)} times after the takeover"
    assert "lost" in [r["what"] for r in cluster.records() if r["id"] == leader.identity]
    assert cluster.times(standby.identity, "tick"), "the new leader acts"


async def test_release_on_cancel_hands_over_without_waiting_for_expiry(cluster: Cluster) -> None:
    """With release_on_cancel, a leader stopped by SIGTERM hands the lease over at once.

    The leader stops its leader-only work first, then writes an empty holder; the standby
    takes over at its next retry instead of waiting out the lease, and the two acting
    intervals do not overlap.
    """
    cluster.spawn("alpha", "--release-on-cancel")
    cluster.spawn("beta", "--release-on-cancel")
    leader_id = await eventually(cluster.leader, timeout=60, description="one leads")
    assert leader_id is not None
    standby_id = "beta" if leader_id == "alpha" else "alpha"
    await eventually(lambda: cluster.times(standby_id, "ready"), timeout=60, description="up")

    stopped_at = time.time()
    cluster.candidates[leader_id].process.send_signal(signal.SIGTERM)
    assert cluster.candidates[leader_id].process.wait(timeout=30) == 0
    await eventually(lambda: cluster.times(standby_id, "start"), timeout=20, description="handover")
    took_over_at = cluster.times(standby_id, "start")[0]
    handover = took_over_at - stopped_at
    print(f"\nhandover after SIGTERM with release_on_cancel: {handover:.2f}s")
    assert handover < LEASE_DURATION, "the lease was not released"
    old_stop = cluster.times(leader_id, "stop")
    assert old_stop and old_stop[0] < took_over_at
    assert max(cluster.times(leader_id, *ACTIONS)) < took_over_at
