"""Build a small Go program of scripts/ into setpoint's cache: what the checkers share.

The checkers the integration tests run (scripts/kstatus, scripts/argocd) are Go programs
over the libraries whose verdict they report. Each is built from the Go module proxy with
its committed go.sum (``-mod=readonly``), never committed, and cached under
``~/.cache/setpoint/<name>/<version>/bin/<name>`` (``$XDG_CACHE_HOME`` respected);
``build_kstatus.py`` and ``build_argocd.py`` name the program and its version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["binary_path", "build", "cache_dir"]


def cache_dir(name: str, version: str) -> Path:
    """``~/.cache/setpoint/<name>/<version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "setpoint" / name / version


def binary_path(name: str, version: str) -> Path:
    """Where :func:`build` puts the program (it may not be built yet)."""
    return cache_dir(name, version) / "bin" / name


def build(
    source: Path,
    name: str,
    version: str,
    *,
    force: bool = False,
    record: dict[str, str] | None = None,
) -> Path:
    """Build (or find cached) the Go program in ``source``; return the binary's path.

    ``record`` (the versions it was built from) is written, with the build's seconds and
    the binary's size, to ``build.json`` beside ``bin/``.
    """
    target = binary_path(name, version)
    if target.exists() and not force:
        return target
    go = shutil.which("go")
    if go is None:
        raise SystemExit(f"go is not on PATH: install Go 1.26 or newer to build {name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOFLAGS="-buildvcs=false -mod=readonly")
    command = [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(target), "."]
    print("building:", " ".join(command), file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, cwd=source)
    seconds = time.monotonic() - started
    details = {**(record or {}), "seconds": round(seconds, 1), "bytes": target.stat().st_size}
    (cache_dir(name, version) / "build.json").write_text(json.dumps(details, indent=2) + "\n")
    print(f"built in {seconds:.0f}s", file=sys.stderr)
    return target
