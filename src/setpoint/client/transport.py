"""HTTP transport to the API server: pooling, TLS, auth, timeouts, retries, metrics.

Everything that crosses the network goes through :class:`Transport`. It owns
one connection pool (:class:`~setpoint.client._http.HttpPool`, setpoint's own HTTP/1.1
client), turns responses into decoded JSON or typed errors, and retries only what is
safe to retry:

- a response that carries ``Retry-After`` with 429 or a 5xx code: the server
  did not process the request and said when to come back (client-go's rule);
- a connection that could not be opened, for any verb: nothing was sent;
- a pooled keep-alive connection the server had closed is never written to: the pool
  drops it and takes (or opens) another, for any verb;
- a connection that broke mid-request otherwise, for reads only (GET): a write may
  have been applied, and resending a create or a patch is the caller's decision.

Every request has a timeout. Retries back off exponentially with jitter and
never outlast the request's overall deadline. Deadlines, backoffs and the rate limiter
read and wait on the transport's clock (``TransportOptions.clock``, the event loop's by
default), so tests move time instead of waiting for it.

See ``docs/decisions/0001-http-and-json.md`` for why orjson, and
``docs/decisions/0016-own-http1-client.md`` for why setpoint speaks HTTP/1.1 itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

import orjson

from setpoint.api.clock import Clock, LoopClock, clock_sleep, clock_timeout
from setpoint.client._http import (
    BodyTooLarge,
    ConnectError,
    ConnectionBroken,
    HttpPool,
    ProxyLoginRefused,
    RawResponse,
    StreamResponse,
    UntrustedCertificate,
)
from setpoint.client.config import ClientConfig
from setpoint.client.credentials import Credentials, credentials_for
from setpoint.client.errors import (
    ApiError,
    ConnectionFailed,
    RequestTimeout,
    ResponseTooLarge,
    TLSVerificationFailed,
    Unauthorized,
    error_from_response,
)
from setpoint.client.server_warnings import record_warning, warning_text
from setpoint.observability.recording import active_recorder
from setpoint.observability.tracing import active_tracing

__all__ = ["RequestHook", "Response", "Transport", "TransportOptions"]

RequestHook = Callable[[str, str, str], None]
"""Called after every HTTP attempt with ``(method, host, code)``; ``code`` is the
HTTP status as a string, or ``"<error>"`` when no response arrived. This is the
``rest_client_requests_total{code,method,host}`` feed."""

USER_AGENT = "setpoint/0.1"

log = logging.getLogger("setpoint.client")


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

    max_list_body: int = 256 * 1024 * 1024
    """Most bytes of the body of an answer that is not one object (a list, discovery), as
    sent and once decompressed; a larger one fails with
    :class:`~setpoint.client.errors.ResponseTooLarge`. 256 MiB: a full page of 500 objects
    (``ClientOptions.page_size``) averaging 512 KiB, a third of etcd's 1.5 MiB object limit
    (a page of 500 Pods is 10-20 MiB), with room for the unpaged list a client falls back
    to when a paged one expires. Decoding such a list takes several times its size."""

    clock: Clock | None = None
    """Where deadlines, backoffs and the rate limit read and wait on time (``None``: the
    running event loop's clock, :class:`~setpoint.api.clock.LoopClock`). Tests pass a
    :class:`~setpoint.api.clock.ManualClock` and move it."""

    max_object_body: int = 16 * 1024 * 1024
    """Most bytes of the body of an answer about one object (a get, a write, a Status), as
    sent and once decompressed. 16 MiB: ten times etcd's 1.5 MiB object limit (JSON of a
    protobuf-stored object is larger than what etcd holds), and the watch event cap
    (``ClientOptions.max_watch_line``)."""

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
        for name in ("max_list_body", "max_object_body"):
            if getattr(self, name) < 1:
                raise ValueError(f"TransportOptions.{name} must be at least 1 byte")


@dataclass(frozen=True, slots=True)
class Response:
    """A successful response: HTTP status, headers and the decoded JSON body (or None)."""

    status: int
    headers: Mapping[str, str]
    body: Any


class _Call:
    """One request as the retry loop sees it: what to send, its deadline and its attempts.

    A plain class, not a dataclass: building one at import costs start-up time.
    """

    __slots__ = (
        "accept",
        "attempt",
        "content_type",
        "data",
        "deadline",
        "limit",
        "max_body",
        "method",
        "reauthenticated",
        "setting",
        "target",
        "traced",
        "url",
    )

    def __init__(
        self,
        *,
        method: str,
        url: str,
        target: str,
        data: bytes | None,
        content_type: str,
        accept: str,
        traced: Mapping[str, str] | None,
        limit: float,
        deadline: float,
        setting: str,
        max_body: int,
    ) -> None:
        self.method = method
        self.url = url
        """The server URL and path, for errors and logs."""
        self.target = target
        """The request target (path and query) sent on the wire."""
        self.data = data
        self.content_type = content_type
        self.accept = accept
        self.traced = traced
        self.limit = limit
        """The request's timeout in seconds (named in the timeout's message)."""
        self.deadline = deadline
        """When it ends, on the transport's clock."""
        self.setting = setting
        """The ``TransportOptions`` field whose cap applies to the answer's body."""
        self.max_body = max_body
        self.attempt = 0
        self.reauthenticated = False


class _Retry:
    """Send the request again after ``delay`` seconds; ``counted``: as another attempt."""

    __slots__ = ("counted", "delay")

    def __init__(self, delay: float, *, counted: bool) -> None:
        self.delay = delay
        self.counted = counted


class _TokenBucket:
    """A simple token bucket: ``qps`` tokens per second, at most ``burst`` stored."""

    def __init__(self, qps: float, burst: int, clock: Clock) -> None:
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._stamp: float | None = None  # read on first use: the clock may need a loop
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Take one token, waiting (on the clock) until one is there."""
        async with self._lock:
            while True:
                now = self._clock.now()
                if self._stamp is None:
                    self._stamp = now
                self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._qps)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await clock_sleep(self._clock, (1 - self._tokens) / self._qps)


def _proxy_from_environment(server: str) -> str | None:
    """The proxy ``HTTPS_PROXY``/``HTTP_PROXY`` name for ``server``, unless ``NO_PROXY`` exempts it.

    Read once per transport, with the rules of client-go's ``http.ProxyFromEnvironment``
    (the kubeconfig's ``proxy-url`` wins over it); see :func:`_bypasses_proxy`.
    """
    parts = urlsplit(server)
    proxy = _environment_proxy(parts.scheme)
    if not proxy:
        return None
    no_proxy = _first_set("NO_PROXY", "no_proxy")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if _bypasses_proxy(parts.hostname or "", port, no_proxy):
        return None
    return proxy


# What urllib's quote() never changes, and what _target's quote() also leaves alone.
_ALWAYS_SAFE: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-~"
)
_PATH_SAFE_EXTRA: Final = "/:@!$&'()*+,;=%?"
_PATH_SAFE: Final = _ALWAYS_SAFE | frozenset(_PATH_SAFE_EXTRA)
_QUERIES: dict[tuple[tuple[str, str], ...], str] = {}


def quote_segment(text: str) -> str:
    """``text`` percent-encoded as one path segment (a ``/`` in it too).

    A Kubernetes name needs no quoting, and then ``text`` is returned without calling
    ``urllib.parse.quote`` (a few microseconds per request, three times per request).
    """
    return text if _ALWAYS_SAFE.issuperset(text) else quote(text, safe="")


def _query(params: Mapping[str, str]) -> str:
    """``params`` as a query string; the few distinct ones an operator sends are kept."""
    try:
        key = tuple(params.items())
        query = _QUERIES.get(key)
    except TypeError:  # a value that cannot be a key (not a str, as typed): no caching
        return urlencode(params)
    if query is None:
        query = urlencode(params)
        if len(_QUERIES) >= 256:  # label selectors and continue tokens vary: stay bounded
            _QUERIES.clear()
        _QUERIES[key] = query
    return query


def _first_set(*names: str) -> str:
    """The first of the environment variables ``names`` that is set and not empty, or ``""``."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return ""


def _environment_proxy(scheme: str) -> str:
    """The proxy the environment names for ``scheme`` (``""`` for none), as Go reads it.

    Go's ``httpproxy.FromEnvironment`` (client-go's default): the upper-case name wins over
    the lower-case one (Python's ``urllib`` prefers lower case), and no proxy is used for
    ``http://`` under CGI (``REQUEST_METHOD`` set), where a request's ``Proxy`` header
    arrives as ``HTTP_PROXY`` (Go refuses such a request). Read by hand rather than through
    ``urllib.request``, whose import costs ~10 ms of every start.
    """
    if scheme == "https":
        return _first_set("HTTPS_PROXY", "https_proxy")
    if scheme == "http" and not os.environ.get("REQUEST_METHOD"):
        return _first_set("HTTP_PROXY", "http_proxy")
    return ""


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


def _names_one_object(path: str) -> bool:
    """Whether ``path`` is about one object (its answer gets ``max_object_body``).

    ``/api/v1/namespaces/ns/pods/p`` and its subresources (``.../p/status``) are; a
    collection (``/apis/g/v/namespaces/ns/widgets``, ``/api/v1/pods``, ``/api/v1/namespaces``),
    discovery, ``/version`` and anything else get the larger list cap: a path read the wrong
    way only ever gets the larger cap.
    """
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        rest = parts[2:]
    elif parts[0] == "apis":
        rest = parts[3:]
    else:
        return False
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return len(rest) >= 2


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
        self._pool: HttpPool | None = None
        self._client_cert: tuple[bytes, bytes] | None = None
        self._host = urlsplit(config.server).netloc
        parts = urlsplit(config.server)
        self._base_path = parts.path.rstrip("/")
        try:
            port = parts.port
        except ValueError:
            port = None
        self._address = (parts.hostname or "", port or (443 if parts.scheme == "https" else 80))
        self._proxy = config.proxy_url or _proxy_from_environment(config.server)
        self._clock: Clock = self.options.clock or LoopClock()
        self._limiter = (
            _TokenBucket(self.options.qps, self.options.burst, self._clock)
            if self.options.qps
            else None
        )
        self._closed = False

    @property
    def server(self) -> str:
        """The API server base URL."""
        return self.config.server

    async def _ensure_pool(self) -> HttpPool:
        if self._closed:
            raise ConnectionFailed(
                f"the client for {self.server} is closed; create a new one", url=self.server
            )
        cert = await self._credentials.client_certificate()
        if cert != self._client_cert and self._pool is not None:
            # An exec plugin rotated its client certificate: new connections must present
            # the new one. Requests in flight finish on the old connections.
            self._pool.retire()
            self._pool = None
        if self._pool is None:
            self._client_cert = cert
            context = (
                self.config.ssl_context(client_cert=cert)
                if self.config.server.startswith("https://")
                else None
            )
            try:
                self._pool = HttpPool(
                    self.config.server,
                    ssl_context=context,
                    server_hostname=self.config.tls_server_name,
                    proxy=self._proxy,
                    limit=self.options.pool_size,
                    connect_timeout=self.options.connect_timeout,
                    clock=self._clock,
                )
            except ValueError as exc:  # a proxy URL of an unsupported kind
                raise ConnectionFailed(
                    f"cannot reach the API server at {self.server}: {exc} (set the "
                    "kubeconfig's proxy-url, or HTTPS_PROXY, to one of those, or unset it)",
                    url=self.server,
                ) from None
        return self._pool

    async def close(self) -> None:
        """Close the connection pool. Further requests raise :class:`ConnectionFailed`."""
        self._closed = True
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def _record(self, method: str, code: str) -> None:
        hook = self.on_request
        if hook is not None:
            with contextlib.suppress(Exception):  # metrics never break a request
                hook(method, self._host, code)

    def _untrusted(self, exc: UntrustedCertificate, request: str) -> TLSVerificationFailed:
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

    def _too_large(
        self, method: str, url: str, exc: BodyTooLarge, setting: str
    ) -> ResponseTooLarge:
        """The error for an answer whose body passed ``TransportOptions.<setting>``."""
        what = "lists" if setting == "max_list_body" else "objects"
        return ResponseTooLarge(
            f"{method} {url}: {exc}, the cap of TransportOptions.{setting}; the request is "
            f"not retried. If the API server's {what} are really that large, raise it: "
            f"ClientOptions(transport=TransportOptions({setting}=...))",
            url=url,
            method=method,
            limit=exc.limit,
            setting=f"TransportOptions.{setting}",
        )

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.options.backoff_cap, self.options.backoff_base * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)

    async def _headers(
        self, accept: str, traced: Mapping[str, str] | None = None
    ) -> list[tuple[str, str]]:
        headers = [
            ("User-Agent", USER_AGENT),
            ("Accept", accept),
            ("Accept-Encoding", "gzip"),
        ]
        headers.extend((await self._credentials.headers()).items())
        if self.config.impersonate_user:
            headers.append(("Impersonate-User", self.config.impersonate_user))
            for group in self.config.impersonate_groups:
                headers.append(("Impersonate-Group", group))  # one header per group
        if traced:
            headers.extend(traced.items())
        return headers

    async def _prepare(self, call: _Call) -> tuple[HttpPool, list[tuple[str, str]]]:
        """The pool and the headers of one attempt of ``call``, within its deadline.

        Getting them may run an exec credential plugin; when the deadline passes first, the
        plugin run is cancelled (which kills it) and the request fails with
        :class:`RequestTimeout`.
        """
        if not self._credentials.may_wait:  # nothing to bound: no timer on the hot path
            pool, headers = await self._ensure_pool(), await self._headers(call.accept, call.traced)
        else:

            async def both() -> tuple[HttpPool, list[tuple[str, str]]]:
                return await self._ensure_pool(), await self._headers(call.accept, call.traced)

            try:
                pool, headers = await clock_timeout(self._clock, both(), self._time_left(call))
            except TimeoutError:
                raise self._timed_out(
                    call,
                    ": the credentials were not ready in time (a slow exec credential plugin? "
                    "raise request_timeout or make the plugin answer faster)",
                ) from None
        if call.data is not None:
            headers.append(("Content-Type", call.content_type))
        return pool, headers

    def _target(self, path: str, params: Mapping[str, str] | None) -> str:
        """The request target: the server URL's own path, ``path`` and the query."""
        if not _PATH_SAFE.issuperset(path):  # a path of Kubernetes names needs no quoting
            path = quote(path, safe=_PATH_SAFE_EXTRA)
        target = self._base_path + path
        if params:
            target = f"{target}{'&' if '?' in target else '?'}{_query(params)}"
        return target

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
        """Send ``method path`` until it is answered, fails for good, or its deadline passes.

        The retry loop only: one attempt is :meth:`_attempt` (credentials, rate limit, the
        pool, and what each way of failing to get an answer means), and what an answer
        means is :meth:`_outcome` (success, a typed error, or a retry after a delay).
        """
        limit = timeout if timeout is not None else self.options.request_timeout
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        if data is None and method in ("POST", "PUT", "PATCH"):
            data = b""  # sent with Content-Length: 0, as every HTTP client does
        setting = "max_object_body" if _names_one_object(path) else "max_list_body"
        call = _Call(
            method=method,
            url=f"{self.server}{path}",
            target=self._target(path, params),
            data=data,
            content_type=content_type,
            accept=accept,
            traced=traced,
            limit=limit,
            deadline=self._clock.now() + limit,
            setting=setting,
            max_body=getattr(self.options, setting),
        )
        while True:
            raw = await self._attempt(call)
            if raw is None:  # no answer, and worth another attempt
                retry = _Retry(self._backoff(call.attempt), counted=True)
            else:
                outcome = self._outcome(call, raw)
                if isinstance(outcome, Response):
                    return outcome
                retry = outcome
            if retry.counted:
                call.attempt += 1
                await clock_sleep(self._clock, min(retry.delay, self._time_left(call, 0.0)))

    async def _attempt(self, call: _Call) -> RawResponse | None:
        """One attempt: the answer, or ``None`` when it got none and may be sent again.

        Raises the typed error when it may not: an untrusted certificate, a proxy refusing
        its login, an answer over its body cap, retries used up, the deadline passed, or a
        write whose connection broke after it was sent (it may have been applied).
        """
        self._time_left(call)
        # Credentials count against the deadline: an exec plugin may take seconds.
        pool, headers = await self._prepare(call)
        if self._limiter is not None:
            await self._limiter.acquire()
        self._time_left(call)
        method, url = call.method, call.url
        try:
            return await pool.request(
                method,
                call.target,
                headers,
                call.data,
                deadline=call.deadline,
                max_body=call.max_body,
            )
        except BodyTooLarge as exc:
            # The same request would bring the same answer: not retried.
            self._record(method, "<error>")
            raise self._too_large(method, url, exc, call.setting) from exc
        except UntrustedCertificate as exc:
            # Verification fails the same way every time: no retry, and the advice is
            # about the CA, not about whether the server runs.
            self._record(method, "<error>")
            raise self._untrusted(exc, f"{method} {url}") from exc
        except ProxyLoginRefused as exc:
            # The proxy will refuse the same login again: no retry.
            self._record(method, "<error>")
            raise ConnectionFailed(
                f"cannot reach the API server at {self.server}: {exc} ({method} {url})",
                url=url,
            ) from exc
        except TimeoutError as exc:
            self._record(method, "<error>")
            if self._clock.now() >= call.deadline:
                raise self._timed_out(
                    call, " (is the API server overloaded or unreachable?)"
                ) from exc
            # A connect timeout left time on the clock: the server may be restarting;
            # retry within the deadline like a refused connection.
            if call.attempt >= self.options.max_retries:
                raise ConnectionFailed(
                    f"cannot reach the API server at {self.server}: connection timed out "
                    f"after {call.attempt + 1} attempts ({method} {url})",
                    url=url,
                ) from exc
        except ConnectError as exc:
            # The connection was never established, so nothing was sent: safe to retry
            # for every verb.
            self._record(method, "<error>")
            if call.attempt >= self.options.max_retries or self._clock.now() >= call.deadline:
                raise ConnectionFailed(
                    f"cannot reach the API server at {self.server}: {exc.os_error or exc} "
                    f"({method} {url}, {call.attempt + 1} attempts). Check that it is running "
                    "and that the kubeconfig's server URL is right",
                    url=url,
                ) from exc
        except ConnectionBroken as exc:
            # The connection broke after the request was written: a write may have been
            # applied, so only reads are sent again.
            self._record(method, "<error>")
            if method != "GET" or call.attempt >= self.options.max_retries:
                raise ConnectionFailed(
                    f"connection to the API server at {self.server} failed during "
                    f"{method} {url}: {exc}"
                    + ("" if method == "GET" else " (not retried: the write may have applied)"),
                    url=url,
                ) from exc
        return None

    def _outcome(self, call: _Call, raw: RawResponse) -> Response | _Retry:
        """What an answer means: the response, a retry (after a delay), or a typed error.

        Raises:
            ApiError: (a subclass of it) for an error status that is not retried: any but
                429 and 5xx with ``Retry-After``, or one whose wait would pass the deadline,
                or retries used up. A first 401 is retried at once with fresh credentials.

        """
        method, url, status, headers = call.method, call.url, raw.status, raw.headers
        self._record(method, str(status))
        for warning in headers.getall("Warning", ()):
            # Deprecated APIs, unknown fields dropped by the server, ...: the server's
            # advice is worth a log line, once per request.
            log.warning("API server warning for %s %s: %s", method, url, warning)
            record_warning(warning_text(warning))
        if 200 <= status < 300:
            return Response(status, headers, _decode(raw.body, raw.content_type))
        retry_after = _retry_after(headers)
        error: ApiError = error_from_response(
            status,
            _decode(raw.body, raw.content_type),
            method=method,
            url=url,
            retry_after=retry_after,
        )
        if isinstance(error, Unauthorized) and not call.reauthenticated:
            # Tokens expire and exec plugins rotate them: refresh once.
            call.reauthenticated = True
            self._credentials.invalidate()
            return _Retry(0.0, counted=False)
        retryable = retry_after is not None and (status == 429 or status >= 500)
        if not retryable or call.attempt >= self.options.max_retries:
            raise error
        delay = max(retry_after or 0.0, self._backoff(call.attempt))
        if self._clock.now() + delay >= call.deadline:
            raise error
        return _Retry(delay, counted=True)

    def _time_left(self, call: _Call, at_least: float | None = None) -> float:
        """Seconds left before ``call``'s deadline; past it, :class:`RequestTimeout`.

        With ``at_least``, never raises and returns at least ``at_least`` instead.
        """
        left = call.deadline - self._clock.now()
        if left > 0:
            return left
        if at_least is not None:
            return at_least
        raise self._timed_out(call)

    def _timed_out(self, call: _Call, detail: str = "") -> RequestTimeout:
        """The error for ``call`` past its deadline (the one place it is worded)."""
        return RequestTimeout(
            f"{call.method} {call.url} did not complete within {call.limit:.1f}s{detail}",
            url=call.url,
            timeout=call.limit,
        )

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        read_timeout: float,
        accept: str = "application/json",
    ) -> AsyncIterator[StreamResponse]:
        """Open a streaming response (watch). The caller reads ``resp.chunks()``.

        ``accept`` is the ``Accept`` header (a metadata-only watch asks for
        ``PartialObjectMetadata``, :mod:`setpoint.api.metadata`).

        ``read_timeout`` bounds the silence between chunks, so a connection that
        dies without a FIN does not hang the watcher forever. Connection and
        error handling match :meth:`request`, without retries: a watcher
        re-establishes the stream itself, from its last resourceVersion.
        """
        url = f"{self.server}{path}"
        pool = await self._ensure_pool()
        headers = await self._headers(accept)
        if self._limiter is not None:
            await self._limiter.acquire()
        try:
            resp = await pool.stream(
                method, self._target(path, params), headers, read_timeout=read_timeout
            )
        except UntrustedCertificate as exc:
            self._record(method, "<error>")
            raise self._untrusted(exc, f"{method} {url}") from exc
        except ConnectError as exc:
            self._record(method, "<error>")
            raise ConnectionFailed(
                f"cannot reach the API server at {self.server}: {exc.os_error or exc} "
                f"({method} {url})",
                url=url,
            ) from exc
        except TimeoutError as exc:
            self._record(method, "<error>")
            raise RequestTimeout(
                f"{method} {url}: no answer within {read_timeout:.1f}s",
                url=url,
                timeout=read_timeout,
            ) from exc
        except ConnectionBroken as exc:
            self._record(method, "<error>")
            raise ConnectionFailed(
                f"connection to the API server at {self.server} failed during {method} {url}: "
                f"{exc}",
                url=url,
            ) from exc
        self._record(method, str(resp.status))
        try:
            if resp.status >= 300:
                try:
                    payload = await resp.read(self.options.max_object_body)
                except BodyTooLarge as exc:
                    raise self._too_large(method, url, exc, "max_object_body") from exc
                if resp.status == 401:
                    self._credentials.invalidate()
                raise error_from_response(
                    resp.status,
                    _decode(payload, resp.content_type),
                    method=method,
                    url=url,
                    retry_after=_retry_after(resp.headers),
                )
            yield resp
        finally:
            resp.close()
