"""Issue 34's benchmark: setpoint in one and in N worker processes (``--processes``).

Three parts, each with ``run.py``'s machinery (a fresh control plane per run, the same
measures, implementations interleaved in a rotating order, ``--repeat`` rounds):

- ``cpu``: the CPU-bound variant of the converge benchmark. The first reconcile of each
  Widget renders a template for ~20 ms of pure Python (``cpu_work.py``) before its writes,
  so the operator, not the API server, is the bottleneck. ``setpoint-cpu`` (one process,
  today's code path), ``setpoint-cpu-p2`` (``ManagerOptions(processes=2)``: a supervisor and
  two workers sharding the Widgets), ``floor-cpu`` (the floor script doing the same render
  per Widget in its one process) and ``floor-cpu-p2`` (two floor copies, each doing every
  other Widget: the least any 2-process program can do on this machine, the API server
  sharing its cores) and ``controller-runtime-cpu`` (the Go peer burning the same 20 ms of
  CPU time per Widget, its reconciles on every core). ``--cpu-impls`` can add
  ``setpoint-cpu-p2-sw64`` (64 sharder label writes in flight instead of 8: the diagnosis
  of the sharder's pace, docs/benchmarks.md). Ratios to ``floor-cpu`` and to
  ``setpoint-cpu``; issue 34's target is ``setpoint-cpu-p2 <= 0.65x setpoint-cpu``.
- ``light``: the existing converge benchmark: ``setpoint`` (no option), ``setpoint-p1``
  (``processes=1`` given: must be the same code path, no slower), ``setpoint-p2``, the
  ``floor`` and ``controller-runtime``.
- ``latency``: create -> Ready latency at a steady ``--rate`` (``scale.py latency``) for
  ``setpoint`` and ``setpoint-p2``.

Measured per run, as ``run.py`` measures: converge time, CPU seconds of every process of
the implementation (supervisor and workers), the API server's and etcd's CPU, requests per
object, peak RSS of each process and the peak of their sum. Then a projection to 4 and 8
cores (:func:`projection`): a model, not a measurement (the machine has 2 cores).

Everything goes to ``~/.cache/setpoint/bench/processes-<date>.json``::

    .venv/bin/python bench/converge/processes.py --n 2000 --repeat 3
    .venv/bin/python bench/converge/processes.py --parts cpu --n 500 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from run import (
    CACHE,
    RunResult,
    build_go_peer,
    compile_setpoint_bytecode,
    fmt,
    run_on_fresh_plane,
    server_cpu,
    versions,
)
from scale import latency_run, percentile

from setpoint.testing import ControlPlane, ControlPlaneOptions

CPU_IMPLS = (
    "floor-cpu",
    "floor-cpu-p2",
    "setpoint-cpu",
    "setpoint-cpu-p2",
    "controller-runtime-cpu",
)
LIGHT_IMPLS = ("floor", "setpoint", "setpoint-p1", "setpoint-p2", "controller-runtime")
LATENCY_IMPLS = ("setpoint", "setpoint-p2")


def interleaved(
    impls: Sequence[str], repeat: int, n: int, workers: int, logs: Path
) -> list[RunResult]:
    """``repeat`` rounds of every implementation, each on a fresh plane, rotating the order."""
    results: list[RunResult] = []
    for r in range(repeat):
        order = list(impls[r % len(impls) :]) + list(impls[: r % len(impls)])
        for impl in order:
            t0 = time.monotonic()
            load = os.getloadavg()
            try:
                result, _ = run_on_fresh_plane(impl, r, n=n, workers=workers, logs=logs)
            except Exception as exc:
                result = RunResult(impl, r, error=f"{type(exc).__name__}: {exc}")
            result.load_average = load
            results.append(result)
            print(
                f"[{r}] {impl}: ok={result.ok} converge={result.converge_seconds:.1f}s "
                f"cpu={result.cpu_seconds:.1f}s server={server_cpu(result):.1f}s "
                f"requests={result.requests_counted} processes={len(result.processes)} "
                f"peak-all={result.peak_rss_all_mib:.0f}MiB load={load[0]:.1f} "
                f"({time.monotonic() - t0:.0f}s) {result.error}",
                file=sys.stderr,
                flush=True,
            )
    return results


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _x(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"


def converge_table(
    results: Sequence[RunResult], impls: Sequence[str], n: int, baselines: Sequence[str]
) -> str:
    """Converge time, CPU, server CPU, requests and memory per implementation (medians)."""
    by = {i: [r for r in results if r.impl == i and r.ok] for i in impls}
    base_time = {b: _median([r.converge_seconds for r in by.get(b, [])]) for b in baselines}
    headers = [
        "implementation",
        "converge s",
        *(f"x {b}" for b in baselines),
        "CPU s (all processes)",
        "server CPU s",
        "CPU bound s",
        "x bound",
        "requests/object",
        "peak RSS MiB per process",
        "peak RSS MiB all",
        "start to first Ready s",
        "idle RSS MiB all",
        "half / all labelled s",
    ]
    lines = ["| " + " | ".join(headers) + " |", "| :--- |" + " ---: |" * (len(headers) - 1)]
    for impl in impls:
        runs = by.get(impl) or []
        if not runs:
            failed = [r for r in results if r.impl == impl]
            why = failed[0].error if failed else "not run"
            lines.append(f"| {impl} | failed: {why} |" + " |" * (len(headers) - 2))
            continue
        t = [r.converge_seconds for r in runs]
        per_process = [sorted(p["peak_rss_mib"] for p in r.processes) for r in runs]
        width = max(len(p) for p in per_process)
        columns = [_median([p[k] for p in per_process if len(p) == width]) for k in range(width)]
        startup = [r.startup_seconds for r in runs if r.startup_seconds is not None]
        idle = [r.idle_rss_mib for r in runs if r.idle_rss_mib is not None]
        failed_n = len([r for r in results if r.impl == impl and not r.ok])
        lines.append(
            "| "
            + " | ".join(
                [
                    impl + (f" ({failed_n} failed)" if failed_n else ""),
                    fmt(t),
                    *(_x(_median(t), base_time[b]) for b in baselines),
                    fmt([r.cpu_seconds for r in runs]),
                    fmt([server_cpu(r) for r in runs]),
                    fmt([cpu_bound(r) for r in runs]),
                    _x(_median(t), _median([cpu_bound(r) for r in runs])),
                    f"{_median([r.requests_counted / n for r in runs]):.2f}",
                    " / ".join(f"{c:.0f}" for c in columns),
                    fmt([r.peak_rss_all_mib for r in runs]),
                    fmt(startup, 2) if startup else "n/a",
                    fmt(idle) if idle else "n/a",
                    labelled_at(runs),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def cpu_bound(result: RunResult, cores: int | None = None) -> float:
    """The least wall time ``result``'s CPU allows on this machine.

    Every CPU second the run spent (the implementation's processes, kube-apiserver's and
    etcd's) shares the same ``cores``, and one Python process uses at most one core: a run
    cannot finish before the larger of their sum divided by the cores and its busiest
    process's CPU time has passed. ``x bound`` in the table is converge time over this: 1.00x
    is a run that was never waiting for anything but CPU.
    """
    spread = (result.cpu_seconds + server_cpu(result)) / (cores or os.cpu_count() or 1)
    if result.impl.startswith("controller-runtime"):
        return spread  # Go runs one process's goroutines on every core
    busiest = max((float(p["cpu_seconds"]) for p in result.processes), default=0.0)
    return max(spread, busiest)


def target_check(results: Sequence[RunResult], ratio: float = 0.65) -> str:
    """Whether issue 34's target time is reachable on this machine, by the runs' own floor.

    The target is ``setpoint-cpu-p2 <= ratio x setpoint-cpu``. ``floor-cpu-p2`` is the least
    any two-process program does for the same work (the renders, a POST and a PUT per
    Widget, no cache or watch), so when even it takes longer than the target's time, no
    two-process operator reaches the target here, and the comparison that remains is
    setpoint's two processes against the floor's.
    """
    med = {
        impl: _median([r.converge_seconds for r in results if r.impl == impl and r.ok])
        for impl in ("setpoint-cpu", "setpoint-cpu-p2", "floor-cpu-p2")
    }
    if not all(med.values()):
        return "No target check: it needs setpoint-cpu, setpoint-cpu-p2 and floor-cpu-p2 runs."
    target = ratio * med["setpoint-cpu"]
    floor_bound = _median([cpu_bound(r) for r in results if r.impl == "floor-cpu-p2" and r.ok])
    verdict = "reachable" if med["floor-cpu-p2"] <= target else "not reachable on this machine"
    return (
        f"Target {ratio:.2f}x setpoint-cpu = {target:.1f} s: setpoint-cpu-p2 "
        f"{med['setpoint-cpu-p2']:.1f} s ({med['setpoint-cpu-p2'] / med['setpoint-cpu']:.2f}x); "
        f"floor-cpu-p2 {med['floor-cpu-p2']:.1f} s "
        f"({med['floor-cpu-p2'] / med['setpoint-cpu']:.2f}x, its CPU bound {floor_bound:.1f} s): "
        f"the target is {verdict}; setpoint-cpu-p2 is "
        f"{med['setpoint-cpu-p2'] / med['floor-cpu-p2']:.2f}x floor-cpu-p2."
    )


def labelled_at(runs: Sequence[RunResult]) -> str:
    """When half and all of the Widgets had a shard label (medians), or ``n/a``."""
    pairs = [r.labelled_seconds for r in runs if r.labelled_seconds]
    if not pairs:
        return "n/a"
    return f"{_median([p[0] for p in pairs]):.1f} / {_median([p[1] for p in pairs]):.1f}"


def process_breakdown(results: Sequence[RunResult], impl: str) -> str:
    """CPU seconds of each process of ``impl``'s runs (the spawned one first), per run."""
    parts = []
    for r in results:
        if r.impl != impl or not r.ok:
            continue
        first, *rest = r.processes
        cpu = sorted((p["cpu_seconds"] for p in rest), reverse=True)
        parts.append(
            f"run {r.repeat}: spawned {first['cpu_seconds']:.1f}"
            + (" + " + " / ".join(f"{c:.1f}" for c in cpu) if cpu else "")
        )
    return f"- {impl}: " + "; ".join(parts) if parts else ""


def projection(
    results: Sequence[RunResult], two_impl: str = "setpoint-cpu-p2"
) -> tuple[str, dict[str, Any]]:
    """Converge time on 4 and 8 cores with as many processes as cores: a model, from the runs.

    The CPU a run needs is split as measured (medians): the operator's workers (``W``: the
    one-process run's CPU, plus the leader worker's extra over the other worker, which is
    the sharder's, plus, for each process beyond the first, what the second process added
    besides that: its start-up and its caches), the supervisor (``S``), the API server and
    etcd (``A``, as the runs measured them). On ``c`` cores with ``p = c`` processes, a run
    cannot be faster than either bound:

    - every CPU second spread on the cores: ``(W + S + A) / c`` when the API server shares
      the operator's cores (this machine), ``(W + S) / c`` when it does not (a cluster,
      where the Pod's cores are its own and the API server has CPU enough elsewhere);
    - the busiest worker: its share ``W / p`` plus the leader worker's extra (the sharder),
      which does not split.

    One process is bounded by its own CPU ``W1`` (and, sharing, by ``(W1 + A1) / c``).
    Projected time = bound / ``u``, where ``u`` (how much of its bound a run reaches) is
    fitted so the model gives the measured 2-process time on 2 cores (sharing); the ratio
    to one process is taken between the two bounds on the same cores.
    """
    one = [r for r in results if r.impl == "setpoint-cpu" and r.ok]
    two = [r for r in results if r.impl == two_impl and r.ok]
    if not one or not two:
        return f"No projection: the cpu part needs setpoint-cpu and {two_impl} runs.", {}
    t1 = _median([r.converge_seconds for r in one])
    t2 = _median([r.converge_seconds for r in two])
    supervisor = _median([r.processes[0]["cpu_seconds"] for r in two])
    workers = [sorted((p["cpu_seconds"] for p in r.processes[1:]), reverse=True) for r in two]
    w_total = _median([sum(w) for w in workers])
    leader_extra = _median([w[0] - w[-1] for w in workers if len(w) >= 2])
    server = _median([server_cpu(r) for r in two])
    server1 = _median([server_cpu(r) for r in one])
    w1 = _median([r.cpu_seconds for r in one])
    # What the second process added beyond the sharder's work (start-up, a second cache).
    per_process_fixed = max(0.0, w_total - w1 - leader_extra)

    def bound(cores: int, *, shared: bool) -> float:
        w = w1 + leader_extra + per_process_fixed * (cores - 1)
        spread = (w + supervisor + (server if shared else 0.0)) / cores
        busiest = (w - leader_extra) / cores + leader_extra
        return max(spread, busiest)

    def bound_one(cores: int, *, shared: bool) -> float:
        return max(w1, (w1 + server1) / cores) if shared else w1

    u = bound(2, shared=True) / t2 if t2 else 1.0
    cores = (2, 4, 8)
    model = {
        "t1_seconds": t1,
        "t2_seconds": t2,
        "workers_cpu": w_total,
        "one_process_cpu": w1,
        "per_extra_process_cpu": per_process_fixed,
        "leader_extra_cpu": leader_extra,
        "supervisor_cpu": supervisor,
        "server_cpu": server,
        "server_cpu_one_process": server1,
        "utilisation": u,
        "shared": {c: bound(c, shared=True) / u for c in cores},
        "dedicated": {c: bound(c, shared=False) / u for c in cores},
        "ratio_shared": {c: bound(c, shared=True) / bound_one(c, shared=True) for c in cores},
        "ratio_dedicated": {c: bound(c, shared=False) / bound_one(c, shared=False) for c in cores},
    }
    rows = [
        f"| {c} | {model['shared'][c]:.1f} | {model['ratio_shared'][c]:.2f}x | "
        f"{model['dedicated'][c]:.1f} | {model['ratio_dedicated'][c]:.2f}x |"
        for c in cores
    ]
    text = "\n".join(
        [
            f"Model inputs (medians of the cpu part): one process {t1:.1f} s, {w1:.1f} CPU s, "
            f"API server and etcd {server1:.1f} s; two processes ({two_impl}) {t2:.1f} s, "
            f"workers {w_total:.1f} CPU s (the leader {leader_extra:.1f} s more than the "
            f"other), supervisor {supervisor:.1f} s, API server and etcd {server:.1f} s; each "
            f"process beyond one costs {per_process_fixed:.1f} CPU s besides the sharder; "
            f"fitted utilisation {u:.2f}.",
            "",
            "| cores = processes | API server on the same cores: s | x one process | "
            "API server elsewhere: s | x one process |",
            "| ---: | ---: | ---: | ---: | ---: |",
            *rows,
        ]
    )
    return text, model


def latency_part(args: argparse.Namespace, logs: Path) -> tuple[str, list[dict[str, Any]]]:
    """Steady-rate latency runs of ``LATENCY_IMPLS``, interleaved, a fresh plane each."""
    impls = [i for i in args.latency_impls.split(",") if i]
    runs: list[dict[str, Any]] = []
    for r in range(args.latency_repeat):
        k = r % len(impls)
        for impl in impls[k:] + impls[:k]:
            with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
                try:
                    run = asyncio.run(
                        latency_run(
                            impl,
                            r,
                            plane,
                            rate=args.rate,
                            seconds=args.seconds,
                            logs=logs / "latency",
                        )
                    )
                except Exception as exc:
                    run = {"impl": impl, "repeat": r, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(run)
            lat = run.get("latencies_ms") or []
            print(
                f"[{r}] latency {impl}: ready={run.get('ready')}/{run.get('total')} "
                f"p50={percentile(lat, 0.5):.0f}ms p99={percentile(lat, 0.99):.0f}ms "
                f"cpu={run.get('cpu_seconds', 0):.1f}s {run.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
    lines = [
        f"| {args.rate:g} creates/s for {args.seconds:g} s | Ready | p50 ms | p99 ms | max ms | "
        "operator CPU s (all processes) | create -> shard label p50/p99 ms |",
        "| :--- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for impl in impls:
        mine = [x for x in runs if x["impl"] == impl and x.get("latencies_ms")]
        if not mine:
            failed = [x for x in runs if x["impl"] == impl]
            lines.append(f"| {impl} | failed: {failed[0].get('error', '') if failed else ''} |||||")
            continue
        lines.append(
            f"| {impl} | {fmt([x['ready'] for x in mine], 0)} | "
            f"{fmt([percentile(x['latencies_ms'], 0.5) for x in mine], 0)} | "
            f"{fmt([percentile(x['latencies_ms'], 0.99) for x in mine], 0)} | "
            f"{fmt([x['latencies_ms'][-1] for x in mine], 0)} | "
            f"{fmt([x['cpu_seconds'] for x in mine])} | "
            + (
                f"{_median([percentile(x['label_ms'], 0.5) for x in mine]):.0f} / "
                f"{_median([percentile(x['label_ms'], 0.99) for x in mine]):.0f} |"
                if all(x.get("label_ms") for x in mine)
                else "n/a |"
            )
        )
    return "\n".join(lines), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="Widgets to converge")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the converge parts")
    parser.add_argument("--workers", type=int, default=8, help="concurrent reconciles/process")
    parser.add_argument("--parts", default="cpu,light,latency", help="cpu, light, latency")
    parser.add_argument("--cpu-impls", default=",".join(CPU_IMPLS))
    parser.add_argument("--light-impls", default=",".join(LIGHT_IMPLS))
    parser.add_argument("--latency-impls", default=",".join(LATENCY_IMPLS))
    parser.add_argument("--rate", type=float, default=50.0, help="latency: creates per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="latency: for how long")
    parser.add_argument("--latency-repeat", type=int, default=2)
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    started = datetime.datetime.now(datetime.UTC)
    stamp = started.strftime("%Y-%m-%d-%H%M")
    logs = CACHE / f"processes-{stamp}-logs"
    compile_setpoint_bytecode()
    light_impls = [i for i in args.light_impls.split(",") if i]
    cpu_impls = [i for i in args.cpu_impls.split(",") if i]
    skipped: dict[str, str] = {}
    wanted = (cpu_impls if "cpu" in parts else []) + (light_impls if "light" in parts else [])
    if any(i.startswith("controller-runtime") for i in wanted):
        why = build_go_peer()
        if why is not None:
            skipped["controller-runtime"] = why
            light_impls = [i for i in light_impls if not i.startswith("controller-runtime")]
            cpu_impls = [i for i in cpu_impls if not i.startswith("controller-runtime")]
    record: dict[str, Any] = {
        "date": started.isoformat(),
        "argv": sys.argv,
        "n": args.n,
        "versions": versions(),
        "load_average_start": os.getloadavg(),
        "skipped": skipped,
    }
    sections: list[str] = [
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Command: `.venv/bin/python bench/converge/processes.py {' '.join(sys.argv[1:])}`",
        f"- N = {args.n}, {args.workers} concurrent reconciles per process, "
        f"repeats = {args.repeat}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in record["versions"].items()),
        f"- Machine: {os.cpu_count()} CPUs visible, shared",
    ]
    if "cpu" in parts:
        impls = cpu_impls
        results = interleaved(impls, args.repeat, args.n, args.workers, logs)
        record["cpu"] = [asdict(r) for r in results]
        text, model = projection(results)
        record["projection"] = model
        if any(r.impl == "setpoint-cpu-p2-sw64" and r.ok for r in results):
            text_sw, model_sw = projection(results, "setpoint-cpu-p2-sw64")
            record["projection_sw64"] = model_sw
            text += (
                "\n\nThe same, fitted to the runs with 64 sharder writes in flight:\n\n" + text_sw
            )
        sections += [
            "",
            "CPU-bound (~20 ms of Python in each Widget's first reconcile):",
            "",
            converge_table(results, impls, args.n, ["floor-cpu", "setpoint-cpu"]),
            "",
            target_check(results),
            "",
            "CPU seconds per process (the spawned one, then its workers, most first):",
            *filter(None, (process_breakdown(results, i) for i in impls)),
            "",
            "Projection to 4 and 8 cores (a model fitted to these runs, see processes.projection):",
            "",
            text,
            "",
            "- Load (1-minute) at each run's start: "
            + ", ".join(
                f"{r.impl}[{r.repeat}] {r.load_average[0]:.1f}" for r in results if r.load_average
            ),
        ]
    if "light" in parts:
        results = interleaved(light_impls, args.repeat, args.n, args.workers, logs)
        record["light"] = [asdict(r) for r in results]
        sections += [
            "",
            "Light reconciles (the converge benchmark as it is):",
            "",
            converge_table(results, light_impls, args.n, ["floor", "setpoint"]),
            "",
            "CPU seconds per process:",
            *filter(None, (process_breakdown(results, i) for i in light_impls)),
            *(f"- {impl} skipped: {why}" for impl, why in skipped.items()),
            "",
            "- Load (1-minute) at each run's start: "
            + ", ".join(
                f"{r.impl}[{r.repeat}] {r.load_average[0]:.1f}" for r in results if r.load_average
            ),
        ]
    if "latency" in parts:
        text, runs = latency_part(args, logs)
        record["latency"] = runs
        sections += ["", "Latency:", "", text]
    record["load_average_end"] = os.getloadavg()
    sections.append(
        "- Load average (1/5/15 min) at the start and at the end: "
        + ", ".join(
            "/".join(f"{v:.2f}" for v in la)
            for la in (record["load_average_start"], record["load_average_end"])
        )
    )
    report = "\n".join(sections)
    record["report"] = report
    print(report)
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"processes-{stamp}.json"
    out.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nJSON: {out}\nLogs: {logs}")


if __name__ == "__main__":
    main()
