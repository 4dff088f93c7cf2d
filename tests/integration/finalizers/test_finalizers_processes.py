"""Finalizer handlers in a real operator process: crashes, deadlines, and ``setpoint doctor``.

Each test runs ``tests/_support/finalizer_operator.py`` (``python -m``, from the repository
root) with ``sys.executable`` against the session's control plane. Its cleanup journals
``start`` and ``end`` (with its pid) to a file the test reads; ``setpoint doctor
finalizers`` runs as a subprocess too (``python -m setpoint.cli.doctor``, the same command
as ``setpoint doctor``) with the plane's kubeconfig.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.api.meta import finalizers_of, metadata_of
from setpoint.client import Client, NotFound
from setpoint.client.safe import remove_finalizer
from setpoint.controller.finalizers import read_cleanup_records
from setpoint.testing.waits import eventually
from tests._support.finalizer_flow import FIN
from tests._support.kinds import GIZMO

ROOT = Path(__file__).resolve().parents[3]
"""The repository root: the operator runs as a module of the tests package from there."""
SCRIPT = "tests._support.finalizer_operator"
LEASE = "finalizer-operator"

pytestmark = pytest.mark.usefixtures("test_crds")


class Operators:
    """Operator processes sharing one journal; all are killed at the end of the test."""

    def __init__(self, tmp_path: Path, kubeconfig: Path, namespace: str) -> None:
        self.journal = tmp_path / "journal.jsonl"
        self.journal.touch()
        self._tmp = tmp_path
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(self, *extra: str) -> subprocess.Popen[bytes]:
        log = (self._tmp / f"operator-{len(self.processes)}.log").open("wb")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                SCRIPT,
                "--kubeconfig",
                str(self.kubeconfig),
                "--namespace",
                self.namespace,
                "--journal",
                str(self.journal),
                *extra,
            ],
            stdout=log,
            cwd=ROOT,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        return process

    def records(self, what: str | None = None, *, pid: int | None = None) -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in self.journal.read_text().splitlines() if x.strip()]
        return [
            r
            for r in lines
            if (what is None or r["what"] == what) and (pid is None or r["pid"] == pid)
        ]

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-2000:] for p in sorted(self._tmp.glob("operator-*.log"))
        )

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@pytest.fixture
def operators(tmp_path: Path, kubeconfig_path: Path, namespace: str) -> Iterator[Operators]:
    made = Operators(tmp_path, kubeconfig_path, namespace)
    yield made
    made.close()


async def kill(process: subprocess.Popen[bytes]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    await eventually(lambda: process.poll() is not None, timeout=10, description="process gone")


async def doctor(kubeconfig: Path, *args: str) -> str:
    """Run ``setpoint doctor finalizers ARGS`` as a subprocess; return its standard output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "setpoint.cli.doctor",
        "finalizers",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def doctor_json(kubeconfig: Path, namespace: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        await doctor(kubeconfig, "-n", namespace, "--older-than", "0s", "-o", "json")
    )
    return report


def stuck_entry(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    for obj in report["stuck"]:
        if obj["kind"] == "Gizmo" and obj["name"] == name:
            return obj  # type: ignore[no-any-return]
    return None


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse a Prometheus text exposition into {(name, sorted labels): value}."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: list[tuple[str, str]] = []
        for part in rest.rstrip("}").split('",'):
            if "=" in part:
                key, _, val = part.partition("=")
                labels.append((key.strip(), val.strip().strip('"')))
        samples[(name, tuple(sorted(labels)))] = float(value)
    return samples


async def widget_with_finalizer(k8s: Client, namespace: str, operators: Operators) -> None:
    await k8s.create(
        {
            "apiVersion": GIZMO.api_version,
            "kind": GIZMO.kind,
            "metadata": {"name": "w1", "namespace": namespace},
            "spec": {"size": 1},
        }
    )
    await eventually(
        lambda: operators.records("reconcile"),
        timeout=60,
        description=f"w1 reconciled (with its finalizer); logs:\n{operators.logs()}",
    )


async def release(k8s: Client, namespace: str, finalizer: str = FIN) -> None:
    try:
        obj = await k8s.get(GIZMO, "w1", namespace=namespace)
    except NotFound:
        return
    await remove_finalizer(k8s, obj, finalizer)


async def test_cleanup_killed_midway_runs_again_after_restart(
    k8s: Client, namespace: str, operators: Operators
) -> None:
    """SIGKILL during a slow cleanup; the restarted operator runs it again and the object goes.

    The first process (leader election on) starts a 30-second cleanup and is killed with
    SIGKILL in the middle of it: the object stays, deleting, with the finalizer. A second
    process takes the lease over once it expires, runs the cleanup again (cleanups must be
    idempotent for exactly this reason), removes the finalizer, and the object is deleted.
    The journal shows two starts (one per process) and one end; ``setpoint doctor`` then
    finds nothing stuck.
    """
    first = operators.spawn("--leader-election", "--cleanup-seconds", "30")
    await widget_with_finalizer(k8s, namespace, operators)
    await k8s.delete(GIZMO, "w1", namespace=namespace)
    await eventually(
        lambda: operators.records("start"), timeout=30, description="first cleanup started"
    )
    await kill(first)

    held = await k8s.get(GIZMO, "w1", namespace=namespace)
    assert metadata_of(held).get("deletionTimestamp")
    assert finalizers_of(held) == [FIN]
    assert operators.records("end") == []

    second = operators.spawn("--leader-election", "--cleanup-seconds", "0.5")

    async def gone() -> bool:
        try:
            await k8s.get(GIZMO, "w1", namespace=namespace)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=60, description=f"w1 deleted; logs:\n{operators.logs()}")
    starts = operators.records("start")
    assert [r["pid"] for r in starts] == [first.pid, second.pid]
    assert [r["pid"] for r in operators.records("end")] == [second.pid]
    assert len(await k8s.list(GIZMO, namespace=namespace)) == 0
    report = await doctor_json(operators.kubeconfig, namespace)
    assert report["stuck"] == []
    assert report["resourcesScanned"] > 0


async def test_hanging_cleanup_shows_in_doctor_and_metrics(
    k8s: Client, namespace: str, operators: Operators
) -> None:
    """A cleanup that hangs hits its deadline, is retried, and is visible from outside.

    The operator's cleanup never returns; its 1-second deadline cancels it and it is retried
    with backoff. ``setpoint doctor finalizers -o json`` lists the object with the finalizer,
    the recorded deadline error and its owner running (the manager's Lease advertises the
    finalizer and is fresh); the operator's /metrics counts the failures and reports one
    pending object. After the operator is killed, the doctor reports the owner stopped once
    its Lease expires: a leak diagnosed in one command. (The finalizer name is unique to
    this test: another test's operator, killed a moment ago, may still hold a fresh Lease
    advertising the usual one, and the doctor would rightly name that Lease.)
    """
    fin = f"widgets.test.setpoint.dev/hang-{uuid.uuid4().hex[:8]}"
    process = operators.spawn(
        "--leader-election", "--cleanup", "hang", "--deadline", "1", "--finalizer", fin
    )
    try:
        await widget_with_finalizer(k8s, namespace, operators)
        await k8s.delete(GIZMO, "w1", namespace=namespace)
        await eventually(
            lambda: len(operators.records("start")) >= 2,
            timeout=30,
            description="cleanup retried after its deadline",
        )

        async def recorded() -> bool:
            obj = await k8s.get(GIZMO, "w1", namespace=namespace)
            return fin in read_cleanup_records(obj)

        await eventually(recorded, timeout=30, description="failure recorded on the object")

        report = await doctor_json(operators.kubeconfig, namespace)
        entry = stuck_entry(report, "w1")
        assert entry is not None, report
        assert entry["namespace"] == namespace
        assert entry["waitingSeconds"] >= 0
        [finalizer] = entry["finalizers"]
        assert finalizer["name"] == fin
        assert finalizer["lastError"]["reason"] == "CleanupDeadlineExceeded"
        assert "deadline of 1s" in finalizer["lastError"]["error"]
        assert finalizer["lastError"]["failures"] >= 1
        assert finalizer["owner"]["state"] == "running"
        assert finalizer["owner"]["controller"] == "widgets"
        assert finalizer["owner"]["lease"] == f"{namespace}/{LEASE}"

        table = await doctor(operators.kubeconfig, "--kind", "gizmos", "--older-than", "0")
        assert "w1" in table and fin in table and "running" in table

        [up] = operators.records("up", pid=process.pid)
        samples = await asyncio.to_thread(scrape, up["metrics"])
        failures = samples[
            (
                "setpoint_finalizer_cleanup_failures_total",
                (("controller", "widgets"), ("finalizer", fin)),
            )
        ]
        assert failures >= 1
        assert samples[("setpoint_finalizer_pending_objects", (("finalizer", fin),))] == 1
        assert samples[("setpoint_finalizer_oldest_pending_seconds", (("finalizer", fin),))] > 0

        await kill(process)

        async def owner_stopped() -> bool:
            entry = stuck_entry(await doctor_json(operators.kubeconfig, namespace), "w1")
            return entry is not None and entry["finalizers"][0]["owner"]["state"] == "stopped"

        await eventually(owner_stopped, timeout=60, interval=1, description="owner stopped")
    finally:
        await release(k8s, namespace, fin)


async def test_doctor_says_unknown_without_leader_election(
    k8s: Client, namespace: str, operators: Operators
) -> None:
    """Without leader election no Lease says who runs the finalizer: the doctor says so.

    The operator runs without leader election and its cleanup hangs. The doctor lists the
    stuck object with its last error and owner ``unknown``, explaining that a controller
    without leader election has no Lease to read. (The finalizer name is unique to this
    test: Leases other tests' operators left behind advertise the usual one.)
    """
    finalizer = f"widgets.test.setpoint.dev/no-lease-{uuid.uuid4().hex[:8]}"
    operators.spawn("--cleanup", "hang", "--deadline", "1", "--finalizer", finalizer)
    try:
        await widget_with_finalizer(k8s, namespace, operators)
        await k8s.delete(GIZMO, "w1", namespace=namespace)

        async def listed() -> dict[str, Any] | None:
            entry = stuck_entry(await doctor_json(operators.kubeconfig, namespace), "w1")
            return entry if entry and entry["finalizers"][0]["lastError"] else None

        entry = await eventually(listed, timeout=60, interval=1, description="w1 listed")
        [stuck] = entry["finalizers"]
        assert stuck["name"] == finalizer
        assert stuck["lastError"]["reason"] == "CleanupDeadlineExceeded"
        assert stuck["owner"]["state"] == "unknown"
        assert "without leader election" in stuck["owner"]["detail"]
    finally:
        await release(k8s, namespace, finalizer)
