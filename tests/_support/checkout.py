"""A test run leaves no file in the checkout: what ``git status`` says before and after.

tests/conftest.py takes a :func:`snapshot` when the session starts and another when it
ends; :func:`left_behind` lists what appeared or changed in between, and the session fails
with :func:`report` (issue 28: a run once left 58 kubectl cache files that were committed).
Ignored paths (``.venv``, ``__pycache__``, ``build/``, ...) are not looked at: .gitignore
says they are build output.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

__all__ = ["SKIP_VARIABLE", "left_behind", "parse_porcelain", "report", "snapshot"]

SKIP_VARIABLE = "SETPOINT_SKIP_CHECKOUT_CHECK"
"""Set to ``1`` to run without the check (files edited by hand during the run would fail it)."""

GIT_STATUS = (
    "git",
    "--no-optional-locks",
    "status",
    "--porcelain=v1",
    "-z",
    "--untracked-files=all",
    "--ignored=no",
)
"""The command :func:`snapshot` runs. ``--no-optional-locks``: looking never writes the index,
so it cannot collide with someone committing in the same checkout."""


def parse_porcelain(output: bytes) -> dict[str, str]:
    """``git status --porcelain=v1 -z`` output as ``{path: two-letter status}``.

    Each entry is ``XY PATH``; a rename or copy (``R``/``C`` in the index column) is
    followed by its source path as a field of its own, which is skipped. Paths are decoded
    as UTF-8 with ``surrogateescape``, so any byte sequence survives.
    """
    entries: dict[str, str] = {}
    fields = output.split(b"\0")
    index = 0
    while index < len(fields):
        field = fields[index]
        index += 1
        if len(field) < 4:
            continue
        status = field[:2].decode("ascii", "replace")
        entries[field[3:].decode("utf-8", "surrogateescape")] = status
        if status[0] in "RC":
            index += 1
    return entries


def snapshot(root: Path) -> dict[str, str] | None:
    """Every untracked or changed path of the git work tree at ``root``, with its status.

    ``None`` when ``root`` is not a git work tree or git cannot run (an unpacked sdist, a
    machine without git): there is then nothing to compare, and the check is skipped.
    """
    try:
        done = subprocess.run(
            GIT_STATUS,
            cwd=root,
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_porcelain(done.stdout)


def left_behind(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """``"XY path"`` for each path that is new in ``after`` or whose status changed, sorted.

    A file that was already untracked or modified when the run started, and still is, is
    not listed (someone is working on it); a tracked file the run modified or deleted,
    and a new untracked file, are.
    """
    return [
        f"{status} {path}" for path, status in sorted(after.items()) if before.get(path) != status
    ]


def report(root: Path, lines: list[str]) -> str:
    """The message that fails a session which left ``lines`` (from :func:`left_behind`)."""
    listing = "\n".join(f"  {line}" for line in lines)
    return (
        f"this test run left {len(lines)} file(s) in the checkout {root}, which no test may "
        f"do (git status, ?? = new, M = modified, D = deleted):\n{listing}\n"
        "Write under pytest's tmp_path (or tmp_path_factory) instead; for a tool a test "
        "runs, point its cache or output there (kubectl: KUBECACHEDIR, which tests/conftest.py "
        "sets). Find the test by running the suspects alone and looking at `git status`; "
        "`git clean -n` lists untracked files to remove. Files that you (or anyone sharing "
        "this checkout, or an editor) changed while the tests ran are listed too: check the "
        f"list and run again, or set {SKIP_VARIABLE}=1 for a run during which you keep "
        "editing."
    )
