"""Build the local control plane from Go modules into the cache.

The Go wrapper module in ``controlplane_src/`` (next to this file, shipped in the
wheel as package data) pins one Kubernetes release (``k8s.io/kubernetes``, with
every staging module replaced by its published ``v0.X.Y``) and the etcd server
that release requires. This module runs ``go build`` for each binary, stamps the
release into it with ``-ldflags`` so ``/version`` and ``kubectl version`` report
it, shows progress, and skips binaries that are already cached.

The result, with build times and binary sizes, is recorded in
``<cache>/controlplane/<version>/build.json``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from setpoint.testing.controlplane import (
    DEFAULT_KUBERNETES_VERSION,
    ControlPlaneError,
    cache_dir,
)

__all__ = ["BuildResult", "build_controlplane", "controlplane_source_dir"]

# (binary name, Go package, whether to stamp the Kubernetes version)
_TARGETS: tuple[tuple[str, str, bool], ...] = (
    ("etcd", "./cmd/etcd", False),
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", True),
    ("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager", True),
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl", True),
)


@dataclass(frozen=True, slots=True)
class BuildResult:
    """What a build produced: each binary's path, size and build time (0 when cached)."""

    version: str
    bin_dir: Path
    binaries: dict[str, tuple[int, float]]
    """name -> (size in bytes, seconds spent building it; 0.0 when it was cached)."""


# Names another Go wrapper module to build from (a directory with go.mod).
_SOURCE_ENV = "SETPOINT_CONTROLPLANE_SRC"
# The Go wrapper module shipped inside setpoint: in a checkout and in an installed wheel alike.
_PACKAGED_SOURCE = Path(__file__).resolve().parent / "controlplane_src"


def controlplane_source_dir() -> Path:
    """The Go wrapper module to build: ``$SETPOINT_CONTROLPLANE_SRC``, else the packaged one.

    The module (``go.mod``, ``go.sum``, ``tools.go`` and the ``cmd/etcd`` stub) is
    package data of ``setpoint.testing``, so ``setpoint controlplane build`` works the
    same from a checkout and from an installed wheel.

    Raises:
        ControlPlaneError: when the chosen directory has no ``go.mod`` (a variable
            pointing at the wrong place, or an installation missing its package data).

    """
    explicit = os.environ.get(_SOURCE_ENV)
    candidate = Path(explicit) if explicit else _PACKAGED_SOURCE
    if (candidate / "go.mod").is_file():
        return candidate
    if explicit:
        raise ControlPlaneError(
            f"${_SOURCE_ENV} is set to {explicit!r}, but that directory has no go.mod; point it "
            "at a Go wrapper module like setpoint's controlplane_src/, or unset it to build "
            "from the module shipped with setpoint"
        )
    raise ControlPlaneError(
        f"setpoint's Go wrapper module is missing ({candidate / 'go.mod'} does not exist): "
        "this installation of setpoint is incomplete; reinstall it, or set KUBEBUILDER_ASSETS "
        "to existing envtest binaries instead of building"
    )


def _ldflags(version: str, stamp: bool) -> str:
    flags = ["-s", "-w"]  # no symbol tables: smaller binaries, same behaviour
    if stamp:
        match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", version)
        if not match:
            raise ControlPlaneError(f"Kubernetes version {version!r} is not of the form vX.Y.Z")
        major, minor = match.group(1), match.group(2)
        build_date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={version}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
                f"-X {pkg}.buildDate={build_date}",
            ]
    return " ".join(flags)


def _pinned_version(source: Path) -> str:
    text = (source / "go.mod").read_text()
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    if not match:
        raise ControlPlaneError(f"{source / 'go.mod'} does not require k8s.io/kubernetes")
    return match.group(1)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ControlPlaneError(
            "the `go` command is not on PATH; install Go (see README), or set "
            "KUBEBUILDER_ASSETS to existing envtest binaries instead of building"
        )
    return go


def _count_deps(go: str, source: Path, package: str, env: dict[str, str]) -> int:
    result = subprocess.run(
        [go, "list", "-deps", package],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ControlPlaneError(
            f"`go list -deps {package}` failed in {source}:\n{result.stderr.strip()[-2000:]}"
        )
    return len(result.stdout.split())


def build_controlplane(
    *,
    force: bool = False,
    out: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BuildResult:
    """Build etcd, kube-apiserver, kube-controller-manager and kubectl into the cache.

    Binaries already present are kept (``force=True`` rebuilds). Progress goes to
    ``out`` (default stderr): for each binary, the share of its Go packages
    compiled so far, then its time and size.

    Raises:
        ControlPlaneError: Go is missing, the module cannot be found, or a build
            failed (with the compiler's last output lines).

    """
    stream = out or sys.stderr
    source = controlplane_source_dir()
    version = _pinned_version(source)
    if version != DEFAULT_KUBERNETES_VERSION:
        raise ControlPlaneError(
            f"{source / 'go.mod'} pins {version}, but setpoint expects "
            f"{DEFAULT_KUBERNETES_VERSION}; update DEFAULT_KUBERNETES_VERSION with the pin"
        )
    bin_dir = cache_dir() / "controlplane" / version / "bin"
    results: dict[str, tuple[int, float]] = {}
    todo = [t for t in _TARGETS if force or not (bin_dir / t[0]).is_file()]
    if not todo:  # all cached: no Go toolchain needed
        for name, _, _ in _TARGETS:
            results[name] = ((bin_dir / name).stat().st_size, 0.0)
        return BuildResult(version, bin_dir, results)
    bin_dir.mkdir(parents=True, exist_ok=True)
    go = _go()
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")  # static binaries, no C toolchain needed
    print(
        f"Building the local control plane {version} from Go modules into {bin_dir} "
        f"({len(todo)} of {len(_TARGETS)} binaries; the first build takes a while)",
        file=stream,
        flush=True,
    )
    for index, (name, package, stamp) in enumerate(_TARGETS, 1):
        target = bin_dir / name
        if (name, package, stamp) not in todo:
            results[name] = (target.stat().st_size, 0.0)
            continue
        total = max(_count_deps(go, source, package, env), 1)
        started = clock()
        tmp = target.with_suffix(".partial")
        proc = subprocess.Popen(
            [
                go,
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                _ldflags(version, stamp),
                "-o",
                str(tmp),
                package,
            ],
            cwd=source,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        tail: list[str] = []
        last_report = 0.0
        for compiled, line in enumerate(proc.stdout, 1):
            tail = [*tail[-40:], line.rstrip()]
            now = clock()
            if now - last_report >= 5:
                last_report = now
                pct = min(99, 100 * compiled // total)
                print(
                    f"  [{index}/{len(_TARGETS)}] {name}: ~{pct}% of {total} packages, "
                    f"{now - started:.0f}s",
                    file=stream,
                    flush=True,
                )
        code = proc.wait()
        if code != 0:
            tmp.unlink(missing_ok=True)
            raise ControlPlaneError(
                f"`go build {package}` failed (exit {code}) in {source}; last output:\n"
                + "\n".join(tail[-25:])
            )
        tmp.replace(target)
        seconds = clock() - started
        size = target.stat().st_size
        results[name] = (size, seconds)
        print(
            f"  [{index}/{len(_TARGETS)}] {name}: built in {seconds:.0f}s, {size / 2**20:.0f} MiB",
            file=stream,
            flush=True,
        )
    record = {
        "version": version,
        "go": subprocess.run(
            [go, "version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "built_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "binaries": {
            n: {"bytes": s, "build_seconds": round(t, 1)} for n, (s, t) in results.items()
        },
    }
    (bin_dir.parent / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    return BuildResult(version, bin_dir, results)
