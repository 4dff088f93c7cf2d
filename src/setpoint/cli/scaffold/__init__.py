"""Project scaffolding: ``setpoint init``, ``setpoint create api``, ``setpoint create webhook``.

A newcomer goes from an empty directory to a running, tested operator with three
commands::

    setpoint init --domain example.com --name memcached-operator
    setpoint create api --group cache --version v1 --kind Memcached
    make test && make run

The layout follows kubebuilder's (``config/`` kustomize overlays, a ``PROJECT`` file);
the templates are package data (``templates/``), shipped in the wheel. Modules:
:mod:`~setpoint.cli.scaffold.names` (checks), :mod:`~setpoint.cli.scaffold.project`
(``PROJECT``), :mod:`~setpoint.cli.scaffold.files` (templates and safe writes),
:mod:`~setpoint.cli.scaffold.layout` (which files) and
:mod:`~setpoint.cli.scaffold.commands` (the commands).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from setpoint.cli.scaffold.commands import (
    DEFAULT_DOMAIN,
    ScaffoldResult,
    create_api,
    create_webhook,
    init,
)

__all__ = ["register"]


def _report(result: ScaffoldResult) -> int:
    for item in result.files:
        print(f"{item.status:<10} {item.path}")
    if result.next_steps:
        print("\nnext:")
        for step in result.next_steps:
            print(f"  {step}")
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    return _report(
        init(
            args.dir,
            domain=args.domain,
            name=args.name,
            setpoint_from=args.setpoint_from,
            force=args.force,
        )
    )


def _cmd_api(args: argparse.Namespace) -> int:
    return _report(
        create_api(
            args.dir,
            group=args.group,
            version=args.version,
            kind=args.kind,
            namespaced=args.namespaced,
            hub=args.hub,
            force=args.force,
        )
    )


def _cmd_webhook(args: argparse.Namespace) -> int:
    return _report(
        create_webhook(
            args.dir,
            kind=args.kind,
            conversion=args.conversion,
            defaulting=args.defaulting,
            validation=args.validation,
            force=args.force,
        )
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir", type=Path, default=Path("."), help="the project's root (default: .)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="overwrite files changed since setpoint wrote them (default: refuse, show the diff)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``init`` and ``create`` commands."""
    init_parser = subparsers.add_parser(
        "init",
        help="scaffold a new operator project in the current directory",
        description="Write a new operator project: pyproject.toml, Makefile, Dockerfile, the "
        "operator package, tests and config/ (kustomize), and the PROJECT file.",
    )
    init_parser.add_argument(
        "--domain",
        default=None,
        help=f"domain of the project's API groups (default: {DEFAULT_DOMAIN})",
    )
    init_parser.add_argument(
        "--name", default=None, help="project name, a DNS label (default: the directory's name)"
    )
    init_parser.add_argument(
        "--setpoint-from",
        type=Path,
        default=None,
        metavar="PATH",
        help="a setpoint wheel or checkout the project installs setpoint from (default: "
        "where this setpoint was installed from, else the package index)",
    )
    _common(init_parser)
    init_parser.set_defaults(func=_cmd_init)

    create = subparsers.add_parser(
        "create", help="add a kind (api) or webhooks to the project", description=None
    )
    sub = create.add_subparsers(dest="what", required=True, metavar="WHAT")
    api = sub.add_parser(
        "api",
        help="add a kind, or another version of one (hub and spokes, with converter stubs)",
        description="Add a typed resource, its controller wired into the manager, a sample, a "
        "unit test and an integration test. Another version of an existing kind: by default "
        "the newer of it and the current hub becomes the hub (--hub chooses), the other a "
        "spoke with converter stubs that fail until written.",
    )
    api.add_argument("--group", required=True, help="API group, without the domain (e.g. cache)")
    api.add_argument("--version", required=True, help="API version (e.g. v1, v1alpha1)")
    api.add_argument("--kind", required=True, help="kind, UpperCamelCase (e.g. Memcached)")
    scope = api.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespaced",
        dest="namespaced",
        action="store_const",
        const=True,
        default=None,
        help="the kind lives in namespaces (the default)",
    )
    scope.add_argument(
        "--cluster",
        dest="namespaced",
        action="store_const",
        const=False,
        help="the kind is cluster-scoped",
    )
    api.add_argument(
        "--hub",
        default=None,
        metavar="VERSION",
        help="for another version of a kind: the version the others convert through, and "
        "the storage version: the new --version (its controller moves there, the old hub "
        "becomes a spoke) or the current hub (the new version is a spoke); default: the "
        "newer of the two (v2 > v1 > v1beta1 > v1alpha1)",
    )
    _common(api)
    api.set_defaults(func=_cmd_api)

    webhook = sub.add_parser(
        "webhook",
        help="add conversion, defaulting or validation webhooks for a kind",
        description="Add webhook code, its tests and the kustomize overlays (config/webhook, "
        "config/certmanager, patches in config/default and config/crd).",
    )
    webhook.add_argument("--kind", required=True, help="the kind (scaffolded already)")
    webhook.add_argument(
        "--conversion", action="store_true", help="convert between the kind's versions"
    )
    webhook.add_argument("--defaulting", action="store_true", help="a defaulting webhook")
    webhook.add_argument("--validation", action="store_true", help="a validating webhook")
    _common(webhook)
    webhook.set_defaults(func=_cmd_webhook)
