"""Issue 29 spike, now a thin caller of setpoint.testing.nodes: real nodes run real Pods.

Run by hand as root (``make node-spike``), never by ``make test``, ``make check`` or CI. It

1. builds kubelet, kube-proxy and kube-scheduler (``setpoint controlplane build --nodes``);
2. starts a control plane with ``--nodes N`` nodes (default 2) through
   ``ControlPlaneOptions(nodes=N)``, as ``setpoint controlplane up --nodes N`` does: the node
   logic lives in ``src/setpoint/testing/nodes.py``;
3. runs the spike's checks: a scheduled Pod (non-root, read-only root filesystem) turns Ready
   through its probes and ``kubectl logs`` returns its output; a Pod on the first node reaches
   a Pod on the last node by its IP and through a Service (kube-proxy), and kube-apiserver
   through the ``kubernetes`` Service; the host reaches that Pod by its IP (the path a webhook
   Service's ClusterIP takes through the host's kube-proxy); with ``--coredns``, CoreDNS built from
   its Go module resolves a Service's name; then each daemon's memory and CPU;
4. stops the plane and checks that no process, mount, network namespace, link, cgroup, sysctl
   change or host path is left (:func:`setpoint.testing.nodes.leftovers`); a leftover is
   reported and the exit code is 1.

What this machine needs and why is written up in docs/decisions/0021-nodes.md.

Usage::

    sudo .venv/bin/python scripts/node_spike.py [--nodes N] [--coredns]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from setpoint.testing.build import build_controlplane
from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    cache_dir,
    find_binaries,
    selected_kubernetes_version,
)
from setpoint.testing.nodes import (
    BUSYBOX_IMAGE,
    _layer,
    build_cni_plugins,
    cgroup_root,
    host_state,
    import_image,
    leftovers,
    node_ip,
    processes_mentioning,
    write_oci_archive,
)

TEST_IMAGE = BUSYBOX_IMAGE
"""The Pods' image: the nodes' busybox (setpoint.testing.nodes builds and loads it)."""

GREETING = "hello from a real pod on a setpoint node"
"""What the Pod prints; ``kubectl logs`` must return it."""

COREDNS_VERSION = "v1.15.0"
"""The CoreDNS module release ``--coredns`` builds (``go install``, no replace directives)."""

DNS_SERVICE_IP = "10.0.0.10"
"""The ``kube-dns`` Service's ClusterIP (``--coredns``)."""

SERVED = "served-by-server"
"""What the server Pod answers on port 8080."""

STARTED = time.monotonic()


class SpikeError(RuntimeError):
    """A check failed; the message names it and what was seen."""


def log(message: str) -> None:
    """Print one progress line with the time since the spike started."""
    print(f"[{time.monotonic() - STARTED:6.1f}s] {message}", flush=True)


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


class Spike:
    """The spike's checks against a plane with nodes."""

    def __init__(self, plane: ControlPlane, work: Path, coredns: Path | None) -> None:
        self.plane = plane
        self.work = work
        self.coredns = coredns
        assert plane.nodes is not None
        self.node_names = plane.nodes.names
        self.sockets = [n.directory / "containerd.sock" for n in plane.nodes.nodes]
        kubectl = find_binaries().kubectl
        if kubectl is None:
            raise SpikeError("kubectl is not built: run `make controlplane`")
        self.kubectl = str(kubectl)
        self.timings: dict[str, float] = {}
        self.idle_seconds = 10.0

    def kc(self, *args: str, check: bool = True) -> str:
        """Run kubectl against the plane."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.plane.kubeconfig_path),
            "KUBECACHEDIR": str(self.work / "kubectl-cache"),
        }
        return run([self.kubectl, *args], env=env, check=check)

    def apply(self, name: str, manifest: str) -> None:
        """Write ``manifest`` into the work directory and ``kubectl apply`` it."""
        path = self.work / f"{name}.json"
        path.write_text(manifest)
        self.kc("apply", "-f", str(path))

    def ctr(self, index: int, *args: str) -> str:
        """Run ctr against node ``index``'s containerd (from 0), namespace k8s.io."""
        return run(["ctr", "--address", str(self.sockets[index]), "-n", "k8s.io", *args])

    def check_kubelet_auth(self) -> None:
        """Each kubelet refuses an anonymous ``GET /pods`` (401)."""
        for index, name in enumerate(self.node_names, start=1):
            status = anonymous_kubelet_status(node_ip(index))
            if status != 401:
                raise SpikeError(
                    f"{name}'s kubelet answered an anonymous GET /pods with {status}, not 401"
                )
        log("kubelets refuse anonymous requests (401)")

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
        for index, name in enumerate(self.node_names):
            for line in self.ctr(index, "tasks", "ls").splitlines()[1:]:
                pid = line.split()[1]
                for entry in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                    if ":memory:" in entry:
                        path = entry.split(":", 2)[2]
                        if not path.startswith(cgroup_root(index + 1) + "/kubepods/"):
                            raise SpikeError(f"pid {pid} is in memory cgroup {path}")
                        log(f"{name} pid {pid}: memory cgroup {path}")

        first, last = self.node_names[0], self.node_names[-1]
        self.apply(
            "server",
            json.dumps(
                pod_on(
                    "server",
                    last,
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
        service_ip = self.kc("get", "service", "server", "-o", "jsonpath={.spec.clusterIP}")

        # The host to a Pod IP on the last node: the path kube-apiserver takes to a webhook.
        def host_reaches_pod() -> bool:
            try:
                with socket.create_connection((server_ip, 8080), timeout=3) as conn:
                    return SERVED in conn.recv(100).decode()
            except OSError:
                return False

        wait_for(f"the host to reach Pod {server_ip}:8080", host_reaches_pod, 20)
        report.append(f"host -> Pod {server_ip}:8080 on {last}: {SERVED}")
        script = (
            f"sleep 2; echo pod-ip; nc -w 3 {server_ip} 8080 </dev/null; sleep 1;"
            f" echo service; nc -w 3 {service_ip} 80 </dev/null;"
            " echo kubernetes-service;"
            " printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 10.0.0.1 443 | head -1;"
            " echo client-done; trap 'exit 0' TERM; while true; do sleep 1; done"
        )
        self.apply("client", json.dumps(pod_on("client", first, script)))
        self.wait_running("client")
        logs = self.logs_with("client", "client-done", timeout=30)
        if logs.count(SERVED) != 2 or "HTTP/1.0 400" not in logs:
            raise SpikeError(
                f"Pod client on {first} did not reach the server Pod on {last} by IP "
                f"and through Service {service_ip}, and kube-apiserver through 10.0.0.1 "
                f"(expected '{SERVED}' twice and kube-apiserver's 400 to plain HTTP):\n{logs}"
            )
        report.append(
            f"---- kubectl logs client (on {first}; server on {last}) ----\n" + logs.rstrip()
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
        import_image(self.sockets, str(archive), work=self.work)
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
        pod = pod_on("coredns", self.node_names[0], "")
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
        name = "server.default.svc.cluster.local"
        script = (
            f"sleep 2; nslookup {name} {dns_ip}; echo ---; nslookup {name} {DNS_SERVICE_IP};"
            " echo dns-done; trap 'exit 0' TERM; while true; do sleep 1; done"
        )
        self.apply("dnsclient", json.dumps(pod_on("dnsclient", self.node_names[-1], script)))
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

        assert self.plane.nodes is not None
        daemons = self.plane.nodes.processes()
        start = {name: cpu_ticks(pid) for name, pid in daemons}
        time.sleep(self.idle_seconds)
        hz = os.sysconf("SC_CLK_TCK")
        lines = [f"---- node daemons, {self.idle_seconds:.0f} s with the Pods running ----"]
        for name, pid in daemons:
            status = Path(f"/proc/{pid}/status").read_text()
            rss = next(x.split()[1] for x in status.splitlines() if x.startswith("VmRSS"))
            cpu = (cpu_ticks(pid) - start[name]) / hz / self.idle_seconds
            lines.append(f"{name:36s} RSS {int(rss) / 1024:4.0f} MiB  CPU {100 * cpu:4.1f}%")
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the spike; exit 0 when every check passed and nothing was left behind."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2, help="how many nodes (default: 2)")
    parser.add_argument(
        "--coredns",
        action="store_true",
        help=f"also build CoreDNS {COREDNS_VERSION} (once, ~3 min) and resolve a Service with it",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.nodes <= 9:
        parser.error("--nodes: 1 to 9")
    result = build_controlplane(version=selected_kubernetes_version(), nodes=True)
    for name, (_, seconds) in result.binaries.items():
        if seconds:
            log(f"built {name} in {seconds:.0f}s")
    coredns = build_coredns() if args.coredns else None
    build_cni_plugins(log=log)  # containerd's CNI bin_dir (once, ~10 s with a warm Go cache)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM and SIGINT both take the cleanup path

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    before = host_state()
    ok = False
    plane = ControlPlane(ControlPlaneOptions(nodes=args.nodes))
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="setpoint-node-spike-") as work:
        try:
            t = time.monotonic()
            plane.start()
            timings[f"plane and {args.nodes} node(s): start to all Ready"] = time.monotonic() - t
            spike = Spike(plane, Path(work), coredns)
            spike.check_kubelet_auth()
            print(spike.run_pods())
            timings.update(spike.timings)
            ok = True
        except (SpikeError, ControlPlaneError, subprocess.CalledProcessError) as exc:
            print(f"node spike FAILED: {exc}", file=sys.stderr)
        except KeyboardInterrupt:
            print("interrupted; cleaning up", file=sys.stderr)
        finally:
            # A second signal must not cut the cleanup short.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            t = time.monotonic()
            directory = str(plane.directory) if plane.running else ""
            plane.stop()
            timings["teardown"] = time.monotonic() - t
    problems = plane.node_leftovers + leftovers(
        before, host_state(), processes_mentioning(directory) if directory else ()
    )
    for name, seconds in timings.items():
        print(f"  {name:44s} {seconds:6.1f} s")
    if problems:
        print("LEFT BEHIND:", file=sys.stderr)
        for problem in problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print("clean: no process, mount, netns, link, cgroup or sysctl change left behind")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
