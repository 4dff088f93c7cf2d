"""Build the Argo CD checker into ``~/.cache/setpoint/argocd/<version>/bin/argocd``.

``scripts/argocd`` is a small Go program over the two libraries Argo CD evaluates an
operator's customizations with: ``github.com/yuin/gopher-lua`` runs a
``resource.customizations.health.<group>_<Kind>`` script the way Argo CD's ``util/lua`` does
(the same libraries: package, base, table; the object as ``obj`` with Kubernetes' number
decoding; the same reading of the returned table), and ``github.com/itchyny/gojq`` applies
``ignoreDifferences`` jqPathExpressions as its diff normalizer does (``del(EXPRESSION)``).
The tests of ``setpoint generate gitops`` run the generated files with it on objects the
real plane's controller wrote. Built like scripts/kstatus (:mod:`gobuild`): from the Go
module proxy, never committed, cached outside the repository; go.sum pins the modules.

Usage::

    .venv/bin/python scripts/build_argocd.py [--force]

Prints the binary's path.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gobuild

SOURCE = Path(__file__).resolve().parent / "argocd"
"""The Go program's directory (main.go, go.mod, go.sum)."""

GOPHER_LUA_VERSION = "v1.1.2"
"""The ``github.com/yuin/gopher-lua`` version go.mod requires."""

GOJQ_VERSION = "v0.12.17"
"""The ``github.com/itchyny/gojq`` version go.mod requires."""

VERSION = f"lua-{GOPHER_LUA_VERSION}-gojq-{GOJQ_VERSION}"
"""The cache directory's name."""


def binary_path() -> Path:
    """Where :func:`build` puts the binary (it may not be built yet)."""
    return gobuild.binary_path("argocd", VERSION)


def build(*, force: bool = False) -> Path:
    """Build (or find cached) the checker; return the binary's path."""
    record = {"gopher_lua": GOPHER_LUA_VERSION, "gojq": GOJQ_VERSION}
    return gobuild.build(SOURCE, "argocd", VERSION, force=force, record=record)


def main() -> None:
    """Parse the command line, build, print the binary's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args()
    print(build(force=args.force))


if __name__ == "__main__":
    main()
