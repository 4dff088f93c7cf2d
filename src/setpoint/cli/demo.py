"""``setpoint demo``: the tenants operator converging live, on the embedded control plane.

What it does, in order (about a minute once the control plane binaries are built):

1. Starts the local control plane (etcd, kube-apiserver, kube-controller-manager); builds the
   binaries first if they are not cached yet, showing the build's progress.
2. Generates the ``Tenant`` CRD in-process from the operator's Python types (what
   ``setpoint generate crd`` writes) and installs it. Tenant is served at ``v1`` (stored) and
   ``v1alpha1``; the CRD converts between them through the operator's conversion webhook,
   reached on loopback with a certificate from a CA the demo makes (its caBundle).
3. Runs the operator exactly as a user would, as a subprocess:
   ``python -m setpoint run examples/tenants/tenants --leader-elect ...``, with metrics,
   probes and the webhook server on free loopback ports and the tenant directory (SQLite) in
   a temporary directory.
4. Creates three Tenants and shows them converging in a table: conditions, namespaces,
   children per kind, directory registration and progress. On a terminal the table is redrawn
   in place; otherwise (CI logs) a snapshot is appended whenever it changes. Then writes a
   Tenant at ``v1alpha1``, as a client of the old API version would, and reads it at ``v1``
   (and a ``v1`` Tenant at ``v1alpha1``): the operator's webhook converts both ways. Then
   tries two bad Tenants (one claiming ``kube-system``, one claiming another Tenant's
   namespace): the operator's validating webhook refuses both, with the reason.
5. Creates a Pod in a tenant namespace (there is no kubelet: it is stored and counted by the
   quota, never run) and shows the Tenant's quota usage.
6. Deletes a Tenant and shows its finalizer unregistering it from the directory (read from
   the SQLite file) before it goes, and then its namespaces going away.
7. Prints where the metrics endpoint is and some of its lines; with ``setpoint[otel]``
   installed (the operator then runs with ``OTEL_TRACES_EXPORTER=console`` and JSON logs),
   one reconcile's trace ID and the log line that carries it.
8. Stops the operator with SIGTERM, then the control plane, and prints the elapsed time.
   ``--keep`` leaves everything running instead, prints the KUBECONFIG and commands to
   explore, and stops it all on Ctrl-C.

Nothing is left running afterwards: the operator and the control plane's processes die with
this process even if it is killed (parent-death signal), and their directory is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeVar

from setpoint.api import kinds
from setpoint.api.errors import SetpointError
from setpoint.api.gvk import GroupVersionKind
from setpoint.cli.run import default_leader_election_id
from setpoint.client.errors import ClientError
from setpoint.server.address import free_port
from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    find_binaries,
)

if TYPE_CHECKING:
    from setpoint.client.client import Client

__all__ = ["DemoError", "register"]

T = TypeVar("T")

TENANT: Final = GroupVersionKind("tenants.setpoint.dev", "v1", "Tenant")
TENANT_V1ALPHA1: Final = GroupVersionKind("tenants.setpoint.dev", "v1alpha1", "Tenant")
OLD_CLIENT_TENANT: Final = "hooli"
"""The Tenant the demo writes at v1alpha1, as a client of the old API version would."""
TENANT_LABEL: Final = "tenants.setpoint.dev/tenant"
OPERATOR_MODULE: Final = "tenants"

# The three demo tenants: small enough to converge in seconds on two cores, different enough
# to show isolation on/off and quota settings.
DEMO_TENANTS: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    (
        "acme",
        {
            "namespaces": ["acme-dev", "acme-prod"],
            "adminGroup": "acme-admins",
            "quota": {"cpu": "4", "memory": "8Gi", "pods": 10},
            "isolated": True,
        },
    ),
    (
        "globex",
        {
            "namespaces": ["globex"],
            "adminGroup": "globex-ops",
            "quota": {"cpu": "2", "memory": "4Gi", "pods": 5},
            "isolated": False,
        },
    ),
    (
        "initech",
        {
            "namespaces": ["initech-web", "initech-api"],
            "adminGroup": "initech-admins",
            "isolated": True,
        },
    ),
)
QUOTA_TENANT: Final = "acme"
QUOTA_NAMESPACE: Final = "acme-dev"
REPAIRED_NAMESPACE: Final = "acme-prod"
DELETED_TENANT: Final = "initech"

# Column title, kind, and whether the operator creates one per namespace only when isolated.
CHILD_KINDS: Final = (
    ("QUOTA", kinds.ResourceQuota, False),
    ("LIMITS", kinds.LimitRange, False),
    ("ADMINS", kinds.RoleBinding, False),
    ("NETPOL", kinds.NetworkPolicy, True),
)

CONVERGE_TIMEOUT: Final = 90.0
"""Seconds the three Tenants may take to become Ready (normally a few)."""
STEP_TIMEOUT: Final = 90.0
"""Seconds any other step may take (namespace deletion takes the longest: ~5-30 s)."""
POLL_INTERVAL: Final = 0.25
REQUEST_TIMEOUT: Final = 10.0
OPERATOR_STOP_TIMEOUT: Final = 40.0
METRIC_PREFIXES: Final = (
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_reconcile_time_seconds_count",
    "controller_runtime_max_concurrent_reconciles",
    "workqueue_adds_total",
    "workqueue_depth",
    "leader_election_master_status",
    "controller_runtime_webhook_requests_total",
)


DEMO_CONTROLLER: Final = "tenant"
"""The tenants example's main controller, whose metrics the demo shows."""


class DemoError(SetpointError):
    """A demo step failed or timed out; the message says which and what was last seen."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # The operator must not outlive the demo, even if the demo is killed outright.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[3]


def operator_path() -> Path:
    """The tenants operator package the demo runs (``examples/tenants/tenants``).

    Looked for in the setpoint checkout this code runs from, then under the working
    directory, so an installed setpoint runs the demo from inside a clone of the repository.

    Raises:
        DemoError: neither place has it. The wheel carries the library, the testing kit and
            the control plane's Go module, not the examples: the message says to clone the
            repository and run the demo there.

    """
    relative = Path("examples") / "tenants" / "tenants"
    candidates = [_repo_root() / relative, Path.cwd() / relative]
    for path in candidates:
        if (path / "__init__.py").is_file():
            return path.resolve()
    raise DemoError(
        "the demo runs the tenants example operator, which is not installed with setpoint "
        f"(looked at {', '.join(str(c) for c in candidates)}); clone the setpoint repository "
        "and run `setpoint demo` (or `make demo`) inside it"
    )


# -- output ---------------------------------------------------------------------------------------


class Screen:
    """Prints the demo: sections, lines, and a live table.

    On a terminal the live table is redrawn in place with ANSI escapes. Otherwise a snapshot
    is appended when the table changed (at most one a second, plus the final one), so a CI
    log shows the progression without thousands of lines. ``started`` is a reading of
    ``clock`` (``time.monotonic`` unless a test passes its own).
    """

    def __init__(
        self,
        out: TextIO,
        *,
        tty: bool,
        started: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.tty = tty
        self.started = started
        self._clock = clock
        self._drawn = 0
        self._last: list[str] | None = None
        self._last_at = 0.0

    def elapsed(self) -> float:
        """Seconds since the demo started."""
        return self._clock() - self.started

    def line(self, text: str = "") -> None:
        """Print one line (ends a live table)."""
        self._drawn = 0
        self._last = None
        print(text, file=self.out, flush=True)

    def section(self, title: str) -> None:
        """A titled section, with the elapsed time."""
        self.line()
        self.line(f"== {title}  [{self.elapsed():5.1f}s]")

    def table(self, lines: Sequence[str], *, final: bool = False) -> None:
        """Show the live table's current state."""
        lines = list(lines)
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # up N lines, clear to the end
            lines[0] += f"  [{self.elapsed():5.1f}s]"
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()
            self._drawn = len(lines)
            return
        now = self._clock()
        if lines == self._last or (not final and now - self._last_at < 1.0):
            return
        print(f"-- {self.elapsed():5.1f}s", file=self.out)
        print("\n".join(lines), file=self.out, flush=True)
        self._last = lines
        self._last_at = now

    def end_table(self) -> None:
        """Stop redrawing: later output goes below the table."""
        self._drawn = 0
        self._last = None


# -- observing the cluster ------------------------------------------------------------------------


def read_directory(path: Path) -> list[str] | None:
    """Tenant names registered in the operator's SQLite directory (``None``: not readable yet).

    Opened read-only, so the demo never takes a write lock the operator would wait for.
    """
    if not path.exists():
        return None
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        ) as db:
            rows = db.execute("SELECT name FROM tenants ORDER BY name").fetchall()
    except sqlite3.Error:
        return None
    return [str(row[0]) for row in rows]


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = obj.get("status") or {}
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, dict)}


def _controller_uid(obj: dict[str, Any]) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


@dataclass
class TenantRow:
    """What the table shows for one Tenant."""

    name: str
    desired: list[str]
    isolated: bool
    exists: bool = False
    deleting: bool = False
    ready: str = "-"
    ready_reason: str = ""
    degraded: str = "-"
    degraded_reason: str = ""
    namespaces: int = 0
    children: dict[str, int] = field(default_factory=dict)
    registered: bool = False

    def expected(self, per_isolation: bool) -> int:
        """How many children of one kind the spec asks for."""
        return 0 if per_isolation and not self.isolated else len(self.desired)

    @property
    def progress(self) -> float:
        """Share of the spec in place: namespaces, children, registration, Ready."""
        total = len(self.desired) + 2
        done = self.namespaces + int(self.registered) + int(self.ready == "True")
        for title, _, per_isolation in CHILD_KINDS:
            want = self.expected(per_isolation)
            total += want
            done += min(self.children.get(title, 0), want)
        return min(done / total, 1.0)

    @property
    def converged(self) -> bool:
        """Ready, registered, and every namespace and child in place."""
        return self.progress >= 1.0


async def snapshot(client: Client, directory: Path) -> dict[str, TenantRow]:
    """The demo Tenants as the API server and the directory see them now."""
    rows = {
        name: TenantRow(name, list(spec["namespaces"]), bool(spec.get("isolated", True)))
        for name, spec in DEMO_TENANTS
    }
    uids: dict[str, TenantRow] = {}
    for obj in (await client.list(TENANT)).items:
        row = rows.get(obj["metadata"]["name"])
        if row is None:
            continue
        row.exists = True
        row.deleting = bool(obj["metadata"].get("deletionTimestamp"))
        uids[obj["metadata"]["uid"]] = row
        conditions = _conditions(obj)
        ready, degraded = conditions.get("Ready", {}), conditions.get("Degraded", {})
        row.ready, row.ready_reason = ready.get("status", "-"), ready.get("reason", "")
        row.degraded, row.degraded_reason = degraded.get("status", "-"), degraded.get("reason", "")
    for ns in (await client.list(kinds.Namespace, labels=TENANT_LABEL)).items:
        row = uids.get(_controller_uid(ns) or "")
        if row is not None and ns["metadata"]["name"] in row.desired:
            row.namespaces += 1
    for title, kind, _ in CHILD_KINDS:
        for child in (await client.list(kind)).items:
            row = uids.get(_controller_uid(child) or "")
            if row is not None:
                row.children[title] = row.children.get(title, 0) + 1
    registered = await asyncio.to_thread(read_directory, directory) or []
    for name in registered:
        if name in rows:
            rows[name].registered = True
    return rows


def render_table(rows: dict[str, TenantRow]) -> list[str]:
    """The table's lines (plain text, at most 100 columns)."""
    titles = [title for title, _, _ in CHILD_KINDS]
    head = f"{'TENANT':<8} {'READY':<18} {'DEGRADED':<9} {'NS':<4}"
    head += "".join(f" {t:<6}" for t in titles) + f" {'DIRECTORY':<10} PROGRESS"
    lines = [head]
    for row in rows.values():
        if row.deleting:
            ready = "deleting"
        elif not row.exists:
            ready = "(gone)" if row.ready != "-" else "-"
        else:
            ready = f"{row.ready} {row.ready_reason}".strip()[:18]
        line = f"{row.name:<8} {ready:<18} {row.degraded:<9} "
        line += f"{row.namespaces}/{len(row.desired):<2}"
        for title, _, per_isolation in CHILD_KINDS:
            want = row.expected(per_isolation)
            cell = f"{row.children.get(title, 0)}/{want}" if want else "-"
            line += f" {cell:<6}"
        line += f" {'registered' if row.registered else '-':<10} "
        filled = round(row.progress * 10)
        line += f"[{'#' * filled}{'.' * (10 - filled)}] {row.progress:4.0%}"
        lines.append(line)
    return lines


async def poll(
    what: str,
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    alive: Callable[[], None],
) -> T:
    """Call ``check`` until it returns a value; fail after ``timeout`` or if the operator died."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        alive()
        try:
            result = await asyncio.wait_for(check(), REQUEST_TIMEOUT)
        except DemoError:
            raise
        except Exception as exc:  # API or HTTP errors while things converge: keep polling
            result, last = None, exc
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise DemoError(f"{what} did not happen within {timeout:.0f}s (last: {last!r})")
        await asyncio.sleep(POLL_INTERVAL)


async def http_get(url: str) -> tuple[int, str]:
    """GET ``url`` (the operator's local probe or metrics endpoint) with a timeout.

    Returns the status and the body, for error statuses too. The standard library in a
    thread is enough for a few local requests, and keeps HTTP inside the client and the
    server packages (see docs/architecture.md).
    """

    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT) as response:
                return int(response.status), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode("utf-8", "replace")

    return await asyncio.to_thread(get)


# -- the operator process -------------------------------------------------------------------------


@dataclass
class Operator:
    """The operator subprocess and where to reach it."""

    proc: subprocess.Popen[bytes]
    command: list[str]
    log_path: Path
    directory: Path
    """The tenant directory's SQLite file."""
    metrics_port: int
    probe_port: int

    @property
    def metrics_url(self) -> str:
        """The ``/metrics`` endpoint."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def readyz_url(self) -> str:
        """The readiness probe, with every check listed."""
        return f"http://127.0.0.1:{self.probe_port}/readyz?verbose"

    def check_alive(self) -> None:
        """Raise if the operator exited."""
        code = self.proc.poll()
        if code is not None:
            raise DemoError(f"the operator exited with code {code}; its log is below")

    def log_tail(self, lines: int = 40) -> str:
        """The end of the operator's log."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = OPERATOR_STOP_TIMEOUT) -> int:
        """SIGTERM, wait for a graceful exit (SIGKILL after ``timeout``); return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        return int(self.proc.returncode)


def operator_command(
    kubeconfig: Path, metrics: int, probes: int, webhook: int, cert_dir: Path
) -> list[str]:
    """The command line that runs the operator, as a user would type it."""
    return [
        sys.executable,
        "-m",
        "setpoint",
        "run",
        str(operator_path()),
        "--kubeconfig",
        str(kubeconfig),
        "--leader-elect",
        "--leader-election-namespace",
        "default",
        "--metrics-bind-address",
        f"127.0.0.1:{metrics}",
        "--health-probe-bind-address",
        f"127.0.0.1:{probes}",
        "--webhook-bind-address",
        f"127.0.0.1:{webhook}",
        "--webhook-cert-dir",
        str(cert_dir),
    ]


def start_operator(
    workdir: Path, kubeconfig: Path, directory: Path, webhook: DemoWebhook
) -> Operator:
    """Start ``python -m setpoint run examples/tenants/tenants`` with its log in ``workdir``.

    Call it from the main thread with no other threads running: the parent-death signal is
    tied to the thread that forks, and forking next to other threads is fragile.
    """
    metrics, probes = free_port(), free_port()
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # the flag says which cluster; never a user's real one
    env["TENANTS_DIRECTORY_PATH"] = str(directory)
    if tracing_available():
        # Spans to the operator's stdout (its log file), log lines as JSON with trace ids:
        # the metrics step shows one reconcile's trace ID and the log line that carries it.
        env.update(TRACING_ENV)
        env["SETPOINT_LOG_FORMAT"] = "json"
    env.setdefault("SETPOINT_LOG_FORMAT", "console")
    log_path = workdir / "operator.log"
    command = operator_command(kubeconfig, metrics, probes, webhook.port, webhook.cert_dir)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the demo, which stops it with SIGTERM
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl must run in the child
        )
    return Operator(proc, command, log_path, directory, metrics, probes)


# -- the steps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoWebhook:
    """Where the operator's webhook server listens and the certificate it serves."""

    port: int
    """Loopback port of the webhook server."""
    cert_dir: Path
    """``tls.crt`` and ``tls.key`` (``--webhook-cert-dir``)."""
    ca_pem: bytes
    """The CA that signed them: the CRD's caBundle."""

    @classmethod
    def make(cls, workdir: Path) -> DemoWebhook:
        """A fresh CA and serving certificate for 127.0.0.1, written into ``workdir``."""
        from setpoint.testing.webhook import serving_certificate

        cert_dir = workdir / "webhook-certs"
        ca, _ = serving_certificate(cert_dir)
        return cls(free_port(), cert_dir, ca.cert_pem)

    @property
    def url(self) -> str:
        """The conversion endpoint the API server calls."""
        return f"https://127.0.0.1:{self.port}/convert"

    @property
    def base_url(self) -> str:
        """The webhook server's address; each admission webhook's path goes after it."""
        return f"https://127.0.0.1:{self.port}"


def tenant_crds(screen: Screen, webhook: DemoWebhook) -> list[dict[str, Any]]:
    """Generate the Tenant CRD from the operator's Python types, as ``setpoint generate crd`` does.

    The plane installs it before kube-controller-manager starts. Its garbage
    collector rescans the API for new kinds only every 30 s; a CRD that exists
    when it starts is handled from the first second, so deletion cascades at once.
    Tenant has two versions with converters, so the CRD converts through the operator's
    webhook, reached at ``webhook.url`` with the demo CA as caBundle (what
    ``setpoint generate crd --webhook-url ... --webhook-ca-file ...`` writes).
    """
    from setpoint.crd import WebhookClientConfig, find_resources, generate_crds, import_targets

    modules = import_targets([str(operator_path())])
    config = WebhookClientConfig(url=webhook.url, ca_bundle=webhook.ca_pem)
    crds: list[dict[str, Any]] = []
    for manifest in generate_crds(find_resources(modules), webhook=config):
        for crd in manifest.documents:
            versions = ", ".join(v["name"] for v in crd["spec"]["versions"])
            screen.line(f"generated {manifest.path} from the Python types (versions {versions})")
            crds.append(crd)
    screen.line(f"conversion between the versions: the operator's webhook at {webhook.url}")
    return crds


async def install_validation(
    client: Client, op: Operator, webhook: DemoWebhook, screen: Screen
) -> None:
    """Install the operator's ValidatingWebhookConfiguration and wait until it is in effect.

    Generated from the operator's validator classes, as ``setpoint generate webhook
    --webhook-url ... --webhook-ca-file ...`` writes it. Installed once the operator serves
    (its failure policy is Fail: before that, every Tenant write would be refused).
    """
    from setpoint.client.errors import ApiError
    from setpoint.crd import (
        WebhookClientConfig,
        find_admission_webhooks,
        import_targets,
        webhook_configurations,
    )

    specs = find_admission_webhooks(import_targets([str(operator_path())]))
    config = WebhookClientConfig(url=webhook.base_url, ca_bundle=webhook.ca_pem)
    for configuration in webhook_configurations(specs, client_config=config):
        await client.create(configuration)
        for hook in configuration["webhooks"]:
            screen.line(
                f"installed {configuration['kind']} {configuration['metadata']['name']}: "
                f"{hook['name']} at {hook['clientConfig']['url']}"
            )

    async def in_effect() -> bool | None:
        probe = {
            "apiVersion": TENANT.api_version,
            "kind": "Tenant",
            "metadata": {"name": "probe"},
            "spec": {"namespaces": ["kube-probe"], "adminGroup": "x"},
        }
        try:
            await client.create(probe, dry_run=True)
        except ApiError:
            return True
        return None

    await poll("the validating webhook taking effect", in_effect, timeout=30, alive=op.check_alive)


async def show_validation(client: Client, screen: Screen) -> None:
    """Two bad Tenants, refused by the operator's validating webhook with the reason."""
    from setpoint.client.errors import ApiError

    claimed = dict(DEMO_TENANTS)[QUOTA_TENANT]["namespaces"][0]
    for name, namespaces in (("greedy", ["kube-system"]), ("copycat", [claimed])):
        bad = {
            "apiVersion": TENANT.api_version,
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": {"namespaces": namespaces, "adminGroup": f"{name}-admins"},
        }
        screen.line(f"create Tenant {name} with namespaces {namespaces}:")
        try:
            await client.create(bad)
        except ApiError as exc:
            screen.line(f"  refused ({exc.code}): {exc.status.get('message', exc)}")
        else:
            raise DemoError(f"the validating webhook let Tenant {name} through")


async def wait_discoverable(client: Client) -> None:
    """Wait until the API server's discovery serves the Tenant kind."""

    async def discoverable() -> bool:
        await client.resource_info(TENANT)
        return True

    await poll("the Tenant kind in discovery", discoverable, timeout=STEP_TIMEOUT, alive=_ok)


def _ok() -> None:
    """``alive`` for steps that run before the operator exists."""


async def repair_child(client: Client, op: Operator, screen: Screen) -> None:
    """Delete a child by hand and show the operator putting it back."""
    owned = [
        rb
        for rb in (await client.list(kinds.RoleBinding, namespace=REPAIRED_NAMESPACE)).items
        if _controller_uid(rb)
    ]
    if not owned:
        raise DemoError(f"no RoleBinding owned by a Tenant in {REPAIRED_NAMESPACE}")
    name = owned[0]["metadata"]["name"]
    old_uid = owned[0]["metadata"]["uid"]
    started = time.monotonic()
    await client.delete(kinds.RoleBinding, name, namespace=REPAIRED_NAMESPACE)
    screen.line(f"deleted RoleBinding {REPAIRED_NAMESPACE}/{name} by hand")

    async def restored() -> bool | None:
        got = await client.get(kinds.RoleBinding, name, namespace=REPAIRED_NAMESPACE)
        return True if got["metadata"]["uid"] != old_uid else None

    await poll(f"RoleBinding {name} restored", restored, timeout=STEP_TIMEOUT, alive=op.check_alive)
    screen.line(
        f"the operator re-created it {time.monotonic() - started:.1f}s later "
        "(it watches the children it owns)"
    )


async def wait_operator_ready(client: Client, op: Operator, screen: Screen) -> None:
    """Wait for /readyz (which includes the leader-election check) and show the Lease holder."""

    async def ready() -> str | None:
        status, body = await http_get(op.readyz_url)
        return body if status == 200 else None

    body = await poll("the operator's /readyz", ready, timeout=STEP_TIMEOUT, alive=op.check_alive)
    checks = [line.strip() for line in body.splitlines() if line.startswith("[+]")]
    screen.line(f"operator ready: {op.readyz_url} -> {' '.join(checks)}")
    lease_name = default_leader_election_id(OPERATOR_MODULE)
    lease = await client.get(kinds.Lease, lease_name, namespace="default")
    holder = (lease.get("spec") or {}).get("holderIdentity")
    screen.line(f"leader election: Lease default/{lease_name} held by {holder}")


async def converge(client: Client, op: Operator, screen: Screen, directory: Path) -> None:
    """Create the demo Tenants and redraw the table until all converged."""
    for name, spec in DEMO_TENANTS:
        await client.create(
            {
                "apiVersion": TENANT.api_version,
                "kind": TENANT.kind,
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    names = ", ".join(name for name, _ in DEMO_TENANTS)
    screen.line(f"created Tenants {names}; watching them converge:")
    screen.line()
    started = time.monotonic()

    async def converged() -> dict[str, TenantRow] | None:
        rows = await snapshot(client, directory)
        done = all(row.converged for row in rows.values())
        screen.table(render_table(rows), final=done)
        return rows if done else None

    await poll(
        "the three Tenants converging", converged, timeout=CONVERGE_TIMEOUT, alive=op.check_alive
    )
    screen.end_table()
    screen.line()
    screen.line(f"all three Tenants Ready in {time.monotonic() - started:.1f}s")


async def show_versions(client: Client, op: Operator, screen: Screen) -> None:
    """Write a Tenant at v1alpha1 as an old client would; read it at v1; read acme at v1alpha1.

    The API server stores Tenants at v1 and converts through the operator's conversion
    webhook (``TenantV1Alpha1.to_hub``/``from_hub``); what v1alpha1 cannot hold travels in
    the ``setpoint.dev/conversion-data`` annotation.
    """
    from setpoint.api.conversion import CONVERSION_DATA_ANNOTATION

    old_spec = {
        "namespaces": [OLD_CLIENT_TENANT],
        "admins": "hooli-admins",
        "cpuQuota": "1",
        "memoryQuota": "2Gi",
        "podQuota": 5,
        "network": "Open",
    }
    await client.create(
        {
            "apiVersion": TENANT_V1ALPHA1.api_version,
            "kind": "Tenant",
            "metadata": {"name": OLD_CLIENT_TENANT},
            "spec": old_spec,
        }
    )
    shown = " ".join(f"{k}={_flat(v)}" for k, v in old_spec.items())
    screen.line(f"wrote Tenant {OLD_CLIENT_TENANT} at {TENANT_V1ALPHA1.api_version}: {shown}")
    hub = await client.get(TENANT, OLD_CLIENT_TENANT)
    spec = hub["spec"]
    screen.line(f"read it at {TENANT.api_version} (stored version; converted by the webhook):")
    for key in ("namespaces", "adminGroup", "quota", "isolated", "containerDefaults"):
        screen.line(f"  {key}: {_flat(spec.get(key))}")
    old = await client.get(TENANT_V1ALPHA1, QUOTA_TENANT)
    annotations = old["metadata"].get("annotations") or {}
    kept = "containerDefaults" in annotations.get(CONVERSION_DATA_ANNOTATION, "")
    screen.line(
        f"Tenant {QUOTA_TENANT} read at {TENANT_V1ALPHA1.api_version}: admins="
        f"{old['spec']['admins']} network={old['spec']['network']} "
        f"cpuQuota={_flat(old['spec']['cpuQuota'])}"
    )
    if kept:
        screen.line(
            f"  v1-only containerDefaults rides along in annotation {CONVERSION_DATA_ANNOTATION}"
        )
    served = await _conversion_requests(op)
    screen.line(f"the operator's webhook answered {served} conversion request(s) so far")


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flat(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


async def _conversion_requests(op: Operator) -> int:
    status, body = await http_get(op.metrics_url)
    if status != 200:
        return 0
    total = 0.0
    for line in body.splitlines():
        if line.startswith("controller_runtime_webhook_requests_total{") and '"/convert"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def show_quota(client: Client, op: Operator, screen: Screen) -> None:
    """Create a Pod in a tenant namespace; show the Tenant's quota usage once it counts it."""

    async def default_service_account() -> bool | None:
        await client.get(kinds.ServiceAccount, "default", namespace=QUOTA_NAMESPACE)
        return True

    await poll(
        f"the default ServiceAccount of {QUOTA_NAMESPACE}",
        default_service_account,
        timeout=STEP_TIMEOUT,
        alive=op.check_alive,
    )
    await client.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hello", "namespace": QUOTA_NAMESPACE},
            "spec": {"containers": [{"name": "hello", "image": "registry.k8s.io/pause:3.10"}]},
        }
    )
    screen.line(
        f"created Pod {QUOTA_NAMESPACE}/hello (no kubelet here: it is stored and counted by "
        "the quota, never run; the LimitRange gave it default requests)"
    )

    async def counted() -> dict[str, Any] | None:
        tenant = await client.get(TENANT, QUOTA_TENANT)
        usage = {u.get("namespace"): u for u in (tenant.get("status") or {}).get("usage") or []}
        if str((usage.get(QUOTA_NAMESPACE) or {}).get("pods")) == "1":
            return tenant
        return None

    tenant = await poll(
        f"Tenant {QUOTA_TENANT} status.usage counting the Pod",
        counted,
        timeout=STEP_TIMEOUT,
        alive=op.check_alive,
    )
    quota = tenant["spec"].get("quota") or {}
    screen.line(f"Tenant {QUOTA_TENANT} status.usage (from each ResourceQuota's status.used):")
    screen.line(f"  {'NAMESPACE':<12} {'PODS':<8} {'CPU':<12} MEMORY")
    for usage in tenant["status"]["usage"]:
        pods = f"{usage.get('pods') or 0}/{quota.get('pods', '?')}"
        cpu = f"{usage.get('cpu') or 0}/{quota.get('cpu', '?')}"
        memory = f"{usage.get('memory') or 0}/{quota.get('memory', '?')}"
        screen.line(f"  {usage.get('namespace', '?'):<12} {pods:<8} {cpu:<12} {memory}")


async def delete_tenant(client: Client, op: Operator, screen: Screen, directory: Path) -> None:
    """Delete a Tenant; narrate the finalizer, the directory and the namespaces going away."""
    from setpoint.client.errors import NotFound

    spec = dict(DEMO_TENANTS)[DELETED_TENANT]
    namespaces: list[str] = list(spec["namespaces"])

    async def registered() -> list[str] | None:
        return await asyncio.to_thread(read_directory, directory)

    before = await poll(
        "reading the directory", registered, timeout=STEP_TIMEOUT, alive=op.check_alive
    )
    screen.line(f"directory {directory.name} before: {', '.join(before)}")
    started = time.monotonic()
    await client.delete(TENANT, DELETED_TENANT)
    screen.line(f"  +0.0s  deleted Tenant {DELETED_TENANT}")
    seen: set[str] = set()

    def event(key: str, text: str) -> None:
        if key not in seen:
            seen.add(key)
            screen.line(f"  +{time.monotonic() - started:.1f}s  {text}")

    async def all_gone() -> bool | None:
        try:
            tenant = await client.get(TENANT, DELETED_TENANT)
        except NotFound:
            tenant = None
        if tenant is not None and tenant["metadata"].get("deletionTimestamp"):
            finalizers = ", ".join(tenant["metadata"].get("finalizers") or []) or "none"
            event("held", f"Tenant {DELETED_TENANT} is deleting; its finalizers: {finalizers}")
        rows = await asyncio.to_thread(read_directory, directory)
        if rows is not None and DELETED_TENANT not in rows:
            event(
                "unregistered",
                f"directory: {DELETED_TENANT} unregistered (rows now: {', '.join(rows)})",
            )
        if tenant is None and "unregistered" not in seen:
            if rows is None:
                return None  # the file was busy (the operator writing): read it again
            raise DemoError(
                f"Tenant {DELETED_TENANT} went away while still in the directory: the "
                "finalizer did not hold it"
            )
        if tenant is None:
            event("gone", f"Tenant {DELETED_TENANT} is gone (its finalizer was removed)")
        remaining = []
        for name in namespaces:
            try:
                ns = await client.get(kinds.Namespace, name)
            except NotFound:
                event(f"gone:{name}", f"namespace {name} is gone")
                continue
            remaining.append(name)
            if ns["metadata"].get("deletionTimestamp"):
                event(f"terminating:{name}", f"namespace {name} is Terminating")
        return True if tenant is None and not remaining else None

    await poll(
        f"Tenant {DELETED_TENANT} and its namespaces going away",
        all_gone,
        timeout=STEP_TIMEOUT,
        alive=op.check_alive,
    )


TRACING_ENV: Final = {
    "OTEL_TRACES_EXPORTER": "console",
    "OTEL_SERVICE_NAME": "tenants-operator",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
}
"""How the demo turns tracing on for its operator (when ``setpoint[otel]`` is installed)."""


def tracing_available() -> bool:
    """Whether the OpenTelemetry SDK (the ``setpoint[otel]`` extra) can be imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except ModuleNotFoundError:
        return False


def traced_log_line(log_text: str) -> tuple[str, str] | None:
    """The first JSON log line carrying a ``trace_id`` whose span was exported, and the id.

    The console exporter writes each span as JSON with ``"trace_id": "0x<id>"`` to the
    same log file; a line counts once its trace's span is there too.
    """
    import json

    for line in log_text.splitlines():
        if not line.startswith('{"ts"'):
            continue
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        trace_id = fields.get("trace_id") if isinstance(fields, dict) else None
        if isinstance(trace_id, str) and f'"trace_id": "0x{trace_id}"' in log_text:
            return trace_id, line
    return None


async def show_trace(op: Operator, screen: Screen) -> None:
    """Print one reconcile's trace ID and the operator's log line that carries it."""
    if not tracing_available():
        screen.line("traces: pip install 'setpoint[otel]' to see a reconcile's trace ID here")
        return

    async def exported() -> tuple[str, str] | None:
        return traced_log_line(op.log_path.read_text(encoding="utf-8", errors="replace"))

    trace_id, line = await poll(
        "a reconcile's span and its log line", exported, timeout=STEP_TIMEOUT, alive=op.check_alive
    )
    screen.line(
        f"traces: OTEL_TRACES_EXPORTER=console; a reconcile's trace_id={trace_id} "
        f"(its span is in {op.log_path.name}), and the log line carrying it:"
    )
    screen.line(f"  {line if len(line) <= 400 else line[:397] + '...'}")


async def show_metrics(op: Operator, screen: Screen) -> None:
    """Print where /metrics is and a few of its lines."""
    status, body = await http_get(op.metrics_url)
    if status != 200:
        raise DemoError(f"{op.metrics_url} answered {status}")
    lines = body.splitlines()
    # The Tenant controller's series and the process-wide ones (leader election, webhook);
    # the example's other controllers (the directory drift poller) would crowd them out.
    samples = [
        line
        for line in lines
        if line.startswith(METRIC_PREFIXES)
        and ('controller="' not in line or f'controller="{DEMO_CONTROLLER}"' in line)
    ]
    screen.line(f"metrics: {op.metrics_url} ({len(lines)} lines); a few of them:")
    for line in samples[:20]:
        screen.line(f"  {line}")


async def _main(
    plane: ControlPlane, op: Operator, screen: Screen, keep: bool, webhook: DemoWebhook
) -> None:
    from setpoint.client.client import Client

    directory = op.directory
    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        await wait_operator_ready(client, op, screen)
        await install_validation(client, op, webhook, screen)

        screen.section("3 Tenants converging")
        await converge(client, op, screen, directory)

        screen.section("API versions: v1alpha1 beside v1")
        await show_versions(client, op, screen)

        screen.section("bad Tenants refused by the validating webhook")
        await show_validation(client, screen)

        screen.section("quota usage")
        await show_quota(client, op, screen)

        screen.section("a child deleted by hand comes back")
        await repair_child(client, op, screen)

        screen.section(f"deleting Tenant {DELETED_TENANT}")
        await delete_tenant(client, op, screen, directory)

        screen.section("metrics")
        await show_metrics(op, screen)
        await show_trace(op, screen)

    if keep:
        await _keep_running(plane, op, screen, directory)


async def _keep_running(plane: ControlPlane, op: Operator, screen: Screen, directory: Path) -> None:
    kubectl = (plane.binaries.kubectl if plane.binaries else None) or "kubectl"
    screen.section("--keep: everything stays up until Ctrl-C")
    screen.line(f"  export KUBECONFIG={plane.kubeconfig_path}")
    screen.line(f"  {kubectl} get tenants")
    screen.line(
        f"  {kubectl} get tenants.v1alpha1.tenants.setpoint.dev   # converted by the webhook"
    )
    screen.line(f"  {kubectl} describe tenant {QUOTA_TENANT}")
    screen.line(f"  {kubectl} get ns -l {TENANT_LABEL} --show-labels")
    screen.line(f"  {kubectl} get resourcequota,limitrange,rolebinding,networkpolicy -A")
    screen.line(f"  {kubectl} edit tenant globex      # change spec.namespaces and watch")
    screen.line(f"  curl -s {op.metrics_url} | grep controller_runtime")
    screen.line(f"  sqlite3 {directory} 'SELECT * FROM tenants'")
    screen.line(f"  operator log: {op.log_path}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        op.check_alive()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)
    screen.line()


async def _prepare(plane: ControlPlane, screen: Screen) -> None:
    from setpoint.client.client import Client

    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        await wait_discoverable(client)


@contextlib.contextmanager
def _terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt, so a stopped demo cleans up like Ctrl-C."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _ensure_binaries(screen: Screen) -> None:
    try:
        find_binaries()
        return
    except ControlPlaneError:
        if os.environ.get("SETPOINT_CONTROLPLANE_BIN") or os.environ.get("KUBEBUILDER_ASSETS"):
            raise
    from setpoint.testing.build import build_controlplane

    screen.line("no control-plane binaries cached yet: building them once (progress below)")
    build_controlplane(out=sys.stdout)


def _report_failure(screen: Screen, exc: Exception) -> None:
    """Say which step failed and why; with a traceback only for an unexpected error (a bug)."""
    screen.end_table()
    screen.line()
    expected = (DemoError, ControlPlaneError, ClientError, OSError)
    what = str(exc) if isinstance(exc, DemoError) else f"{type(exc).__name__}: {exc}"
    screen.line(f"demo failed: {what}")
    if not isinstance(exc, expected):  # a bug in the demo: show where
        screen.line(traceback.format_exc().rstrip())


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.nodes:  # the operator deployed from config/ on real nodes
        from setpoint.cli.demo_cluster import run_demo

        return run_demo(args.nodes, keep=args.keep)
    started = time.monotonic()
    out = sys.stdout
    screen = Screen(out, tty=out.isatty(), started=started)
    try:
        operator_path()  # fail now, with the hint, outside a checkout
    except DemoError as exc:
        print(f"setpoint: error: {exc}", file=sys.stderr)
        return 1
    workdir = Path(tempfile.mkdtemp(prefix="setpoint-demo-"))
    screen.line(f"setpoint demo: the tenants operator on a local control plane ({workdir})")
    op: Operator | None = None
    plane: ControlPlane | None = None
    failed = True
    with _terminate_on_sigterm():
        try:
            _ensure_binaries(screen)
            screen.section("control plane")
            webhook = DemoWebhook.make(workdir)
            crds = tenant_crds(screen, webhook)
            plane = ControlPlane(ControlPlaneOptions(base_dir=workdir / "plane", crds=crds))
            plane.start()
            screen.line(f"etcd, kube-apiserver, kube-controller-manager up at {plane.server}")
            screen.line(
                "the Tenant CRD was installed before kube-controller-manager started, so its "
                "garbage collector handles Tenants from the start"
            )
            screen.section("operator")
            asyncio.run(_prepare(plane, screen))
            # Forked from the main thread, after asyncio.run joined its worker threads.
            op = start_operator(
                workdir, plane.kubeconfig_path, workdir / "tenants-directory.db", webhook
            )
            screen.line("running: " + " ".join(_short(a) for a in op.command))
            screen.line(f"operator pid {op.proc.pid}, log {op.log_path}")
            asyncio.run(_main(plane, op, screen, args.keep, webhook))
            failed = False
        except Exception as exc:
            _report_failure(screen, exc)
            if op is not None:
                screen.line(f"-- last lines of the operator log ({op.log_path}):")
                screen.line(op.log_tail())
        except KeyboardInterrupt:
            screen.end_table()
            screen.line()
            screen.line("interrupted")
        finally:
            screen.section("cleaning up")
            code = None
            if op is not None:
                exited = op.proc.poll() is not None
                code = op.stop()
                how = "had exited by itself" if exited else "stopped with SIGTERM"
                screen.line(f"operator {how}: exit code {code}")
                if code != 0 and not failed:
                    screen.line("demo failed: the operator did not exit cleanly")
                    screen.line(op.log_tail())
                    failed = True
            if plane is not None:
                plane.stop()
                screen.line("control plane stopped")
            shutil.rmtree(workdir, ignore_errors=True)
            screen.line(f"removed {workdir}; nothing left running")
    screen.line()
    screen.line(f"demo {'FAILED' if failed else 'finished'} in {time.monotonic() - started:.1f}s")
    return 1 if failed else 0


def _short(arg: str) -> str:
    """Shorten the interpreter and repository paths in the shown command line."""
    if arg == sys.executable:
        return "python"
    root = str(_repo_root()) + os.sep
    return arg[len(root) :] if arg.startswith(root) else arg


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser(
        "demo",
        help="run the tenants operator on a local control plane and watch it work",
        description=(__doc__ or "").split("\n\n", 1)[0],
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the control plane and the operator running at the end, print how to "
        "explore them, and stop everything on Ctrl-C",
    )
    parser.add_argument(
        "--nodes",
        type=node_count,
        default=0,
        metavar="N",
        help="instead, deploy the operator as users do, on a local plane with N real nodes: "
        "its image built here, `kubectl apply -k` of its config/ with 2 replicas, webhooks "
        "through a Service, the leader Pod deleted (as root: `sudo make demo-cluster`; "
        "docs/controlplane.md)",
    )
    parser.set_defaults(func=_cmd_demo)


def node_count(text: str) -> int:
    """``--nodes``: 0 (the plain demo, no nodes) to the plane's maximum of nodes."""
    from setpoint.testing.nodes import MAX_NODES

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of nodes") from None
    if not 0 <= value <= MAX_NODES:
        raise argparse.ArgumentTypeError(f"{value}: a plane has 0 to {MAX_NODES} nodes")
    return value
