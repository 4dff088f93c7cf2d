"""How the converge benchmark's cost grows: curves over N, cache-only syncs, steady-rate latency.

Three modes, each a long run with its own make target (never CI):

- ``curves`` (``make bench-scale``): the converge run of ``run.py`` (fresh control plane per
  run, same measures) at each N of ``--ns`` for each implementation, interleaved. Prints a
  table per N and plots converge time, CPU, requests per object and memory per object
  against N (log-log where it helps) to ``docs/benchmarks-scale.png``. A linear cost is a
  straight line of slope 1 on the log-log panels and a flat line on the per-object ones.
- ``cache`` (``make bench-scale``, after the curves): one control plane holding ``--n``
  Widgets; each candidate process syncs a cache of them and holds it, nothing else.
  Candidates: setpoint listing through a watch (``sendInitialEvents``, the default),
  setpoint listing with pages, and controller-runtime's cache. Measured: time to sync,
  CPU, the process's peak RSS and RSS per object, the API server's RSS growth during the
  sync (sampled every 50 ms, over its RSS just before), and the list/watch requests it
  took. Interleaved ``--repeat`` times on the same plane.
- ``latency`` (``make bench-latency``): a fresh plane per run; the operator runs idle, then
  Widgets are created at a steady ``--rate`` per second for ``--seconds``; each one's
  latency is from sending its create to a watch seeing it Ready. p50, p99 and max per
  implementation, interleaved ``--repeat`` times; the distribution is plotted to
  ``docs/benchmarks-latency.png``.

Everything is also written as JSON to ``~/.cache/setpoint/bench/scale-<mode>-<date>.json``::

    .venv/bin/python bench/converge/scale.py curves --ns 500,2000,10000
    .venv/bin/python bench/converge/scale.py cache --n 50000
    .venv/bin/python bench/converge/scale.py latency --rate 50 --seconds 60
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from run import (
    CACHE,
    HERE,
    NAMESPACE,
    PYTHON,
    REPO,
    WIDGET,
    Process,
    RunResult,
    build_go_peer,
    command,
    compile_setpoint_bytecode,
    create_widgets,
    delta,
    fmt,
    is_ready,
    prepare,
    proc_stats,
    run_on_fresh_plane,
    scrape,
    tree_cpu_seconds,
    versions,
    warm_up,
    widget,
)

from setpoint import Client
from setpoint.testing import ControlPlane, ControlPlaneOptions

DOCS = REPO / "docs"
SYNC_BINARY = CACHE / "widget-operator-controller-runtime-sync"
"""The Go peer built for the cache-only runs (its own path: other runs may rebuild the other)."""


def stamp() -> str:
    """A UTC time stamp for file names."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d-%H%M")


def write_json(mode: str, data: dict[str, Any]) -> Path:
    """Write a mode's results to the bench cache; return the path."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"scale-{mode}-{stamp()}.json"
    out.write_text(json.dumps(data, indent=2, default=str))
    return out


def header(mode: str) -> dict[str, Any]:
    """What every JSON record carries: date, command, versions, load average."""
    return {
        "mode": mode,
        "date": datetime.datetime.now(datetime.UTC).isoformat(),
        "argv": sys.argv,
        "versions": versions(),
        "load_average_start": os.getloadavg(),
    }


def apiserver_pid(plane: ControlPlane) -> int | None:
    """The pid of the plane's kube-apiserver, found by its secure port in /proc."""
    port = plane.server.rsplit(":", 1)[1].rstrip("/")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"kube-apiserver")
            and f"--secure-port={port}".encode() in argv
        ):
            return int(entry)
    return None


# --------------------------------------------------------------------------- curves


def curves(args: argparse.Namespace) -> None:
    """Converge runs at each N, interleaved; table and plot."""
    impls = [i for i in args.impls.split(",") if i]
    ns = [int(n) for n in args.ns.split(",") if n]
    if "controller-runtime" in impls and (why := build_go_peer()) is not None:
        sys.exit(f"controller-runtime: {why}")
    record = header("curves")
    logs = CACHE / f"scale-curves-{stamp()}-logs"
    results: list[dict[str, Any]] = []
    for repeat in range(args.repeat):
        for n in ns:
            order = impls[repeat % len(impls) :] + impls[: repeat % len(impls)]
            for impl in order:
                load = os.getloadavg()
                t0 = time.monotonic()
                try:
                    result, _ = run_on_fresh_plane(
                        impl, repeat, n=n, workers=args.workers, logs=logs / str(n)
                    )
                except Exception as exc:
                    result = RunResult(impl, repeat, error=f"{type(exc).__name__}: {exc}")
                row = {"n": n, "load_average": load, **asdict(result)}
                results.append(row)
                print(
                    f"[{repeat}] N={n} {impl}: ok={result.ok} "
                    f"converge={result.converge_seconds:.1f}s "
                    f"requests/object={result.requests_counted / n:.2f} cpu="
                    f"{result.cpu_seconds:.1f}s peak={result.peak_rss_mib:.0f}MiB "
                    f"({time.monotonic() - t0:.0f}s, load {load[0]:.1f}) {result.error}",
                    file=sys.stderr,
                    flush=True,
                )
    record["load_average_end"] = os.getloadavg()
    record["results"] = results
    report = curves_table(results, impls, ns)
    record["report"] = report
    print(report)
    print(f"\nJSON: {write_json('curves', record)}")  # kept even if plotting fails
    png = DOCS / "benchmarks-scale.png"
    plot_curves(results, impls, ns, png)
    print(f"Plot: {png}")


def _per(rows: list[dict[str, Any]], key: str, scale: float = 1.0) -> list[float]:
    return [float(r[key]) * scale for r in rows if r.get(key) is not None]


def curves_table(results: list[dict[str, Any]], impls: list[str], ns: list[int]) -> str:
    """One Markdown row per implementation and N: medians [range] over the repeats."""
    lines = [
        "| implementation | N | converge s | objects/s | CPU s | CPU ms/object | "
        "requests/object | peak RSS MiB | KiB/object (RSS) | cache bytes/object |",
        "| :--- |" + " ---: |" * 9,
    ]
    for impl in impls:
        for n in ns:
            rows = [r for r in results if r["impl"] == impl and r["n"] == n and r["ok"]]
            if not rows:
                failed = [r["error"] for r in results if r["impl"] == impl and r["n"] == n]
                lines.append(f"| {impl} | {n} | failed: {failed[:1]} |" + " |" * 7)
                continue
            converge = _per(rows, "converge_seconds")
            lines.append(
                f"| {impl} | {n:,} | {fmt(converge)} | "
                f"{n / statistics.median(converge):,.0f} | {fmt(_per(rows, 'cpu_seconds'))} | "
                f"{fmt(_per(rows, 'cpu_seconds', 1000 / n), 2)} | "
                f"{fmt([r['requests_counted'] / n for r in rows], 2)} | "
                f"{fmt(_per(rows, 'peak_rss_mib'))} | "
                f"{fmt(_per(rows, 'bytes_per_object_rss', 1 / 1024), 2)} | "
                f"{fmt(_per(rows, 'cache_bytes_per_object'), 0)} |"
            )
    return "\n".join(lines)


def plot_curves(results: list[dict[str, Any]], impls: list[str], ns: list[int], png: Path) -> None:
    """Four panels against N: converge time, CPU, requests per object, memory per object."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("converge time (s)", lambda r: r["converge_seconds"], True),
        ("operator CPU (s)", lambda r: r["cpu_seconds"], True),
        ("API requests per object", lambda r: r["requests_counted"] / r["n"], False),
        ("RSS growth per object (KiB)", lambda r: (r["bytes_per_object_rss"] or 0) / 1024, False),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for ax, (title, value, log) in zip(axes.flat, panels, strict=True):
        for impl in impls:
            xs, ys = [], []
            for n in ns:
                rows = [r for r in results if r["impl"] == impl and r["n"] == n and r["ok"]]
                if rows:
                    xs.append(n)
                    ys.append(statistics.median(value(r) for r in rows))
            ax.plot(xs, ys, marker="o", label=impl)
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
            first = ax.get_lines()[0] if ax.get_lines() else None
            if first is not None and len(first.get_xdata()):
                # What a linear cost looks like: proportional to N from the first point.
                x0, y0 = float(first.get_xdata()[0]), float(first.get_ydata()[0])
                ax.plot(ns, [y0 * n / x0 for n in ns], "k:", label="linear (from first point)")
        else:
            ax.set_xscale("log")
            ax.set_ylim(bottom=0)
        ax.set_title(title)
        ax.set_xlabel("Widgets (N)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("Converge benchmark: cost against N (medians; bench/converge/scale.py curves)")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


# --------------------------------------------------------------------------- cache-only


CANDIDATES = ("setpoint-streaming", "setpoint-paginated", "controller-runtime")


def sync_argv(candidate: str) -> list[str]:
    """The argv of a cache-only process."""
    ours = [PYTHON, str(HERE / "widget_operator.py"), "--sync-only"]
    return {
        "setpoint-streaming": ours,
        "setpoint-paginated": [*ours, "--paginated"],
        "controller-runtime": [str(SYNC_BINARY), "--sync-only"],
    }[candidate]


@dataclass
class SyncResult:
    """One candidate's cache sync on the shared plane."""

    candidate: str
    repeat: int
    ok: bool = False
    error: str = ""
    sync_seconds: float = 0.0
    objects: int = 0
    cpu_seconds: float = 0.0
    peak_rss_mib: float = 0.0
    rss_synced_mib: float = 0.0
    apiserver_rss_before_mib: float = 0.0
    apiserver_peak_growth_mib: float = 0.0
    apiserver_cpu_seconds: float = 0.0
    requests: dict[str, int] = field(default_factory=dict)
    load_average: tuple[float, float, float] | None = None


async def one_sync(
    candidate: str, repeat: int, plane: ControlPlane, client: Client, *, logs: Path, n: int
) -> SyncResult:
    """Spawn a cache-only process, sample it and the API server until it has synced."""
    result = SyncResult(candidate, repeat, load_average=os.getloadavg())
    server = apiserver_pid(plane)
    server_start = proc_stats(server) if server else None
    server_before = server_start.rss_mib if server_start else 0.0
    server_peak = server_before
    result.apiserver_rss_before_mib = server_before
    before = await scrape(client)
    proc = Process(sync_argv(candidate), plane.kubeconfig_path, logs / f"{candidate}-{repeat}.log")
    deadline = time.monotonic() + 900
    try:
        while True:
            if server:
                server_peak = max(server_peak, proc_stats(server).rss_mib)
            synced = [
                line
                for line in proc.log.read_text(errors="replace").splitlines()
                if line.startswith("synced ")
            ]
            if synced:
                _, at, count = synced[0].split()
                result.sync_seconds = float(at) - proc.spawned
                result.objects = int(count)
                break
            if proc.exited() or time.monotonic() > deadline:
                result.error = "exited before syncing" if proc.exited() else "no sync in 900 s"
                return result
            await asyncio.sleep(0.05)
        stats = proc_stats(proc.pid)
        result.cpu_seconds = stats.cpu_seconds
        result.peak_rss_mib = stats.peak_rss_mib
        result.rss_synced_mib = stats.rss_mib
        result.apiserver_peak_growth_mib = server_peak - server_before
        if server and server_start:
            result.apiserver_cpu_seconds = proc_stats(server).cpu_seconds - server_start.cpu_seconds
        result.ok = result.objects == n
        if not result.ok:
            result.error = f"synced {result.objects} of {n} Widgets"
    finally:
        await proc.stop()
    # After the stop: a watch is counted when it ends.
    result.requests = {
        k: v for k, v in delta(await scrape(client), before).items() if " widgets " in k
    }
    return result


def cache_only(args: argparse.Namespace) -> None:
    """Cache syncs of ``--n`` Widgets on one plane, candidates interleaved."""
    candidates = [c for c in args.candidates.split(",") if c]
    if "controller-runtime" in candidates and (why := build_go_peer(SYNC_BINARY)) is not None:
        sys.exit(f"controller-runtime: {why}")
    record = header("cache")
    logs = CACHE / f"scale-cache-{stamp()}-logs"
    results: list[SyncResult] = []
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:

        async def go() -> None:
            async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
                await prepare(client)
                await warm_up(client)  # the API server's first Widget watch waits ~2 s
                t0 = time.monotonic()
                await create_widgets(client, args.n, concurrency=32)
                record["create_seconds"] = time.monotonic() - t0
                print(f"created {args.n} Widgets in {record['create_seconds']:.0f}s", flush=True)
                for repeat in range(args.repeat):
                    k = repeat % len(candidates)
                    for candidate in candidates[k:] + candidates[:k]:
                        result = await one_sync(
                            candidate, repeat, plane, client, logs=logs, n=args.n
                        )
                        results.append(result)
                        print(
                            f"[{repeat}] {candidate}: ok={result.ok} "
                            f"sync={result.sync_seconds:.2f}s cpu={result.cpu_seconds:.2f}s "
                            f"peak={result.peak_rss_mib:.0f}MiB apiserver+"
                            f"{result.apiserver_peak_growth_mib:.0f}MiB {result.requests} "
                            f"{result.error}",
                            file=sys.stderr,
                            flush=True,
                        )

        asyncio.run(go())
    record["load_average_end"] = os.getloadavg()
    record["n"] = args.n
    record["results"] = [asdict(r) for r in results]
    report = cache_table(results, candidates, args.n)
    record["report"] = report
    print(report)
    print(f"\nJSON: {write_json('cache', record)}")


def cache_table(results: list[SyncResult], candidates: list[str], n: int) -> str:
    """One Markdown row per candidate: medians [range] over the repeats."""
    lines = [
        f"| cache of {n:,} Widgets | sync s | CPU s | peak RSS MiB | RSS synced MiB | "
        "KiB/object (RSS) | API server RSS growth MiB | API server CPU s | requests |",
        "| :--- |" + " ---: |" * 7 + " :--- |",
    ]
    for candidate in candidates:
        rows = [r for r in results if r.candidate == candidate and r.ok]
        if not rows:
            errors = [r.error for r in results if r.candidate == candidate]
            lines.append(f"| {candidate} | failed: {errors[:1]} |" + " |" * 7)
            continue
        lines.append(
            f"| {candidate} | {fmt([r.sync_seconds for r in rows], 2)} | "
            f"{fmt([r.cpu_seconds for r in rows], 2)} | "
            f"{fmt([r.peak_rss_mib for r in rows])} | {fmt([r.rss_synced_mib for r in rows])} | "
            f"{fmt([r.rss_synced_mib * 1024 / n for r in rows], 2)} | "
            f"{fmt([r.apiserver_peak_growth_mib for r in rows])} | "
            f"{fmt([r.apiserver_cpu_seconds for r in rows], 2)} | "
            + ", ".join(f"{k}: {v}" for k, v in sorted(rows[0].requests.items()))
            + " |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- latency


async def latency_run(
    impl: str, repeat: int, plane: ControlPlane, *, rate: float, seconds: float, logs: Path
) -> dict[str, Any]:
    """Steady creates against an idle operator; create->Ready latency per Widget."""
    result: dict[str, Any] = {"impl": impl, "repeat": repeat, "load_average": os.getloadavg()}
    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        await prepare(client)
        await warm_up(client)
        proc = Process(command(impl, 8), plane.kubeconfig_path, logs / f"{impl}-{repeat}.log")
        try:
            sent: dict[str, float] = {}
            ready: dict[str, float] = {}
            labelled: dict[str, float] = {}  # first seen with a shard label (--processes)
            probe_ready = asyncio.Event()
            listed = await client.list_page(WIDGET, namespace=NAMESPACE, limit=1)
            total = int(rate * seconds)
            done = asyncio.Event()

            async def watch() -> None:
                rv = str(listed.resource_version)
                while not done.is_set():
                    async with client.watch(
                        WIDGET, namespace=NAMESPACE, resource_version=rv, timeout_seconds=300
                    ) as stream:
                        async for event in stream:
                            rv = event.resource_version or rv
                            name = event.object.get("metadata", {}).get("name", "")
                            labels = event.object.get("metadata", {}).get("labels") or {}
                            if name not in labelled and any(
                                k.startswith("shard.sharding.setpoint.dev/") for k in labels
                            ):
                                labelled[name] = time.time()
                            if (
                                event.type in ("ADDED", "MODIFIED")
                                and name not in ready
                                and is_ready(event.object)
                            ):
                                ready[name] = time.time()
                                if name == "probe":
                                    probe_ready.set()
                                if name.startswith("lat-") and len(ready) >= total + 1:
                                    done.set()
                                    return

            watcher = asyncio.create_task(watch())
            # The operator is up and idle: its first Widget is Ready.
            sent["probe"] = time.time()
            await client.create(widget("probe", 0))
            try:
                await asyncio.wait_for(probe_ready.wait(), timeout=120)
            except TimeoutError:
                raise RuntimeError(f"{impl}: the probe Widget was not Ready within 120 s") from None
            await asyncio.sleep(2.0)
            cpu_before = tree_cpu_seconds(proc.pid)  # with --processes, the workers' too
            start = time.monotonic()
            creates: list[asyncio.Task[Any]] = []
            for i in range(total):
                delay = start + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                name = f"lat-{i:05d}"
                sent[name] = time.time()
                creates.append(asyncio.create_task(client.create(widget(name, i))))
            result["send_seconds"] = time.monotonic() - start
            await asyncio.gather(*creates)
            try:
                await asyncio.wait_for(done.wait(), timeout=120)
            except TimeoutError:
                result["error"] = f"{total + 1 - len(ready)} Widgets not Ready 120 s after"
            watcher.cancel()
            result["cpu_seconds"] = tree_cpu_seconds(proc.pid) - cpu_before
            latencies = sorted(
                (ready[name] - sent[name]) * 1000
                for name in sent
                if name.startswith("lat-") and name in ready
            )
            result["latencies_ms"] = latencies
            # With a sharder (--processes N): create -> shard label, and label -> Ready.
            result["label_ms"] = sorted(
                (labelled[n] - sent[n]) * 1000
                for n in sent
                if n.startswith("lat-") and n in labelled
            )
            result["label_to_ready_ms"] = sorted(
                (ready[n] - labelled[n]) * 1000
                for n in sent
                if n.startswith("lat-") and n in labelled and n in ready
            )
            result["ready"] = len(latencies)
            result["total"] = total
        finally:
            await proc.stop()
    return result


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of sorted ``values``, nearest rank."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(q * len(values) + 0.5) - 1))]


def latency(args: argparse.Namespace) -> None:
    """Latency runs, implementations interleaved, a fresh plane each."""
    impls = [i for i in args.impls.split(",") if i]
    if "controller-runtime" in impls and (why := build_go_peer()) is not None:
        sys.exit(f"controller-runtime: {why}")
    record = header("latency")
    logs = CACHE / f"scale-latency-{stamp()}-logs"
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeat):
        k = repeat % len(impls)
        for impl in impls[k:] + impls[:k]:
            with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
                try:
                    run = asyncio.run(
                        latency_run(
                            impl, repeat, plane, rate=args.rate, seconds=args.seconds, logs=logs
                        )
                    )
                except Exception as exc:
                    run = {"impl": impl, "repeat": repeat, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(run)
            lat = run.get("latencies_ms") or []
            print(
                f"[{repeat}] {impl}: ready={run.get('ready')}/{run.get('total')} "
                f"p50={percentile(lat, 0.5):.0f}ms p99={percentile(lat, 0.99):.0f}ms "
                f"cpu={run.get('cpu_seconds', 0):.1f}s {run.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
    record["load_average_end"] = os.getloadavg()
    record["rate"] = args.rate
    record["seconds"] = args.seconds
    record["runs"] = runs
    lines = [
        f"| {args.rate:g} creates/s for {args.seconds:g} s | Ready | p50 ms | p99 ms | max ms | "
        "operator CPU s |",
        "| :--- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for impl in impls:
        mine = [r for r in runs if r["impl"] == impl and r.get("latencies_ms")]
        if not mine:
            lines.append(f"| {impl} | failed |" + " |" * 4)
            continue
        lines.append(
            f"| {impl} | {fmt([r['ready'] for r in mine], 0)} | "
            f"{fmt([percentile(r['latencies_ms'], 0.5) for r in mine], 0)} | "
            f"{fmt([percentile(r['latencies_ms'], 0.99) for r in mine], 0)} | "
            f"{fmt([r['latencies_ms'][-1] for r in mine], 0)} | "
            f"{fmt([r['cpu_seconds'] for r in mine])} |"
        )
    report = "\n".join(lines)
    record["report"] = report
    print(report)
    print(f"\nJSON: {write_json('latency', record)}")  # kept even if plotting fails
    png = DOCS / "benchmarks-latency.png"
    plot_latency(runs, impls, png, args)
    print(f"Plot: {png}")


def plot_latency(runs: list[dict[str, Any]], impls: list[str], png: Path, args: Any) -> None:
    """The create->Ready latency distribution (CDF) of every run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colors = dict(zip(impls, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False))
    for run in runs:
        lat = run.get("latencies_ms") or []
        if not lat:
            continue
        ys = [(i + 1) / len(lat) for i in range(len(lat))]
        label = f"{run['impl']} (run {run['repeat']})"
        ax.plot(lat, ys, color=colors.get(run["impl"]), alpha=0.8, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("create -> Ready (ms)")
    ax.set_ylabel("fraction of Widgets")
    ax.set_title(
        f"Latency at {args.rate:g} creates/s for {args.seconds:g} s (bench/converge/scale.py)"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("curves", help="converge runs at each N")
    p.add_argument("--ns", default="500,2000,10000")
    p.add_argument("--impls", default="setpoint,controller-runtime")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--workers", type=int, default=8)
    p = sub.add_parser("cache", help="cache-only syncs on one plane")
    p.add_argument("--n", type=int, default=50000)
    p.add_argument("--candidates", default=",".join(CANDIDATES))
    p.add_argument("--repeat", type=int, default=2)
    p = sub.add_parser("latency", help="create->Ready at a steady rate")
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--impls", default="setpoint,controller-runtime")
    p.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    compile_setpoint_bytecode()  # as run.py does: operators load bytecode, not source
    {"curves": curves, "cache": cache_only, "latency": latency}[args.mode](args)


if __name__ == "__main__":
    main()
