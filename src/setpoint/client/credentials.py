"""The request-time side of authentication: bearer tokens, token files, exec plugins.

A :class:`~setpoint.client.config.ClientConfig` is immutable data; :func:`credentials_for`
turns it into the stateful :class:`Credentials` a transport asks before every request (and
after a 401). Three kinds, chosen from the config:

* a static bearer token;
* a token file, re-read when it changes (bound service-account tokens rotate on disk);
* an exec credential plugin (``client.authentication.k8s.io`` v1 and v1beta1).

The exec plugin protocol, as client-go implements it:

* the plugin runs with this process's environment plus ``exec.env``, and
  ``KUBERNETES_EXEC_INFO`` holding an ``ExecCredential`` whose ``spec`` says
  whether it may interact (never, here) and, with ``provideClusterInfo``, which
  cluster the credential is for;
* it prints an ``ExecCredential`` of the *same* apiVersion on stdout, whose
  ``status`` holds a ``token`` and/or ``clientCertificateData`` +
  ``clientKeyData`` (PEM text, not base64), and optionally an
  ``expirationTimestamp`` (RFC 3339);
* the credential is reused until it expires or a request gets a 401.

Every problem surfaces as :class:`~setpoint.client.config.ConfigError` naming the source.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from setpoint.api.redaction import brief
from setpoint.client.config import ClientConfig, ConfigError, ExecConfig, _is_header_token
from setpoint.tls.pem import load_cert_chain, os_reason, ssl_reason

__all__ = [
    "FAILURE_BACKOFF",
    "REFRESH_BEFORE_EXPIRY",
    "STDOUT_LIMIT",
    "Credentials",
    "ExecCredentials",
    "credentials_for",
]

_log = logging.getLogger("setpoint.client.config")

_EXEC_EXTENSION_NAME = "client.authentication.k8s.io/exec"


def credentials_for(config: ClientConfig) -> Credentials:
    """New, stateful :class:`Credentials` for ``config`` (one per connection pool)."""
    if config.exec is not None:
        return ExecCredentials(config)
    if config.token_file is not None:
        return _TokenFileCredentials(config.token_file, fallback=config.token, source=config.source)
    if config.token is not None:
        return _StaticTokenCredentials(config.token)
    return _Anonymous()


class Credentials:
    """The request-time side of authentication, for one connection pool.

    This base class is "no credentials" (anonymous, or a client certificate that
    is already in :meth:`ClientConfig.ssl_context`); :func:`credentials_for` returns the
    subclass that matches the config.

    Use from a transport::

        headers.update(await creds.headers())          # before every request
        cert = await creds.client_certificate()        # before (re)building the pool
        if cert != current: ctx = config.ssl_context(client_cert=cert)
        ...
        if response.status == 401: creds.invalidate()  # and retry once
    """

    may_wait: ClassVar[bool] = True
    """Whether :meth:`headers` or :meth:`client_certificate` may wait for something slow
    (an exec plugin, or a subclass nobody told the transport about): the transport then
    bounds them by the request's deadline. Setpoint's own kinds that answer from memory or
    a local file, without suspending, say ``False`` and spare every request that timer."""

    async def headers(self) -> dict[str, str]:
        """Headers to add to a request: ``{"Authorization": "Bearer ..."}`` or ``{}``."""
        return {}

    def invalidate(self) -> None:
        """Forget cached credentials after a 401, so the next call fetches fresh ones."""

    async def client_certificate(self) -> tuple[bytes, bytes] | None:
        """Return a ``(certificate PEM, key PEM)`` pair from an exec plugin, or ``None``.

        ``None`` means "use what :meth:`ClientConfig.ssl_context` has". A new
        pair (compare with ``!=``) means the plugin rotated it and the TLS
        context must be rebuilt with ``ssl_context(client_cert=pair)``.
        """
        return None


class _Anonymous(Credentials):
    """No credentials: anonymous, or a client certificate already in the TLS context."""

    may_wait: ClassVar[bool] = False


class _StaticTokenCredentials(Credentials):
    """A bearer token that never changes."""

    may_wait: ClassVar[bool] = False

    def __init__(self, token: str) -> None:
        self._headers = {"Authorization": f"Bearer {token}"}

    async def headers(self) -> dict[str, str]:
        return dict(self._headers)


class _TokenFileCredentials(Credentials):
    """A bearer token read from a file, re-read when the file changes.

    The kubelet rotates projected service-account tokens by swapping a symlink,
    so a change of inode, size or mtime of the resolved file means a new token.
    ``stat`` and the read are a few microseconds on a local tmpfs, which is why
    they run inline instead of in a thread.
    """

    may_wait: ClassVar[bool] = False

    def __init__(self, path: str, *, fallback: str | None, source: str) -> None:
        self._path = path
        self._fallback = fallback
        self._source = source
        self._stamp: tuple[int, int, int] | None = None
        self._token: str | None = None

    async def headers(self) -> dict[str, str]:
        token = self._read()
        return {"Authorization": f"Bearer {token}"}

    def invalidate(self) -> None:
        self._stamp = None

    def _read(self) -> str:
        try:
            st = os.stat(self._path)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp and self._token is not None:
                return self._token
            token = Path(self._path).read_text(encoding="utf-8").strip()
            if not token:
                raise OSError(f"{self._path} is empty")
        except (OSError, UnicodeDecodeError) as e:
            # Keep serving the last good token: a rotation in progress or a
            # transient read error must not fail every request (client-go does the same).
            last = self._token or self._fallback
            if last is None:
                raise ConfigError(
                    f"cannot read the bearer token file {self._path}: {os_reason(e)}; "
                    "check that it exists and is readable",
                    file=self._source or None,
                ) from None
            _log.warning(
                "re-reading token file %s failed (%s); using the last token", self._path, e
            )
            return last
        self._stamp, self._token = stamp, token
        return token


REFRESH_BEFORE_EXPIRY = timedelta(seconds=10)
"""Run the plugin again this long before the credential expires, so a request does
not race the expiry and come back 401."""

FAILURE_BACKOFF = (1.0, 30.0)
"""After a plugin run fails, it is not run again for the first number of seconds, doubling
with each further failure up to the second; meanwhile requests fail at once with the last
error. A broken plugin is not restarted for every request (client-go does the same), and a
fixed one (``kubelogin`` after a login) is picked up within half a minute."""

STDOUT_LIMIT = 1 << 20
"""Most bytes of stdout read from a plugin (an ``ExecCredential`` is a few KiB); a plugin that
prints more fails, instead of filling memory."""

_STDERR_LIMIT = 2000
_PIPE_GRACE = 1.0
"""Seconds to wait for the pipes to close after the plugin exited: a helper it left running
in the background may hold them open, and is then killed with the rest of its group."""


@dataclass(frozen=True)
class _ExecResult:
    token: str | None = field(repr=False)
    cert_pair: tuple[bytes, bytes] | None = field(repr=False)
    expires: datetime | None

    def fresh(self, now: datetime) -> bool:
        return self.expires is None or now < self.expires - REFRESH_BEFORE_EXPIRY

    def __repr__(self) -> str:
        # A credential's repr must never show the token or the private key.
        parts = [
            "token=<redacted>" if self.token else "token=None",
            "cert_pair=<redacted>" if self.cert_pair else "cert_pair=None",
            f"expires={self.expires!r}",
        ]
        return f"_ExecResult({', '.join(parts)})"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _PluginOutput(asyncio.SubprocessProtocol):
    """Collects a plugin's stdout (up to :data:`STDOUT_LIMIT`) and the tail of its stderr."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stdout = bytearray()
        self.stdout_overflow = False
        self.stderr = bytearray()
        self.exited: asyncio.Future[None] = loop.create_future()
        """Set when the plugin process has exited."""
        self.finished: asyncio.Future[None] = loop.create_future()
        """Set when it has exited *and* both pipes are closed (every writer is gone)."""

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            room = STDOUT_LIMIT - len(self.stdout)
            if len(data) > room:
                self.stdout_overflow = True
            self.stdout += data[: max(room, 0)]
        else:
            self.stderr += data
            if len(self.stderr) > 4 * _STDERR_LIMIT:
                del self.stderr[: -2 * _STDERR_LIMIT]

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


def _kill_group(pgid: int) -> None:
    """SIGKILL every process in the plugin's process group (it leads its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class ExecCredentials(Credentials):
    """Credentials from an exec plugin, cached until they expire or are invalidated.

    Expected flow:
        The first :meth:`headers` (or :meth:`client_certificate`) runs the plugin and caches
        its credential; later calls reuse it until it is within
        :data:`REFRESH_BEFORE_EXPIRY` of its expiry or :meth:`invalidate` is called (after a
        401). One plugin run at a time: concurrent callers wait for the run in progress
        instead of starting their own.

    Guarantees:
        - The plugin runs in its own session and process group, and that whole group is
          killed when the plugin outlives ``exec.timeout``, when the caller is cancelled
          (the transport cancels it at the request's deadline) or when the plugin left a
          helper holding its output pipes. Its pipes are closed and it is reaped; nothing
          it started keeps a descriptor of this process.
        - Nothing the plugin prints on stdout is ever copied into an error or a log (it
          carries the token): errors report its size and where the JSON broke.
        - After a failure the plugin is not run again for :data:`FAILURE_BACKOFF` seconds
          (doubling per failure); requests in between fail at once with the last error.
        - ``repr()`` of the cached credential never shows the token or the private key.

    Caveats:
        The tail of the plugin's stderr (at most 2,000 characters) is part of its error
        messages, because that is where plugins explain what is wrong (``login
        required``); a plugin that prints secrets on stderr leaks them into those errors.

    Errors:
        ConfigError: naming the plugin and the kubeconfig it came from, for a plugin that
            cannot start, fails, times out or prints something that is not a usable
            ``ExecCredential``.

    """

    def __init__(self, config: ClientConfig, *, clock: Callable[[], datetime] = _utcnow) -> None:
        if config.exec is None:
            raise ValueError("ExecCredentials needs a ClientConfig with exec set")
        self._config = config
        self._exec: ExecConfig = config.exec
        self._clock = clock
        self._lock = asyncio.Lock()
        self._current: _ExecResult | None = None
        self._failures = 0
        self._last_error: ConfigError | None = None
        self._retry_at: datetime | None = None

    async def headers(self) -> dict[str, str]:
        """Return ``Authorization: Bearer <token>`` if the plugin gave a token, else ``{}``."""
        result = await self._result()
        return {"Authorization": f"Bearer {result.token}"} if result.token else {}

    async def client_certificate(self) -> tuple[bytes, bytes] | None:
        """Return the plugin's ``(certificate, key)`` PEM pair, or ``None`` (token only)."""
        return (await self._result()).cert_pair

    def invalidate(self) -> None:
        """Drop the cached credential; the next call runs the plugin again."""
        self._current = None

    def __repr__(self) -> str:
        return f"<ExecCredentials {self._describe()}>"

    async def _result(self) -> _ExecResult:
        async with self._lock:
            current = self._current
            if current is not None and current.fresh(self._clock()):
                return current
            self._check_backoff()
            try:
                current = await self._run()
            except ConfigError as exc:
                self._failed(exc)
                raise
            self._failures, self._last_error, self._retry_at = 0, None, None
            self._current = current
            return current

    def _check_backoff(self) -> None:
        if self._retry_at is None or self._last_error is None:
            return
        wait = (self._retry_at - self._clock()).total_seconds()
        if wait > 0:
            raise ConfigError(
                f"{self._last_error.reason} (it failed {self._failures} time(s) in a row and "
                f"is not run again for another {wait:.1f} s)",
                file=self._last_error.file,
                field=self._last_error.field,
            )

    def _failed(self, exc: ConfigError) -> None:
        self._failures += 1
        first, cap = FAILURE_BACKOFF
        delay = min(cap, first * 2 ** (self._failures - 1))
        self._last_error = exc
        self._retry_at = self._clock() + timedelta(seconds=delay)

    def _describe(self) -> str:
        where = f" (for {self._config.source})" if self._config.source else ""
        return f"exec plugin {self._exec.command!r}{where}"

    def _hint(self) -> str:
        return f"\n{self._exec.install_hint.strip()}" if self._exec.install_hint else ""

    def _exec_info(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"interactive": False}
        if self._exec.provide_cluster_info:
            c = self._config
            cluster: dict[str, Any] = {"server": c.server}
            if c.tls_server_name:
                cluster["tls-server-name"] = c.tls_server_name
            if c.insecure_skip_tls_verify:
                cluster["insecure-skip-tls-verify"] = True
            if c.ca_data is not None:
                cluster["certificate-authority-data"] = base64.b64encode(c.ca_data).decode()
            if c.proxy_url:
                cluster["proxy-url"] = c.proxy_url
            if self._exec.cluster_config is not None:
                cluster["config"] = self._exec.cluster_config
            spec["cluster"] = cluster
        return {"apiVersion": self._exec.api_version, "kind": "ExecCredential", "spec": spec}

    async def _run(self) -> _ExecResult:
        ex = self._exec
        env = dict(os.environ)
        env.update(ex.env)
        try:
            env["KUBERNETES_EXEC_INFO"] = json.dumps(self._exec_info())
        except (TypeError, ValueError) as e:
            # The kubeconfig loader only lets JSON values into the extension; a config built
            # by hand may not.
            raise ConfigError(
                f"{self._describe()}: the cluster's {_EXEC_EXTENSION_NAME} extension cannot be "
                f"passed to the plugin as JSON ({type(e).__name__}); use strings, numbers, "
                "booleans, lists and mappings only"
            ) from None
        _log.debug("running exec credential plugin %s", ex.command)
        loop = asyncio.get_running_loop()
        output = _PluginOutput(loop)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: output,
                ex.command,
                *ex.args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                # Its own session and process group: on a timeout the plugin *and* whatever
                # it started are killed together.
                start_new_session=True,
            )
        except FileNotFoundError:
            raise ConfigError(
                f"{self._describe()} was not found (looked on $PATH={env.get('PATH', '')!r}); "
                f"install it or fix exec.command{self._hint()}"
            ) from None
        except OSError as e:
            raise ConfigError(
                f"{self._describe()} could not be started: {e.strerror or e}{self._hint()}"
            ) from None
        pid = transport.get_pid()
        try:
            # shield(): a timeout cancels the waiting task, and that would cancel (and so
            # complete) the futures it awaits, hiding whether the plugin really finished.
            async with asyncio.timeout(ex.timeout):
                await asyncio.shield(output.exited)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_PIPE_GRACE):
                        await asyncio.shield(output.finished)
        except TimeoutError:
            raise ConfigError(
                f"{self._describe()} did not finish within {ex.timeout:g} s and was killed "
                "with every process it started; check that it does not wait for input (it "
                "runs without a terminal)"
            ) from None
        finally:
            # On a timeout, a cancellation, or pipes still held by a helper the plugin left
            # behind: kill the whole group, then close the pipes. The loop's child watcher
            # reaps the plugin; its children are reaped by init once the group is dead.
            if not output.finished.done():
                _kill_group(pid)
            transport.close()
        returncode = transport.get_returncode()
        err_text = _trim(output.stderr.decode("utf-8", errors="replace"))
        if returncode != 0:
            detail = f": {err_text}" if err_text else " (no stderr output)"
            raise ConfigError(
                f"{self._describe()} exited with code {returncode}{detail}{self._hint()}"
            )
        if output.stdout_overflow:
            raise self._bad(
                f"printed more than {STDOUT_LIMIT} bytes on stdout; it must print one "
                "ExecCredential object (send logs to stderr)",
                err_text,
            )
        return self._parse(bytes(output.stdout), err_text)

    def _bad(self, problem: str, err_text: str) -> ConfigError:
        extra = f"; its stderr: {err_text}" if err_text else ""
        return ConfigError(f"{self._describe()} {problem}{extra}")

    def _parse(self, stdout: bytes, err_text: str) -> _ExecResult:
        def bad(problem: str) -> ConfigError:
            return self._bad(problem, err_text)

        try:
            data = json.loads(stdout)
        except ValueError as e:
            # Never quote stdout: it holds the token (a plugin that logs after its JSON
            # would otherwise put the token into this error, its logs and the probes).
            where = (
                f"parsing stopped at line {e.lineno}, column {e.colno}: {e.msg}"
                if isinstance(e, json.JSONDecodeError)
                else "it is not UTF-8 text"
            )
            raise bad(
                f"printed {len(stdout)} bytes on stdout that are not one JSON object ({where}); "
                "it must print only an ExecCredential object on stdout (logs go to stderr)"
            ) from None
        if not isinstance(data, dict):
            raise bad(f"printed JSON {type(data).__name__}, not an ExecCredential object")
        if data.get("kind") != "ExecCredential":
            raise bad(f"printed kind {brief(data.get('kind'))}, not 'ExecCredential'")
        if data.get("apiVersion") != self._exec.api_version:
            raise bad(
                f"answered with apiVersion {brief(data.get('apiVersion'))}, but the kubeconfig "
                f"asks for {self._exec.api_version!r} (exec.apiVersion); set exec.apiVersion to "
                "the version the plugin speaks"
            )
        status = data.get("status")
        if not isinstance(status, dict):
            raise bad("printed an ExecCredential without a status object")

        token = status.get("token")
        if token is not None and not isinstance(token, str):
            raise bad(f"returned status.token of type {type(token).__name__}, not a string")
        if token and not _is_header_token(token):
            raise bad(
                "returned a status.token with spaces, control or non-ASCII characters, which "
                "cannot be sent in an Authorization header"
            )
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if (cert is None) != (key is None):
            raise bad("returned only one of status.clientCertificateData and clientKeyData")
        pair: tuple[bytes, bytes] | None = None
        if cert is not None:
            if not isinstance(cert, str) or not isinstance(key, str):
                raise bad("returned clientCertificateData/clientKeyData that are not PEM strings")
            pair = (cert.encode(), key.encode())
            try:
                load_cert_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), *pair)
            except (ssl.SSLError, ValueError, OSError) as e:
                raise bad(
                    f"returned a client certificate/key that cannot be used ({ssl_reason(e)})"
                ) from None
        if not token and pair is None:
            raise bad("returned neither status.token nor clientCertificateData/clientKeyData")

        expires: datetime | None = None
        raw_exp = status.get("expirationTimestamp")
        if raw_exp is not None:
            try:
                expires = datetime.fromisoformat(raw_exp) if isinstance(raw_exp, str) else None
            except ValueError:
                expires = None
            if expires is None or expires.tzinfo is None:
                raise bad(
                    f"returned status.expirationTimestamp {brief(raw_exp)}, which is not an "
                    "RFC 3339 time with a zone (e.g. 2030-01-01T00:00:00Z)"
                )
        return _ExecResult(token=token or None, cert_pair=pair, expires=expires)


def _trim(text: str) -> str:
    """Stderr without surrounding blank space, keeping the end (where errors usually are)."""
    text = text.strip()
    if len(text) > _STDERR_LIMIT:
        text = "..." + text[-_STDERR_LIMIT:]
    return text
