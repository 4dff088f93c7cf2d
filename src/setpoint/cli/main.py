"""The ``setpoint`` command: one entry point, one module per command group."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata

from setpoint.cli import controlplane, crd, demo, dev, doctor, generate, run, scaffold, snapshot
from setpoint.client.errors import ClientError
from setpoint.testing.controlplane import ControlPlaneError

__all__ = ["build_parser", "main", "version"]


def version() -> str:
    """The installed version of setpoint, from its distribution metadata.

    The version is written once, in ``pyproject.toml``; the installed metadata is its only
    reader, so ``setpoint --version``, ``pip show setpoint`` and the wheel's name agree.
    """
    try:
        return metadata.version("setpoint")
    except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        return "unknown (setpoint is not installed; pip install -e . in the checkout)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command registered."""
    parser = argparse.ArgumentParser(
        prog="setpoint",
        description="setpoint: write Kubernetes operators in Python.",
    )
    parser.add_argument("--version", action="version", version=f"setpoint {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    controlplane.register(sub)
    crd.register(sub)
    demo.register(sub)
    dev.register(sub)
    doctor.register(sub)
    generate.register(sub)
    run.register(sub)
    scaffold.register(sub)
    snapshot.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Expected failures (no binaries, unreachable server, bad input) print one
    clear line and exit 1; they never end in a traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ControlPlaneError, ClientError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
