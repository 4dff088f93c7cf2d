"""The ``setpoint`` command: one entry point, one module per command group."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata

__all__ = ["COMMANDS", "RUNTIME_COMMANDS", "build_parser", "main", "version"]


def version() -> str:
    """The installed version of setpoint, from its distribution metadata.

    The version is written once, in ``pyproject.toml``; the installed metadata is its only
    reader, so ``setpoint --version``, ``pip show setpoint`` and the wheel's name agree.
    """
    try:
        return metadata.version("setpoint")
    except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        return "unknown (setpoint is not installed; pip install -e . in the checkout)"


COMMANDS: dict[str, str] = {
    "controlplane": "setpoint.cli.controlplane",
    "crd": "setpoint.cli.crd",
    "create": "setpoint.cli.scaffold",
    "demo": "setpoint.cli.demo",
    "dev": "setpoint.cli.dev",
    "doctor": "setpoint.cli.doctor",
    "generate": "setpoint.cli.generate",
    "image": "setpoint.cli.image",
    "init": "setpoint.cli.scaffold",
    "run": "setpoint.cli.run",
    "snapshot": "setpoint.cli.snapshot",
}
"""Each command -> the module that registers it (its ``register(subparsers)``).

A command's module is imported only when that command runs (or for the full help), so
``setpoint --version`` or ``setpoint crd diff`` does not import the runtime, the testing
kit or an HTTP server with it."""

RUNTIME_COMMANDS = frozenset({"run"})
"""The commands of the runtime: ``pip install setpoint`` is enough for them. Every other
command is a tool and needs the ``tools`` extra (``pip install 'setpoint[tools]'``,
docs/packaging.md); run without it, it says so in one line instead of starting."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser: every command registered, or only ``command`` when it is known.

    ``command`` is the first word of the command line; registering only its module keeps
    the CLI's start-up to what that command needs. Unknown or absent: every command.
    """
    parser = argparse.ArgumentParser(
        prog="setpoint",
        description="setpoint: write Kubernetes operators in Python.",
    )
    parser.add_argument("--version", action="version", version=f"setpoint {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = [COMMANDS[command]] if command in COMMANDS else list(COMMANDS.values())
    for module in dict.fromkeys(wanted):  # in order, each module once
        importlib.import_module(module).register(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` (its first non-option word), if any."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code.

    Expected failures (no binaries, unreachable server, bad input, a tool command without
    the ``tools`` extra) print one clear line and exit 1; they never end in a traceback.
    Expected means an error setpoint raised on purpose (:class:`~setpoint.SetpointError`,
    whose messages say what to do), or a ``ValueError`` or ``OSError``; anything else is a
    bug and keeps its traceback.
    """
    from setpoint.api.errors import SetpointError

    words = list(sys.argv[1:] if argv is None else argv)
    command = _command_of(words)
    if command is None and "--version" in words:
        print(f"setpoint {version()}")
        return 0
    try:
        if command in COMMANDS and command not in RUNTIME_COMMANDS:
            # Before the command's module is imported: a tool's import may need the extra.
            from setpoint._extras import TOOLS, require_extra

            require_extra(TOOLS, f"setpoint {command}")
        parser = build_parser(command)
        args = parser.parse_args(words)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (SetpointError, ValueError, OSError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
