"""Helpers shared by the benchmark scripts: summaries, ratios, tables and process resources.

Benchmarks here are scripts, not tests. Each one measures its candidates and a baseline in the
same run and reports ratios to that baseline, because absolute numbers from a shared 2-core
machine drift from minute to minute while ratios measured side by side hold up much better.
"""

from __future__ import annotations

import compileall
import datetime
import os
import platform
import re
import shlex
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

MACHINE_NOTE = "2 cores, shared, noisy"
"""How docs/benchmarks.md describes the machine every number was taken on."""


@dataclass(frozen=True, slots=True)
class Summary:
    """The median of repeated measurements, with the lowest and highest value as the spread."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        """Summarise ``values`` (at least one)."""
        if not values:
            raise ValueError("Summary.of needs at least one measurement")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def spread(self, scale: float = 1.0, digits: int = 0) -> str:
        """``"median [low-high]"`` with each value multiplied by ``scale``."""
        return (
            f"{self.median * scale:.{digits}f} "
            f"[{self.low * scale:.{digits}f}-{self.high * scale:.{digits}f}]"
        )


def ratio(value: float, baseline: float) -> str:
    """``value`` as a multiple of ``baseline``, e.g. ``"1.37x"`` (the baseline itself is 1.00x)."""
    if baseline <= 0:
        return "n/a"
    return f"{value / baseline:.2f}x"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; the first column is left-aligned, the rest right."""
    align = [":---"] + ["---:"] * (len(headers) - 1)
    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def current_rss_mib() -> float:
    """Resident set size of this process now, in MiB (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """Highest resident set size of this process image so far, in MiB (Linux ``VmHWM``).

    Not ``getrusage().ru_maxrss``: that survives ``execve``, so a child process started from a
    large parent would report the parent's peak instead of its own.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("/proc/self/status has no VmHWM line; this needs Linux")


def compile_setpoint_bytecode(package: str | os.PathLike[str] | None = None) -> None:
    """Write the ``.pyc`` files of the ``setpoint`` package the benchmark's processes import.

    An installed package has them (pip compiles a wheel's modules when it installs it, and
    kopf in the venv was installed so). This repository's package is an editable install,
    and where ``PYTHONDONTWRITEBYTECODE`` is set (it is on the benchmark machine) Python
    never writes them: every operator process then compiles about 1 MB of source at start,
    which doubled setpoint's import time and start-to-first-Ready against kopf's. Stale
    files are harmless: Python checks the source's size and mtime and ignores a stale one.

    ``package`` is the directory of another tree's ``setpoint`` package; by default, the
    one this process imports.
    """
    if package is None:
        import setpoint

        package = os.path.dirname(setpoint.__file__)
    if not compileall.compile_dir(package, quiet=1, workers=1):
        raise RuntimeError(f"byte-compiling {package} failed; see the errors above")


def run_header(argv: Sequence[str] | None = None) -> str:
    """The lines that head every result: date, exact command, machine note and Python version."""
    args = sys.argv if argv is None else argv
    command = ".venv/bin/python " + shlex.join(args)
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            f"- Date: {today}",
            f"- Command: `{command}`",
            f"- Machine: {MACHINE_NOTE} ({os.cpu_count()} CPUs visible, {platform.machine()}, "
            f"Linux {platform.release()})",
            f"- Python {platform.python_version()}",
        ]
    )


@dataclass
class ProcStats:
    """What /proc says about a running process."""

    rss_mib: float = 0.0
    peak_rss_mib: float = 0.0
    cpu_seconds: float = 0.0


def proc_stats(pid: int) -> ProcStats:
    """RSS, peak RSS and user+system CPU of ``pid`` now (zeros if it has exited)."""
    stats = ProcStats()
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    stats.rss_mib = int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    stats.peak_rss_mib = int(line.split()[1]) / 1024
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        stats.cpu_seconds = (int(fields[11]) + int(fields[12])) / ticks
    except (FileNotFoundError, ProcessLookupError, IndexError):
        pass
    return stats


def pids_with_argument(fragment: str) -> dict[int, str]:
    """Running processes whose command line contains ``fragment``: pid -> program name.

    The benchmarks find a local control plane's etcd and kube-apiserver this way (their
    command lines name the plane's directory), without reaching into ``ControlPlane``.
    """
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if any(fragment.encode() in arg for arg in argv[1:]):
            found[int(entry)] = os.path.basename(argv[0].decode(errors="replace"))
    return found


def cpu_seconds_of(pids: dict[int, str]) -> dict[str, float]:
    """User+system CPU seconds each program in ``pids`` has used so far, summed by name."""
    totals: dict[str, float] = {}
    for pid, program in pids.items():
        totals[program] = totals.get(program, 0.0) + proc_stats(pid).cpu_seconds
    return totals


VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
"""The prefix that runs a command under valgrind counting instructions only (no cache model):
counts repeat within 0.1% whatever the machine's load."""


def instruction_count(valgrind_output: str) -> int:
    """The ``I refs`` total valgrind printed (its stderr, or a log holding it)."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", valgrind_output)
    if found is None:
        raise RuntimeError(f"valgrind printed no instruction count: {valgrind_output[-500:]}")
    return int(found.group(1).replace(",", ""))
