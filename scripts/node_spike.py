"""Issue 29 spike: real nodes (kubelet + containerd + runc + CNI) run real Pods.

Run by hand as root (``make node-spike``), never by ``make test``, ``make check`` or CI. It

1. builds kubelet, kube-proxy and kube-scheduler from the control plane's Kubernetes Go
   modules (``setpoint controlplane build --nodes``: once, ~25 s with the plane's Go build
   cache warm), and a static ``pause`` binary;
2. starts a control plane of its own (or uses ``--kubeconfig``) and ``--nodes N`` nodes
   (default 2). Each node is a network namespace with a veth on one host bridge, and in it
   a containerd with private root, state and socket, a kubelet (cgroup v1 allowed, cgroupfs
   driver, a cgroup root of its own) whose Pods get addresses from Debian's CNI ``bridge``
   + ``host-local`` plugins, and a kube-proxy. kube-apiserver listens on loopback only, so
   ``socat`` relays the bridge address to it; the ``kubernetes`` Service points there;
3. writes a pause image and a busybox test image as OCI archives (no registry, no base
   image, no image builder: the layers are tarred here) and imports them with ``ctr``;
4. lets kube-scheduler place a Pod (non-root, read-only root filesystem) and reads its
   output with ``kubectl logs``; then, from a Pod on the first node, reaches a Pod on the
   last node by its IP and through a Service (kube-proxy), and kube-apiserver through the
   ``kubernetes`` Service; and reaches that Pod from the host by its IP (the path a webhook
   Service takes with ``--enable-aggregator-routing``);
5. takes everything down again and checks that no process, mount, network namespace,
   network link, cgroup, sysctl change or file outside its work directory is left; a
   leftover is reported and the exit code is 1.

What this machine needs and why is written up in docs/decisions/0021-nodes.md.

Usage::

    sudo .venv/bin/python scripts/node_spike.py [--nodes N] [--coredns]
        [--proxy-mode iptables|nftables] [--kubeconfig PATH] [--keep-workdir]

``--coredns`` also builds CoreDNS from its Go module (once, ~3 minutes), runs it as a Pod
behind a ``kube-dns`` Service and resolves a Service's name through it.

With ``--kubeconfig`` (an admin kubeconfig of a running setpoint plane) the nodes join that
plane; ``kubectl logs`` then works only if its kube-apiserver runs with
``--kubelet-preferred-address-types=InternalIP`` (the nodes' names do not resolve).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from setpoint.testing.build import build_controlplane
from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneOptions,
    cache_dir,
    find_binaries,
    selected_kubernetes_version,
)
from setpoint.tls.certs import CertificateAuthority

HOST_BRIDGE = "spbr0"
"""The host bridge every node's veth is attached to."""

HOST_IP = "10.213.0.1"
"""The host's address on :data:`HOST_BRIDGE`: the relay to kube-apiserver listens here."""

RELAY_PORT = 6443
"""The relay's port on :data:`HOST_IP`."""

CLUSTER_CIDR = "10.244.0.0/16"
"""All Pods' addresses; node ``i`` has ``10.244.i.0/24``."""

DNS_SERVICE_IP = "10.0.0.10"
"""The ``kube-dns`` Service's ClusterIP (``--coredns``)."""

API_SERVER_NAME = "kubernetes.default.svc"
"""A name in kube-apiserver's serving certificate, for clients that reach it by relay."""


def node_name(index: int) -> str:
    """Node ``index``'s name (``--hostname-override``)."""
    return f"setpoint-spike-node{index}"


def node_ip(index: int) -> str:
    """Node ``index``'s InternalIP, on :data:`HOST_BRIDGE`.

    kube-apiserver reaches its kubelet there (the kubelet refuses a loopback node IP).
    """
    return f"10.213.0.{10 + index}"


def pod_cidr(index: int) -> str:
    """Node ``index``'s Pod addresses (CNI ``host-local``)."""
    return f"10.244.{index}.0/24"


def cgroup_root(index: int) -> str:
    """Node ``index``'s kubelet ``cgroupRoot``.

    A kubelet removes the pod cgroups it does not know, so two nodes on one host must not
    share one.
    """
    return f"/setpoint-spike-node{index}"


def netns_name(index: int) -> str:
    """Node ``index``'s network namespace (``/run/netns/<name>``)."""
    return f"setpoint-spike-{index}"


def veth_name(index: int) -> str:
    """The host end of node ``index``'s veth (the other end is ``eth0`` in its namespace)."""
    return f"spv{index}"


PAUSE_IMAGE = "localhost/setpoint/pause:spike"
"""The sandbox image, built here: containerd's ``sandbox_image``."""

TEST_IMAGE = "localhost/setpoint/busybox:spike"
"""The Pod's image: Debian's static busybox and a few applet links, nothing else."""

GREETING = "hello from a real pod on a setpoint node"
"""What the Pod prints; ``kubectl logs`` must return it."""

COREDNS_VERSION = "v1.15.0"
"""The CoreDNS module release ``--coredns`` builds (``go install``, no replace directives)."""

SERVED = "served-by-server"
"""What the server Pod answers on port 8080."""

CNI_BIN_DIR = Path("/usr/lib/cni")
"""Where Debian's containernetworking-plugins puts the CNI plugins."""

# Sysctls the kubelet sets at start (protectKernelDefaults=false) and the CNI bridge
# plugin sets (isGateway): restored afterwards.
WATCHED_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)

# Host paths the runtime stack creates whatever it is told (containerd 1.6's shim sockets
# and fifos, runc's root, libcni's cache, the kubelet's /var/log/containers links).
WATCHED_PATHS = (
    Path("/run/containerd"),
    Path("/var/lib/cni"),
    Path("/var/log/containers"),
    Path("/var/log/pods"),
    Path("/run/netns"),
)

PAUSE_GO = """\
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


class SpikeError(RuntimeError):
    """A step failed; the message names it and what was seen."""


def log(message: str) -> None:
    """Print one progress line with the time since the spike started."""
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


STARTED = time.monotonic()


def run(argv: list[str], *, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run a command, return its stdout; raise SpikeError with its output if it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if check and proc.returncode != 0:
        raise SpikeError(
            f"`{' '.join(argv)}` exited {proc.returncode}: {(proc.stderr or proc.stdout)[-2000:]}"
        )
    return proc.stdout


def wait_for(what: str, probe: Callable[[], bool], timeout: float, interval: float = 0.5) -> float:
    """Poll ``probe`` until it is true; return the seconds it took, or raise SpikeError."""
    start = time.monotonic()
    while True:
        if probe():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise SpikeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Daemon:
    """A long-running child (containerd, kubelet, kube-scheduler) with its log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - the script starts no threads
        )

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def tail(self, lines: int = 15) -> str:
        """The last lines of its log, for error messages."""
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# --- the host's state, before and after -------------------------------------------------


def _cgroup_dirs() -> set[str]:
    root = Path("/sys/fs/cgroup")
    found: set[str] = set()
    for hierarchy in root.iterdir():
        if not hierarchy.is_dir():
            continue
        for entry in hierarchy.iterdir():
            if entry.is_dir() and (
                entry.name in ("kubepods", "kubepods.slice", "k8s.io")
                or entry.name.startswith("setpoint-spike-node")
            ):
                found.add(str(entry))
    return found


def make_cgroup_root(path: str) -> None:
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


def host_state() -> dict[str, Any]:
    """What the spike may disturb: mounts, netns, links, cgroups, sysctls, host paths."""
    mounts = sorted(
        line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    netns = (
        sorted(p.name for p in Path("/run/netns").iterdir()) if Path("/run/netns").is_dir() else []
    )
    links = sorted(
        line.split()[0] for line in run(["ip", "-br", "link"]).splitlines() if line.strip()
    )
    sysctls = {name: Path("/proc/sys", name).read_text().strip() for name in WATCHED_SYSCTLS}
    paths = {str(p): p.exists() for p in WATCHED_PATHS}
    return {
        "mounts": mounts,
        "netns": netns,
        "links": links,
        "cgroups": sorted(_cgroup_dirs()),
        "sysctls": sysctls,
        "paths": paths,
    }


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Processes whose command line contains ``text`` (the spike's unique work directory)."""
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


# --- building ---------------------------------------------------------------------------


def build_node_binaries(version: str) -> Path:
    """Kubelet and kube-scheduler (and kube-proxy): ``setpoint controlplane build --nodes``.

    Built once into the release's cache from the plane's own Go module; cached afterwards.
    """
    result = build_controlplane(version=version, nodes=True)
    for name, (_, seconds) in result.binaries.items():
        if seconds:
            log(f"built {name} in {seconds:.0f}s")
    return result.bin_dir


def build_coredns() -> Path:
    """CoreDNS from its Go module into ``<cache>/coredns/<version>/bin`` (once; ~3 minutes)."""
    bin_dir = cache_dir() / "coredns" / COREDNS_VERSION / "bin"
    binary = bin_dir / "coredns"
    if not binary.is_file():
        log(f"building CoreDNS {COREDNS_VERSION} into {bin_dir} (go install; a few minutes)")
        start = time.monotonic()
        subprocess.run(
            [
                "go",
                "install",
                "-trimpath",
                "-ldflags",
                "-s -w",
                f"github.com/coredns/coredns@{COREDNS_VERSION}",
            ],
            env={**os.environ, "CGO_ENABLED": "0", "GOBIN": str(bin_dir)},
            check=True,
        )
        log(f"built CoreDNS in {time.monotonic() - start:.0f}s")
    return binary


COREFILE = """.:53 {
    errors
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
"""


def build_pause(work: Path) -> Path:
    """A static pause binary from a 20-line Go program."""
    src = work / "pause-src"
    src.mkdir()
    (src / "go.mod").write_text("module setpoint.dev/pause\n\ngo 1.22\n")
    (src / "main.go").write_text(PAUSE_GO)
    out = work / "pause"
    env = {**os.environ, "CGO_ENABLED": "0"}
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out), "."],
        cwd=src,
        env=env,
        check=True,
    )
    return out


# --- images -----------------------------------------------------------------------------


def _is_static_elf(path: Path) -> bool:
    data = path.read_bytes()
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


def _layer(files: dict[str, tuple[bytes | None, int, str | None]]) -> bytes:
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


def write_oci_archive(path: Path, ref: str, layer_tar: bytes, config: dict[str, Any]) -> None:
    """An OCI image layout tarball with one gzip layer, named ``ref`` for ``ctr import``."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest, len(data)

    layer_gz = gzip.compress(layer_tar, mtime=0)
    layer_digest, layer_size = blob(layer_gz)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
        },
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
                "digest": layer_digest,
                "size": layer_size,
            }
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
    files: dict[str, bytes] = {
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


def build_images(work: Path, pause: Path) -> list[Path]:
    """The pause image and the busybox test image, as OCI archives in ``work``."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if not busybox.is_file() or not _is_static_elf(busybox):
        raise SpikeError(f"{busybox} is missing or not static: apt-get install busybox-static")
    pause_archive = work / "pause.oci.tar"
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
    for applet in ("sh", "echo", "sleep", "cat", "id", "ls", "hostname", "nc", "wget", "httpd"):
        files[f"bin/{applet}"] = (None, 0o777, "busybox")
    test_archive = work / "busybox.oci.tar"
    write_oci_archive(
        test_archive,
        TEST_IMAGE,
        _layer(files),
        {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/bin"], "User": "65534:65534"},
    )
    return [pause_archive, test_archive]


# --- configuration files ----------------------------------------------------------------


def containerd_config(node: Path) -> str:
    """The config of containerd 1.6: everything under ``node``, runc with cgroupfs."""
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
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{node}/cni/net.d"
"""


def cni_config(node: Path, subnet: str) -> str:
    """The CNI network: bridge + host-local (containerd adds loopback itself).

    The bridge lives in the node's namespace, so its name and the ``ip_forward`` the plugin
    sets (``isGateway``) are the node's, not the host's.
    """
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "setpoint-spike",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": f"{node}/cni/ipam",
                    },
                }
            ],
        },
        indent=2,
    )


def kubelet_config(node: Path, index: int, client_ca: Path | None = None) -> str:
    """KubeletConfiguration: cgroup v1 allowed, cgroupfs, its files under ``node``.

    With ``client_ca`` the kubelet takes only clients with a certificate from that CA
    (kube-apiserver's kubelet client certificate) or a token, and asks kube-apiserver
    whether they may (webhook authorization). Without it (a plane the spike did not start,
    whose kube-apiserver has no kubelet client certificate): anonymous and AlwaysAllow.
    """
    if client_ca is not None:
        auth = f"""authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {client_ca}}}
authorization:
  mode: Webhook"""
    else:
        auth = """authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow"""
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Kubernetes 1.35+ refuses to start on cgroup v1 unless told otherwise.
failCgroupV1: false
# containerd 1.6 has no RuntimeConfig CRI call, so the kubelet uses this (and logs it).
cgroupDriver: cgroupfs
# The node's Pods under a cgroup of their own, not /kubepods: a kubelet removes the pod
# cgroups it does not know, so two nodes on one host must not share a root.
cgroupRoot: {cgroup_root(index)}
containerRuntimeEndpoint: unix://{node}/containerd.sock
address: {node_ip(index)}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
{auth}
podLogsDir: {node}/pod-logs
resolvConf: /etc/resolv.conf
failSwapOn: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
"""


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "spike", "namespace": "default"},
    "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
        "terminationGracePeriodSeconds": 2,
        "containers": [
            {
                "name": "hello",
                "image": TEST_IMAGE,
                "imagePullPolicy": "Never",
                "command": [
                    "/bin/sh",
                    "-c",
                    f"echo '{GREETING}'; id; ls /var/run/secrets/kubernetes.io/serviceaccount;"
                    " echo ok > /www/healthz; exec httpd -f -p 8081 -h /www",
                ],
                "securityContext": {
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
                # Probes the kubelet runs from the node's namespace to the Pod's IP.
                "readinessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8081},
                    "periodSeconds": 1,
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 8081},
                    "periodSeconds": 2,
                },
                "volumeMounts": [{"name": "www", "mountPath": "/www"}],
            }
        ],
        "volumes": [{"name": "www", "emptyDir": {}}],
    },
}


def kube_proxy_config(kubeconfig: Path, index: int, mode: str = "iptables") -> str:
    """KubeProxyConfiguration in ``mode`` (iptables or nftables).

    Its rules live in the node's network namespace.
    """
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


def anonymous_kubelet_status(ip: str) -> int:
    """The HTTP status a kubelet gives ``GET /pods`` from a client with no credentials."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the kubelet's serving certificate is self-signed
    try:
        with urllib.request.urlopen(f"https://{ip}:10250/pods", context=context, timeout=5):
            return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def pod_on(name: str, node: str, script: str) -> dict[str, Any]:
    """A copy of :data:`POD` named ``name``, bound to ``node``, running ``script``."""
    pod: dict[str, Any] = json.loads(json.dumps(POD))
    pod["metadata"] = {"name": name, "namespace": "default", "labels": {"app": name}}
    pod["spec"]["nodeName"] = node
    container = pod["spec"]["containers"][0]
    container["command"] = ["/bin/sh", "-c", script]
    for key in ("readinessProbe", "livenessProbe", "volumeMounts"):
        del container[key]
    del pod["spec"]["volumes"]
    return pod


def endpoint_slice(
    name: str, service: str, address: str, port: int, port_name: str, *, protocol: str = "TCP"
) -> str:
    """An EndpointSlice written by hand: the plane runs no EndpointSlice controller."""
    return json.dumps(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": service},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": port_name, "port": port, "protocol": protocol}],
        }
    )


# --- the spike --------------------------------------------------------------------------


class Node:
    """One node: its namespace, directory and daemons (containerd, kubelet, kube-proxy)."""

    def __init__(self, work: Path, index: int) -> None:
        self.index = index
        self.name = node_name(index)
        self.dir = work / f"node{index}"
        self.daemons: list[Daemon] = []

    def nsenter(self, *argv: str) -> list[str]:
        """``argv``, to be run in the node's network namespace.

        Mounts and cgroups stay the host's: ``ip netns exec`` would remount ``/sys`` and
        hide the cgroup hierarchies.
        """
        return ["nsenter", f"--net=/run/netns/{netns_name(self.index)}", *argv]

    def ctr(self, *args: str, check: bool = True) -> str:
        """Run ctr against this node's containerd, namespace k8s.io."""
        sock = str(self.dir / "containerd.sock")
        return run(["ctr", "--address", sock, "-n", "k8s.io", *args], check=check)


class Spike:
    """Everything the spike started, in the order it has to be taken down."""

    def __init__(
        self, work: Path, kubeconfig: Path | None, nodes: int, coredns: Path | None = None
    ) -> None:
        self.work = work
        self.coredns = coredns
        self.proxy_mode = "iptables"
        self.kubelet_client_ca: Path | None = None
        self.external = kubeconfig is not None
        self.plane: ControlPlane | None = None
        self.kubeconfig = kubeconfig
        self.kubectl = ""
        self.nodes = [Node(work, index) for index in range(1, nodes + 1)]
        self.daemons: list[Daemon] = []  # the relay and kube-scheduler
        self.netns: list[str] = []
        self.routes: list[str] = []
        self.links: list[str] = []
        self.before: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self.idle_seconds = 10.0

    def all_daemons(self) -> list[Daemon]:
        """Every daemon started, nodes' first."""
        return [d for node in self.nodes for d in node.daemons] + self.daemons

    def kc(self, *args: str, check: bool = True) -> str:
        """Run kubectl against the plane."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "KUBECACHEDIR": str(self.work / "kubectl-cache"),
        }
        return run([self.kubectl, *args], env=env, check=check)

    def apply(self, name: str, manifest: str) -> None:
        """Write ``manifest`` into the work directory and ``kubectl apply`` it."""
        path = self.work / f"{name}.json"
        path.write_text(manifest)
        self.kc("apply", "-f", str(path))

    def start(self, bin_dir: Path) -> None:
        """Plane, relay, images, then each node; wait until every node is Ready."""
        self.before = host_state()
        taken = [
            n
            for n in [HOST_BRIDGE] + [veth_name(i.index) for i in self.nodes]
            if n in self.before["links"]
        ] + [netns_name(i.index) for i in self.nodes if netns_name(i.index) in self.before["netns"]]
        if taken:
            raise SpikeError(f"{', '.join(taken)} exist already: another spike running?")
        binaries = find_binaries(selected_kubernetes_version())
        if binaries.kubectl is None:
            raise SpikeError("kubectl is not built: run `make controlplane`")
        self.kubectl = str(binaries.kubectl)
        if self.kubeconfig is None:
            t = time.monotonic()
            # kube-apiserver's client certificate for the kubelets (logs, exec, probes of
            # the API), from a CA of the spike's own that the kubelets trust.
            ca = CertificateAuthority()
            pair = ca.client_cert("kube-apiserver-kubelet-client", ("system:masters",))
            self.kubelet_client_ca = self.work / "kubelet-client-ca.crt"
            self.kubelet_client_ca.write_bytes(ca.cert_pem)
            cert, key = self.work / "kubelet-client.crt", self.work / "kubelet-client.key"
            cert.write_bytes(pair.cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(pair.key_pem)
            self.plane = ControlPlane(
                ControlPlaneOptions(
                    base_dir=self.work,
                    apiserver_args={
                        # The nodes' Hostname addresses do not resolve; use their InternalIP.
                        "kubelet-preferred-address-types": "InternalIP",
                        # Webhooks' service: clientConfigs go to the endpoints' Pod IPs.
                        "enable-aggregator-routing": "true",
                        "kubelet-client-certificate": str(cert),
                        "kubelet-client-key": str(key),
                    },
                )
            )
            self.plane.start()
            self.kubeconfig = self.plane.kubeconfig_path
            self.timings["plane start"] = time.monotonic() - t
            log(f"control plane up at {self.plane.server}")
        server = self.kc(
            "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"
        )
        api_port = server.rsplit(":", 1)[1].strip("/")

        run(["ip", "link", "add", HOST_BRIDGE, "type", "bridge"])
        self.links.append(HOST_BRIDGE)
        run(["ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_BRIDGE])
        run(["ip", "link", "set", HOST_BRIDGE, "up"])
        relay = Daemon(
            "relay",
            [
                "socat",
                f"TCP-LISTEN:{RELAY_PORT},bind={HOST_IP},fork,reuseaddr",
                f"TCP:127.0.0.1:{api_port}",
            ],
            self.work / "relay.log",
        )
        self.daemons.append(relay)
        config = json.loads(self.kc("config", "view", "--minify", "--raw", "-o", "json"))
        config["clusters"][0]["cluster"]["server"] = f"https://{HOST_IP}:{RELAY_PORT}"
        config["clusters"][0]["cluster"]["tls-server-name"] = API_SERVER_NAME
        node_kubeconfig = self.work / "node.kubeconfig"
        node_kubeconfig.touch(mode=0o600)
        node_kubeconfig.write_text(json.dumps(config))
        # The plane runs no endpoint reconciler: point the kubernetes Service at the relay.
        self.apply(
            "kubernetes-endpoints",
            endpoint_slice("kubernetes-setpoint-spike", "kubernetes", HOST_IP, RELAY_PORT, "https"),
        )

        t = time.monotonic()
        archives = build_images(self.work, build_pause(self.work))
        self.timings["images build"] = time.monotonic() - t
        t = time.monotonic()
        for node in self.nodes:
            self.start_node(node, bin_dir, node_kubeconfig, archives)
        for node in self.nodes:
            kubelet = node.daemons[1]

            def ready(node: Node = node, kubelet: Daemon = kubelet) -> bool:
                if not kubelet.alive():
                    raise SpikeError(f"{node.name}'s kubelet exited:\n{kubelet.tail()}")
                out = self.kc(
                    "get",
                    "node",
                    node.name,
                    "-o",
                    'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                    check=False,
                )
                return out.strip() == "True"

            wait_for(f"{node.name} to be Ready", ready, 90)
            # The plane runs no node-lifecycle controller, so nothing lifts the not-ready
            # taint that TaintNodesByCondition put on the new Node.
            self.kc(
                "taint", "node", node.name, "node.kubernetes.io/not-ready:NoSchedule-", check=False
            )
        self.timings[f"{len(self.nodes)} node(s): start to all Ready"] = time.monotonic() - t
        if self.kubelet_client_ca is not None:
            for node in self.nodes:
                status = anonymous_kubelet_status(node_ip(node.index))
                if status != 401:
                    raise SpikeError(
                        f"{node.name}'s kubelet answered an anonymous GET /pods with {status}, "
                        "not 401: it must take only kube-apiserver's client certificate"
                    )
            log("kubelets refuse anonymous requests (401)")
        for line in self.kc("get", "nodes", "-o", "wide").splitlines():
            log(line)
        self.daemons.append(
            Daemon(
                "kube-scheduler",
                [
                    str(bin_dir / "kube-scheduler"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}",
                    "--bind-address=127.0.0.1",
                    "--secure-port=0",
                    "--leader-elect=false",
                ],
                self.work / "kube-scheduler.log",
            )
        )

    def start_node(self, node: Node, bin_dir: Path, kubeconfig: Path, images: list[Path]) -> None:
        """Namespace, veth, routes, cgroup root, containerd, images, kubelet, kube-proxy."""
        i = node.index
        for sub in ("cni/net.d", "containerd", "kubelet", "pod-logs"):
            (node.dir / sub).mkdir(parents=True, exist_ok=True)
        run(["ip", "netns", "add", netns_name(i)])
        self.netns.append(netns_name(i))
        run(
            [
                "ip",
                "link",
                "add",
                veth_name(i),
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                netns_name(i),
            ]
        )
        run(["ip", "link", "set", veth_name(i), "master", HOST_BRIDGE, "up"])
        run(node.nsenter("ip", "addr", "add", f"{node_ip(i)}/24", "dev", "eth0"))
        run(node.nsenter("ip", "link", "set", "eth0", "up"))
        run(node.nsenter("ip", "link", "set", "lo", "up"))
        run(node.nsenter("ip", "route", "add", "default", "via", HOST_IP))
        # Pods on other nodes: straight over the bridge, so the host need not forward.
        for other in self.nodes:
            if other is not node:
                run(
                    node.nsenter(
                        "ip", "route", "add", pod_cidr(other.index), "via", node_ip(other.index)
                    )
                )
        # The host (kube-apiserver, webhooks) reaches this node's Pods through the node.
        run(["ip", "route", "add", pod_cidr(i), "via", node_ip(i)])
        self.routes.append(pod_cidr(i))

        (node.dir / "containerd/config.toml").write_text(containerd_config(node.dir))
        (node.dir / "cni/net.d/10-spike.conflist").write_text(cni_config(node.dir, pod_cidr(i)))
        containerd = Daemon(
            f"{node.name} containerd",
            node.nsenter("containerd", "--config", str(node.dir / "containerd/config.toml")),
            node.dir / "containerd.log",
        )
        node.daemons.append(containerd)
        wait_for(
            f"{node.name}'s containerd",
            lambda: node.ctr("version", check=False) != "" or not containerd.alive(),
            30,
        )
        if not containerd.alive():
            raise SpikeError(f"{node.name}'s containerd exited:\n{containerd.tail()}")
        for archive in images:
            node.ctr("images", "import", str(archive))

        make_cgroup_root(cgroup_root(i))
        (node.dir / "kubelet/config.yaml").write_text(
            kubelet_config(node.dir, i, self.kubelet_client_ca)
        )
        node.daemons.append(
            Daemon(
                f"{node.name} kubelet",
                node.nsenter(
                    str(bin_dir / "kubelet"),
                    f"--config={node.dir / 'kubelet/config.yaml'}",
                    f"--kubeconfig={kubeconfig}",
                    f"--root-dir={node.dir / 'kubelet/root'}",
                    f"--cert-dir={node.dir / 'kubelet/pki'}",
                    f"--hostname-override={node.name}",
                    f"--node-ip={node_ip(i)}",
                    "--v=1",
                ),
                node.dir / "kubelet.log",
            )
        )
        (node.dir / "kube-proxy.json").write_text(kube_proxy_config(kubeconfig, i, self.proxy_mode))
        node.daemons.append(
            Daemon(
                f"{node.name} kube-proxy",
                node.nsenter(
                    str(bin_dir / "kube-proxy"), f"--config={node.dir / 'kube-proxy.json'}", "--v=1"
                ),
                node.dir / "kube-proxy.log",
            )
        )

    def wait_running(self, name: str) -> None:
        """Wait until Pod ``name`` runs; on failure, say why with the Pod's events."""

        def running() -> bool:
            phase = self.kc("get", "pod", name, "-o", "jsonpath={.status.phase}", check=False)
            if phase.strip() == "Failed":
                raise SpikeError(f"Pod {name} failed:\n" + self.kc("describe", "pod", name))
            return phase.strip() == "Running"

        try:
            wait_for(f"Pod {name} to run", running, 60)
        except SpikeError as exc:
            events = self.kc("get", "events", "-n", "default", check=False)
            raise SpikeError(f"{exc}\n{events}") from exc

    def logs_with(self, name: str, expected: str, timeout: float = 20) -> str:
        """``kubectl logs name`` once it contains ``expected``."""
        logs = ""

        def has() -> bool:
            nonlocal logs
            try:
                logs = self.kc("logs", name)
            except SpikeError as exc:
                logs = str(exc)
            return expected in logs

        try:
            wait_for(f"{expected!r} in the logs of Pod {name}", has, timeout)
        except SpikeError as exc:
            hint = ""
            if "no such host" in logs:
                hint = (
                    "\nkube-apiserver reaches kubelets by their Hostname address first, which"
                    " does not resolve here: give it --kubelet-preferred-address-types="
                    "InternalIP (the spike's own plane has it; `setpoint controlplane up`"
                    " does not), or run without --kubeconfig"
                )
            raise SpikeError(f"{exc}; last answer: {logs.strip()[-400:]}{hint}") from exc
        return logs

    def run_pods(self) -> str:
        """The scheduled Pod and its logs, then the network checks; returns a report."""
        t = time.monotonic()
        self.apply("spike", json.dumps(POD))
        self.wait_running("spike")
        self.timings["Pod created to Running"] = time.monotonic() - t
        log("Pod running: " + self.kc("get", "pod", "spike", "-o", "wide").splitlines()[-1])
        report = ["---- kubectl logs spike ----", self.logs_with("spike", GREETING).rstrip()]

        def ready() -> bool:
            out = self.kc(
                "get",
                "pod",
                "spike",
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                check=False,
            )
            return out.strip() == "True"

        wait_for("Pod spike to be Ready (the kubelet's HTTP readiness probe)", ready, 30)
        self.timings["Pod created to Ready (probe)"] = time.monotonic() - t
        report.append("Pod spike Ready: the kubelet's HTTP readiness probe passed")
        # Where runc put the Pod's processes: below its node's own cgroup root.
        for node in self.nodes:
            for line in node.ctr("tasks", "ls").splitlines()[1:]:
                pid = line.split()[1]
                for entry in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                    if ":memory:" in entry:
                        path = entry.split(":", 2)[2]
                        if not path.startswith(cgroup_root(node.index) + "/kubepods/"):
                            raise SpikeError(f"pid {pid} is in memory cgroup {path}")
                        log(f"{node.name} pid {pid}: memory cgroup {path}")

        first, last = self.nodes[0], self.nodes[-1]
        self.apply(
            "server",
            json.dumps(
                pod_on(
                    "server",
                    last.name,
                    f"trap 'exit 0' TERM; while true; do echo {SERVED} | nc -l -p 8080; done",
                )
            ),
        )
        self.wait_running("server")
        server_ip = self.kc("get", "pod", "server", "-o", "jsonpath={.status.podIP}").strip()
        self.apply(
            "server-service",
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "server", "namespace": "default"},
                    "spec": {
                        "selector": {"app": "server"},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                    },
                }
            ),
        )
        self.apply(
            "server-endpoints", endpoint_slice("server-spike", "server", server_ip, 8080, "http")
        )
        service_ip = self.kc("get", "service", "server", "-o", "jsonpath={.spec.clusterIP}")

        # The host to a Pod IP on the last node: the path kube-apiserver takes to a webhook.
        def host_reaches_pod() -> bool:
            try:
                with socket.create_connection((server_ip, 8080), timeout=3) as conn:
                    return SERVED in conn.recv(100).decode()
            except OSError:
                return False

        wait_for(f"the host to reach Pod {server_ip}:8080", host_reaches_pod, 20)
        report.append(f"host -> Pod {server_ip}:8080 on {last.name}: {SERVED}")
        script = (
            f"sleep 2; echo pod-ip; nc -w 3 {server_ip} 8080 </dev/null; sleep 1;"
            f" echo service; nc -w 3 {service_ip} 80 </dev/null;"
            " echo kubernetes-service;"
            " printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 10.0.0.1 443 | head -1;"
            " echo client-done; trap 'exit 0' TERM; while true; do sleep 1; done"
        )
        self.apply("client", json.dumps(pod_on("client", first.name, script)))
        self.wait_running("client")
        logs = self.logs_with("client", "client-done", timeout=30)
        if logs.count(SERVED) != 2 or "HTTP/1.0 400" not in logs:
            raise SpikeError(
                f"Pod client on {first.name} did not reach the server Pod on {last.name} by IP "
                f"and through Service {service_ip}, and kube-apiserver through 10.0.0.1 "
                f"(expected '{SERVED}' twice and kube-apiserver's 400 to plain HTTP):\n{logs}"
            )
        report.append(
            f"---- kubectl logs client (on {first.name}; server on {last.name}) ----\n"
            + logs.rstrip()
        )
        if self.coredns is not None:
            report.append(self.run_dns(self.coredns, service_ip))
        report.append(self.measure_idle())
        return "\n".join(report)

    def run_dns(self, coredns: Path, service_ip: str) -> str:
        """CoreDNS as a Pod behind a ``kube-dns`` Service; a Pod resolves Service ``server``."""
        archive = self.work / "coredns.oci.tar"
        write_oci_archive(
            archive,
            "localhost/setpoint/coredns:spike",
            _layer({"coredns": (coredns.read_bytes(), 0o755, None)}),
            {"Entrypoint": ["/coredns"], "User": "65534:65534"},
        )
        for node in self.nodes:
            node.ctr("images", "import", str(archive))
        self.apply(
            "coredns-config",
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "coredns", "namespace": "default"},
                    "data": {"Corefile": COREFILE},
                }
            ),
        )
        self.apply(
            "coredns-rbac",
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": [
                        {
                            "apiVersion": "rbac.authorization.k8s.io/v1",
                            "kind": "ClusterRole",
                            "metadata": {"name": "setpoint-spike-coredns"},
                            "rules": [
                                {
                                    "apiGroups": [""],
                                    "resources": ["services", "namespaces", "pods"],
                                    "verbs": ["list", "watch"],
                                },
                                {
                                    "apiGroups": ["discovery.k8s.io"],
                                    "resources": ["endpointslices"],
                                    "verbs": ["list", "watch"],
                                },
                            ],
                        },
                        {
                            "apiVersion": "rbac.authorization.k8s.io/v1",
                            "kind": "ClusterRoleBinding",
                            "metadata": {"name": "setpoint-spike-coredns"},
                            "roleRef": {
                                "apiGroup": "rbac.authorization.k8s.io",
                                "kind": "ClusterRole",
                                "name": "setpoint-spike-coredns",
                            },
                            "subjects": [
                                {
                                    "kind": "ServiceAccount",
                                    "name": "default",
                                    "namespace": "default",
                                }
                            ],
                        },
                    ],
                }
            ),
        )
        pod = pod_on("coredns", self.nodes[0].name, "")
        container = pod["spec"]["containers"][0]
        del container["command"]
        container["image"] = "localhost/setpoint/coredns:spike"
        container["args"] = ["-conf", "/etc/coredns/Corefile"]
        container["volumeMounts"] = [{"name": "config", "mountPath": "/etc/coredns"}]
        container["readinessProbe"] = {"httpGet": {"path": "/ready", "port": 8181}}
        pod["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "coredns"}}]
        # Port 53 as non-root, without a capability: a namespaced, "safe" sysctl.
        pod["spec"]["securityContext"]["sysctls"] = [
            {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}
        ]
        t = time.monotonic()
        self.apply("coredns", json.dumps(pod))
        self.wait_running("coredns")

        def ready() -> bool:
            out = self.kc(
                "get",
                "pod",
                "coredns",
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                check=False,
            )
            return out.strip() == "True"

        wait_for("CoreDNS to be Ready", ready, 60)
        self.timings["CoreDNS Pod created to Ready"] = time.monotonic() - t
        dns_ip = self.kc("get", "pod", "coredns", "-o", "jsonpath={.status.podIP}").strip()
        self.apply(
            "kube-dns",
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "kube-dns", "namespace": "default"},
                    "spec": {
                        "clusterIP": DNS_SERVICE_IP,
                        "selector": {"app": "coredns"},
                        "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}],
                    },
                }
            ),
        )
        self.apply(
            "kube-dns-endpoints",
            endpoint_slice("kube-dns-spike", "kube-dns", dns_ip, 53, "dns", protocol="UDP"),
        )
        name = "server.default.svc.cluster.local"
        script = (
            f"sleep 2; nslookup {name} {dns_ip}; echo ---; nslookup {name} {DNS_SERVICE_IP};"
            " echo dns-done; trap 'exit 0' TERM; while true; do sleep 1; done"
        )
        self.apply("dnsclient", json.dumps(pod_on("dnsclient", self.nodes[-1].name, script)))
        self.wait_running("dnsclient")
        logs = self.logs_with("dnsclient", "dns-done", timeout=30)
        if logs.count(f"Address: {service_ip}") != 2:
            raise SpikeError(
                f"CoreDNS did not resolve {name} to {service_ip} through its Pod IP {dns_ip} "
                f"and through Service {DNS_SERVICE_IP}:\n{logs}"
            )
        return f"---- CoreDNS {COREDNS_VERSION}: nslookup {name} ----\n{logs.rstrip()}"

    def measure_idle(self) -> str:
        """Each daemon's memory, and its CPU over :attr:`idle_seconds` with the Pods running."""

        def cpu_ticks(pid: int) -> int:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime

        daemons = [d for d in self.all_daemons() if d.alive()]
        start = {d.name: cpu_ticks(d.proc.pid) for d in daemons}
        time.sleep(self.idle_seconds)
        hz = os.sysconf("SC_CLK_TCK")
        lines = [f"---- node daemons, {self.idle_seconds:.0f} s with the Pods running ----"]
        for daemon in daemons:
            status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
            rss = next(x.split()[1] for x in status.splitlines() if x.startswith("VmRSS"))
            cpu = (cpu_ticks(daemon.proc.pid) - start[daemon.name]) / hz / self.idle_seconds
            lines.append(f"{daemon.name:36s} RSS {int(rss) / 1024:4.0f} MiB  CPU {100 * cpu:4.1f}%")
        return "\n".join(lines)

    def teardown(self) -> list[str]:
        """Stop everything and undo every host change; return what could not be undone."""
        problems: list[str] = []
        t = time.monotonic()
        if (
            self.kubectl
            and self.kubeconfig
            and any(d.alive() for n in self.nodes for d in n.daemons)
        ):
            # Deleting through the API lets the kubelets stop the sandboxes (CNI DEL).
            self.kc(
                "delete",
                "pod",
                "spike",
                "server",
                "client",
                "coredns",
                "dnsclient",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
                "--grace-period=2",
                check=False,
            )
        if self.kubectl and self.kubeconfig and self.external:
            for kind, names in (
                ("service", ("server", "kube-dns")),
                ("endpointslice", ("server-spike", "kube-dns-spike", "kubernetes-setpoint-spike")),
                ("configmap", ("coredns",)),
                ("clusterrolebinding", ("setpoint-spike-coredns",)),
                ("clusterrole", ("setpoint-spike-coredns",)),
            ):
                self.kc("delete", kind, *names, "--ignore-not-found", check=False)
            for node in self.nodes:
                self.kc("delete", "node", node.name, "--ignore-not-found", check=False)
        for daemon in self.daemons:
            daemon.stop()
        for node in self.nodes:
            for daemon in node.daemons[1:]:  # kube-proxy, kubelet
                daemon.stop()
            if node.daemons and (node.dir / "containerd.sock").exists():
                # Whatever the kubelet left (stopped sandboxes wait for its garbage collector):
                # a deleted task ends its containerd-shim, which outlives containerd otherwise.
                for task in node.ctr("tasks", "ls", "-q", check=False).split():
                    node.ctr("tasks", "delete", "--force", task, check=False)
                for container in node.ctr("containers", "ls", "-q", check=False).split():
                    node.ctr("containers", "delete", container, check=False)
            if node.daemons:
                node.daemons[0].stop()
        if self.plane is not None:
            self.plane.stop()
        for pid, cmdline in processes_mentioning(str(self.work)):
            problems.append(f"process {pid} still running, killed: {cmdline[:160]}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Mounts under the work dir, deepest first: the kubelets' rshared binds of their root
        # dirs, Pod volumes (tmpfs), overlay root filesystems, Pod netns bind mounts.
        for mountpoint in sorted(
            {
                line.split()[4]
                for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if line.split()[4].startswith(str(self.work))
            },
            key=len,
            reverse=True,
        ):
            run(["umount", mountpoint], check=False)
            if self._mounted(mountpoint):
                run(["umount", "-l", mountpoint], check=False)
        for route in self.routes:
            run(["ip", "route", "delete", route], check=False)
        for name in self.netns:
            run(["ip", "netns", "delete", name], check=False)
        for link in self.links:
            run(["ip", "link", "delete", link], check=False)
        # A deleted namespace's veth goes when the kernel has cleaned the namespace up.
        with contextlib.suppress(SpikeError):
            wait_for(
                "the nodes' veths to go",
                lambda: host_state()["links"] == self.before.get("links"),
                15,
            )
        for cgroup in sorted(
            set(_cgroup_dirs()) - set(self.before.get("cgroups", [])), reverse=True
        ):
            for dirpath, _, _ in sorted(os.walk(cgroup), key=lambda w: len(w[0]), reverse=True):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
        for name, value in self.before.get("sysctls", {}).items():
            path = Path("/proc/sys", name)
            if path.read_text().strip() != value:
                path.write_text(value)
        for path_text, existed in self.before.get("paths", {}).items():
            path = Path(path_text)
            if not existed and path.exists():
                # Only what the stack left empty or holding its own traces: these paths did
                # not exist before the spike.
                leftovers = [p for p in path.rglob("*") if not p.is_dir()]
                if any(not p.is_symlink() and path_text != "/var/lib/cni" for p in leftovers):
                    problems.append(f"{path} has files: {leftovers[:5]}")
                    continue
                if self._mounted(path_text):  # /run/netns: `ip netns` makes it a mount
                    run(["umount", path_text], check=False)
                shutil.rmtree(path, ignore_errors=True)
        self.timings["teardown"] = time.monotonic() - t
        after = host_state()
        for key in ("mounts", "netns", "links", "cgroups", "sysctls", "paths"):
            if after[key] != self.before.get(key, after[key]):
                problems.append(f"{key} differ: before {self.before[key]!r}, after {after[key]!r}")
        return problems

    @staticmethod
    def _mounted(path: str) -> bool:
        return any(
            line.split()[4] == path
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
        )


@contextlib.contextmanager
def work_directory(keep: bool) -> Iterator[Path]:
    """A private directory for everything the spike writes; removed unless ``keep``."""
    path = Path(tempfile.mkdtemp(prefix="setpoint-node-spike-"))
    try:
        yield path
    finally:
        if keep:
            print(f"work directory kept: {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def check_machine() -> None:
    """Root, and the distribution's packages: say what to install when one is missing."""
    if os.geteuid() != 0:
        raise SpikeError("run as root: the kubelet and containerd manage mounts and cgroups")
    tools = ("containerd", "ctr", "runc", "ip", "nsenter", "socat", "iptables", "go")
    missing = [tool for tool in tools if not shutil.which(tool)]
    if not (CNI_BIN_DIR / "bridge").is_file():
        missing.append(f"{CNI_BIN_DIR}/bridge")
    if missing:
        raise SpikeError(
            f"missing: {', '.join(missing)}. Install with: apt-get install containerd runc "
            "containernetworking-plugins iptables socat busybox-static iproute2 (and Go 1.26)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the spike; exit 0 when every check passed and nothing was left behind."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="how many nodes (default: 2)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="use this running setpoint plane instead of starting one (admin kubeconfig)",
    )
    parser.add_argument("--keep-workdir", action="store_true", help="keep the logs and configs")
    parser.add_argument(
        "--coredns",
        action="store_true",
        help=f"also build CoreDNS {COREDNS_VERSION} (once, ~3 min) and resolve a Service with it",
    )
    parser.add_argument(
        "--proxy-mode",
        choices=("iptables", "nftables"),
        default="iptables",
        help="kube-proxy's mode (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 9:
        parser.error("--nodes: 1 to 9")
    try:
        check_machine()
    except SpikeError as exc:
        print(f"node spike: {exc}", file=sys.stderr)
        return 2
    bin_dir = build_node_binaries(selected_kubernetes_version())
    coredns = build_coredns() if args.coredns else None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM and SIGINT both take the cleanup path

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    ok = False
    with work_directory(args.keep_workdir) as work:
        spike = Spike(work, args.kubeconfig, args.nodes, coredns)
        spike.proxy_mode = args.proxy_mode
        try:
            spike.start(bin_dir)
            print(spike.run_pods())
            ok = True
        except (SpikeError, subprocess.CalledProcessError) as exc:
            print(f"node spike FAILED: {exc}", file=sys.stderr)
            for daemon in spike.all_daemons():
                print(f"--- {daemon.name} log tail ---\n{daemon.tail()}", file=sys.stderr)
        except KeyboardInterrupt:
            print("interrupted; cleaning up", file=sys.stderr)
        finally:
            # A second signal must not cut the cleanup short.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            problems = spike.teardown()
        for name, seconds in spike.timings.items():
            print(f"  {name:36s} {seconds:6.1f} s")
        if problems:
            print("LEFT BEHIND (cleaned where possible):", file=sys.stderr)
            for problem in problems:
                print(f"  - {problem}", file=sys.stderr)
            return 1
        print("clean: no process, mount, netns, link, cgroup or sysctl change left behind")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
