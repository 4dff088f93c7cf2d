"""``setpoint run <module or path>``: start any setpoint operator.

The operator contract is one function. The target module defines::

    def setup(manager: setpoint.Manager) -> None:     # or ``async def``
        manager.controller("tenant").for_(Tenant).build(reconcile)

``setpoint run`` builds the client and the :class:`~setpoint.manager.Manager` from flags and
environment variables (the same settings in a shell, a Deployment or CI), imports the target,
calls ``setup(manager)`` and runs the manager until SIGTERM/SIGINT.

The target is a dotted module name importable from ``sys.path`` (the current directory is
added, as for ``python -m``), a ``.py`` file, or a package directory. For a path, the directory
above its outermost package goes on ``sys.path``, so the operator's own absolute and relative
imports work as they would when installed.

Every flag also reads an environment variable; a flag given on the command line wins over the
variable, which wins over the default. ``setpoint run --help`` lists them all.

Exit codes: 0 after a clean shutdown, 1 for any error (the message says what to do), 2 for a
command-line mistake (argparse), 3 when the leader lease was lost (the process should be
restarted, as controller-runtime's managers are).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

from setpoint.api.errors import SetpointError
from setpoint.api.runnable import RunnableGroup
from setpoint.api.validation import is_dns1123_label, is_dns1123_subdomain
from setpoint.client.config import SERVICE_ACCOUNT_DIR

if TYPE_CHECKING:
    from setpoint.client.protocols import ApiClient
    from setpoint.manager.options import ManagerOptions
    from setpoint.manager.sharedcache import CacheLike
    from setpoint.server.tls import ServerTLS
    from setpoint.webhook.server import CertificateDirectory, CertificateSource

__all__ = [
    "EXIT_ERROR",
    "EXIT_LEADERSHIP_LOST",
    "EXIT_OK",
    "LoadedOperator",
    "OperatorLoadError",
    "RunSettings",
    "build_manager_options",
    "default_health_probe_address",
    "default_leader_election_id",
    "default_leader_election_namespace",
    "load_operator",
    "register",
    "resolve_settings",
    "run_command",
]

EXIT_OK: Final = 0
"""The manager shut down cleanly (SIGTERM, SIGINT, or the operator called ``stop()``)."""

EXIT_ERROR: Final = 1
"""Something failed: configuration, loading the operator, ``setup``, or a runnable."""

EXIT_LEADERSHIP_LOST: Final = 3
"""The leader lease was lost (``LeaderElectionLost``); restart the process to campaign again."""

_LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")
_LOG_FORMATS: Final = ("console", "json")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})

log = logging.getLogger("setpoint.cli.run")


def _manager_default(name: str) -> Any:
    """A ``ManagerOptions`` default, read from the dataclass so defaults live in one place."""
    from setpoint.manager.options import ManagerOptions

    for f in dataclasses.fields(ManagerOptions):
        if f.name == name:
            return f.default
    raise KeyError(name)  # pragma: no cover - a renamed option; the unit tests catch it


# -- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """Everything ``setpoint run`` needs, resolved from flags, environment and defaults.

    Build it with :func:`resolve_settings`; the values are validated there, so a bad value
    is reported with the flag and the variable it came from.
    """

    target: str
    """The operator: a dotted module name, a ``.py`` file or a package directory."""

    kubeconfig: str | None = None
    """One kubeconfig file. ``None``: ``$KUBECONFIG`` (a ``:``-separated list, merged as
    kubectl does), else ``~/.kube/config``, else the pod's service account."""

    context: str | None = None
    """The kubeconfig context to use. ``None``: the file's ``current-context``."""

    log_level: str = "info"
    """``debug``, ``info``, ``warning``, ``error`` or ``critical``."""

    log_format: str = "console"
    """``console`` (human-readable lines) or ``json`` (one object per line)."""

    metrics_bind_address: str = dataclasses.field(
        default_factory=lambda: str(_manager_default("metrics_bind_address"))
    )
    """Where ``/metrics`` is served; ``"0"`` disables it. Default: ``ManagerOptions``'
    (``"127.0.0.1:8080"``, loopback only)."""

    metrics_secure: bool = False
    """Serve ``/metrics`` over HTTPS to callers the API server authenticates and authorizes
    (``ManagerOptions.metrics_secure``)."""

    metrics_cert_dir: str | None = None
    """With ``metrics_secure``: a directory with the metrics serving certificate's ``tls.crt``
    and ``tls.key`` (a mounted ``kubernetes.io/tls`` Secret, cert-manager's for example), read
    at start and watched for changes (``ManagerOptions.metrics_tls``), so scrapers can verify
    the server. ``None``: a self-signed certificate made in memory."""

    health_probe_bind_address: str = dataclasses.field(
        default_factory=lambda: str(_manager_default("health_probe_bind_address"))
    )
    """Where ``/healthz`` and ``/readyz`` are served; ``"0"`` disables them.
    :func:`resolve_settings` defaults it with :func:`default_health_probe_address`: every
    interface in a pod (the kubelet probes the pod's IP), loopback elsewhere."""

    leader_elect: bool = False
    """Campaign for a Lease before starting controllers. Off by default, as in kubebuilder's
    scaffolding, so a local run needs no Lease permissions; turn it on for a Deployment with
    more than one replica (or for rolling updates without overlap)."""

    leader_election_namespace: str | None = None
    """Namespace of the Lease. ``None``: the pod's namespace in a cluster, else ``default``
    (see :func:`default_leader_election_namespace`)."""

    leader_election_id: str | None = None
    """Name of the Lease. ``None``: derived from the operator's module name (see
    :func:`default_leader_election_id`)."""

    leader_election_lease_duration: float = dataclasses.field(
        default_factory=lambda: _leader_election_default("lease_duration")
    )
    """Seconds other candidates wait after they last saw the Lease renewed before they take
    over (``LeaderElectionOptions.lease_duration``, a whole number; controller-runtime's
    ``LeaseDuration``). With ``processes``, the supervisor holds the Lease and its workers
    lead for ``lease_duration - renew_deadline`` after each of its renewals."""

    leader_election_renew_deadline: float = dataclasses.field(
        default_factory=lambda: _leader_election_default("renew_deadline")
    )
    """Seconds the leader keeps acting while its renewals fail
    (``LeaderElectionOptions.renew_deadline``; controller-runtime's ``RenewDeadline``)."""

    leader_election_retry_period: float = dataclasses.field(
        default_factory=lambda: _leader_election_default("retry_period")
    )
    """Seconds between renewals and between attempts to acquire
    (``LeaderElectionOptions.retry_period``; controller-runtime's ``RetryPeriod``)."""

    namespaces: tuple[str, ...] = ()
    """The namespaces the manager's cache watches; ``()``: all. Cluster-scoped kinds are
    unaffected. Restricting it needs only namespaced RBAC in those namespaces."""

    graceful_shutdown_timeout: float = dataclasses.field(
        default_factory=lambda: float(_manager_default("graceful_shutdown_timeout"))
    )
    """Seconds the whole shutdown may take after SIGTERM. Default: ``ManagerOptions``' (30)."""

    webhook_bind_address: str = ":9443"
    """Where the webhook server listens, if the operator registers webhooks (``:9443``,
    controller-runtime's port)."""

    webhook_cert_dir: str | None = None
    """Directory with the webhook server's ``tls.crt`` and ``tls.key``. ``None``:
    controller-runtime's ``$TMPDIR/k8s-webhook-server/serving-certs``."""

    cache_sync_timeout: float = dataclasses.field(
        default_factory=lambda: float(_manager_default("cache_sync_timeout"))
    )
    """Seconds the caches (and each controller's informers) may take for their initial list
    before startup fails. Default: ``ManagerOptions``' (120)."""

    record: str | None = None
    """Record informer events and API requests to this JSONL file
    (``ManagerOptions.record``, :mod:`setpoint.observability.recording`). ``None``: off."""

    processes: int | str = 1
    """Worker processes (``ManagerOptions.processes``): ``1`` runs everything in this
    process; ``N`` or ``"auto"`` (the Pod's CPU quota) runs a supervisor and N workers that
    split the objects (decision 0038). More than one turns leader election on."""

    webhook_cert_secret: str | None = None
    """Manage the webhook server's CA and serving certificate in this Secret of the
    operator's namespace (:class:`~setpoint.webhook.certificates.SelfManagedCertificates`)
    instead of reading ``webhook_cert_dir``. ``None``: read the directory."""

    webhook_service: str = "webhook-service"
    """With ``webhook_cert_secret``: the Service the API server calls the webhooks through;
    the certificate is issued for its names (``<service>.<namespace>.svc``)."""

    webhook_hosts: tuple[str, ...] = ()
    """With ``webhook_cert_secret``: further DNS names or IP addresses for the certificate
    (``127.0.0.1`` for a run outside the cluster)."""

    webhook_inject: tuple[str, ...] = ()
    """With ``webhook_cert_secret``: objects whose caBundle is kept equal to the CA, as
    ``crd/NAME``, ``validating/NAME`` or ``mutating/NAME``."""

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("RunSettings.target must name a module, a .py file or a directory")
        if self.log_level not in _LOG_LEVELS:
            raise ValueError(f"RunSettings.log_level={self.log_level!r}: use one of {_LOG_LEVELS}")
        if self.log_format not in _LOG_FORMATS:
            raise ValueError(
                f"RunSettings.log_format={self.log_format!r}: use one of {_LOG_FORMATS}"
            )
        if self.webhook_cert_secret is not None and self.webhook_cert_dir is not None:
            raise ValueError(
                "--webhook-cert-secret and --webhook-cert-dir are two sources of the webhook "
                "certificate: give one (the Secret for self-managed certificates, the directory "
                "for one mounted from cert-manager's Secret)"
            )
        if self.metrics_cert_dir is not None and not self.metrics_secure:
            raise ValueError(
                f"--metrics-cert-dir {self.metrics_cert_dir} is the certificate of secure "
                "metrics, but /metrics is served over plain HTTP: add --metrics-secure (or "
                "SETPOINT_METRICS_SECURE=true), or drop --metrics-cert-dir"
            )
        self._check_leader_election_timing()
        if self.webhook_cert_secret is None and (self.webhook_hosts or self.webhook_inject):
            raise ValueError(
                "--webhook-host and --webhook-inject configure self-managed certificates; add "
                "--webhook-cert-secret NAME"
            )

    def _check_leader_election_timing(self) -> None:
        """Refuse lease timings that break leader election's rules, named by their flags."""
        from setpoint.manager.options import LeaderElectionOptions

        timings = {
            "lease_duration": self.leader_election_lease_duration,
            "renew_deadline": self.leader_election_renew_deadline,
            "retry_period": self.leader_election_retry_period,
        }
        defaults = {name: _leader_election_default(name) for name in timings}
        if timings == defaults:
            return
        if not self.leader_elect and self.processes == 1:
            raise ValueError(
                "--leader-election-lease-duration, --leader-election-renew-deadline and "
                "--leader-election-retry-period time the leader election Lease, which is off: "
                "add --leader-elect (or SETPOINT_LEADER_ELECT=true), or drop them"
            )
        try:
            LeaderElectionOptions(
                name="leader-election",
                lease_duration=self.leader_election_lease_duration,
                renew_deadline=self.leader_election_renew_deadline,
                retry_period=self.leader_election_retry_period,
            )
        except ValueError as exc:
            message = str(exc).removeprefix("LeaderElectionOptions.")
            for name in timings:
                message = message.replace(name, "--leader-election-" + name.replace("_", "-"))
            raise ValueError(message) from None


def _leader_election_default(name: str) -> float:
    from setpoint.manager.options import LeaderElectionOptions

    default = LeaderElectionOptions.__dataclass_fields__[name].default
    assert isinstance(default, float)
    return default


@dataclass(frozen=True)
class _Setting:
    """One ``setpoint run`` setting: its flag, its environment variable and how to read it."""

    dest: str
    flag: str
    env: str
    help: str
    default_text: str
    parse: Callable[[str], Any]
    metavar: str | None = None
    repeatable: bool = False
    """The flag may be given several times (a tuple); the variable takes a comma-separated
    list."""


def _parse_level(text: str) -> str:
    level = text.strip().lower()
    if level == "warn":
        level = "warning"
    if level not in _LOG_LEVELS:
        raise ValueError(f"use one of {', '.join(_LOG_LEVELS)}")
    return level


def _parse_format(text: str) -> str:
    value = text.strip().lower()
    if value not in _LOG_FORMATS:
        raise ValueError(f"use {' or '.join(_LOG_FORMATS)}")
    return value


def _parse_address(option: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        from setpoint.server.address import parse_bind_address

        value = text.strip()
        try:
            parse_bind_address(value, option=option)
        except ValueError as exc:
            # The option's own message names ManagerOptions; keep only the rule and the forms.
            raise ValueError(str(exc).split(" is not a bind address ", 1)[-1]) from None
        return value

    return parse


def _parse_webhook_address(text: str) -> str:
    from setpoint.webhook.server import WebhookServerOptions

    value = text.strip()
    WebhookServerOptions(bind_address=value)  # raises ValueError naming the problem
    return value


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("use true or false (also 1/0, yes/no, on/off)")


def _parse_namespace(text: str) -> str:
    value = text.strip()
    if not is_dns1123_label(value):
        raise ValueError(
            f"{value!r} is not a namespace name (a DNS label: lowercase letters, digits and '-', "
            "at most 63 characters)"
        )
    return value


def _list_parser(parse: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    """A comma-separated list of what ``parse`` reads (a repeatable setting's variable)."""

    def parse_list(text: str) -> tuple[Any, ...]:
        return tuple(parse(part) for part in text.split(",") if part.strip())

    return parse_list


def _parse_secret_name(text: str) -> str:
    value = text.strip()
    if not is_dns1123_subdomain(value):
        raise ValueError(
            f"{value!r} is not a Secret name (lowercase letters, digits, '-' and '.', at most "
            "253 characters)"
        )
    return value


_INJECT_KINDS: Final = ("crd", "validating", "mutating")


def _parse_inject_target(text: str) -> str:
    kind, slash, name = text.strip().partition("/")
    if not slash or kind not in _INJECT_KINDS or not name:
        raise ValueError(
            f"{text.strip()!r}: use crd/NAME, validating/NAME or mutating/NAME (the "
            "CustomResourceDefinition or webhook configuration whose caBundle to keep)"
        )
    return f"{kind}/{name}"


def _parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError("use a number of seconds, such as 30 or 2.5") from None
    if not value > 0 or value == float("inf"):
        raise ValueError("must be a positive, finite number of seconds")
    return value


def _parse_processes(text: str) -> int | str:
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    if not value.isdigit() or int(value) < 1:
        raise ValueError("use a whole number of at least 1, or 'auto' (the Pod's CPU quota)")
    return int(value)


def _parse_text(text: str) -> str:
    value = text.strip()
    if not value:
        raise ValueError("must not be empty")
    return value


def default_health_probe_address(environ: Mapping[str, str]) -> str:
    """The probe address when none is given: every interface in a pod, else loopback.

    ``ManagerOptions``' (``":8081"``) in a pod, ``"127.0.0.1:8081"`` elsewhere.

    In a pod the kubelet probes the pod's IP, so every interface must answer; a developer's
    ``setpoint run`` against a local or remote cluster has no kubelet, and should not open a
    port to the network unless asked (``--health-probe-bind-address``).
    """
    probes = str(_manager_default("health_probe_bind_address"))
    if environ.get("KUBERNETES_SERVICE_HOST", ""):
        return probes
    host, _, port = probes.rpartition(":")
    return f"127.0.0.1:{port}" if not host else probes


def _settings_table() -> tuple[_Setting, ...]:
    metrics = _manager_default("metrics_bind_address")
    probes = _manager_default("health_probe_bind_address")
    grace = _manager_default("graceful_shutdown_timeout")
    sync = _manager_default("cache_sync_timeout")
    return (
        _Setting(
            "kubeconfig",
            "--kubeconfig",
            "KUBECONFIG",
            "kubeconfig file to connect with",
            "$KUBECONFIG (':'-separated, merged as kubectl does), then ~/.kube/config, "
            "then the pod's service account",
            _parse_text,
            "PATH",
        ),
        _Setting(
            "context",
            "--context",
            "SETPOINT_CONTEXT",
            "kubeconfig context to use",
            "the kubeconfig's current-context",
            _parse_text,
            "NAME",
        ),
        _Setting(
            "log_level",
            "--log-level",
            "SETPOINT_LOG_LEVEL",
            f"log level: {', '.join(_LOG_LEVELS)}",
            "info",
            _parse_level,
            "LEVEL",
        ),
        _Setting(
            "log_format",
            "--log-format",
            "SETPOINT_LOG_FORMAT",
            "log format: console (for people) or json (one object per line, for collectors)",
            "console",
            _parse_format,
            "FORMAT",
        ),
        _Setting(
            "metrics_bind_address",
            "--metrics-bind-address",
            "SETPOINT_METRICS_BIND_ADDRESS",
            "where /metrics is served (host:port, ':PORT' for every interface, '0' disables)",
            repr(metrics),
            _parse_address("metrics_bind_address"),
            "ADDR",
        ),
        _Setting(
            "metrics_secure",
            "--metrics-secure",
            "SETPOINT_METRICS_SECURE",
            "serve /metrics over HTTPS, only to callers the API server authenticates and "
            "authorizes (TokenReview, SubjectAccessReview; --no-metrics-secure turns it off)",
            "false",
            _parse_bool,
        ),
        _Setting(
            "metrics_cert_dir",
            "--metrics-cert-dir",
            "SETPOINT_METRICS_CERT_DIR",
            "with --metrics-secure: directory holding the metrics server's tls.crt and tls.key "
            "(a mounted kubernetes.io/tls Secret), reloaded when they change",
            "none: a self-signed certificate made at start",
            _parse_text,
            "DIR",
        ),
        _Setting(
            "health_probe_bind_address",
            "--health-probe-bind-address",
            "SETPOINT_HEALTH_PROBE_BIND_ADDRESS",
            "where /healthz and /readyz are served ('0' disables)",
            f"{probes!r} in a pod, '127.0.0.1:{str(probes).rpartition(':')[2]}' elsewhere",
            _parse_address("health_probe_bind_address"),
            "ADDR",
        ),
        _Setting(
            "leader_elect",
            "--leader-elect",
            "SETPOINT_LEADER_ELECT",
            "campaign for a Lease so only one replica runs the controllers "
            "(--no-leader-elect turns it off)",
            "false",
            _parse_bool,
        ),
        _Setting(
            "leader_election_namespace",
            "--leader-election-namespace",
            "SETPOINT_LEADER_ELECTION_NAMESPACE",
            "namespace of the leader election Lease",
            "the pod's namespace in a cluster, else 'default'",
            _parse_namespace,
            "NAMESPACE",
        ),
        _Setting(
            "leader_election_id",
            "--leader-election-id",
            "SETPOINT_LEADER_ELECTION_ID",
            "name of the leader election Lease",
            "'<module>-leader-election', from the operator's module name",
            _parse_text,
            "NAME",
        ),
        _Setting(
            "leader_election_lease_duration",
            "--leader-election-lease-duration",
            "SETPOINT_LEADER_ELECTION_LEASE_DURATION",
            "seconds other replicas wait after the leader's last renewal before taking over "
            "(a whole number)",
            f"{_leader_election_default('lease_duration'):g}",
            _parse_seconds,
            "SECONDS",
        ),
        _Setting(
            "leader_election_renew_deadline",
            "--leader-election-renew-deadline",
            "SETPOINT_LEADER_ELECTION_RENEW_DEADLINE",
            "seconds the leader keeps acting while renewals fail (less than the lease duration)",
            f"{_leader_election_default('renew_deadline'):g}",
            _parse_seconds,
            "SECONDS",
        ),
        _Setting(
            "leader_election_retry_period",
            "--leader-election-retry-period",
            "SETPOINT_LEADER_ELECTION_RETRY_PERIOD",
            "seconds between renewals and between attempts to acquire",
            f"{_leader_election_default('retry_period'):g}",
            _parse_seconds,
            "SECONDS",
        ),
        _Setting(
            "namespaces",
            "--namespace",
            "SETPOINT_WATCH_NAMESPACES",
            "watch only this namespace; repeat for several (the variable takes a "
            "comma-separated list; a flag replaces the variable's list)",
            "all namespaces",
            _parse_namespace,
            "NAMESPACE",
            repeatable=True,
        ),
        _Setting(
            "webhook_bind_address",
            "--webhook-bind-address",
            "SETPOINT_WEBHOOK_BIND_ADDRESS",
            "where the webhook server listens, if the operator registers webhooks (host:port)",
            "':9443'",
            _parse_webhook_address,
            "ADDR",
        ),
        _Setting(
            "webhook_cert_dir",
            "--webhook-cert-dir",
            "SETPOINT_WEBHOOK_CERT_DIR",
            "directory holding the webhook server's tls.crt and tls.key",
            "$TMPDIR/k8s-webhook-server/serving-certs",
            _parse_text,
            "DIR",
        ),
        _Setting(
            "webhook_cert_secret",
            "--webhook-cert-secret",
            "SETPOINT_WEBHOOK_CERT_SECRET",
            "manage the webhook server's CA and certificate in this Secret of the operator's "
            "namespace (made if missing, renewed, CA injected) instead of reading "
            "--webhook-cert-dir",
            "none: read --webhook-cert-dir",
            _parse_secret_name,
            "NAME",
        ),
        _Setting(
            "webhook_service",
            "--webhook-service",
            "SETPOINT_WEBHOOK_SERVICE",
            "with --webhook-cert-secret: the Service the API server calls the webhooks "
            "through; the certificate is issued for its names",
            "'webhook-service'",
            _parse_namespace,
            "NAME",
        ),
        _Setting(
            "webhook_hosts",
            "--webhook-host",
            "SETPOINT_WEBHOOK_HOSTS",
            "with --webhook-cert-secret: a further DNS name or IP address for the certificate "
            "(127.0.0.1 outside the cluster); repeat for several",
            "none",
            _parse_text,
            "HOST",
            repeatable=True,
        ),
        _Setting(
            "webhook_inject",
            "--webhook-inject",
            "SETPOINT_WEBHOOK_INJECT",
            "with --webhook-cert-secret: keep the caBundle of crd/NAME, validating/NAME or "
            "mutating/NAME equal to the CA; repeat for several",
            "none",
            _parse_inject_target,
            "KIND/NAME",
            repeatable=True,
        ),
        _Setting(
            "graceful_shutdown_timeout",
            "--graceful-shutdown-timeout",
            "SETPOINT_GRACEFUL_SHUTDOWN_TIMEOUT",
            "seconds the whole shutdown may take after SIGTERM",
            f"{grace:g}",
            _parse_seconds,
            "SECONDS",
        ),
        _Setting(
            "cache_sync_timeout",
            "--cache-sync-timeout",
            "SETPOINT_CACHE_SYNC_TIMEOUT",
            "seconds the caches may take to list every watched kind before startup fails",
            f"{sync:g}",
            _parse_seconds,
            "SECONDS",
        ),
        _Setting(
            "processes",
            "--processes",
            "SETPOINT_PROCESSES",
            "worker processes: N, or 'auto' for the Pod's CPU quota; more than one runs a "
            "supervisor and N workers that split every controller's objects (turns "
            "--leader-elect on)",
            "1",
            _parse_processes,
            "N",
        ),
        _Setting(
            "record",
            "--record",
            "SETPOINT_RECORD",
            "record every informer event and API request (Secrets redacted) to this JSONL "
            "file, at most 64 MiB, for setpoint.testing.replay",
            "off",
            _parse_text,
            "FILE",
        ),
    )


def resolve_settings(args: argparse.Namespace, environ: Mapping[str, str]) -> RunSettings:
    """Combine parsed flags and environment variables: flag, then variable, then default.

    An empty variable counts as unset (as ``KUBECONFIG=`` does for kubectl).

    Raises:
        ValueError: a variable's value is invalid; the message names the variable, the
            value and the accepted forms. (Invalid flag values are argparse errors.)

    """
    values: dict[str, Any] = {"target": args.target}
    for setting in _settings_table():
        given = getattr(args, setting.dest, None)
        if given is not None and given != []:
            values[setting.dest] = tuple(given) if setting.repeatable else given
            continue
        raw = environ.get(setting.env, "")
        if setting.dest == "kubeconfig" or not raw.strip():
            # $KUBECONFIG may be a ':'-separated list, which only the kubeconfig loader merges.
            continue
        parse = _list_parser(setting.parse) if setting.repeatable else setting.parse
        try:
            values[setting.dest] = parse(raw)
        except ValueError as exc:
            raise ValueError(
                f"{setting.env}={raw!r} (for {setting.flag}): {exc}; fix or unset the variable"
            ) from None
    values.setdefault("health_probe_bind_address", default_health_probe_address(environ))
    return RunSettings(**values)


def _argparse_type(setting: _Setting) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return setting.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    return convert


def default_leader_election_id(module_name: str) -> str:
    """The Lease name when ``--leader-election-id`` is not given: ``<module>-leader-election``.

    The module name is lowercased and every run of characters a Lease name cannot hold
    becomes ``-`` (``my_operator.main`` gives ``my-operator-main-leader-election``). Two
    operators in one namespace therefore need different module names or an explicit id.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", module_name.lower()).strip("-") or "operator"
    return f"{slug[:230]}-leader-election"


def default_leader_election_namespace(service_account_dir: str | Path | None = None) -> str:
    """The Lease namespace when none is given: the pod's namespace in a cluster, else ``default``.

    In a pod, the kubelet mounts the namespace at
    ``/var/run/secrets/kubernetes.io/serviceaccount/namespace`` (``service_account_dir``
    overrides the directory for tests).
    """
    directory = Path(service_account_dir or SERVICE_ACCOUNT_DIR)
    try:
        namespace = (directory / "namespace").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return "default"
    return namespace or "default"


def build_manager_options(
    settings: RunSettings, module_name: str, client: ApiClient | None = None
) -> ManagerOptions:
    """The :class:`~setpoint.manager.ManagerOptions` for ``settings``.

    With ``webhook_cert_secret`` the webhook certificate is self-managed, which needs the
    ``client`` (the Secret lives in its default namespace, the pod's own).

    Leader election releases the Lease on a clean shutdown (``release_on_cancel``): the process
    exits right after the manager returns, so nothing leader-only can run after the release,
    and a rolling update hands over at once instead of after the lease duration.

    Raises:
        ValueError: from the options' own validation (for example equal bind addresses).

    """
    from setpoint.manager.options import LeaderElectionOptions, ManagerOptions
    from setpoint.observability.recording import RecordOptions
    from setpoint.webhook.server import (
        CertificateDirectory,
        WebhookServerOptions,
    )

    leader_election = None
    processes: int | Literal["auto"] = 1
    if settings.processes != 1:
        from setpoint.manager.processes import resolve_processes

        processes = "auto" if settings.processes == "auto" else int(settings.processes)
        if resolve_processes(processes) == 1:
            processes = 1
        elif not settings.leader_elect:
            log.info(
                "--processes %s: leader election is turned on (the workers' shard ring has "
                "its sharder in the leader)",
                settings.processes,
            )
            settings = dataclasses.replace(settings, leader_elect=True)
    if settings.leader_elect:
        leader_election = LeaderElectionOptions(
            name=settings.leader_election_id or default_leader_election_id(module_name),
            namespace=settings.leader_election_namespace or default_leader_election_namespace(),
            lease_duration=settings.leader_election_lease_duration,
            renew_deadline=settings.leader_election_renew_deadline,
            retry_period=settings.leader_election_retry_period,
            release_on_cancel=True,
        )
    extra: dict[str, Any] = {}
    if settings.namespaces:
        namespaces = settings.namespaces

        def new_cache(client: ApiClient) -> CacheLike:
            from setpoint.cache import Cache, CacheOptions

            return Cache(client, options=CacheOptions(namespaces=namespaces))

        extra["new_cache"] = new_cache
    if settings.metrics_cert_dir is not None:
        extra["metrics_tls"] = _metrics_tls(settings.metrics_cert_dir)
    certificate: CertificateSource
    if settings.webhook_cert_secret is not None:
        certificate = _self_managed(settings, client)
    elif settings.webhook_cert_dir is not None:
        certificate = CertificateDirectory(settings.webhook_cert_dir)
    else:
        certificate = CertificateDirectory()
    return ManagerOptions(
        leader_election=leader_election,
        metrics_bind_address=settings.metrics_bind_address,
        metrics_secure=settings.metrics_secure,
        health_probe_bind_address=settings.health_probe_bind_address,
        graceful_shutdown_timeout=settings.graceful_shutdown_timeout,
        webhook_server=WebhookServerOptions(
            bind_address=settings.webhook_bind_address, certificate=certificate
        ),
        cache_sync_timeout=settings.cache_sync_timeout,
        record=RecordOptions(path=settings.record) if settings.record else None,
        processes=processes,
        **extra,
    )


def _metrics_tls(directory: str) -> ServerTLS:
    """The metrics server's TLS from ``tls.crt`` and ``tls.key`` in ``directory``.

    Raises:
        CertificateError: a file is missing or unusable; the message names the flag, the file
            and what to mount there.

    """
    from setpoint.server.tls import ServerTLS
    from setpoint.tls.pem import CertificateError

    try:
        return ServerTLS.from_files(Path(directory) / "tls.crt", Path(directory) / "tls.key")
    except CertificateError as exc:
        raise CertificateError(
            f"--metrics-cert-dir {directory}: {exc}. Mount the metrics certificate's "
            "kubernetes.io/tls Secret (cert-manager's, for example) there, or drop "
            "--metrics-cert-dir to serve a self-signed certificate"
        ) from None


class _CertificateReload:
    """A runnable that serves every new certificate of a directory on a running ``ServerTLS``.

    ``setpoint run --metrics-cert-dir`` adds one for the metrics server (which loads the
    first pair at start): the webhook server's :class:`CertificateDirectory` watch, run in
    the ``SERVERS`` group of every replica and, with ``--processes``, in the supervisor,
    which serves the public ``/metrics`` (``Manager.add(in_supervisor=True)``); the workers
    serve plain loopback metrics and get none.

    Expected flow:
        ``start`` runs ``source.watch(tls.update)`` as a task; ``stop`` cancels it.

    Guarantees:
        A changed pair is checked completely before it replaces the served one, and serves
        from the next handshake on (:meth:`ServerTLS.update`); a pair that does not load is
        logged and the old one kept until the next look.

    Caveats:
        The watch compares the files with what it read when it started, so a change between
        the first load (building the options) and ``start`` is served only at the next change.

    Errors:
        None from ``start`` or ``stop``; :meth:`failure` reports a watch that ended.

    """

    def __init__(self, source: CertificateDirectory, tls: ServerTLS) -> None:
        self.source = source
        """The watched directory."""
        self.tls = tls
        """The running server's certificate holder every new pair goes to."""
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """``"metrics-certificate"``."""
        return "metrics-certificate"

    @property
    def group(self) -> RunnableGroup:
        """``SERVERS``, with the metrics server it serves."""
        return RunnableGroup.SERVERS

    @property
    def needs_leader_election(self) -> bool:
        """Every replica serves metrics."""
        return False

    async def start(self) -> None:
        """Start watching the directory."""
        self._task = asyncio.create_task(
            self.source.watch(self.tls.update), name="metrics-certificate-watch"
        )

    async def stop(self, timeout: float) -> None:
        """Stop watching (the watch only sleeps and reads files: cancelling it is immediate)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def failure(self) -> BaseException | None:
        """The error that ended the watch, if it ended; else ``None``."""
        task = self._task
        if task is None or not task.done() or task.cancelled():
            return None
        return task.exception() or RuntimeError(
            f"the watch of {self.source.path} returned; it must run until stopped"
        )


def _self_managed(settings: RunSettings, client: ApiClient | None) -> CertificateSource:
    """Self-managed certificates from the ``--webhook-*`` settings."""
    from setpoint.webhook.certificates import (
        SelfManagedCertificates,
        SelfManagedCertificatesOptions,
        service_hosts,
    )

    if client is None:
        raise ValueError("--webhook-cert-secret needs a client to manage the Secret with")
    namespace = client.default_namespace or "default"
    targets: dict[str, list[str]] = {kind: [] for kind in _INJECT_KINDS}
    for target in settings.webhook_inject:
        kind, _, name = target.partition("/")
        targets[kind].append(name)
    options = SelfManagedCertificatesOptions(
        hosts=(*service_hosts(settings.webhook_service, namespace), *settings.webhook_hosts),
        secret_name=str(settings.webhook_cert_secret),
        secret_namespace=namespace,
        crds=tuple(targets["crd"]),
        validating_webhook_configurations=tuple(targets["validating"]),
        mutating_webhook_configurations=tuple(targets["mutating"]),
    )
    return SelfManagedCertificates(client, options)


# -- loading the operator ------------------------------------------------------------------------


class OperatorLoadError(SetpointError):
    """The operator could not be loaded or set up; the message says what and where.

    Raised for a target that does not exist, a module that fails to import (the message
    quotes the line in the module that failed), a module without ``setup``, and a ``setup``
    that raised. ``__cause__`` holds the original exception, for ``--log-level debug``.
    """

    def __init__(self, message: str, *, in_user_code: bool = False) -> None:
        super().__init__(message)
        self.in_user_code = in_user_code
        """Whether the operator's own code raised (its traceback is then worth showing)."""


@dataclass(frozen=True)
class LoadedOperator:
    """An imported operator module and its ``setup`` function."""

    module: ModuleType
    setup: Callable[[Any], Any]

    @property
    def name(self) -> str:
        """The module's import name (``tenants``)."""
        return self.module.__name__


def _package_root(directory: Path) -> Path:
    """The directory above the outermost package that contains ``directory``."""
    root = directory
    while (root / "__init__.py").is_file():
        root = root.parent
    return root


def _module_name_for(path: Path) -> tuple[str, Path]:
    """The dotted name of a ``.py`` file or package directory, and the sys.path entry for it."""
    if path.is_dir():
        root = _package_root(path)
        relative = path.relative_to(root)
    else:
        root = _package_root(path.parent)
        relative = path.relative_to(root).with_suffix("")
    parts = list(relative.parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts), root


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target or target in (".", "..")


def _user_frame(tb: TracebackType | None) -> str:
    """``file:line: source`` of the innermost frame outside the import machinery."""
    frames = [
        f
        for f in traceback.extract_tb(tb)
        if not f.filename.startswith("<frozen ") and "importlib" not in Path(f.filename).parts
    ]
    if not frames:
        return ""
    frame = frames[-1]
    where = f"{frame.filename}:{frame.lineno}"
    return f"{where}: {frame.line.strip()}" if frame.line else where


def _describe_import_error(name: str, exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else name
        text = (exc.text or "").strip()
        shown = f"\n    {text}" if text else ""
        return f"importing {name!r} failed: {where}: {type(exc).__name__}: {exc.msg}{shown}"
    frame = _user_frame(exc.__traceback__)
    where = f"\n    at {frame}" if frame else ""
    return f"importing {name!r} failed: {type(exc).__name__}: {exc}{where}"


def _is_missing(name: str, exc: ModuleNotFoundError) -> bool:
    """Whether the error says that ``name`` itself (or a parent package) does not exist."""
    missing = exc.name or ""
    return bool(missing) and (name == missing or name.startswith(missing + "."))


def load_operator(target: str, *, cwd: Path | None = None) -> LoadedOperator:
    """Import the operator ``target`` and find its ``setup(manager)`` function.

    ``target`` is a dotted module name (the current directory is put on ``sys.path`` first),
    a path to a ``.py`` file, or a path to a package directory.

    Raises:
        OperatorLoadError: not found, failed to import (quoting the failing line), or no
            callable ``setup``.

    """
    base = (cwd or Path.cwd()).resolve()
    if _looks_like_path(target) or (base / target).exists():
        path = Path(target)
        if not path.is_absolute():
            path = base / path
        path = path.resolve()
        if not path.exists():
            raise OperatorLoadError(
                f"operator {target!r} not found: no such file or directory ({path})"
            )
        if path.is_dir() and not (path / "__init__.py").is_file():
            raise OperatorLoadError(
                f"operator {target!r} is a directory but not a Python package (it has no "
                "__init__.py); pass the package directory or the .py file that defines setup()"
            )
        if path.is_file() and path.suffix != ".py":
            raise OperatorLoadError(f"operator {target!r} is not a .py file or a package")
        name, root = _module_name_for(path)
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise OperatorLoadError(
                f"operator {target!r} gives the module name {name!r}, which Python cannot "
                "import; rename the file or directory to a valid identifier"
            )
        search_root = root
        expected: Path | None = path / "__init__.py" if path.is_dir() else path
    else:
        name = target
        search_root = base
        expected = None
    if str(search_root) not in sys.path:
        sys.path.insert(0, str(search_root))
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if _is_missing(name, exc):
            raise OperatorLoadError(
                f"operator {target!r} not found: no module named {exc.name!r} on sys.path "
                f"(searched {search_root} first); pass a path to a .py file or a package "
                "directory, or install the operator's package"
            ) from exc
        raise OperatorLoadError(_describe_import_error(name, exc), in_user_code=True) from exc
    except Exception as exc:
        raise OperatorLoadError(_describe_import_error(name, exc), in_user_code=True) from exc
    where = getattr(module, "__file__", None) or name
    if expected is not None and Path(where).resolve() != expected:
        raise OperatorLoadError(
            f"operator {target!r} is imported as {name!r}, but that name is already taken by "
            f"{where}; rename the file or directory"
        )
    setup = getattr(module, "setup", None)
    if setup is None:
        raise OperatorLoadError(
            f"module {name!r} ({where}) defines no setup() function; an operator module "
            "defines `def setup(manager): ...` that registers its controllers on the manager"
        )
    if not callable(setup):
        raise OperatorLoadError(
            f"{name}.setup ({where}) is a {type(setup).__name__}, not a function; define "
            "`def setup(manager): ...`"
        )
    return LoadedOperator(module, setup)


async def _call_setup(operator: LoadedOperator, manager: Any) -> None:
    try:
        result = operator.setup(manager)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        frame = _user_frame(exc.__traceback__)
        where = f"\n    at {frame}" if frame else ""
        raise OperatorLoadError(
            f"{operator.name}.setup(manager) raised {type(exc).__name__}: {exc}{where}",
            in_user_code=True,
        ) from exc


# -- running -------------------------------------------------------------------------------------


def _error(message: str) -> None:
    print(f"setpoint: error: {message}", file=sys.stderr, flush=True)


def _show_cause(exc: OperatorLoadError, settings: RunSettings) -> None:
    """For a failure in the operator's code: its traceback at debug level, else a hint."""
    if not exc.in_user_code:
        return
    if settings.log_level == "debug" and exc.__cause__ is not None:
        cause = exc.__cause__
        traceback.print_exception(type(cause), cause, cause.__traceback__, file=sys.stderr)
    else:
        print("  (--log-level debug shows the traceback)", file=sys.stderr)


async def _serve(settings: RunSettings, operator: LoadedOperator) -> int:
    from setpoint.client.client import Client
    from setpoint.client.kubeconfig import load_config, load_kubeconfig
    from setpoint.manager import LeaderElectionLost, Manager, ManagerError

    hint = "--context NAME (or SETPOINT_CONTEXT)"
    if settings.kubeconfig is not None:
        config = load_kubeconfig(
            settings.kubeconfig,
            context=settings.context,
            context_option=hint,
            path_option="--kubeconfig",
        )
    else:
        config = load_config(context=settings.context, context_option=hint)
    client = Client(config)
    try:
        options = build_manager_options(settings, operator.name, client)
        manager = Manager(client, options)
        served_tls = manager.options.metrics_tls  # a worker's loopback metrics have none
        if settings.metrics_cert_dir is not None and served_tls is not None:
            from setpoint.webhook.server import CertificateDirectory

            source = CertificateDirectory(settings.metrics_cert_dir)
            # With --processes, the supervisor serves the public /metrics: reload it there.
            manager.add(_CertificateReload(source, served_tls), in_supervisor=True)
        await _call_setup(operator, manager)
        le = options.leader_election
        log.info(
            "starting operator %s against %s (%s)%s",
            operator.name,
            config.server,
            config.source,
            f"; leader election on Lease {le.namespace}/{le.name}" if le is not None else "",
        )
        try:
            await manager.run()
        except LeaderElectionLost as exc:
            _error(str(exc))
            return EXIT_LEADERSHIP_LOST
        except ManagerError as exc:
            _error(str(exc))
            if exc.__cause__ is not None:
                log.debug("cause", exc_info=exc.__cause__)
            return EXIT_ERROR
    finally:
        await client.close()
    return EXIT_OK


def run_command(settings: RunSettings) -> int:
    """Load the operator, build its manager and run it until it stops; return the exit code.

    Expected failures print one ``setpoint: error:`` line (plus, for a failing import or
    ``setup``, the line of the operator's code that failed) and return :data:`EXIT_ERROR`;
    a lost lease returns :data:`EXIT_LEADERSHIP_LOST`.
    """
    from setpoint.client.errors import ClientError
    from setpoint.observability.logging import configure_logging

    fields: dict[str, int] = {}
    # processes.WORKER_INDEX_ENV, read here so that one process does not import processes.
    if os.environ.get("SETPOINT_WORKER_INDEX"):  # a worker of --processes N: say which
        from setpoint.manager.processes import worker_environment

        with contextlib.suppress(ValueError):  # a bad value is reported by the manager
            worker = worker_environment()
            if worker is not None:
                fields["worker"] = worker.index
    configure_logging(
        level=settings.log_level,
        format="json" if settings.log_format == "json" else "console",
        fields=fields,
    )
    try:
        operator = load_operator(settings.target)
    except OperatorLoadError as exc:
        _error(str(exc))
        _show_cause(exc, settings)
        return EXIT_ERROR
    try:
        return asyncio.run(_serve(settings, operator))
    except OperatorLoadError as exc:
        _error(str(exc))
        _show_cause(exc, settings)
        return EXIT_ERROR
    except (ClientError, ValueError, OSError) as exc:
        # ConfigError is a ValueError: a missing kubeconfig, an unknown context, ...
        _error(str(exc))
        return EXIT_ERROR


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        settings = resolve_settings(args, os.environ)
    except ValueError as exc:
        _error(str(exc))
        return EXIT_ERROR
    return run_command(settings)


_EPILOG = """\
Every flag can also be set through the environment variable shown with it; a flag on the
command line wins over the variable, which wins over the default.

The operator module defines setup(manager) (sync or async), which registers its controllers:

    def setup(manager):
        manager.controller("tenant").for_(Tenant).build(reconcile)

SIGTERM or SIGINT shuts down gracefully (a second signal stops what remains at once).

exit codes:
  0  clean shutdown
  1  error (configuration, import, setup, a failed runnable)
  2  invalid command line
  3  leadership lost (restart the process)
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` command."""
    parser = subparsers.add_parser(
        "run",
        help="run an operator: a module, .py file or package that defines setup(manager)",
        description="Run a setpoint operator until SIGTERM/SIGINT.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="MODULE_OR_PATH",
        help="dotted module name (the current directory is importable), .py file, or "
        "package directory",
    )
    for setting in _settings_table():
        text = f"{setting.help} [env {setting.env}] (default: {setting.default_text})"
        if setting.dest in ("leader_elect", "metrics_secure"):
            parser.add_argument(
                setting.flag,
                dest=setting.dest,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=text,
            )
        elif setting.repeatable:
            parser.add_argument(
                setting.flag,
                dest=setting.dest,
                action="append",
                type=_argparse_type(setting),
                metavar=setting.metavar,
                default=None,
                help=text,
            )
        else:
            parser.add_argument(
                setting.flag,
                dest=setting.dest,
                type=_argparse_type(setting),
                metavar=setting.metavar,
                default=None,
                help=text,
            )
    parser.set_defaults(func=_cmd_run)
