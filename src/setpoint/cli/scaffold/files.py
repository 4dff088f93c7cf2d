"""Templates in, files out: rendering, and writing without overwriting a person's work.

Templates are package data (``templates/`` next to this module, shipped in the wheel).
A template names its values as ``{{name}}``; :func:`render_template` fails when one is missing or
left over, so a half-filled file is never written.

:func:`plan_files` compares what a command would write with what is on disk and with the
digests ``PROJECT`` recorded; :func:`apply` writes only when nothing conflicts.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from setpoint.api.errors import SetpointError
from setpoint.cli.scaffold.project import digest

__all__ = ["FilePlan", "ScaffoldConflict", "apply", "plan_files", "render_template", "template"]

Status = Literal["create", "update", "unchanged", "conflict"]

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")


class ScaffoldConflict(SetpointError, FileExistsError):
    """A file the command would write was changed by a person since setpoint wrote it.

    Nothing was written. The message lists each file with the diff from what is there
    to what the command would write; ``--force`` overwrites them.
    """


def template(name: str) -> str:
    """The text of the packaged template ``name`` (``templates/<name>.tmpl``)."""
    path = resources.files("setpoint.cli.scaffold") / "templates" / f"{name}.tmpl"
    return path.read_text("utf-8")


def render_template(name: str, values: Mapping[str, str]) -> str:
    """Template ``name`` with every ``{{key}}`` replaced by ``values[key]``.

    Raises:
        KeyError: the template uses a value that ``values`` does not give (a bug in the
            scaffolder, reported with the template's name).

    """
    text = template(name)

    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"template {name} uses {{{{{key}}}}}, which was not given")
        return values[key]

    return _PLACEHOLDER.sub(value, text)


@dataclass(frozen=True, slots=True)
class FilePlan:
    """What a command does to one file."""

    path: str
    """Path relative to the project root (POSIX separators)."""
    content: str
    """What the file will hold."""
    status: Status
    """``create`` (missing), ``update`` (setpoint's own unchanged file, new content),
    ``unchanged`` (already this content) or ``conflict`` (a person changed it)."""
    diff: str = ""
    """For a conflict: unified diff from the file on disk to ``content``."""


def plan_files(
    root: Path, outputs: Mapping[str, str], recorded: Mapping[str, str]
) -> list[FilePlan]:
    """Decide, for each output, whether writing it is safe (see :class:`FilePlan`).

    A file on disk is setpoint's own when its SHA-256 equals the digest ``recorded`` in
    ``PROJECT``; any other existing content that differs from the output is a conflict.
    """
    result: list[FilePlan] = []
    for path, content in outputs.items():
        target = root / path
        if not target.exists():
            result.append(FilePlan(path, content, "create"))
            continue
        try:
            current = target.read_bytes()
        except OSError as exc:
            raise ScaffoldConflict(f"{target} cannot be read: {exc}") from None
        if current == content.encode():
            result.append(FilePlan(path, content, "unchanged"))
        elif recorded.get(path) == digest(current):
            result.append(FilePlan(path, content, "update"))
        else:
            diff = "".join(
                difflib.unified_diff(
                    current.decode(errors="replace").splitlines(keepends=True),
                    content.splitlines(keepends=True),
                    fromfile=f"{path} (on disk)",
                    tofile=f"{path} (setpoint)",
                )
            )
            result.append(FilePlan(path, content, "conflict", diff))
    return result


def apply(root: Path, plans: list[FilePlan], *, force: bool = False) -> None:
    """Write every planned file, or nothing.

    Each file is first written next to its target (``.<name>.setpoint-tmp``); only when
    all are written are they renamed into place, so an error half-way (a full disk, a
    permission) leaves the project as it was, apart from removed temporaries.

    Raises:
        ScaffoldConflict: some file is a conflict and ``force`` is false; the message
            holds the diffs.
        OSError: a file could not be written (nothing was renamed into place).

    """
    conflicts = [p for p in plans if p.status == "conflict"]
    if conflicts and not force:
        listing = "\n".join(p.diff or f"--- {p.path}\n" for p in conflicts)
        raise ScaffoldConflict(
            f"{len(conflicts)} file(s) were changed since setpoint wrote them, so nothing was "
            f"written: {', '.join(p.path for p in conflicts)}. Merge the change below by hand, "
            f"or run the command again with --force to overwrite:\n{listing}"
        )
    staged: list[tuple[Path, Path]] = []
    try:
        for item in plans:
            if item.status == "unchanged":
                continue
            target = root / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}.setpoint-tmp")
            temporary.write_text(item.content, encoding="utf-8")
            staged.append((temporary, target))
    except OSError:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise
    for temporary, target in staged:
        os.replace(temporary, target)
