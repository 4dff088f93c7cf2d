"""``setpoint crd ...``: tools for evolving CustomResourceDefinitions.

* ``setpoint crd migrate FILE...`` rewrites apiextensions v1beta1 CRDs (and
  schemas written with OpenAPI v2 habits) as apiextensions v1, and reports
  what it changed and what still needs a person. Exit code: 0 when nothing
  needs a person, 2 when something does, 1 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from setpoint.crd import render_yaml
from setpoint.migrate.convert import (
    CRDMigration,
    MigrateOptions,
    MigrationInputError,
    migrate_crd,
)

__all__ = ["EXIT_NEEDS_HUMAN", "register"]

EXIT_NEEDS_HUMAN = 2
"""Exit code of ``crd migrate`` when the output is written but a person must still act."""


def _load_documents(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MigrationInputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise MigrationInputError(f"{path}: not valid YAML ({exc})") from None
    expanded: list[Any] = []
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "List":
            expanded.extend(document.get("items") or [])
        else:
            expanded.append(document)
    return expanded


def _cmd_migrate(args: argparse.Namespace) -> int:
    options = MigrateOptions(keep_unknown_fields=not args.prune_declared)
    results: list[tuple[Path, list[Any], list[CRDMigration]]] = []
    try:
        for name in args.files:
            path = Path(name)
            out_docs: list[Any] = []
            migrations: list[CRDMigration] = []
            for i, document in enumerate(_load_documents(path)):
                try:
                    migration = migrate_crd(document, options=options)
                except MigrationInputError as exc:
                    raise MigrationInputError(f"{path} (document {i + 1}): {exc}") from None
                migrations.append(migration)
                out_docs.append(migration.crd)
            if not migrations:
                raise MigrationInputError(f"{path}: no CustomResourceDefinition found")
            results.append((path, out_docs, migrations))
    except MigrationInputError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1

    for path, docs, _ in results:
        text = render_yaml(docs)
        if args.in_place:
            path.write_text(text, encoding="utf-8")
        elif args.output_dir is not None:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            (args.output_dir / path.name).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
    if args.python is not None:
        from setpoint.migrate.pygen import python_module_for

        crds = [m.crd for _, _, ms in results for m in ms]
        args.python.write_text(python_module_for(crds), encoding="utf-8")
    all_migrations = [m for _, _, ms in results for m in ms]
    report = _report_text(results)
    print(report, file=sys.stderr, end="")
    if args.report_json is not None:
        args.report_json.write_text(
            json.dumps(_report_json(results), indent=2) + "\n", encoding="utf-8"
        )
    return EXIT_NEEDS_HUMAN if any(m.needs_human for m in all_migrations) else 0


def _report_text(results: list[tuple[Path, list[Any], list[CRDMigration]]]) -> str:
    lines: list[str] = []
    human_total = 0
    for path, _, migrations in results:
        for m in migrations:
            counts = {a: sum(1 for n in m.notes if n.action == a) for a in ("changed", "removed")}
            human = m.needs_human
            human_total += len(human)
            lines.append(
                f"{path}: {m.name} ({m.source_api_version} -> apiextensions.k8s.io/v1): "
                f"{counts['changed']} changed, {counts['removed']} removed, "
                f"{len(human)} need a human"
            )
            lines.extend(f"  {note}" for note in m.notes)
    verdict = (
        f"{human_total} item(s) need a human (exit {EXIT_NEEDS_HUMAN})"
        if human_total
        else "nothing needs a human"
    )
    lines.append(verdict)
    return "\n".join(lines) + "\n"


def _report_json(results: list[tuple[Path, list[Any], list[CRDMigration]]]) -> dict[str, Any]:
    return {
        "crds": [
            {
                "file": str(path),
                "name": m.name,
                "sourceApiVersion": m.source_api_version,
                "needsHuman": len(m.needs_human),
                "notes": [
                    {"action": n.action, "where": n.where, "message": n.message} for n in m.notes
                ],
            }
            for path, _, migrations in results
            for m in migrations
        ],
        "needsHuman": sum(len(m.needs_human) for _, _, ms in results for m in ms),
    }


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``crd`` command group (``migrate``)."""
    parser = subparsers.add_parser(
        "crd",
        help="migrate, compare and retire CRD versions",
        description="Tools for evolving CustomResourceDefinitions.",
    )
    sub = parser.add_subparsers(dest="crd_command", required=True, metavar="SUBCOMMAND")
    migrate = sub.add_parser(
        "migrate",
        help="rewrite apiextensions v1beta1 CRDs as v1 and fix OpenAPI v2 habits",
        description=(
            "Rewrite CRDs as apiextensions.k8s.io/v1. Prints the result to stdout (or writes "
            "files), and a report to stderr. Exit 0: done; 2: written, but some items need a "
            "human (listed as needs-human); 1: bad input."
        ),
    )
    migrate.add_argument("files", nargs="+", metavar="FILE", help="YAML files with CRDs")
    where = migrate.add_mutually_exclusive_group()
    where.add_argument(
        "--output-dir", type=Path, default=None, help="write each FILE's result here, same name"
    )
    where.add_argument("--in-place", action="store_true", help="overwrite each FILE")
    migrate.add_argument(
        "--prune-declared",
        action="store_true",
        help="when the old CRD had pruning off, keep fields outside the schema only in "
        "nodes with no declared fields (default: keep them everywhere, losslessly)",
    )
    migrate.add_argument(
        "--report-json", type=Path, default=None, help="also write the report as JSON here"
    )
    migrate.add_argument(
        "--python",
        type=Path,
        default=None,
        metavar="FILE.py",
        help="also write Python classes that generate the same CRDs (setpoint generate crd)",
    )
    migrate.set_defaults(func=_cmd_migrate)
