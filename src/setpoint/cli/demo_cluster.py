"""``setpoint demo --nodes N``: the tenants operator deployed as users deploy it, on real nodes.

The plain ``setpoint demo`` runs the operator as a host process beside a control plane
without nodes. This form takes the path a user of kind and kubebuilder's e2e takes, on a
local plane with N worker nodes (``ControlPlaneOptions(nodes=N)``, docs/controlplane.md
"Nodes"), as root (``sudo make demo-cluster``):

1. Checks root, the distribution's packages (``make cluster-deps``) and the node binaries,
   and that no other plane with nodes (or a crashed run's leftovers) holds the names,
   before anything starts.
2. Starts the plane with N nodes (kubelet, containerd, kube-proxy each) and shows them.
3. Builds the tenants image here (:func:`~setpoint.testing.image.build_image`: no registry)
   and loads it into every node's runtime, as ``kind load`` does.
4. ``kubectl apply -k`` of an overlay over ``examples/tenants/config/default`` with 2
   replicas (written to a temporary directory, never into the checkout), and waits for both
   Pods to be Ready (the kubelet runs their probes); shows which one holds the Lease and
   that the operator injected its own CA into the CRD's conversion webhook and the
   validating webhook, both reached through the webhook Service.
5. Creates a Tenant at ``v1alpha1`` (converted through the webhook Service), reads it at
   ``v1`` and waits until it is Ready.
6. Runs a Pod in the Tenant's namespace and shows it counted in the Tenant's quota usage.
7. Deletes the leader Pod and prints how long the other replica took to lead.
8. Stops the plane and its nodes and checks the host: no process, mount, network
   namespace, link, cgroup or sysctl change may be left; anything that is, is removed as
   ``setpoint controlplane down --clean`` does, and the demo fails.

The steps are also what ``tests/cluster/test_tenants_deploy.py`` runs:
:class:`TenantsDeployment` and the functions beside it are the one implementation both use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from setpoint.cli.demo import (
    DemoError,
    Screen,
    _ensure_binaries,
    _report_failure,
    _terminate_on_sigterm,
    operator_path,
)
from setpoint.testing.controlplane import ControlPlaneError

if TYPE_CHECKING:
    from setpoint.testing.controlplane import ControlPlane
    from setpoint.testing.image import ImageResult

__all__ = [
    "DEPLOYMENT",
    "IMAGE",
    "LEASE",
    "NAMESPACE",
    "SELECTOR",
    "WEBHOOK_SERVICE",
    "Takeover",
    "TenantsDeployment",
    "build_tenants_image",
    "check_host",
    "config_dir",
    "kube_time",
    "run_demo",
    "sleeper_pod",
    "tenant_manifest",
    "tenant_v1alpha1_manifest",
    "wait_until",
    "write_overlay",
]

T = TypeVar("T")

IMAGE: Final = "tenants-operator:latest"
"""The tenants image's name, as ``config/manager`` names it."""
NAMESPACE: Final = "tenants-system"
"""Where ``config/default`` puts the operator."""
DEPLOYMENT: Final = "tenants-controller-manager"
"""The operator's Deployment (``config/manager`` with the ``tenants-`` name prefix)."""
LEASE: Final = "tenants-leader-election"
"""The replicas' leader election Lease, in :data:`NAMESPACE`."""
SELECTOR: Final = "app.kubernetes.io/name=tenants-operator"
"""The label selector of the operator's Pods."""
WEBHOOK_SERVICE: Final = "tenants-webhook-service"
"""The Service kube-apiserver calls the conversion and admission webhooks through."""
DEMO_TENANT: Final = "hooli"
"""The Tenant the cluster demo writes at v1alpha1; its namespace runs the counted Pod."""
REPLICAS: Final = 2
STEP_TIMEOUT: Final = 120.0
"""Seconds a step may take (2 replicas Ready on a loaded 2-core machine: ~20-40 s)."""

OVERLAY: Final = """\
# Written by setpoint demo --nodes / tests/cluster: config/default with {replicas} replicas.
resources:
- {base}
patches:
- patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: {deployment}
      namespace: {ns}
    spec:
      replicas: {replicas}
      template:
        spec:
          volumes:
          - name: directory
            emptyDir: {{}}
            persistentVolumeClaim: null
# Each replica keeps its own directory file: the claim for one shared file goes.
- patch: |
    $patch: delete
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata:
      name: tenants-directory
      namespace: {ns}
"""
"""The kustomization over ``config/default``: N replicas, the tenant directory on an emptyDir.

The default keeps the directory (a SQLite file standing for an external system) on a
single-writer volume claim, which only one replica can mount.
"""


def config_dir() -> Path:
    """``examples/tenants/config/default``, beside the operator the demo runs."""
    return operator_path().parent / "config" / "default"


def write_overlay(directory: Path, replicas: int = REPLICAS) -> Path:
    """Write :data:`OVERLAY` as ``directory/kustomization.yaml``; return ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    # kustomize takes no absolute paths for bases: a relative one from the overlay.
    base = os.path.relpath(config_dir(), directory)
    (directory / "kustomization.yaml").write_text(
        OVERLAY.format(base=base, deployment=DEPLOYMENT, ns=NAMESPACE, replicas=replicas)
    )
    return directory


def tenant_manifest(name: str, namespaces: list[str]) -> dict[str, Any]:
    """A ``v1`` Tenant owning ``namespaces``, with a small quota."""
    return {
        "apiVersion": "tenants.setpoint.dev/v1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "namespaces": namespaces,
            "adminGroup": f"{name}-admins",
            "quota": {"cpu": "2", "memory": "2Gi", "pods": 5},
        },
    }


def tenant_v1alpha1_manifest(name: str, namespaces: list[str]) -> dict[str, Any]:
    """The same Tenant as a client of the old API version writes it (``v1alpha1``)."""
    return {
        "apiVersion": "tenants.setpoint.dev/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {
            "namespaces": namespaces,
            "admins": f"{name}-admins",
            "cpuQuota": "2",
            "memoryQuota": "2Gi",
            "podQuota": 5,
            "network": "Isolated",
        },
    }


def sleeper_pod(name: str, namespace: str) -> dict[str, Any]:
    """A Pod that runs (the nodes' busybox, built here) and counts against a quota."""
    from setpoint.testing.nodes import BUSYBOX_IMAGE

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
            "containers": [
                {
                    "name": "sleep",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sleep", "3600"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def wait_until(what: str, probe: Callable[[], T], timeout: float = 90.0) -> T:
    """Poll ``probe`` every half second until it returns something truthy; return that.

    Raises:
        DemoError: ``timeout`` seconds passed; the message names ``what`` and the last value.

    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise DemoError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def kube_time(text: str) -> float:
    """Seconds since the epoch of a Kubernetes (Micro)Time such as a Lease's acquireTime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True, slots=True)
class Takeover:
    """The leader Pod deleted, and the other replica leading."""

    old: str
    """The deleted leader Pod."""
    new: str
    """The Pod that holds the Lease now."""
    seconds: float
    """From the delete to the new holder's ``acquireTime`` (the API server's clock)."""
    lease_seconds: int
    """The Lease's duration: the bound a takeover without release would take."""


class TenantsDeployment:
    """The tenants operator deployed from ``config/`` on a plane with nodes, driven by kubectl.

    ``kubectl`` is the plane's kubectl binary and ``kubeconfig`` its admin kubeconfig;
    ``cache_dir`` (optional) is kubectl's discovery cache (``KUBECACHEDIR``), so a run
    writes nothing under the user's ``~/.kube``.
    """

    def __init__(self, kubectl: str, kubeconfig: str, *, cache_dir: Path | None = None) -> None:
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir

    def env(self) -> dict[str, str]:
        """The environment for kubectl: this plane's kubeconfig (and cache directory)."""
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        if self.cache_dir is not None:
            env["KUBECACHEDIR"] = str(self.cache_dir)
        return env

    def kc(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Run ``kubectl ARGS``; return its output.

        Raises:
            DemoError: it failed (unless ``check`` is false); the message has its error.

        """
        proc = subprocess.run(
            [self.kubectl, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=STEP_TIMEOUT,
            check=False,
        )
        if check and proc.returncode != 0:
            raise DemoError(f"kubectl {' '.join(args)}: {(proc.stderr or proc.stdout).strip()}")
        return proc.stdout

    def apply(self, obj: dict[str, Any]) -> str:
        """``kubectl apply -f -`` of one object."""
        return self.kc("apply", "-f", "-", stdin=json.dumps(obj))

    def json(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, decoded."""
        return json.loads(self.kc("get", *args, "-o", "json"))

    def pods(self) -> list[dict[str, Any]]:
        """The operator's Pods."""
        return list(self.json("-n", NAMESPACE, "pods", "-l", SELECTOR)["items"])

    def lease(self) -> dict[str, Any]:
        """The leader election Lease's spec."""
        return dict(self.json("-n", NAMESPACE, "lease", LEASE)["spec"])

    def leader_pod(self) -> str:
        """The Pod whose replica holds the Lease (its identity is ``<pod>_<uuid>``)."""
        return str(self.lease().get("holderIdentity") or "").split("_", 1)[0]

    def diagnose(self) -> str:
        """The nodes, workloads and the operator's last log lines, for an error message."""
        state = self.kc(
            "get", "nodes,pods,deploy,rs,svc,endpointslices", "-A", "-o", "wide", check=False
        )
        logs = self.kc("-n", NAMESPACE, "logs", "-l", SELECTOR, "--tail=15", check=False)
        return f"{state}\n{logs}"

    def wait(self, *args: str, timeout: float = STEP_TIMEOUT) -> None:
        """``kubectl wait ARGS``.

        Raises:
            DemoError: it timed out or failed; the message has :meth:`diagnose`.

        """
        proc = subprocess.run(
            [self.kubectl, "wait", *args, f"--timeout={timeout:.0f}s"],
            capture_output=True,
            text=True,
            env=self.env(),
            check=False,
        )
        if proc.returncode != 0:
            raise DemoError(f"kubectl wait {' '.join(args)}: {proc.stderr}\n{self.diagnose()}")

    def deploy(self, overlay: Path) -> str:
        """``kubectl apply -k overlay``; return kubectl's lines (one per object)."""
        return self.kc("apply", "-k", str(overlay))

    def available(self, replicas: int = REPLICAS) -> None:
        """Wait until the Deployment is Available with ``replicas`` Ready (the kubelet's probes)."""
        self.wait("-n", NAMESPACE, f"deployment/{DEPLOYMENT}", "--for=condition=Available")
        self.wait(
            "-n",
            NAMESPACE,
            f"deployment/{DEPLOYMENT}",
            f"--for=jsonpath={{.status.readyReplicas}}={replicas}",
        )

    def tenant_ready(self, name: str) -> bool:
        """Whether Tenant ``name`` is Ready for its current generation."""
        obj = self.json("tenant", name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(
            c["type"] == "Ready"
            and c["status"] == "True"
            and c.get("observedGeneration") == obj["metadata"]["generation"]
            for c in conditions
        )

    def usage(self, tenant: str, namespace: str) -> dict[str, str]:
        """Tenant ``tenant``'s quota usage in ``namespace`` (from its status), or ``{}``."""
        usage = (self.json("tenant", tenant).get("status") or {}).get("usage") or []
        return next((u for u in usage if u["namespace"] == namespace), {})

    def usage_counting(self, tenant: str, namespace: str, *, pods: int) -> dict[str, str]:
        """:meth:`usage` once it counts ``pods`` Pods, else ``{}`` (for :func:`wait_until`)."""
        usage = self.usage(tenant, namespace)
        return usage if usage.get("pods") == str(pods) else {}

    def leader_other_than(self, old: str, timeout: float = 90.0) -> str:
        """Wait until a replica other than ``old`` holds the Lease; return its Pod's name."""

        def other() -> str:
            pod = self.leader_pod()
            return pod if pod != old else ""

        return wait_until(f"a replica other than {old} to hold the Lease", other, timeout)

    def delete_leader(self, timeout: float = 90.0) -> Takeover:
        """``kubectl delete pod`` of the leader; wait for the other replica to lead.

        The deleted replica releases the Lease on SIGTERM, so the other one takes it well
        within the Lease's duration. The time is measured from just before the delete to
        the Lease's new ``acquireTime`` (both on this host's clock).
        """
        old = self.leader_pod()
        lease_seconds = int(self.lease()["leaseDurationSeconds"])
        deleted_at = time.time()
        self.kc("-n", NAMESPACE, "delete", "pod", old, "--wait=false")
        new = self.leader_other_than(old, timeout)
        acquired = kube_time(self.lease()["acquireTime"])
        return Takeover(old, new, acquired - deleted_at, lease_seconds)


def build_tenants_image(
    archive: Path, progress: Callable[[str], None] | None = None
) -> ImageResult:
    """Build the tenants operator's image (:data:`IMAGE`) into the OCI archive ``archive``."""
    from setpoint.testing.image import build_image

    project = operator_path().parent
    if progress is None:
        return build_image(archive, project=project, module="tenants", ref=IMAGE)
    return build_image(archive, project=project, module="tenants", ref=IMAGE, progress=progress)


# -- the demo -------------------------------------------------------------------------------------


def check_host(
    nodes: int,
    *,
    euid: int | None = None,
    which: Callable[[str], str | None] = shutil.which,
) -> None:
    """What the cluster demo needs before anything starts: root and the packages.

    The node binaries and free names (no other plane with nodes) are checked next, by
    :meth:`~setpoint.testing.nodes.NodeSet.preflight`, still before anything starts.

    Raises:
        DemoError: not root (the message names ``sudo make demo-cluster``).
        NodesError: a package is missing (the message names it and ``make cluster-deps``);
            ``nodes`` out of range.

    """
    from setpoint.testing.nodes import NodesError, check_machine, check_node_count

    check_node_count(nodes)
    if (os.geteuid() if euid is None else euid) != 0:
        raise DemoError(
            f"`setpoint demo --nodes {nodes}` needs root: the nodes' kubelet and containerd "
            "manage mounts, cgroups and network namespaces. Run `sudo make demo-cluster` "
            "(it also installs what nodes need), or the plain `setpoint demo`, which needs no root"
        )
    check_machine(euid=0, which=which)
    if which("debootstrap") is None:
        raise NodesError(
            "the tenants image's base is built with debootstrap, which is not installed: "
            "`make cluster-deps` (or `make demo-cluster`) installs it"
        )


def _preflight_nodes(nodes: int) -> None:
    """The nodes' own checks (binaries, names taken), before the plane starts anything."""
    from setpoint.testing.controlplane import cache_dir, find_binaries, selected_kubernetes_version
    from setpoint.testing.nodes import NodeSet

    bin_dir = find_binaries().kube_apiserver.parent
    if not (bin_dir / "kubelet").is_file():
        bin_dir = cache_dir() / "controlplane" / selected_kubernetes_version() / "bin"
    NodeSet(nodes, Path("/nonexistent"), bin_dir=bin_dir).preflight()


def _show_nodes(d: TenantsDeployment, screen: Screen) -> None:
    screen.line(f"  {'NODE':<16} {'INTERNAL-IP':<13} {'POD-CIDR':<15} {'READY':<6} KUBELET")
    for node in d.json("nodes")["items"]:
        status = node.get("status") or {}
        ip = next(
            (a["address"] for a in status.get("addresses") or [] if a["type"] == "InternalIP"), "-"
        )
        ready = next(
            (c["status"] for c in status.get("conditions") or [] if c["type"] == "Ready"), "-"
        )
        version = (status.get("nodeInfo") or {}).get("kubeletVersion", "-")
        cidr = (node.get("spec") or {}).get("podCIDR", "-")
        screen.line(f"  {node['metadata']['name']:<16} {ip:<13} {cidr:<15} {ready:<6} {version}")


def _show_pods(d: TenantsDeployment, screen: Screen) -> None:
    leader = d.leader_pod()
    pods = d.pods()
    screen.line(f"  {'POD':<46} {'NODE':<16} {'IP':<12} READY RESTARTS")
    for pod in pods:
        status = (pod["status"].get("containerStatuses") or [{}])[0]
        name = pod["metadata"]["name"]
        mark = "  <- leader" if name == leader else ""
        screen.line(
            f"  {name:<46} {pod['spec'].get('nodeName', '-'):<16} "
            f"{pod['status'].get('podIP', '-'):<12} {status.get('ready')!s:<5} "
            f"{status.get('restartCount', 0)}{mark}"
        )
    container = pods[0]["spec"]["containers"][0] if pods else {}
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    probes = []
    for kind in ("liveness", "readiness"):
        get = (container.get(f"{kind}Probe") or {}).get("httpGet")
        if get:
            probes.append(f"{kind} GET :{ports.get(get['port'], get['port'])}{get['path']}")
    screen.line(f"  probes run by each node's kubelet: {', '.join(probes)}")
    screen.line(f"  leader election: Lease {NAMESPACE}/{LEASE} held by {leader}")


def _show_webhooks(d: TenantsDeployment, screen: Screen) -> None:
    crd = d.json("crd", "tenants.tenants.setpoint.dev")
    conversion = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    service = conversion.get("service") or {}
    ca = len(conversion.get("caBundle") or "")
    where = f"service {service.get('namespace')}/{service.get('name')} {service.get('path', '')}"
    screen.line(f"  CRD conversion webhook: {where}, caBundle injected by the operator ({ca} B)")
    hooks = d.json("validatingwebhookconfiguration", "tenants-validating-webhook-configuration")
    for hook in hooks["webhooks"]:
        service = hook["clientConfig"].get("service") or {}
        screen.line(
            f"  validating webhook {hook['name']}: service {service.get('namespace')}/"
            f"{service.get('name')} {service.get('path', '')}"
        )
    ip = d.kc(
        "-n", NAMESPACE, "get", "service", WEBHOOK_SERVICE, "-o", "jsonpath={.spec.clusterIP}"
    )
    screen.line(
        f"  kube-apiserver calls them at ClusterIP {ip}:443 (the host's kube-proxy picks a Pod)"
    )


def _show_tenant(d: TenantsDeployment, screen: Screen) -> None:
    namespace = f"{DEMO_TENANT}-dev"
    old = tenant_v1alpha1_manifest(DEMO_TENANT, [namespace])
    d.apply(old)
    shown = " ".join(f"{k}={v}" for k, v in old["spec"].items())
    screen.line(f"applied Tenant {DEMO_TENANT} at {old['apiVersion']}: {shown}")
    stored = d.json("tenant", DEMO_TENANT)
    spec = stored["spec"]
    screen.line(
        f"read at {stored['apiVersion']} (converted by the operator behind the Service): "
        f"namespaces={spec.get('namespaces')} adminGroup={spec.get('adminGroup')} "
        f"quota={json.dumps(spec.get('quota'))} isolated={spec.get('isolated')}"
    )
    started = time.monotonic()
    wait_until(f"Tenant {DEMO_TENANT} Ready", lambda: d.tenant_ready(DEMO_TENANT), STEP_TIMEOUT)
    screen.line(f"Tenant {DEMO_TENANT} Ready {time.monotonic() - started:.1f}s later")


def _show_quota(d: TenantsDeployment, screen: Screen) -> None:
    namespace = f"{DEMO_TENANT}-dev"
    d.apply(sleeper_pod("sleeper", namespace))
    d.wait("-n", namespace, "pod/sleeper", "--for=condition=Ready")
    pod = d.json("-n", namespace, "pod", "sleeper")
    screen.line(
        f"Pod {namespace}/sleeper runs on {pod['spec'].get('nodeName')} "
        f"({pod['status'].get('podIP')}): busybox, non-root, read-only root filesystem"
    )
    usage = wait_until(
        "the Pod in the Tenant's quota usage",
        lambda: d.usage_counting(DEMO_TENANT, namespace, pods=1),
        STEP_TIMEOUT,
    )
    quota = d.json("tenant", DEMO_TENANT)["spec"].get("quota") or {}
    screen.line(
        f"Tenant {DEMO_TENANT} status.usage (from its ResourceQuota's status.used; the "
        "Pod's requests are the defaults of the Tenant's LimitRange):"
    )
    screen.line(f"  {'NAMESPACE':<12} {'PODS':<8} {'CPU':<12} MEMORY")
    pods, cpu, memory = (f"{usage.get(k)}/{quota.get(k, '?')}" for k in ("pods", "cpu", "memory"))
    screen.line(f"  {namespace:<12} {pods:<8} {cpu:<12} {memory}")


def _show_takeover(d: TenantsDeployment, screen: Screen) -> None:
    screen.line(f"kubectl -n {NAMESPACE} delete pod {d.leader_pod()}   (the leader)")
    takeover = d.delete_leader()
    screen.line(
        f"{takeover.new} took over {takeover.seconds:.1f}s after the delete (the old leader "
        f"released the Lease on SIGTERM; without a release it waits for the Lease's "
        f"{takeover.lease_seconds}s)"
    )
    started = time.monotonic()
    d.available()
    screen.line(
        f"the ReplicaSet's new Pod Ready {time.monotonic() - started:.1f}s later: "
        f"{REPLICAS} replicas again"
    )
    _show_pods(d, screen)


def _keep(plane: ControlPlane, screen: Screen) -> None:
    kubectl = (plane.binaries.kubectl if plane.binaries else None) or "kubectl"
    screen.section("--keep: everything stays up until Ctrl-C")
    screen.line(f"  export KUBECONFIG={plane.kubeconfig_path}")
    screen.line(f"  {kubectl} get nodes,pods -A -o wide")
    screen.line(f"  {kubectl} -n {NAMESPACE} logs -l {SELECTOR} -f")
    screen.line(f"  {kubectl} get tenants.v1alpha1.tenants.setpoint.dev   # through the Service")
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        screen.line()


def _teardown(
    plane: ControlPlane, before: dict[str, Any], workdir: Path, screen: Screen
) -> list[str]:
    """Stop the plane and its nodes; check the host; clean what is left. Return the problems."""
    from setpoint.testing.nodes import clean_host, host_state, leftovers, processes_mentioning

    started = time.monotonic()
    plane.stop()
    screen.line(f"nodes and plane stopped in {time.monotonic() - started:.1f}s")
    problems = list(plane.node_leftovers)
    problems += leftovers(before, host_state(workdir), processes_mentioning(str(workdir)))
    if not problems:
        screen.line(
            "the host is as before: no process, mount, network namespace, link, cgroup, "
            "nftables table or sysctl change of the nodes left"
        )
        return []
    screen.line("left behind:")
    for problem in problems:
        screen.line(f"  - {problem}")
    screen.line("removing it as `setpoint controlplane down --clean` does:")
    for item in clean_host():
        screen.line(f"  removed {item}")
    return problems


def run_demo(nodes: int, *, keep: bool = False) -> int:
    """Run the cluster demo with ``nodes`` nodes; return the exit code (see the module)."""
    started = time.monotonic()
    out = sys.stdout
    screen = Screen(out, tty=out.isatty(), started=started)
    try:  # everything that can be checked before anything starts
        operator_path()
        check_host(nodes)
        _ensure_binaries(screen)
        _preflight_nodes(nodes)
    except (DemoError, ControlPlaneError) as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 2
    from setpoint.testing.controlplane import ControlPlane, ControlPlaneOptions
    from setpoint.testing.nodes import host_state

    workdir = Path(tempfile.mkdtemp(prefix="setpoint-demo-"))
    screen.line(
        f"setpoint demo --nodes {nodes}: the tenants operator deployed from config/ on a "
        f"local plane with {nodes} nodes ({workdir})"
    )
    plane: ControlPlane | None = None
    failed = True
    before: dict[str, Any] = {}
    with _terminate_on_sigterm():
        try:
            before = host_state(workdir)
            screen.section(f"control plane with {nodes} nodes")
            plane = ControlPlane(ControlPlaneOptions(base_dir=workdir, nodes=nodes))
            plane.start()
            kubectl = plane.binaries.kubectl if plane.binaries else None
            if kubectl is None:
                raise DemoError("the plane's binaries have no kubectl: `make controlplane`")
            d = TenantsDeployment(
                str(kubectl), str(plane.kubeconfig_path), cache_dir=workdir / "kubectl-cache"
            )
            screen.line(
                f"etcd, kube-apiserver, kube-controller-manager, kube-scheduler at {plane.server}; "
                "each node a network namespace with containerd, kubelet and kube-proxy"
            )
            _show_nodes(d, screen)

            screen.section("the tenants image, built here and loaded into the nodes")
            archive = workdir / "tenants.oci.tar"
            image = build_tenants_image(archive, lambda line: screen.line(f"  {line}"))
            if plane.nodes is None:
                raise DemoError("the plane started without its nodes")
            names = plane.nodes.load_image(str(archive))
            screen.line(f"loaded {', '.join(names) or image.ref} into {nodes} node(s)")

            screen.section(f"kubectl apply -k: config/default with {REPLICAS} replicas")
            overlay = write_overlay(workdir / "overlay")
            screen.line(f"kubectl apply -k {overlay}   (resources: {config_dir()})")
            for line in d.deploy(overlay).splitlines():
                screen.line(f"  {line}")
            step = time.monotonic()
            d.available()
            screen.line(
                f"Deployment {NAMESPACE}/{DEPLOYMENT} Available, {REPLICAS}/{REPLICAS} Pods "
                f"Ready {time.monotonic() - step:.1f}s after the apply:"
            )
            _show_pods(d, screen)
            _show_webhooks(d, screen)

            screen.section("a Tenant at v1alpha1, converted through the webhook Service")
            _show_tenant(d, screen)

            screen.section("a Pod running in the tenant's namespace, counted in its quota")
            _show_quota(d, screen)

            screen.section("the leader Pod deleted: the other replica takes over")
            _show_takeover(d, screen)
            if keep:
                _keep(plane, screen)
            failed = False
        except Exception as exc:
            _report_failure(screen, exc)
        except KeyboardInterrupt:
            screen.line()
            screen.line("interrupted")
        finally:
            screen.section("cleaning up")
            if plane is not None and _teardown(plane, before, workdir, screen):
                failed = True
            shutil.rmtree(workdir, ignore_errors=True)
            screen.line(f"removed {workdir}; nothing left running")
    screen.line()
    screen.line(f"demo {'FAILED' if failed else 'finished'} in {time.monotonic() - started:.1f}s")
    return 1 if failed else 0
