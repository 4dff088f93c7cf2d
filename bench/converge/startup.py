"""Start-up only: spawn to first Ready, start-up CPU and idle RSS, candidates interleaved.

``run.py`` measures start-up once per implementation and round, each on a fresh plane,
before a converge run. This script runs only that probe (``run.startup_probe``), many times,
on **one** control plane (no kube-controller-manager), the candidates alternating in a
rotating order, so that a change to start-up can be measured against the code before it in
the same minutes of a shared machine. A candidate is:

- an implementation of ``run.py`` (``setpoint``, ``setpoint-lean``, ``kopf``,
  ``controller-runtime``), named in ``--impls``;
- ``LABEL=PATH`` in ``--trees``: ``widget_operator.py`` run with ``PYTHONPATH=PATH``, a
  ``src`` directory of another checkout of setpoint (``git archive <commit> src | tar -x``).
  Byte-compile it first (``python -m compileall -q PATH``) to compare like with like: the
  installed package is byte-compiled here, as in ``run.py``.

Per probe: seconds from the spawn until a watch sees the Widget Ready, the CPU seconds the
process had used then, and its RSS a second later; the table gives median [min-max] and the
1-minute load average seen when the probes started. JSON goes to
``~/.cache/setpoint/bench/startup-<date>.json``::

    .venv/bin/python bench/converge/startup.py --repeat 5 --impls setpoint,kopf,controller-runtime
    .venv/bin/python bench/converge/startup.py --repeat 5 --impls setpoint --trees before=PATH

``--instructions`` runs each probe under valgrind (``cachegrind``, no cache simulation) and
reports the instructions the process executed from its spawn to its exit after the SIGTERM
that follows its first Ready, instead of times: counts repeat within 0.1% whatever the load,
so small start-up changes show (valgrind runs Python about 40 times slower; use
``--repeat 2``)::

    .venv/bin/python bench/converge/startup.py --repeat 2 --instructions --impls setpoint \\
        --trees before=PATH
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

from run import (
    CACHE,
    HERE,
    PYTHON,
    VALGRIND,
    build_go_peer,
    command,
    compile_setpoint_bytecode,
    instruction_count,
    prepare,
    startup_probe,
    versions,
)

from setpoint import Client
from setpoint.testing import ControlPlane, ControlPlaneOptions


def _summary(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    return f"{statistics.median(values):.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


async def _probe_all(
    plane: ControlPlane,
    candidates: dict[str, tuple[list[str], str | None]],
    repeat: int,
    instructions: bool = False,
) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {label: [] for label in candidates}
    logs = CACHE / f"startup-{datetime.datetime.now(datetime.UTC):%Y-%m-%d-%H%M}-logs"
    labels = list(candidates)
    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        await prepare(client)
        for round_ in range(repeat):
            order = labels[round_ % len(labels) :] + labels[: round_ % len(labels)]
            for label in order:
                argv, pythonpath = candidates[label]
                if instructions:
                    argv = [*VALGRIND, *argv]
                    os.environ["PYTHONHASHSEED"] = "0"  # the same dict layouts in every run
                if pythonpath is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = pythonpath  # the spawned process's, not ours
                load = os.getloadavg()[0]
                log = logs / f"{label}-{round_}.log"
                try:
                    seconds, cpu, idle = await startup_probe(label, argv, plane, client, log)
                finally:
                    os.environ.pop("PYTHONPATH", None)
                    os.environ.pop("PYTHONHASHSEED", None)
                if instructions:
                    count = instruction_count(log.read_text(errors="replace"))
                    results[label].append({"instructions": count, "load": load})
                    print(f"[{round_}] {label}: {count / 1e6:.1f} M instructions", file=sys.stderr)
                    continue
                results[label].append(
                    {"seconds": seconds, "cpu_seconds": cpu, "idle_rss_mib": idle, "load": load}
                )
                print(
                    f"[{round_}] {label}: {seconds:.3f} s, CPU {cpu:.2f} s, idle {idle:.1f} MiB "
                    f"(load {load:.2f})",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="probes per candidate")
    parser.add_argument("--impls", default="setpoint", help="comma-separated run.py names")
    parser.add_argument(
        "--trees", default="", help="comma-separated LABEL=PATH: setpoint src dirs to compare"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions from spawn to exit (valgrind) instead of timing",
    )
    args = parser.parse_args()
    compile_setpoint_bytecode()
    candidates: dict[str, tuple[list[str], str | None]] = {}
    for impl in [i for i in args.impls.split(",") if i]:
        if impl == "controller-runtime" and (why := build_go_peer()) is not None:
            parser.error(f"controller-runtime cannot be built: {why}")
        candidates[impl] = (command(impl, 8), None)
    for tree in [t for t in args.trees.split(",") if t]:
        label, _, path = tree.partition("=")
        src = Path(path).resolve()
        if not (src / "setpoint" / "__init__.py").is_file():
            parser.error(f"--trees {tree}: {src} has no setpoint package (give a src directory)")
        candidates[label] = ([PYTHON, str(HERE / "widget_operator.py"), "--workers", "8"], str(src))
    started = datetime.datetime.now(datetime.UTC)
    load_at_start = os.getloadavg()
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
        results = asyncio.run(_probe_all(plane, candidates, args.repeat, args.instructions))
    if args.instructions:
        print("| candidate | instructions, spawn to exit after the first Ready (M) |")
        print("| :--- | ---: |")
        for label, rows in results.items():
            print(f"| {label} | {_summary([r['instructions'] / 1e6 for r in rows], 1)} |")
    else:
        print(
            "| candidate | start to first Ready s | start-up CPU s | idle RSS MiB | load (1 min) |"
        )
        print("| :--- | ---: | ---: | ---: | ---: |")
        for label, rows in results.items():
            loads = [r["load"] for r in rows]
            print(
                f"| {label} | {_summary([r['seconds'] for r in rows], 2)} | "
                f"{_summary([r['cpu_seconds'] for r in rows], 2)} | "
                f"{_summary([r['idle_rss_mib'] for r in rows], 1)} | "
                f"{min(loads):.1f}-{max(loads):.1f} |"
            )
    out = CACHE / f"startup-{started:%Y-%m-%d-%H%M}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "started": started.isoformat(),
                "argv": sys.argv,
                "load_at_start": load_at_start,
                "load_at_end": os.getloadavg(),
                "versions": versions(),
                "results": results,
            },
            indent=2,
        )
    )
    print(f"JSON: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
