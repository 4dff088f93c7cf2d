"""How many calls the runtime makes per Widget as it converges, by stage: a count, not a clock.

The converge benchmark's CPU seconds swing by 10-30% from run to run on a shared 2-core
machine, more than most single changes to the runtime buy; instruction counts
(``inprocess.py --instructions``) are steady but say nothing about where they go. This
script counts instead: it runs the converge phase of ``inprocess.py`` (the benchmark's
manager, controller and ``reconcile_safe`` on the in-memory
:class:`~setpoint.testing.FakeClient`) under ``sys.setprofile`` and counts every call, Python
functions and C functions alike, that the runtime makes, per Widget. Calls made inside the
fake are not counted (the real API server does that work), so the count is setpoint's own.
Each call is filed under the stage of the innermost marker on its stack:

- ``apply_child``, ``update_status``: the two safe-write helpers (with the tracking client's
  bookkeeping of the writes they make);
- ``reconciler``: the rest of the reconciler (the cache read, the desired child, the
  condition);
- ``controller``: a reconcile around the reconciler (context, metrics, deadlines, read marks);
- ``queue``: the worker taking keys from the work queue and handing them back;
- ``informer``: applying watch events to the store, read-after-write records, and the
  handlers that queue keys;
- ``start-up and other``: everything else (manager start, informer sync, the event loop).

The same source tree gives the same counts in every run (the converge is deterministic on
the fake), so a change's effect shows exactly, whatever the machine is doing. A call is not a
fixed cost (a C call to ``dict.get`` is far cheaper than a Python function), so read counts
beside CPU, not instead of it::

    .venv/bin/python bench/converge/calls.py --n 400
    .venv/bin/python bench/converge/calls.py --trees base=../base/src,new=src --top 30

With ``--trees``, each tree's ``setpoint`` package (``PATH`` is the directory holding it) is
counted in its own process, by this script.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent

STAGES = (
    ("apply_child", "apply_child"),
    ("update_status", "update_status"),
    ("reconcile_safe", "reconciler"),
    ("_process", "controller"),
    ("_worker", "queue"),
    ("_apply_event", "informer"),
    ("_dispatch_add", "informer"),
    ("_dispatch_update", "informer"),
    ("_dispatch_delete", "informer"),
)
"""(function name, stage): the innermost of these on a call's stack names its stage."""

_MARKERS = dict(STAGES)
OTHER = "start-up and other"


def _stage(frame: FrameType | None) -> str | None:
    """The stage of a call made in ``frame``; ``None`` inside the fake client."""
    while frame is not None:
        code = frame.f_code
        if "/setpoint/testing/" in code.co_filename:
            return None
        stage = _MARKERS.get(code.co_name)
        if stage is not None:
            return stage
        frame = frame.f_back
    return OTHER


def _label(frame: FrameType, event: str, arg: Any) -> str:
    if event == "c_call":
        return f"{getattr(arg, '__qualname__', repr(arg))} (C)"
    code = frame.f_code
    name = code.co_filename.rsplit("/src/", 1)[-1].rsplit("/lib/python3", 1)[-1]
    return f"{code.co_name} ({name})"


async def count(n: int, top: int) -> dict[str, Any]:
    """Converge ``n`` Widgets on the fake and count the runtime's calls while it does."""
    from inprocess import fake_with_widgets
    from widget_operator import add_controller, reconcile_safe

    from setpoint import Manager, ManagerOptions

    fake = await fake_with_widgets(n)
    reconciles = 0

    async def reconciler(ctx: Any, request: Any) -> None:
        nonlocal reconciles
        reconciles += 1
        await reconcile_safe(ctx, request)

    manager = Manager(fake, ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0"))
    controller = add_controller(manager, reconciler, 8)
    stages: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[tuple[str, str]] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in {"call", "c_call"}:
            return
        stage = _stage(frame if event == "c_call" else frame.f_back)
        if stage is None:
            return
        stages[stage] += 1
        if top:
            functions[(stage, _label(frame, event, arg))] += 1

    task = asyncio.create_task(manager.run())
    sys.setprofile(profile)  # type: ignore[arg-type]
    try:
        await asyncio.sleep(0.2)  # the manager starts and the informers sync
        await controller.wait_idle(timeout=300, settle=0.3)
    finally:
        sys.setprofile(None)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    total = sum(stages.values())
    return {
        "n": n,
        "calls_per_widget": round(total / n, 1),
        "reconciles_per_widget": round(reconciles / n, 3),
        "stages": {stage: round(calls / n, 1) for stage, calls in stages.most_common()},
        "top": [
            [stage, label, round(calls / n, 1)]
            for (stage, label), calls in functions.most_common(top)
        ],
    }


def report(label: str, result: dict[str, Any]) -> None:
    """Print one tree's counts."""
    print(
        f"{label}: {result['calls_per_widget']} calls per Widget "
        f"({result['reconciles_per_widget']} reconciles per Widget, N={result['n']})"
    )
    for stage, calls in result["stages"].items():
        print(f"  {calls:8.1f}  {stage}")
    for stage, function, calls in result["top"]:
        print(f"  {calls:8.1f}  {stage:20} {function}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=400, help="Widgets")
    parser.add_argument("--top", type=int, default=0, help="also list the N most called")
    parser.add_argument("--trees", default="", help="LABEL=PATH,...: PATH holds a setpoint")
    parser.add_argument("--json", action="store_true", help="one count, JSON out (internal)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.json or not args.trees:
        result = asyncio.run(count(args.n, args.top))
        if args.json:
            print(json.dumps(result))
        else:
            report("this tree", result)
        return
    for label, path in (t.split("=", 1) for t in args.trees.split(",") if t):
        env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()), PYTHONHASHSEED="0")
        argv = [sys.executable, str(HERE / "calls.py"), "--json", "--n", str(args.n)]
        out = subprocess.run(
            [*argv, "--top", str(args.top)], check=True, capture_output=True, text=True, env=env
        ).stdout
        report(label, json.loads(out.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
