"""Where to find the API server and how to authenticate to it: :class:`ClientConfig`.

Three ways to get a :class:`ClientConfig`:

* :func:`~setpoint.client.kubeconfig.load_kubeconfig` reads kubeconfig files
  (``$KUBECONFIG`` merged with kubectl's rules, or ``~/.kube/config``), the way ``kubectl``
  does;
* :func:`load_incluster_config` (here) uses the pod's service account;
* :func:`~setpoint.client.kubeconfig.load_config` picks one of the two, like
  controller-runtime's ``GetConfig``.

A :class:`ClientConfig` is plain, immutable data. The moving parts of
authentication (token files that rotate, exec plugins whose tokens expire) live
in the stateful :class:`~setpoint.client.credentials.Credentials` that
:func:`~setpoint.client.credentials.credentials_for` returns; the transport keeps one per
connection pool.

Every problem surfaces as :class:`ConfigError`, whose message names the file,
the field path inside it (``contexts[name=dev].context.cluster``) and what to
do. Nothing here lets a bare ``yaml``, ``base64`` or ``ssl`` traceback escape.

Why not a library: see ``docs/decisions/0002-kubeconfig.md``.
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from setpoint.api.errors import SetpointError
from setpoint.api.redaction import REDACTED, brief, redact_url
from setpoint.tls.pem import load_ca, load_cert_chain, os_reason, ssl_reason

__all__ = [
    "EXEC_API_V1",
    "EXEC_API_V1BETA1",
    "SERVICE_ACCOUNT_DIR",
    "ClientConfig",
    "ConfigError",
    "ExecConfig",
    "load_incluster_config",
]

EXEC_API_V1: Final = "client.authentication.k8s.io/v1"
"""The stable ``ExecCredential`` API version (Kubernetes 1.22+)."""

EXEC_API_V1BETA1: Final = "client.authentication.k8s.io/v1beta1"
"""The older ``ExecCredential`` API version, still written by many cloud CLIs."""

_EXEC_API_VERSIONS: Final = (EXEC_API_V1, EXEC_API_V1BETA1)
_INTERACTIVE_MODES: Final = ("Never", "IfAvailable", "Always")

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the kubelet mounts a pod's service account token, CA bundle and namespace."""


class ConfigError(SetpointError, ValueError):
    """A configuration that cannot be used.

    The message names the file, the field path (e.g.
    ``contexts[name=dev].context.cluster``) and what to do. ``file`` and
    ``field`` carry the first two for programs that want them separately.
    """

    __module__ = "setpoint"

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.reason = message
        """The problem without the location prefix (for callers that add their own)."""
        self.file = file
        """The file (or other source, e.g. ``in-cluster service account``) the problem is in."""
        self.field = field
        """The field path inside ``file``, when the problem is one field."""
        where = ": ".join(part for part in (file, field) if part)
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True, kw_only=True)
class ExecConfig:
    """How to run a ``client.authentication.k8s.io`` exec credential plugin.

    These are the kubeconfig ``users[].user.exec`` settings (``kubelogin``,
    ``aws eks get-token``, ``gke-gcloud-auth-plugin`` ...). setpoint runs
    operators without a terminal, so a plugin never gets an interactive stdin.
    """

    command: str
    """The program to run: a name looked up on ``$PATH``, or a path."""
    args: tuple[str, ...] = ()
    """Arguments passed to ``command``."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables ``(name, value)`` on top of this process's environment."""
    api_version: str = EXEC_API_V1
    """The ``ExecCredential`` version to ask for; the plugin must answer with the same one."""
    install_hint: str | None = None
    """Text shown when the plugin is missing or fails, e.g. how to install it."""
    provide_cluster_info: bool = False
    """Whether to pass the cluster (server, CA, ...) in ``KUBERNETES_EXEC_INFO``."""
    interactive_mode: str = "IfAvailable"
    """``Never`` or ``IfAvailable`` (``Always`` needs a terminal, which an operator lacks)."""
    cluster_config: Any = None
    """The cluster's ``client.authentication.k8s.io/exec`` extension, passed to the plugin
    as ``spec.cluster.config`` when ``provide_cluster_info`` is set; ``None`` when absent."""
    timeout: float = 60.0
    """Seconds the plugin may run before it is killed and the request fails. Generous,
    because cloud CLIs can take several seconds to refresh a session."""

    def __repr__(self) -> str:
        # env values and the cluster extension may hold secrets (API keys, client secrets):
        # show the names only.
        env = ", ".join(f"{name}={REDACTED}" for name, _ in self.env)
        return (
            f"ExecConfig(command={self.command!r}, args={self.args!r}, env=[{env}], "
            f"api_version={self.api_version!r}, interactive_mode={self.interactive_mode!r}, "
            f"provide_cluster_info={self.provide_cluster_info!r}, "
            f"cluster_config={'None' if self.cluster_config is None else REDACTED}, "
            f"timeout={self.timeout!r})"
        )

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("exec.command is empty; name the credential plugin to run")
        if self.api_version not in _EXEC_API_VERSIONS:
            hint = (
                " (v1alpha1 was removed in Kubernetes 1.24)"
                if self.api_version.endswith("/v1alpha1")
                else ""
            )
            raise ConfigError(
                f"exec.apiVersion {self.api_version!r} is not supported{hint}; "
                f"use {EXEC_API_V1!r} or {EXEC_API_V1BETA1!r}"
            )
        if self.interactive_mode not in _INTERACTIVE_MODES:
            raise ConfigError(
                f"exec.interactiveMode {self.interactive_mode!r} is not one of "
                f"{', '.join(_INTERACTIVE_MODES)}"
            )
        if self.interactive_mode == "Always":
            # kubectl refuses the same when stdin is not a terminal; an operator's
            # plugin runs with no stdin at all, so it could only hang or fail.
            raise ConfigError(
                f"exec plugin {self.command!r} has interactiveMode: Always, but setpoint "
                "runs plugins without a terminal; log in once in a shell (so the plugin "
                "caches a credential) and set interactiveMode to IfAvailable or Never"
            )
        if not self.timeout > 0:
            raise ConfigError(f"exec timeout must be positive seconds, got {self.timeout!r}")


@dataclass(frozen=True, kw_only=True)
class ClientConfig:
    """Everything needed to reach one API server as one identity.

    Build it with :func:`load_config`, :func:`load_kubeconfig` or
    :func:`load_incluster_config`, or directly (tests, special setups).
    """

    server: str
    """Base URL, ``https://host[:port]`` with an optional path prefix (proxies such as
    Rancher serve clusters under ``/k8s/clusters/<id>``). A trailing slash is removed."""
    namespace: str = "default"
    """The context's namespace: where namespaced calls go when none is given."""
    ca_data: bytes | None = None
    """PEM bundle to verify the server with; ``None`` means the system trust store."""
    insecure_skip_tls_verify: bool = False
    """Skip server certificate verification. Cannot be combined with ``ca_data``."""
    tls_server_name: str | None = None
    """Name to verify the server certificate against instead of the URL's host (pass it as
    ``server_hostname`` when connecting); ``None`` means the URL's host."""
    client_cert_data: bytes | None = None
    """PEM client certificate (chain) for mutual TLS; needs ``client_key_data``."""
    client_key_data: bytes | None = field(default=None, repr=False)
    """PEM private key for ``client_cert_data``; unencrypted."""
    token: str | None = field(default=None, repr=False)
    """Bearer token. When ``token_file`` is also set, the file wins while it is readable."""
    token_file: str | None = None
    """File holding a bearer token, re-read whenever it changes (bound service-account
    tokens rotate on disk)."""
    exec: ExecConfig | None = None
    """An exec credential plugin providing a token and/or a client certificate."""
    impersonate_user: str | None = None
    """Act as this user (``Impersonate-User`` header); needs the ``impersonate`` verb."""
    impersonate_groups: tuple[str, ...] = ()
    """Groups to impersonate (``Impersonate-Group``); only with ``impersonate_user``."""
    proxy_url: str | None = None
    """HTTP(S) proxy for API calls; ``None`` means the environment's proxy settings apply."""
    source: str = ""
    """Where this came from, for error messages: ``kubeconfig /path (context dev)``."""

    def __repr__(self) -> str:
        # Never the token, the private key or a proxy password; the certificates are public
        # but long, so only their presence is shown.
        shown: list[str] = [f"server={self.server!r}", f"namespace={self.namespace!r}"]
        for name in ("ca_data", "client_cert_data", "client_key_data", "token"):
            if getattr(self, name) is not None:
                shown.append(f"{name}={REDACTED if name in _SECRET_FIELDS else '<set>'}")
        if self.insecure_skip_tls_verify:
            shown.append("insecure_skip_tls_verify=True")
        for name in ("tls_server_name", "token_file", "impersonate_user"):
            if getattr(self, name) is not None:
                shown.append(f"{name}={getattr(self, name)!r}")
        if self.impersonate_groups:
            shown.append(f"impersonate_groups={self.impersonate_groups!r}")
        if self.proxy_url is not None:
            shown.append(f"proxy_url={redact_url(self.proxy_url)!r}")
        if self.exec is not None:
            shown.append(f"exec={self.exec!r}")
        if self.source:
            shown.append(f"source={self.source!r}")
        return f"ClientConfig({', '.join(shown)})"

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "server", _normalize_server(self.server))
        except ValueError as e:
            raise ConfigError(f"server: {e}", file=self.source or None) from None
        problem = self._problem()
        if problem:
            raise ConfigError(problem, file=self.source or None)

    def _problem(self) -> str | None:
        if not self.namespace:
            return "namespace is empty; use 'default' or a namespace name"
        if (self.client_cert_data is None) != (self.client_key_data is None):
            return "a client certificate needs both its certificate and its key; one is missing"
        if self.insecure_skip_tls_verify and self.ca_data:
            # The same rule as client-go: a CA that is never checked is a mistake.
            return (
                "insecure-skip-tls-verify is set together with a certificate authority; "
                "remove one of them"
            )
        if self.exec is not None and (self.token is not None or self.token_file is not None):
            return (
                "both a token and an exec plugin are configured, so it is unclear which "
                "identity to use; keep one of them"
            )
        if self.impersonate_groups and not self.impersonate_user:
            return "impersonate_groups is set without impersonate_user; set the user too"
        if self.token is not None and not _is_header_token(self.token):
            return (
                "the token has spaces, control or non-ASCII characters, so it cannot be sent "
                "in an Authorization header; check that it was copied whole and only once"
            )
        return None

    def ssl_context(self, *, client_cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
        """Build a new TLS context for this server (callers cache it).

        ``client_cert`` is a ``(certificate PEM, key PEM)`` pair that replaces
        ``client_cert_data``/``client_key_data``: exec plugins hand out certificates
        at run time (see :meth:`~setpoint.client.credentials.Credentials.client_certificate`).

        ``tls_server_name`` cannot live in an ``SSLContext``; pass it as
        ``server_hostname`` when connecting.
        """
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        where = self.source or self.server
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_data is not None:
            try:
                load_ca(ctx, self.ca_data)
            except (ssl.SSLError, ValueError) as e:
                raise ConfigError(
                    f"the certificate authority data is not a usable PEM bundle ({ssl_reason(e)})",
                    file=where,
                ) from None
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        pair = client_cert
        if pair is None and self.client_cert_data is not None and self.client_key_data is not None:
            pair = (self.client_cert_data, self.client_key_data)
        if pair is not None:
            try:
                load_cert_chain(ctx, *pair)
            except (ssl.SSLError, ValueError, OSError) as e:
                raise ConfigError(
                    f"the client certificate and key cannot be used ({ssl_reason(e)}); "
                    "check that they are PEM, match each other and the key is unencrypted",
                    file=where,
                ) from None
        return ctx


def load_incluster_config(
    *, service_account_dir: str | os.PathLike[str] | None = None
) -> ClientConfig:
    """Build a :class:`ClientConfig` for the pod's own service account.

    Uses ``$KUBERNETES_SERVICE_HOST``/``$KUBERNETES_SERVICE_PORT``, the token
    (re-read as it rotates), ``ca.crt`` and ``namespace`` in
    ``service_account_dir`` (default :data:`SERVICE_ACCOUNT_DIR`). A missing
    namespace file means ``default``, as in client-go.

    Raises:
        ConfigError: naming what is missing when not running in a pod.

    """
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    missing = [
        f"${name}"
        for name, value in (("KUBERNETES_SERVICE_HOST", host), ("KUBERNETES_SERVICE_PORT", port))
        if not value
    ]
    if missing:
        raise ConfigError(
            f"not running inside a Kubernetes pod: {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set; outside a cluster use a "
            "kubeconfig ($KUBECONFIG or ~/.kube/config)"
        )
    directory = Path(
        service_account_dir if service_account_dir is not None else SERVICE_ACCOUNT_DIR
    )
    source = f"in-cluster service account ({directory})"
    token_path = directory / "token"
    try:
        if not token_path.read_text(encoding="utf-8").strip():
            raise OSError("the file is empty")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"cannot read the service account token {token_path}: {os_reason(e)}; is "
            "automountServiceAccountToken disabled for this pod or its service account?",
            file=source,
        ) from None
    ca_path = directory / "ca.crt"
    try:
        ca_data = ca_path.read_bytes()
        load_ca(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), ca_data)
    except OSError as e:
        raise ConfigError(
            f"cannot read the cluster CA bundle {ca_path}: {os_reason(e)}", file=source
        ) from None
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(
            f"the cluster CA bundle {ca_path} is not usable PEM ({ssl_reason(e)})", file=source
        ) from None
    try:
        namespace = (directory / "namespace").read_text(encoding="utf-8").strip() or "default"
    except FileNotFoundError:
        namespace = "default"
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"cannot read {directory / 'namespace'}: {os_reason(e)}", file=source
        ) from None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 service IP
    if not port.isdigit():
        raise ConfigError(
            f"$KUBERNETES_SERVICE_PORT is {port!r}, not a port number", file="environment"
        )
    return ClientConfig(
        server=f"https://{host}:{port}",
        namespace=namespace,
        ca_data=ca_data,
        token_file=str(token_path),
        source=source,
    )


_SECRET_FIELDS: Final = frozenset({"client_key_data", "token"})
_HEADER_TOKEN: Final = re.compile(r"[\x21-\x7e]+")


def _is_header_token(token: str) -> bool:
    """Whether ``token`` can be sent as ``Authorization: Bearer <token>``.

    Printable ASCII without spaces: a pasted token with a newline must fail at load time,
    not on every request.
    """
    return _HEADER_TOKEN.fullmatch(token) is not None


# --- helpers shared with the kubeconfig loader ---------------------------------------


def _default_kubeconfig() -> Path | None:
    """``~/.kube/config``, or ``None`` when there is no home directory to look in."""
    try:
        return Path.home() / ".kube" / "config"
    except RuntimeError:
        return None


def _normalize_server(url: str) -> str:
    """``url`` without a trailing slash; ValueError explaining why it is not a server URL."""
    example = "expected http(s)://host[:port], e.g. https://127.0.0.1:6443"
    if not isinstance(url, str):
        raise ValueError(f"a server URL must be a string, got {type(url).__name__}; {example}")
    # Messages show the URL without a password and at most 200 characters of it.
    shown = brief(redact_url(url), limit=200)
    if not url or any(c.isspace() for c in url):
        raise ValueError(f"{shown} is not a server URL; {example}")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"{shown} is not a URL; {example}") from None
    if parts.scheme not in ("https", "http"):
        raise ValueError(f"{shown} does not start with https:// or http://; {example}")
    if not parts.hostname:
        raise ValueError(f"{shown} has no host; {example}")
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"{shown} must not carry credentials, a query or a fragment; {example}")
    try:
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError:
        raise ValueError(f"{shown} has an invalid port; {example}") from None
    return url.rstrip("/")
