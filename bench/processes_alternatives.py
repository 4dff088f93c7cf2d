"""Issue 34's alternatives: a CPU-bound work item in threads, processes, subinterpreters.

The work item is the processes benchmark's (``bench/converge/cpu_work.py``: ~20 ms of pure
Python, a template render). ``--items`` of them run, one at a time or two at a time, as:

- ``1 thread``: one after another in the main thread (the baseline: ratios are to it);
- ``2 threads``: two threads of one interpreter, which share its GIL;
- ``2 processes``: two worker processes (``multiprocessing``'s ``spawn``, as setpoint's
  supervisor re-executes its command line), timed with and without starting them;
- ``2 subinterpreters``: two isolated subinterpreters, each with its own GIL
  (``_interpreters`` on CPython 3.13: PEP 684's per-interpreter GIL; the public
  ``interpreters`` module of PEP 734 arrived in 3.14 as ``concurrent.interpreters``), each
  driven from its own thread;
- ``2 threads, free-threaded``: two threads on a free-threaded CPython (``--disable-gil``),
  when ``--ft-python`` names one.

Every variant runs in a fresh interpreter started for it (``--inner``), so none inherits
another's warmed-up state; the variants are interleaved, ``--repeat`` times. Measured: wall
seconds from the first item to the last (and, for processes, from before the pool starts),
and CPU seconds of the process and its children. Each interpreter's own ``1 thread`` run is
its baseline, so a faster or slower Python does not skew its ratios. ``--check-imports``
also reports which of setpoint's compiled dependencies import in an isolated
subinterpreter of ``--subinterpreter-python`` (extension modules must support PEP 489
multi-phase init and per-interpreter state to load there).

    .venv/bin/python bench/processes_alternatives.py --items 200 --repeat 3 \\
        --subinterpreter-python "$(pyenv root)/versions/3.13.0/bin/python3"
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORK_DIR = HERE / "converge"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(WORK_DIR))

VARIANTS = ("1 thread", "2 threads", "2 processes", "2 subinterpreters", "2 threads, free-threaded")
DEPENDENCIES = (
    "orjson",
    "yaml",
    "pydantic_core",
    "httptools",
    "msgspec",
    "cryptography.hazmat.bindings._rust",
)
"""setpoint's compiled dependencies, as modules (PyYAML's C loader is ``yaml._yaml``,
imported by ``yaml`` when present)."""


def _default_python313() -> str:
    """A CPython 3.13 to run subinterpreters in: ``python3.13`` on PATH, else pyenv's; or ``""``."""
    import glob
    import shutil

    found = shutil.which("python3.13")
    if found:
        return found
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = sorted(glob.glob(os.path.join(root, "versions", "3.13*", "bin", "python3")))
    return candidates[-1] if candidates else ""


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _items(first: int, count: int, step: int) -> None:
    import cpu_work

    for k in range(first, count, step):
        cpu_work.render(f"widget-{k:05d}", k)


def _pool_item(k: int) -> int:
    import cpu_work

    return cpu_work.render(f"widget-{k:05d}", k)


def inner(variant: str, items: int) -> dict[str, Any]:
    """Run ``items`` work items as ``variant`` in this interpreter; the measurements."""
    import cpu_work

    cpu_work.render("warm-up", 0)  # imports and first-call costs out of the timed window
    result: dict[str, Any] = {
        "variant": variant,
        "python": sys.version.split()[0],
        "gil": getattr(sys, "_is_gil_enabled", lambda: True)(),
    }
    cpu0 = _cpu()
    if variant == "1 thread":
        t0 = time.perf_counter()
        _items(0, items, 1)
        result["seconds"] = time.perf_counter() - t0
    elif variant in ("2 threads", "2 threads, free-threaded"):
        threads = [threading.Thread(target=_items, args=(i, items, 2)) for i in range(2)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        result["seconds"] = time.perf_counter() - t0
    elif variant == "2 processes":
        import multiprocessing

        t_start = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            pool.map(_pool_item, [0, 1])  # both workers up and warmed
            t0 = time.perf_counter()
            pool.map(_pool_item, range(items), chunksize=1)
            result["seconds"] = time.perf_counter() - t0
        result["seconds_with_start"] = time.perf_counter() - t_start
    elif variant == "2 subinterpreters":
        import _interpreters  # type: ignore[import-not-found]  # CPython 3.13

        t_start = time.perf_counter()
        ids = [_interpreters.create("isolated") for _ in range(2)]
        setup = f"import sys; sys.path.insert(0, {str(WORK_DIR)!r}); import cpu_work\n"
        for interp in ids:
            _interpreters.exec(interp, setup + "cpu_work.render('warm-up', 0)")
        errors: list[object] = []

        def run(interp: int, first: int) -> None:
            code = f"for k in range({first}, {items}, 2): cpu_work.render(f'widget-{{k:05d}}', k)"
            error = _interpreters.exec(interp, code)
            if error is not None:
                errors.append(error)

        threads = [threading.Thread(target=run, args=(interp, i)) for i, interp in enumerate(ids)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        result["seconds"] = time.perf_counter() - t0
        for interp in ids:
            _interpreters.destroy(interp)
        result["seconds_with_start"] = time.perf_counter() - t_start
        if errors:
            result["error"] = repr(errors[0])
    else:
        raise ValueError(variant)
    result["cpu_seconds"] = _cpu() - cpu0
    result["ms_per_item"] = cpu_work.calibrate(5)
    return result


def check_imports() -> dict[str, str]:
    """Import each of :data:`DEPENDENCIES` in a fresh isolated subinterpreter: ok or the error."""
    import _interpreters

    out: dict[str, str] = {}
    for module in DEPENDENCIES:
        interp = _interpreters.create("isolated")
        try:
            error = _interpreters.exec(interp, f"import {module}")
            out[module] = "ok" if error is None else f"{error.type.__name__}: {error.msg}"
        finally:
            _interpreters.destroy(interp)
    return out


def spawn(python: str, variant: str, items: int) -> dict[str, Any]:
    """Run one variant in a fresh ``python`` process; its JSON result."""
    done = subprocess.run(
        [python, __file__, "--inner", variant, "--items", str(items)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return {"variant": variant, "error": done.stderr.strip()[-500:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--subinterpreter-python",
        default=_default_python313(),
        help="a CPython >= 3.13 for the subinterpreter variant (its own 1-thread baseline too)",
    )
    parser.add_argument("--ft-python", default="", help="a free-threaded CPython, if any")
    parser.add_argument(
        "--check-imports",
        default="",
        help="a Python with setpoint's dependencies installed: which import in a subinterpreter",
    )
    parser.add_argument("--inner", default="", help=argparse.SUPPRESS)
    parser.add_argument("--inner-check-imports", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner_check_imports:
        print(json.dumps(check_imports()))
        return
    if args.inner:
        print(json.dumps(inner(args.inner, args.items)))
        return

    from _common import markdown_table, run_header

    runs: list[tuple[str, str, Callable[[], dict[str, Any]]]] = []
    pythons = {"venv": sys.executable}
    if args.subinterpreter_python and Path(args.subinterpreter_python).exists():
        pythons["subinterpreters"] = args.subinterpreter_python
    if args.ft_python:
        pythons["free-threaded"] = args.ft_python
    plan: list[tuple[str, str]] = [
        ("venv", "1 thread"),
        ("venv", "2 threads"),
        ("venv", "2 processes"),
    ]
    if "subinterpreters" in pythons:
        plan += [
            ("subinterpreters", "1 thread"),
            ("subinterpreters", "2 processes"),
            ("subinterpreters", "2 subinterpreters"),
        ]
    if "free-threaded" in pythons:
        plan += [("free-threaded", "1 thread"), ("free-threaded", "2 threads, free-threaded")]
    for python_key, variant in plan:
        runs.append(
            (
                python_key,
                variant,
                functools.partial(spawn, pythons[python_key], variant, args.items),
            )
        )
    results: list[dict[str, Any]] = []
    load_start = os.getloadavg()
    for repeat in range(args.repeat):
        k = repeat % len(runs)
        for python_key, variant, run in runs[k:] + runs[:k]:
            result = run()
            result["python_key"] = python_key
            result["repeat"] = repeat
            results.append(result)
            print(
                f"[{repeat}] {python_key} {variant}: {result.get('seconds', 0):.2f}s "
                f"cpu={result.get('cpu_seconds', 0):.2f}s {result.get('error', '')}",
                file=sys.stderr,
                flush=True,
            )
    imports: dict[str, str] = {}
    if args.check_imports:
        done = subprocess.run(
            [args.check_imports, __file__, "--inner-check-imports"],
            capture_output=True,
            text=True,
            check=False,
        )
        imports = (
            json.loads(done.stdout.strip().splitlines()[-1])
            if done.returncode == 0
            else {"error": done.stderr.strip()[-300:]}
        )

    def med(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if key in r]
        return statistics.median(values) if values else None

    rows: list[list[str]] = []
    for python_key, variant in plan:
        mine = [
            r
            for r in results
            if r["python_key"] == python_key and r["variant"] == variant and "error" not in r
        ]
        base = [
            r
            for r in results
            if r["python_key"] == python_key and r["variant"] == "1 thread" and "error" not in r
        ]
        if not mine:
            failed = [
                r for r in results if r["python_key"] == python_key and r["variant"] == variant
            ]
            why = failed[0].get("error", "not run") if failed else "not run"
            rows.append([f"{variant} ({python_key})", "failed: " + why.splitlines()[-1]] + [""] * 5)
            continue
        seconds = [r["seconds"] for r in mine]
        b = med(base, "seconds") or 0.0
        with_start = med(mine, "seconds_with_start")
        cpu = med(mine, "cpu_seconds") or 0.0
        b_cpu = med(base, "cpu_seconds") or 0.0
        rows.append(
            [
                f"{variant} (Python {mine[0]['python']}{'' if mine[0]['gil'] else ', no GIL'})",
                f"{statistics.median(seconds):.2f} [{min(seconds):.2f}-{max(seconds):.2f}]",
                f"{statistics.median(seconds) / b:.2f}x" if b else "n/a",
                f"{with_start:.2f} ({with_start / b:.2f}x)" if with_start and b else "",
                f"{cpu:.2f}",
                f"{cpu / b_cpu:.2f}x" if b_cpu else "n/a",
                f"{med(mine, 'ms_per_item') or 0:.1f}",
            ]
        )
    report = "\n".join(
        [
            run_header(),
            f"- Items: {args.items}; repeats: {args.repeat}; load average at the start "
            + "/".join(f"{v:.2f}" for v in load_start)
            + ", at the end "
            + "/".join(f"{v:.2f}" for v in os.getloadavg()),
            "",
            markdown_table(
                [
                    "variant",
                    "wall s",
                    "x 1 thread",
                    "wall s with start-up",
                    "CPU s",
                    "CPU x 1 thread",
                    "ms per item",
                ],
                rows,
            ),
            *(
                [
                    "",
                    "Imports in an isolated subinterpreter: "
                    + ", ".join(f"{m}: {v}" for m, v in imports.items()),
                ]
                if imports
                else []
            ),
        ]
    )
    print(report)
    out = Path.home() / ".cache" / "setpoint" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"processes-alternatives-{time.strftime('%Y-%m-%d-%H%M', time.gmtime())}.json"
    path.write_text(
        json.dumps({"results": results, "imports": imports, "report": report}, indent=2)
    )
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
