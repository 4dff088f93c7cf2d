"""A low-overhead sampling profiler of a benchmark process's event loop thread (wall clock).

cProfile counts every call, which inflates code made of many small Python calls (the
runtime) several times more than code that spends its time in C (TLS, sockets, orjson), so
its split of a run is skewed. This sampler instead looks at the main thread's stack from a
second thread every ``interval`` seconds and counts where it is: the share of samples in a
function is the share of wall time the loop thread spent there, idle time (``select``)
included. It is a benchmark tool, not part of setpoint.

Switched on by the environment, so ``run.py`` needs no option: with
``SETPOINT_BENCH_SAMPLE_DIR`` set, ``widget_operator.py`` and ``floor.py`` write
``<dir>/<script>-<pid>.txt`` when they exit (leaf functions, then inclusive)::

    SETPOINT_BENCH_SAMPLE_DIR=~/.cache/setpoint/bench/samples \\
        .venv/bin/python bench/converge/run.py --n 2000 --repeat 1 --impls floor,setpoint

Caveats: the sampling thread needs the GIL, so the switch interval is lowered to 0.5 ms
while it runs (a sample waits at most that long for the loop thread to reach a switch
point); time in system calls is wall time, which on a busy machine includes waiting for a
CPU. Because it needs the GIL, it mostly samples where the loop thread gives the GIL up of
its own accord, in system calls: on the converge benchmark 85% of its samples land in
``select`` and most of the rest in ``ssl`` and socket calls, while the runtime's Python code
barely shows (docs/benchmarks.md, session 9). For where the Python time goes, sample from
outside the process with py-spy (``py-spy record -f raw``), or count calls with
``calls.py``.
"""

from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time
from pathlib import Path
from types import CodeType, FrameType

ENVIRONMENT = "SETPOINT_BENCH_SAMPLE_DIR"
"""The variable naming the directory to write reports to; unset: no sampling."""


def _label(code: CodeType) -> str:
    name = code.co_filename
    for marker, short in (("/src/setpoint/", "setpoint/"), ("site-packages/", "")):
        if marker in name:
            name = short + name.split(marker, 1)[1]
            break
    else:
        if "/lib/python3" in name:
            name = "stdlib/" + name.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{name}:{code.co_name}"


class Sampler:
    """Counts where the main thread is, every ``interval`` seconds, until the process exits."""

    def __init__(self, report: Path, interval: float = 0.001) -> None:
        self._report = report
        self._interval = interval
        self._leaf: collections.Counter[str] = collections.Counter()
        self._inclusive: collections.Counter[str] = collections.Counter()
        self._samples = 0
        self._stop = threading.Event()
        self._main = threading.main_thread().ident

    def start(self) -> None:
        """Start sampling in a daemon thread; write the report at exit."""
        sys.setswitchinterval(0.0005)
        threading.Thread(target=self._run, name="bench sampler", daemon=True).start()
        atexit.register(self.write)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            frame: FrameType | None = sys._current_frames().get(self._main or 0)
            if frame is None:
                continue
            self._samples += 1
            self._leaf[_label(frame.f_code)] += 1
            seen: set[str] = set()
            while frame is not None:
                label = _label(frame.f_code)
                if label not in seen:
                    seen.add(label)
                    self._inclusive[label] += 1
                frame = frame.f_back

    def write(self) -> None:
        """Stop and write the report: samples, then the top leaf and inclusive functions."""
        self._stop.set()
        total = max(1, self._samples)
        lines = [f"samples {self._samples} every {self._interval * 1000:.1f} ms", "== leaf =="]
        lines += [f"{100 * n / total:6.2f}% {k}" for k, n in self._leaf.most_common(60)]
        lines.append("== inclusive ==")
        lines += [f"{100 * n / total:6.2f}% {k}" for k, n in self._inclusive.most_common(200)]
        self._report.parent.mkdir(parents=True, exist_ok=True)
        self._report.write_text("\n".join(lines) + "\n")


def start_if_asked(script: str) -> None:
    """Start a :class:`Sampler` when ``SETPOINT_BENCH_SAMPLE_DIR`` is set (see above)."""
    directory = os.environ.get(ENVIRONMENT)
    if directory:
        report = Path(directory).expanduser() / f"{script}-{os.getpid()}-{int(time.time())}.txt"
        Sampler(report).start()
