"""The webhook server: one HTTPS server for every conversion and admission webhook.

::

    server = manager.webhook_server                   # or WebhookServer(options, metrics=...)
    server.add_conversion(Tenant, TenantV1Alpha1)     # serves /convert
    server.add_admission(TenantValidator())           # serves its declared path
    server.register("/custom", handler)               # any HttpHandler, by path
    await manager.run()                               # started in the WEBHOOKS group

Like controller-runtime's ``webhook.Server``, it is a runnable in the manager's ``WEBHOOKS``
group, so it serves before the caches sync and the controllers start (the API server calls
it for every read at another version, including the manager's own list and watch), and it
runs in every replica, leader or not. Requests are routed by exact path; each path is
instrumented with controller-runtime's metrics (``controller_runtime_webhook_requests_total``,
``..._latency_seconds``, ``..._requests_in_flight``, labelled ``webhook=<path>``).

The serving certificate comes from a :class:`CertificateSource`, loaded at start (and
watched while serving, for sources that change, such as
:class:`~setpoint.webhook.certificates.SelfManagedCertificates`):
:class:`CertificateDirectory` (``tls.crt``/``tls.key`` in controller-runtime's
``$TMPDIR/k8s-webhook-server/serving-certs``, or wherever cert-manager's Secret is mounted) by
default, watched for changes and reloaded, or :class:`StaticCertificate` for a pair made
in-process (tests, local runs). The running server's certificate is swapped with
``server.tls.update(...)`` (:class:`~setpoint.server.tls.ServerTLS`): rotation and hot reload
build on that.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from setpoint.api.runnable import RunnableGroup
from setpoint.server.address import BindAddress, parse_bind_address
from setpoint.server.http import Http1Server, HttpHandler, HttpRequest, HttpResponse
from setpoint.server.http import HttpServerOptions as _HttpServerOptions
from setpoint.server.tls import ServerTLS
from setpoint.tls.pem import CertificateError, KeyPair, load_key_pair
from setpoint.webhook.options import WebhookServerOptions
from setpoint.webhook.reviews import ReviewWorkers

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from setpoint.api.admission import CustomDefaulter, CustomValidator
    from setpoint.api.resource import Resource
    from setpoint.observability.metrics import Metrics
    from setpoint.webhook.admission_review import AdmissionWebhook
    from setpoint.webhook.conversion_review import ConversionWebhook

__all__ = [
    "DEFAULT_CERT_DIR",
    "POD_CERT_DIR",
    "CertificateDirectory",
    "CertificateSource",
    "StaticCertificate",
    "WebhookServer",
    "WebhookServerOptions",
]

log = logging.getLogger("setpoint.webhook")

_SERVING_CERTS: Final = ("k8s-webhook-server", "serving-certs")

POD_CERT_DIR: Final = str(PurePosixPath("/tmp", *_SERVING_CERTS))
""":data:`DEFAULT_CERT_DIR` as it is inside a container that sets no ``TMPDIR``: where a
manager in a Pod looks by default, and where OLM mounts the serving certificate it issues
for a bundle's webhooks (``setpoint bundle`` passes it as ``--webhook-cert-dir``)."""

DEFAULT_CERT_DIR: Final = str(Path(os.environ.get("TMPDIR") or "/tmp", *_SERVING_CERTS))
"""controller-runtime's default certificate directory,
``$TMPDIR/k8s-webhook-server/serving-certs`` (``/tmp`` without ``TMPDIR``, as Go's
``os.TempDir``). Computed without :func:`tempfile.gettempdir`, which fails at import in a
container with a read-only root filesystem and no writable ``/tmp``."""


@runtime_checkable
class CertificateSource(Protocol):
    """Where the webhook server's serving certificate comes from.

    :meth:`load` is called once, when the server starts; a source that renews certificates
    pushes later ones into the running server with ``server.tls.update(pair)``.
    """

    async def load(self) -> KeyPair:
        """The certificate and key to serve.

        Raises:
            CertificateError: there is no usable certificate; the message says where it looked.

        """
        ...


@dataclass(frozen=True, slots=True)
class StaticCertificate:
    """A certificate made in-process (by :mod:`setpoint.tls.certs`, or read once by hand)."""

    pair: KeyPair
    """The certificate chain and key, PEM."""

    async def load(self) -> KeyPair:
        """The pair given at construction."""
        return self.pair


@dataclass(frozen=True, slots=True)
class CertificateDirectory:
    """``tls.crt`` and ``tls.key`` in a directory (a mounted kubernetes.io/tls Secret).

    Read at start and then watched (:meth:`watch`, run by the webhook server): when the
    files change (the kubelet swaps a mounted Secret's files when cert-manager renews it),
    the new pair is checked and served from the next handshake on. A pair that does not load
    (caught halfway through an update, or a key that does not match) is logged and the old
    one kept until the next look.
    """

    path: str = DEFAULT_CERT_DIR
    """The directory. Default: controller-runtime's, :data:`DEFAULT_CERT_DIR`."""
    cert_name: str = "tls.crt"
    """The certificate file's name in it."""
    key_name: str = "tls.key"
    """The key file's name in it."""
    poll_interval: float = 10.0
    """Seconds between looks at the files (controller-runtime's certificate watcher also
    re-reads every 10 seconds). The files are small; a look reads both."""

    def __post_init__(self) -> None:
        if not self.poll_interval > 0:
            raise ValueError(
                f"CertificateDirectory.poll_interval={self.poll_interval!r} must be a positive "
                "number of seconds"
            )

    async def load(self) -> KeyPair:
        """Read the pair (in a thread: it is file I/O).

        Raises:
            CertificateError: a file is missing or unusable; the message names it and says
                how webhooks get their certificate.

        """
        cert, key = Path(self.path) / self.cert_name, Path(self.path) / self.key_name
        try:
            return await asyncio.to_thread(load_key_pair, cert, key)
        except CertificateError as exc:
            raise CertificateError(
                f"the webhook server has no serving certificate: {exc}. Mount a "
                "kubernetes.io/tls Secret (cert-manager's, for example) at "
                f"{self.path}, or point --webhook-cert-dir / WebhookServerOptions.certificate "
                "elsewhere"
            ) from None

    async def watch(self, on_change: Callable[[KeyPair], None]) -> None:
        """Hand every changed, valid pair to ``on_change``, until cancelled; never returns."""
        cert, key = Path(self.path) / self.cert_name, Path(self.path) / self.key_name

        def read() -> tuple[bytes, bytes] | None:
            try:
                return cert.read_bytes(), key.read_bytes()
            except OSError:
                return None

        last = await asyncio.to_thread(read)
        while True:
            await asyncio.sleep(self.poll_interval)
            current = await asyncio.to_thread(read)
            if current is None or current == last:
                continue
            try:
                pair = await asyncio.to_thread(load_key_pair, cert, key)
                on_change(pair)
            except CertificateError as exc:
                log.warning(
                    "the certificate in %s changed but cannot be served yet (%s); keeping the "
                    "current one and looking again in %.0fs",
                    self.path,
                    exc,
                    self.poll_interval,
                )
                continue
            last = current
            log.info("serving certificate reloaded from %s", self.path)


class WebhookServer:
    """Serves webhooks over HTTPS, by path, in the manager's ``WEBHOOKS`` group.

    Expected flow:
        Build it (the manager does: ``manager.webhook_server``), :meth:`register` handlers or
        :meth:`add_conversion` the versions of a kind, then ``await start()``: the
        certificate is loaded, the port bound, and every path answers. ``stop`` lets
        requests in flight finish within its timeout.

    Guarantees:
        Every request gets an answer: 404 for an unknown path, 405 for a method other than
        POST, 413 for a body over its path's cap (``/convert``:
        :attr:`WebhookServerOptions.conversion_max_body_size`; every other path:
        :attr:`~WebhookServerOptions.admission_max_body_size`), unread, 503 past the
        :attr:`~WebhookServerOptions.body_budget` of bodies in flight, 500 (counted and
        logged, the server stays up) when a handler raises. Paths can be registered before
        or after start. Each path's metrics exist at 0 from registration. Reviews larger
        than :attr:`~WebhookServerOptions.inline_body_size` are split, decoded one object at
        a time and answered in the server's :class:`~setpoint.webhook.reviews.ReviewWorkers`
        (at most :attr:`~WebhookServerOptions.review_workers` at once, for every handler
        together), so a large review costs its own request, not the loop the probes and
        controllers run on.

    Caveats:
        The certificate is read once at start. A source that also has ``watch(on_change)``
        (a :class:`~setpoint.webhook.certificates.WatchedCertificateSource`) runs it while
        the server serves, and each new certificate replaces the old one for new handshakes;
        otherwise renewal is the job of whatever calls ``self.tls.update``. Readiness
        (:meth:`ready`) means the server listens with a certificate, not that the API server
        trusts it (that is the CRD's caBundle).

    Errors:
        CertificateError: from :meth:`start`, when there is no usable certificate.
        OSError: from :meth:`start`, naming the address, when it cannot listen.

    """

    def __init__(
        self, options: WebhookServerOptions | None = None, *, metrics: Metrics | None = None
    ) -> None:
        self.options = options if options is not None else WebhookServerOptions()
        """The validated settings."""
        if metrics is None:
            from setpoint.observability.metrics import Metrics

            metrics = Metrics.default()
        self.metrics = metrics
        """Where requests are counted."""
        self._routes: dict[str, HttpHandler] = {}
        self._by_path: dict[str, tuple[Any, Any]] = {}
        self._counters: dict[tuple[str, int], Any] = {}
        self._conversion: ConversionWebhook | None = None
        self.review_workers = ReviewWorkers(self.options.review_workers)
        """The threads every handler here answers large reviews in (closed at stop)."""
        self._server: Http1Server | None = None
        self._tls: ServerTLS | None = None
        self._source: CertificateSource | None = None
        self._watch: asyncio.Task[None] | None = None
        bind = parse_bind_address(
            self.options.bind_address, option="WebhookServerOptions.bind_address"
        )
        self._bind = bind if bind is not None else BindAddress(None, 9443)
        self._listen_socket: socket.socket | None = None

    # -- runnable ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """``"webhook-server"``."""
        return "webhook-server"

    @property
    def group(self) -> RunnableGroup:
        """``WEBHOOKS``: up before the caches, which the API server may convert for."""
        return RunnableGroup.WEBHOOKS

    @property
    def needs_leader_election(self) -> bool:
        """Every replica serves webhooks (the Service spreads calls over all of them)."""
        return False

    async def start(self) -> None:
        """Load the certificate, bind and serve.

        Raises:
            CertificateError: no usable serving certificate (the message says where it looked).
            OSError: the address cannot be bound.

        """
        source = self.options.certificate or CertificateDirectory()
        pair = await source.load()
        self._tls = ServerTLS(pair)
        self._source = source
        from setpoint.api.conversion import CONVERT_PATH

        options = self.options
        server = Http1Server(
            self.name,
            self._bind,
            self._dispatch,
            options=_HttpServerOptions(
                tls=self._tls,
                # Every path but /convert: admission webhooks, and paths registered later.
                max_body_size=options.admission_max_body_size,
                body_limits={CONVERT_PATH: options.conversion_max_body_size},
                body_limit_hint=(
                    "if the API server sends larger reviews, raise WebhookServerOptions."
                    f"conversion_max_body_size (for {CONVERT_PATH}) or WebhookServerOptions."
                    "admission_max_body_size (every other path)"
                ),
                body_budget=options.body_budget,
                group=RunnableGroup.WEBHOOKS,
                shutdown_timeout=5.0,
                listen_socket=self._listen_socket,
            ),
        )
        await server.start()
        self._server = server
        watch = getattr(source, "watch", None)
        if callable(watch):
            # A WatchedCertificateSource (self-managed certificates, a watched directory):
            # it hands every new certificate to the running server.
            self._watch = asyncio.create_task(
                watch(self._tls.update), name="webhook-server-certificates"
            )
        log.info("webhook server serving %s", ", ".join(sorted(self._routes)) or "no paths yet")

    async def stop(self, timeout: float) -> None:
        """Stop listening; requests in flight get up to ``timeout`` seconds to finish."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch
        server, self._server = self._server, None
        if server is not None:
            await server.stop(timeout)
        self.review_workers.close()  # after the requests in flight had their time

    def failure(self) -> BaseException | None:
        """The error that ended the certificate source's watch, if it ended; else ``None``."""
        watch = self._watch
        if watch is None or not watch.done() or watch.cancelled():
            return None
        return watch.exception() or RuntimeError(
            "the webhook server's certificate watch returned; it must run until stopped"
        )

    def listen(self) -> socket.socket:
        """Open the listening socket of :attr:`options`' bind address, without serving on it.

        A process supervisor (``ManagerOptions.processes``) opens it once and its workers
        inherit it (:meth:`serve_socket`), so every worker accepts from one queue.

        Raises:
            OSError: the address cannot be bound.

        """
        import socket as _socket

        host, port = self._bind.host, self._bind.port
        try:
            if host:
                family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
                sock = _socket.create_server((host, port), family=family, backlog=128)
            elif _socket.has_dualstack_ipv6():
                sock = _socket.create_server(
                    ("", port), family=_socket.AF_INET6, dualstack_ipv6=True, backlog=128
                )
            else:
                sock = _socket.create_server(("", port), backlog=128)
        except OSError as exc:
            raise OSError(
                exc.errno,
                f"the {self.name} cannot listen on {self._bind}: {exc.strerror or exc}",
            ) from exc
        sock.set_inheritable(True)
        return sock

    def serve_socket(self, sock: socket.socket) -> None:
        """Accept on ``sock`` (listening already, inherited) instead of binding the address.

        Call before :meth:`start`; the server closes it when it stops.
        """
        self._listen_socket = sock

    # -- where and how ------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int] | None:
        """The bound ``(host, port)`` once started (the real port when asked for port 0)."""
        return self._server.address if self._server is not None else None

    @property
    def tls(self) -> ServerTLS:
        """The serving certificate of the running server; ``update()`` swaps it live.

        Raises:
            RuntimeError: the server has not started.

        """
        if self._tls is None:
            raise RuntimeError("the webhook server has not started: it has no certificate yet")
        return self._tls

    def url(self, path: str) -> str:
        """``https://host:port<path>`` of a started server (for a CRD's clientConfig.url).

        Raises:
            RuntimeError: the server has not started.

        """
        address = self.address
        if address is None:
            raise RuntimeError("the webhook server has not started: it has no address yet")
        host, port = address
        if ":" in host:
            host = f"[{host}]"
        return f"https://{host}:{port}{path}"

    async def ready(self) -> bool:
        """Readiness check: listening with a serving certificate valid now (``manager.readyz``).

        The certificate being served is checked whatever its source (a mounted directory
        whose Secret nobody renewed expires too). A source with its own ``ready()``
        (self-managed certificates) is asked as well.

        Raises:
            CertificateError: the served certificate is not valid now, naming its validity.

        """
        if self._server is None or self._tls is None:
            return False
        from setpoint.tls.certs import read_certificates

        served = read_certificates(self._tls.certificate.cert_pem)[0]
        now = datetime.datetime.now(datetime.UTC)
        if not served.valid_at(now):
            raise CertificateError(
                f"the webhook server's certificate is not valid now (valid "
                f"{served.not_before:%Y-%m-%dT%H:%M}Z to {served.not_after:%Y-%m-%dT%H:%M}Z); "
                "renew it: the API server refuses it"
            )
        source_ready = getattr(self._source, "ready", None)
        if callable(source_ready):
            result = source_ready()
            if inspect.isawaitable(result):
                result = await result
            return bool(result)
        return True

    @property
    def paths(self) -> tuple[str, ...]:
        """The registered paths, sorted."""
        return tuple(sorted(self._routes))

    # -- routes -------------------------------------------------------------------------------

    def register(self, path: str, handler: HttpHandler) -> None:
        """Serve ``handler`` on ``path`` (exact match), instrumented with the webhook metrics.

        Raises:
            ValueError: ``path`` does not start with ``/`` or is registered already.

        """
        if not path.startswith("/") or any(c.isspace() for c in path):
            raise ValueError(f"webhook path {path!r} must start with '/' and hold no spaces")
        if path in self._routes:
            raise ValueError(f"webhook path {path!r} is registered already")
        self._routes[path] = handler
        self.metrics.init_webhook(path)

    def add_conversion(self, *classes: type[Resource]) -> ConversionWebhook:
        """Convert the versions of a kind on ``/convert`` (registered on first use).

        Pass the hub and its spokes (``add_conversion(Tenant, TenantV1Alpha1)``); call once
        per kind. Returns the conversion handler.

        Raises:
            DeclarationError: the classes are not versions of one kind with one hub.
            ValueError: the kind is registered already.

        """
        from setpoint.webhook.conversion_review import CONVERT_PATH, ConversionWebhook

        if self._conversion is None:
            options = self.options
            self._conversion = ConversionWebhook(
                metrics=self.metrics,
                inline_objects=options.inline_objects,
                inline_body_size=options.inline_body_size,
                max_review_values=options.max_review_values,
                max_review_objects=options.max_review_objects,
                max_object_size=options.max_object_size,
                workers=self.review_workers,
            )
            self.register(CONVERT_PATH, self._conversion)
        self._conversion.register(*classes)
        return self._conversion

    def add_admission(
        self, *webhooks: CustomValidator[Any] | CustomDefaulter[Any]
    ) -> list[AdmissionWebhook]:
        """Serve validators and defaulters, each on its declared path.

        Pass instances (``add_admission(TenantValidator(manager.client))``): a validator may
        hold what it needs to decide (a client to read other objects). ``setpoint generate
        webhook`` writes the configurations that send the API server's requests here.
        Returns the handlers, in order.

        Raises:
            TypeError: an argument is not a declared validator or defaulter.
            ValueError: a path is registered already (two webhooks declare the same one),
                or a validator is declared as CEL ``validations`` (a policy the API server
                runs: apply ``setpoint generate webhook``'s ``policies.yaml`` instead).

        """
        from setpoint.webhook.admission_review import AdmissionWebhook

        options = self.options
        handlers = [
            AdmissionWebhook(
                webhook,
                metrics=self.metrics,
                inline_body_size=options.inline_body_size,
                max_review_values=options.max_review_values,
                max_object_size=options.max_object_size,
                workers=self.review_workers,
            )
            for webhook in webhooks
        ]
        for handler in handlers:
            self.register(handler.spec.path, handler)
        return handlers

    async def _dispatch(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        handler = self._routes.get(path)
        if handler is None:
            known = ", ".join(self.paths) or "none"
            return HttpResponse.text(404, f"no webhook is served on {path} (served: {known})\n")
        in_flight, latency = self._path_metrics(path)
        in_flight.inc()
        started = time.perf_counter()
        try:
            if request.method != "POST":
                response = HttpResponse(
                    405,
                    f"webhooks answer POST, not {request.method}\n".encode(),
                    headers={"Allow": "POST"},
                )
            else:
                response = await handler(request)
        except Exception:
            log.exception("webhook %s failed to answer", path)
            response = HttpResponse.text(500, "internal error in the webhook; see its log\n")
        finally:
            in_flight.dec()
        latency.observe(time.perf_counter() - started)
        counter = self._counters.get((path, response.status))
        if counter is None:
            counter = self.metrics.webhook_requests_total.labels(path, str(response.status))
            self._counters[(path, response.status)] = counter
        counter.inc()
        return response

    def _path_metrics(self, path: str) -> tuple[Any, Any]:
        """The in-flight gauge and latency histogram of ``path``.

        Looked up once per path: ``labels()`` takes a lock and builds a key on every call.
        """
        found = self._by_path.get(path)
        if found is None:
            metrics = self.metrics
            found = (
                metrics.webhook_requests_in_flight.labels(path),
                metrics.webhook_latency_seconds.labels(path),
            )
            self._by_path[path] = found
        return found
