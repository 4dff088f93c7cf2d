"""``setpoint image build``: the operator's OCI image, built here without a registry."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register"]


def _cmd_build(args: argparse.Namespace) -> int:
    from setpoint.testing.controlplane import ControlPlaneError
    from setpoint.testing.image import build_image

    try:
        result = build_image(
            Path(args.output),
            project=Path(args.project),
            module=args.module,
            ref=args.tag,
            requirements=args.requirement or None,
        )
    except ControlPlaneError as exc:
        print(f"setpoint: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {result.archive} ({result.ref}); load it with `setpoint controlplane load-image`")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``image`` command and its ``build`` subcommand."""
    parser = subparsers.add_parser(
        "image",
        help="build the operator's OCI image without Docker or a registry",
        description=(
            "The operator's image: a Debian base built with debootstrap (once, as root; "
            "cached), a virtualenv with setpoint and the operator, `setpoint run MODULE` as "
            "entrypoint, uid 65532. See docs/controlplane.md, 'Build an image'."
        ),
    )
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser(
        "build",
        help="write the image as an OCI archive",
        description=(
            "Write the image as an OCI archive; `setpoint controlplane load-image ARCHIVE` "
            "loads it into the local nodes, `skopeo copy oci-archive:ARCHIVE docker://...` "
            "pushes it."
        ),
    )
    build.add_argument(
        "--project", default=".", help="the operator's project directory (default: .)"
    )
    build.add_argument(
        "--module", default=None, help="what `setpoint run` runs (default: the only package)"
    )
    build.add_argument("--output", required=True, metavar="ARCHIVE", help="the OCI archive")
    build.add_argument("--tag", default=None, help="image name (default: MODULE-operator:latest)")
    build.add_argument(
        "--requirement",
        action="append",
        metavar="SPEC",
        help=(
            "what pip installs besides the project, repeatable (default: the setpoint "
            "checkout this runs from, else setpoint==VERSION)"
        ),
    )
    build.set_defaults(func=_cmd_build)
