"""Build the Argo CD checker into ``~/.cache/setpoint/argocd/<version>/bin/argocd``.

``scripts/argocd`` is a small Go program over the two libraries Argo CD evaluates an
operator's customizations with: ``github.com/yuin/gopher-lua`` runs a
``resource.customizations.health.<group>_<Kind>`` script the way Argo CD's ``util/lua`` does
(the same libraries: package, base, table; the object as ``obj`` with Kubernetes' number
decoding; the same reading of the returned table), and ``github.com/itchyny/gojq`` applies
``ignoreDifferences`` jqPathExpressions as its diff normalizer does (``del(EXPRESSION)``).
The tests of ``setpoint generate gitops`` run the generated files with it on objects the
real plane's controller wrote. Built like scripts/kstatus (see
scripts/build_kstatus.py): from the Go module proxy, never committed, cached outside the
repository; go.sum pins the module.

Usage::

    .venv/bin/python scripts/build_argocd.py [--force]

Prints the binary's path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "argocd"
"""The Go program's directory (main.go, go.mod, go.sum)."""

VERSION = "lua-v1.1.2-gojq-v0.12.17"
"""The gopher-lua and gojq versions go.mod requires (the cache directory's name)."""


def binary_path(version: str = VERSION) -> Path:
    """Where :func:`build` puts the binary (``$XDG_CACHE_HOME`` respected; may not exist)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "setpoint" / "argocd" / version / "bin" / "argocd"


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
    subprocess.run(command, env=env, check=True, cwd=SOURCE)
    return target


def main() -> None:
    """Parse the command line, build, print the binary's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args()
    print(build(force=args.force))


if __name__ == "__main__":
    main()
