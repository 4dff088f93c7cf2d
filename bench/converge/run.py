"""Converge benchmark: setpoint, kopf and controller-runtime make N Widgets Ready, cold start.

The workload (issue 3): N Widgets exist before the operator starts; for each, the operator
creates a child ConfigMap with a controller owner reference and sets the status condition
Ready=True. Every implementation runs against its own fresh control plane (etcd and
kube-apiserver, no kube-controller-manager), with the same N, the same objects and the same
concurrency, as its own process. The implementations run alternately, ``--repeat`` times.

Measured from outside each process, the same way for all:

- converge: from spawning the process until a watch on the Widgets has seen all N Ready;
- API requests per object: kube-apiserver's ``apiserver_request_total`` for widgets and
  configmaps, scraped before the spawn and after convergence plus a settle period, over N;
- peak RSS (``VmHWM``) and CPU seconds (``/proc/<pid>/stat``) of the process at convergence;
- memory per object: (RSS at convergence - idle RSS) / N, and for setpoint also the Python
  heap a synced cache of the same objects holds (``tracemalloc``, ``widget_operator.py
  --measure-cache``);
- start to first Ready: on the same fresh plane before the N objects exist, spawn the
  operator, create one Widget, time until it is Ready, and read the CPU seconds the process
  had used by then (start-up CPU); the idle RSS is sampled a second after that;
- import time and RSS of ``import setpoint`` (lazy), of what the operator imports, and of
  ``import kopf``.

Before anything is measured, setpoint's modules are byte-compiled (``.pyc``), as they are in
an installed package and as kopf's are: see ``_common.compile_setpoint_bytecode``.

The floor (``floor.py``) does the same writes with no cache or queue; results are reported
as ratios to it. The table is printed; everything is written as JSON to
``~/.cache/setpoint/bench/converge-<date>.json``::

    .venv/bin/python bench/converge/run.py --n 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (  # noqa: F401 - VALGRIND, instruction_count: for startup.py, inprocess.py
    VALGRIND,
    compile_setpoint_bytecode,
    cpu_seconds_of,
    instruction_count,
    pids_with_argument,
    proc_stats,
)

from setpoint import Client, GroupVersionKind, NotFound, kinds
from setpoint.testing import ControlPlane, ControlPlaneOptions

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PYTHON = sys.executable
CACHE = Path.home() / ".cache" / "setpoint" / "bench"
GO_PEER = REPO / "bench" / "peers" / "controller-runtime"
GO_BINARY = CACHE / "widget-operator-controller-runtime"
WIDGET = GroupVersionKind("bench.setpoint.dev", "v1", "Widget")
NAMESPACE = "bench"
COUNTED = ("widgets", "configmaps")
"""Resources whose requests count as the operator's work (everything else is reported apart)."""
SHARD_LABEL_PREFIX = "shard.sharding.setpoint.dev/"
"""A sharder's assignment label (``--processes N``): run.py times when each object got one."""
SETTLE = 3.0
"""Seconds to keep the operator running after convergence before the "after" scrape, so the
follow-up reconciles its own writes trigger are counted too."""

IMPLEMENTATIONS = (
    "floor",
    "floor-watch",
    "setpoint",
    "setpoint-lean",
    "kopf",
    "controller-runtime",
)
EXPERIMENTS = ("setpoint-otel", "setpoint-uvloop", "floor-uvloop")
"""Variants run only when named in ``--impls``. ``setpoint-otel`` is
``setpoint`` with OpenTelemetry tracing on (the ``setpoint[otel]`` extra), exporting OTLP over
HTTP to a sink in this driver process (:func:`otel_sink`): the tracing overhead.
``setpoint-uvloop`` and ``floor-uvloop`` run ``setpoint`` and ``floor`` on uvloop's event
loop instead of asyncio's (``pip install uvloop``): what the event loop itself costs."""
VARIANT = re.compile(
    r"^(?P<base>floor|setpoint|setpoint-lean|controller-runtime)(?P<cpu>-cpu)?"
    r"(?:-p(?P<processes>\d+))?(?:-sw(?P<sharder>\d+))?$"
)
"""Issue 34's variants, run only when named: ``-cpu`` makes the first reconcile of each Widget
do ~20 ms of pure Python (``cpu_work.py``; the floor does it once per Widget), ``-pN`` runs
N processes (``ManagerOptions(processes=N)`` for setpoint, N copies each doing every N-th
Widget for the floor): ``setpoint-cpu-p2``, ``floor-cpu``, ``setpoint-p1``.
``controller-runtime-cpu`` burns the same 20 ms of CPU time per Widget in the Go peer
(``-cpu-work-ms``), on all the cores its runtime uses. CPU seconds and
memory are then those of every process of the implementation (the supervisor and its
workers), see :func:`process_tree`."""


class _Sink(BaseHTTPRequestHandler):
    """Accepts OTLP/HTTP exports and counts them (the collector stand-in)."""

    received = {"requests": 0, "bytes": 0}

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        _Sink.received["requests"] += 1
        _Sink.received["bytes"] += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


_sink_url: str | None = None


def otel_sink() -> str:
    """The URL of an OTLP/HTTP sink on loopback (started on first use, in a thread)."""
    global _sink_url  # noqa: PLW0603 - one sink per driver run
    if _sink_url is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        _sink_url = f"http://127.0.0.1:{server.server_address[1]}"
    return _sink_url


def other_tree(impl: str) -> Path | None:
    """The source tree of a ``setpoint@TREE`` or ``floor@TREE`` implementation (else ``None``).

    It runs that tree's operator (or floor script) with that tree's venv (an editable
    install of its own src), for before/after runs on one plane:
    ``--impls floor,floor@../base,setpoint,setpoint@../base``.
    """
    for prefix in ("setpoint@", "floor@"):
        if impl.startswith(prefix):
            return Path(impl.removeprefix(prefix)).resolve()
    return None


def command(impl: str, workers: int, profile: Path | None = None) -> list[str]:
    """The argv that runs ``impl`` with ``workers`` concurrent reconciles.

    With ``profile`` (Python implementations only), the process runs under pyinstrument,
    which writes its session there when the process exits; a ``.pstats`` path instead runs
    a setpoint variant under cProfile, timing the main thread's CPU.
    """
    w = str(workers)
    ours = str(HERE / "widget_operator.py")
    kopf = str(REPO / "bench" / "peers" / "kopf" / "kopf_operator.py")
    lean = [PYTHON, ours, "--workers", w, "--style", "lean"]
    safe = [PYTHON, ours, "--workers", w, "--style", "safe"]
    floor = [PYTHON, str(HERE / "floor.py"), "--workers", w, "--namespace", NAMESPACE]
    argv = {
        "floor": floor,
        "floor-watch": [*floor, "--watch"],
        "floor-uvloop": [*floor, "--uvloop"],
        "setpoint": safe,
        "setpoint-lean": lean,
        "setpoint-uvloop": [*safe, "--uvloop"],
        "kopf": [PYTHON, kopf, "--workers", w],
        "controller-runtime": [str(GO_BINARY), "--workers", w],
    }.get(impl)
    tree = other_tree(impl)
    if tree is not None and impl.startswith("floor@"):
        argv = [
            str(tree / ".venv" / "bin" / "python"),
            str(tree / "bench" / "converge" / "floor.py"),
            "--workers",
            w,
            "--namespace",
            NAMESPACE,
        ]
    elif tree is not None:
        argv = [
            str(tree / ".venv" / "bin" / "python"),
            str(tree / "bench" / "converge" / "widget_operator.py"),
            "--workers",
            w,
            "--style",
            "safe",
        ]
    if impl == "setpoint-otel":
        # `env` execs the operator: the measured pid is the operator's own.
        argv = [
            "env",
            "OTEL_TRACES_EXPORTER=otlp",
            f"OTEL_EXPORTER_OTLP_ENDPOINT={otel_sink()}",
            "OTEL_SERVICE_NAME=widget-operator",
            PYTHON,
            ours,
            "--workers",
            w,
            "--style",
            "safe",
        ]
    variant = VARIANT.match(impl)
    if argv is None and variant is not None and variant["base"] == "controller-runtime":
        argv = [str(GO_BINARY), "--workers", w, "--cpu-work-ms", "20"]
    elif argv is None and variant is not None:
        argv = list(floor if variant["base"] == "floor" else lean if "lean" in impl else safe)
        if variant["cpu"]:
            argv.append("--cpu-work")
        if variant["processes"]:
            argv += ["--processes", variant["processes"]]
        if variant["sharder"]:  # an experiment: the sharder's label writes in flight
            argv += ["--sharder-workers", variant["sharder"]]
    if argv is None:
        raise KeyError(impl)
    if profile is not None and profile.suffix == ".pstats":
        if argv[1] != ours:
            raise ValueError(f"--cprofile works with the setpoint variants only, not {impl}")
        argv = [*argv, "--cprofile", str(profile)]
    elif profile is not None and argv[0] == PYTHON:
        argv = [PYTHON, "-m", "pyinstrument", "-r", "pyisession", "-o", str(profile), *argv[1:]]
    return argv


# --------------------------------------------------------------------------- processes


class Process:
    """An implementation's process: spawned with ``KUBECONFIG``, output to a log file."""

    def __init__(self, argv: Sequence[str], kubeconfig: Path, log: Path) -> None:
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), PYTHONUNBUFFERED="1")
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        self._out = log.open("wb")
        self.spawned = time.time()
        self.popen = subprocess.Popen(
            list(argv), env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=REPO
        )
        self.peak_sampled = 0.0
        self.peak_all_sampled = 0.0
        """The highest sum of the RSS of every process in the tree, sampled."""
        self.peaks: dict[int, float] = {}
        """Each process of the tree (this one, its workers): its highest RSS seen."""
        self.cpu_sampled = 0.0
        """The highest CPU seconds of the whole tree seen (as :func:`tree_cpu_seconds`): a tree
        whose parts exit and are reaped around the measurement (the floor's copies) would
        otherwise lose theirs."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> bool:
        return self.popen.poll() is not None

    async def sample(self, interval: float = 0.25) -> None:
        """Track the highest RSS seen (for processes that exit before they are read).

        Also for each process of its tree (a supervisor's workers), and their sum.
        """
        while not self.exited():
            self.peak_sampled = max(self.peak_sampled, proc_stats(self.pid).peak_rss_mib)
            total = cpu = 0.0
            for pid in process_tree(self.pid):
                stats = proc_stats(pid)
                total += stats.rss_mib
                cpu += stats.cpu_seconds + reaped_cpu_seconds(pid)
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), stats.peak_rss_mib)
            self.peak_all_sampled = max(self.peak_all_sampled, total)
            self.cpu_sampled = max(self.cpu_sampled, cpu)
            await asyncio.sleep(interval)

    async def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; return the exit code."""
        if not self.exited():
            self.popen.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.popen.wait, timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                await asyncio.to_thread(self.popen.wait, 10)
        self._out.close()
        return self.popen.returncode


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (a supervisor's workers), from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, ()))
    return tree


def reaped_cpu_seconds(pid: int) -> float:
    """CPU seconds of the children ``pid`` has waited for (``cutime + cstime``), 0 if gone.

    A process tree's CPU is its running processes' plus this, so that children which ended
    before the measurement (a floor's parts) still count.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of ``pid``, its descendants and the children they reaped."""
    return sum(proc_stats(p).cpu_seconds + reaped_cpu_seconds(p) for p in process_tree(pid))


# --------------------------------------------------------------------------- cluster helpers


def widget(name: str, size: int) -> dict[str, Any]:
    """A Widget to create."""
    return {
        "apiVersion": WIDGET.api_version,
        "kind": WIDGET.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"size": size},
    }


def is_ready(obj: dict[str, Any]) -> bool:
    """Whether ``obj`` has status condition Ready=True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def prepare(client: Client) -> None:
    """Install the Widget CRD and the namespace, and wait until Widgets are served."""
    crd = yaml.safe_load((HERE / "widget-crd.yaml").read_text())
    await client.create(crd)
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    deadline = time.monotonic() + 60
    while True:
        current = await client.get(kinds.CustomResourceDefinition, crd["metadata"]["name"])
        conditions = (current.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the Widget CRD was not Established within 60 s")
        await asyncio.sleep(0.1)
    while True:  # discovery can lag the Established condition by a moment
        try:
            await client.list(WIDGET, namespace=NAMESPACE)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def create_widgets(client: Client, n: int, concurrency: int = 16) -> None:
    """Create widget-00000 ... with ``concurrency`` tasks."""
    names = iter(range(n))

    async def worker() -> None:
        for i in names:
            await client.create(widget(f"widget-{i:05d}", i))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def wait_ready(
    client: Client,
    expected: int,
    resource_version: str,
    timeout: float,
    match: Callable[[dict[str, Any]], bool] = is_ready,
    *,
    labelled: dict[str, float] | None = None,
) -> float | None:
    """Watch Widgets from ``resource_version`` until ``expected`` match (are Ready); when.

    ``labelled``, if given, gets the time each Widget was first seen with a shard label (a
    sharder's assignment, with ``--processes``).
    """
    ready: set[str] = set()
    deadline = time.monotonic() + timeout
    rv = resource_version
    while time.monotonic() < deadline:
        remaining = max(1, int(deadline - time.monotonic()))
        async with client.watch(
            WIDGET, namespace=NAMESPACE, resource_version=rv, timeout_seconds=remaining
        ) as watch:
            async for event in watch:
                rv = event.resource_version or rv
                if labelled is not None:
                    metadata = event.object.get("metadata") or {}
                    if metadata.get("name") not in labelled and any(
                        k.startswith(SHARD_LABEL_PREFIX) for k in metadata.get("labels") or {}
                    ):
                        labelled[metadata["name"]] = time.time()
                if event.type in ("ADDED", "MODIFIED") and match(event.object):
                    ready.add(event.object["metadata"]["name"])
                    if len(ready) >= expected:
                        return time.time()
    return None


_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


async def scrape(client: Client) -> Counter[tuple[str, str, str, str]]:
    """``apiserver_request_total`` by (resource, subresource, verb, code)."""
    response = await client.transport.request("GET", "/metrics", accept="text/plain")
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for line in str(response.body).splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        key = (
            labels.get("resource", ""),
            labels.get("subresource", ""),
            labels.get("verb", ""),
            labels.get("code", ""),
        )
        counts[key] += int(float(match["value"]))
    return counts


def delta(
    after: Counter[tuple[str, str, str, str]], before: Counter[tuple[str, str, str, str]]
) -> dict[str, int]:
    """Requests between two scrapes, keyed ``"VERB resource[/sub] code"``."""
    out: dict[str, int] = {}
    for key, value in after.items():
        diff = value - before.get(key, 0)
        if diff > 0:
            resource, sub, verb, code = key
            out[f"{verb} {resource}{'/' + sub if sub else ''} {code}"] = diff
    return dict(sorted(out.items()))


def counted(requests: dict[str, int]) -> int:
    """The requests to the operator's own resources (widgets, configmaps)."""
    return sum(v for k, v in requests.items() if k.split()[1].split("/")[0] in COUNTED)


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    """One implementation on one fresh control plane."""

    impl: str
    repeat: int
    ok: bool = False
    error: str = ""
    converge_seconds: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)
    requests_counted: int = 0
    peak_rss_mib: float = 0.0
    rss_converged_mib: float = 0.0
    cpu_seconds: float = 0.0
    startup_seconds: float | None = None
    startup_cpu_seconds: float | None = None
    """CPU seconds (user + system) the process had used when the probe Widget became Ready:
    the start-up's cost without the waiting a loaded machine adds to the wall time."""
    idle_rss_mib: float | None = None
    bytes_per_object_rss: float | None = None
    cache_bytes_per_object: float | None = None
    exit_code: int | None = None
    reconciles: int | None = None
    """Reconciler calls, as a setpoint operator prints them when it stops (others: ``None``)."""
    load_average: tuple[float, float, float] | None = None
    """The machine's 1/5/15-minute load average when the run started."""
    processes: list[dict[str, float]] = field(default_factory=list)
    """Each process of the implementation at convergence (the first is the one spawned, a
    supervisor's workers follow): pid, CPU seconds, RSS and peak RSS in MiB."""
    labelled_seconds: tuple[float, float] | None = None
    """With a sharder (``--processes N``): seconds from the spawn until half and until all
    of the Widgets carried a shard label (the sharder's labelling pace)."""
    peak_rss_all_mib: float = 0.0
    """The highest sum of the RSS of all its processes, sampled every 0.25 s."""
    server_cpu_seconds: dict[str, float] = field(default_factory=dict)
    """CPU seconds kube-apiserver and etcd used from the spawn to convergence, by program:
    the server's share of the work each implementation causes (watches, apply, writes)."""


async def warm_up(client: Client) -> None:
    """Create and delete one Widget while watching, before anything is timed.

    On a fresh plane, whichever watch of Widgets comes first waits about 2 s for its first
    event (the API server's watch cache is still starting for the new CRD). Every
    implementation paid those 2 s in "start to first Ready" until this warm-up was added;
    they are the API server's, not the operator's.
    """
    listed = await client.list_page(WIDGET, namespace=NAMESPACE, limit=1)
    seen = asyncio.create_task(
        wait_ready(
            client,
            1,
            str(listed.resource_version),
            timeout=60,
            match=lambda obj: obj["metadata"]["name"] == "warm-up",
        )
    )
    await client.create(widget("warm-up", 0))
    if await seen is None:
        raise RuntimeError("the warm-up Widget was not seen by a watch within 60 s")
    await client.delete(WIDGET, "warm-up", namespace=NAMESPACE)


async def startup_probe(
    impl: str, argv: Sequence[str], plane: ControlPlane, client: Client, log: Path
) -> tuple[float, float, float]:
    """Spawn the operator with no Widgets, create one, time until Ready.

    Returns (seconds from spawn to Ready, CPU seconds the process had used then, idle RSS).
    """
    await warm_up(client)
    listed = await client.list_page(WIDGET, namespace=NAMESPACE, limit=1)
    waiter = asyncio.create_task(wait_ready(client, 1, str(listed.resource_version), timeout=120))
    await asyncio.sleep(0.5)  # the watch is open before the clock starts
    proc = Process(argv, plane.kubeconfig_path, log)
    try:
        await client.create(widget("probe", 0))
        ready_at = await waiter
        if ready_at is None:
            raise RuntimeError(f"{impl}: the probe Widget was not Ready within 120 s")
        cpu = tree_cpu_seconds(proc.pid)  # a supervisor's workers' too
        await asyncio.sleep(1.0)  # let start-up garbage settle before reading idle RSS
        idle = sum(proc_stats(pid).rss_mib for pid in process_tree(proc.pid))
        return ready_at - proc.spawned, cpu, idle
    finally:
        await proc.stop()
        # No kube-controller-manager (so no garbage collector): remove the child by hand.
        await client.delete(WIDGET, "probe", namespace=NAMESPACE)
        with contextlib.suppress(NotFound):
            await client.delete(kinds.ConfigMap, "probe", namespace=NAMESPACE)


async def one_run(
    impl: str,
    repeat: int,
    plane: ControlPlane,
    *,
    n: int,
    workers: int,
    logs: Path,
    profile: Path | None = None,
) -> RunResult:
    """Run ``impl`` once against the (fresh) ``plane``."""
    result = RunResult(impl, repeat)
    argv = command(impl, workers, profile)
    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        await prepare(client)
        if not impl.startswith("floor") and profile is None:
            (
                result.startup_seconds,
                result.startup_cpu_seconds,
                result.idle_rss_mib,
            ) = await startup_probe(
                impl, argv, plane, client, logs / f"{impl}-{repeat}-startup.log"
            )
        await create_widgets(client, n)
        listed = await client.list_page(WIDGET, namespace=NAMESPACE, limit=1)
        labelled: dict[str, float] = {}
        watcher = asyncio.create_task(
            wait_ready(client, n, str(listed.resource_version), timeout=900, labelled=labelled)
        )
        await asyncio.sleep(0.5)  # the watch is open before the "before" scrape
        before = await scrape(client)
        servers = pids_with_argument(str(plane.directory))
        server_before = cpu_seconds_of(servers)
        proc = Process(argv, plane.kubeconfig_path, logs / f"{impl}-{repeat}.log")
        sampler = asyncio.create_task(proc.sample())
        try:
            done_at = await watcher
            if done_at is None:
                result.error = f"not all {n} Widgets were Ready within 900 s"
                return result
            result.converge_seconds = done_at - proc.spawned
            if len(labelled) >= n:  # every Widget was assigned by a sharder: when
                times = sorted(t - proc.spawned for t in labelled.values())
                result.labelled_seconds = (times[len(times) // 2], times[-1])
            stats = proc_stats(proc.pid)
            tree = {pid: proc_stats(pid) for pid in process_tree(proc.pid)}
            reaped = {pid: reaped_cpu_seconds(pid) for pid in tree}
            result.server_cpu_seconds = {
                program: seconds - server_before.get(program, 0.0)
                for program, seconds in cpu_seconds_of(servers).items()
            }
            await asyncio.sleep(SETTLE)
            after = await scrape(client)
            later = proc_stats(proc.pid)
            result.requests = delta(after, before)
            # The driver's own watch (opened before the "before" scrape) ended at convergence
            # and was counted then: it is not the operator's.
            driver_watch = "WATCH widgets 200"
            if result.requests.get(driver_watch, 0) > 0:
                result.requests[driver_watch] -= 1
                if not result.requests[driver_watch]:
                    del result.requests[driver_watch]
            result.requests_counted = counted(result.requests)
            # A copy that exited and was reaped just before these reads is in neither; the
            # sampler's highest total (at most one interval old) keeps it.
            measured = sum(s.cpu_seconds + reaped[p] for p, s in tree.items())
            result.cpu_seconds = max(measured, proc.cpu_sampled)
            result.peak_rss_mib = max(later.peak_rss_mib, proc.peak_sampled)
            result.processes = [
                {
                    "pid": pid,
                    "cpu_seconds": s.cpu_seconds,
                    "rss_mib": s.rss_mib,
                    "peak_rss_mib": max(s.peak_rss_mib, proc.peaks.get(pid, 0.0)),
                }
                for pid, s in tree.items()
            ]
            result.peak_rss_all_mib = max(
                proc.peak_all_sampled, sum(s.rss_mib for s in tree.values())
            )
            result.rss_converged_mib = later.rss_mib or stats.rss_mib
            if len(tree) > 1:  # a supervisor and its workers: all of them, as the idle RSS
                result.rss_converged_mib = sum(s.rss_mib for s in tree.values())
            if result.idle_rss_mib is not None and result.rss_converged_mib:
                result.bytes_per_object_rss = (
                    (result.rss_converged_mib - result.idle_rss_mib) * 2**20 / n
                )
            result.ok = True
        finally:
            sampler.cancel()
            result.exit_code = await proc.stop()
            result.reconciles = reconciles_in(proc.log)
        if impl == "setpoint" and profile is None:  # one variant is enough: same cache
            result.cache_bytes_per_object = await measure_cache(plane)
    return result


async def measure_cache(plane: ControlPlane) -> float | None:
    """The tracemalloc bytes per cached object, from ``widget_operator.py --measure-cache``."""
    env = dict(os.environ, KUBECONFIG=str(plane.kubeconfig_path))
    proc = await asyncio.create_subprocess_exec(
        PYTHON,
        str(HERE / "widget_operator.py"),
        "--measure-cache",
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    try:
        return float(json.loads(out.decode().strip().splitlines()[-1])["bytes_per_object"])
    except (ValueError, IndexError, KeyError):
        return None


def run_on_fresh_plane(
    impl: str, repeat: int, *, n: int, workers: int, logs: Path, profile: Path | None = None
) -> tuple[RunResult, str]:
    """Start a control plane, run ``impl`` on it, stop it; also return the server version."""
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:

        async def go() -> tuple[RunResult, str]:
            result = await one_run(
                impl, repeat, plane, n=n, workers=workers, logs=logs, profile=profile
            )
            async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
                version = str((await client.server_version()).get("gitVersion", "?"))
            return result, version

        return asyncio.run(go())


# --------------------------------------------------------------------------- imports, versions


_IMPORT_PROBE = """
import time
started = time.perf_counter()
{code}
elapsed = time.perf_counter() - started
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(elapsed, hwm / 1024)
"""


def measure_import(code: str, runs: int = 5) -> dict[str, float]:
    """Median in-process time and peak RSS of running ``code`` in a fresh interpreter.

    Both are read inside the child: ``ru_maxrss`` of a child would include the pages it
    shared with this (large) parent before ``exec``.
    """
    times: list[float] = []
    rss: list[float] = []
    for _ in range(runs):
        out = subprocess.run(
            [PYTHON, "-c", _IMPORT_PROBE.format(code=code)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        times.append(float(out[0]))
        rss.append(float(out[1]))
    return {"seconds": statistics.median(times), "rss_mib": statistics.median(rss)}


IMPORTS = {
    "python (no import)": "pass",
    "import setpoint": "import setpoint",
    "setpoint operator imports": (
        "from setpoint import Manager, apply_child, update_status, set_condition; "
        "import setpoint.controller, setpoint.cache"
    ),
    "import kopf": "import kopf",
}


def render_profile(session: Path) -> str:
    """Render a pyinstrument session as a call tree and a flat self-time list; return the stem."""
    stem = session.with_suffix("")
    for suffix, options in ((".tree.txt", ["--show-all"]), (".flat.txt", ["-p", "flat"])):
        render = [PYTHON, "-m", "pyinstrument", "--load", str(session), "-r", "text"]
        subprocess.run([*render, *options, "-o", str(stem) + suffix], check=False)
    return str(stem)


def render_pstats(stats_path: Path) -> str:
    """Write the top functions by own and by cumulative CPU next to ``stats_path``."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(str(stats_path), stream=out)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumtime").print_stats(60)
    text_path = stats_path.with_suffix(".txt")
    text_path.write_text(out.getvalue())
    return str(text_path)


def build_go_peer(output: Path = GO_BINARY) -> str | None:
    """Build the controller-runtime peer to ``output``; return why it failed, or None."""
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["go", "build", "-o", str(output), "."],
            cwd=GO_PEER,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"go build could not run: {exc}"
    if done.returncode != 0:
        return f"go build failed: {done.stderr.strip()[-2000:]}"
    return None


def versions() -> dict[str, str]:
    """Versions of everything measured."""
    out: dict[str, str] = {"python": platform.python_version()}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    # The runtime runs from the working tree: say so when it differs from the commit.
    out["setpoint"] = (commit or "?") + (" + uncommitted changes in src/" if dirty else "")
    try:
        out["kopf"] = importlib.metadata.version("kopf")
    except importlib.metadata.PackageNotFoundError:
        out["kopf"] = "not installed"
    go_mod = (GO_PEER / "go.mod").read_text()
    for module in ("sigs.k8s.io/controller-runtime", "k8s.io/client-go"):
        match = re.search(rf"^\s*{re.escape(module)} (\S+)", go_mod, re.MULTILINE)
        out[module] = match.group(1) if match else "?"
    with contextlib.suppress(OSError):
        out["go"] = subprocess.run(
            ["go", "version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    return out


# --------------------------------------------------------------------------- report


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, low, high of ``values``."""
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def fmt(values: Sequence[float], digits: int = 1, scale: float = 1.0) -> str:
    """``"median [low-high]"``."""
    if not values:
        return "n/a"
    s = summary([v * scale for v in values])
    return f"{s['median']:.{digits}f} [{s['low']:.{digits}f}-{s['high']:.{digits}f}]"


def server_cpu(result: RunResult) -> float:
    """CPU seconds kube-apiserver and etcd spent while ``result``'s implementation converged."""
    return sum(result.server_cpu_seconds.values())


def table(results: Sequence[RunResult], n: int, impls: Sequence[str]) -> str:
    """The Markdown table: absolute numbers and ratios to the floor (medians)."""
    by = {i: [r for r in results if r.impl == i and r.ok] for i in impls}
    floor = by.get("floor") or []
    floor_time = statistics.median([r.converge_seconds for r in floor]) if floor else 0.0
    floor_req = statistics.median([r.requests_counted / n for r in floor]) if floor else 0.0
    floor_cpu = statistics.median([r.cpu_seconds for r in floor]) if floor else 0.0
    floor_server = statistics.median([server_cpu(r) for r in floor]) if floor else 0.0
    headers = [
        "implementation",
        "converge s",
        "x floor",
        "requests/object",
        "x floor",
        "CPU s",
        "x floor",
        "server CPU s",
        "x floor",
        "peak RSS MiB",
        "start to first Ready s",
        "start-up CPU s",
        "idle RSS MiB",
        "KiB/object (RSS)",
    ]
    lines = ["| " + " | ".join(headers) + " |", "| :--- |" + " ---: |" * (len(headers) - 1)]
    for impl in impls:
        runs = by.get(impl) or []
        failed = [r for r in results if r.impl == impl and not r.ok]
        if not runs:
            reason = failed[0].error if failed else "not run"
            lines.append(f"| {impl} | failed: {reason} |" + " |" * (len(headers) - 2))
            continue
        t = [r.converge_seconds for r in runs]
        q = [r.requests_counted / n for r in runs]
        c = [r.cpu_seconds for r in runs]
        srv = [server_cpu(r) for r in runs]

        def x(values: list[float], base: float) -> str:
            return f"{statistics.median(values) / base:.2f}x" if base else "n/a"

        startup = [r.startup_seconds for r in runs if r.startup_seconds is not None]
        startup_cpu = [r.startup_cpu_seconds for r in runs if r.startup_cpu_seconds is not None]
        idle = [r.idle_rss_mib for r in runs if r.idle_rss_mib is not None]
        per_object = [r.bytes_per_object_rss for r in runs if r.bytes_per_object_rss is not None]
        lines.append(
            "| "
            + " | ".join(
                [
                    impl + (f" ({len(failed)} failed)" if failed else ""),
                    fmt(t),
                    x(t, floor_time),
                    fmt(q, 2),
                    x(q, floor_req),
                    fmt(c),
                    x(c, floor_cpu),
                    fmt(srv),
                    x(srv, floor_server),
                    fmt([r.peak_rss_mib for r in runs]),
                    fmt(startup, 2),
                    fmt(startup_cpu, 2),
                    fmt(idle),
                    fmt(per_object, 1, 1 / 1024),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def reconciles_in(log: Path) -> int | None:
    """The count a setpoint operator prints as it stops (``reconciles N``), if it did.

    With ``--processes``, every process prints its own (the supervisor 0): their sum.
    """
    found = re.findall(rb"^reconciles (\d+)$", log.read_bytes(), re.MULTILINE)
    return sum(int(n) for n in found) if found else None


def reconcile_counts(results: Sequence[RunResult], n: int, impls: Sequence[str]) -> str:
    """Median reconciler calls per object, for the implementations that report them."""
    parts = []
    for impl in impls:
        counts = [r.reconciles / n for r in results if r.impl == impl and r.ok and r.reconciles]
        if counts:
            parts.append(f"{impl} {fmt(counts, 2)}")
    return "Reconciles per object (median [range]): " + ", ".join(parts) if parts else ""


def request_breakdown(results: Sequence[RunResult], n: int, impls: Sequence[str]) -> str:
    """Median requests per object by verb, resource and code, per implementation."""
    lines = []
    for impl in impls:
        runs = [r for r in results if r.impl == impl and r.ok]
        if not runs:
            continue
        keys = sorted({k for r in runs for k in r.requests})
        parts = []
        for key in keys:
            if key.split()[1].split("/")[0] not in COUNTED:
                continue
            value = statistics.median([r.requests.get(key, 0) for r in runs])
            parts.append(f"{key}: {value / n:.3f}")
        other = statistics.median([sum(r.requests.values()) - r.requests_counted for r in runs])
        lines.append(f"- {impl}: " + ", ".join(parts) + f"; other resources: {other:.0f} total")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="Widgets to converge")
    parser.add_argument("--repeat", type=int, default=3, help="runs per implementation")
    parser.add_argument("--workers", type=int, default=8, help="concurrent reconciles, all")
    parser.add_argument(
        "--impls",
        default=",".join(IMPLEMENTATIONS),
        help="comma-separated, in run order; setpoint@TREE (floor@TREE) runs another source "
        "tree's operator (floor) with that tree's .venv (before/after comparisons on one plane)",
    )
    parser.add_argument(
        "--profile",
        default="",
        help="comma-separated Python implementations to run once more under pyinstrument "
        "(not counted in the table); reports go next to the JSON",
    )
    parser.add_argument(
        "--cprofile",
        default="",
        help="comma-separated setpoint variants to run once more under cProfile, timing the "
        "event loop thread's CPU (not counted in the table)",
    )
    args = parser.parse_args()
    impls = [i for i in args.impls.split(",") if i]
    unknown = sorted(
        set(impls)
        - set(IMPLEMENTATIONS)
        - set(EXPERIMENTS)
        - {i for i in impls if other_tree(i) is not None or VARIANT.match(i)}
    )
    if unknown:
        parser.error(
            f"unknown implementations {unknown}; choose from {IMPLEMENTATIONS + EXPERIMENTS}"
        )

    started = datetime.datetime.now(datetime.UTC)
    stamp = started.strftime("%Y-%m-%d-%H%M")
    logs = CACHE / f"converge-{stamp}-logs"
    skipped: dict[str, str] = {}
    if any(i.startswith("controller-runtime") for i in impls):
        why = build_go_peer()
        if why is not None:
            skipped.update({i: why for i in impls if i.startswith("controller-runtime")})
            print(f"controller-runtime skipped: {why}", file=sys.stderr)
    if "kopf" in impls and versions()["kopf"] == "not installed":
        skipped["kopf"] = "kopf is not installed in this venv (pip install kopf)"
    runnable = [i for i in impls if i not in skipped]

    # The operators' processes load setpoint from bytecode, as an installed package does
    # (see compile_setpoint_bytecode): otherwise imports and start-up time Python's compiler.
    compile_setpoint_bytecode()
    for tree in filter(None, map(other_tree, impls)):
        compile_setpoint_bytecode(tree / "src" / "setpoint")
    load_at_start = os.getloadavg()
    # `import kopf` is measured only where kopf is installed (the bench extra does not pin
    # it; `make bench` runs without it); otherwise the report says why it is missing.
    kopf_installed = versions()["kopf"] != "not installed"
    if not kopf_installed:
        skipped["import kopf"] = "kopf is not installed in this venv (pip install kopf)"
    imports = {
        label: measure_import(code)
        for label, code in IMPORTS.items()
        if kopf_installed or label != "import kopf"
    }
    results: list[RunResult] = []
    server = "?"
    for repeat in range(args.repeat):
        # Rotate the order each round, so no implementation always runs first or last.
        order = runnable[repeat % len(runnable) :] + runnable[: repeat % len(runnable)]
        for impl in order:
            t0 = time.monotonic()
            load = os.getloadavg()
            try:
                result, server = run_on_fresh_plane(
                    impl, repeat, n=args.n, workers=args.workers, logs=logs
                )
            except Exception as exc:
                result = RunResult(impl, repeat, error=f"{type(exc).__name__}: {exc}")
            result.load_average = load
            results.append(result)
            print(
                f"[{repeat}] {impl}: ok={result.ok} converge={result.converge_seconds:.1f}s "
                f"requests={result.requests_counted} cpu={result.cpu_seconds:.1f}s "
                f"peak={result.peak_rss_mib:.0f}MiB startup={result.startup_seconds} "
                f"({time.monotonic() - t0:.0f}s) {result.error}",
                file=sys.stderr,
                flush=True,
            )

    profiles: dict[str, str] = {}
    for impl in [i for i in args.profile.split(",") if i]:
        target = CACHE / f"converge-{stamp}-profile-{impl}.pyisession"
        try:
            profiled, _ = run_on_fresh_plane(
                impl, -1, n=args.n, workers=args.workers, logs=logs, profile=target
            )
        except Exception as exc:
            print(f"profile of {impl} failed: {exc}", file=sys.stderr)
            continue
        profiles[impl] = render_profile(target)
        print(
            f"[profile] {impl}: converge={profiled.converge_seconds:.1f}s -> {target}",
            file=sys.stderr,
            flush=True,
        )

    for impl in [i for i in args.cprofile.split(",") if i]:
        target = CACHE / f"converge-{stamp}-cprofile-{impl}.pstats"
        try:
            profiled, _ = run_on_fresh_plane(
                impl, -1, n=args.n, workers=args.workers, logs=logs, profile=target
            )
        except Exception as exc:
            print(f"cProfile of {impl} failed: {exc}", file=sys.stderr)
            continue
        profiles[f"{impl} (cProfile)"] = render_pstats(target)
        print(
            f"[cprofile] {impl}: converge={profiled.converge_seconds:.1f}s "
            f"cpu={profiled.cpu_seconds:.1f}s -> {target}",
            file=sys.stderr,
            flush=True,
        )

    info = versions()
    info["kubernetes"] = server
    header = [
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Command: `.venv/bin/python {shlex.join(['bench/converge/run.py', *sys.argv[1:]])}`",
        f"- N = {args.n}, workers = {args.workers}, repeats = {args.repeat}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in info.items()),
        f"- Machine: {os.cpu_count()} CPUs visible, {platform.machine()}, shared and noisy",
        "- Load average (1/5/15 min) at the start and at the end: "
        + ", ".join("/".join(f"{v:.2f}" for v in la) for la in (load_at_start, os.getloadavg())),
        "- 1-minute load average when each run started: "
        + ", ".join(
            f"{r.impl}[{r.repeat}] {r.load_average[0]:.1f}" for r in results if r.load_average
        ),
    ]
    if _sink_url is not None:
        header.append(
            f"- OTLP sink (setpoint-otel): {_Sink.received['requests']} exports, "
            f"{_Sink.received['bytes'] / 2**20:.1f} MiB of spans received"
        )
    report = "\n".join(
        [
            *header,
            "",
            table(results, args.n, runnable),
            "",
            "Requests per object (median), by verb, resource and code:",
            request_breakdown(results, args.n, runnable),
            "",
            reconcile_counts(results, args.n, runnable),
            "",
            "setpoint cache, traced Python heap per cached object (Widgets + ConfigMaps): "
            + fmt(
                [r.cache_bytes_per_object for r in results if r.cache_bytes_per_object],
                0,
            )
            + " bytes",
            "",
            "Imports (median of 5 runs):",
            *(
                f"- {label}: {v['seconds']:.3f} s, {v['rss_mib']:.1f} MiB max RSS"
                for label, v in imports.items()
            ),
            *(f"- {impl} skipped: {why}" for impl, why in skipped.items()),
        ]
    )
    print(report)
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"converge-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "date": started.isoformat(),
                "argv": sys.argv,
                "n": args.n,
                "workers": args.workers,
                "versions": info,
                "imports": imports,
                "skipped": skipped,
                "profiles": profiles,
                "results": [asdict(r) for r in results],
                "report": report,
                "logs": str(logs),
            },
            indent=2,
        )
    )
    print(f"\nJSON: {out}\nLogs: {logs}")


if __name__ == "__main__":
    main()
