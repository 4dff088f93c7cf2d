"""The tenants operator deployed as users deploy it: image, `kubectl apply -k`, 2 nodes.

One plane with two real nodes for the module (`setpoint controlplane up --nodes 2`). The
tenants image is built here (`build_image`, no registry), loaded into both nodes
(`setpoint controlplane load-image`) and deployed from examples/tenants/config/default with
`kubectl apply -k`, through an overlay written to a temporary directory (never into the
checkout): 2 replicas, and the tenant directory (a SQLite file standing for an external
system) on an emptyDir instead of the single-writer volume the default keeps. The tests run
in file order on that one deployment: converge, lose the leader, lose a node.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.cli.demo_cluster import (
    NAMESPACE,
    WEBHOOK_SERVICE,
    TenantsDeployment,
    build_tenants_image,
    kube_time,
    sleeper_pod,
    tenant_manifest,
    wait_until,
    write_overlay,
)
from setpoint.testing.nodes import DNS_SERVICE_IP, running_nodes
from tests.cluster.test_nodes import Cluster, _setpoint, running_cluster


class Deployed(TenantsDeployment):
    """The plane, and the operator deployed on it from config/ (the module's fixture).

    The deployment's steps are the cluster demo's (setpoint.cli.demo_cluster); ``numbers``
    collects the measurements the module prints at its end.
    """

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(cluster.kubectl, cluster.kubeconfig)
        self.cluster = cluster
        self.numbers: dict[str, Any] = {}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    work = tmp_path_factory.mktemp("tenants-e2e")
    archive = work / "tenants.oci.tar"
    build_tenants_image(archive)
    with running_cluster("tenants-e2e", 2, work) as cluster:
        load = _setpoint("load-image", str(archive), "--name", cluster.name)
        assert load.returncode == 0, load.stderr
        deployment = Deployed(cluster)
        deployment.deploy(write_overlay(work / "overlay"))
        deployment.available()
        yield deployment
        print(f"\ntenants e2e numbers: {json.dumps(deployment.numbers)}")


def _metrics_status(pod_ip: str, token: str | None) -> tuple[int, str]:
    """GET https://<pod>:8443/metrics from the host (a route via the Pod's node)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the metrics certificate is self-signed
    request = urllib.request.Request(f"https://{pod_ip}:8443/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_deployed_from_config_it_converges_behind_its_service_webhooks(
    deployed: Deployed,
) -> None:
    """`kubectl apply -k` of config/: 2 Ready replicas serve webhooks, metrics and tenants.

    Both replicas pass the kubelet's liveness and readiness probes; one holds the Lease.
    A Pod resolves the webhook Service's name through the cluster DNS (CoreDNS).
    The operator made its own CA and serving certificate (a Secret shared by the replicas)
    and injected the CA into the CRD's conversion webhook and the validating webhook, which
    kube-apiserver calls through the webhook Service's ClusterIP (the host's kube-proxy):
    a Tenant is created, a copycat is refused by the admission webhook, the Tenant read
    as v1alpha1 is converted. The Tenant converges (Ready), and a Pod that runs in its
    namespace shows in the quota usage of its status. /metrics answers 401 without a
    token, 403 to a service account without the metrics-reader role, 200 with it.
    """
    d = deployed
    pods = d.pods()
    assert len(pods) == 2
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        status = pod["status"]["containerStatuses"][0]
        assert status["ready"] and status["restartCount"] == 0, d.diagnose()
    assert d.leader_pod() in {p["metadata"]["name"] for p in pods}
    d.kc("-n", NAMESPACE, "get", "secret", "tenants-webhook-server-cert")
    crd = d.json("crd", "tenants.tenants.setpoint.dev")
    conversion = crd["spec"]["conversion"]["webhook"]["clientConfig"]
    assert conversion["service"]["name"] == "tenants-webhook-service"
    assert conversion.get("caBundle"), "the operator did not inject its CA"
    webhook = d.json("validatingwebhookconfiguration", "tenants-validating-webhook-configuration")
    assert webhook["webhooks"][0]["clientConfig"].get("caBundle")

    d.apply(tenant_manifest("acme", ["acme-dev"]))
    copycat = subprocess.run(
        [d.kubectl, "create", "-f", "-"],
        input=json.dumps(tenant_manifest("copycat", ["acme-dev"])),
        capture_output=True,
        text=True,
        env=d.env(),
        check=False,
    )
    assert copycat.returncode != 0
    assert "denied the request" in copycat.stderr and "acme-dev" in copycat.stderr
    old = d.json("tenants.v1alpha1.tenants.setpoint.dev", "acme")
    assert old["apiVersion"] == "tenants.setpoint.dev/v1alpha1"
    assert old["spec"]["admins"] == "acme-admins"
    wait_until("Tenant acme Ready", lambda: d.tenant_ready("acme"))

    d.apply(sleeper_pod("sleeper", "acme-dev"))
    d.wait("-n", "acme-dev", "pod/sleeper", "--for=condition=Ready")
    usage = wait_until(
        "the Pod in the Tenant's quota usage",
        lambda: d.usage_counting("acme", "acme-dev", pods=1),
    )
    assert usage["cpu"] == "500m" and usage["memory"] == "512Mi"  # the LimitRange's defaults

    # Cluster DNS (CoreDNS, the kubelets' clusterDNS): the Pod resolves the webhook Service.
    assert f"nameserver {DNS_SERVICE_IP}" in d.kc(
        "-n", "acme-dev", "exec", "sleeper", "--", "/bin/cat", "/etc/resolv.conf"
    )
    service = d.json("-n", NAMESPACE, "service", WEBHOOK_SERVICE)
    answer = d.kc(
        *("-n", "acme-dev", "exec", "sleeper", "--", "/bin/busybox", "nslookup"),
        f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc.cluster.local",
        DNS_SERVICE_IP,
    )
    assert f"Address: {service['spec']['clusterIP']}" in answer, answer

    d.kc("create", "namespace", "scrape")
    for account in ("prometheus", "nobody"):
        d.kc("-n", "scrape", "create", "serviceaccount", account)
    d.kc(
        "create",
        "clusterrolebinding",
        "tenants-metrics-scraper",
        "--clusterrole=tenants-metrics-reader",
        "--serviceaccount=scrape:prometheus",
    )
    allowed = d.kc("-n", "scrape", "create", "token", "prometheus").strip()
    other = d.kc("-n", "scrape", "create", "token", "nobody").strip()
    for pod in pods:
        ip = pod["status"]["podIP"]
        assert _metrics_status(ip, None)[0] == 401
        assert _metrics_status(ip, other)[0] == 403
        code, body = _metrics_status(ip, allowed)
        assert code == 200 and "setpoint_" in body


class AdmissionLoop:
    """Dry-run creates (admission webhook) and v1alpha1 reads (conversion) in a loop."""

    def __init__(self, d: Deployed) -> None:
        self.d = d
        self.ok = 0
        self.failures: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        probe = json.dumps(tenant_manifest("probe", ["probe-ns"]))
        calls: list[tuple[list[str], str | None]] = [
            (["create", "--dry-run=server", "-o", "name", "-f", "-"], probe),
            (["get", "tenants.v1alpha1.tenants.setpoint.dev", "acme", "-o", "name"], None),
        ]
        while not self._stop.is_set():
            for args, stdin in calls:
                proc = subprocess.run(
                    [self.d.kubectl, *args],
                    input=stdin,
                    capture_output=True,
                    text=True,
                    env=self.d.env(),
                    check=False,
                )
                if proc.returncode == 0:
                    self.ok += 1
                else:
                    self.failures.append((time.time(), proc.stderr.strip()[-300:]))

    def __enter__(self) -> AdmissionLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class LogFollower:
    """`kubectl logs -f` of the operator's Pods into files (a deleted Pod's logs stay)."""

    def __init__(self, d: Deployed, pods: list[str], directory: Path) -> None:
        self.files = {pod: directory / f"{pod}.log" for pod in pods}
        self.procs = [
            subprocess.Popen(
                [d.kubectl, "-n", NAMESPACE, "logs", "-f", pod],
                stdout=self.files[pod].open("wb"),
                stderr=subprocess.STDOUT,
                env=d.env(),
            )
            for pod in pods
        ]

    def records(self, pod: str) -> list[dict[str, Any]]:
        lines = self.files[pod].read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
            proc.wait(timeout=10)


def _reconcile_times(records: list[dict[str, Any]]) -> list[float]:
    """When a replica acted on an object: its controller's log lines (with a reconcile id)."""
    return [kube_time(r["ts"]) for r in records if "reconcile_id" in r]


def _became_leader(records: list[dict[str, Any]]) -> float:
    return min(kube_time(r["ts"]) for r in records if "became leader" in r.get("msg", ""))


def test_leader_pod_deleted_or_killed_the_other_replica_takes_over(
    deployed: Deployed, tmp_path: Path
) -> None:
    """Deleting the leader Pod: the standby leads at once and no webhook call fails.

    `kubectl delete pod` of the leader: it releases the Lease on SIGTERM, the other replica
    takes it (well within the lease duration), reconciles (it registers the Tenant in its
    own directory) only after the old leader's last reconcile, and a client calling the
    admission webhook (dry-run creates) and the conversion webhook (v1alpha1 reads) through
    the Service the whole time sees no failure (goal 0 with 2 replicas). Then the new
    leader's container is killed (SIGKILL through its node's containerd, no release): the
    other replica takes over once the Lease expires (within its duration plus a retry),
    and the kubelet restarts the killed container. The failures a kill costs are recorded.
    """
    d = deployed
    d.available()
    pods = [p["metadata"]["name"] for p in d.pods()]
    follower = LogFollower(d, pods, tmp_path)
    try:
        with AdmissionLoop(d) as loop:
            time.sleep(3)
            takeover = d.delete_leader()
            time.sleep(5)  # the Service keeps routing while the old Pod terminates
        old, new, took = takeover.old, takeover.new, takeover.seconds
        assert loop.failures == [], loop.failures
        assert loop.ok > 10
        wait_until(
            "the new leader to register the Tenant in its directory",
            lambda: any("Registered the tenant" in r.get("msg", "") for r in follower.records(new)),
        )
        assert took < takeover.lease_seconds, took
        old_acts = _reconcile_times(follower.records(old))
        new_records = follower.records(new)
        new_acts = _reconcile_times(new_records)
        assert old_acts and new_acts
        assert max(old_acts) < _became_leader(new_records) <= min(new_acts)
        d.numbers["delete: takeover s"] = round(took, 2)
        d.numbers["delete: webhook calls ok/failed"] = [loop.ok, len(loop.failures)]
    finally:
        follower.stop()
    d.available()

    # A kill without release: SIGKILL to the new leader's container, through containerd.
    leader = d.json("-n", NAMESPACE, "pod", new)
    container_id = leader["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    index = int(leader["spec"]["nodeName"].removeprefix("setpoint-node"))
    socket = running_nodes(Path(d.cluster.kubeconfig).parent)[index - 1]
    with AdmissionLoop(d) as loop:
        time.sleep(3)
        subprocess.run(
            [
                "ctr",
                "--address",
                str(socket),
                "-n",
                "k8s.io",
                "tasks",
                "kill",
                "-s",
                "KILL",
                container_id,
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        killed_at = time.time()
        third = d.leader_other_than(new, timeout=60)
        time.sleep(3)
    took = kube_time(d.lease()["acquireTime"]) - killed_at
    assert third != new
    assert took <= takeover.lease_seconds + 3, took
    d.numbers["SIGKILL: takeover s"] = round(took, 2)
    d.numbers["SIGKILL: webhook calls ok/failed"] = [loop.ok, len(loop.failures)]
    if loop.failures:
        window = loop.failures[-1][0] - loop.failures[0][0]
        d.numbers["SIGKILL: failures from first to last s"] = round(window, 2)
        d.numbers["SIGKILL: last failure"] = loop.failures[-1][1][-120:]
    d.available()
    status = d.json("-n", NAMESPACE, "pod", new)["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1


def test_drained_node_the_operator_is_rescheduled_and_converges(deployed: Deployed) -> None:
    """`kubectl drain` of the leader's node: both replicas run on the other, tenants converge.

    The leader's node is cordoned and its Pods evicted (the Eviction API); the ReplicaSet
    replaces them on the other node, where the Deployment becomes Available again with 2
    Ready replicas, one holding the Lease. The operator then converges a change and a new
    Tenant (webhooks through the Service, now to the new Pods), and a Pod started in a
    tenant namespace counts in the quota usage again.
    """
    d = deployed
    d.available()
    leader = d.leader_pod()
    node = d.json("-n", NAMESPACE, "pod", leader)["spec"]["nodeName"]
    other = "setpoint-node1" if node == "setpoint-node2" else "setpoint-node2"
    drained = subprocess.run(
        [
            d.kubectl,
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=120s",
        ],
        capture_output=True,
        text=True,
        env=d.env(),
        check=False,
    )
    assert drained.returncode == 0, drained.stderr + d.diagnose()
    assert re.search(rf"node/{node} drained", drained.stdout), drained.stdout
    try:
        d.available()
        pods = d.pods()
        running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        assert {p["spec"]["nodeName"] for p in running} == {other}, d.diagnose()
        new = d.leader_other_than(leader)
        assert new in {p["metadata"]["name"] for p in running}

        acme = tenant_manifest("acme", ["acme-dev", "acme-prod"])
        d.apply(acme)
        d.apply(tenant_manifest("globex", ["globex"]))
        wait_until("Tenant acme Ready after the drain", lambda: d.tenant_ready("acme"))
        wait_until("Tenant globex Ready after the drain", lambda: d.tenant_ready("globex"))
        d.kc("-n", "acme-prod", "get", "resourcequota", "tenant-quota")
        d.apply(sleeper_pod("sleeper", "globex"))
        d.wait("-n", "globex", "pod/sleeper", "--for=condition=Ready")
        wait_until(
            "the Pod in globex's quota usage",
            lambda: d.usage_counting("globex", "globex", pods=1),
        )
    finally:
        d.kc("uncordon", node, check=False)
