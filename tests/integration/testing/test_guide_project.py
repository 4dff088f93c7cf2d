"""docs/guide/test-your-operator.md, as a project: its files are written out and pytest runs.

Every code block the page marks ``<!-- file: PATH -->`` is written to PATH in a fresh
directory, and ``pytest`` runs there as a user would run it: with the page's pyproject
settings and setpoint's plugin, against this session's control plane
(``SETPOINT_USE_EXISTING_CLUSTER``). The page cannot rot without this test failing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "guide" / "test-your-operator.md"
BLOCK = re.compile(r"<!-- file: (\S+) -->\n```[a-z]*\n(.*?)```", re.S)


def page_files() -> dict[str, str]:
    """PATH -> content of every block the page marks as a file."""
    files = {path: text for path, text in BLOCK.findall(PAGE.read_text())}
    assert files, f"{PAGE} marks no file blocks"
    return files


def test_the_page_describes_a_whole_project() -> None:
    """The page's files are the layout it draws: settings, operator, fixtures, three tests."""
    assert sorted(page_files()) == [
        "greeter/__init__.py",
        "pyproject.toml",
        "tests/conftest.py",
        "tests/test_cluster.py",
        "tests/test_periodic.py",
        "tests/test_unit.py",
    ]


def write_project(directory: Path) -> None:
    for path, text in page_files().items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def test_the_guide_project_type_checks(tmp_path: Path) -> None:
    """mypy --strict accepts the page's operator and tests (eventually, fixtures, types)."""
    write_project(tmp_path)
    cache = Path.home() / ".cache" / "setpoint" / "mypy-guide"
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), "greeter", "tests"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_guide_project_passes_its_tests(kubeconfig_path: Path, tmp_path: Path) -> None:
    """The project the page builds passes: three in-memory tests and one on the control plane."""
    write_project(tmp_path)
    env = {
        **os.environ,
        "SETPOINT_USE_EXISTING_CLUSTER": "1",
        "KUBECONFIG": str(kubeconfig_path),
    }
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "4 passed" in done.stdout, output
