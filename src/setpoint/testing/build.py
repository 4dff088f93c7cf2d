"""Build the local control plane from Go modules into the cache.

The Go wrapper module in ``controlplane_src/`` (next to this file, shipped in the
wheel as package data) pins the default Kubernetes release (``k8s.io/kubernetes``,
with every staging module replaced by its published ``v0.X.Y``) and the etcd server
that release requires. Any other supported release gets the same module generated
for it (:func:`generate_module`): its ``go.mod`` is written from that release's own
``go.mod`` (Go version, etcd version, the list of staging modules), then
``go mod tidy`` fills ``go.sum``. This module runs ``go build`` for each binary,
stamps the release into it with ``-ldflags`` so ``/version`` and ``kubectl
version`` report it, shows progress, and skips binaries that are already cached.

Each release has its own cache directory, ``<cache>/controlplane/<version>/``:
``bin/`` (the binaries), ``module/`` (the generated Go module, for releases other
than the default) and ``build.json`` (build times and binary sizes).
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
    check_kubernetes_version,
    selected_kubernetes_version,
)

__all__ = [
    "BuildResult",
    "build_controlplane",
    "controlplane_source_dir",
    "generate_module",
    "render_go_mod",
]

# (binary name, Go package, whether to stamp the Kubernetes version)
_TARGETS: tuple[tuple[str, str, bool], ...] = (
    ("etcd", "./cmd/etcd", False),
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", True),
    ("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager", True),
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl", True),
)

# What a node needs besides the plane, built only on request (`build --nodes`, issue 29 and
# decision 0021): the default build, and so CI, builds exactly the plane.
_NODE_TARGETS: tuple[tuple[str, str, bool], ...] = (
    ("kubelet", "k8s.io/kubernetes/cmd/kubelet", True),
    ("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy", True),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", True),
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


_STAGING_RE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", re.MULTILINE)
_GO_DIRECTIVE_RE = re.compile(r"^go\s+(\d+\.\d+(?:\.\d+)?)\s*$", re.MULTILINE)
_ETCD_RE = re.compile(r"^\s*(?:require\s+)?go\.etcd\.io/etcd/server/v3\s+(v\S+)", re.MULTILINE)


def render_go_mod(version: str, upstream_go_mod: str) -> str:
    """The wrapper module's ``go.mod`` for one Kubernetes release, before ``go mod tidy``.

    ``upstream_go_mod`` is ``k8s.io/kubernetes``'s own ``go.mod`` at ``version``. From it
    come the Go version the release needs, the etcd server it is tested with, and its
    staging modules (``k8s.io/api => ./staging/src/k8s.io/api``): a module that requires
    ``k8s.io/kubernetes`` must replace each of them with its published ``v0.<minor>.<patch>``,
    because the release's own ``go.mod`` requires them at ``v0.0.0``.

    Raises:
        ControlPlaneError: ``version`` is not ``vX.Y.Z``, or the upstream ``go.mod``
            lacks a ``go`` directive, the etcd server or the staging replacements.

    """
    match = re.fullmatch(r"v1\.(\d+)\.(\d+)", version)
    if not match:
        raise ControlPlaneError(f"Kubernetes version {version!r} is not of the form v1.Y.Z")
    staging_version = f"v0.{match.group(1)}.{match.group(2)}"
    go_directive = _GO_DIRECTIVE_RE.search(upstream_go_mod)
    etcd = _ETCD_RE.search(upstream_go_mod)
    staging = sorted(set(_STAGING_RE.findall(upstream_go_mod)))
    missing = [
        what
        for what, found in (
            ("a `go` directive", go_directive),
            ("go.etcd.io/etcd/server/v3", etcd),
            ("staging replacements (=> ./staging/...)", staging),
        )
        if not found
    ]
    if missing or go_directive is None or etcd is None:
        raise ControlPlaneError(
            f"k8s.io/kubernetes {version}'s go.mod has no {', '.join(missing)}; this release's "
            "layout is not one setpoint knows how to build"
        )
    replaces = "\n".join(f"\t{name} => {name} {staging_version}" for name in staging)
    return (
        "// Wrapper module that pins one Kubernetes release and builds the local\n"
        "// control plane from it. Generated by setpoint for this release; build only.\n"
        "module setpoint.dev/controlplane\n\n"
        f"go {go_directive.group(1)}\n\n"
        "require (\n"
        f"\tgo.etcd.io/etcd/server/v3 {etcd.group(1)}\n"
        f"\tk8s.io/kubernetes {version}\n"
        ")\n\n"
        f"replace (\n{replaces}\n)\n"
    )


def _run_go(go: str, args: list[str], cwd: Path, env: dict[str, str], what: str) -> str:
    result = subprocess.run(
        [go, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(
            f"`go {' '.join(args)}` failed ({what}) in {cwd}:\n{result.stderr.strip()[-2000:]}"
        )
    return result.stdout


def generate_module(version: str, *, out: TextIO | None = None, force: bool = False) -> Path:
    """The Go wrapper module for ``version``, generated into the cache when not there yet.

    Expected flow:
        1. ``go mod download -json k8s.io/kubernetes@<version>`` fetches the release's
           ``go.mod`` through the Go module proxy.
        2. :func:`render_go_mod` writes the wrapper's ``go.mod``; ``tools.go`` and the
           ``cmd/etcd`` stub are copied from the packaged module.
        3. ``go mod tidy`` resolves every dependency and writes ``go.sum``.
        4. The finished directory is renamed into ``<cache>/controlplane/<version>/module``.

    Guarantees:
        - A module directory exists only once complete (steps 1-3 run in a temporary
          sibling directory); an interrupted generation leaves nothing that looks valid.
        - The default release always builds from the packaged module, never a generated
          one, so its pins are the reviewed ones in ``controlplane_src/go.mod``.

    Caveats:
        - Steps 1 and 3 need the Go module proxy (or a warm module cache).

    Errors:
        ControlPlaneError: the version is not supported, Go is missing, or a ``go``
            command failed (with its output).

    """
    check_kubernetes_version(version, where="--version")
    if version == DEFAULT_KUBERNETES_VERSION:
        return controlplane_source_dir()
    stream = out or sys.stderr
    target = cache_dir() / "controlplane" / version / "module"
    if (target / "go.sum").is_file() and not force:
        return target
    go = _go()
    env = _go_env()
    packaged = controlplane_source_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name("module.partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "cmd" / "etcd").mkdir(parents=True)
    print(f"Generating the Go wrapper module for Kubernetes {version} in {target}", file=stream)
    info = json.loads(
        _run_go(
            go,
            ["mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
            staging,
            env,
            f"fetching k8s.io/kubernetes {version}; is the Go module proxy reachable?",
        )
    )
    upstream = Path(info["GoMod"]).read_text()
    (staging / "go.mod").write_text(render_go_mod(version, upstream))
    shutil.copy2(packaged / "tools.go", staging / "tools.go")
    shutil.copy2(packaged / "cmd" / "etcd" / "main.go", staging / "cmd" / "etcd" / "main.go")
    _run_go(go, ["mod", "tidy"], staging, env, "resolving the module's dependencies")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def _names_node_commands(source: Path) -> bool:
    """Whether the module's ``tools.go`` imports every node command (so go.sum covers them)."""
    try:
        tools = (source / "tools.go").read_text()
    except OSError:
        return False
    return all(f'"{package}"' in tools for _, package, _ in _NODE_TARGETS)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")  # static binaries, no C toolchain needed
    return env


def build_controlplane(
    *,
    version: str | None = None,
    force: bool = False,
    nodes: bool = False,
    out: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BuildResult:
    """Build etcd, kube-apiserver, kube-controller-manager and kubectl into the cache.

    ``nodes=True`` (``setpoint controlplane build --nodes``) also builds what a node runs
    beside them, kubelet, kube-proxy and kube-scheduler, from the same module: opt-in,
    since only planes with nodes need them (decision 0021).

    ``version=None`` builds :func:`~setpoint.testing.controlplane.selected_kubernetes_version`
    (``$SETPOINT_CONTROLPLANE_VERSION``, else the default release) from the packaged Go
    module; another supported release builds from a module generated for it
    (:func:`generate_module`). Each release is cached apart, in
    ``<cache>/controlplane/<version>/bin``. Binaries already present are kept
    (``force=True`` rebuilds). Progress goes to ``out`` (default stderr): for each
    binary, the share of its Go packages compiled so far, then its time and size.

    Raises:
        ControlPlaneError: the version is not supported, Go is missing, the module
            cannot be found or generated, or a build failed (with the compiler's last
            output lines).

    """
    stream = out or sys.stderr
    version = check_kubernetes_version(version, where="--version") if version else None
    version = version or selected_kubernetes_version()
    bin_dir = cache_dir() / "controlplane" / version / "bin"
    results: dict[str, tuple[int, float]] = {}
    targets = _TARGETS + _NODE_TARGETS if nodes else _TARGETS
    todo = [t for t in targets if force or not (bin_dir / t[0]).is_file()]
    if not todo:  # all cached: no Go toolchain needed
        for name, _, _ in targets:
            results[name] = ((bin_dir / name).stat().st_size, 0.0)
        return BuildResult(version, bin_dir, results)
    source = generate_module(version, out=stream)
    if nodes and not _names_node_commands(source):
        # A module generated before the node commands were in tools.go has no go.sum
        # entries for their dependencies: generate it again.
        source = generate_module(version, out=stream, force=True)
        if not _names_node_commands(source):
            raise ControlPlaneError(
                f"{source / 'tools.go'} does not import kubelet, kube-proxy and "
                "kube-scheduler, so its go.sum cannot build them; add them as the packaged "
                "module does, or unset SETPOINT_CONTROLPLANE_SRC"
            )
    pinned = _pinned_version(source)
    if pinned != version:
        raise ControlPlaneError(
            f"{source / 'go.mod'} pins {pinned}, but the build asked for {version}; "
            f"update DEFAULT_KUBERNETES_VERSION with the pin, or unset SETPOINT_CONTROLPLANE_SRC"
        )
    bin_dir.mkdir(parents=True, exist_ok=True)
    go = _go()
    env = _go_env()
    print(
        f"Building the local control plane {version} from Go modules into {bin_dir} "
        f"({len(todo)} of {len(targets)} binaries; the first build takes a while)",
        file=stream,
        flush=True,
    )
    for index, (name, package, stamp) in enumerate(targets, 1):
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
                    f"  [{index}/{len(targets)}] {name}: ~{pct}% of {total} packages, "
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
            f"  [{index}/{len(targets)}] {name}: built in {seconds:.0f}s, {size / 2**20:.0f} MiB",
            file=stream,
            flush=True,
        )
    record_path = bin_dir.parent / "build.json"
    binaries = {n: {"bytes": s, "build_seconds": round(t, 1)} for n, (s, t) in results.items()}
    # A binary that was cached keeps the build time an earlier run recorded for it (building
    # the node binaries later must not erase the plane's).
    try:
        earlier = json.loads(record_path.read_text()).get("binaries", {})
    except (OSError, ValueError, AttributeError):
        earlier = {}
    for name, (size, seconds) in results.items():
        previous = earlier.get(name) if isinstance(earlier, dict) else None
        if seconds == 0.0 and isinstance(previous, dict) and previous.get("bytes") == size:
            binaries[name] = previous
    record = {
        "version": version,
        "go": subprocess.run(
            [go, "version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "built_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "binaries": binaries,
    }
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return BuildResult(version, bin_dir, results)
