"""Helpers of the tenants operator's tests: run the operator, make Tenants, read their state."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tenants import Tenant, TenantReconciler, TenantsSettings, setup

import setpoint as sp
from setpoint.testing import RunningOperator, eventually, run_operator, serving_certificate

EXAMPLE_DIR = Path(__file__).resolve().parent.parent
"""examples/tenants."""
PACKAGE_DIR = EXAMPLE_DIR / "tenants"
CONFIG_DIR = EXAMPLE_DIR / "config"
REPO_ROOT = EXAMPLE_DIR.parent.parent

TENANT = Tenant.gvk
CRD_NAME = "tenants.tenants.setpoint.dev"


def load_yaml(path: Path) -> list[dict[str, Any]]:
    """The documents of a YAML file."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def unique(prefix: str) -> str:
    """A name unlikely to collide with other tests' (Tenants and Namespaces are cluster-wide)."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def tenant_manifest(
    name: str,
    namespaces: list[str],
    *,
    admin_group: str = "tenant-admins",
    quota: dict[str, Any] | None = None,
    isolated: bool | None = None,
    container_defaults: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Tenant as a user would write it."""
    spec: dict[str, Any] = {"namespaces": namespaces, "adminGroup": admin_group}
    if quota is not None:
        spec["quota"] = quota
    if container_defaults is not None:
        spec["containerDefaults"] = container_defaults
    if isolated is not None:
        spec["isolated"] = isolated
    return {
        "apiVersion": TENANT.api_version,
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": spec,
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The condition of type ``kind`` in ``obj``'s status."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind:
            return dict(item)
    return None


def is_ready(obj: dict[str, Any]) -> bool:
    """Ready=True for the Tenant's current generation."""
    ready = condition(obj, "Ready")
    return (
        ready is not None
        and ready["status"] == "True"
        and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    )


async def wait_ready(client: sp.Client, name: str, *, timeout: float = 60) -> dict[str, Any]:
    """Wait until Tenant ``name`` is Ready for its current generation; return it."""

    async def ready() -> dict[str, Any] | None:
        obj = await client.get(TENANT, name)
        return obj if is_ready(obj) else None

    result = await eventually(ready, timeout=timeout, description=f"Tenant {name} Ready")
    assert result is not None
    return result


async def wait_gone(
    client: sp.Client,
    kind: sp.GroupVersionKind,
    name: str,
    *,
    namespace: str | None = None,
    timeout: float = 120,
) -> None:
    """Wait until the object is NotFound."""

    async def gone() -> bool:
        try:
            await client.get(kind, name, namespace=namespace)
        except sp.NotFound:
            return True
        return False

    await eventually(gone, timeout=timeout, description=f"{kind.kind} {name} gone")


async def install_crd(client: sp.Client) -> None:
    """Apply the generated CRD (config/crd/bases) and wait until it is served."""
    for doc in load_yaml(CONFIG_DIR / "crd" / "bases" / "tenants.setpoint.dev_tenants.yaml"):
        await client.apply(doc, field_manager="tenants-tests", force=True)

    async def established() -> bool:
        crd = await client.get(
            sp.GroupVersionKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            CRD_NAME,
        )
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, timeout=60, description="the Tenant CRD Established")

    async def served() -> bool:
        await client.list(TENANT)
        return True

    await eventually(served, timeout=60, description="the Tenant kind served")


@dataclass
@dataclass
class Operator:
    """The operator running in this process (see ``setpoint.testing.run_operator``)."""

    running: RunningOperator

    @property
    def manager(self) -> sp.Manager:
        """The manager it runs in."""
        return self.running.manager

    @property
    def metrics(self) -> sp.Metrics:
        """Its private metrics registry."""
        return self.running.metrics

    @property
    def reconciler(self) -> TenantReconciler:
        """What ``setup`` returned: the reconciler (its directory, its settings)."""
        reconciler: TenantReconciler = self.running.setup_result
        return reconciler

    @property
    def directory_path(self) -> Path:
        """The SQLite file of its directory."""
        return self.reconciler.directory.path

    async def quiescent(self, *, timeout: float = 30) -> None:
        """Wait until the controller is idle: nothing queued or running, for a moment.

        After a Tenant turns Ready, the events of its own writes (children created, status
        written) still queue a few reconciles. A drift test that edits a child before they
        ran would see the edit repaired by one of them, not by the watch it means to test.
        """
        await self.running.wait_idle(timeout=timeout)


async def install_converting_crd(client: sp.Client, operator: Operator) -> None:
    """Point the Tenant CRD's conversion at ``operator``'s webhook; return once it is used.

    The API server swaps a replaced CRD's conversion settings asynchronously: right after the
    replace (Established and discoverable already, from the CRD it replaced) a v1alpha1 write
    may still go to the previous clientConfig, such as the generated CRD's in-cluster Service
    that another test restored. So a v1alpha1 Tenant is created with a server-side dry run
    until the API server converts it through the new webhook.
    """
    from tenants import TenantV1Alpha1

    from setpoint.crd import crd_for
    from setpoint.migrate.install import apply_crd

    await apply_crd(
        client, crd_for(Tenant, TenantV1Alpha1, webhook=operator.running.webhook_client_config())
    )
    name = unique("probe")
    probe = {
        "apiVersion": TenantV1Alpha1.gvk.api_version,
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"namespaces": [name], "admins": "probe", "network": "Isolated"},
    }

    async def converted() -> bool:
        await client.create(probe, dry_run=True)
        return True

    await eventually(converted, timeout=30, description="a v1alpha1 Tenant converted by webhook")


@contextlib.asynccontextmanager
async def running_operator(
    kubeconfig: Path,
    settings: TenantsSettings,
    *,
    leader_election: str | None = None,
    leader_election_namespace: str | None = None,
) -> AsyncIterator[Operator]:
    """Run the operator in-process with its own client until the block ends.

    Without ``leader_election`` (a Lease name) it runs as the only replica, elected at once.
    """
    election = (
        sp.LeaderElectionOptions(name=leader_election, namespace=leader_election_namespace)
        if leader_election
        else None
    )
    async with run_operator(
        lambda manager: setup(manager, settings),
        kubeconfig=kubeconfig,
        leader_election=election,
        namespaces=(),  # a Tenant's children live in its namespaces: watch them all
    ) as running:
        yield Operator(running)


@dataclass
class Tenants:
    """Creates Tenants for one test and deletes them (waiting until gone) at its end."""

    client: sp.Client
    created: list[str] = field(default_factory=list)

    async def create(self, name: str, namespaces: list[str], **spec: Any) -> dict[str, Any]:
        """Create a Tenant (see :func:`tenant_manifest` for ``spec``)."""
        obj = await self.client.create(tenant_manifest(name, namespaces, **spec))
        self.created.append(name)
        return obj

    async def delete_all(self, *, timeout: float = 120) -> None:
        """Delete every Tenant created here and wait until they are gone."""
        for name in self.created:
            with contextlib.suppress(sp.NotFound):
                await self.client.delete(TENANT, name)
        for name in self.created:
            await wait_gone(self.client, TENANT, name, timeout=timeout)

    async def abandon_all(self) -> None:
        """Delete every Tenant created here without an operator: drop the finalizer too.

        For the end of a failed test whose operator is gone; a Tenant left with its
        finalizer would otherwise stay forever (and its directory entry is a temp file).
        """
        for name in self.created:
            with contextlib.suppress(sp.NotFound):
                await self.client.delete(TENANT, name)
                await self.client.patch(
                    TENANT, name, sp.MergePatch({"metadata": {"finalizers": None}})
                )


class OperatorProcess:
    """The operator as users run it: ``python -m setpoint run examples/tenants/tenants``."""

    def __init__(self, kubeconfig: Path, directory: Path, log_path: Path) -> None:
        self.kubeconfig = kubeconfig
        self.directory = directory
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (leader election, probes and metrics off: one replica, no ports).

        Its conversion webhook listens on a free loopback port, with a certificate from a
        fresh CA written next to the log (the installed CRD keeps its in-cluster Service
        config: these tests read Tenants at v1 only).
        """
        cert_dir = self.log_path.parent / "webhook-certs"
        serving_certificate(cert_dir)
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            TENANTS_DIRECTORY_PATH=str(self.directory),
            SETPOINT_LOG_LEVEL="info",
        )
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "setpoint",
                "run",
                str(PACKAGE_DIR),
                "--no-leader-elect",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--webhook-bind-address=127.0.0.1:0",
                f"--webhook-cert-dir={cert_dir}",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
        log.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup, as a crashed node or an OOM kill."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc is not None else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log, for failure messages."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


# -- the operator as worker processes (`setpoint run --processes N`) -------------------------


@dataclass(frozen=True)
class ReconcileSpan:
    """One reconcile, as the span OpenTelemetry recorded for it (wall-clock seconds)."""

    controller: str
    key: str
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    pid: int
    """The process that ran it (the ``process.pid`` resource attribute)."""
    start: float
    end: float


def _epoch(iso: str) -> float:
    stamp = datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.UTC).timestamp()


def reconcile_spans(path: Path) -> list[ReconcileSpan]:
    """The reconcile spans in the output of OpenTelemetry's console exporter.

    The reconcile journal of an operator run as a subprocess, with nothing added to it:
    ``OTEL_TRACES_EXPORTER=console`` makes every process print one JSON object per finished
    span on its standard output (see :data:`TRACE_ENV`), and each process's resource names its
    pid. setpoint's reconcile span covers the whole reconcile, finalizer handling included,
    whatever its outcome. Spans still buffered in a process that was SIGKILLed (at most
    ``OTEL_BSP_SCHEDULE_DELAY`` worth) are lost, like a reconcile that was running then.
    """
    text = path.read_text(errors="replace") if path.exists() else ""
    decoder = json.JSONDecoder()
    found: list[ReconcileSpan] = []
    at = 0
    while True:
        at = text.find("{", at)
        if at < 0:
            return found
        try:
            span, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:  # a span cut short by a SIGKILL: skip to the next one
            at = text.find("\n{", at + 1)
            if at < 0:
                return found
            continue
        attributes = span.get("attributes") or {}
        if not str(span.get("name", "")).startswith("reconcile ") or not span.get("end_time"):
            continue
        namespace = attributes.get("k8s.namespace.name") or ""
        name = attributes.get("k8s.object.name") or ""
        found.append(
            ReconcileSpan(
                controller=str(attributes.get("setpoint.controller", "")),
                key=f"{namespace}/{name}" if namespace else str(name),
                pid=int(span["resource"]["attributes"]["process.pid"]),
                start=_epoch(span["start_time"]),
                end=_epoch(span["end_time"]),
            )
        )


TRACE_ENV: dict[str, str] = {
    "OTEL_TRACES_EXPORTER": "console",
    "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "process",
    "OTEL_BSP_SCHEDULE_DELAY": "50",
    "OTEL_SERVICE_NAME": "tenants-test",
}
"""Environment that makes an operator process print its spans, each naming its pid."""


def worker_processes(supervisor: int) -> dict[int, int]:
    """``worker index -> pid`` of the live workers a ``--processes N`` supervisor started.

    Read from ``/proc``: the supervisor's children and the ``SETPOINT_WORKER_INDEX`` each
    was started with (a worker being restarted, or reaped but not yet restarted, is absent).
    """
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid ...: comm may hold spaces; split after its parenthesis
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if int(ppid) != supervisor or state == "Z":
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue  # gone meanwhile
        for item in environ:
            if item.startswith(b"SETPOINT_WORKER_INDEX="):
                found[int(item.split(b"=", 1)[1])] = int(entry.name)
    return found


class WorkerProcesses(OperatorProcess):
    """The operator run as ``setpoint run --processes N``: a supervisor and N workers.

    Leader election is on (Lease ``lease`` in ``namespace``; the workers shard the Tenants
    on the ring of that name), the probes listen on ``probe_port``, and every process's
    reconcile spans go to ``spans_path`` (:func:`reconcile_spans`), the logs (JSON) to
    ``log_path``.
    """

    def __init__(
        self,
        kubeconfig: Path,
        directory: Path,
        log_path: Path,
        *,
        processes: int,
        lease: str,
        namespace: str,
        probe_port: int,
    ) -> None:
        super().__init__(kubeconfig, directory, log_path)
        self.processes = processes
        self.lease = lease
        self.namespace = namespace
        self.probe_port = probe_port
        self.spans_path = log_path.with_name(log_path.stem + ".spans")

    def start(self) -> None:
        """Start the supervisor (which starts the workers)."""
        cert_dir = self.log_path.parent / "webhook-certs"
        serving_certificate(cert_dir)
        env = dict(os.environ)
        env.update(
            TRACE_ENV,
            KUBECONFIG=str(self.kubeconfig),
            TENANTS_DIRECTORY_PATH=str(self.directory),
            SETPOINT_LOG_LEVEL="info",
            SETPOINT_LOG_FORMAT="json",
        )
        log = self.log_path.open("ab")
        spans = self.spans_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "setpoint",
                "run",
                str(PACKAGE_DIR),
                f"--processes={self.processes}",
                "--leader-elect",
                f"--leader-election-id={self.lease}",
                f"--leader-election-namespace={self.namespace}",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
                "--webhook-bind-address=127.0.0.1:0",
                f"--webhook-cert-dir={cert_dir}",
            ],
            env=env,
            stdout=spans,
            stderr=log,
            cwd=REPO_ROOT,
        )
        log.close()
        spans.close()

    def workers(self) -> dict[int, int]:
        """``worker index -> pid`` of the live workers (see :func:`worker_processes`)."""
        assert self.proc is not None
        return worker_processes(self.proc.pid)

    def kill_worker(self, index: int) -> tuple[int, float]:
        """SIGKILL worker ``index``; returns its pid and the wall-clock time of the kill."""
        pid = self.workers()[index]
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        return pid, killed_at
