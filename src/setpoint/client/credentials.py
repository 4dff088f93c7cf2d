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
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from setpoint.client.config import ClientConfig, ConfigError, ExecConfig
from setpoint.tls.pem import load_cert_chain, os_reason, ssl_reason

__all__ = ["REFRESH_BEFORE_EXPIRY", "Credentials", "ExecCredentials", "credentials_for"]

_log = logging.getLogger("setpoint.client.config")


def credentials_for(config: ClientConfig) -> Credentials:
    """New, stateful :class:`Credentials` for ``config`` (one per connection pool)."""
    if config.exec is not None:
        return ExecCredentials(config)
    if config.token_file is not None:
        return _TokenFileCredentials(config.token_file, fallback=config.token, source=config.source)
    if config.token is not None:
        return _StaticTokenCredentials(config.token)
    return Credentials()


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


class _StaticTokenCredentials(Credentials):
    """A bearer token that never changes."""

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

_STDERR_LIMIT = 2000
_STDOUT_PREVIEW = 200


@dataclass(frozen=True)
class _ExecResult:
    token: str | None
    cert_pair: tuple[bytes, bytes] | None
    expires: datetime | None

    def fresh(self, now: datetime) -> bool:
        return self.expires is None or now < self.expires - REFRESH_BEFORE_EXPIRY


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ExecCredentials(Credentials):
    """Credentials from an exec plugin, cached until they expire or are invalidated.

    One plugin run at a time: concurrent callers wait for the run in progress
    instead of starting their own.
    """

    def __init__(self, config: ClientConfig, *, clock: Callable[[], datetime] = _utcnow) -> None:
        if config.exec is None:
            raise ValueError("ExecCredentials needs a ClientConfig with exec set")
        self._config = config
        self._exec: ExecConfig = config.exec
        self._clock = clock
        self._lock = asyncio.Lock()
        self._current: _ExecResult | None = None

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

    async def _result(self) -> _ExecResult:
        async with self._lock:
            current = self._current
            if current is None or not current.fresh(self._clock()):
                current = await self._run()
                self._current = current
            return current

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
        env["KUBERNETES_EXEC_INFO"] = json.dumps(self._exec_info())
        _log.debug("running exec credential plugin %s", ex.command)
        try:
            proc = await asyncio.create_subprocess_exec(
                ex.command,
                *ex.args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
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
        try:
            async with asyncio.timeout(ex.timeout):
                stdout, stderr = await proc.communicate()
        except TimeoutError:
            raise ConfigError(
                f"{self._describe()} did not finish within {ex.timeout:g} s and was killed; "
                "check that it does not wait for input (it runs without a terminal)"
            ) from None
        finally:
            # On timeout or cancellation, do not leave the plugin running; the
            # event loop's child watcher reaps it.
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        err_text = _trim(stderr.decode("utf-8", errors="replace"))
        if proc.returncode != 0:
            detail = f": {err_text}" if err_text else " (no stderr output)"
            raise ConfigError(
                f"{self._describe()} exited with code {proc.returncode}{detail}{self._hint()}"
            )
        return self._parse(stdout, err_text)

    def _parse(self, stdout: bytes, err_text: str) -> _ExecResult:
        def bad(problem: str) -> ConfigError:
            extra = f"; its stderr: {err_text}" if err_text else ""
            return ConfigError(f"{self._describe()} {problem}{extra}")

        try:
            data = json.loads(stdout)
        except ValueError:
            preview = stdout.decode("utf-8", errors="replace").strip()[:_STDOUT_PREVIEW]
            raise bad(
                f"printed something that is not JSON: {preview!r}; it must print an "
                "ExecCredential object on stdout"
            ) from None
        if not isinstance(data, dict):
            raise bad(f"printed JSON {type(data).__name__}, not an ExecCredential object")
        if data.get("kind") != "ExecCredential":
            raise bad(f"printed kind {data.get('kind')!r}, not 'ExecCredential'")
        if data.get("apiVersion") != self._exec.api_version:
            raise bad(
                f"answered with apiVersion {data.get('apiVersion')!r}, but the kubeconfig asks "
                f"for {self._exec.api_version!r} (exec.apiVersion); set exec.apiVersion to the "
                "version the plugin speaks"
            )
        status = data.get("status")
        if not isinstance(status, dict):
            raise bad("printed an ExecCredential without a status object")

        token = status.get("token")
        if token is not None and not isinstance(token, str):
            raise bad(f"returned status.token of type {type(token).__name__}, not a string")
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
                    f"returned status.expirationTimestamp {raw_exp!r}, which is not an RFC 3339 "
                    "time with a zone (e.g. 2030-01-01T00:00:00Z)"
                )
        return _ExecResult(token=token or None, cert_pair=pair, expires=expires)


def _trim(text: str) -> str:
    """Stderr without surrounding blank space, keeping the end (where errors usually are)."""
    text = text.strip()
    if len(text) > _STDERR_LIMIT:
        text = "..." + text[-_STDERR_LIMIT:]
    return text
