"""The demo, end to end: ``python -m setpoint demo`` exactly as ``make demo`` runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.e2e

DEMO_TIMEOUT = 300.0
"""Seconds the whole subprocess may take; the demo itself promises two minutes."""


def _final_table(out: str) -> dict[str, str]:
    """The rows of the last table snapshot, by tenant name."""
    start = out.rindex("TENANT   READY")
    rows: dict[str, str] = {}
    for line in out[start:].splitlines()[1:]:
        if not line.strip():
            break
        rows[line.split()[0]] = line
    return rows


def _index(out: str, text: str) -> int:
    assert text in out, f"{text!r} not in the demo's output"
    return out.index(text)


def test_demo_converges_tenants_shows_quota_deletion_and_metrics_and_cleans_up(
    tmp_path: Path,
) -> None:
    """`setpoint demo` runs the tenants operator end to end and leaves nothing behind.

    The demo starts its own control plane, installs the Tenant CRD generated from the
    operator's types (v1 and v1alpha1, converted by the operator's webhook), runs the operator
    as a `python -m setpoint run` subprocess with leader election, metrics, probes and the
    webhook server, creates three Tenants and waits until all are Ready with every namespace
    and child in place, writes a Tenant at v1alpha1 and reads it at v1, shows the quota
    counting a Pod, re-creates a child deleted by hand, deletes a Tenant (unregistered from
    the SQLite directory before the Tenant goes, then its namespaces go), prints metrics and
    a reconcile's trace ID with the log line carrying it,
    stops the operator with SIGTERM (exit 0) and the plane, within two minutes. Its output
    is not a terminal here, so the table is appended as snapshots. Afterwards no process
    refers to its work directory, the directory is gone and nothing was written to the
    current directory.
    """
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run(
        [sys.executable, "-m", "setpoint", "demo"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
    )
    out = proc.stdout
    print(out)  # shown by pytest when an assertion below fails
    print(proc.stderr, file=sys.stderr)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr}"
    assert "\x1b[" not in out, "no ANSI escapes when stdout is not a terminal"

    # The operator ran as a user would run it, with leader election, and became ready.
    assert "running: python -m setpoint run examples/tenants/tenants" in out
    assert "--leader-elect" in out
    assert re.search(r"\[\+\]leader-election ok", out)
    assert "Lease default/tenants-leader-election held by" in out

    # Three Tenants converged: Ready, all children, registered.
    rows = _final_table(out)
    assert sorted(rows) == ["acme", "globex", "initech"]
    for name, row in rows.items():
        assert re.match(rf"{name}\s+True\b", row), row
        assert "registered" in row, row
        assert row.endswith("100%"), row
    assert "all three Tenants Ready" in out

    # API versions: a Tenant written at v1alpha1 reads at v1, converted by the operator's
    # webhook (served on a loopback port with the demo's CA in the CRD's caBundle).
    assert re.search(
        r"generated crd/bases/tenants\.setpoint\.dev_tenants\.yaml .*v1, v1alpha1", out
    )
    assert re.search(r"--webhook-bind-address 127\.0\.0\.1:\d+ --webhook-cert-dir", out)
    assert "[+]webhook-server ok" in out
    assert "wrote Tenant hooli at tenants.setpoint.dev/v1alpha1: namespaces=[hooli] " in out
    versions = out[_index(out, "read it at tenants.setpoint.dev/v1 ") :]
    assert "  adminGroup: hooli-admins\n" in versions
    assert "  quota: {cpu: 1, memory: 2Gi, pods: 5}\n" in versions
    assert "  isolated: false\n" in versions
    assert "Tenant acme read at tenants.setpoint.dev/v1alpha1: admins=acme-admins " in out
    assert "v1-only containerDefaults rides along in annotation setpoint.dev/conversion-data" in out
    served = re.search(r"the operator's webhook answered (\d+) conversion request", out)
    assert served is not None and int(served.group(1)) >= 2
    assert 'controller_runtime_webhook_requests_total{code="500",webhook="/convert"} 0.0' in out

    # The validating webhook (generated configuration, served by the operator) refuses two
    # bad Tenants with their reasons; its warning about the open Tenant (globex) reaches the
    # client, which logs it (to stderr).
    assert re.search(
        r"installed ValidatingWebhookConfiguration validating-webhook-configuration: "
        r"vtenant-v1\.tenants\.setpoint\.dev at https://127\.0\.0\.1:\d+/validate-",
        out,
    )
    denied = (
        'refused (403): admission webhook "vtenant-v1.tenants.setpoint.dev" denied the request: '
    )
    assert denied + "spec.namespaces: 'kube-system' belongs to the cluster" in out
    assert denied + "spec.namespaces: 'acme-dev' is already claimed by Tenant 'acme'" in out
    assert "spec.isolated is false: pods in every namespace can reach this tenant's pods" in (
        proc.stderr
    )

    # Quota usage counts the Pod.
    assert re.search(r"^\s+acme-dev\s+1/10\s+\S+/4\s+\S+/8Gi$", out, re.M), out
    assert re.search(r"^\s+acme-prod\s+0/10\s", out, re.M)

    # A child deleted by hand was restored.
    assert re.search(r"deleted RoleBinding acme-prod/\S+ by hand", out)
    assert "the operator re-created it" in out

    # Deletion: the finalizer unregistered the Tenant before it went, then the namespaces.
    assert "directory tenants-directory.db before: acme, globex, hooli, initech" in out
    unregistered = _index(out, "directory: initech unregistered (rows now: acme, globex, hooli)")
    gone = _index(out, "Tenant initech is gone")
    assert unregistered < gone
    for namespace in ("initech-web", "initech-api"):
        assert _index(out, f"namespace {namespace} is gone") > gone

    # Metrics: the endpoint and controller-runtime's names with real counts.
    assert re.search(r"metrics: http://127\.0\.0\.1:\d+/metrics", out)
    # Traces (the dev extra installs setpoint[otel]): a reconcile's trace ID, and the JSON
    # log line written inside that reconcile carries the same ID.
    traced = re.search(r"a reconcile's trace_id=([0-9a-f]{32})", out)
    assert traced, out[-3000:]
    assert re.search(r'\{"ts".*"trace_id":"' + traced.group(1) + '"', out)
    success = re.search(
        r'controller_runtime_reconcile_total\{controller="tenant",result="success"\} (\d+)', out
    )
    assert success is not None and int(success.group(1)) >= 3
    assert 'leader_election_master_status{name="tenants-leader-election"} 1.0' in out

    # A clean end within the promised time.
    assert "operator stopped with SIGTERM: exit code 0" in out
    assert "control plane stopped" in out
    elapsed = re.search(r"demo finished in ([\d.]+)s", out)
    assert elapsed is not None
    assert float(elapsed.group(1)) < 120.0

    # Nothing left running or lying around.
    workdir_match = re.search(r"on a local control plane \((\S+)\)", out)
    assert workdir_match is not None
    workdir = workdir_match.group(1)
    assert not Path(workdir).exists()
    leftovers = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if workdir in cmdline:
            leftovers.append((process.info["pid"], cmdline))
    assert leftovers == []
    operator_pid = re.search(r"operator pid (\d+)", out)
    assert operator_pid is not None
    assert not psutil.pid_exists(int(operator_pid.group(1)))
    assert list(tmp_path.iterdir()) == []
