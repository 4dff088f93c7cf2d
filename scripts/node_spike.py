"""Issue 29 spike: one real node (kubelet + containerd + runc + CNI) runs one real Pod.

Run by hand as root (``make node-spike``), never by ``make test``, ``make check`` or CI. It

1. builds kubelet, kube-proxy and kube-scheduler from the control plane's Kubernetes Go
   modules (``setpoint controlplane build --nodes``: once, ~25 s with the plane's Go build
   cache warm), and a static ``pause`` binary;
2. starts a control plane of its own (or uses ``--kubeconfig``), a containerd with private
   root, state and socket, and a kubelet (cgroup v1 allowed, cgroupfs driver) whose Pods get
   addresses from Debian's CNI ``bridge`` + ``host-local`` plugins;
3. writes a pause image and a busybox test image as OCI archives (no registry, no base
   image, no image builder: the layers are tarred here) and imports them with ``ctr``;
4. lets kube-scheduler place a Pod (non-root, read-only root filesystem), waits for it to
   run and reads its output with ``kubectl logs``;
5. takes everything down again and checks that no process, mount, network namespace,
   network link, cgroup, sysctl change or file outside its work directory is left; a
   leftover is reported and the exit code is 1.

What this machine needs and why is written up in docs/decisions/0021-nodes.md.

Usage::

    sudo .venv/bin/python scripts/node_spike.py [--kubeconfig PATH] [--keep-workdir]

With ``--kubeconfig`` (an admin kubeconfig of a running plane) the node joins that plane;
``kubectl logs`` then works only if its kube-apiserver runs with
``--kubelet-preferred-address-types=InternalIP`` (the node's name does not resolve).
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
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from setpoint.testing.build import build_controlplane
from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneOptions,
    find_binaries,
    selected_kubernetes_version,
)

NODE_NAME = "setpoint-spike-node"
"""The Node's name (``--hostname-override``)."""

NODE_LINK = "spnode0"
"""A bridge with no ports that holds the node's address: the kernel here has no ``dummy``
driver, and the kubelet refuses a loopback node IP."""

NODE_IP = "10.213.0.2"
"""The node's InternalIP; kube-apiserver reaches the kubelet (logs, exec) there."""

CNI_BRIDGE = "spcni0"
"""The CNI bridge the Pods' veths are attached to."""

CGROUP_ROOT = "/setpoint-spike-node"
"""The kubelet's ``cgroupRoot``; its ``kubepods`` tree goes below it in every hierarchy."""

POD_CIDR = "10.244.0.0/24"
"""The Pods' addresses (CNI ``host-local``)."""

PAUSE_IMAGE = "localhost/setpoint/pause:spike"
"""The sandbox image, built here: containerd's ``sandbox_image``."""

TEST_IMAGE = "localhost/setpoint/busybox:spike"
"""The Pod's image: Debian's static busybox and a few applet links, nothing else."""

GREETING = "hello from a real pod on a setpoint node"
"""What the Pod prints; ``kubectl logs`` must return it."""

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
        for name in ("kubepods", "kubepods.slice", "k8s.io", CGROUP_ROOT.strip("/")):
            if (hierarchy / name).is_dir():
                found.add(str(hierarchy / name))
    return found


def make_cgroup_root() -> None:
    """Create :data:`CGROUP_ROOT` in every hierarchy: the kubelet requires it to exist.

    A new cpuset cgroup starts with no CPUs and no memory nodes; it gets its parent's.
    """
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if not hierarchy.is_dir():
            continue
        target = hierarchy / CGROUP_ROOT.strip("/")
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
    for applet in ("sh", "echo", "sleep", "cat", "id", "ls", "hostname", "nc", "wget"):
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
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{node}/cni/net.d"
"""


def cni_config(node: Path) -> str:
    """The CNI network: bridge + host-local (containerd adds loopback itself)."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "setpoint-spike",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": CNI_BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": f"{node}/cni/ipam",
                    },
                }
            ],
        },
        indent=2,
    )


def kubelet_config(node: Path) -> str:
    """KubeletConfiguration: cgroup v1 allowed, cgroupfs, its files under ``node``."""
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Kubernetes 1.35+ refuses to start on cgroup v1 unless told otherwise.
failCgroupV1: false
# containerd 1.6 has no RuntimeConfig CRI call, so the kubelet uses this (and logs it).
cgroupDriver: cgroupfs
# The node's Pods under a cgroup of their own, not /kubepods: a kubelet removes the pod
# cgroups it does not know, so two nodes on one host must not share a root.
cgroupRoot: {CGROUP_ROOT}
containerRuntimeEndpoint: unix://{node}/containerd.sock
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
# Spike only: the plane's kube-apiserver has no kubelet client certificate.
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
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
                    " trap 'exit 0' TERM; while true; do sleep 1; done",
                ],
                "securityContext": {
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    },
}


# --- the spike --------------------------------------------------------------------------


class Spike:
    """Everything the spike started, in the order it has to be taken down."""

    def __init__(self, work: Path, kubeconfig: Path | None) -> None:
        self.work = work
        self.node = work / "node"
        self.external_kubeconfig = kubeconfig
        self.plane: ControlPlane | None = None
        self.kubeconfig = kubeconfig
        self.kubectl = ""
        self.daemons: list[Daemon] = []
        self.links: list[str] = []
        self.before: dict[str, Any] = {}
        self.timings: dict[str, float] = {}

    def kc(self, *args: str, check: bool = True) -> str:
        """Run kubectl against the plane."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "KUBECACHEDIR": str(self.work / "kubectl-cache"),
        }
        return run([self.kubectl, *args], env=env, check=check)

    def ctr(self, *args: str, check: bool = True) -> str:
        """Run ctr against this node's containerd, namespace k8s.io."""
        return run(
            ["ctr", "--address", str(self.node / "containerd.sock"), "-n", "k8s.io", *args],
            check=check,
        )

    def start(self, bin_dir: Path) -> None:
        """Plane, network, containerd, images, kubelet, scheduler: up to a Ready node."""
        self.before = host_state()
        for name in (NODE_LINK, CNI_BRIDGE):
            if name in self.before["links"]:
                raise SpikeError(f"network link {name} exists already: another spike running?")
        version = selected_kubernetes_version()
        binaries = find_binaries(version)
        if binaries.kubectl is None:
            raise SpikeError("kubectl is not built: run `make controlplane`")
        self.kubectl = str(binaries.kubectl)
        if self.kubeconfig is None:
            t = time.monotonic()
            self.plane = ControlPlane(
                ControlPlaneOptions(
                    base_dir=self.work,
                    # The kubelet's Hostname address does not resolve; use its InternalIP.
                    apiserver_args={"kubelet-preferred-address-types": "InternalIP"},
                )
            )
            self.plane.start()
            self.kubeconfig = self.plane.kubeconfig_path
            self.timings["plane start"] = time.monotonic() - t
            log(f"control plane up at {self.plane.server}")

        for sub in ("cni/net.d", "containerd", "kubelet", "pod-logs"):
            (self.node / sub).mkdir(parents=True, exist_ok=True)
        run(["ip", "link", "add", NODE_LINK, "type", "bridge"])
        self.links.append(NODE_LINK)
        self.links.append(CNI_BRIDGE)  # created by the CNI bridge plugin with the first Pod
        run(["ip", "addr", "add", f"{NODE_IP}/32", "dev", NODE_LINK])
        run(["ip", "link", "set", NODE_LINK, "up"])

        (self.node / "containerd/config.toml").write_text(containerd_config(self.node))
        (self.node / "cni/net.d/10-spike.conflist").write_text(cni_config(self.node))
        t = time.monotonic()
        containerd = Daemon(
            "containerd",
            ["containerd", "--config", str(self.node / "containerd/config.toml")],
            self.node / "containerd.log",
        )
        self.daemons.append(containerd)
        wait_for(
            "containerd's socket",
            lambda: self.ctr("version", check=False) != "" or not containerd.alive(),
            30,
        )
        if not containerd.alive():
            raise SpikeError(f"containerd exited:\n{containerd.tail()}")
        self.timings["containerd start"] = time.monotonic() - t
        log(f"containerd {run(['containerd', '--version']).split()[2]} up")

        t = time.monotonic()
        pause = build_pause(self.work)
        for archive in build_images(self.work, pause):
            self.ctr("images", "import", str(archive))
        self.timings["images build + import"] = time.monotonic() - t
        log("images imported: " + ", ".join(self.ctr("images", "ls", "-q").split()[:2]))

        make_cgroup_root()
        (self.node / "kubelet/config.yaml").write_text(kubelet_config(self.node))
        t = time.monotonic()
        kubelet = Daemon(
            "kubelet",
            [
                str(bin_dir / "kubelet"),
                f"--config={self.node / 'kubelet/config.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.node / 'kubelet/root'}",
                f"--cert-dir={self.node / 'kubelet/pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
            self.node / "kubelet.log",
        )
        self.daemons.append(kubelet)

        def node_ready() -> bool:
            if not kubelet.alive():
                raise SpikeError(f"kubelet exited:\n{kubelet.tail()}")
            out = self.kc(
                "get",
                "node",
                NODE_NAME,
                "-o",
                'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                check=False,
            )
            return out.strip() == "True"

        wait_for("the node to be Ready", node_ready, 90)
        self.timings["kubelet start to node Ready"] = time.monotonic() - t
        log(f"node {NODE_NAME} Ready: " + self.kc("get", "node", "-o", "wide").splitlines()[-1])

        # The plane runs no node-lifecycle controller, so nothing lifts the not-ready taint
        # that TaintNodesByCondition put on the new Node; the scheduler would skip it.
        self.kc("taint", "node", NODE_NAME, "node.kubernetes.io/not-ready:NoSchedule-", check=False)
        scheduler = Daemon(
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
            self.node / "kube-scheduler.log",
        )
        self.daemons.append(scheduler)

    def run_pod(self) -> str:
        """Create the Pod, wait until it runs, return ``kubectl logs``."""
        manifest = self.work / "pod.json"
        manifest.write_text(json.dumps(POD))
        t = time.monotonic()
        self.kc("apply", "-f", str(manifest))

        def running() -> bool:
            phase = self.kc("get", "pod", "spike", "-o", "jsonpath={.status.phase}", check=False)
            if phase.strip() == "Failed":
                raise SpikeError("the Pod failed:\n" + self.kc("describe", "pod", "spike"))
            return phase.strip() == "Running"

        try:
            wait_for("the Pod to run", running, 60)
        except SpikeError as exc:
            events = self.kc("get", "events", "-n", "default", check=False)
            raise SpikeError(f"{exc}\n{events}") from exc
        self.timings["Pod created to Running"] = time.monotonic() - t
        log("Pod running: " + self.kc("get", "pod", "spike", "-o", "wide").splitlines()[-1])
        logs = ""

        def has_logs() -> bool:
            nonlocal logs
            try:
                logs = self.kc("logs", "spike")
            except SpikeError as exc:
                logs = str(exc)
            return GREETING in logs

        try:
            wait_for("the Pod's output in kubectl logs", has_logs, 20)
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
        # Where runc put the Pod's processes: below the node's own cgroup root.
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            pid = line.split()[1]
            for entry in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                if ":memory:" in entry:
                    path = entry.split(":", 2)[2]
                    if not path.startswith(CGROUP_ROOT + "/kubepods/"):
                        raise SpikeError(
                            f"pid {pid} is in memory cgroup {path}, not below {CGROUP_ROOT}"
                        )
                    log(f"pid {pid}: memory cgroup {path}")
        for daemon in self.daemons:
            status = Path(f"/proc/{daemon.proc.pid}/status").read_text()
            rss = next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))
            log(f"{daemon.name} RSS {int(rss) / 1024:.0f} MiB")
        return logs

    def teardown(self) -> list[str]:
        """Stop everything and undo every host change; return what could not be undone."""
        problems: list[str] = []
        t = time.monotonic()
        kubelet_alive = any(d.name == "kubelet" and d.alive() for d in self.daemons)
        if self.kubectl and self.kubeconfig and kubelet_alive:
            # Deleting through the API lets the kubelet stop the sandbox (CNI DEL).
            self.kc(
                "delete",
                "pod",
                "spike",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
                check=False,
            )
        for daemon in reversed(self.daemons):
            if daemon.name != "containerd":
                daemon.stop()
        if self.kubectl and self.kubeconfig and self.plane is None:
            self.kc("delete", "node", NODE_NAME, "--ignore-not-found", check=False)
        if (self.node / "containerd.sock").exists():
            # Whatever the kubelet left (stopped sandboxes wait for its garbage collector):
            # a deleted task ends its containerd-shim, which outlives containerd otherwise.
            for task in self.ctr("tasks", "ls", "-q", check=False).split():
                self.ctr("tasks", "delete", "--force", task, check=False)
            for container in self.ctr("containers", "ls", "-q", check=False).split():
                self.ctr("containers", "delete", container, check=False)
        for daemon in self.daemons:
            if daemon.name == "containerd":
                daemon.stop()
        if self.plane is not None:
            self.plane.stop()
        for pid, cmdline in processes_mentioning(str(self.work)):
            problems.append(f"process {pid} still running, killed: {cmdline[:160]}")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # Mounts under the work dir, deepest first: the kubelet's rshared bind of its root
        # dir, Pod volumes (tmpfs), overlay root filesystems, Pod netns bind mounts.
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
        for link in self.links:
            run(["ip", "link", "delete", link], check=False)
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
                if path_text == "/run/netns" and self._mounted(path_text):
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
    missing = [tool for tool in ("containerd", "ctr", "runc", "ip", "go") if not shutil.which(tool)]
    if not (CNI_BIN_DIR / "bridge").is_file():
        missing.append(f"{CNI_BIN_DIR}/bridge")
    if missing:
        raise SpikeError(
            f"missing: {', '.join(missing)}. Install with: apt-get install containerd runc "
            "containernetworking-plugins iptables busybox-static iproute2 (and Go 1.26)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the spike; exit 0 when the Pod ran, its logs were read and nothing was left."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="use this running plane instead of starting one (admin kubeconfig)",
    )
    parser.add_argument("--keep-workdir", action="store_true", help="keep the logs and configs")
    args = parser.parse_args(argv)
    try:
        check_machine()
    except SpikeError as exc:
        print(f"node spike: {exc}", file=sys.stderr)
        return 2
    version = selected_kubernetes_version()
    bin_dir = build_node_binaries(version)
    ok = False
    with work_directory(args.keep_workdir) as work:
        spike = Spike(work, args.kubeconfig)
        try:
            spike.start(bin_dir)
            logs = spike.run_pod()
            print(
                "---- kubectl logs spike ----\n" + logs.rstrip() + "\n----------------------------"
            )
            ok = True
        except (SpikeError, subprocess.CalledProcessError) as exc:
            print(f"node spike FAILED: {exc}", file=sys.stderr)
            for daemon in spike.daemons:
                print(f"--- {daemon.name} log tail ---\n{daemon.tail()}", file=sys.stderr)
        except KeyboardInterrupt:
            print("interrupted; cleaning up", file=sys.stderr)
        finally:
            problems = spike.teardown()
        for name, seconds in spike.timings.items():
            print(f"  {name:30s} {seconds:6.1f} s")
        if problems:
            print("LEFT BEHIND (cleaned where possible):", file=sys.stderr)
            for problem in problems:
                print(f"  - {problem}", file=sys.stderr)
            return 1
        print("clean: no process, mount, netns, link, cgroup or sysctl change left behind")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
