"""The operator as two worker processes (`setpoint run --processes 2`), one SIGKILLed mid-way."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

from tenants import CONTROLLER_NAME

import setpoint as sp
from setpoint import kinds
from setpoint.api.keys import ObjectKey
from setpoint.manager.sharding import RING_LABEL
from setpoint.manager.workersplit import worker_of
from setpoint.testing import eventually
from tests._support.shard_cluster import Interval, overlaps

from .tenants_support import (
    TENANT,
    Tenants,
    WorkerProcesses,
    is_ready,
    reconcile_spans,
    unique,
)

N = 30
"""Tenants created at once, one namespace each."""
LEASE = "tenants-workers"
"""The leader election Lease, in the test's namespace (the supervisor holds it)."""
READY_BEFORE_KILL = 3
"""Tenants Ready when a worker is killed: the workers are busy, and most are not done."""


def free_port() -> int:
    """A loopback port free right now (the supervisor binds its probes there)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def probe(port: int, path: str) -> tuple[int, str]:
    """The status and body of the supervisor's probe endpoint ``path`` (0: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return 0, ""


def ready(port: int) -> bool:
    """Whether the supervisor's /readyz answers 200 (every worker ready)."""
    return probe(port, "/readyz")[0] == 200


def owner(name: str) -> int:
    """The worker that owns Tenant ``name`` (cluster-scoped): the split's hash of its key."""
    return worker_of(ObjectKey("", name), 2)


async def shard_leases(k8s: sp.Client, namespace: str) -> list[str]:
    """Names of shard Leases in ``namespace`` (there should be none: nothing is sharded)."""
    leases = await k8s.list(kinds.Lease, namespace=namespace)
    return [
        lease["metadata"]["name"]
        for lease in leases
        if RING_LABEL in lease["metadata"].get("labels", {})
    ]


async def test_two_worker_processes_converge_tenants_through_a_worker_sigkill(
    k8s: sp.Client,
    tenant_crd: sp.GroupVersionKind,
    kubeconfig_path: Path,
    tmp_path: Path,
    namespace: str,
) -> None:
    """Two worker processes split 30 Tenants; one is SIGKILLed mid-way; all converge, never twice.

    The operator runs as `setpoint run examples/tenants/tenants --processes 2`, leader
    election on: the supervisor holds the leader Lease for the Pod, and its two workers split
    the Tenants by the hash of their keys (no label, no shard Lease). Thirty Tenants are
    created at once; as soon as three are Ready, the worker with more unfinished Tenants is
    SIGKILLed. The supervisor restarts it with the same index: the successor (a new pid)
    owns the same Tenants and reconciles the unfinished ones, and every Tenant turns Ready.
    The supervisor's probes report it: `/readyz/worker-<i>` fails while it restarts, and
    `/readyz?verbose` then lists it ready with the new pid and one restart. The Tenants are
    deleted while the workers run, and SIGTERM stops the supervisor and both workers
    cleanly. Both workers reconciled Tenants, the survivor none of the dead worker's
    unfinished ones, and the reconcile spans of every process (OpenTelemetry's console
    exporter, each span naming its pid), creation to deletion, show no moment when two
    processes reconciled one Tenant.
    """
    port = free_port()
    operator = WorkerProcesses(
        kubeconfig_path,
        tmp_path / "directory.db",
        tmp_path / "operator.log",
        processes=2,
        lease=LEASE,
        namespace=namespace,
        probe_port=port,
    )
    tenants = Tenants(k8s)
    began = time.monotonic()
    operator.start()
    try:
        await eventually(
            lambda: asyncio.to_thread(ready, port),
            timeout=60,
            description="the supervisor's /readyz (both workers ready)",
        )

        lease = await k8s.get(kinds.Lease, LEASE, namespace=namespace)
        holder = lease["spec"]["holderIdentity"]
        assert holder and not re.search(r"-w\d+$", holder), f"a worker holds the Lease: {holder}"
        assert await shard_leases(k8s, namespace) == []

        names = [unique("proc") for _ in range(N)]
        assert {owner(n) for n in names} == {0, 1}
        await asyncio.gather(*(tenants.create(n, [f"{n}-a"]) for n in names))

        async def state() -> dict[str, bool]:
            """``name -> Ready`` of this test's Tenants."""
            mine = set(names)
            return {
                t["metadata"]["name"]: is_ready(t)
                for t in await k8s.list(TENANT)
                if t["metadata"]["name"] in mine
            }

        async def some_ready() -> bool:
            return sum((await state()).values()) >= READY_BEFORE_KILL

        await eventually(some_ready, timeout=60, description=f"{READY_BEFORE_KILL} Tenants Ready")
        mine = set(names)

        def both_journaled() -> bool:
            """Each worker has a finished reconcile of these Tenants in the journal already.

            Spans leave a process in batches (``OTEL_BSP_SCHEDULE_DELAY``): killing the
            victim before one of its spans was written would leave it nothing to compare.
            """
            pids = set(operator.workers().values())
            done = {
                s.pid
                for s in reconcile_spans(operator.spans_path)
                if s.controller == CONTROLLER_NAME and s.key in mine
            }
            return len(pids) == 2 and pids <= done

        await eventually(both_journaled, timeout=60, description="both workers in the journal")
        before = await state()
        left = [sum(1 for n, r in before.items() if owner(n) == i and not r) for i in (0, 1)]
        victim = 0 if left[0] >= left[1] else 1
        pid, killed_at = operator.kill_worker(victim)
        at_kill = await state()
        unfinished = sorted(n for n, r in at_kill.items() if owner(n) == victim and not r)
        assert unfinished, f"the kill came after worker {victim} had finished: {at_kill}"
        print(f"\nkilled worker {victim} (pid {pid}) with {len(unfinished)} not Ready")

        async def successor() -> int | None:
            now = operator.workers().get(victim)
            return now if now is not None and now != pid else None

        new_pid = await eventually(successor, timeout=30, description=f"worker {victim} restarted")
        status, _ = await asyncio.to_thread(probe, port, f"/readyz/worker-{victim}")
        assert status == 500, f"/readyz/worker-{victim} answered {status} while it restarted"

        async def converged() -> bool:
            now = await state()
            return len(now) == N and all(now.values())

        await eventually(converged, timeout=60, description=f"all {N} Tenants Ready")
        settled = time.monotonic()
        print(f"started to all Ready: {settled - began:.1f}s")

        line = f"[+]worker-{victim} ready pid={new_pid} (restarts=1)"

        async def reported() -> bool:
            status, body = await asyncio.to_thread(probe, port, "/readyz?verbose")
            return status == 200 and line in body.splitlines()

        await eventually(reported, timeout=10, description=f"/readyz?verbose: {line}")
        assert (await asyncio.to_thread(probe, port, "/healthz"))[0] == 200

        assert await shard_leases(k8s, namespace) == []

        survivor = operator.workers()[1 - victim]

        # Delete them while the workers run (their finalizers), then stop: SIGTERM to the
        # supervisor stops both workers, which flush their last spans.
        await tenants.delete_all()
        code = operator.stop()
        assert code == 0, operator.log_tail()

        journal = [s for s in reconcile_spans(operator.spans_path) if s.key in set(names)]
        intervals = [
            Interval(f"pid {s.pid}", f"{s.controller} {s.key}", s.start, s.end) for s in journal
        ]
        assert overlaps(intervals) == [], operator.log_tail()
        spans = [s for s in journal if s.controller == CONTROLLER_NAME]
        by_pid: dict[int, set[str]] = {}
        for s in spans:
            by_pid.setdefault(s.pid, set()).add(s.key)
        assert by_pid.get(survivor), f"worker {1 - victim} reconciled nothing: {sorted(by_pid)}"
        assert by_pid.get(pid), f"worker {victim} reconciled nothing before the kill"
        assert set(unfinished) <= by_pid.get(new_pid, set()), (
            f"the successor of worker {victim} left some of its Tenants alone"
        )
        assert {s.key for s in spans if s.pid == survivor} & set(unfinished) == set(), (
            "the surviving worker reconciled Tenants of the killed one"
        )
        print(f"reconciles: {len(spans)} by pids {sorted(by_pid)}; killed at {killed_at:.3f}")
    finally:
        try:
            await tenants.delete_all()
        finally:
            operator.stop()
        print(f"whole test: {time.monotonic() - began:.1f}s")
