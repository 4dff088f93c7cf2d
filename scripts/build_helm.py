"""Build Helm and the OLM bundle checker into ``~/.cache/setpoint/helm/<version>/bin``.

The shipping paths of issue 33 are checked with the tools clusters use, never with a
re-implementation:

* ``helm``: the ``helm.sh/helm/v4`` module's ``cmd/helm`` at :data:`HELM_VERSION` (``helm
  lint --strict``, ``helm template``, ``helm install|upgrade|uninstall`` of a chart that
  ``setpoint generate helm`` wrote);
* ``olmcheck``: ``scripts/olmcheck``, a small Go program over the Operator Framework's
  validation library (``github.com/operator-framework/api/pkg/validation``, the one
  ``operator-sdk bundle validate`` runs) with its OperatorHub checks, for the bundles of
  ``setpoint generate bundle``.

Built like the plane's tools and scripts/build_kstatus.py: from the Go module proxy, never
committed, cached outside the repository; ``helm`` is pinned by its version (its own go.sum
pins its modules), ``olmcheck`` by the go.sum beside its source.

Usage::

    .venv/bin/python scripts/build_helm.py [--force] [--tool helm|olmcheck|all]

Prints the path of each binary built (or found cached), one a line.
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

HELM_VERSION = "v4.3.2"
"""The ``helm.sh/helm/v4`` version built (the newest the Go module proxy serves here)."""

OPERATOR_FRAMEWORK_API_VERSION = "v0.40.0"
"""The ``github.com/operator-framework/api`` version scripts/olmcheck/go.mod requires."""

OLMCHECK_SOURCE = Path(__file__).resolve().parent / "olmcheck"
"""The OLM checker's directory (main.go, go.mod, go.sum)."""


def cache_dir() -> Path:
    """``~/.cache/setpoint/helm/<helm version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "setpoint" / "helm" / HELM_VERSION


def helm_path() -> Path:
    """Where :func:`build_helm` puts ``helm`` (it may not be built yet)."""
    return cache_dir() / "bin" / "helm"


def olmcheck_path() -> Path:
    """Where :func:`build_olmcheck` puts ``olmcheck`` (it may not be built yet)."""
    return cache_dir() / "bin" / f"olmcheck-{OPERATOR_FRAMEWORK_API_VERSION}"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise SystemExit("go is not on PATH: install Go 1.26 or newer to build helm and olmcheck")
    return go


def _record(name: str, target: Path, started: float) -> None:
    seconds = time.monotonic() - started
    record_path = cache_dir() / "build.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    record[name] = {"seconds": round(seconds, 1), "bytes": target.stat().st_size}
    record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"built {name} in {seconds:.0f}s", file=sys.stderr)


def build_helm(*, force: bool = False) -> Path:
    """Build (or find cached) ``helm``; return its path."""
    target = helm_path()
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOFLAGS="-buildvcs=false", GOBIN=str(target.parent))
    command = [
        _go(),
        "install",
        "-trimpath",
        "-ldflags",
        "-s -w",
        f"helm.sh/helm/v4/cmd/helm@{HELM_VERSION}",
    ]
    print("building:", " ".join(command), file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, cwd=target.parent)
    _record("helm", target, started)
    return target


def build_olmcheck(*, force: bool = False) -> Path:
    """Build (or find cached) ``olmcheck`` from scripts/olmcheck; return its path."""
    target = olmcheck_path()
    if target.exists() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOFLAGS="-buildvcs=false -mod=readonly")
    command = [_go(), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(target), "."]
    print("building:", " ".join(command), file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, cwd=OLMCHECK_SOURCE)
    _record("olmcheck", target, started)
    return target


def main() -> None:
    """Parse the command line, build, print each binary's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument("--tool", choices=("helm", "olmcheck", "all"), default="all")
    args = parser.parse_args()
    if args.tool in ("helm", "all"):
        print(build_helm(force=args.force))
    if args.tool in ("olmcheck", "all"):
        print(build_olmcheck(force=args.force))


if __name__ == "__main__":
    main()
