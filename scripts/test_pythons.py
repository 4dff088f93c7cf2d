"""The unit suite on every supported Python: one virtualenv per version, outside the checkout.

For each version in :data:`SUPPORTED_PYTHONS` (or ``--versions``):

1. finds an interpreter: pyenv's newest ``3.X.*`` (``$PYENV_ROOT/versions``, default
   ``~/.pyenv/versions``), else ``python3.X`` on ``PATH``; a version the machine does not
   have is reported as ``not installed``, not as a failure;
2. creates (or reuses) ``<setpoint cache>/venvs/py3.X`` (``~/.cache/setpoint/venvs``) and
   installs the checkout editable with the ``dev`` extra there. The venv is reused while
   ``pyproject.toml`` and the interpreter are unchanged (a stamp file records both);
   ``--fresh`` rebuilds it. pip's install report says which packages had no wheel for that
   Python and were built from source;
3. runs the unit suite as ``make unit`` does (``tests/unit examples -m "not integration and
   not e2e"``) with that interpreter, with a JUnit report for the counts.

The tree tested is the working tree; ``--commit REV`` tests a commit instead, exported with
``git archive`` into a temporary directory (its ``src`` put first on ``PYTHONPATH``), so
edits in progress in the checkout neither break nor change the run.

A Markdown summary is printed (version, passed, failed, skipped, time, packages built from
source) and the record goes to ``<setpoint cache>/pythons/<UTC time>.json``. Exit 1 if any
installed version failed to install or to pass. Not part of ``make test`` (each version adds
a whole unit run); run by hand before a release and recorded in docs/compatibility.md.

Run: ``make test-pythons`` (``PYTHONS="3.12 3.13"`` narrows it), or
``.venv/bin/python scripts/test_pythons.py [--versions 3.12 3.13] [--commit HEAD] [--fresh]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from setpoint.testing.controlplane import cache_dir

ROOT = Path(__file__).resolve().parents[1]

SUPPORTED_PYTHONS: tuple[str, ...] = ("3.11", "3.12", "3.13")
"""The Python versions setpoint supports (``requires-python = ">=3.11"``) up to the newest
released one it is tested on."""

UNIT_ARGS: tuple[str, ...] = ("tests/unit", "examples", "-m", "not integration and not e2e")
"""What ``make unit`` runs."""

_VERSION = re.compile(r"^3\.[0-9]+$")


@dataclass
class PythonResult:
    """One Python version's install and unit run."""

    version: str
    """``3.X`` as asked."""
    interpreter: str = ""
    """The interpreter's path; empty when the machine has none."""
    full_version: str = ""
    """``3.X.Y`` as the interpreter reports it."""
    status: str = "not installed"
    """``pass``, ``FAIL``, ``install failed`` or ``not installed``."""
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    install_seconds: int = 0
    test_seconds: int = 0
    built_from_source: list[str] = field(default_factory=list)
    """Packages pip installed from an sdist (no wheel for this Python and platform); empty
    when the venv was reused (nothing was downloaded)."""
    failing: list[str] = field(default_factory=list)


def find_interpreter(version: str) -> Path | None:
    """The newest pyenv ``version.*`` interpreter, else ``python<version>`` on ``PATH``."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    candidates: list[tuple[int, Path]] = []
    if pyenv.is_dir():
        for entry in pyenv.iterdir():
            match = re.fullmatch(re.escape(version) + r"\.([0-9]+)", entry.name)
            python = entry / "bin" / "python3"
            if match and python.is_file():
                candidates.append((int(match.group(1)), python))
    if candidates:
        return max(candidates)[1]
    found = shutil.which(f"python{version}")
    return Path(found) if found else None


def _full_version(python: Path) -> str:
    out = subprocess.run(
        [str(python), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _stamp_text(python: Path, full_version: str) -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{python} {full_version} pyproject.toml sha256:{digest}\n"


def _sdists(report: Path) -> list[str]:
    """Names and versions pip installed from a source archive, per its ``--report``."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return []
    built = []
    for item in data.get("install", []):
        url = str(item.get("download_info", {}).get("url", ""))
        if item.get("is_direct") or not url:
            continue  # setpoint itself (the checkout)
        if not url.endswith(".whl"):
            meta = item.get("metadata", {})
            built.append(f"{meta.get('name', url)} {meta.get('version', '')}".strip())
    return sorted(built)


def prepare_venv(result: PythonResult, python: Path, *, fresh: bool) -> Path | None:
    """Create or reuse the version's venv with ``.[dev]`` installed; ``None`` if it failed."""
    venv = cache_dir() / "venvs" / f"py{result.version}"
    venv_python = venv / "bin" / "python"
    stamp = venv / ".setpoint-stamp"
    wanted = _stamp_text(python, result.full_version)
    if not fresh and venv_python.is_file() and stamp.is_file() and stamp.read_text() == wanted:
        print(f"-- reusing {venv} (pyproject.toml and interpreter unchanged)", flush=True)
        return venv_python
    shutil.rmtree(venv, ignore_errors=True)
    began = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    had_build_dir = (ROOT / "build").exists()
    with tempfile.TemporaryDirectory(prefix="setpoint-pythons-") as work:
        report = Path(work) / "install-report.json"
        steps = [
            [str(python), "-m", "venv", str(venv)],
            [str(venv_python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
            [
                str(venv_python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--report",
                str(report),
                "-e",
                f"{ROOT}[dev]",
            ],
        ]
        code = 0
        for command in steps:
            print(f"$ {' '.join(command)}", flush=True)
            code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
            if code != 0:
                break
        result.built_from_source = _sdists(report)
    if not had_build_dir:  # pip may build the checkout in place: remove what it left
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    result.install_seconds = round(time.monotonic() - began)
    if code != 0:
        result.status = "install failed"
        return None
    stamp.write_text(wanted)
    return venv_python


def _export(commit: str, into: Path) -> str:
    """Write ``commit``'s tree into ``into`` (``git archive``); return its full hash."""
    full = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    archive = into.parent / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", full], cwd=ROOT, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    return full


def run_unit(result: PythonResult, venv_python: Path, tree: Path, reports: Path) -> None:
    """Run the unit suite of ``tree`` with ``venv_python``; fill in the counts."""
    report = reports / f"py{result.version}.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    if tree != ROOT:
        # The venv's editable install points at the checkout; the exported tree comes first.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(tree / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
    command = [
        str(venv_python),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *UNIT_ARGS,
    ]
    print(f"$ (cd {tree} && {' '.join(command)})", flush=True)
    began = time.monotonic()
    code = subprocess.run(
        command, cwd=tree, env=env, check=False, stdin=subprocess.DEVNULL
    ).returncode
    result.test_seconds = round(time.monotonic() - began)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    if report.is_file():
        root = ET.parse(report).getroot()
        for suite in root.iter("testsuite"):
            for key in counts:
                counts[key] += int(suite.get(key, "0"))
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                result.failing.append(f"{case.get('classname')}::{case.get('name')}")
    result.failed = counts["failures"] + counts["errors"]
    result.skipped = counts["skipped"]
    result.passed = counts["tests"] - result.failed - result.skipped
    result.status = "pass" if code == 0 else f"FAIL (exit {code})"


def _minutes(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{minutes} min {rest:02d} s"


def table(results: Sequence[PythonResult]) -> str:
    """The Markdown table docs/compatibility.md records."""
    lines = [
        "| Python | result | passed | failed | skipped | unit run | install | built from source |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        built = ", ".join(r.built_from_source) or ("none" if r.install_seconds else "(reused)")
        lines.append(
            f"| {r.full_version or r.version} | {r.status} | {r.passed} | {r.failed} "
            f"| {r.skipped} | {_minutes(r.test_seconds)} | {_minutes(r.install_seconds)} "
            f"| {built} |"
        )
    return "\n".join(lines)


def _version(text: str) -> str:
    if not _VERSION.match(text):
        raise argparse.ArgumentTypeError(f"{text!r}: give a Python version as 3.X, e.g. 3.12")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Install and run the unit suite on every asked version; print and record the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--versions", nargs="+", type=_version, default=list(SUPPORTED_PYTHONS), metavar="3.X"
    )
    parser.add_argument("--commit", help="test this commit (git archive) instead of the tree")
    parser.add_argument("--fresh", action="store_true", help="rebuild every venv")
    args = parser.parse_args(argv)
    out = cache_dir() / "pythons"
    out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    results: list[PythonResult] = []
    with tempfile.TemporaryDirectory(prefix="setpoint-pythons-tree-") as work:
        tree, commit = ROOT, "working tree"
        if args.commit:
            tree = Path(work) / "tree"
            tree.mkdir()
            commit = _export(args.commit, tree)
        for version in args.versions:
            result = PythonResult(version=version)
            results.append(result)
            python = find_interpreter(version)
            print(f"\n== Python {version}: {python or 'not installed'}", flush=True)
            if python is None:
                continue
            result.interpreter = str(python)
            result.full_version = _full_version(python)
            venv_python = prepare_venv(result, python, fresh=args.fresh)
            if venv_python is not None:
                run_unit(result, venv_python, tree, out)
            print(table([result]), flush=True)
    record = out / f"{started:%Y-%m-%dT%H%M%SZ}.json"
    record.write_text(
        json.dumps(
            {
                "started": started.isoformat(timespec="seconds"),
                "tested": commit,
                "command": " ".join(["scripts/test_pythons.py", *(argv or sys.argv[1:])]),
                "results": [asdict(r) for r in results],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nunit suite on every Python, {started:%Y-%m-%d}, {commit} ({record}):\n")
    print(table(results))
    for r in results:
        for test in r.failing:
            print(f"  {r.full_version}: {test}")
    bad = [r for r in results if r.status not in ("pass", "not installed")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
