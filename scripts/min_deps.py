"""Install every dependency at the lowest version its range allows, and run the unit tests.

A range such as ``orjson>=3.10,<4`` is a promise that 3.10.0 works. Day to day, pip
resolves the newest versions, so nothing checks the lower end. This script does:

1. Reads ``pyproject.toml``: the runtime ``dependencies``, the ``tools`` and ``testing``
   extras, and the dev packages the unit tests themselves need (``UNIT_TEST_DEV``); a
   package in both takes the higher floor (the repository's tests need pytest 9, the extra
   allows 8.2). An extra's reference to another of setpoint's extras (``setpoint[tools]``)
   is not a package to pin: the extra it names is read anyway.
2. Pins each to the lower bound of its range (``>=X`` becomes ``==X``) in a constraints
   file; a requirement without a lower bound is an error (the range promises nothing).
3. Creates a fresh virtualenv in a temporary directory, installs the checkout (editable:
   some unit tests read the checkout; the wheel is the release check's job) with those
   constraints, and prints what was installed.
4. Runs ``pytest tests/unit`` from the checkout with that virtualenv's Python.

Run: ``make min-deps`` (or ``.venv/bin/python scripts/min_deps.py [--keep]``).
The last run's result is recorded in ``docs/packaging.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# Dev-extra packages the unit tests import or configure (pytest.ini's ``timeout``);
# the rest of the dev extra is tooling (linters, type checker, docs, build).
UNIT_TEST_DEV = ("pytest-timeout", "hypothesis", "aiohttp", "h11")


def lower_bound(requirement: Requirement) -> str:
    """The version ``requirement``'s ``>=`` (or ``==``) clause names.

    Raises:
        SystemExit: the requirement has no lower bound.

    """
    for spec in requirement.specifier:
        if spec.operator in (">=", "==", "~="):
            return spec.version
    raise SystemExit(
        f"min-deps: {requirement} has no lower bound in pyproject.toml; add '>=' with the "
        "oldest version it is meant to work with"
    )


def requirements() -> list[Requirement]:
    """Runtime dependencies, the tools and testing extras, and the dev packages unit tests need.

    A package named twice (pytest is in ``testing`` and, with a higher floor, in ``dev``)
    is installed at the higher of its lower bounds: the unit tests need that one.
    """
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    listed = [*project["dependencies"], *extras["tools"], *extras["testing"]]
    own = project["name"]
    chosen = {r.name: r for r in map(Requirement, listed) if r.name != own}
    dev = {r.name: r for r in map(Requirement, extras["dev"]) if r.name != own}
    for name, requirement in dev.items():
        if name in UNIT_TEST_DEV or name in chosen:
            current = chosen.get(name)
            if current is None or Version(lower_bound(requirement)) > Version(lower_bound(current)):
                chosen[name] = requirement
    missing = [name for name in UNIT_TEST_DEV if name not in dev]
    if missing:
        raise SystemExit(f"min-deps: {missing} not in the dev extra of pyproject.toml")
    return list(chosen.values())


def main(argv: Sequence[str] | None = None) -> int:
    """Build the lowest-version environment and run the unit tests in it."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="setpoint-min-deps-"))
    pins = [f"{r.name}=={lower_bound(r)}" for r in requirements()]
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    print("lowest versions:\n  " + "\n  ".join(pins), flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    venv = work / "venv"
    python = venv / "bin" / "python"
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "-c", str(constraints), "-e", str(ROOT)]
        + [p.split("==")[0] for p in pins],
        [str(python), "-m", "pip", "freeze"],
        [str(python), "-m", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider", "-x"],
    ]
    had_build_dir = (ROOT / "build").exists()
    code = 0
    for command in steps:
        print(f"$ {' '.join(command)}", flush=True)
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        if code != 0:
            break
    if args.keep or code != 0:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if not had_build_dir:  # pip builds the checkout in place: remove what it left
        shutil.rmtree(ROOT / "build", ignore_errors=True)
    verdict = "passed" if code == 0 else f"FAILED (exit {code})"
    print(f"min-deps {verdict} in {time.monotonic() - started:.0f}s")
    return code


if __name__ == "__main__":
    sys.exit(main())
