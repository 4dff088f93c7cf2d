"""A real local Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager.

Tests, the demo and the benchmarks run against real Kubernetes, not a mock:

>>> with ControlPlane() as plane:                     # doctest: +SKIP
...     print(plane.kubeconfig_path)

Expected flow:
    1. :func:`find_binaries` locates the four binaries (``SETPOINT_CONTROLPLANE_BIN``,
       then ``KUBEBUILDER_ASSETS``, then the build cache).
    2. :meth:`ControlPlane.start` makes a private directory, a CA, serving and
       client certificates and service-account keys, picks free loopback ports,
       and starts etcd, then kube-apiserver, then kube-controller-manager, each
       waited on until healthy.
    3. It writes an admin kubeconfig (client certificate in ``system:masters``).
    4. :meth:`ControlPlane.stop` stops them in reverse order and removes the directory.

Guarantees:
    - Two planes never collide: each has its own ports and directory.
    - Everything listens on loopback only, and etcd (client and peer ports) takes only
      clients holding a certificate from the plane's own etcd CA: another user of a
      shared machine cannot read or change the test cluster's storage. Keys and
      kubeconfigs are written owner-only (0600), never through a symlink.
    - No orphans: every child gets ``PR_SET_PDEATHSIG`` (SIGKILL), so even when the
      Python process is killed outright the children go with it; on a normal exit,
      an ``atexit`` hook stops running planes in order.
    - A start that fails raises :class:`ControlPlaneError` with the failing
      component and the tail of its log, and leaves nothing running.

Caveats:
    - Call :meth:`~ControlPlane.start` from a long-lived thread (normally the main
      thread): Linux delivers the parent-death signal when the *thread* that
      started a child exits.
    - Without ``ControlPlaneOptions(nodes=N)`` there is no kubelet or scheduler: Pods are
      stored and counted, never run. With it, see :mod:`setpoint.testing.nodes`.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import yaml

from setpoint.api.errors import SetpointError
from setpoint.observability.privatefiles import write_private
from setpoint.server.address import free_port
from setpoint.tls.certs import CertificateAuthority, signing_key_pair
from setpoint.tls.pem import KeyPair

if TYPE_CHECKING:
    from setpoint.testing.nodes import NodeSet

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "SUPPORTED_KUBERNETES_VERSIONS",
    "VERSION_ENV",
    "Binaries",
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "cache_dir",
    "check_kubernetes_version",
    "find_binaries",
    "selected_kubernetes_version",
]

DEFAULT_KUBERNETES_VERSION = "v1.37.2"
"""The Kubernetes release the Go wrapper module (``controlplane_src/go.mod``) pins and builds."""

SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = ("v1.35.4", "v1.36.3", "v1.37.2")
"""The releases setpoint is tested on (``make test-matrix``, docs/compatibility.md).

The newest patch of each of the three newest minor releases the Go module proxy serves.
:data:`DEFAULT_KUBERNETES_VERSION` is the newest; the others are built from a Go module
generated per release (:func:`setpoint.testing.build.build_controlplane`)."""

VERSION_ENV = "SETPOINT_CONTROLPLANE_VERSION"
"""The environment variable that selects which release's cached binaries a plane runs."""

_REQUIRED = ("kube-apiserver", "etcd")
_OPTIONAL = ("kube-controller-manager", "kubectl")

# Controllers that make the plane behave like a cluster for operators: cascading
# deletion, namespace teardown, quota usage, service accounts and their tokens,
# the aggregated `admin`/`edit`/`view` roles and the root CA ConfigMap.
# Workload controllers are left out: without a kubelet nothing would run, and
# they would cost CPU on a 2-core machine.
_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "resourcequota-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    # In-tree StorageVersionMigration (KEP-4192): the storagemigration.k8s.io/v1 API is
    # served by default in v1.37 (StorageVersionMigrator is GA); only this controller,
    # which needs the garbage collector above, has to be listed (decision 0010).
    "storage-version-migrator-controller",
)


class ControlPlaneError(SetpointError, RuntimeError):
    """The control plane could not be found, built, started or reached.

    The message names the component and what to do; for a failed start it
    includes the tail of that component's log.
    """


def cache_dir() -> Path:
    """The root of setpoint's cache: ``$SETPOINT_CACHE_DIR``, else ``$XDG_CACHE_HOME/setpoint``.

    Falls back to ``~/.cache/setpoint``. Build output lives here, never in the repository.
    """
    explicit = os.environ.get("SETPOINT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "setpoint"


@dataclass(frozen=True, slots=True)
class Binaries:
    """Paths of the control-plane binaries, and where they were found."""

    kube_apiserver: Path
    etcd: Path
    kube_controller_manager: Path | None
    kubectl: Path | None
    source: str
    """Human description of the origin, e.g. ``"KUBEBUILDER_ASSETS=/opt/envtest"``."""


def _binaries_in(directory: Path, source: str) -> Binaries | None:
    if not all((directory / name).is_file() for name in _REQUIRED):
        return None

    def optional(name: str) -> Path | None:
        path = directory / name
        return path if path.is_file() else None

    return Binaries(
        kube_apiserver=directory / "kube-apiserver",
        etcd=directory / "etcd",
        kube_controller_manager=optional("kube-controller-manager"),
        kubectl=optional("kubectl"),
        source=source,
    )


def selected_kubernetes_version() -> str:
    """The release to run: ``$SETPOINT_CONTROLPLANE_VERSION``, else the default.

    ``make test-matrix`` sets the variable once per release, so every plane a test
    session starts (fixtures, the demo, subprocesses) runs the same binaries.

    Raises:
        ControlPlaneError: the variable is not a supported ``vX.Y.Z`` release; the
            message lists the supported ones.

    """
    value = os.environ.get(VERSION_ENV, "").strip()
    if not value:
        return DEFAULT_KUBERNETES_VERSION
    return check_kubernetes_version(value, where=f"${VERSION_ENV}")


def check_kubernetes_version(version: str, *, where: str = "version") -> str:
    """Return ``version`` if it is one of :data:`SUPPORTED_KUBERNETES_VERSIONS`.

    Raises:
        ControlPlaneError: naming ``where`` the value came from and the supported list.

    """
    if version in SUPPORTED_KUBERNETES_VERSIONS:
        return version
    supported = ", ".join(SUPPORTED_KUBERNETES_VERSIONS)
    if not _VERSION_RE.fullmatch(version):
        raise ControlPlaneError(
            f"{where}={version!r} is not a Kubernetes release of the form vX.Y.Z; "
            f"use one of the supported releases: {supported}"
        )
    raise ControlPlaneError(
        f"{where}={version!r} is not a supported Kubernetes release; setpoint is tested on "
        f"{supported} (docs/compatibility.md has the support policy)"
    )


_VERSION_RE = re.compile(r"v(\d+)\.(\d+)\.(\d+)")


def find_binaries(version: str | None = None) -> Binaries:
    """Locate kube-apiserver and etcd (and, when present, kube-controller-manager and kubectl).

    Looks, in order, at ``$SETPOINT_CONTROLPLANE_BIN``, ``$KUBEBUILDER_ASSETS`` (so
    users of controller-runtime's envtest binaries are not made to build) and the
    build cache ``<cache_dir>/controlplane/<version>/bin``. ``version=None`` means
    :func:`selected_kubernetes_version`.

    Raises:
        ControlPlaneError: listing every place looked at and how to fix it. An
            explicitly set variable that points at a directory without the
            binaries is an error, not silently skipped.

    """
    looked: list[str] = []
    for var in ("SETPOINT_CONTROLPLANE_BIN", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(var)
        if not value:
            looked.append(f"${var} (not set)")
            continue
        found = _binaries_in(Path(value), f"{var}={value}")
        if found is None:
            raise ControlPlaneError(
                f"${var} is set to {value!r}, but that directory does not contain "
                f"{' and '.join(_REQUIRED)}; point it at a directory that does, or unset it "
                "to use the binaries built by `setpoint controlplane build`"
            )
        return found
    version = version or selected_kubernetes_version()
    cached = cache_dir() / "controlplane" / version / "bin"
    found = _binaries_in(cached, f"build cache {cached}")
    if found is not None:
        return found
    looked.append(str(cached))
    raise ControlPlaneError(
        "no control-plane binaries found; looked at: "
        + "; ".join(looked)
        + f". Run `setpoint controlplane build --version {version}` (or `make controlplane` "
        "for the default release) to build them from Go modules, or set KUBEBUILDER_ASSETS "
        "to a directory of envtest binaries"
    )


@dataclass(frozen=True, kw_only=True)
class ControlPlaneOptions:
    """How to run one local control plane. Every default is documented on its attribute."""

    version: str | None = None
    """Kubernetes release whose cached binaries to use (unless a variable points elsewhere);
    ``None`` means :func:`selected_kubernetes_version` (``$SETPOINT_CONTROLPLANE_VERSION``,
    else :data:`DEFAULT_KUBERNETES_VERSION`)."""

    binaries: Binaries | None = None
    """Explicit binaries; ``None`` means :func:`find_binaries`."""

    controller_manager: bool = True
    """Run kube-controller-manager (garbage collection, namespace deletion, quota, SA tokens).

    When ``True`` and the binary is missing (envtest ships none), :meth:`ControlPlane.start`
    fails rather than silently giving a plane without garbage collection."""

    start_timeout: float = 90.0
    """Seconds to wait for each component to become healthy."""

    stop_timeout: float = 15.0
    """Seconds to wait for a component to exit after SIGTERM before SIGKILL."""

    base_dir: Path | None = None
    """Parent of the per-plane directory; ``None`` means the system temp dir."""

    apiserver_args: Mapping[str, str] = field(default_factory=dict)
    """Extra ``--flag=value`` arguments for kube-apiserver, overriding the defaults."""

    crds: Sequence[Mapping[str, Any]] = ()
    """CustomResourceDefinitions to install, and wait for until Established, before
    kube-controller-manager starts.

    Its garbage collector rescans the API for new kinds only every 30 seconds, so
    owner references to a kind installed later cascade only after that rescan.
    Installing the CRDs first makes cascading deletion work from the start (the
    demo and example tests use this)."""

    nodes: int = 0
    """Worker nodes to start with the plane (0 to 9; ``setpoint controlplane up --nodes N``).

    Each is a real kubelet with containerd and kube-proxy in a network namespace of its
    own (:mod:`setpoint.testing.nodes`, decision 0021); kube-scheduler joins the plane and
    kube-controller-manager runs the node and workload controllers. Needs root, the
    packages ``make cluster-deps`` installs and ``setpoint controlplane build --nodes``."""

    def __post_init__(self) -> None:
        if self.start_timeout <= 0 or self.stop_timeout <= 0:
            raise ValueError("ControlPlaneOptions: start_timeout and stop_timeout must be > 0")
        from setpoint.testing.nodes import check_node_count

        check_node_count(self.nodes)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # Linux-only safety net: if the test process dies without cleanup (SIGKILL,
    # OOM), the kernel kills the component too, so no etcd or kube-apiserver is
    # ever orphaned on a developer's machine or a CI runner.
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Process:
    """One component process with its log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, and we stop children in order
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl must run in the child
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, timeout: float) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


_LIVE_PLANES: set[ControlPlane] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_live_planes() -> None:
    with _LIVE_LOCK:
        planes = list(_LIVE_PLANES)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


class ControlPlane:
    """One running local control plane. See the module docstring for flow and guarantees."""

    def __init__(self, options: ControlPlaneOptions | None = None) -> None:
        self.options = options or ControlPlaneOptions()
        self._dir: Path | None = None
        self._ca: CertificateAuthority | None = None
        self._admin: KeyPair | None = None
        self._processes: list[_Process] = []
        self._apiserver: _Process | None = None
        self._etcd_context: ssl.SSLContext | None = None
        self.api_port = 0
        """The kube-apiserver secure port on 127.0.0.1 (0 until started)."""
        self.binaries: Binaries | None = None
        """The binaries in use (set by :meth:`start`)."""
        self.nodes: NodeSet | None = None
        """The worker nodes (``ControlPlaneOptions(nodes=N)``), while the plane runs."""
        self.node_leftovers: list[str] = []
        """What stopping the nodes could not undo (empty when the host is as it was)."""
        self._extra_apiserver_args: dict[str, str] = {}

    # -- public surface ---------------------------------------------------

    @property
    def directory(self) -> Path:
        """The plane's private directory (certificates, etcd data, logs, kubeconfigs)."""
        if self._dir is None:
            raise ControlPlaneError("the control plane is not started")
        return self._dir

    @property
    def server(self) -> str:
        """The kube-apiserver URL, ``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def kubeconfig_path(self) -> Path:
        """The admin kubeconfig (client certificate in group ``system:masters``)."""
        return self.directory / "admin.kubeconfig"

    @property
    def ca_pem(self) -> bytes:
        """The cluster CA certificate (PEM)."""
        if self._ca is None:
            raise ControlPlaneError("the control plane is not started")
        return self._ca.cert_pem

    @property
    def has_controller_manager(self) -> bool:
        """Whether kube-controller-manager runs (garbage collection, namespaces, quota)."""
        return any(p.name == "kube-controller-manager" for p in self._processes)

    @property
    def running(self) -> bool:
        """Whether every component process is alive."""
        return bool(self._processes) and all(p.alive() for p in self._processes)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd, kube-apiserver and (unless disabled) kube-controller-manager.

        With ``ControlPlaneOptions(nodes=N)``, the nodes are checked first (before anything
        starts), then kube-scheduler and the N nodes start last; it returns once they are
        Ready (:mod:`setpoint.testing.nodes`).

        Raises:
            ControlPlaneError: binaries missing, or a component failed to become
                healthy within ``start_timeout`` (the message has its log tail).
                :class:`~setpoint.testing.nodes.NodesError` (a subclass) for nodes:
                not root, a package missing, a kubelet that exited (its log tail).
                Whatever had started is stopped.

        """
        if self._processes:
            raise ControlPlaneError("this control plane is already started")
        opts = self.options
        binaries = opts.binaries or find_binaries(opts.version)
        if opts.controller_manager and binaries.kube_controller_manager is None:
            raise ControlPlaneError(
                f"kube-controller-manager is not among the binaries from {binaries.source}; "
                "garbage collection, namespace deletion and quota status need it. Build it with "
                "`setpoint controlplane build`, or pass ControlPlaneOptions(controller_manager="
                "False) to run without it"
            )
        if opts.nodes and not opts.controller_manager:
            raise ControlPlaneError(
                "ControlPlaneOptions(nodes=...) needs kube-controller-manager (node lifecycle, "
                "node CIDRs, EndpointSlices, Deployments): leave controller_manager=True"
            )
        self.binaries = binaries
        base = opts.base_dir
        if base is not None:
            base.mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="setpoint-cp-", dir=base))
        self._etcd_context = None  # a new directory has a new etcd CA
        with _LIVE_LOCK:
            _LIVE_PLANES.add(self)
        try:
            if opts.nodes:
                from setpoint.testing.nodes import NodeSet

                self.nodes = NodeSet(
                    opts.nodes, self._dir / "nodes", bin_dir=self._node_bin_dir(binaries)
                )
                # Before anything starts: root, packages, binaries, names, the relay port.
                self.nodes.preflight()
            self._write_pki()
            if self.nodes is not None:
                self._extra_apiserver_args = self.nodes.apiserver_args(self._dir)
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig(self.kubeconfig_path, "admin", self._admin_pair())
            if opts.crds:
                self._install_crds(opts.crds)
            if opts.controller_manager:
                self._start_controller_manager()
            if self.nodes is not None:
                self.nodes.start(self)
        except BaseException:
            self.stop()
            raise

    def _node_bin_dir(self, binaries: Binaries) -> Path:
        """Where kubelet, kube-proxy and kube-scheduler are: beside the plane's, else the cache."""
        if (binaries.kube_apiserver.parent / "kubelet").is_file():
            return binaries.kube_apiserver.parent
        version = self.options.version or selected_kubernetes_version()
        return cache_dir() / "controlplane" / version / "bin"

    def stop(self) -> None:
        """Stop every component in reverse start order and remove the plane's directory.

        Safe to call more than once, and on a plane that failed half-way through start.
        Nodes go first, while kube-apiserver still runs (their Pods are deleted through
        it); what they could not undo is in :attr:`node_leftovers`.
        """
        if self.nodes is not None:
            self.node_leftovers = list(self.nodes.stop(self.options.stop_timeout))
            self.nodes = None
        for proc in reversed(self._processes):
            proc.stop(self.options.stop_timeout)
        self._processes.clear()
        self._apiserver = None
        with _LIVE_LOCK:
            _LIVE_PLANES.discard(self)
        if self._dir is not None and os.environ.get("SETPOINT_KEEP_CONTROLPLANE_DIR") != "1":
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

    def restart_apiserver(self, downtime: float = 0.0) -> None:
        """Stop kube-apiserver, wait ``downtime`` seconds, and start it again on the same port.

        Watches and connections of clients break as they would in a real outage;
        etcd keeps its data, so resourceVersions continue.
        """
        api = self._apiserver
        if api is None:
            raise ControlPlaneError("the control plane is not started")
        api.stop(self.options.stop_timeout)
        if downtime > 0:
            time.sleep(downtime)
        api.start()
        self._wait_healthy(api, self._api_ready)

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (for outage tests); :meth:`start_apiserver` resumes it."""
        if self._apiserver is None:
            raise ControlPlaneError("the control plane is not started")
        self._apiserver.stop(self.options.stop_timeout)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again after :meth:`stop_apiserver`, and wait until ready."""
        api = self._apiserver
        if api is None:
            raise ControlPlaneError("the control plane is not started")
        if not api.alive():
            api.start()
        self._wait_healthy(api, self._api_ready)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision and return that revision.

        kube-apiserver does this every five minutes; doing it on demand makes
        every older resourceVersion "too old", so tests can prove that watchers
        and pagers recover from 410 Gone without waiting.
        """
        if self._dir is None:
            raise ControlPlaneError("the control plane is not started")
        status = self._etcd_post("/v3/maintenance/status", {})
        revision = int(status["header"]["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def stored_api_version(self, resource_path: str) -> str | None:
        """The apiVersion an object is stored at in etcd, read from etcd itself.

        ``resource_path`` is the object's key below ``/registry/``, e.g.
        ``demo.io/widgets/default/w1`` (group/plural/namespace/name; no namespace
        for cluster-scoped objects). ``None`` when the key does not exist.
        Storage-version migration tests use it to prove what the API server
        cannot show: every object of a CRD is stored as JSON at the version the
        server encoded it with when it was last written.
        """
        if self._dir is None:
            raise ControlPlaneError("the control plane is not started")
        key = base64.b64encode(f"/registry/{resource_path}".encode()).decode()
        found = self._etcd_post("/v3/kv/range", {"key": key})
        for kv in found.get("kvs") or ():
            stored = json.loads(base64.b64decode(kv["value"]))
            return str(stored.get("apiVersion"))
        return None

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self._etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10, context=self._etcd_ssl()) as resp:
            result: dict[str, Any] = json.loads(resp.read())
        return result

    def _etcd_ssl(self) -> ssl.SSLContext:
        """A client context for etcd: its CA, and the client certificate it requires.

        Made once per plane (the health poll asks for it every 0.1 s during start-up).
        """
        if self._etcd_context is None:
            d = self.directory
            ctx = ssl.create_default_context(cafile=str(d / "etcd-ca.crt"))
            ctx.load_cert_chain(d / "etcd-client.crt", d / "etcd-client.key")
            self._etcd_context = ctx
        return self._etcd_context

    def kubeconfig_for_user(
        self, user: str, groups: Sequence[str] = (), *, path: Path | None = None
    ) -> Path:
        """Write a kubeconfig that authenticates as ``user`` in ``groups`` (client certificate).

        The user has no permissions until RBAC grants some, which is what RBAC
        tests and least-privilege e2e runs need.
        """
        pair = self._require_ca().client_cert(user, tuple(groups))
        target = path or self.directory / f"user-{_safe(user)}.kubeconfig"
        self._write_kubeconfig(target, user, pair)
        return target

    def kubeconfig_for_token(self, token: str, *, name: str, path: Path | None = None) -> Path:
        """Write a kubeconfig that authenticates with a bearer token (e.g. a service account's)."""
        target = path or self.directory / f"token-{_safe(name)}.kubeconfig"
        user: dict[str, Any] = {"token": token}
        self._write_kubeconfig_doc(target, name, user)
        return target

    def env(self) -> dict[str, str]:
        """Environment variables that point clients (kubectl, setpoint) at this plane."""
        return {"KUBECONFIG": str(self.kubeconfig_path)}

    # -- internals ----------------------------------------------------------

    def _require_ca(self) -> CertificateAuthority:
        if self._ca is None:
            raise ControlPlaneError("the control plane is not started")
        return self._ca

    def _admin_pair(self) -> KeyPair:
        if self._admin is None:
            raise ControlPlaneError("the control plane is not started")
        return self._admin

    def _write_pki(self) -> None:
        d = self.directory
        ca = CertificateAuthority()
        self._ca = ca
        serving = ca.serving_cert(
            "kube-apiserver",
            (
                "127.0.0.1",
                "localhost",
                "10.0.0.1",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
        )
        self._admin = ca.client_cert("setpoint-admin", ("system:masters",))
        sa_key, sa_pub = signing_key_pair()
        # A separate front-proxy CA, as kubeadm has: the aggregation layer and
        # components that delegate authentication (kube-controller-manager)
        # expect the request-header CA to be configured.
        front_ca = CertificateAuthority("setpoint-front-proxy-ca")
        front_client = front_ca.client_cert("front-proxy-client")
        files = {
            "front-proxy-ca.crt": front_ca.cert_pem,
            "front-proxy-client.crt": front_client.cert_pem,
            "front-proxy-client.key": front_client.key_pem,
            "ca.crt": ca.cert_pem,
            "ca.key": ca.key_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "sa.key": sa_key,
            "sa.pub": sa_pub,
        }
        # etcd has its own CA (as with kubeadm) and takes only clients holding one of its
        # certificates: another user of this machine must not read or write the cluster's
        # storage through a loopback port. The peer port is held to the same rule.
        etcd_ca = CertificateAuthority("setpoint-etcd-ca")
        etcd_serving = etcd_ca.serving_cert("etcd", ("127.0.0.1", "localhost"), client_auth=True)
        etcd_client = etcd_ca.client_cert("kube-apiserver-etcd-client")
        files.update(
            {
                "etcd-ca.crt": etcd_ca.cert_pem,
                "etcd-server.crt": etcd_serving.cert_pem,
                "etcd-server.key": etcd_serving.key_pem,
                "etcd-client.crt": etcd_client.cert_pem,
                "etcd-client.key": etcd_client.key_pem,
            }
        )
        for name, data in files.items():
            write_private(d / name, data)

    def _spawn(self, name: str, argv: Sequence[str]) -> _Process:
        proc = _Process(name, argv, self.directory / f"{name}.log")
        proc.start()
        self._processes.append(proc)
        return proc

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        d = self.directory
        client_port, peer_port = free_port(), free_port()
        self._etcd_url = f"https://127.0.0.1:{client_port}"
        peer = f"https://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=default",
                f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                f"--cert-file={d / 'etcd-server.crt'}",
                f"--key-file={d / 'etcd-server.key'}",
                f"--trusted-ca-file={d / 'etcd-ca.crt'}",
                "--client-cert-auth=true",
                f"--peer-cert-file={d / 'etcd-server.crt'}",
                f"--peer-key-file={d / 'etcd-server.key'}",
                f"--peer-trusted-ca-file={d / 'etcd-ca.crt'}",
                "--peer-client-cert-auth=true",
                # Tests throw away the data: fsync only costs time.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_healthy(etcd, self._etcd_ready)

    def _apiserver_argv(self) -> list[str]:
        assert self.binaries is not None
        d = self.directory
        args: dict[str, str] = {
            "etcd-servers": self._etcd_url,
            "etcd-cafile": str(d / "etcd-ca.crt"),
            "etcd-certfile": str(d / "etcd-client.crt"),
            "etcd-keyfile": str(d / "etcd-client.key"),
            "bind-address": "127.0.0.1",
            "advertise-address": "127.0.0.1",
            # No endpoint reconciler: it refuses a loopback advertise address, and a
            # local plane has no other apiserver replicas to advertise.
            "endpoint-reconciler-type": "none",
            "secure-port": str(self.api_port),
            "cert-dir": str(d / "apiserver-certs"),
            "tls-cert-file": str(d / "apiserver.crt"),
            "tls-private-key-file": str(d / "apiserver.key"),
            "client-ca-file": str(d / "ca.crt"),
            "authorization-mode": "RBAC",
            "requestheader-client-ca-file": str(d / "front-proxy-ca.crt"),
            "requestheader-allowed-names": "front-proxy-client",
            "requestheader-username-headers": "X-Remote-User",
            "requestheader-group-headers": "X-Remote-Group",
            "requestheader-extra-headers-prefix": "X-Remote-Extra-",
            "proxy-client-cert-file": str(d / "front-proxy-client.crt"),
            "proxy-client-key-file": str(d / "front-proxy-client.key"),
            "service-account-key-file": str(d / "sa.pub"),
            "service-account-signing-key-file": str(d / "sa.key"),
            "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
            "api-audiences": "https://kubernetes.default.svc.cluster.local",
            "service-cluster-ip-range": "10.0.0.0/24",
            "allow-privileged": "true",
            "profiling": "false",
            "storage-backend": "etcd3",
            # On SIGTERM, end open watches within a second. Without it kube-apiserver keeps
            # serving them (kube-controller-manager's, an informer's) until stop_timeout
            # kills it: restart_apiserver() and stop() took 15 s longer whenever one was open.
            "shutdown-watch-termination-grace-period": "1s",
            "v": "1",
        }
        args.update(self._extra_apiserver_args)
        args.update(self.options.apiserver_args)
        return [str(self.binaries.kube_apiserver), *(f"--{k}={v}" for k, v in args.items())]

    def _start_apiserver(self) -> None:
        self.api_port = free_port()
        api = self._spawn("kube-apiserver", self._apiserver_argv())
        self._apiserver = api
        self._wait_healthy(api, self._api_ready)

    def _start_controller_manager(self) -> None:
        assert self.binaries is not None and self.binaries.kube_controller_manager is not None
        d = self.directory
        kubeconfig = d / "controller-manager.kubeconfig"
        pair = self._require_ca().client_cert("system:kube-controller-manager")
        self._write_kubeconfig(kubeconfig, "system:kube-controller-manager", pair)
        self._kcm_port = free_port()
        controllers, extra = list(_CONTROLLERS), []
        if self.nodes is not None:
            controllers += self.nodes.controllers()
            extra = [f"--{k}={v}" for k, v in self.nodes.controller_manager_args().items()]
        kcm = self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self._kcm_port}",
                f"--cert-dir={d / 'kcm-certs'}",
                f"--controllers={','.join(controllers)}",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={d / 'ca.crt'}",
                # Each controller acts as its own service account with its bootstrap
                # RBAC role, as kubeadm sets it up: the plane enforces real RBAC.
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                # Faster quota status and GC discovery than production defaults:
                # tests wait on these, and a local plane has little to sync.
                "--resource-quota-sync-period=10s",
                "--v=1",
                *extra,
            ],
        )
        self._wait_healthy(kcm, self._kcm_ready)

    def _api_request(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=10, context=self._admin_ssl()) as resp:
            return json.loads(resp.read())

    def _install_crds(self, crds: Sequence[Mapping[str, Any]]) -> None:
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        names = []
        for crd in crds:
            name = str((crd.get("metadata") or {}).get("name") or "")
            if not name:
                raise ControlPlaneError("ControlPlaneOptions.crds: a CRD has no metadata.name")
            try:
                self._api_request("POST", base, crd)
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    detail = exc.read().decode(errors="replace")[:500]
                    raise ControlPlaneError(
                        f"installing CRD {name} failed (HTTP {exc.code}): {detail}"
                    ) from exc
            names.append(name)
        deadline = time.monotonic() + self.options.start_timeout
        for name in names:
            while True:
                conditions = (self._api_request("GET", f"{base}/{name}").get("status") or {}).get(
                    "conditions"
                ) or []
                if any(
                    c.get("type") == "Established" and c.get("status") == "True" for c in conditions
                ):
                    break
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} was not Established in time")
                time.sleep(0.1)

    def _write_kubeconfig(self, path: Path, user: str, pair: KeyPair) -> None:
        import base64

        self._write_kubeconfig_doc(
            path,
            user,
            {
                "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
                "client-key-data": base64.b64encode(pair.key_pem).decode(),
            },
        )

    def _write_kubeconfig_doc(self, path: Path, user: str, credentials: dict[str, Any]) -> None:
        import base64

        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "setpoint-local",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(self.ca_pem).decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {"name": "setpoint-local", "context": {"cluster": "setpoint-local", "user": user}}
            ],
            "current-context": "setpoint-local",
        }
        write_private(path, yaml.safe_dump(doc, sort_keys=False).encode())

    # -- health -------------------------------------------------------------

    def _wait_healthy(self, proc: _Process, probe: Any) -> None:
        deadline = time.monotonic() + self.options.start_timeout
        last_error = "no answer yet"
        while True:
            if not proc.alive():
                raise ControlPlaneError(
                    f"{proc.name} exited during start (code "
                    f"{proc.proc.returncode if proc.proc else '?'}); last log lines from "
                    f"{proc.log_path}:\n{proc.log_tail()}"
                )
            try:
                ok, detail = probe()
            except OSError as exc:  # refused while starting, TLS not up yet, ...
                ok, detail = False, str(exc)
            if ok:
                return
            last_error = detail
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{proc.name} did not become healthy within {self.options.start_timeout:.0f}s "
                    f"(last check: {last_error}); last log lines from {proc.log_path}:\n"
                    f"{proc.log_tail()}"
                )
            time.sleep(0.1)

    def _etcd_ready(self) -> tuple[bool, str]:
        with urllib.request.urlopen(
            f"{self._etcd_url}/health", timeout=2, context=self._etcd_ssl()
        ) as resp:
            body = json.loads(resp.read())
        return body.get("health") == "true", f"etcd /health: {body}"

    def _admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        pair = self._admin_pair()
        cert, key = self.directory / "admin.crt", self.directory / "admin.key"
        if not cert.exists():
            write_private(cert, pair.cert_pem)
            write_private(key, pair.key_pem)
        ctx.load_cert_chain(cert, key)
        return ctx

    def _api_ready(self) -> tuple[bool, str]:
        try:
            with urllib.request.urlopen(
                f"{self.server}/readyz", timeout=5, context=self._admin_ssl()
            ) as resp:
                return resp.status == 200, f"/readyz: HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            return False, f"/readyz: HTTP {exc.code}"

    def _kcm_ready(self) -> tuple[bool, str]:
        # kube-controller-manager serves a self-signed certificate; this is a
        # loopback liveness check of a process we started, not a trust decision.
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self._kcm_port}/healthz", timeout=5, context=ctx
            ) as resp:
                return resp.status == 200, f"/healthz: HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            return False, f"/healthz: HTTP {exc.code}"

    def logs(self) -> Iterator[tuple[str, Path]]:
        """Each component's name and log file, for attaching to failed test reports.

        With nodes, their daemons' logs too (kube-scheduler, each containerd, kubelet and
        kube-proxy).
        """
        for proc in self._processes:
            yield proc.name, proc.log_path
        if self.nodes is not None:
            yield from self.nodes.logs()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
