"""Build Prometheus from Go modules into ``~/.cache/setpoint/prometheus/<version>/bin``.

For proving the dashboards and alert rules against a real Prometheus (issue 15, part 4),
the way the local control plane is built: from the Go module proxy, never committed, cached
outside the repository. ``github.com/prometheus/prometheus`` has no replace or exclude
directives, so ``go install cmd/prometheus@<module version>`` builds it directly. The
``remove_all_sd`` tag leaves out every cloud service discovery (static and file targets are
all a test needs), which makes the build much smaller; the web UI's assets are not embedded
(the HTTP API is all a test uses).

Usage::

    .venv/bin/python scripts/build_prometheus.py [--version 3.16.0] [--force]

Prints the binary's path. Measured on 2026-12-01: 4 min 35 s of CPU (54 min of wall time,
niced, at a load average of 8-11 on the shared 2-core machine), a 52 MB binary.
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

DEFAULT_VERSION = "3.16.0"
"""The Prometheus release built by default (module ``v0.316.0``, see :func:`module_version`)."""


def module_version(version: str) -> str:
    """The Go module version of a Prometheus 3.x release: 3.16.0 is ``v0.316.0``."""
    major, minor, patch = (int(part) for part in version.split("."))
    if major != 3:
        raise ValueError(f"Prometheus {version}: only 3.x releases are mapped to module versions")
    return f"v0.{major * 100 + minor}.{patch}"


def cache_dir(version: str) -> Path:
    """``~/.cache/setpoint/prometheus/<version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "setpoint" / "prometheus" / version


def build(version: str, *, force: bool = False) -> Path:
    """Build (or find cached) Prometheus ``version``; return the binary's path."""
    target = cache_dir(version) / "bin" / "prometheus"
    if target.exists() and not force:
        return target
    go = shutil.which("go")
    if go is None:
        raise SystemExit("go is not on PATH: install Go 1.26 or newer to build Prometheus")
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOBIN=str(target.parent), GOFLAGS="-buildvcs=false")
    ldflags = f"-s -w -X github.com/prometheus/common/version.Version={version}"
    package = f"github.com/prometheus/prometheus/cmd/prometheus@{module_version(version)}"
    command = [go, "install", "-tags", "remove_all_sd", "-ldflags", ldflags, package]
    print("building:", " ".join(command), file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True)
    seconds = time.monotonic() - started
    record = {"version": version, "seconds": round(seconds, 1), "bytes": target.stat().st_size}
    (cache_dir(version) / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"built in {seconds:.0f}s", file=sys.stderr)
    return target


def main() -> None:
    """Parse the command line, build, print the binary's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=DEFAULT_VERSION, help="Prometheus release (3.x)")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args()
    print(build(args.version, force=args.force))


if __name__ == "__main__":
    main()
