"""Build OLM's olm-operator into ``~/.cache/setpoint/olm/<version>`` with OLM's CRDs beside it.

Issue 33's third install path is the tenants bundle installed by OLM itself, not only
validated and dry-run: ``olm`` (the ``cmd/olm`` command of
``github.com/operator-framework/operator-lifecycle-manager`` at :data:`OLM_VERSION`) is the
controller that turns a ClusterServiceVersion into the operator's Deployment, RBAC, webhook
Service, serving certificate and webhook configurations. It needs only a kubeconfig, so the
cluster test runs it as a host process against the plane.

Built like scripts/build_helm.py's tools: from the Go module proxy, never committed, cached
outside the repository, pinned by scripts/olm/go.mod and go.sum (a module whose only content
is a ``tool`` directive naming ``cmd/olm``: ``go install ...@version`` is refused here because
the proxy serves OLM's versions but not their list). OLM's CRDs (``deploy/chart/crds`` of the
same module version) are copied to ``crds/`` beside the binary.

Usage::

    .venv/bin/python scripts/build_olm.py [--force]

Prints the path of ``olm``, then the path of the CRD directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

OLM_MODULE = "github.com/operator-framework/operator-lifecycle-manager"
"""The Go module olm-operator is built from."""

OLM_VERSION = "v0.46.0"
"""The OLM version built (the newest released; scripts/olm/go.mod requires it)."""

SOURCE = Path(__file__).resolve().parent / "olm"
"""The pinning module's directory (go.mod, go.sum)."""


def cache_dir() -> Path:
    """``~/.cache/setpoint/olm/<OLM version>`` (``$XDG_CACHE_HOME`` respected)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "setpoint" / "olm" / OLM_VERSION


def olm_path() -> Path:
    """Where :func:`build_olm` puts ``olm`` (it may not be built yet)."""
    return cache_dir() / "bin" / "olm"


def crds_path() -> Path:
    """Where :func:`build_olm` copies OLM's CRDs (it may not be built yet)."""
    return cache_dir() / "crds"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise SystemExit("go is not on PATH: install Go 1.26 or newer to build olm")
    return go


def build_olm(*, force: bool = False) -> tuple[Path, Path]:
    """Build (or find cached) ``olm`` and its CRDs; return both paths."""
    target, crds = olm_path(), crds_path()
    if target.exists() and crds.is_dir() and not force:
        return target, crds
    target.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOFLAGS="-buildvcs=false -mod=readonly")
    command = [
        _go(),
        *("build", "-trimpath", "-ldflags", "-s -w", "-o", str(target)),
        f"{OLM_MODULE}/cmd/olm",
    ]
    print("building:", " ".join(command), file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, env=env, check=True, cwd=SOURCE)
    seconds = time.monotonic() - started
    module_dir = subprocess.run(
        [_go(), "list", "-m", "-f", "{{.Dir}}", OLM_MODULE],
        env=env,
        check=True,
        cwd=SOURCE,
        capture_output=True,
        text=True,
    ).stdout.strip()
    shutil.rmtree(crds, ignore_errors=True)
    crds.mkdir()
    for path in sorted((Path(module_dir) / "deploy" / "chart" / "crds").glob("*.yaml")):
        (crds / path.name).write_bytes(path.read_bytes())
    record = {"seconds": round(seconds, 1), "bytes": target.stat().st_size}
    (cache_dir() / "build.json").write_text(json.dumps({"olm": record}, indent=2) + "\n")
    print(f"built olm in {seconds:.0f}s", file=sys.stderr)
    return target, crds


def main() -> None:
    """Parse the command line, build, print the binary's and the CRDs' paths."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args()
    for path in build_olm(force=args.force):
        print(path)


if __name__ == "__main__":
    main()
