"""Release check: build setpoint, install the wheel far from the checkout, run an operator's tests.

What a user gets from ``pip install setpoint`` is the wheel, not this repository. This
script checks that wheel the way a user would meet it:

1. Builds the sdist, then the wheel *from the sdist* (``python -m build``), and a second
   wheel straight from the tree; the two wheels must hold the same files, byte for byte
   (the sdist builds the same wheel).
2. ``twine check --strict`` on both archives (metadata PyPI would accept, a README that
   renders); LICENSE must be in both, CHANGELOG.md in the sdist.
3. Creates a fresh virtualenv in a temporary directory and installs
   ``<wheel>[testing]`` into it. Every later step runs there: the working directory is
   the temporary directory, PYTHONPATH and the setpoint variables are cleared, and the
   script fails if ``setpoint.__file__`` or any ``sys.path`` entry points into the checkout.
4. ``setpoint --version`` reports the version in pyproject.toml; ``setpoint demo`` fails
   with its one-line "needs a checkout" message, no traceback.
5. ``setpoint controlplane build`` through the installed package: it finds the Go module
   inside the installed wheel and builds the control plane, or reuses
   ``~/.cache/setpoint`` when the binaries are there. ``go build`` then compiles the etcd
   stub from the *installed* module into the temporary directory, so the wheel's Go
   module is proven complete even when every binary was cached. ``--fresh-cache``
   builds everything into an empty cache instead (slow: minutes).
6. Copies ``examples/quickstart`` (a small operator project) into the temporary directory
   and runs its unit and integration tests there with the installed pytest plugin,
   against a control plane that plugin starts. Passes only if both kinds ran and none
   failed or was skipped.

Run: ``make release-check`` (or ``.venv/bin/python scripts/release_check.py [--keep]``).
Each step prints its time; the total is the last line.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "quickstart"
# Variables that could make the installed package reach back into the checkout.
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "SETPOINT_CONTROLPLANE_SRC")


class CheckFailed(Exception):
    """A release-check step failed; the message says which and why."""


class Steps:
    """Runs the steps, timing each one."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def step(self, title: str) -> None:
        """Announce a step with the elapsed time."""
        print(f"\n== {title}  [{time.monotonic() - self.started:5.1f}s]", flush=True)

    def total(self) -> float:
        """Seconds since the check started."""
        return time.monotonic() - self.started


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    capture: bool = False,
) -> str:
    """Run a command; raise :class:`CheckFailed` with its output when it fails."""
    shown = " ".join(str(c) for c in command)
    print(f"$ {shown}", flush=True)
    result = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=capture,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        output = ((result.stdout or "") + (result.stderr or "")).strip()
        raise CheckFailed(f"`{shown}` exited {result.returncode}\n{output[-4000:]}")
    return result.stdout if capture else ""


def wheel_digests(wheel: Path) -> dict[str, str]:
    """Each file of a wheel and the SHA-256 of its bytes."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith("/")
        }


def build(steps: Steps, out: Path) -> tuple[Path, Path]:
    """Build the sdist and the wheel from it, and a wheel from the tree; compare the wheels."""
    steps.step("build the sdist, the wheel from the sdist, and a wheel from the tree")
    python = sys.executable
    # setuptools stages an in-tree build in build/lib; files left there by an older build
    # would end up in the tree's wheel (the comparison below would catch it, confusingly).
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)
    for staged in (ROOT / "build").glob("bdist.*"):
        shutil.rmtree(staged, ignore_errors=True)
    run([python, "-m", "build", "--outdir", out / "dist", ROOT], cwd=ROOT, capture=True)
    run([python, "-m", "build", "--wheel", "--outdir", out / "tree", ROOT], cwd=ROOT, capture=True)
    (sdist,) = (out / "dist").glob("*.tar.gz")
    (wheel,) = (out / "dist").glob("*.whl")
    (tree_wheel,) = (out / "tree").glob("*.whl")
    from_sdist, from_tree = wheel_digests(wheel), wheel_digests(tree_wheel)
    if from_sdist != from_tree:
        differ = sorted(
            name
            for name in from_sdist.keys() | from_tree.keys()
            if from_sdist.get(name) != from_tree.get(name)
        )
        raise CheckFailed(f"the wheel built from the sdist differs from the tree's: {differ}")
    print(f"{sdist.name}: {sdist.stat().st_size / 1024:.0f} KiB")
    print(f"{wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB, {len(from_sdist)} files")
    print("the wheel built from the sdist is identical, file by file, to the tree's")
    return sdist, wheel


def check_archives(steps: Steps, sdist: Path, wheel: Path) -> None:
    """``twine check --strict``, and the files a user must find in each archive."""
    steps.step("twine check --strict; LICENSE and CHANGELOG in the archives")
    run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel], cwd=ROOT)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        raise CheckFailed(f"{wheel.name} has no dist-info/licenses/LICENSE")
    with tarfile.open(sdist) as archive:
        members = {Path(m).relative_to(Path(m).parts[0]).as_posix() for m in archive.getnames()}
    for required in ("LICENSE", "CHANGELOG.md", "pyproject.toml"):
        if required not in members:
            raise CheckFailed(f"{sdist.name} has no {required}")
    license_text = (ROOT / "LICENSE").read_text()
    if "Apache License" not in license_text or "Version 2.0" not in license_text:
        raise CheckFailed("LICENSE is not the Apache License 2.0 the metadata declares")
    print("LICENSE (Apache-2.0) in both; CHANGELOG.md in the sdist")


def clean_env(work: Path, venv: Path, cache: Path | None) -> dict[str, str]:
    """The environment of every command run in the virtualenv: no way back to the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["HOME"] = env.get("HOME", str(Path.home()))
    env["TMPDIR"] = str(work / "tmp")
    if cache is not None:
        env["SETPOINT_CACHE_DIR"] = str(cache)
    return env


def install(steps: Steps, work: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A fresh virtualenv with ``<wheel>[testing]``; prove it imports nothing from the checkout."""
    steps.step("fresh virtualenv outside the checkout; pip install '<wheel>[testing]'")
    venv = work / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", venv], cwd=work, env=env)
    python = venv / "bin" / "python"
    # --no-compile: byte-compiling every dependency is most of the install's CPU time.
    install_command = [python, "-m", "pip", "install", "--quiet", "--no-compile"]
    run([*install_command, f"{wheel}[testing]"], cwd=work, env=env)
    probe = (
        "import sys, setpoint, setpoint.testing.build as b, pytest, pytest_asyncio;"
        "print(setpoint.__file__);"
        "print(b.controlplane_source_dir());"
        "print('\\n'.join(p for p in sys.path if p))"
    )
    lines = run([python, "-c", probe], cwd=work, env=env, capture=True).splitlines()
    package, source, paths = Path(lines[0]), Path(lines[1]), lines[2:]
    for path in [package, source, *map(Path, paths)]:
        if path.resolve().is_relative_to(ROOT):
            raise CheckFailed(f"the virtualenv reaches into the checkout: {path}")
    if not package.resolve().is_relative_to(venv.resolve()):
        raise CheckFailed(f"setpoint imported from {package}, not from the virtualenv")
    if not source.resolve().is_relative_to(venv.resolve()):
        raise CheckFailed(f"the Go module was found at {source}, not in the installed package")
    print(f"setpoint imported from {package}")
    print(f"Go module found at {source}")
    print(f"no sys.path entry inside {ROOT}")
    return venv


def cli(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> None:
    """``setpoint --version`` matches pyproject; ``setpoint demo`` says it needs a checkout."""
    steps.step("setpoint --version; setpoint demo outside a checkout")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = run([venv / "bin" / "setpoint", "--version"], cwd=work, env=env, capture=True)
    if shown.strip() != f"setpoint {declared}":
        raise CheckFailed(f"setpoint --version printed {shown.strip()!r}, expected {declared}")
    print(shown.strip())
    demo = subprocess.run(
        [str(venv / "bin" / "setpoint"), "demo"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if demo.returncode != 1 or "clone the setpoint repository" not in demo.stderr:
        raise CheckFailed(f"setpoint demo outside a checkout: {demo.returncode} {demo.stderr}")
    if "Traceback" in demo.stderr + demo.stdout:
        raise CheckFailed(f"setpoint demo printed a traceback:\n{demo.stderr}")
    print(f"setpoint demo: {demo.stderr.strip()}")


def control_plane(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> None:
    """Build or reuse the control plane through the installed package; compile the etcd stub."""
    steps.step("setpoint controlplane build (the installed package's Go module)")
    run([venv / "bin" / "setpoint", "controlplane", "build"], cwd=work, env=env)
    steps.step("go build the etcd stub from the installed Go module")
    source = Path(
        run(
            [
                venv / "bin" / "python",
                "-c",
                "import setpoint.testing.build as b; print(b.controlplane_source_dir())",
            ],
            cwd=work,
            env=env,
            capture=True,
        ).strip()
    )
    go = shutil.which("go")
    if go is None:
        raise CheckFailed("the Go toolchain is not on PATH")
    go_env = dict(env, CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    target = work / "etcd-from-wheel"
    command = [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", target, "./cmd/etcd"]
    run(command, cwd=source, env=go_env)
    version = run([target, "--version"], cwd=work, env=env, capture=True).splitlines()[0]
    print(f"{target.name}: {version}")


def operator_tests(steps: Steps, work: Path, venv: Path, env: dict[str, str]) -> None:
    """Run the quickstart operator's unit and integration tests with the installed plugin."""
    steps.step("an operator project's unit and integration tests, installed pytest plugin")
    project = work / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    report = work / "junit.xml"
    command = [
        venv / "bin" / "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        "-o",
        "junit_family=xunit1",
    ]
    run(command, cwd=project, env=env)
    cases = ET.parse(report).getroot().iter("testcase")
    outcomes: dict[str, list[str]] = {"unit": [], "integration": []}
    for case in cases:
        if any(case.find(tag) is not None for tag in ("failure", "error", "skipped")):
            raise CheckFailed(f"{case.get('classname')}::{case.get('name')} did not pass")
        kind = (
            "unit"
            if "test_unit_" in (case.get("file") or case.get("classname") or "")
            else ("integration")
        )
        outcomes[kind].append(str(case.get("name")))
    for kind, names in outcomes.items():
        if not names:
            raise CheckFailed(f"no {kind} test ran in the operator project")
        print(f"{kind}: {len(names)} passed ({', '.join(names)})")


def main(argv: Sequence[str] | None = None) -> int:
    """Run every step; exit 1 with the failing step's reason."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument(
        "--fresh-cache",
        action="store_true",
        help="build the control plane into an empty cache instead of reusing ~/.cache/setpoint",
    )
    args = parser.parse_args(argv)
    steps = Steps()
    work = Path(tempfile.mkdtemp(prefix="setpoint-release-check-"))
    (work / "tmp").mkdir()
    print(f"release check in {work} (outside the checkout {ROOT})")
    if work.resolve().is_relative_to(ROOT):
        print("release check: the temporary directory is inside the checkout", file=sys.stderr)
        return 1
    try:
        sdist, wheel = build(steps, work)
        check_archives(steps, sdist, wheel)
        cache = work / "cache" if args.fresh_cache else None
        env = clean_env(work, work / "venv", cache)
        venv = install(steps, work, wheel, env)
        cli(steps, work, venv, env)
        control_plane(steps, work, venv, env)
        operator_tests(steps, work, venv, env)
    except CheckFailed as exc:
        print(f"\nrelease check FAILED after {steps.total():.0f}s: {exc}", file=sys.stderr)
        print(f"(kept {work})", file=sys.stderr)
        return 1
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nrelease check passed in {steps.total():.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
