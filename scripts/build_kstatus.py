"""Build the kstatus checker into ``~/.cache/setpoint/kstatus/<version>/bin/kstatus``.

``scripts/kstatus`` is a small Go program over ``sigs.k8s.io/cli-utils/pkg/kstatus/status``
(the library Flux and ``kubectl apply --prune``'s successors use to decide whether an object
is Current, InProgress or Failed). It reads objects as JSON lines on stdin and prints the
library's verdict per line. The integration tests of the controller's kstatus conditions
(``ControllerOptions.kstatus``, issue 32) compare setpoint's conditions with that verdict.
Built like the plane's tools (:mod:`gobuild`): from the Go module proxy, never committed,
cached outside the repository; the source's go.sum pins every module.

Usage::

    .venv/bin/python scripts/build_kstatus.py [--force]

Prints the binary's path.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gobuild

SOURCE = Path(__file__).resolve().parent / "kstatus"
"""The Go program's directory (main.go, go.mod, go.sum)."""

CLI_UTILS_VERSION = "v0.37.2"
"""The ``sigs.k8s.io/cli-utils`` version go.mod requires (the cache directory's name)."""


def cache_dir(version: str = CLI_UTILS_VERSION) -> Path:
    """``~/.cache/setpoint/kstatus/<version>`` (``$XDG_CACHE_HOME`` respected)."""
    return gobuild.cache_dir("kstatus", version)


def binary_path(version: str = CLI_UTILS_VERSION) -> Path:
    """Where :func:`build` puts the binary (it may not be built yet)."""
    return gobuild.binary_path("kstatus", version)


def build(*, force: bool = False) -> Path:
    """Build (or find cached) the checker; return the binary's path."""
    record = {"cli_utils": CLI_UTILS_VERSION}
    return gobuild.build(SOURCE, "kstatus", CLI_UTILS_VERSION, force=force, record=record)


def main() -> None:
    """Parse the command line, build, print the binary's path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args()
    print(build(force=args.force))


if __name__ == "__main__":
    main()
