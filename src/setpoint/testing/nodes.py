"""Worker nodes for the local control plane: real kubelets running real containers.

``setpoint controlplane up --nodes N`` (``ControlPlaneOptions(nodes=N)``) adds N nodes to
a local plane, as decision 0021 (docs/decisions/0021-nodes.md) found this kind of machine
needs them: each node is a network namespace with a veth on one host bridge, and in it a
containerd (the distribution's 1.6, private root, state and socket, runc with
``restrict_oom_score_adj``), a kubelet (cgroup v1 allowed, cgroupfs driver, a cgroup root
of its own) and a kube-proxy; Pods get their network from the CNI plugins ``bridge``,
``host-local``, ``loopback`` and ``portmap``, built from their Go module. kube-scheduler
joins the plane; kube-controller-manager runs the node-lifecycle, node-IPAM,
EndpointSlice, Deployment and ReplicaSet controllers.

Expected flow (driven by :class:`~setpoint.testing.ControlPlane`):
    1. :meth:`NodeSet.preflight` before anything starts: root, the distribution's
       packages (:func:`check_machine`), the node binaries and the CNI plugins (built
       from their Go module, :func:`build_cni_plugins`), the names free. Each failure
       is a :class:`NodesError` that says what to do.
    2. :meth:`NodeSet.apiserver_args` and :meth:`NodeSet.controller_manager_args`: what
       the plane's components need for nodes.
    3. :meth:`NodeSet.start` once the plane is up: the host bridge, a ``socat`` relay from
       the bridge address to the loopback kube-apiserver, on kube-apiserver's own port
       (kube-apiserver advertises the bridge address, so its endpoint reconciler points
       the ``kubernetes`` Service there), a kube-proxy in the host's network namespace
       (nftables; kube-apiserver reaches webhook Services by ClusterIP, as on a
       control-plane node), kube-scheduler, the pause and busybox images (built here, no
       registry), then each node, then CoreDNS when it is built; it returns when every
       node is Ready, the host's kube-proxy has written its rules and CoreDNS is Ready.
    4. :meth:`NodeSet.stop` (from :meth:`ControlPlane.stop`): deletes the nodes' Pods,
       stops every daemon, unmounts, removes the namespaces, links, routes, cgroups and
       the host kube-proxy's nftables tables, puts back the sysctls the kubelet changed,
       and checks that nothing is left (:func:`leftovers`); what could not be undone is
       in :attr:`NodeSet.problems`.

Guarantees:
    - A start that fails raises :class:`NodesError` (a kubelet that exits or is not Ready
      in time: the last lines of its log), and the plane stops everything started so far.
    - Only one plane with nodes runs on a host at a time: the bridge, namespaces and
      addresses have fixed names, and :meth:`NodeSet.preflight` refuses when they exist.

Caveats:
    - Root only; the host's cgroup, mount and sysctl state is changed while nodes run.
    - Node clients (kubelet, kube-proxy) use the plane's admin credentials.
    - Cluster DNS (CoreDNS in ``kube-system``, the kubelets' ``clusterDNS``) runs only
      when CoreDNS is built (``setpoint controlplane build --nodes``); without it Pods
      reach Services by ClusterIP.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.error
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml

from setpoint.observability.privatefiles import write_private
from setpoint.testing.controlplane import ControlPlaneError, _Process, cache_dir
from setpoint.tls.certs import CertificateAuthority

if TYPE_CHECKING:
    from setpoint.testing.controlplane import ControlPlane

__all__ = [
    "BUSYBOX_IMAGE",
    "CLUSTER_CIDR",
    "MAX_NODES",
    "NODE_PACKAGES",
    "PAUSE_IMAGE",
    "NodeSet",
    "NodesError",
    "OciLayer",
    "check_machine",
    "check_node_count",
    "clean_host",
    "host_state",
    "import_image",
    "leftovers",
    "node_name",
    "oci_layer",
    "running_nodes",
    "write_oci_archive",
]

MAX_NODES = 9
"""The most nodes one plane may have (addresses and names are per index, 1 to 9)."""

HOST_BRIDGE = "setpoint0"
"""The host bridge every node's veth is attached to."""

HOST_IP = "10.213.0.1"
"""The host's address on :data:`HOST_BRIDGE`: the relay to kube-apiserver listens here."""

CLUSTER_CIDR = "10.244.0.0/16"
"""All Pods' addresses; kube-controller-manager's node-IPAM gives each node a /24 of it."""

SERVICE_CIDR = "10.0.0.0/24"
"""The plane's Service ClusterIP range (kube-apiserver's ``--service-cluster-ip-range``)."""

HOST_PROXY_NAME = "setpoint-host"
"""The host kube-proxy's node name in a plane without nodes (no Node has it)."""

HOST_PROXY_TABLES = ("ip kube-proxy", "ip6 kube-proxy")
"""The nftables tables the host's kube-proxy keeps its rules in (deleted by ``down``)."""

COREDNS_VERSION = "v1.15.0"
"""The CoreDNS module release the plane's cluster DNS runs (``go install``, no replaces)."""

COREDNS_IMAGE = f"localhost/setpoint/coredns:{COREDNS_VERSION}"
"""CoreDNS's image, built here from the binary alone (no registry)."""

DNS_SERVICE_IP = "10.0.0.10"
"""The ``kube-dns`` Service's ClusterIP: the kubelets' ``clusterDNS``."""

CLUSTER_DOMAIN = "cluster.local"
"""The cluster's DNS domain (the kubelets' ``clusterDomain``, CoreDNS's zone)."""

API_SERVER_NAME = "kubernetes.default.svc"
"""A name in kube-apiserver's serving certificate, for clients that reach it by relay."""

PAUSE_IMAGE = "localhost/setpoint/pause:v1"
"""The sandbox image, built here: containerd's ``sandbox_image``."""

BUSYBOX_IMAGE = "localhost/setpoint/busybox:v1"
"""A test image loaded into every node: Debian's static busybox, user 65534, ``/bin/sh``."""

BUSYBOX_APPLETS = ("sh", "echo", "sleep", "cat", "id", "ls", "hostname", "nc", "wget", "httpd")
"""The busybox applets :data:`BUSYBOX_IMAGE` links in ``/bin``."""

NODE_PACKAGES = (
    "containerd",
    "runc",
    "iptables",
    "nftables",
    "socat",
    "busybox-static",
    "iproute2",
    "util-linux",
)
"""The Debian packages a node needs (``make cluster-deps`` installs them)."""

CNI_PLUGINS_VERSION = "v1.10.0"
"""The release of github.com/containernetworking/plugins the nodes' CNI plugins come from."""

CNI_PLUGINS = {
    "bridge": "plugins/main/bridge",
    "host-local": "plugins/ipam/host-local",
    "loopback": "plugins/main/loopback",
    "portmap": "plugins/meta/portmap",
}
"""The CNI plugins nodes use, by name, with their package in the plugins module.

``bridge`` + ``host-local`` give Pods their addresses, ``portmap`` serves ``hostPort``s
(:func:`cni_template` chains all three) and containerd sets up ``lo`` with ``loopback``.
"""

_TOOLS = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "socat": "socat",
    "iptables": "iptables",
    "nft": "nftables",
    "ip": "iproute2",
    "nsenter": "util-linux",
}

# Sysctls the kubelet sets at start (protectKernelDefaults=false) host-wide: put back.
_WATCHED_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)

# Host paths the runtime stack creates whatever it is told (containerd 1.6's shim sockets,
# libcni's cache, the kubelet's /var/log/containers links, `ip netns`'s mount point).
_WATCHED_PATHS = (
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/run/netns"),
)

_NODE_BINARIES = ("kubelet", "kube-proxy", "kube-scheduler")

_PAUSE_GO = """\
// pause: holds a Pod's namespaces, reaps zombies, exits on SIGINT or SIGTERM.
package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tc := make(chan os.Signal, 8)
\tsignal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
\tfor s := range c {
\t\tif s != syscall.SIGCHLD {
\t\t\tos.Exit(0)
\t\t}
\t\tfor {
\t\t\tpid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
\t\t\tif pid <= 0 || err != nil {
\t\t\t\tbreak
\t\t\t}
\t\t}
\t}
}
"""


class NodesError(ControlPlaneError):
    """Nodes could not be checked, started, loaded or stopped.

    The message names the cause and what to do (the packages to install, the command to
    run, the log lines of a component that failed).
    """


# --- names and addresses ----------------------------------------------------------------


def node_name(index: int) -> str:
    """Node ``index``'s name (``--hostname-override``), from 1."""
    return f"setpoint-node{index}"


def node_ip(index: int) -> str:
    """Node ``index``'s InternalIP on :data:`HOST_BRIDGE` (kube-apiserver reaches it there)."""
    return f"10.213.0.{10 + index}"


def cgroup_root(index: int) -> str:
    """Node ``index``'s kubelet ``cgroupRoot``: nodes must not share ``/kubepods``."""
    return f"/setpoint-node{index}"


def netns_name(index: int) -> str:
    """Node ``index``'s network namespace (``/run/netns/<name>``)."""
    return f"setpoint-node{index}"


def veth_name(index: int) -> str:
    """The host end of node ``index``'s veth (the other end is ``eth0`` in its namespace)."""
    return f"setpoint-v{index}"


def check_node_count(count: int) -> int:
    """Return ``count`` if it is a valid number of nodes (0 to :data:`MAX_NODES`).

    Raises:
        NodesError: naming the allowed range.

    """
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_NODES:
        raise NodesError(f"--nodes={count!r}: a plane has 0 to {MAX_NODES} nodes")
    return count


# --- the machine ------------------------------------------------------------------------


def check_machine(
    *,
    euid: int | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> None:
    """Check that nodes can run here: root, and the distribution's packages installed.

    Raises:
        NodesError: not root, or a tool is missing; the message names the missing tools,
            the apt packages that hold them and ``make cluster-deps``.

    """
    if (os.geteuid() if euid is None else euid) != 0:
        raise NodesError(
            "nodes need root: the kubelet and containerd manage mounts, cgroups and network "
            "namespaces. Run `sudo setpoint controlplane up --nodes N` (or the test as root)"
        )
    missing = {tool: package for tool, package in _TOOLS.items() if which(tool) is None}
    busybox = which("busybox")
    if busybox is None or not _is_static_elf(Path(busybox)):
        missing["busybox (static)"] = "busybox-static"
    if missing:
        packages = sorted(set(missing.values()))
        raise NodesError(
            f"nodes need {', '.join(missing)}, which are not installed. Install them as root "
            f"with `make cluster-deps` or `apt-get install {' '.join(packages)}`"
        )


def _is_static_elf(path: Path) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only
        return False
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phentsize = int.from_bytes(data[0x36:0x38], "little")
    phnum = int.from_bytes(data[0x38:0x3A], "little")
    for i in range(phnum):
        p_type = int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little")
        if p_type == 3:  # PT_INTERP: needs a dynamic loader
            return False
    return True


def _run(argv: Sequence[str], *, check: bool = True, env: Mapping[str, str] | None = None) -> str:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, check=False, env=None if env is None else env
    )
    if check and proc.returncode != 0:
        raise NodesError(
            f"`{' '.join(argv)}` exited {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"
        )
    return proc.stdout


def _wait(what: str, probe: Callable[[], bool], timeout: float, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise NodesError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# --- the host's state, before and after -------------------------------------------------


def _cgroup_dirs() -> list[str]:
    found: list[str] = []
    root = Path("/sys/fs/cgroup")
    if not root.is_dir():
        return found
    for hierarchy in root.iterdir():
        if not hierarchy.is_dir():
            continue
        with contextlib.suppress(OSError):
            found.extend(
                str(entry)
                for entry in hierarchy.iterdir()
                if entry.is_dir() and entry.name.startswith("setpoint-node")
            )
    return sorted(found)


def cgroup_processes(cgroups: Iterable[str]) -> list[int]:
    """The processes in ``cgroups`` and their descendants (their ``cgroup.procs``), sorted.

    A containerd shim killed with SIGKILL leaves its containers' processes running,
    re-parented to init and named only by their command (``/pause``): their cgroup under
    a node's cgroup root is how :func:`clean_host` finds them.
    """
    found: set[int] = set()
    for cgroup in cgroups:
        for dirpath, _, files in os.walk(cgroup):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    text = Path(dirpath, "cgroup.procs").read_text()
                    found.update(int(line) for line in text.split())
    return sorted(found)


def _mountpoints() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


def host_state(directory: Path | None = None) -> dict[str, Any]:
    """What nodes change on the host: mounts, namespaces, links, cgroups, sysctls, paths.

    Only what nodes can leave is recorded (mounts under ``directory`` or the runtime's
    host paths, the ``setpoint-*`` namespaces, links and cgroups), so other users of the
    machine do not show up as differences. :func:`leftovers` compares two of these.
    """
    prefixes = tuple(str(p) for p in _WATCHED_PATHS) + ((str(directory),) if directory else ())
    netns_dir = Path("/run/netns")
    links = _run(["ip", "-br", "link"], check=False) if shutil.which("ip") else ""
    return {
        "mounts": sorted(m for m in _mountpoints() if m.startswith(prefixes)),
        "netns": sorted(p.name for p in netns_dir.iterdir() if p.name.startswith("setpoint-"))
        if netns_dir.is_dir()
        else [],
        "links": sorted(
            name
            for line in links.splitlines()
            if line.strip() and (name := line.split()[0].split("@")[0]).startswith("setpoint")
        ),
        "cgroups": _cgroup_dirs(),
        "sysctls": {
            name: Path("/proc/sys", name).read_text().strip()
            for name in _WATCHED_SYSCTLS
            if Path("/proc/sys", name).exists()
        },
        "paths": {str(p): p.exists() for p in _WATCHED_PATHS},
        "nftables": _proxy_tables(),
    }


def _proxy_tables() -> list[str]:
    """Which of :data:`HOST_PROXY_TABLES` exist on the host (``nft list tables``)."""
    if shutil.which("nft") is None:
        return []
    listed = _run(["nft", "list", "tables"], check=False).splitlines()
    present = {line.removeprefix("table ").strip() for line in listed}
    return [table for table in HOST_PROXY_TABLES if table in present]


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Processes (not this one) whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append((int(entry.name), cmdline.strip()))
    return found


def leftovers(
    before: Mapping[str, Any], after: Mapping[str, Any], processes: Iterable[tuple[int, str]] = ()
) -> list[str]:
    """What ``after`` has that ``before`` had not (two :func:`host_state` results).

    Returns one line per difference (a mount, namespace, link, cgroup or nftables table
    left, a sysctl not put back, a path created) and per process in ``processes``; empty
    means clean.
    """
    problems = [f"process {pid} still runs: {cmdline[:160]}" for pid, cmdline in processes]
    for key in ("mounts", "netns", "links", "cgroups", "nftables"):
        extra = sorted(set(after.get(key, ())) - set(before.get(key, ())))
        label = {"netns": "netns", "nftables": "nftables table"}.get(key, key[:-1])
        problems.extend(f"{label} left: {item}" for item in extra)
    for name, value in before.get("sysctls", {}).items():
        now = after.get("sysctls", {}).get(name)
        if now != value:
            problems.append(f"sysctl {name} is {now}, was {value}")
    for path, existed in before.get("paths", {}).items():
        if not existed and after.get("paths", {}).get(path):
            problems.append(f"path left: {path}")
    return problems


# --- images -----------------------------------------------------------------------------


def _layer(files: Mapping[str, tuple[bytes | None, int, str | None]]) -> bytes:
    """A tar layer: name -> (content, mode, symlink target); directories have no content."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (content, mode, target) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = 0
            if target is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = target
                tar.addfile(info)
            elif content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


class OciLayer(NamedTuple):
    """One image layer as the archive stores it: the gzip blob and its tar's digest."""

    blob: bytes
    """The layer tar, gzip-compressed (the blob the manifest names)."""
    diff_id: str
    """``sha256:`` of the uncompressed tar (the image config's ``rootfs.diff_ids``)."""


def oci_layer(layer_tar: bytes, *, compresslevel: int = 9) -> OciLayer:
    """Compress ``layer_tar`` into an :class:`OciLayer` (reproducibly: no gzip mtime)."""
    return OciLayer(
        gzip.compress(layer_tar, compresslevel=compresslevel, mtime=0),
        "sha256:" + hashlib.sha256(layer_tar).hexdigest(),
    )


def write_oci_archive(
    path: Path,
    ref: str,
    layer_tar: bytes | Sequence[OciLayer],
    config: Mapping[str, Any],
    *,
    arch: str = "amd64",
) -> None:
    """Write an OCI image layout tarball named ``ref``.

    ``layer_tar`` is one uncompressed layer tar (gzipped here), or the layers, bottom
    first, already compressed (:func:`oci_layer`; an image builder caches its base layer
    so). ``ctr images import`` (and :meth:`NodeSet.load_image`) accepts the archive; no
    registry and no image builder is involved. ``config`` is the image config's
    ``config`` (Entrypoint, User, Env).
    """
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest, len(data)

    layers = [oci_layer(layer_tar)] if isinstance(layer_tar, bytes) else list(layer_tar)
    layer_refs = [blob(layer.blob) for layer in layers]
    image_config = {
        "architecture": arch,
        "os": "linux",
        "config": dict(config),
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
    }
    config_digest, config_size = blob(json.dumps(image_config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": digest,
                "size": size,
            }
            for digest, size in layer_refs
        ],
    }
    manifest_digest, manifest_size = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": manifest_size,
                "annotations": {
                    "io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": ref,
                },
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
    }
    for digest, data in blobs.items():
        files["blobs/sha256/" + digest.removeprefix("sha256:")] = data
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def pause_binary() -> Path:
    """A static pause binary built once from a 20-line Go program into the cache.

    Raises:
        NodesError: Go is missing or the build failed.

    """
    target = cache_dir() / "nodes" / "pause"
    if target.is_file():
        return target
    if shutil.which("go") is None:
        raise NodesError("Go is needed once to build the pause binary: install Go 1.26")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="setpoint-pause-") as src_dir:
        src = Path(src_dir)
        (src / "go.mod").write_text("module setpoint.dev/pause\n\ngo 1.22\n")
        (src / "main.go").write_text(_PAUSE_GO)
        tmp = target.with_suffix(".tmp")
        _run(
            ["go", "build", "-C", str(src), "-trimpath", "-ldflags", "-s -w", "-o", str(tmp), "."],
            env={**os.environ, "CGO_ENABLED": "0"},
        )
        tmp.replace(target)
    return target


def write_node_images(directory: Path, busybox: Path | None = None) -> list[Path]:
    """The pause image and :data:`BUSYBOX_IMAGE`, as OCI archives in ``directory``."""
    pause = pause_binary()
    busybox = busybox or Path(shutil.which("busybox") or "/bin/busybox")
    pause_archive = directory / "pause.oci.tar"
    write_oci_archive(
        pause_archive,
        PAUSE_IMAGE,
        _layer({"pause": (pause.read_bytes(), 0o755, None)}),
        {"Entrypoint": ["/pause"], "User": "65535:65535"},
    )
    files: dict[str, tuple[bytes | None, int, str | None]] = {
        "bin": (None, 0o755, None),
        "tmp": (None, 0o1777, None),
        "bin/busybox": (busybox.read_bytes(), 0o755, None),
    }
    for applet in BUSYBOX_APPLETS:
        files[f"bin/{applet}"] = (None, 0o777, "busybox")
    busybox_archive = directory / "busybox.oci.tar"
    write_oci_archive(
        busybox_archive,
        BUSYBOX_IMAGE,
        _layer(files),
        {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/bin"], "User": "65534:65534"},
    )
    return [pause_archive, busybox_archive]


def coredns_binary() -> Path:
    """Where :func:`build_coredns` puts CoreDNS (``<cache>/coredns/<version>/bin``)."""
    return cache_dir() / "coredns" / COREDNS_VERSION / "bin" / "coredns"


def build_coredns(log: Callable[[str], None] = print) -> Path:
    """Build CoreDNS :data:`COREDNS_VERSION` from its Go module, once (~3 min cold).

    ``go install github.com/coredns/coredns@<version>``, static (``CGO_ENABLED=0``), into
    :func:`coredns_binary`'s directory; nothing is done when the binary is there.

    Raises:
        NodesError: Go is missing or the build failed.

    """
    binary = coredns_binary()
    if binary.is_file():
        return binary
    if shutil.which("go") is None:
        raise NodesError("Go is needed once to build CoreDNS: install Go 1.26")
    log(f"building CoreDNS {COREDNS_VERSION} from its Go module (go install; ~3 min once)")
    try:
        _run(
            [
                *("go", "install", "-trimpath", "-ldflags", "-s -w"),
                f"github.com/coredns/coredns@{COREDNS_VERSION}",
            ],
            env={**os.environ, "CGO_ENABLED": "0", "GOBIN": str(binary.parent)},
        )
    except NodesError as exc:
        raise NodesError(f"building CoreDNS {COREDNS_VERSION} failed: {exc}") from None
    return binary


def coredns_archive(binary: Path) -> Path:
    """:data:`COREDNS_IMAGE` as an OCI archive next to ``binary`` (written once)."""
    archive = binary.parent.parent / "coredns.oci.tar"
    if not archive.is_file() or archive.stat().st_mtime < binary.stat().st_mtime:
        layer = _layer({"coredns": (binary.read_bytes(), 0o755, None)})
        tmp = archive.with_suffix(".tmp")
        write_oci_archive(
            tmp, COREDNS_IMAGE, layer, {"Entrypoint": ["/coredns"], "User": "65534:65534"}
        )
        tmp.replace(archive)
    return archive


def cni_bin_dir() -> Path:
    """Where :func:`build_cni_plugins` puts the CNI plugins: containerd's CNI ``bin_dir``.

    ``<cache>/cni-plugins/<version>/bin``, beside CoreDNS's build; nodes use no other.
    """
    return cache_dir() / "cni-plugins" / CNI_PLUGINS_VERSION / "bin"


def missing_cni_plugins(directory: Path | None = None) -> list[str]:
    """The plugins of :data:`CNI_PLUGINS` not (yet) built in ``directory`` (default: the cache)."""
    where = cni_bin_dir() if directory is None else directory
    return [name for name in CNI_PLUGINS if not (where / name).is_file()]


def build_cni_plugins(
    log: Callable[[str], None] = print, *, clock: Callable[[], float] = time.monotonic
) -> dict[str, float]:
    """Build the CNI plugins (:data:`CNI_PLUGINS`) from their Go module, once (~1 min cold).

    ``go install github.com/containernetworking/plugins/<package>@<version>`` for each
    plugin missing from :func:`cni_bin_dir`, static (``CGO_ENABLED=0``), with the release
    stamped where the plugins' version output reads it; one progress line per
    plugin through ``log``. Returns the seconds each plugin took by ``clock`` (0 for one
    already built).

    Raises:
        NodesError: Go is missing or a build failed (the message names the plugin).

    """
    target = cni_bin_dir()
    missing = missing_cni_plugins(target)
    taken = dict.fromkeys(CNI_PLUGINS, 0.0)
    if not missing:
        return taken
    if shutil.which("go") is None:
        raise NodesError("Go is needed once to build the CNI plugins: install Go 1.26")
    module = "github.com/containernetworking/plugins"
    stamp = f"-s -w -X {module}/pkg/utils/buildversion.BuildVersion={CNI_PLUGINS_VERSION}"
    env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": str(target)}
    log(
        f"building CNI plugins {CNI_PLUGINS_VERSION} ({', '.join(missing)}) from their Go "
        "module (go install; ~1 min once)"
    )
    for position, name in enumerate(missing, 1):
        started = clock()
        try:
            _run(
                [
                    *("go", "install", "-trimpath", "-ldflags", stamp),
                    f"{module}/{CNI_PLUGINS[name]}@{CNI_PLUGINS_VERSION}",
                ],
                env=env,
            )
        except NodesError as exc:
            raise NodesError(
                f"building CNI plugin {name} {CNI_PLUGINS_VERSION} failed: {exc}"
            ) from None
        taken[name] = clock() - started
        log(f"  [{position}/{len(missing)}] {name} built in {taken[name]:.0f}s")
    return taken


COREFILE = f""".:53 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 30
    loadbalance
}}
"""
"""CoreDNS's configuration: the cluster's names, the rest forwarded to the host's resolver."""


def coredns_objects() -> list[tuple[str, dict[str, Any]]]:
    """The cluster DNS as kubeadm deploys it: (API collection path, object) in order.

    In ``kube-system``: a ServiceAccount, the ``system:coredns`` ClusterRole and binding, the
    Corefile in a ConfigMap, a Deployment of :data:`COREDNS_IMAGE` (non-root, read-only
    root, port 53 through the namespaced sysctl ``net.ipv4.ip_unprivileged_port_start``)
    with readiness on ``/ready``, liveness on ``/health``, and the ``kube-dns`` Service
    at :data:`DNS_SERVICE_IP`.
    """
    ns = "kube-system"
    labels = {"k8s-app": "kube-dns"}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    return [
        (
            f"/api/v1/namespaces/{ns}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns"}},
        ),
        (
            f"{rbac}/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "system:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["endpoints", "services", "pods", "namespaces"],
                        "verbs": ["list", "watch"],
                    },
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
        ),
        (
            f"{rbac}/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "system:coredns"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:coredns",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "coredns"},
                "data": {"Corefile": COREFILE},
            },
        ),
        (
            f"/apis/apps/v1/namespaces/{ns}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "coredns", "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": "coredns",
                            # Its own resolver is the host's, not itself.
                            "dnsPolicy": "Default",
                            "terminationGracePeriodSeconds": 2,
                            "securityContext": {
                                "runAsNonRoot": True,
                                "runAsUser": 65534,
                                "sysctls": [
                                    {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}
                                ],
                            },
                            "containers": [
                                {
                                    "name": "coredns",
                                    "image": COREDNS_IMAGE,
                                    "imagePullPolicy": "Never",
                                    "args": ["-conf", "/etc/coredns/Corefile"],
                                    "ports": [
                                        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                        {"name": "dns-tcp", "containerPort": 53},
                                    ],
                                    "readinessProbe": {
                                        "httpGet": {"path": "/ready", "port": 8181},
                                        "periodSeconds": 2,
                                    },
                                    "livenessProbe": {
                                        "httpGet": {"path": "/health", "port": 8080},
                                        "periodSeconds": 10,
                                    },
                                    "securityContext": {
                                        "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]},
                                    },
                                    "volumeMounts": [
                                        {"name": "config", "mountPath": "/etc/coredns"}
                                    ],
                                }
                            ],
                            "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                        },
                    },
                },
            },
        ),
        (
            f"/api/v1/namespaces/{ns}/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kube-dns", "labels": labels},
                "spec": {
                    "clusterIP": DNS_SERVICE_IP,
                    "selector": labels,
                    "ports": [
                        {"name": "dns", "port": 53, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                    ],
                },
            },
        ),
    ]


# --- configuration files ----------------------------------------------------------------


def containerd_config(node: Path, cni_bin: Path | None = None) -> str:
    """The config of containerd 1.6 for the node whose directory is ``node``.

    Everything under ``node``; runc with cgroupfs; the CNI config written from a template
    once the kubelet passes the node's Pod CIDR (node-IPAM assigns it); the CNI plugins
    from ``cni_bin`` (default :func:`cni_bin_dir`, the plugins built from their module).
    """
    cni_bin = cni_bin_dir() if cni_bin is None else cni_bin
    return f"""version = 2
root = "{node}/containerd/root"
state = "{node}/containerd/state"
[grpc]
  address = "{node}/containerd.sock"
[ttrpc]
  address = "{node}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE: lowering oom_score_adj (the sandbox's -998) fails in
  # runc ("can't get final child's PID from pipe: EOF"). Clamp to containerd's own value.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state dir, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{node}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{node}/cni/net.d"
    conf_template = "{node}/cni/template.json"
"""


def cni_template(node: Path) -> str:
    """The CNI network template: bridge + host-local on the node's Pod CIDR, then portmap.

    containerd fills ``{{.PodCIDR}}`` in when the kubelet reports the CIDR node-IPAM gave
    the Node. The bridge lives in the node's namespace, so the ``ip_forward`` the plugin
    sets (``isGateway``) is the node's, not the host's. ``portmap`` (iptables, in the
    node's namespace too) maps a container's ``hostPort`` to the node's address, as
    kind's nodes do; it does nothing for Pods without one.
    """
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "setpoint",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": f"{node}/cni/ipam",
                    },
                },
                {
                    "type": "portmap",
                    "backend": "iptables",
                    "capabilities": {"portMappings": True},
                },
            ],
        },
        indent=2,
    )


def kubelet_config(node: Path, index: int, client_ca: Path, *, dns: bool = False) -> str:
    """KubeletConfiguration for node ``index``: cgroup v1 allowed, cgroupfs, files in ``node``.

    The kubelet takes only clients with a certificate from ``client_ca`` (kube-apiserver's
    kubelet client certificate) or a token, and asks kube-apiserver whether they may.
    With ``dns``, Pods resolve through the cluster DNS (:data:`DNS_SERVICE_IP`).
    """
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # Kubernetes 1.35+ refuses to start on cgroup v1 unless told otherwise.
        "failCgroupV1": False,
        # containerd 1.6 has no RuntimeConfig CRI call, so the kubelet uses this (and logs it).
        "cgroupDriver": "cgroupfs",
        # A kubelet removes the pod cgroups it does not know: one root per node.
        "cgroupRoot": cgroup_root(index),
        "containerRuntimeEndpoint": f"unix://{node}/containerd.sock",
        "address": node_ip(index),
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": f"{node}/pod-logs",
        "resolvConf": "/etc/resolv.conf",
        "failSwapOn": False,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
    }
    if dns:
        config["clusterDNS"] = [DNS_SERVICE_IP]
        config["clusterDomain"] = CLUSTER_DOMAIN
    return yaml.safe_dump(config, sort_keys=False)


def kube_proxy_config(kubeconfig: Path, index: int, mode: str = "iptables") -> str:
    """KubeProxyConfiguration for node ``index`` in ``mode``; its rules live in the node."""
    return json.dumps(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": node_name(index),
            "mode": mode,
            "clusterCIDR": CLUSTER_CIDR,
            "nodePortAddresses": ["primary"],
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # Root here lacks CAP_SYS_RESOURCE: kube-proxy's default -999 cannot be set.
            "oomScoreAdj": 0,
            # Leave the (host-wide) conntrack table size alone.
            "conntrack": {"maxPerCore": 0},
        },
        indent=2,
    )


def host_kube_proxy_config(kubeconfig: Path, node: str = HOST_PROXY_NAME) -> str:
    """KubeProxyConfiguration for the kube-proxy in the host's network namespace.

    kube-apiserver runs on the host, as on a control-plane node, where a kube-proxy makes
    Service ClusterIPs work for it: webhooks and conversion with a ``service:``
    clientConfig are called through the Service, as in a cluster. nftables mode keeps every
    rule in :data:`HOST_PROXY_TABLES` (the host's iptables are not touched, and ``down``
    deletes the tables); the conntrack settings leave the host's sysctls as they are; its
    health and metrics ports are on the bridge address. It goes by the name of ``node``:
    kube-proxy waits 30 s for a Node of its name to have addresses before it writes any
    rule, and the host has no Node. :meth:`NodeSet.start` passes the first node's name;
    it matters only to ``internalTrafficPolicy: Local`` Services, which from the host then
    reach that node's endpoints.
    """
    return json.dumps(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": node,
            "mode": "nftables",
            "clusterCIDR": CLUSTER_CIDR,
            "nodePortAddresses": [f"{HOST_IP}/32"],
            "healthzBindAddress": f"{HOST_IP}:10256",
            "metricsBindAddress": f"{HOST_IP}:10249",
            "oomScoreAdj": 0,
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        },
        indent=2,
    )


# --- images into nodes ------------------------------------------------------------------


def running_nodes(plane_directory: Path) -> list[Path]:
    """The containerd sockets of the nodes of the plane in ``plane_directory`` (may be [])."""
    record = plane_directory / "nodes" / "nodes.json"
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return []
    return [Path(entry["socket"]) for entry in data.get("nodes", [])]


def import_image(sockets: Sequence[Path], image: str, *, work: Path | None = None) -> list[str]:
    """Load ``image`` into every node's containerd (``ctr -n k8s.io images import``).

    ``image`` is an OCI or docker archive (a file), or the name of an image in buildah's
    or podman's local storage, which is exported to an archive first (as ``kind load``
    does with docker's). Returns the image names imported.

    Raises:
        NodesError: no node runs, the file or image does not exist, or an import failed.

    """
    if not sockets:
        raise NodesError(
            "the plane has no nodes: start one with `setpoint controlplane up --nodes N`"
        )
    with tempfile.TemporaryDirectory(prefix="setpoint-load-", dir=work) as tmp:
        archive = Path(image)
        if not archive.is_file():
            if image.endswith((".tar", ".tar.gz", ".tgz")) or image.startswith(("/", ".")):
                raise NodesError(f"{image}: no such archive")
            archive = Path(tmp) / "image.oci.tar"
            _export_image(image, archive)
        names: list[str] = []
        for sock in sockets:
            out = _run(
                ["ctr", "--address", str(sock), "-n", "k8s.io", "images", "import", str(archive)]
            )
            names = [
                line.split()[1] for line in out.splitlines() if line.startswith("unpacking ")
            ] or names
    return names


def _export_image(image: str, archive: Path) -> None:
    for tool, argv in (
        ("buildah", ["buildah", "push", image, f"oci-archive:{archive}:{image}"]),
        ("podman", ["podman", "save", "--format", "oci-archive", "-o", str(archive), image]),
    ):
        if shutil.which(tool):
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                return
            raise NodesError(
                f"{image!r} is not a file, and `{' '.join(argv)}` could not export it: "
                f"{(proc.stderr or proc.stdout).strip()[-500:]}"
            )
    raise NodesError(
        f"{image!r} is not a file, and neither buildah nor podman is installed to export it "
        "as an image: pass an OCI archive (`buildah push IMAGE oci-archive:FILE`), or "
        "`apt-get install buildah`"
    )


# --- the nodes --------------------------------------------------------------------------


@dataclass
class _Node:
    index: int
    directory: Path
    containerd: _Process | None = None
    kubelet: _Process | None = None
    kube_proxy: _Process | None = None
    pod_cidr: str = ""

    @property
    def name(self) -> str:
        return node_name(self.index)

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    def nsenter(self, *argv: str) -> list[str]:
        # Mounts and cgroups stay the host's: `ip netns exec` would remount /sys and hide
        # the cgroup hierarchies.
        return ["nsenter", f"--net=/run/netns/{netns_name(self.index)}", *argv]

    def ctr(self, *args: str, check: bool = True) -> str:
        return _run(["ctr", "--address", str(self.socket), "-n", "k8s.io", *args], check=check)


class NodeSet:
    """The nodes of one plane, with kube-scheduler and the relay. See the module docstring.

    Owned by :class:`~setpoint.testing.ControlPlane` (``ControlPlaneOptions(nodes=N)``);
    not started on its own.
    """

    def __init__(
        self,
        count: int,
        directory: Path,
        *,
        bin_dir: Path,
        ready_timeout: float = 90.0,
        proxy_mode: str = "iptables",
        dns: bool | None = None,
    ) -> None:
        self.count = check_node_count(count)
        self.directory = directory
        self.bin_dir = bin_dir
        self.ready_timeout = ready_timeout
        self.relay_port = 0
        """The relay's port on :data:`HOST_IP`: kube-apiserver's own (set by :meth:`start`)."""
        self.proxy_mode = proxy_mode
        self.dns = coredns_binary().is_file() if dns is None else dns
        """Whether CoreDNS runs as the cluster DNS (by default: when it is built)."""
        self.nodes = [_Node(i, directory / f"node{i}") for i in range(1, count + 1)]
        self.problems: list[str] = []
        """What :meth:`stop` could not undo (empty when the host is as it was)."""
        self._daemons: list[_Process] = []  # relay, kube-scheduler
        self._before: dict[str, Any] | None = None
        self._netns: list[str] = []
        self._links: list[str] = []
        self._routes: list[str] = []
        self._plane: ControlPlane | None = None
        self._owns_record = False

    @property
    def names(self) -> list[str]:
        """The nodes' names, in index order."""
        return [n.name for n in self.nodes]

    # -- before the plane starts ---------------------------------------------------------

    def preflight(self) -> None:
        """Check everything that can be checked before anything starts.

        Raises:
            NodesError: not root, a package or a node binary missing, another plane's
                nodes (or a crashed run's) hold the names.

        """
        check_machine()
        missing = [b for b in _NODE_BINARIES if not (self.bin_dir / b).is_file()]
        if missing:
            raise NodesError(
                f"{', '.join(missing)} not found in {self.bin_dir}: build them once with "
                "`setpoint controlplane build --nodes` (~1 minute with the plane's Go cache)"
            )
        cni = missing_cni_plugins()
        if cni:
            raise NodesError(
                f"CNI plugin(s) {', '.join(cni)} not found in {cni_bin_dir()}: build them once "
                f"from their Go module ({CNI_PLUGINS_VERSION}) with "
                "`setpoint controlplane build --nodes` (~10 s with a warm Go cache, ~1 min cold)"
            )
        state = host_state()
        taken = [HOST_BRIDGE] if HOST_BRIDGE in state["links"] else []
        taken += [n for n in (netns_name(x.index) for x in self.nodes) if n in state["netns"]]
        taken += [c for c in state["cgroups"] if c.rsplit("/", 1)[-1].startswith("setpoint-node")]
        if taken:
            raise NodesError(
                f"{', '.join(taken[:4])} exist already: another plane with nodes runs, or a "
                "run crashed. Stop the other plane (`setpoint controlplane down`), or remove "
                "what a crashed run left with `setpoint controlplane down --clean`"
            )

    def apiserver_args(self, pki_dir: Path) -> dict[str, str]:
        """kube-apiserver's flags for nodes; writes its kubelet client certificate.

        The kubelets trust a CA of the nodes' own, which signs kube-apiserver's client
        certificate (``system:masters``) for logs, exec and port-forward.
        """
        ca = CertificateAuthority("setpoint-kubelet-client-ca")
        pair = ca.client_cert("kube-apiserver-kubelet-client", ("system:masters",))
        self.directory.mkdir(parents=True, exist_ok=True)
        write_private(self.directory / "kubelet-client-ca.crt", ca.cert_pem)
        write_private(pki_dir / "kubelet-client.crt", pair.cert_pem)
        write_private(pki_dir / "kubelet-client.key", pair.key_pem)
        return {
            # The nodes' Hostname addresses do not resolve: reach kubelets by InternalIP.
            "kubelet-preferred-address-types": "InternalIP",
            "kubelet-client-certificate": str(pki_dir / "kubelet-client.crt"),
            "kubelet-client-key": str(pki_dir / "kubelet-client.key"),
            # kube-apiserver writes the kubernetes Service's endpoints itself: the bridge
            # address (where the relay listens, on kube-apiserver's own port).
            "advertise-address": HOST_IP,
            "endpoint-reconciler-type": "lease",
        }

    @staticmethod
    def controllers() -> tuple[str, ...]:
        """The kube-controller-manager controllers nodes add to the plane's."""
        return (
            "node-lifecycle-controller",
            "node-ipam-controller",
            "endpointslice-controller",
            "endpointslice-mirroring-controller",
            "deployment-controller",
            "replicaset-controller",
            "pod-garbage-collector-controller",
            "taint-eviction-controller",
        )

    @staticmethod
    def controller_manager_args() -> dict[str, str]:
        """kube-controller-manager's flags for nodes: a /24 of :data:`CLUSTER_CIDR` each."""
        return {
            "allocate-node-cidrs": "true",
            "cluster-cidr": CLUSTER_CIDR,
            "node-cidr-mask-size": "24",
            "service-cluster-ip-range": SERVICE_CIDR,
        }

    # -- start ---------------------------------------------------------------------------

    def start(self, plane: ControlPlane) -> None:
        """Start the relay, kube-scheduler and every node; return when all are Ready.

        Raises:
            NodesError: a step failed (the message has the failing component's log tail).
                The caller stops the plane, which calls :meth:`stop`.

        """
        self._plane = plane
        self._before = host_state(self.directory)
        _run(["ip", "link", "add", HOST_BRIDGE, "type", "bridge"])
        self._links.append(HOST_BRIDGE)
        self.relay_port = plane.api_port
        # The bridge is this set's (a second plane racing past preflight fails above): for
        # `down --clean` after a crash, record what to put back and where the nodes live.
        record = _host_record()
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"directory": str(self.directory), "before": self._before}))
        self._owns_record = True
        _run(["ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_BRIDGE])
        _run(["ip", "link", "set", HOST_BRIDGE, "up"])
        relay = self._spawn(
            "relay",
            [
                "socat",
                f"TCP-LISTEN:{self.relay_port},bind={HOST_IP},fork,reuseaddr",
                f"TCP:127.0.0.1:{plane.api_port}",
            ],
        )
        self._write_node_kubeconfig(plane)
        # ClusterIPs leave the host by the bridge, from its address, whatever the host's
        # default route is; kube-proxy's rules turn them into Pod IPs (routes via nodes).
        _run(["ip", "route", "add", SERVICE_CIDR, "dev", HOST_BRIDGE, "src", HOST_IP])
        self._routes.append(SERVICE_CIDR)
        kubeconfig = str(plane.kubeconfig_path)
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
            ],
        )
        images = write_node_images(self.directory)
        if self.dns:
            images.append(coredns_archive(coredns_binary()))
        if not relay.alive():
            raise NodesError(f"the relay (socat) exited:\n{relay.log_tail()}")
        for node in self.nodes:
            self._start_node(node, images)
        self._record()
        for node in self.nodes:
            self._wait_ready(plane, node)
        self._add_routes()
        if self.dns:
            self._create_dns(plane)
        # The host's kube-proxy once node 1 exists: by node 1's name it starts at once
        # (without a Node of its name, kube-proxy waits 30 s; host_kube_proxy_config).
        (self.directory / "host-kube-proxy.json").write_text(
            host_kube_proxy_config(
                self.directory / "node.kubeconfig",
                self.nodes[0].name if self.nodes else HOST_PROXY_NAME,
            )
        )
        host_proxy = self._spawn(
            "kube-proxy (host)",
            [
                str(self.bin_dir / "kube-proxy"),
                f"--config={self.directory / 'host-kube-proxy.json'}",
                "--v=1",
            ],
            self.directory / "host-kube-proxy.log",
        )
        self._wait_host_proxy(host_proxy, plane)
        if self.dns:
            self._wait_dns(plane)

    def _create_dns(self, plane: ControlPlane) -> None:
        """Create CoreDNS's objects (:func:`coredns_objects`) through the API."""
        for path, obj in coredns_objects():
            try:
                plane._api_request("POST", path, obj)
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    detail = exc.read().decode(errors="replace")[:300]
                    raise NodesError(
                        f"creating CoreDNS's {obj['kind']} failed (HTTP {exc.code}): {detail}"
                    ) from None

    def _wait_dns(self, plane: ControlPlane) -> None:
        """Wait until CoreDNS's Deployment has a Ready replica (its /ready probe passes)."""
        path = "/apis/apps/v1/namespaces/kube-system/deployments/coredns"

        def ready() -> bool:
            status = plane._api_request("GET", path).get("status") or {}
            return int(status.get("readyReplicas") or 0) >= 1

        try:
            _wait("CoreDNS to be Ready", ready, 90, interval=0.5)
        except NodesError as exc:
            if "timed out" not in str(exc):
                raise
            pods = (
                plane._api_request(
                    "GET", "/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-dns"
                ).get("items")
                or []
            )
            states = [json.dumps((p.get("status") or {}).get("containerStatuses")) for p in pods]
            raise NodesError(f"{exc}; CoreDNS's Pods: {states or 'none'}") from None

    def _wait_host_proxy(self, proxy: _Process, plane: ControlPlane) -> None:
        """Wait until the host reaches kube-apiserver through the ``kubernetes`` ClusterIP.

        That is the host kube-proxy's rules at work: from then on kube-apiserver reaches
        webhook Services as it would on a control-plane node.
        """
        service = plane._api_request("GET", "/api/v1/namespaces/default/services/kubernetes")
        service_ip = str(service["spec"]["clusterIP"])

        def synced() -> bool:
            if not proxy.alive():
                raise NodesError(
                    f"the host's kube-proxy exited; last lines of {proxy.log_path}:\n"
                    f"{proxy.log_tail(15)}"
                )
            try:
                with socket.create_connection((service_ip, 443), timeout=0.5):
                    return True
            except OSError:
                return False

        try:
            _wait("the host's kube-proxy", synced, 60, interval=0.5)
        except NodesError as exc:
            if "timed out" not in str(exc):
                raise
            raise NodesError(
                f"{exc}; last lines of {proxy.log_path}:\n{proxy.log_tail(15)}"
            ) from None

    def _spawn(self, name: str, argv: list[str], log: Path | None = None) -> _Process:
        proc = _Process(name, argv, log or self.directory / f"{name}.log")
        proc.start()
        self._daemons.append(proc)
        return proc

    def _write_node_kubeconfig(self, plane: ControlPlane) -> None:
        config = yaml.safe_load(plane.kubeconfig_path.read_text())
        cluster = config["clusters"][0]["cluster"]
        cluster["server"] = f"https://{HOST_IP}:{self.relay_port}"
        cluster["tls-server-name"] = API_SERVER_NAME
        write_private(self.directory / "node.kubeconfig", yaml.safe_dump(config).encode())

    def _start_node(self, node: _Node, images: Sequence[Path]) -> None:
        i, d = node.index, node.directory
        for sub in ("cni/net.d", "containerd", "kubelet", "pod-logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        _run(["ip", "netns", "add", netns_name(i)])
        self._netns.append(netns_name(i))
        _run(
            [
                *("ip", "link", "add", veth_name(i), "type", "veth"),
                *("peer", "name", "eth0", "netns", netns_name(i)),
            ]
        )
        _run(["ip", "link", "set", veth_name(i), "master", HOST_BRIDGE, "up"])
        _run(node.nsenter("ip", "addr", "add", f"{node_ip(i)}/24", "dev", "eth0"))
        _run(node.nsenter("ip", "link", "set", "eth0", "up"))
        _run(node.nsenter("ip", "link", "set", "lo", "up"))
        _run(node.nsenter("ip", "route", "add", "default", "via", HOST_IP))
        (d / "containerd/config.toml").write_text(containerd_config(d))
        (d / "cni/template.json").write_text(cni_template(d))
        node.containerd = self._node_daemon(
            node, "containerd", ["containerd", "--config", str(d / "containerd/config.toml")]
        )
        containerd = node.containerd

        def containerd_up() -> bool:
            if not containerd.alive():
                raise NodesError(
                    f"{node.name}'s containerd exited; last lines of {containerd.log_path}:\n"
                    f"{containerd.log_tail(15)}"
                )
            return node.ctr("version", check=False) != ""

        _wait(f"{node.name}'s containerd", containerd_up, 30)
        for archive in images:
            node.ctr("images", "import", str(archive))
        _make_cgroup_root(cgroup_root(i))
        (d / "kubelet/config.yaml").write_text(
            kubelet_config(d, i, self.directory / "kubelet-client-ca.crt", dns=self.dns)
        )
        kubeconfig = self.directory / "node.kubeconfig"
        node.kubelet = self._node_daemon(
            node,
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={d / 'kubelet/config.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={d / 'kubelet/root'}",
                f"--cert-dir={d / 'kubelet/pki'}",
                f"--hostname-override={node.name}",
                f"--node-ip={node_ip(i)}",
                "--v=1",
            ],
        )
        (d / "kube-proxy.json").write_text(kube_proxy_config(kubeconfig, i, self.proxy_mode))
        node.kube_proxy = self._node_daemon(
            node,
            "kube-proxy",
            [str(self.bin_dir / "kube-proxy"), f"--config={d / 'kube-proxy.json'}", "--v=1"],
        )

    def _node_daemon(self, node: _Node, name: str, argv: list[str]) -> _Process:
        proc = _Process(f"{node.name} {name}", node.nsenter(*argv), node.directory / f"{name}.log")
        proc.start()
        return proc

    def _wait_ready(self, plane: ControlPlane, node: _Node) -> None:
        kubelet = node.kubelet
        assert kubelet is not None

        def ready() -> bool:
            if not kubelet.alive():
                raise NodesError(
                    f"{node.name}'s kubelet exited; last lines of {kubelet.log_path}:\n"
                    f"{kubelet.log_tail(15)}"
                )
            try:
                obj = plane._api_request("GET", f"/api/v1/nodes/{node.name}")
            except (urllib.error.URLError, OSError):
                return False
            node.pod_cidr = str((obj.get("spec") or {}).get("podCIDR") or "")
            conditions = (obj.get("status") or {}).get("conditions") or []
            taints = (obj.get("spec") or {}).get("taints") or []
            return (
                bool(node.pod_cidr)
                and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)
                and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            )

        try:
            _wait(f"{node.name} to be Ready", ready, self.ready_timeout)
        except NodesError as exc:
            if "timed out" not in str(exc):
                raise
            raise NodesError(
                f"{exc}; last lines of {kubelet.log_path}:\n{kubelet.log_tail(15)}"
            ) from None

    def _add_routes(self) -> None:
        for node in self.nodes:
            # The host (kube-apiserver, webhooks) reaches this node's Pods through the node.
            _run(["ip", "route", "add", node.pod_cidr, "via", node_ip(node.index)])
            self._routes.append(node.pod_cidr)
            # Pods on other nodes: straight over the bridge, so the host need not forward.
            for other in self.nodes:
                if other is not node:
                    _run(
                        node.nsenter(
                            "ip", "route", "add", other.pod_cidr, "via", node_ip(other.index)
                        )
                    )

    def _record(self) -> None:
        data = {"nodes": [{"name": n.name, "socket": str(n.socket)} for n in self.nodes]}
        (self.directory / "nodes.json").write_text(json.dumps(data))

    def load_image(self, image: str) -> list[str]:
        """Load ``image`` (an archive, or a buildah/podman image) into every node."""
        return import_image([n.socket for n in self.nodes], image, work=self.directory)

    def logs(self) -> list[tuple[str, Path]]:
        """Each daemon's name and log file (for failed test reports)."""
        procs: list[_Process] = [*self._daemons]
        for node in self.nodes:
            procs += [p for p in (node.containerd, node.kubelet, node.kube_proxy) if p is not None]
        return [(p.name, p.log_path) for p in procs]

    def processes(self) -> list[tuple[str, int]]:
        """Each running daemon's name and process id (for measuring them)."""
        procs: list[_Process] = [*self._daemons]
        for node in self.nodes:
            procs += [p for p in (node.containerd, node.kubelet, node.kube_proxy) if p is not None]
        return [(p.name, p.proc.pid) for p in procs if p.alive() and p.proc is not None]

    # -- stop ----------------------------------------------------------------------------

    def stop(self, stop_timeout: float = 20.0) -> list[str]:
        """Stop everything and undo every host change; return (and keep) what was left.

        Safe on a set that failed half-way through :meth:`start`, and to call twice.
        """
        plane = self._plane
        scheduler = next((p for p in self._daemons if p.name == "kube-scheduler"), None)
        if scheduler is not None:
            scheduler.stop(stop_timeout)  # replacements of deleted Pods stay Pending
        if plane is not None and any(n.kubelet and n.kubelet.alive() for n in self.nodes):
            self._delete_pods(plane)
        for proc in self._daemons:
            proc.stop(stop_timeout)
        for node in self.nodes:
            for daemon in (node.kube_proxy, node.kubelet):
                if daemon is not None:
                    daemon.stop(stop_timeout)
            if node.containerd is not None and node.containerd.alive():
                # A deleted task ends its containerd-shim, which outlives containerd otherwise.
                for task in node.ctr("tasks", "ls", "-q", check=False).split():
                    node.ctr("tasks", "delete", "--force", task, check=False)
                for container in node.ctr("containers", "ls", "-q", check=False).split():
                    node.ctr("containers", "delete", container, check=False)
            if node.containerd is not None:
                node.containerd.stop(stop_timeout)
        self._undo_host_changes()
        self._plane = None
        return self.problems

    def _delete_pods(self, plane: ControlPlane) -> None:
        """Delete the nodes' Pods through the API, so the kubelets tear them down (CNI DEL)."""
        names = set(self.names)
        try:
            pods = plane._api_request("GET", "/api/v1/pods").get("items") or []
            for pod in pods:
                if (pod.get("spec") or {}).get("nodeName") in names:
                    meta = pod["metadata"]
                    with contextlib.suppress(urllib.error.HTTPError):
                        plane._api_request(
                            "DELETE",
                            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                            {"gracePeriodSeconds": 2},
                        )

            def gone() -> bool:
                items = plane._api_request("GET", "/api/v1/pods").get("items") or []
                return not any((p.get("spec") or {}).get("nodeName") in names for p in items)

            _wait("the nodes' Pods to be deleted", gone, 60, interval=0.5)
        except (NodesError, urllib.error.URLError, OSError) as exc:
            self.problems.append(f"Pods not deleted through the API ({exc}); killed instead")

    def _undo_host_changes(self) -> None:
        before = self._before
        for pid, cmdline in processes_mentioning(str(self.directory)):
            self.problems.append(f"process {pid} still ran, killed: {cmdline[:160]}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        # Mounts under the nodes' directory, deepest first: the kubelets' binds of their
        # root dirs, Pod volumes (tmpfs), overlay root filesystems, Pod netns binds.
        for mountpoint in sorted(
            {m for m in _mountpoints() if m.startswith(str(self.directory))}, key=len, reverse=True
        ):
            _run(["umount", mountpoint], check=False)
            if mountpoint in _mountpoints():
                _run(["umount", "-l", mountpoint], check=False)
        # Only tables this set added: with no state recorded (start never ran, or a
        # preflight refused it because another plane with nodes runs), the tables present
        # are that plane's.
        if before is not None:
            for table in _proxy_tables():
                if table not in before.get("nftables", ()):
                    _run(["nft", "delete", "table", *table.split()], check=False)
        for route in self._routes:
            _run(["ip", "route", "delete", route], check=False)
        for name in self._netns:
            _run(["ip", "netns", "delete", name], check=False)
        for link in self._links:
            _run(["ip", "link", "delete", link], check=False)
        self._routes, self._netns, self._links = [], [], []
        if before is None:
            return
        # A deleted namespace's veth goes when the kernel has cleaned the namespace up.
        with contextlib.suppress(NodesError):
            _wait(
                "the nodes' veths to go",
                lambda: host_state()["links"] == before["links"],
                15,
            )
        for cgroup in sorted(set(_cgroup_dirs()) - set(before["cgroups"]), reverse=True):
            for dirpath, _, _ in sorted(os.walk(cgroup), key=lambda w: len(w[0]), reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
        for name, value in before["sysctls"].items():
            path = Path("/proc/sys", name)
            with contextlib.suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value)
        for path_text, existed in before["paths"].items():
            path = Path(path_text)
            if existed or not path.exists():
                continue
            files = [p for p in path.rglob("*") if not p.is_dir()]
            if any(not p.is_symlink() and path_text != "/var/lib/cni" for p in files):
                self.problems.append(f"{path} has files the nodes left: {files[:5]}")
                continue
            if path_text in _mountpoints():  # /run/netns: `ip netns` makes it a mount
                _run(["umount", path_text], check=False)
            shutil.rmtree(path, ignore_errors=True)
        after = host_state(self.directory)
        self.problems.extend(leftovers(before, after, processes_mentioning(str(self.directory))))
        self._before = None
        if self._owns_record:
            _host_record().unlink(missing_ok=True)
            self._owns_record = False


def _host_record() -> Path:
    """Where a running NodeSet keeps the host's state from before it started."""
    return cache_dir() / "nodes" / "host-before.json"


def _restore(before: Mapping[str, Any]) -> list[str]:
    """Put back the sysctls in ``before`` and remove the host paths that did not exist."""
    done: list[str] = []
    for name, value in before.get("sysctls", {}).items():
        path = Path("/proc/sys", name)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value)
                done.append(f"sysctl {name}={value}")
    for path_text, existed in before.get("paths", {}).items():
        path = Path(path_text)
        if existed or not path.exists():
            continue
        if path_text in _mountpoints():
            _run(["umount", path_text], check=False)
        shutil.rmtree(path, ignore_errors=True)
        done.append(f"path {path_text}")
    return done


def clean_host() -> list[str]:
    """Remove what nodes of a plane that crashed left on the host; return what was removed.

    Kills the processes of ``setpoint-cp-*/nodes`` directories (containerd, its shims,
    kubelets) and then those still in a ``setpoint-node*`` cgroup (the containers a killed
    shim leaves behind, ``cgroup_processes``), unmounts their mounts, and deletes the
    ``setpoint-node*`` namespaces and cgroups, the ``setpoint*`` links and the routes
    through node addresses. Run it (``setpoint controlplane down --clean``) only when no
    plane with nodes runs. A cgroup that cannot be removed is not listed as removed.
    """
    removed: list[str] = []
    for pid, cmdline in [
        *processes_mentioning("/nodes/node"),
        *processes_mentioning("/nodes/host-kube-proxy.json"),
    ]:
        if "setpoint-cp-" in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
                removed.append(f"process {pid}: {cmdline[:100]}")
    time.sleep(0.5)
    orphans = cgroup_processes(_cgroup_dirs())
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
            removed.append(f"process {pid} in a node's cgroup")
    if orphans:
        time.sleep(0.5)  # the kernel empties the cgroups as the processes are reaped
    for mountpoint in sorted(
        {m for m in _mountpoints() if "/setpoint-cp-" in m and "/nodes/" in m},
        key=len,
        reverse=True,
    ):
        _run(["umount", mountpoint], check=False)
        if mountpoint in _mountpoints():
            _run(["umount", "-l", mountpoint], check=False)
        removed.append(f"mount {mountpoint}")
    for line in _run(["ip", "route", "show"], check=False).splitlines():
        if " via 10.213.0." in line:
            _run(["ip", "route", "delete", line.split()[0]], check=False)
            removed.append(f"route {line.strip()}")
    state = host_state()
    for name in state["netns"]:
        if name.startswith("setpoint-node"):
            _run(["ip", "netns", "delete", name], check=False)
            removed.append(f"netns {name}")
    for link in state["links"]:
        _run(["ip", "link", "delete", link], check=False)
        removed.append(f"link {link}")
    for cgroup in state["cgroups"]:
        for dirpath, _, _ in sorted(os.walk(cgroup), key=lambda w: len(w[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
        if not os.path.isdir(cgroup):
            removed.append(f"cgroup {cgroup}")
    record = _host_record()
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(record.read_text())
        removed += _restore(data["before"])
        for table in _proxy_tables():
            if table not in data["before"].get("nftables", ()):
                _run(["nft", "delete", "table", *table.split()], check=False)
                removed.append(f"nftables table {table}")
        directory = Path(data["directory"]).parent
        if directory.name.startswith("setpoint-cp-") and directory.is_dir():
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(f"directory {directory}")
    record.unlink(missing_ok=True)
    return removed


def _make_cgroup_root(path: str) -> None:
    """Create the cgroup ``path`` in every hierarchy: the kubelet requires its root to exist.

    A new cpuset cgroup starts with no CPUs and no memory nodes; it gets its parent's.
    """
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if not hierarchy.is_dir():
            continue
        target = hierarchy / path.strip("/")
        target.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (target / name).exists() and not (target / name).read_text().strip():
                (target / name).write_text((hierarchy / name).read_text())
