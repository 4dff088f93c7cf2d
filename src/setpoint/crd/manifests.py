"""Manifests as files: deterministic YAML rendering and change-aware writing.

Generation is meant to be re-run in CI and pre-commit hooks, so output must be
byte-for-byte stable: keys sorted (as controller-gen sorts them), no YAML
anchors, multi-line text as block literals, and files rewritten only when
their content changes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml

__all__ = ["Manifest", "ManifestWrite", "render_yaml", "write_manifests"]


class _Dumper(yaml.SafeDumper):
    """SafeDumper without anchors/aliases, with block literals for multi-line strings."""

    def ignore_aliases(self, data: Any) -> bool:
        # The same dict may appear twice in a schema; aliases would make it unreadable.
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def render_yaml(documents: Iterable[Mapping[str, Any]]) -> str:
    """Render documents as a multi-document YAML stream, each starting with ``---``."""
    parts = []
    for document in documents:
        body = yaml.dump(
            document,
            Dumper=_Dumper,
            sort_keys=True,
            default_flow_style=False,
            allow_unicode=True,
        )
        parts.append(f"---\n{body}")
    return "".join(parts)


@dataclass(frozen=True)
class Manifest:
    """One generated file: its path relative to the output directory and its documents."""

    path: str
    """POSIX path under the output directory, e.g. ``crd/bases/demo.io_widgets.yaml``."""
    documents: tuple[dict[str, Any], ...]
    """The Kubernetes objects in the file, in order."""

    def __post_init__(self) -> None:
        pure = PurePosixPath(self.path)
        if pure.is_absolute() or ".." in pure.parts or not self.path:
            raise ValueError(
                f"manifest path {self.path!r} must be relative and stay inside the output directory"
            )

    def render(self) -> str:
        """The file's text."""
        return render_yaml(self.documents)


@dataclass(frozen=True)
class ManifestWrite:
    """What :func:`write_manifests` did (or would do) with one file."""

    path: Path
    """The file on disk."""
    status: Literal["created", "updated", "unchanged"]
    """``created``/``updated``: content differs (written unless checking); ``unchanged``: equal."""


def write_manifests(
    manifests: Iterable[Manifest], output_dir: Path | str, *, check: bool = False
) -> list[ManifestWrite]:
    """Write manifests under ``output_dir``, touching only files whose content changes.

    With ``check=True`` nothing is written; the result says which files are
    out of date (the CI mode: fail when generated files were not regenerated).
    Writes go through a temporary file and a rename, so a crash never leaves a
    half-written manifest.
    """
    root = Path(output_dir)
    results: list[ManifestWrite] = []
    for manifest in manifests:
        target = root / Path(*PurePosixPath(manifest.path).parts)
        text = manifest.render()
        try:
            current: str | None = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current == text:
            results.append(ManifestWrite(target, "unchanged"))
            continue
        results.append(ManifestWrite(target, "created" if current is None else "updated"))
        if check:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return results
