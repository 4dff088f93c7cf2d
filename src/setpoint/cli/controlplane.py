"""``setpoint controlplane build|up|down|env|load-image``: the local plane from the shell."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from setpoint.testing.build import build_controlplane
from setpoint.testing.controlplane import (
    DEFAULT_KUBERNETES_VERSION,
    SUPPORTED_KUBERNETES_VERSIONS,
    VERSION_ENV,
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    cache_dir,
    find_binaries,
    selected_kubernetes_version,
)
from setpoint.testing.supervisor import PlaneState, plane_dir, read_state

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
    if args.nodes:  # the nodes' cluster DNS and CNI plugins, from their own Go modules
        from setpoint.testing.nodes import build_cni_plugins, build_coredns, cni_bin_dir

        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        coredns = build_coredns(log=progress)
        print(f"{'coredns':<25} {coredns.stat().st_size / 2**20:6.1f} MiB  ({coredns})")
        for plugin, seconds in build_cni_plugins(log=progress).items():
            size = (cni_bin_dir() / plugin).stat().st_size
            how = f"built in {seconds:.0f}s" if seconds else "cached"
            print(f"{'cni/' + plugin:<25} {size / 2**20:6.1f} MiB  {how}")
        print(f"CNI plugins: {cni_bin_dir()}")
    return 0


def _preflight_nodes(nodes: int) -> None:
    """Fail now, in the shell, on what would make nodes fail in the background."""
    from setpoint.testing.nodes import NodeSet, check_node_count

    check_node_count(nodes)
    if nodes:
        binaries = find_binaries()
        bin_dir = binaries.kube_apiserver.parent
        if not (bin_dir / "kubelet").is_file():
            bin_dir = cache_dir() / "controlplane" / selected_kubernetes_version() / "bin"
        NodeSet(nodes, Path("/nonexistent"), bin_dir=bin_dir).preflight()


def _running_node_count(kubeconfig: str) -> int:
    from setpoint.testing.nodes import running_nodes

    return len(running_nodes(Path(kubeconfig).parent))


def _cmd_up(args: argparse.Namespace) -> int:
    try:
        from setpoint.testing.nodes import check_node_count

        check_node_count(args.nodes)
        state = None if args.foreground else read_state(args.name)
        if state is not None:
            running = _running_node_count(state.kubeconfig)
            if running != args.nodes:
                print(
                    f"setpoint: control plane {args.name!r} is already running with {running} "
                    f"node(s), not {args.nodes}; stop it first with "
                    f"`setpoint controlplane down --name {args.name}`",
                    file=sys.stderr,
                )
                return 1
            print(
                f"# control plane {args.name!r} is already running at {state.server}",
                file=sys.stderr,
            )
            print(_export_line(state.kubeconfig))
            return 0
        find_binaries()  # fail now, with the build hint, rather than in the background
        _preflight_nodes(args.nodes)
    except ControlPlaneError as exc:
        print(f"setpoint: {exc}", file=sys.stderr)
        return 2
    if args.foreground:
        return _run_foreground(args.nodes)
    directory = plane_dir(args.name)
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "supervisor.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "setpoint.testing.supervisor"),
                *("--name", args.name, "--nodes", str(args.nodes)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives this shell command, and Ctrl-C in it
        )
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        state = read_state(args.name)
        if state is not None:
            nodes = f" with {args.nodes} node(s)" if args.nodes else ""
            print(f"# control plane {args.name!r} is up at {state.server}{nodes}", file=sys.stderr)
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


def _run_foreground(nodes: int = 0) -> int:
    with ControlPlane(ControlPlaneOptions(nodes=nodes)) as plane:
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
        return _clean() if args.clean else 0
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not state.alive:
            print(f"control plane {args.name!r} stopped")
            return _report_leftovers(args.name) or (_clean() if args.clean else 0)
        time.sleep(0.2)
    os.kill(state.pid, signal.SIGKILL)
    print(
        f"control plane {args.name!r} did not stop in {args.timeout:.0f}s; killed it",
        file=sys.stderr,
    )
    return 1


def _report_leftovers(name: str) -> int:
    path = plane_dir(name) / "leftovers.json"
    try:
        problems = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    print(f"setpoint: stopping the nodes of {name!r} left this behind:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    print("remove it with `setpoint controlplane down --clean`", file=sys.stderr)
    return 1


def _clean() -> int:
    from setpoint.testing.nodes import clean_host

    if os.geteuid() != 0:
        print("setpoint: --clean needs root (it removes what nodes left)", file=sys.stderr)
        return 2
    removed = clean_host()
    for item in removed:
        print(f"removed {item}")
    if not removed:
        print("nothing left by nodes on this host")
    return 0


def _cmd_load_image(args: argparse.Namespace) -> int:
    from setpoint.testing.nodes import import_image, running_nodes

    state = _running_state(args.name, "--nodes N ")
    if state is None:
        return 1
    sockets = running_nodes(Path(state.kubeconfig).parent)
    try:
        names = import_image(sockets, args.image)
    except ControlPlaneError as exc:
        print(f"setpoint: {exc}", file=sys.stderr)
        return 1
    print(f"loaded {', '.join(names) or args.image} into {len(sockets)} node(s)")
    return 0


def _running_state(name: str, up_options: str = "") -> PlaneState | None:
    """The named plane's state, or ``None`` after saying how to start it."""
    state = read_state(name)
    if state is None:
        print(
            f"setpoint: control plane {name!r} is not running; start it with "
            f"`setpoint controlplane up {up_options}--name {name}`",
            file=sys.stderr,
        )
    return state


def _cmd_env(args: argparse.Namespace) -> int:
    state = _running_state(args.name)
    if state is None:
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
        help=(
            "also build kubelet, kube-proxy, kube-scheduler, CoreDNS and the CNI plugins "
            "(bridge, host-local, loopback, portmap), which nodes need"
        ),
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
            p.add_argument(
                "--nodes",
                type=int,
                default=0,
                metavar="N",
                help=(
                    "also start kube-scheduler and N worker nodes (kubelet, containerd, "
                    "kube-proxy; 0 to 9; as root; see docs/controlplane.md)"
                ),
            )
        if action == "down":
            p.add_argument(
                "--clean",
                action="store_true",
                help="also remove what nodes of a crashed plane left (as root)",
            )
    load = sub.add_parser(
        "load-image",
        help="load an image into every node's containerd, as `kind load` does",
        description=(
            "Load an OCI or docker archive, or a buildah/podman image by name, into every "
            "node of a running plane (`ctr -n k8s.io images import`)."
        ),
    )
    load.add_argument("image", metavar="ARCHIVE|IMAGE", help="an archive file or an image name")
    load.add_argument("--name", default="default", help="plane name (default: %(default)s)")
    load.set_defaults(func=_cmd_load_image)
