"""``make dist`` and the README's install step (issue 30: a newcomer's first hours).

The install step used to run ``python -m build``, which needs the ``build`` package nobody
said to install, and wrote ``dist/`` into the checkout. ``make dist`` needs only python3
(its ``.venv`` has ``build``) and writes into an ignored directory.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAMP = ".venv/.installed-stamp"


def dry_run(target: str) -> list[str]:
    """The commands ``make target`` would run, the venv taken as made."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed; the repository's commands need it")
    done = subprocess.run(
        [make, "-n", "-o", STAMP, target], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_make_dist_builds_with_the_venv_into_an_ignored_directory() -> None:
    commands = dry_run("dist")
    (build,) = [c for c in commands if " -m build" in c]
    assert build.startswith(".venv/bin/python -m build"), build
    out = re.search(r"--outdir (\S+)", build)
    assert out is not None, build
    wheel = f"{out.group(1)}/setpoint-0.1.0-py3-none-any.whl"
    ignored = subprocess.run(["git", "check-ignore", "-q", wheel], cwd=ROOT, check=False)
    assert ignored.returncode == 0, f"{wheel} would be a new file in the checkout"
    assert any(c.startswith("rm -rf ") and "build/lib" in c for c in commands), commands


def test_the_readme_installs_with_make_dist() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Installing setpoint in your project", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    steps = block.group(1)
    assert "python -m build" not in steps
    assert steps.startswith("make dist"), steps
    install = re.search(r"pip install '(\S+)\[testing\]'", steps)
    assert install is not None, steps
    assert install.group(1).startswith("build/dist/setpoint-"), install.group(1)
