"""`setpoint run --processes 2` on the real API server: a split, a SIGKILL, a restart.

A tiny operator (written to the test's temporary directory) annotates every ConfigMap of the
test's namespace with its worker's index and the ``gen`` it saw, and journals the start and
end of every reconcile with its process id. The supervisor logs ``worker <i> started
pid=<pid>``, which is how the test finds the worker to kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from setpoint.api import kinds
from setpoint.api.meta import annotations_of, labels_of
from setpoint.client import Client, MergePatch
from setpoint.manager.processes import ring_name
from setpoint.manager.sharding import shard_label
from setpoint.testing.waits import eventually
from tests._support.shard_cluster import Interval, overlaps

N = 30
LEASE_ID = "tiny-ops"
HOST = "tinypod"

OPERATOR = textwrap.dedent(
    '''
    """A tiny operator: each ConfigMap is annotated with its worker and the gen it saw."""

    import json
    import os
    import time

    import setpoint as sp
    from setpoint import kinds
    from setpoint.client import MergePatch

    JOURNAL = os.environ["TINYOP_JOURNAL"]


    def journal(key, what):
        line = json.dumps({"pid": os.getpid(), "k": key, "a": what, "t": time.time()})
        fd = os.open(JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\\n").encode())
        finally:
            os.close(fd)


    async def reconcile(ctx, request):
        key = f"{request.namespace}/{request.name}"
        journal(key, "b")
        try:
            obj = await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
            gen = (obj.get("data") or {}).get("gen", "")
            want = {"tinyop/worker": os.environ["SETPOINT_WORKER_INDEX"], "tinyop/seen": gen}
            have = obj["metadata"].get("annotations") or {}
            if any(have.get(k) != v for k, v in want.items()):
                await ctx.client.patch(
                    kinds.ConfigMap,
                    request.name,
                    MergePatch({"metadata": {"annotations": want}}),
                    namespace=request.namespace,
                )
        except sp.NotFound:
            pass
        finally:
            journal(key, "e")


    def setup(manager):
        manager.controller("tinyop").for_(kinds.ConfigMap).build(reconcile)
    '''
)


class Operator:
    """The supervisor process and what it and its workers wrote."""

    def __init__(self, tmp_path: Path, kubeconfig: Path, namespace: str) -> None:
        (tmp_path / "tinyop.py").write_text(OPERATOR)
        self.journal = tmp_path / "journal.jsonl"
        self.log = tmp_path / "operator.log"
        env = {
            **os.environ,
            "HOSTNAME": HOST,
            "TINYOP_JOURNAL": str(self.journal),
        }
        setpoint = Path(sys.executable).with_name("setpoint")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(setpoint),
                "run",
                "tinyop.py",
                "--processes",
                "2",
                "--kubeconfig",
                str(kubeconfig),
                "--namespace",
                namespace,
                "--leader-election-namespace",
                namespace,
                "--leader-election-id",
                LEASE_ID,
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--health-probe-bind-address",
                "127.0.0.1:0",
                "--graceful-shutdown-timeout",
                "10",
            ],
            cwd=tmp_path,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.killed: dict[int, float] = {}

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def starts(self) -> list[tuple[int, int]]:
        """``(index, pid)`` of every worker start, in order."""
        return [
            (int(i), int(pid))
            for i, pid in re.findall(r"worker (\d+) started pid=(\d+)", self.text())
        ]

    def intervals(self) -> list[Interval]:
        found: list[Interval] = []
        open_at: dict[tuple[int, str], float] = {}
        for line in self.journal.read_text().splitlines() if self.journal.exists() else []:
            record = json.loads(line)
            slot = (record["pid"], record["k"])
            if record["a"] == "b":
                open_at[slot] = record["t"]
            elif slot in open_at:
                found.append(
                    Interval(str(record["pid"]), record["k"], open_at.pop(slot), record["t"])
                )
        for (pid, key), start in open_at.items():
            found.append(Interval(str(pid), key, start, self.killed.get(pid, math.inf)))
        return found

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for _, pid in self.starts():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def operator(tmp_path: Path, kubeconfig_path: Path, namespace: str) -> Iterator[Operator]:
    made = Operator(tmp_path, kubeconfig_path, namespace)
    yield made
    made.close()


async def _state(k8s: Client, namespace: str) -> dict[str, dict[str, str]]:
    label = shard_label(ring_name(LEASE_ID))
    return {
        obj["metadata"]["name"]: {
            **annotations_of(obj),
            "shard": labels_of(obj).get(label, ""),
            "gen": (obj.get("data") or {}).get("gen", ""),
        }
        for obj in await k8s.list(kinds.ConfigMap, namespace=namespace)
        if obj["metadata"]["name"].startswith("cm-")
    }


SHARD = re.compile(rf"^{HOST}-[0-9a-f]{{6}}-w[01]$")
"""A worker's shard id: the Pod (host) name, the supervisor's random group, the index."""


def _converged(state: dict[str, dict[str, str]], gen: str) -> bool:
    return len(state) == N and all(
        s.get("tinyop/seen") == gen == s["gen"] and SHARD.match(s["shard"]) for s in state.values()
    )


async def test_two_workers_split_the_objects_and_a_killed_one_comes_back_as_itself(
    operator: Operator, k8s: Client, namespace: str
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
    await asyncio.gather(
        *(
            k8s.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i:02d}", "namespace": namespace},
                    "data": {"gen": "1"},
                }
            )
            for i in range(N)
        )
    )

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
    for interval in sorted(operator.intervals(), key=lambda i: i.start):
        last_by_key[interval.key] = interval
    assert {last_by_key[k].shard for k in theirs} == {str(successor)}
    assert overlaps(operator.intervals()) == [], operator.text()[-3000:]

    operator.process.send_signal(signal.SIGTERM)
    assert operator.process.wait(timeout=30) == 0, operator.text()[-3000:]
    for _, pid in operator.starts():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
