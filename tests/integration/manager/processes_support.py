"""The tiny operator run as `--processes 2` supervisors, and what they wrote (shared helpers).

Used by test_processes_basic.py (one supervisor under `setpoint run`) and
test_processes_replicas.py (two supervisors, like two Pods of one Deployment, with short
leases). The operator (written to the test's temporary directory) annotates every ConfigMap
of the test's namespace with its worker's index and the ``gen`` it saw, sleeping ``work``
seconds (a ConfigMap data key) first, and journals the start and end of every reconcile with
its process id in one file shared by every process. The supervisor logs ``worker <i> started
pid=<pid>``, which is how a test finds the workers to kill.
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
from pathlib import Path

from setpoint.api import kinds
from setpoint.api.meta import annotations_of, labels_of
from setpoint.client import Client
from setpoint.manager.sharding import shard_label
from tests._support.shard_cluster import Interval

OPERATOR = textwrap.dedent(
    '''
    """A tiny operator: each ConfigMap is annotated with its worker and the gen it saw."""

    import asyncio
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
            data = obj.get("data") or {}
            gen = data.get("gen", "")
            want = {"tinyop/worker": os.environ["SETPOINT_WORKER_INDEX"], "tinyop/seen": gen}
            have = obj["metadata"].get("annotations") or {}
            if any(have.get(k) != v for k, v in want.items()):
                await asyncio.sleep(float(data.get("work", "0")))
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

SHORT_LEASES = textwrap.dedent(
    '''
    """tinyop.py as `setpoint run tinyop.py --processes 2` runs it, with 4 s leases.

    With the shard ring named LEASE over both supervisors' workers (ShardingOptions:
    `setpoint run` has no flag for it) and leader election and shard Leases of 4 s (renew
    deadline 3 s, retry 1 s), so that a killed Pod's Leases expire quickly. Arguments:
    KUBECONFIG NAMESPACE LEASE.
    """

    import asyncio
    import os
    import sys

    import tinyop
    from setpoint.cache import Cache, CacheOptions
    from setpoint.client import Client, load_kubeconfig
    from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions
    from setpoint.manager.sharding import ShardingOptions
    from setpoint.observability.logging import configure_logging

    KUBECONFIG, NAMESPACE, LEASE = sys.argv[1:4]
    TIMINGS = {"lease_duration": 4.0, "renew_deadline": 3.0, "retry_period": 1.0}


    async def main():
        client = Client(load_kubeconfig(KUBECONFIG))
        try:
            manager = Manager(
                client,
                ManagerOptions(
                    processes=2,
                    leader_election=LeaderElectionOptions(
                        name=LEASE, namespace=NAMESPACE, release_on_cancel=True, **TIMINGS
                    ),
                    sharding=ShardingOptions(
                        ring=LEASE, every_controller=True, wait_for_shards=4, **TIMINGS
                    ),
                    new_cache=lambda c: Cache(c, options=CacheOptions(namespaces=(NAMESPACE,))),
                    metrics_bind_address="0",
                    health_probe_bind_address="127.0.0.1:0",
                    graceful_shutdown_timeout=10,
                ),
            )
            tinyop.setup(manager)
            await manager.run()
        finally:
            await client.close()


    index = os.environ.get("SETPOINT_WORKER_INDEX")
    configure_logging(fields={"worker": int(index)} if index else {})
    asyncio.run(main())
    '''
)


def setpoint_run(kubeconfig: Path, namespace: str, lease: str) -> list[str]:
    """The command line of `setpoint run tinyop.py --processes 2` (leases of 15 s)."""
    setpoint = Path(sys.executable).with_name("setpoint")
    return [
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
        lease,
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--health-probe-bind-address",
        "127.0.0.1:0",
        "--graceful-shutdown-timeout",
        "10",
    ]


def short_leases(kubeconfig: Path, namespace: str, lease: str) -> list[str]:
    """The command line of the same operator with 4 s leases (:data:`SHORT_LEASES`)."""
    return [sys.executable, "tinyrun.py", str(kubeconfig), namespace, lease]


class Supervisor:
    """One supervisor process (a "Pod" named ``host``), its workers and its log.

    The operator's files are written to ``directory``, its working directory; every
    supervisor there journals to ``directory/journal.jsonl``. The supervisor runs in a
    process group of its own, as each of its workers does.
    """

    def __init__(self, directory: Path, command: list[str], host: str) -> None:
        (directory / "tinyop.py").write_text(OPERATOR)
        (directory / "tinyrun.py").write_text(SHORT_LEASES)
        self.host = host
        self.journal = directory / "journal.jsonl"
        self.log = directory / f"{host}.log"
        env = {**os.environ, "HOSTNAME": host, "TINYOP_JOURNAL": str(self.journal)}
        self.process = subprocess.Popen(
            command,
            cwd=directory,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            process_group=0,
        )
        self.killed: dict[int, float] = {}
        """Worker pids SIGKILLed by the test, and when."""

    def text(self) -> str:
        """Everything the supervisor and its workers logged."""
        return self.log.read_text(errors="replace")

    def starts(self) -> list[tuple[int, int]]:
        """``(index, pid)`` of every worker start, in order."""
        return [
            (int(i), int(pid))
            for i, pid in re.findall(r"worker (\d+) started pid=(\d+)", self.text())
        ]

    def pids(self) -> set[int]:
        """The pid of every worker this supervisor started."""
        return {pid for _, pid in self.starts()}

    def kill_pod(self) -> float:
        """SIGKILL the supervisor and its workers, as the kubelet kills a Pod; when.

        The supervisor is stopped first (SIGSTOP), so it neither restarts a worker nor closes
        their channels before everything is killed: no worker learns of the kill and stops
        gracefully (releasing its Leases). Each process group is then killed, and the kill's
        time is taken once every worker is dead (a zombie or gone: a SIGKILL takes effect
        when the process next runs, not when ``kill`` returns).

        Raises:
            AssertionError: a worker still runs 10 s after its SIGKILL.

        """
        os.killpg(self.process.pid, signal.SIGSTOP)
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        os.killpg(self.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(running(pid) for pid in pids):
            assert time.monotonic() < deadline, f"workers {pids} still run after SIGKILL"
            time.sleep(0.01)
        killed_at = time.time()
        self.killed.update(dict.fromkeys(pids, killed_at))
        self.process.wait(timeout=30)
        return killed_at

    def close(self) -> None:
        """Kill the supervisor and every worker it started that still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (killed, not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def intervals(journal: Path, killed: dict[int, float]) -> list[Interval]:
    """Every reconcile in ``journal``, ``shard`` being its pid (``str``).

    A reconcile that never ended ends when its process was killed (``killed``), or never.
    """
    found: list[Interval] = []
    open_at: dict[tuple[int, str], float] = {}
    for line in journal.read_text().splitlines() if journal.exists() else []:
        record = json.loads(line)
        slot = (record["pid"], record["k"])
        if record["a"] == "b":
            open_at[slot] = record["t"]
        elif slot in open_at:
            found.append(Interval(str(record["pid"]), record["k"], open_at.pop(slot), record["t"]))
    for (pid, key), start in open_at.items():
        found.append(Interval(str(pid), key, start, killed.get(pid, math.inf)))
    return found


async def create_configmaps(k8s: Client, namespace: str, n: int) -> None:
    """ConfigMaps ``cm-00``... with ``data.gen`` ``"1"``, unlabelled (the sharder assigns)."""
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
            for i in range(n)
        )
    )


async def configmap_state(k8s: Client, namespace: str, lease: str) -> dict[str, dict[str, str]]:
    """``name -> annotations + shard (label on the ring named lease) + gen`` of ``cm-`` ones."""
    label = shard_label(lease)
    return {
        obj["metadata"]["name"]: {
            **annotations_of(obj),
            "shard": labels_of(obj).get(label, ""),
            "gen": (obj.get("data") or {}).get("gen", ""),
        }
        for obj in await k8s.list(kinds.ConfigMap, namespace=namespace)
        if obj["metadata"]["name"].startswith("cm-")
    }
