"""Build the kstatus checker into ``~/.cache/setpoint/kstatus/<version>/bin/kstatus``.

``scripts/kstatus`` is a small Go program over ``sigs.k8s.io/cli-utils/pkg/kstatus/status``
(the library Flux and ``kubectl apply --prune``'s successors use to decide whether an object
is Current, InProgress or Failed). It reads objects as JSON lines on stdin and prints the
library's verdict per line. The integration tests of the controller's kstatus conditions
(``ControllerOptions.kstatus``, issue 32) compare setpoint's conditions with that verdict.
Built like the plane's tools: from the Go module proxy, never committed, cached outside the
repository; the source's go.sum pins every module.

Usage::

    .venv/bin/python scripts/build_kstatus.py [--force]

Prints the binary's path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "kstatus"
"""The Go program's directory (main.go, go.mod, go.sum)."""

CLI_UTILS_VERSION = "v0.37.2"
"""The ``sigs.k8s.io/cli-utils`` version go.mod requires (the cache directory's name)."""


def cache_dir(version: str = CLI_UTILS_VERSION) -> Path:
    """``~/.cache/setpoint/kstatus/<version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "setpoint" / "kstatus" / version


def binary_path(version: str = CLI_UTILS_VERSION) -> Path:
    """Where :func:`build` puts the binary (it may not be built yet)."""
    return cache_dir(version) / "bin" / "kstatus"


def build(*, force: bool = False) -> Path:
    """Build (or find cached) the checker; return the binary's path."""
    target = binary_path()
    if target.exists() and not force:
        return target
    go = shutil.which("go")
    if go is None:
        raise SystemExit("go is not on PATH: install Go 1.26 or newer to build the checker")
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOFLAGS="-buildvcs=false -mod=readonly")
    command = [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(target), "."]
    print("building:", " ".join(command), file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, cwd=SOURCE)
    seconds = time.monotonic() - started
    record = {
        "cli_utils": CLI_UTILS_VERSION,
        "seconds": round(seconds, 1),
        "bytes": target.stat().st_size,
    }
    (cache_dir() / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"built in {seconds:.0f}s", file=sys.stderr)
    return target


def main() -> None:
    """Parse the command line, build, print the binary's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args()
    print(build(force=args.force))


if __name__ == "__main__":
    main()
