"""The converge benchmark's reconciler on the in-memory FakeClient: the runtime's CPU, steadily.

On the real control plane, the operator shares 2 cores with kube-apiserver and etcd, and its
CPU seconds swing by 10% from run to run, more than most single changes to the runtime buy.
This script runs the same manager, controller and reconciler (``widget_operator.py``'s
``reconcile_safe``, or ``--style lean``) in one process against a
:class:`~setpoint.testing.FakeClient`, and reads the thread's CPU clock around three phases:

- **converge**: N Widgets exist; the manager starts and makes them all Ready (the child
  ConfigMap, the status write, and the follow-up reconciles the events of those writes cause);
- **no-op**: every Widget's key is queued again and reconciled with nothing to do;
- **events**: every Widget is changed once outside its spec (a label), so each event goes
  through the informer, the handler and the queue, and the reconcile finds nothing to do.

What the fake costs is counted too (its store, its apply, its watch fan-out), so read the
numbers as before/after ratios of one source tree against another (``--trees``), not as the
runtime's absolute cost. Rounds alternate the trees; medians and ranges are printed::

    .venv/bin/python bench/converge/inprocess.py --n 2000 --rounds 5
    .venv/bin/python bench/converge/inprocess.py --trees base=../main,new=.

With ``--trees``, each round runs every tree's copy of this script with that tree's
``.venv`` (the trees must have this script).

``--instructions`` counts instructions instead of reading the CPU clock: each round runs
every tree's round under valgrind (``cachegrind``, no cache simulation) at ``N/4`` and at
``N`` Widgets, and reports the difference per Widget, so start-up and imports cancel out.
On a shared machine the CPU clock of a round swings by 10-30%; instruction counts repeat
within 0.1%. A round takes minutes (valgrind, which must be installed, runs Python about 40
times slower): use ``--n 400``. What it cannot show is time spent waiting for memory or in
the kernel::

    .venv/bin/python bench/converge/inprocess.py --n 400 --rounds 1 --instructions \
        --trees base=../main,new=.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from run import NAMESPACE, VALGRIND, instruction_count, is_ready, widget
from widget_operator import WIDGET, add_controller, reconcile_lean, reconcile_safe

from setpoint import Manager, ManagerOptions
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.client.patch import MergePatch
from setpoint.testing import FakeClient

HERE = Path(__file__).resolve().parent


def name(i: int) -> str:
    """The name of Widget number ``i``, as ``run.py`` names them."""
    return f"widget-{i:05d}"


async def fake_with_widgets(n: int) -> FakeClient:
    """A FakeClient serving Widgets (with a status subresource) that holds ``n`` of them."""
    fake = FakeClient(
        resources=[ResourceInfo(WIDGET, "widgets", True, frozenset({"status"}))],
        objects=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}],
    )
    for i in range(n):
        await fake.create(widget(name(i), i))
    return fake


async def one_round(n: int, style: str, workers: int) -> dict[str, float]:
    """Converge, no-op and event phases once; CPU seconds of each, and reconciles."""
    fake = await fake_with_widgets(n)
    calls = 0
    inner = reconcile_safe if style == "safe" else reconcile_lean

    async def reconciler(ctx: Any, request: Any) -> None:
        nonlocal calls
        calls += 1
        await inner(ctx, request)

    manager = Manager(fake, ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0"))
    controller = add_controller(manager, reconciler, workers)
    result: dict[str, float] = {}
    task = asyncio.create_task(manager.run())
    try:
        started = time.thread_time()
        await asyncio.sleep(0.5)  # the manager starts and the informers sync
        await controller.wait_idle(timeout=120, settle=0.3)
        result["converge_cpu_s"] = time.thread_time() - started
        listed = await fake.list(WIDGET, namespace=NAMESPACE)
        if sum(1 for w in listed.items if is_ready(w)) != n:
            raise RuntimeError("the controller went idle before every Widget was Ready")
        result["converge_reconciles"] = calls

        calls = 0
        started = time.thread_time()
        for i in range(n):
            controller.enqueue(ObjectKey(NAMESPACE, name(i)))
        await controller.wait_idle(timeout=120, settle=0.3)
        result["noop_us"] = (time.thread_time() - started) / max(1, calls) * 1e6
        result["noop_reconciles"] = calls

        calls = 0
        started = time.thread_time()
        for i in range(n):
            label = {"metadata": {"labels": {"touched": "yes"}}}
            await fake.patch(WIDGET, name(i), MergePatch(label), namespace=NAMESPACE)
        await controller.wait_idle(timeout=120, settle=0.3)
        result["event_us"] = (time.thread_time() - started) / n * 1e6
        result["event_reconciles"] = calls
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # stopping is all we want
            await task
    return result


def instructions(python: Path, script: Path, n: int, style: str, workers: int) -> int:
    """Instructions one ``--json`` round of ``n`` Widgets executes, counted by valgrind."""
    argv = [
        *VALGRIND,
        *(str(python), str(script), "--json"),
        *("--n", str(n), "--style", style, "--workers", str(workers)),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts in every run
    done = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
    return instruction_count(done.stderr)


def summarize(rounds: list[dict[str, float]]) -> dict[str, str]:
    """``median [min-max]`` of every measure."""
    out = {}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        out[key] = f"{statistics.median(values):.4g} [{min(values):.4g}-{max(values):.4g}]"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="Widgets")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--style", choices=("safe", "lean"), default="safe")
    parser.add_argument("--trees", default="", help="LABEL=PATH,...: compare source trees")
    parser.add_argument("--json", action="store_true", help="one round, JSON out (internal)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions per Widget (valgrind)"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.json:
        print(json.dumps(asyncio.run(one_round(args.n, args.style, args.workers))))
        return
    here = [["this", str(HERE.parents[1])]]
    trees = [t.split("=", 1) for t in args.trees.split(",") if t] or here
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    for index in range(args.rounds):
        for label, path in trees if index % 2 == 0 else list(reversed(trees)):
            root = Path(path).resolve()
            if args.instructions:
                python = root / ".venv" / "bin" / "python"
                script = root / "bench" / "converge" / "inprocess.py"
                small = max(1, args.n // 4)
                counts = [
                    instructions(python, script, size, args.style, args.workers)
                    for size in (small, args.n)
                ]
                per_widget = (counts[1] - counts[0]) / (args.n - small)
                results[label].append({"instructions_per_widget": per_widget})
                print(f"[{index}] {label}: {results[label][-1]}", flush=True)
                continue
            argv = [
                str(root / ".venv" / "bin" / "python"),
                str(root / "bench" / "converge" / "inprocess.py"),
                *("--n", str(args.n), "--style", args.style, "--workers", str(args.workers)),
                "--json",
            ]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            results[label].append(json.loads(out.strip().splitlines()[-1]))
            print(f"[{index}] {label}: {results[label][-1]}", flush=True)
    for label, rounds in results.items():
        print(f"{label}: {json.dumps(summarize(rounds))}")


if __name__ == "__main__":
    main()
