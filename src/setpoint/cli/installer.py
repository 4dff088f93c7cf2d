"""``setpoint generate installer``: one install manifest, ``dist/install.yaml``.

kubebuilder's ``make build-installer`` in setpoint's terms: ``config/default`` built with
kustomize (``kubectl kustomize``, the kustomize ``kubectl apply -k`` runs), the manager's
image set, written as one file that ``kubectl apply -f dist/install.yaml`` installs: the
namespace, CRDs, RBAC, Deployment, Services and webhook configurations. The same documents
feed ``setpoint generate bundle`` (:mod:`setpoint.cli.bundle`), so the three shipping paths
start from one ``config/``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["kubectl_binary", "kustomize_documents", "register", "render_documents", "set_image"]

_KINDS_REQUIRED = ("CustomResourceDefinition", "Deployment", "ServiceAccount")
"""What an installer without which would not install an operator."""


def kubectl_binary() -> str:
    """``kubectl``: the local control plane's (``setpoint controlplane build``), else PATH's.

    Raises:
        FileNotFoundError: neither is there.

    """
    from setpoint.testing.controlplane import ControlPlaneError, find_binaries

    try:
        return str(find_binaries().kubectl)
    except ControlPlaneError:
        found = shutil.which("kubectl")
        if found is None:
            raise FileNotFoundError(
                "kubectl not found: run `setpoint controlplane build` (it builds one into "
                "~/.cache/setpoint) or put kubectl on PATH"
            ) from None
        return found


def kustomize_documents(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize DIRECTORY`` renders, in its order.

    Raises:
        FileNotFoundError: no kubectl, or no kustomization in ``directory``.
        ValueError: kustomize failed (its message is included).

    """
    if not (directory / "kustomization.yaml").exists():
        raise FileNotFoundError(f"{directory}/kustomization.yaml does not exist")
    done = subprocess.run(
        [kubectl_binary(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(f"kubectl kustomize {directory} failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def set_image(documents: Sequence[dict[str, Any]], image: str, container: str = "manager") -> int:
    """Set the image of the ``container`` of every Deployment; return how many were set."""
    changed = 0
    for document in documents:
        if document.get("kind") != "Deployment":
            continue
        for spec in document["spec"]["template"]["spec"].get("containers", ()):
            if spec.get("name") == container:
                spec["image"] = image
                changed += 1
    return changed


def render_documents(documents: Sequence[dict[str, Any]]) -> str:
    """A multi-document YAML stream, keys in the order kustomize wrote them."""
    return "".join(
        "---\n" + yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in documents
    )


def _cmd_installer(args: argparse.Namespace) -> int:
    try:
        documents = kustomize_documents(args.kustomize)
        if args.image and not set_image(documents, args.image):
            raise ValueError(f"no Deployment with a container 'manager' in {args.kustomize}")
    except (FileNotFoundError, ValueError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    kinds = Counter(d.get("kind", "?") for d in documents)
    missing = [kind for kind in _KINDS_REQUIRED if kind not in kinds]
    if missing:
        print(
            f"setpoint: error: {args.kustomize} renders no {', '.join(missing)}; point "
            "--kustomize at the overlay that installs the operator (config/default)",
            file=sys.stderr,
        )
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render_documents(documents), encoding="utf-8")
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    print(f"wrote {args.output}: {summary}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``generate installer`` to the ``generate`` subcommands."""
    installer = sub.add_parser(
        "installer",
        help="write dist/install.yaml: config/default built by kustomize, as one manifest",
        description="Build config/default with kustomize (kubectl kustomize) into one file "
        "that `kubectl apply -f` installs: CRDs, RBAC, Deployment, Services, webhooks.",
    )
    installer.add_argument(
        "--kustomize",
        type=Path,
        default=Path("config/default"),
        metavar="DIR",
        help="the kustomization to build (default: config/default)",
    )
    installer.add_argument(
        "--image",
        default=None,
        help="the manager's image (default: the one the kustomization names)",
    )
    installer.add_argument(
        "--output",
        type=Path,
        default=Path("dist/install.yaml"),
        help="the file written (default: dist/install.yaml)",
    )
    installer.set_defaults(func=_cmd_installer)
