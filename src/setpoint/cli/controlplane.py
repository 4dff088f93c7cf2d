"""``setpoint controlplane build|up|down|env``: the local control plane from the shell."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from setpoint.testing.build import build_controlplane
from setpoint.testing.controlplane import (
    DEFAULT_KUBERNETES_VERSION,
    SUPPORTED_KUBERNETES_VERSIONS,
    VERSION_ENV,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
)
from setpoint.testing.supervisor import plane_dir, read_state

__all__ = ["register"]


def _export_line(kubeconfig: str) -> str:
    return f"export KUBECONFIG={kubeconfig}"


def _kubectl_hint() -> str:
    try:
        kubectl = find_binaries().kubectl
    except ControlPlaneError:
        kubectl = None
    return str(kubectl) if kubectl else "kubectl"


def _cmd_build(args: argparse.Namespace) -> int:
    result = build_controlplane(version=args.version, force=args.force, nodes=args.nodes)
    for name, (size, seconds) in result.binaries.items():
        how = f"built in {seconds:.0f}s" if seconds else "cached"
        print(f"{name:<25} {size / 2**20:6.1f} MiB  {how}")
    print(f"binaries: {result.bin_dir}")
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    if args.foreground:
        return _run_foreground()
    state = read_state(args.name)
    if state is not None:
        print(
            f"# control plane {args.name!r} is already running at {state.server}", file=sys.stderr
        )
        print(_export_line(state.kubeconfig))
        return 0
    find_binaries()  # fail now, with the build hint, rather than in the background
    directory = plane_dir(args.name)
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "supervisor.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "setpoint.testing.supervisor", "--name", args.name],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives this shell command, and Ctrl-C in it
        )
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        state = read_state(args.name)
        if state is not None:
            print(f"# control plane {args.name!r} is up at {state.server}", file=sys.stderr)
            print(f"# stop it with: setpoint controlplane down --name {args.name}", file=sys.stderr)
            print(f"# try: {_kubectl_hint()} get ns", file=sys.stderr)
            print(_export_line(state.kubeconfig))
            return 0
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    if proc.poll() is None:
        proc.terminate()
    tail = log_path.read_text(errors="replace").splitlines()[-30:]
    print(
        f"setpoint: control plane {args.name!r} did not start; its log ({log_path}):",
        file=sys.stderr,
    )
    print("\n".join(tail), file=sys.stderr)
    return 1


def _run_foreground() -> int:
    with ControlPlane() as plane:
        print(f"control plane up at {plane.server}")
        print(_export_line(str(plane.kubeconfig_path)))
        print(f"try: {_kubectl_hint()} get ns        (Ctrl-C stops the plane)")
        _wait_for_stop_signal()
    print("control plane stopped")
    return 0


def _wait_for_stop_signal() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass


def _cmd_down(args: argparse.Namespace) -> int:
    state = read_state(args.name)
    if state is None:
        print(f"setpoint: control plane {args.name!r} is not running", file=sys.stderr)
        return 0
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not state.alive:
            print(f"control plane {args.name!r} stopped")
            return 0
        time.sleep(0.2)
    os.kill(state.pid, signal.SIGKILL)
    print(
        f"control plane {args.name!r} did not stop in {args.timeout:.0f}s; killed it",
        file=sys.stderr,
    )
    return 1


def _cmd_env(args: argparse.Namespace) -> int:
    state = read_state(args.name)
    if state is None:
        print(
            f"setpoint: control plane {args.name!r} is not running; start it with "
            f"`setpoint controlplane up --name {args.name}`",
            file=sys.stderr,
        )
        return 1
    print(_export_line(state.kubeconfig))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``controlplane`` command and its subcommands."""
    parser = subparsers.add_parser(
        "controlplane",
        help="build, start and stop the local Kubernetes control plane",
        description="The local control plane: etcd, kube-apiserver, kube-controller-manager.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="build the binaries from Go modules into the cache")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.add_argument(
        "--nodes",
        action="store_true",
        help="also build kubelet, kube-proxy and kube-scheduler, which nodes need",
    )
    build.add_argument(
        "--version",
        default=None,
        metavar="vX.Y.Z",
        help=(
            "Kubernetes release to build, one of "
            f"{', '.join(SUPPORTED_KUBERNETES_VERSIONS)} (default: "
            f"${VERSION_ENV}, else {DEFAULT_KUBERNETES_VERSION}); each is cached apart"
        ),
    )
    build.set_defaults(func=_cmd_build)
    for action, func, text in (
        ("up", _cmd_up, "start a named plane in the background and print its KUBECONFIG"),
        ("down", _cmd_down, "stop a named plane"),
        ("env", _cmd_env, "print the KUBECONFIG export line of a running plane"),
    ):
        p = sub.add_parser(action, help=text, description=text)
        p.add_argument("--name", default="default", help="plane name (default: %(default)s)")
        p.add_argument("--timeout", type=float, default=120.0, help=argparse.SUPPRESS)
        p.set_defaults(func=func)
        if action == "up":
            p.add_argument(
                "--foreground", action="store_true", help="run in the foreground until Ctrl-C"
            )
