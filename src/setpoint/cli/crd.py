"""``setpoint crd ...``: tools for evolving CustomResourceDefinitions.

* ``setpoint crd migrate FILE...`` rewrites apiextensions v1beta1 CRDs (and
  schemas written with OpenAPI v2 habits) as apiextensions v1, and reports
  what it changed and what still needs a person. Exit code: 0 when nothing
  needs a person, 2 when something does, 1 on bad input.
* ``setpoint crd diff OLD NEW`` lists the incompatible changes between two
  versions of CRDs, each named by the check that found it (see
  :mod:`setpoint.migrate.diff`); ``--against-cluster`` also lists the live
  objects the new schema rejects, at the versions the cluster serves and,
  after converting them, at the versions NEW adds (strategy None: relabelled
  as the server does; Webhook: through the converters of NEW's Python types,
  else reported as not checked). Exit code: 1 when anything is at level
  error (or an object is rejected), else 0.

* ``setpoint crd migrate-storage KIND`` rewrites every stored object of a CRD
  at its storage version (the in-tree StorageVersionMigration where served,
  else rate-limited, resumable no-op writes), then sets
  ``status.storedVersions`` to the storage version alone, only if the CRD did
  not change meanwhile (see :mod:`setpoint.migrate.storage`). Progress goes to
  stderr. Exit 1 on failure; rerun to resume.

Inputs of ``crd diff`` (OLD and NEW) may each be:

* a YAML/JSON file or a directory of them (v1beta1 CRDs are migrated first);
* ``kube://NAME``: the live CRD of that name (with its ``status.storedVersions``);
* ``MODULE:Class``: the kind of that resource class, every version declared
  next to it, generated as ``setpoint generate crd`` would;
* a module name, ``.py`` file or directory: every kind declared there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from setpoint.api.errors import SetpointError
from setpoint.crd import render_yaml
from setpoint.migrate.convert import (
    CRDMigration,
    MigrateOptions,
    MigrationInputError,
    migrate_crd,
)
from setpoint.migrate.diff import DiffConfig, DiffConfigError, Finding, diff_crds

if TYPE_CHECKING:
    from setpoint.api.resource import Resource
    from setpoint.migrate.dryrun import Converter

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


# --------------------------------------------------------------------------- diff

_KUBE = "kube://"


class InputError(SetpointError, ValueError):
    """An OLD/NEW argument of ``crd diff`` cannot be read; the message says which and why."""


def _client(args: argparse.Namespace) -> Any:
    from setpoint.client import Client

    return Client.from_kubeconfig(args.kubeconfig, context=args.context)


def _crds_from_documents(documents: Sequence[Any], where: str) -> list[dict[str, Any]]:
    crds: list[dict[str, Any]] = []
    for document in documents:
        if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
            continue
        crd = document
        if document.get("apiVersion") == "apiextensions.k8s.io/v1beta1":
            try:
                crd = migrate_crd(document).crd
            except MigrationInputError as exc:
                raise InputError(f"{where}: {exc}") from None
        crds.append(crd)
    return crds


def _load_input(spec: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    if spec.startswith(_KUBE):
        name = spec[len(_KUBE) :]
        return [asyncio.run(_live_crd(name, args))]
    path = Path(spec)
    if not _is_python(spec):
        files = (
            sorted(path.glob("**/*.y*ml")) + sorted(path.glob("**/*.json"))
            if path.is_dir()
            else [path]
        )
        crds: list[dict[str, Any]] = []
        for file in files:
            try:
                crds += _crds_from_documents(_load_documents(file), str(file))
            except MigrationInputError as exc:
                raise InputError(str(exc)) from None
        if not crds:
            raise InputError(f"{spec}: no CustomResourceDefinition found")
        return crds
    return _python_crds(spec)


async def _live_crd(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from setpoint.api import kinds
    from setpoint.client.errors import NotFound

    async with _client(args) as client:
        try:
            crd: dict[str, Any] = await client.get(kinds.CustomResourceDefinition, name)
        except NotFound:
            raise InputError(f"{_KUBE}{name}: no such CRD in the cluster") from None
    return crd


def _is_python(spec: str) -> bool:
    path = Path(spec)
    return not spec.startswith(_KUBE) and not (
        path.suffix in (".yaml", ".yml", ".json")
        or (path.is_dir() and any(path.glob("*.y*ml")) and not (path / "__init__.py").exists())
    )


def _python_crds(spec: str) -> list[dict[str, Any]]:
    from setpoint.crd import CRDGenerationError, LoadError, generate_crds

    try:
        return [m.documents[0] for m in generate_crds(_python_resources(spec))]
    except (LoadError, CRDGenerationError) as exc:
        raise InputError(f"{spec}: {exc}") from None


def _python_converters(spec: str, crds: list[dict[str, Any]]) -> dict[str, Converter]:
    """Per CRD name, the conversion of its Python version classes (for ``--against-cluster``)."""
    from setpoint.api.conversion import KindConversion
    from setpoint.api.declaration import DeclarationError
    from setpoint.crd import LoadError

    try:
        resources = _python_resources(spec)
    except LoadError as exc:
        raise InputError(f"{spec}: {exc}") from None
    converters: dict[str, Converter] = {}
    for crd in crds:
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        classes = [
            r
            for r in resources
            if (r.declaration().gvk.group, r.declaration().gvk.kind) == (group, kind)
        ]
        try:
            converters[crd["metadata"]["name"]] = KindConversion.of(*classes).convert
        except DeclarationError as exc:
            raise InputError(f"{spec}: {exc}") from None
    return converters


def _python_resources(spec: str) -> list[type[Resource]]:
    """The resource classes ``MODULE[:Class]`` names (with a class: every version of its kind).

    Raises:
        LoadError: the module cannot be imported.
        InputError: no such class, or no resource classes.

    """
    from setpoint.crd import find_resources, import_targets

    target, _, class_name = spec.partition(":")
    resources = find_resources(import_targets([target]))
    if class_name:
        chosen = [r for r in resources if r.__name__ == class_name]
        if not chosen:
            raise InputError(f"{spec}: no resource class {class_name!r} in {target}")
        gvk = chosen[0].declaration().gvk
        resources = [
            r
            for r in resources
            if r.declaration().gvk.group == gvk.group and r.declaration().gvk.kind == gvk.kind
        ]
    if not resources:
        raise InputError(f"{spec}: no @sp.resource classes found")
    return list(resources)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def _render(findings: list[Finding], fmt: str) -> str:
    errors = sum(1 for f in findings if f.level == "error")
    warnings = len(findings) - errors
    if fmt == "json":
        return json.dumps(
            {
                "errors": errors,
                "warnings": warnings,
                "findings": [
                    {
                        "check": f.check,
                        "level": f.level,
                        "crd": f.crd,
                        "version": f.version,
                        "path": f.path,
                        "message": f.message,
                    }
                    for f in findings
                ],
            },
            indent=2,
        )
    if fmt == "markdown":
        lines = [
            f"**{errors} error(s), {warnings} warning(s)**",
            "",
            "| level | check | CRD | version | field | change |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {f.level} | `{f.check}` | {f.crd} | {f.version or ''} | `{f.path}` | "
            f"{_md(f.message)} |"
            for f in findings
        ]
        return "\n".join(lines)
    lines = [str(f) for f in findings]
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)


def _cmd_diff(args: argparse.Namespace) -> int:
    try:
        config = DiffConfig()
        if args.config is not None:
            config = DiffConfig.from_mapping(yaml.safe_load(args.config.read_text()))
        old = _load_input(args.old, args)
        new = _load_input(args.new, args)
    except (InputError, DiffConfigError, yaml.YAMLError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    findings = diff_crds(old, new, config=config)
    print(_render(findings, args.format))
    from setpoint.crd.runtime_fields import runtime_field_warnings

    for runtime in runtime_field_warnings(new, known=old):
        print(f"setpoint: warning: {runtime}", file=sys.stderr)
    failed = any(f.level == "error" for f in findings)
    if args.against_cluster:
        try:
            converters = _python_converters(args.new, new) if _is_python(args.new) else {}
        except InputError as exc:
            print(f"setpoint: error: {exc}", file=sys.stderr)
            return 1
        failed = asyncio.run(_against_cluster(new, args, converters)) or failed
    return 1 if failed else 0


async def _against_cluster(
    new: list[dict[str, Any]], args: argparse.Namespace, converters: dict[str, Converter]
) -> bool:
    from setpoint.migrate.dryrun import DryRunError, objects_rejected_by

    rejected = False
    async with _client(args) as client:
        for crd in new:
            name = crd["metadata"]["name"]
            try:
                report = await objects_rejected_by(client, crd, converter=converters.get(name))
            except DryRunError as exc:
                print(f"{name}: {exc}")
                continue
            notes = []
            if report.converted_versions:
                notes.append(
                    f"new versions {list(report.converted_versions)} checked after converting "
                    f"from {report.converted_from}"
                )
            if report.skipped_versions:
                notes.append(
                    f"new versions {list(report.skipped_versions)} are converted by a webhook: "
                    "not checked; give NEW as Python types to run their converters"
                )
            print(
                f"{name}: {report.checked} live object(s) checked against the new schema, "
                f"{len(report.rejections)} rejected" + (f" ({'; '.join(notes)})" if notes else "")
            )
            for rejection in report.rejections:
                print(f"  REJECTED {rejection}")
            rejected = rejected or bool(report.rejections)
    return rejected


# --------------------------------------------------------------------------- migrate-storage


def _cmd_migrate_storage(args: argparse.Namespace) -> int:
    from setpoint.migrate.storage import (
        MigrationProgress,
        StorageMigrationError,
        StorageMigrationOptions,
        migrate_storage,
    )

    options = StorageMigrationOptions(
        method=args.method, page_size=args.page_size, qps=args.qps, timeout=args.timeout
    )

    def show(progress: MigrationProgress) -> None:
        print(str(progress), file=sys.stderr, flush=True)

    async def run() -> int:
        async with _client(args) as client:
            try:
                result = await migrate_storage(client, args.kind, options=options, progress=show)
            except StorageMigrationError as exc:
                print(f"setpoint: error: {exc}", file=sys.stderr)
                return 1
        for note in result.notes:
            print(f"note: {note}")
        if result.method == "none":
            print(
                f"{result.crd}: storedVersions is already {list(result.stored_versions_after)}; "
                "nothing to migrate"
            )
            return 0
        print(
            f"{result.crd}: {result.objects} object(s) moved to {result.storage_version} "
            f"({result.method}{', resumed' if result.resumed else ''}); storedVersions "
            f"{list(result.stored_versions_before)} -> {list(result.stored_versions_after)}"
        )
        return 0

    return asyncio.run(run())


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``crd`` command group (``migrate``, ``diff``, ``migrate-storage``)."""
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

    diff = sub.add_parser(
        "diff",
        help="list incompatible changes between two versions of CRDs",
        description=(
            "Compare OLD and NEW CRDs (files, kube://NAME, MODULE:Class or a module path); "
            "every finding names its check. Exit 1 when anything is at level error."
        ),
    )
    diff.add_argument("old", metavar="OLD")
    diff.add_argument("new", metavar="NEW")
    diff.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML file setting levels per check: {checks: {enumAddition: error, ...}}",
    )
    diff.add_argument(
        "--format", choices=("text", "markdown", "json"), default="text", help="output format"
    )
    diff.add_argument(
        "--against-cluster",
        action="store_true",
        help="also dry-run every live object of each NEW CRD against its new schema and "
        "list the ones the server would reject; a version NEW adds is checked after "
        "converting (strategy None: relabelled; Webhook: the converters of NEW's Python types)",
    )
    diff.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG)")
    diff.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    diff.set_defaults(func=_cmd_diff)

    storage = sub.add_parser(
        "migrate-storage",
        help="move every stored object to the storage version, then clean storedVersions",
        description=(
            "Rewrite every object of a CRD at its storage version and set "
            "status.storedVersions to it alone (only if the CRD did not change meanwhile), "
            "so old versions can be removed. Resumes where an interrupted run stopped."
        ),
    )
    storage.add_argument("kind", metavar="KIND", help="CRD name, plural or kind")
    storage.add_argument(
        "--method",
        choices=("auto", "in-tree", "writes"),
        default="auto",
        help="auto (default): the in-tree StorageVersionMigration where the cluster serves "
        "it, else no-op writes",
    )
    storage.add_argument("--page-size", type=int, default=500, help="objects per page (writes)")
    storage.add_argument("--qps", type=float, default=100.0, help="writes per second at most")
    storage.add_argument(
        "--timeout", type=float, default=900.0, help="seconds to wait for the in-tree migration"
    )
    storage.add_argument("--kubeconfig", default=None, help="kubeconfig file (default $KUBECONFIG)")
    storage.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    storage.set_defaults(func=_cmd_migrate_storage)
