"""`setpoint demo --nodes 2`: the tenants operator deployed from config/ on 2 real nodes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from setpoint.testing.nodes import host_state, leftovers, netns_name, processes_mentioning


def _demo(timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "setpoint", "demo", "--nodes", "2"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_demo_with_nodes_deploys_the_operator_and_leaves_nothing_behind() -> None:
    """`setpoint demo --nodes 2` deploys tenants as users do, fails over, and leaves nothing.

    With a node's network namespace taken (as by another plane or a crashed run), the demo
    refuses before it starts anything and names `setpoint controlplane down --clean`.
    Then it runs: a plane with 2 Ready nodes, the tenants image built here and loaded into
    both, `kubectl apply -k` of config/default with 2 replicas that the kubelets' probes
    turn Ready, the operator's CA injected into the CRD whose conversion webhook is a
    Service, a Tenant written at v1alpha1 read back at v1 (converted through the Service)
    and Ready, a Pod running in its namespace counted in its quota usage (with the
    LimitRange's default requests), the leader Pod deleted and the other replica leading.
    It exits 0, its directory is gone, and no process, mount, network namespace, link,
    cgroup, nftables table or sysctl change of the nodes is left on the host.
    """
    taken = netns_name(1)
    subprocess.run(["ip", "netns", "add", taken], check=True)
    try:
        refused = _demo(timeout=120)
    finally:
        subprocess.run(["ip", "netns", "delete", taken], check=True)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"{taken} exist already" in refused.stderr
    assert "setpoint controlplane down --clean" in refused.stderr
    assert "setpoint-demo-" not in refused.stdout  # no directory, nothing started

    before = host_state()
    run = _demo()
    out = run.stdout
    assert run.returncode == 0, out[-6000:] + run.stderr[-3000:]
    workdir = re.search(r"\((/\S+/setpoint-demo-\w+)\)", out)
    assert workdir is not None, out[:500]

    for index in (1, 2):
        assert re.search(rf"setpoint-node{index}\s+10\.213\.0\.{10 + index}\s+\S+\s+True", out)
    assert "loaded docker.io/library/tenants-operator:latest into 2 node(s)" in out
    assert "kubectl apply -k" in out and "deployment.apps/tenants-controller-manager" in out
    assert re.search(r"Available, 2/2 Pods Ready", out)
    assert "liveness GET :8081/healthz, readiness GET :8081/readyz" in out
    assert re.search(r"CRD conversion webhook: service tenants-system/tenants-webhook-service", out)
    assert re.search(r"caBundle injected by the operator \([1-9]\d* B\)", out)
    assert "read at tenants.setpoint.dev/v1 (converted" in out
    assert "adminGroup=hooli-admins" in out
    assert "Tenant hooli Ready" in out
    assert re.search(r"Pod hooli-dev/sleeper runs on setpoint-node[12]", out)
    assert re.search(r"hooli-dev\s+1/5\s+500m/2\s+512Mi/2Gi", out)
    deleted = re.search(r"delete pod (\S+)\s+\(the leader\)", out)
    took = re.search(r"(\S+) took over [\d.]+s after the delete", out)
    assert deleted and took and deleted.group(1) != took.group(1), out
    assert "2 replicas again" in out
    assert "the host is as before" in out
    assert re.search(r"demo finished in [\d.]+s", out)

    assert not Path(workdir.group(1)).exists()
    after = host_state()
    assert leftovers(before, after, processes_mentioning("setpoint-demo-")) == []
