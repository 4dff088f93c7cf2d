"""HTTP transport to the API server: pooling, TLS, auth, timeouts, retries, metrics.

Everything that crosses the network goes through :class:`Transport`. It owns
one ``aiohttp`` session (a connection pool), turns responses into decoded JSON
or typed errors, and retries only what is safe to retry:

- a response that carries ``Retry-After`` with 429 or a 5xx code: the server
  did not process the request and said when to come back (client-go's rule);
- a connection that could not be opened, for any verb: nothing was sent;
- a request whose body could not be written (a pooled keep-alive connection the
  server had closed), for any verb: the server never read it whole;
- a connection that broke mid-request otherwise, for reads only (GET): a write may
  have been applied, and resending a create or a patch is the caller's decision.

Every request has a timeout. Retries back off exponentially with jitter and
never outlast the request's overall deadline.

See ``docs/decisions/0001-http-and-json.md`` for why aiohttp and orjson.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import random
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
from multidict import CIMultiDict

from setpoint.client._aiohttp import aiohttp, read_buffer_on_demand
from setpoint.client.config import ClientConfig
from setpoint.client.credentials import Credentials, credentials_for
from setpoint.client.errors import (
    ApiError,
    ConnectionFailed,
    RequestTimeout,
    TLSVerificationFailed,
    Unauthorized,
    error_from_response,
)
from setpoint.observability.recording import active as active_recorder
from setpoint.observability.tracing import active as active_tracing

__all__ = ["RequestHook", "Response", "Transport", "TransportOptions"]

RequestHook = Callable[[str, str, str], None]
"""Called after every HTTP attempt with ``(method, host, code)``; ``code`` is the
HTTP status as a string, or ``"<error>"`` when no response arrived. This is the
``rest_client_requests_total{code,method,host}`` feed."""

USER_AGENT = "setpoint/0.1"

log = logging.getLogger("setpoint.client")


def _body_unsent(exc: BaseException) -> bool:
    """Whether ``exc`` says the request body could not be written to the connection.

    aiohttp raises this (``ClientOSError`` "Can not write request body ...") when the
    connection was closed or reset by the server before the whole body went out: a pooled
    keep-alive connection the server had just closed, or a server that hung up mid-body.
    A server answers an HTTP/1.1 request only after reading its whole ``Content-Length``
    body, so such a write was never applied and is safe to send again on a new
    connection, whatever its verb (Go's ``net/http`` retries the "nothing written" case
    for the same reason). Any other broken connection may have applied the write.
    """
    return isinstance(exc, aiohttp.ClientOSError) and (exc.strerror or "").startswith(
        "Can not write request body"
    )


@dataclass(frozen=True, kw_only=True)
class TransportOptions:
    """Connection, timeout and retry settings. Every default is documented here."""

    request_timeout: float = 30.0
    """Seconds a non-streaming request may take in total, retries included."""

    connect_timeout: float = 5.0
    """Seconds to open a TCP+TLS connection; a dead server fails within this."""

    max_retries: int = 5
    """Retries of one request (transient failures only; see the module docstring)."""

    backoff_base: float = 0.05
    """First retry delay in seconds; doubles per attempt, with full jitter."""

    backoff_cap: float = 5.0
    """Largest delay between retries, in seconds, unless the server asks for longer."""

    pool_size: int = 100
    """Most connections open at once (HTTP/1.1: one in-flight request each)."""

    qps: float = 0.0
    """Client-side request rate limit per second; 0 disables it (the server's API Priority and
    Fairness protects it, and controllers are bounded by their worker count)."""

    burst: int = 100
    """Requests that may go at once before ``qps`` applies (ignored when ``qps`` is 0)."""

    def __post_init__(self) -> None:
        if self.request_timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("TransportOptions: timeouts must be > 0 seconds")
        if self.connect_timeout > self.request_timeout:
            raise ValueError(
                "TransportOptions: connect_timeout must not exceed request_timeout, "
                "or a dead server would outlast the request's deadline"
            )
        if self.max_retries < 0 or self.pool_size < 1:
            raise ValueError("TransportOptions: max_retries >= 0 and pool_size >= 1 are required")
        if self.qps < 0 or self.burst < 1:
            raise ValueError("TransportOptions: qps >= 0 and burst >= 1 are required")


@dataclass(frozen=True, slots=True)
class Response:
    """A successful response: HTTP status, headers and the decoded JSON body (or None)."""

    status: int
    headers: Mapping[str, str]
    body: Any


class _TokenBucket:
    """A simple token bucket: ``qps`` tokens per second, at most ``burst`` stored."""

    def __init__(self, qps: float, burst: int) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._qps)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self._qps)


def _proxy_from_environment(server: str) -> str | None:
    """The proxy ``HTTPS_PROXY``/``HTTP_PROXY`` name for ``server``, unless ``NO_PROXY`` exempts it.

    Read once per transport, with the rules of client-go's ``http.ProxyFromEnvironment``
    (the kubeconfig's ``proxy-url`` wins over it); see :func:`_bypasses_proxy`.
    """
    parts = urlsplit(server)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme)
    if not proxy:
        return None
    no_proxy = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if _bypasses_proxy(parts.hostname or "", port, no_proxy):
        return None
    return proxy


def _bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``host:port`` goes direct, by Go's ``httpproxy`` rules (client-go's).

    ``localhost`` and loopback addresses never use a proxy. ``NO_PROXY`` is a comma-separated
    list of: ``*`` (nothing is proxied); IP addresses; CIDR ranges (``10.0.0.0/8``, which
    Python's ``urllib`` ignores); domain names, matching the name and its subdomains
    (``example.com``), or only subdomains with a leading ``.`` or ``*.``; each optionally
    with ``:port``.
    """
    host = host.lower().strip("[]")
    if host == "localhost":
        return True
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and address.is_loopback:
        return True
    for raw in no_proxy.lower().split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue
            if address is not None and address in network:
                return True
            continue
        entry_host, entry_port = entry, 0
        head, sep, tail = entry.rpartition(":")
        if sep and tail.isdigit() and (not head.count(":") or head.endswith("]")):
            entry_host, entry_port = head, int(tail)
        entry_host = entry_host.strip("[]")
        if entry_port and entry_port != port:
            continue
        try:
            entry_address = ipaddress.ip_address(entry_host)
        except ValueError:
            entry_address = None
        if entry_address is not None:
            if address is not None and address == entry_address:
                return True
            continue
        if entry_host.startswith("*."):
            entry_host = entry_host[1:]
        if entry_host.startswith("."):
            if host.endswith(entry_host):
                return True
        elif host == entry_host or host.endswith("." + entry_host):
            return True
    return False


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from kube-apiserver; fall back to our backoff


_LARGE_BODY = 1 << 20
"""Bodies above this size are decoded with the cyclic garbage collector paused."""


def _decode(data: bytes, content_type: str) -> Any:
    if not data:
        return None
    if "json" in content_type:
        try:
            if len(data) < _LARGE_BODY:
                return orjson.loads(data)
            # Decoding a big list creates hundreds of thousands of dicts and lists, and the
            # cyclic GC keeps walking them while they are made: more than half of the
            # decode time of a 15 MiB list (bench/client_deps.py). JSON has no cycles, so
            # pausing it for this synchronous call loses nothing.
            enabled = gc.isenabled()
            gc.disable()
            try:
                return orjson.loads(data)
            finally:
                if enabled:
                    gc.enable()
        except orjson.JSONDecodeError:
            return data.decode("utf-8", "replace")
    return data.decode("utf-8", "replace")


class Transport:
    """One connection pool to one API server. Create it inside the event loop that uses it."""

    def __init__(
        self,
        config: ClientConfig,
        options: TransportOptions | None = None,
        *,
        on_request: RequestHook | None = None,
    ) -> None:
        self.config = config
        self.options = options or TransportOptions()
        self.on_request = on_request
        """The metrics hook; may be replaced at any time (the manager installs its own)."""
        self._credentials: Credentials = credentials_for(config)
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | bool | None = None
        self._client_cert: tuple[bytes, bytes] | None = None
        self._host = urlsplit(config.server).netloc
        parts = urlsplit(config.server)
        try:
            port = parts.port
        except ValueError:
            port = None
        self._address = (parts.hostname or "", port or (443 if parts.scheme == "https" else 80))
        self._proxy = config.proxy_url or _proxy_from_environment(config.server)
        self._limiter = (
            _TokenBucket(self.options.qps, self.options.burst) if self.options.qps else None
        )
        self._closed = False

    @property
    def server(self) -> str:
        """The API server base URL."""
        return self.config.server

    def _ssl_context(self) -> ssl.SSLContext | bool:
        if self._ssl is None:
            self._ssl = (
                read_buffer_on_demand(self.config.ssl_context())
                if self.config.server.startswith("https://")
                else False
            )
        return self._ssl

    async def _ensure_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise ConnectionFailed(
                f"the client for {self.server} is closed; create a new one", url=self.server
            )
        cert = await self._credentials.client_certificate()
        if cert != self._client_cert and self._session is not None:
            # An exec plugin rotated its client certificate: new connections
            # must present the new one, so the pool is rebuilt.
            await self._session.close()
            self._session = None
        if self._session is None or self._session.closed:
            self._client_cert = cert
            if cert is not None:
                self._ssl = read_buffer_on_demand(self.config.ssl_context(client_cert=cert))
            connector = aiohttp.TCPConnector(
                limit=self.options.pool_size,
                ssl=self._ssl_context(),
                enable_cleanup_closed=True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": USER_AGENT},
                # Our own JSON codec; never let aiohttp guess.
                json_serialize=lambda o: orjson.dumps(o).decode(),
                auto_decompress=True,
                # trust_env makes aiohttp look up ~/.netrc and the proxy variables in a
                # worker thread on *every* request (about 0.4 ms of CPU each, half of a
                # plain client's CPU in the runtime benchmark); the proxy is resolved once
                # in __init__ instead, and the API server never uses netrc credentials.
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        """Close the connection pool. Further requests raise :class:`ConnectionFailed`."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _record(self, method: str, code: str) -> None:
        hook = self.on_request
        if hook is not None:
            with contextlib.suppress(Exception):  # metrics never break a request
                hook(method, self._host, code)

    def _untrusted(
        self, exc: aiohttp.ClientConnectorCertificateError, request: str
    ) -> TLSVerificationFailed:
        """The error for a server certificate that failed verification."""
        cause = exc.certificate_error
        reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
        reason = str(reason or cause)
        where = self.config.source or "the client configuration"
        if "hostname" in reason.lower() or "ip address mismatch" in reason.lower():
            advice = (
                "the certificate was not issued for this address: use the server URL (or "
                "tls-server-name) the cluster's certificate names"
            )
        elif self.config.ca_data is None:
            advice = (
                f"{where} names no certificate authority, so the system trust store was used "
                "and none of its CAs signed it: set the cluster's certificate-authority (or "
                "certificate-authority-data) to the CA of this API server"
            )
        else:
            advice = (
                f"the certificate authority in {where} did not sign it: set the cluster's "
                "certificate-authority (or certificate-authority-data) to the CA of this API "
                "server, or check that the server URL points at the intended cluster"
            )
        return TLSVerificationFailed(
            f"the API server at {self.server} presented a certificate the client does not "
            f"trust ({reason}; {request}): {advice}",
            url=self.server,
        )

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.options.backoff_cap, self.options.backoff_base * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)

    async def _headers(
        self, extra: Mapping[str, str] | None, traced: Mapping[str, str] | None = None
    ) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict(await self._credentials.headers())
        if self.config.impersonate_user:
            headers["Impersonate-User"] = self.config.impersonate_user
            for group in self.config.impersonate_groups:
                headers.add("Impersonate-Group", group)  # one header per group
        if extra:
            headers.update(extra)
        if traced:
            headers.update(traced)
        return headers

    async def _prepare(
        self,
        method: str,
        url: str,
        accept: str,
        remaining: float,
        limit: float,
        *,
        traced: Mapping[str, str] | None = None,
    ) -> tuple[aiohttp.ClientSession, CIMultiDict[str]]:
        """The session and the headers of one attempt, within the request's ``remaining`` time.

        Getting them may run an exec credential plugin; when the deadline passes first, the
        plugin run is cancelled (which kills it) and the request fails with
        :class:`RequestTimeout`.
        """
        try:
            async with asyncio.timeout(remaining):
                session = await self._ensure_session()
                headers = await self._headers({"Accept": accept}, traced)
        except TimeoutError:
            raise RequestTimeout(
                f"{method} {url} did not complete within {limit:.1f}s: the credentials were "
                "not ready in time (a slow exec credential plugin? raise request_timeout or "
                "make the plugin answer faster)",
                url=url,
                timeout=limit,
            ) from None
        return session, headers

    def _request_kwargs(self) -> dict[str, Any]:
        # Per-request settings that an SSLContext cannot carry.
        kwargs: dict[str, Any] = {}
        if self.config.tls_server_name:
            kwargs["server_hostname"] = self.config.tls_server_name
        if self._proxy:
            kwargs["proxy"] = self._proxy
        return kwargs

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | None = None,
    ) -> Response:
        """Send one request and return its decoded body; raise a typed error otherwise.

        Inside a traced operation (a reconcile, with tracing on: see
        :mod:`setpoint.observability.tracing`) the request is a child span, retries
        included, and carries the ``traceparent`` header. While recording
        (:mod:`setpoint.observability.recording`) the request and its answer are recorded.

        Raises:
            ApiError: (a subclass of it) for an error ``Status`` from the server.
            ConnectionFailed: the server could not be reached; names the URL.
            RequestTimeout: no complete answer within ``timeout`` (default
                ``request_timeout``); names the URL.

        """
        recorder = active_recorder()
        if recorder is None:
            return await self._traced(
                method,
                path,
                params,
                body,
                content_type=content_type,
                accept=accept,
                timeout=timeout,
            )
        sent = time.monotonic()

        def record(status: int | None, answer: Any) -> None:
            recorder.request(
                method, path, params=params, body=body, status=status, response=answer, sent=sent
            )

        try:
            response = await self._traced(
                method,
                path,
                params,
                body,
                content_type=content_type,
                accept=accept,
                timeout=timeout,
            )
        except ApiError as exc:
            record(exc.code, dict(exc.status))
            raise
        except Exception:
            record(None, None)  # no answer: a broken connection, a timeout
            raise
        record(response.status, response.body)
        return response

    async def _traced(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Any,
        *,
        content_type: str,
        accept: str,
        timeout: float | None,
    ) -> Response:
        """:meth:`request`, as a child span when the caller runs in a traced operation."""
        tracing = active_tracing()
        if tracing is None or not tracing.in_span():
            return await self._request(
                method,
                path,
                params,
                body,
                content_type=content_type,
                accept=accept,
                timeout=timeout,
            )
        url = f"{self.server}{path}"
        with tracing.request(method, url, *self._address) as (span, traced):
            try:
                response = await self._request(
                    method,
                    path,
                    params,
                    body,
                    content_type=content_type,
                    accept=accept,
                    timeout=timeout,
                    traced=traced,
                )
            except ApiError as exc:
                span.response(exc.code)
                raise
            except Exception as exc:
                span.failed(exc)
                raise
            span.response(response.status)
            return response

    async def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: Any,
        *,
        content_type: str,
        accept: str,
        timeout: float | None,
        traced: Mapping[str, str] | None = None,
    ) -> Response:
        limit = timeout if timeout is not None else self.options.request_timeout
        deadline = time.monotonic() + limit
        url = f"{self.server}{path}"
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        attempt = 0
        reauthenticated = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeout(
                    f"{method} {url} did not complete within {limit:.1f}s", url=url, timeout=limit
                )
            # Credentials count against the deadline: an exec plugin may take seconds.
            session, headers = await self._prepare(
                method, url, accept, remaining, limit, traced=traced
            )
            if data is not None:
                headers["Content-Type"] = content_type
            if self._limiter is not None:
                await self._limiter.acquire()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimeout(
                    f"{method} {url} did not complete within {limit:.1f}s", url=url, timeout=limit
                )
            try:
                async with session.request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(
                        total=remaining, connect=min(self.options.connect_timeout, remaining)
                    ),
                    **self._request_kwargs(),
                ) as resp:
                    payload = await resp.read()
                    status = resp.status
                    resp_headers = resp.headers
            except TimeoutError as exc:
                self._record(method, "<error>")
                if time.monotonic() >= deadline:
                    raise RequestTimeout(
                        f"{method} {url} did not complete within {limit:.1f}s "
                        "(is the API server overloaded or unreachable?)",
                        url=url,
                        timeout=limit,
                    ) from exc
                # A connect timeout left time on the clock: the server may be
                # restarting; retry within the deadline like a refused connection.
                if attempt >= self.options.max_retries:
                    raise ConnectionFailed(
                        f"cannot reach the API server at {self.server}: connection timed out "
                        f"after {attempt + 1} attempts ({method} {url})",
                        url=url,
                    ) from exc
            except aiohttp.ClientConnectorCertificateError as exc:
                # Verification fails the same way every time: no retry, and the advice is
                # about the CA, not about whether the server runs.
                self._record(method, "<error>")
                raise self._untrusted(exc, f"{method} {url}") from exc
            except aiohttp.ClientConnectorError as exc:
                # The connection was never established, so nothing was sent:
                # safe to retry for every verb.
                self._record(method, "<error>")
                if attempt >= self.options.max_retries or time.monotonic() >= deadline:
                    raise ConnectionFailed(
                        f"cannot reach the API server at {self.server}: {exc.os_error or exc} "
                        f"({method} {url}, {attempt + 1} attempts). Check that it is running "
                        "and that the kubeconfig's server URL is right",
                        url=url,
                    ) from exc
            except aiohttp.ClientError as exc:
                # The connection broke after the request may have been sent; a write is
                # retried only when its body provably never reached the server whole.
                self._record(method, "<error>")
                if (method != "GET" and not _body_unsent(exc)) or (
                    attempt >= self.options.max_retries
                ):
                    raise ConnectionFailed(
                        f"connection to the API server at {self.server} failed during "
                        f"{method} {url}: {exc}"
                        + ("" if method == "GET" else " (not retried: the write may have applied)"),
                        url=url,
                    ) from exc
            else:
                self._record(method, str(status))
                for warning in resp_headers.getall("Warning", ()):
                    # Deprecated APIs, unknown fields dropped by the server, ...:
                    # the server's advice is worth a log line, once per request.
                    log.warning("API server warning for %s %s: %s", method, url, warning)
                if 200 <= status < 300:
                    return Response(status, resp_headers, _decode(payload, resp.content_type or ""))
                retry_after = _retry_after(resp_headers)
                error: ApiError = error_from_response(
                    status,
                    _decode(payload, resp.content_type or ""),
                    method=method,
                    url=url,
                    retry_after=retry_after,
                )
                if isinstance(error, Unauthorized) and not reauthenticated:
                    # Tokens expire and exec plugins rotate them: refresh once.
                    reauthenticated = True
                    self._credentials.invalidate()
                    continue
                retryable = retry_after is not None and (status == 429 or status >= 500)
                if not retryable or attempt >= self.options.max_retries:
                    raise error
                delay = max(retry_after or 0.0, self._backoff(attempt))
                if time.monotonic() + delay >= deadline:
                    raise error
                attempt += 1
                await asyncio.sleep(delay)
                continue
            delay = self._backoff(attempt)
            attempt += 1
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        read_timeout: float,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a streaming response (watch). The caller reads ``resp.content``.

        ``read_timeout`` bounds the silence between chunks, so a connection that
        dies without a FIN does not hang the watcher forever. Connection and
        error handling match :meth:`request`, without retries: a watcher
        re-establishes the stream itself, from its last resourceVersion.
        """
        url = f"{self.server}{path}"
        session = await self._ensure_session()
        headers = await self._headers({"Accept": "application/json"})
        if self._limiter is not None:
            await self._limiter.acquire()
        try:
            resp = await session.request(
                method,
                url,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=self.options.connect_timeout, sock_read=read_timeout
                ),
                **self._request_kwargs(),
            )
        except aiohttp.ClientConnectorCertificateError as exc:
            self._record(method, "<error>")
            raise self._untrusted(exc, f"{method} {url}") from exc
        except aiohttp.ClientConnectorError as exc:
            self._record(method, "<error>")
            raise ConnectionFailed(
                f"cannot reach the API server at {self.server}: {exc.os_error or exc} "
                f"({method} {url})",
                url=url,
            ) from exc
        except TimeoutError as exc:
            self._record(method, "<error>")
            raise RequestTimeout(
                f"{method} {url}: no connection within {self.options.connect_timeout:.1f}s",
                url=url,
                timeout=self.options.connect_timeout,
            ) from exc
        except aiohttp.ClientError as exc:
            self._record(method, "<error>")
            raise ConnectionFailed(
                f"connection to the API server at {self.server} failed during {method} {url}: "
                f"{exc}",
                url=url,
            ) from exc
        self._record(method, str(resp.status))
        try:
            if resp.status >= 300:
                payload = await resp.read()
                if resp.status == 401:
                    self._credentials.invalidate()
                raise error_from_response(
                    resp.status,
                    _decode(payload, resp.content_type or ""),
                    method=method,
                    url=url,
                    retry_after=_retry_after(resp.headers),
                )
            yield resp
        finally:
            resp.release()
