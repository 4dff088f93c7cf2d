"""``setpoint snapshot``: capture objects as normalized documents, and compare two snapshots.

* ``setpoint snapshot KIND... [-n NAMESPACE] [-o FILE]`` writes every object of
  the kinds (plural, kind or short names, or ``group/version/Kind``) as a
  normalized YAML snapshot (see :mod:`setpoint.migrate.snapshot`).
* ``setpoint snapshot diff A B [--ignore PATH]...`` prints every field that
  differs; exit 1 when anything does, 0 when the snapshots match.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import yaml

from setpoint.migrate.snapshot import SnapshotError, diff_snapshots, discover_kind, take_snapshot

__all__ = ["register"]


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise SnapshotError(f"{path}: not valid YAML ({exc})") from None


def _cmd_diff(files: list[str], args: argparse.Namespace) -> int:
    if len(files) != 2:
        print("setpoint: error: snapshot diff takes two files: A B", file=sys.stderr)
        return 1
    try:
        before, after = _load(Path(files[0])), _load(Path(files[1]))
        differences = diff_snapshots(before, after, ignore=args.ignore)
    except SnapshotError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    for difference in differences:
        print(difference)
    print(f"{len(differences)} difference(s)")
    return 1 if differences else 0


async def _take(args: argparse.Namespace) -> dict[str, Any]:
    from setpoint.client import Client

    async with Client.from_kubeconfig(args.kubeconfig, context=args.context) as client:
        kinds = [await discover_kind(client, name) for name in args.targets]
        return await take_snapshot(client, kinds, namespace=args.namespace)


def _cmd(args: argparse.Namespace) -> int:
    if args.targets and args.targets[0] == "diff":
        return _cmd_diff(args.targets[1:], args)
    try:
        snapshot = asyncio.run(_take(args))
    except SnapshotError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    text = yaml.safe_dump(snapshot, sort_keys=False, allow_unicode=True)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
        print(f"{len(snapshot['objects'])} object(s) written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``snapshot`` command (``snapshot KIND...`` and ``snapshot diff A B``)."""
    parser = subparsers.add_parser(
        "snapshot",
        help="capture objects as normalized documents; `snapshot diff A B` compares two",
        description=(
            "`setpoint snapshot KIND...` writes every object of the kinds as normalized YAML "
            "(sorted keys; resourceVersion, uid, generation, managedFields and timestamps "
            "stripped). `setpoint snapshot diff A B` lists the fields that differ and exits 1 "
            "if any do."
        ),
    )
    parser.add_argument(
        "targets",
        nargs="+",
        metavar="KIND | diff A B",
        help="kinds to capture (plural, kind, short name or group/version/Kind), or diff A B",
    )
    parser.add_argument("-n", "--namespace", default=None, help="only this namespace")
    parser.add_argument("-o", "--output", type=Path, default=None, help="write to this file")
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="with diff: skip this field path and below (e.g. .metadata.annotations)",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG)")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    parser.set_defaults(func=_cmd)
