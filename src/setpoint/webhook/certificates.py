"""Certificates that manage themselves: a CA and a serving certificate kept in a Secret.

The API server calls webhooks over TLS only, and trusts the CA given as ``caBundle`` in the
CRD's conversion config and in each webhook configuration. Without cert-manager, an
operator has to make that CA, a serving certificate for its Service, put the CA where the
API server reads it, and renew everything before it expires. :class:`SelfManagedCertificates`
does all of it from inside the operator, the way open-policy-agent's cert-controller does for
Go operators::

    certs = SelfManagedCertificates(client, SelfManagedCertificatesOptions(
        secret_name="webhook-server-cert", secret_namespace="tenants-system",
        hosts=service_hosts("tenants-webhook-service", "tenants-system"),
        crds=("tenants.tenants.setpoint.dev",),
        validating_webhook_configurations=("tenants-validating-webhook-configuration",),
    ))
    server = WebhookServer(WebhookServerOptions(certificate=certs))

Expected flow:
    1. :meth:`SelfManagedCertificates.load` (the webhook server calls it at start) reads the
       Secret. Missing: a new CA and a serving certificate signed by it are made and the
       Secret is created. Present: it is checked, and renewed if due (below). Either way the
       caBundle is written into every target named in the options. The serving pair is
       returned and served.
    2. :meth:`SelfManagedCertificates.watch` (the webhook server runs it while serving)
       watches the Secret and every target. When another replica renews the Secret, the new
       pair is handed to the server (``ServerTLS.update``: new handshakes use it, open
       connections keep theirs, nothing is dropped). When someone overwrites a caBundle
       (``kubectl apply`` of the manifests, which carry none), it is written back. A timer
       wakes the loop when the next renewal is due, and every ``resync_interval`` anyway.

Renewal (:func:`plan`, a pure function of the stored state and the time):
    - The CA is renewed ``renew_before`` ahead of its expiry. The new CA is added *in front
      of* the old one in the bundle (``ca.crt`` holds every CA still trusted), so the API
      server trusts both while the bundle propagates. The serving certificate is re-issued
      by the new CA only once the new CA has been in the bundle for ``ca_handover``.
    - The serving certificate is re-issued ``renew_before`` ahead of its expiry, or at once
      when it is not usable: expired, missing a host, or signed by no CA in the bundle.
    - CAs that have expired leave the bundle.

Guarantees:
    Replicas share one Secret and agree on it: the Secret is created with ``create`` (the
    loser of a creation race gets ``AlreadyExists`` and re-reads it), and every change is an
    ``update`` carrying the ``resourceVersion`` that was read (the loser of an update race
    gets ``Conflict``, re-reads and re-plans, and then usually finds nothing left to do).
    Injected caBundles are written the same way. A certificate is never replaced by one
    that fails to load. Serving renewals keep the CA, so the API server never sees a
    certificate it does not trust.

Caveats:
    The Secret holds the CA's private key: restrict ``get`` on Secrets in the operator's
    namespace. A Secret that holds a certificate but no ``ca.key`` and was not made here
    (cert-manager's, for example) is refused rather than overwritten: use
    :class:`~setpoint.webhook.server.CertificateDirectory` for such a Secret. Deleting the
    Secret makes a new CA; the API server sees an unknown certificate for the moment it takes
    the new caBundle to reach it.

Errors:
    :meth:`SelfManagedCertificates.load` raises
    :class:`~setpoint.tls.pem.CertificateError` for a Secret that belongs to someone else,
    and the client's typed errors (``Forbidden`` naming the missing permission, an
    unreachable server). The watch loop logs the same errors and retries with backoff; the
    readiness check (:meth:`SelfManagedCertificates.ready`) fails while there is no valid
    serving certificate.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as _dt
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.client.errors import AlreadyExists, Conflict, NotFound
from setpoint.observability.logging import get_logger
from setpoint.tls.certs import (
    CLOCK_SKEW,
    CertificateAuthority,
    issued_by,
    key_matches,
    read_certificates,
)
from setpoint.tls.pem import CertificateError, KeyPair

if TYPE_CHECKING:
    from setpoint.cache.informer import Informer
    from setpoint.client.protocols import ApiClient

__all__ = [
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "MANAGED_ANNOTATION",
    "TLS_CERT_KEY",
    "TLS_KEY_KEY",
    "CertificateState",
    "InjectionTarget",
    "RotationPlan",
    "SelfManagedCertificates",
    "SelfManagedCertificatesOptions",
    "WatchedCertificateSource",
    "inject_ca_bundle",
    "plan",
    "service_hosts",
]

log = get_logger("setpoint.webhook.certificates")

CA_CERT_KEY: Final = "ca.crt"
"""Secret key of the CA bundle: every CA still trusted, newest (the signer) first."""
CA_KEY_KEY: Final = "ca.key"
"""Secret key of the newest CA's private key."""
TLS_CERT_KEY: Final = "tls.crt"
"""Secret key of the serving certificate (the ``kubernetes.io/tls`` layout)."""
TLS_KEY_KEY: Final = "tls.key"
"""Secret key of the serving certificate's private key."""
MANAGED_ANNOTATION: Final = "setpoint.dev/self-managed-certificates"
"""Annotation on a Secret made by :class:`SelfManagedCertificates` (value ``"true"``)."""

_DAY: Final = _dt.timedelta(days=1)
_ATTEMPTS: Final = 8
"""Read-plan-write rounds before a conflicting writer is reported (each loses only to
another writer's success, so more rounds than replicas is plenty)."""


def _utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def service_hosts(service: str, namespace: str) -> tuple[str, ...]:
    """The names the API server uses to reach ``service`` in ``namespace``.

    ``("svc.ns.svc", "svc.ns.svc.cluster.local")``: the API server connects to
    ``<service>.<namespace>.svc`` and checks the serving certificate for that name.
    """
    return (f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


@dataclass(frozen=True, kw_only=True)
class SelfManagedCertificatesOptions:
    """Settings of :class:`SelfManagedCertificates`; every default is documented here.

    The validity defaults are cert-controller's: a CA for ten years, serving certificates for
    one, each renewed 90 days before it expires.
    """

    hosts: tuple[str, ...]
    """DNS names and IP addresses the serving certificate is valid for (required). In a
    cluster: :func:`service_hosts` of the webhook Service; for a local run: ``127.0.0.1``."""

    secret_name: str = "webhook-server-cert"
    """The Secret holding the CA and the serving certificate (kubebuilder's name for the
    webhook certificate Secret)."""

    secret_namespace: str | None = None
    """Namespace of the Secret. ``None``: the client's default namespace (the pod's own
    namespace in a cluster)."""

    common_name: str | None = None
    """Subject common name of the serving certificate. ``None``: the first host. (TLS
    clients check the hosts, not this.)"""

    ca_name: str = "setpoint-webhook-ca"
    """Subject common name of the CA."""

    ca_validity: _dt.timedelta = _dt.timedelta(days=3650)
    """How long a new CA is valid (ten years)."""

    cert_validity: _dt.timedelta = _dt.timedelta(days=365)
    """How long a new serving certificate is valid (one year); never past its CA's expiry."""

    renew_before: _dt.timedelta = _dt.timedelta(days=90)
    """Renew a CA or serving certificate this long before it expires (90 days)."""

    ca_handover: _dt.timedelta = _dt.timedelta(minutes=5)
    """After a CA renewal, how long the new CA is trusted (in the injected caBundle, beside
    the old one) before serving certificates signed by it are used: time for the new
    caBundle to reach the API server and every replica to see the new Secret."""

    resync_interval: _dt.timedelta = _dt.timedelta(minutes=10)
    """Re-check the Secret and every caBundle at least this often, even without a change
    seen by the watches (a repair for anything a watch may have missed)."""

    crds: tuple[str, ...] = ()
    """CRDs (by name, ``tenants.tenants.setpoint.dev``) whose conversion webhook gets the
    caBundle (``spec.conversion.webhook.clientConfig.caBundle``)."""

    validating_webhook_configurations: tuple[str, ...] = ()
    """ValidatingWebhookConfigurations (by name) whose every webhook gets the caBundle."""

    mutating_webhook_configurations: tuple[str, ...] = ()
    """MutatingWebhookConfigurations (by name) whose every webhook gets the caBundle."""

    def __post_init__(self) -> None:
        if not self.hosts or any(not h or h != h.strip() for h in self.hosts):
            raise ValueError(
                f"SelfManagedCertificatesOptions.hosts={self.hosts!r} must name at least one "
                "DNS name or IP address the API server uses to reach the webhook server "
                "(service_hosts('webhook-service', 'my-namespace') in a cluster, "
                "('127.0.0.1',) for a local run)"
            )
        if not self.secret_name or len(self.secret_name) > 253:
            raise ValueError(
                f"SelfManagedCertificatesOptions.secret_name={self.secret_name!r} must be a "
                "Secret name (1-253 characters)"
            )
        if self.secret_namespace == "":
            raise ValueError(
                "SelfManagedCertificatesOptions.secret_namespace must not be empty; give a "
                "namespace or None for the client's default namespace"
            )
        for attr in ("ca_validity", "cert_validity", "renew_before", "resync_interval"):
            value = getattr(self, attr)
            if not value > _dt.timedelta(0):
                raise ValueError(
                    f"SelfManagedCertificatesOptions.{attr}={value} must be a positive duration"
                )
        if self.ca_handover < _dt.timedelta(0):
            raise ValueError(
                f"SelfManagedCertificatesOptions.ca_handover={self.ca_handover} must not be "
                "negative"
            )
        for attr in ("cert_validity", "ca_validity"):
            validity = getattr(self, attr)
            if self.renew_before >= validity:
                raise ValueError(
                    f"SelfManagedCertificatesOptions.renew_before={self.renew_before} must be "
                    f"shorter than {attr}={validity}, or every certificate would be due for "
                    "renewal as soon as it is made"
                )
        if self.cert_validity > self.ca_validity:
            raise ValueError(
                f"SelfManagedCertificatesOptions.cert_validity={self.cert_validity} must not "
                f"exceed ca_validity={self.ca_validity}: a serving certificate cannot outlive "
                "its CA"
            )
        if self.ca_handover >= self.renew_before:
            raise ValueError(
                f"SelfManagedCertificatesOptions.ca_handover={self.ca_handover} must be shorter "
                f"than renew_before={self.renew_before}, so the old CA is still valid when "
                "the new one takes over"
            )


# --------------------------------------------------------------------------- state and plan


@dataclass(frozen=True, slots=True)
class CertificateState:
    """What the Secret holds: the trusted CAs, the newest CA's key and the serving pair."""

    ca_bundle: bytes
    """PEM of every CA still trusted, newest (the signer) first: the caBundle to inject."""
    ca_key: bytes = field(repr=False)
    """PEM private key of the first CA in :attr:`ca_bundle`."""
    serving: KeyPair
    """The serving certificate and its key."""

    @classmethod
    def from_secret_data(cls, data: Mapping[str, Any]) -> CertificateState:
        """Decode a Secret's ``data`` (base64 values).

        Raises:
            CertificateError: a key is missing or not base64; the message names the key.

        """
        values: dict[str, bytes] = {}
        for key in (CA_CERT_KEY, CA_KEY_KEY, TLS_CERT_KEY, TLS_KEY_KEY):
            raw = data.get(key)
            if not isinstance(raw, str) or not raw:
                raise CertificateError(f"the Secret has no {key!r}")
            try:
                values[key] = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise CertificateError(f"the Secret's {key!r} is not base64") from None
        return cls(
            ca_bundle=values[CA_CERT_KEY],
            ca_key=values[CA_KEY_KEY],
            serving=KeyPair(values[TLS_CERT_KEY], values[TLS_KEY_KEY]),
        )

    def to_secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 values) for this state."""
        return {
            CA_CERT_KEY: base64.b64encode(self.ca_bundle).decode(),
            CA_KEY_KEY: base64.b64encode(self.ca_key).decode(),
            TLS_CERT_KEY: base64.b64encode(self.serving.cert_pem).decode(),
            TLS_KEY_KEY: base64.b64encode(self.serving.key_pem).decode(),
        }


@dataclass(frozen=True, slots=True)
class RotationPlan:
    """The outcome of :func:`plan`: what to store, why, and when to look again."""

    state: CertificateState
    """The state to serve and store (the input, when nothing changes)."""
    changed: bool
    """Whether :attr:`state` differs from the input and must be written."""
    reasons: tuple[str, ...]
    """What was done and why, for the log (``"serving certificate renewed: expires ..."``)."""
    next_check: _dt.datetime
    """When something may next be due (a renewal, a handover, a CA leaving the bundle)."""


def plan(
    state: CertificateState | None,
    options: SelfManagedCertificatesOptions,
    now: _dt.datetime,
) -> RotationPlan:
    """Decide what the Secret should hold at ``now``; pure apart from making keys.

    See the module docstring for the rules. A ``state`` that cannot be used at all (no CA
    key matching the first CA, unparsable PEM) is replaced by a fresh CA and certificate.
    """
    reasons: list[str] = []
    signer: CertificateAuthority | None = None
    cas: list[bytes] = []
    if state is not None:
        try:
            infos = read_certificates(state.ca_bundle)
            signer = CertificateAuthority.load(infos[0].pem, state.ca_key)
            cas = [info.pem for info in infos if info.valid_at(now) or info.pem == infos[0].pem]
            if len(cas) < len(infos):
                reasons.append(f"{len(infos) - len(cas)} expired CA(s) removed from the bundle")
        except CertificateError as exc:
            reasons.append(f"the stored CA is unusable ({exc}); a new one was made")
            signer = None
    if signer is None:
        signer = _new_ca(options, now)
        cas = [signer.cert_pem]
        if state is None:
            reasons.append("new CA made")
    elif now >= signer.not_after - options.renew_before:
        old_expiry = signer.not_after
        signer = _new_ca(options, now)
        cas = [signer.cert_pem, *cas]
        reasons.append(f"CA renewed (the old one expires {old_expiry:%Y-%m-%d %H:%M}Z)")
    bundle = b"".join(cas)
    handover_at = signer.not_before + CLOCK_SKEW + options.ca_handover

    serving = state.serving if state is not None else None
    serving_problem = _serving_problem(serving, bundle, options, now)
    renew = serving_problem is not None
    if serving is not None and serving_problem is None:
        info = read_certificates(serving.cert_pem)[0]
        by = issued_by(serving.cert_pem, signer.cert_pem)
        if now >= info.not_after - options.renew_before:
            serving_problem = f"it expires {info.not_after:%Y-%m-%d %H:%M}Z"
        elif by is None:
            serving_problem = "a newer CA has taken over"
        renew = serving_problem is not None and now >= handover_at
    if renew:
        serving = signer.serving_cert(
            options.common_name or options.hosts[0],
            options.hosts,
            validity=options.cert_validity,
            now=now,
        )
        reasons.append(
            "serving certificate issued"
            + (f" ({serving_problem})" if serving_problem and state is not None else "")
        )
    assert serving is not None  # renew is True whenever there was none
    new_state = CertificateState(ca_bundle=bundle, ca_key=signer.key_pem, serving=serving)
    changed = state is None or new_state != state
    return RotationPlan(
        state=new_state,
        changed=changed,
        reasons=tuple(reasons),
        next_check=_next_check(new_state, signer, handover_at, options, now),
    )


def _new_ca(options: SelfManagedCertificatesOptions, now: _dt.datetime) -> CertificateAuthority:
    return CertificateAuthority(options.ca_name, validity=options.ca_validity, now=now)


def _serving_problem(
    serving: KeyPair | None,
    bundle: bytes,
    options: SelfManagedCertificatesOptions,
    now: _dt.datetime,
) -> str | None:
    """Why ``serving`` cannot be served as it is, or ``None`` when it can."""
    if serving is None:
        return "there is none"
    try:
        info = read_certificates(serving.cert_pem)[0]
    except CertificateError as exc:
        return str(exc)
    if not info.valid_at(now):
        return (
            f"it is not valid now (valid {info.not_before:%Y-%m-%d} to {info.not_after:%Y-%m-%d})"
        )
    missing = [h for h in options.hosts if not info.covers(h)]
    if missing:
        return f"it does not cover {', '.join(missing)}"
    if issued_by(serving.cert_pem, bundle) is None:
        return "no CA in the bundle signed it"
    if not key_matches(serving):
        return "its key does not belong to it"
    return None


def _next_check(
    state: CertificateState,
    signer: CertificateAuthority,
    handover_at: _dt.datetime,
    options: SelfManagedCertificatesOptions,
    now: _dt.datetime,
) -> _dt.datetime:
    moments = [signer.not_after - options.renew_before]
    serving = read_certificates(state.serving.cert_pem)[0]
    moments.append(serving.not_after - options.renew_before)
    if issued_by(state.serving.cert_pem, signer.cert_pem) is None:
        moments.append(handover_at)
    moments.extend(info.not_after for info in read_certificates(state.ca_bundle)[1:])
    upcoming = [m for m in moments if m > now]
    return min(upcoming) if upcoming else now + options.resync_interval


# --------------------------------------------------------------------------- sources


@runtime_checkable
class WatchedCertificateSource(Protocol):
    """A certificate source whose certificate changes while the server runs.

    The webhook server calls ``load()`` at start, then runs :meth:`watch` until it stops,
    passing ``ServerTLS.update`` as ``on_change``.
    """

    async def load(self) -> KeyPair:
        """The certificate and key to serve now."""
        ...

    async def watch(self, on_change: Callable[[KeyPair], None]) -> None:
        """Call ``on_change`` with every new certificate, until cancelled; never returns."""
        ...


@dataclass(frozen=True, slots=True)
class InjectionTarget:
    """One object whose caBundle is kept equal to the CA bundle."""

    kind: GroupVersionKind
    """``CustomResourceDefinition``, ``ValidatingWebhookConfiguration`` or
    ``MutatingWebhookConfiguration``."""
    name: str
    """The object's name (all three kinds are cluster-scoped)."""

    def __str__(self) -> str:
        return f"{self.kind.kind} {self.name}"


def _targets(options: SelfManagedCertificatesOptions) -> tuple[InjectionTarget, ...]:
    return (
        *(InjectionTarget(kinds.CustomResourceDefinition, n) for n in options.crds),
        *(
            InjectionTarget(kinds.ValidatingWebhookConfiguration, n)
            for n in options.validating_webhook_configurations
        ),
        *(
            InjectionTarget(kinds.MutatingWebhookConfiguration, n)
            for n in options.mutating_webhook_configurations
        ),
    )


def inject_ca_bundle(obj: JsonObject, ca_bundle: bytes) -> bool:
    """Set the caBundle of every webhook client config in ``obj``; ``True`` if one changed.

    A CRD gets it in ``spec.conversion.webhook.clientConfig`` when its conversion strategy
    is ``Webhook`` (otherwise it has no webhook and nothing changes). A webhook configuration
    gets it in each ``webhooks[].clientConfig``.
    """
    encoded = base64.b64encode(ca_bundle).decode()
    configs: list[dict[str, Any]] = []
    if obj.get("kind") == "CustomResourceDefinition":
        conversion = (obj.get("spec") or {}).get("conversion") or {}
        if conversion.get("strategy") == "Webhook":
            webhook = conversion.setdefault("webhook", {})
            configs.append(webhook.setdefault("clientConfig", {}))
    else:
        for webhook in obj.get("webhooks") or ():
            if isinstance(webhook, dict):
                configs.append(webhook.setdefault("clientConfig", {}))
    changed = False
    for config in configs:
        if config.get("caBundle") != encoded:
            config["caBundle"] = encoded
            changed = True
    return changed


class SelfManagedCertificates:
    """A self-managed CA and serving certificate: a :class:`WatchedCertificateSource`.

    See the module docstring for the flow, guarantees and caveats.

    Args:
        client: The client (the live one, or a fake in unit tests) Secrets, CRDs and webhook
            configurations are read, watched and written with.
        options: What to make and where to inject it.
        now: The wall clock (UTC); tests pass one that jumps ahead.

    """

    def __init__(
        self,
        client: ApiClient,
        options: SelfManagedCertificatesOptions,
        *,
        now: Callable[[], _dt.datetime] = _utc_now,
    ) -> None:
        self._client = client
        self.options = options
        """The validated settings."""
        self._now = now
        self._namespace = options.secret_namespace or client.default_namespace or "default"
        self._targets = _targets(options)
        self._lock = asyncio.Lock()
        self._state: CertificateState | None = None
        self._next_check: _dt.datetime | None = None
        self._injected: dict[InjectionTarget, str] = {}
        self._wake = asyncio.Event()
        self.rotations = 0
        """How many times this process stored a new state in the Secret (for tests, logs)."""
        self.injections = 0
        """How many caBundles this process wrote into targets (for tests, logs)."""

    # -- what is known ----------------------------------------------------------------------

    @property
    def secret_ref(self) -> str:
        """``namespace/name`` of the Secret."""
        return f"{self._namespace}/{self.options.secret_name}"

    @property
    def state(self) -> CertificateState | None:
        """The state last read or written, or ``None`` before :meth:`load`."""
        return self._state

    @property
    def ca_bundle(self) -> bytes:
        """The CA bundle injected into the targets (PEM).

        Raises:
            RuntimeError: before :meth:`load`.

        """
        if self._state is None:
            raise RuntimeError("the certificates have not been loaded yet; call load() first")
        return self._state.ca_bundle

    @property
    def injection(self) -> Mapping[InjectionTarget, str]:
        """Per target, the outcome of the last injection.

        ``"injected"``, ``"up to date"``, ``"not found"`` or ``"no webhook conversion"``.
        """
        return dict(self._injected)

    def ready(self) -> bool:
        """Readiness check: there is a serving certificate and it is valid now.

        Raises:
            CertificateError: the reason it is not ready (no certificate yet, or expired).

        """
        if self._state is None:
            raise CertificateError(
                f"no serving certificate yet (Secret {self.secret_ref} not read or written)"
            )
        info = read_certificates(self._state.serving.cert_pem)[0]
        now = self._now()
        if not info.valid_at(now):
            raise CertificateError(
                f"the serving certificate from Secret {self.secret_ref} is not valid now "
                f"(valid {info.not_before:%Y-%m-%dT%H:%M}Z to {info.not_after:%Y-%m-%dT%H:%M}Z)"
            )
        return True

    # -- the source -------------------------------------------------------------------------

    async def load(self) -> KeyPair:
        """Make sure the Secret holds a valid certificate, inject the CA, return the pair.

        Raises:
            CertificateError: the Secret exists but was not made by setpoint.
            ClientError: a typed client error (``Forbidden`` when the operator may not read
                or write Secrets in its namespace, for example).

        """
        await self.sync()
        assert self._state is not None
        return self._state.serving

    async def sync(self) -> bool:
        """One round: read (or create) the Secret, renew what is due, inject the caBundle.

        Returns whether the serving certificate changed.
        """
        async with self._lock:
            before = self._state.serving if self._state is not None else None
            await self._sync_secret()
            await self._inject_all()
            assert self._state is not None
            return before is not None and before != self._state.serving

    async def watch(self, on_change: Callable[[KeyPair], None]) -> None:
        """Keep the certificate current and the caBundles injected, until cancelled.

        Runs a watch on the Secret and on every target; each change, the renewal timer and
        ``resync_interval`` trigger :meth:`sync`. A new serving certificate goes to
        ``on_change``. Errors are logged and retried with backoff (0.5 s doubling to 60 s).
        """
        informers = await self._start_informers()
        backoff = 0.5
        served = self._state.serving if self._state is not None else None
        try:
            while True:
                wait = self._seconds_to_next_check()
                try:
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                self._wake.clear()
                try:
                    await self.sync()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # logged and retried: the loop never dies
                    log.error(
                        "Cannot keep the webhook certificates current; retrying",
                        secret=self.secret_ref,
                        error=str(exc),
                        retry_in=round(backoff, 1),
                    )
                    await asyncio.sleep(backoff * (0.8 + 0.4 * random.random()))
                    backoff = min(backoff * 2, 60.0)
                    self._wake.set()
                    continue
                backoff = 0.5
                current = self._state.serving if self._state is not None else None
                if current is None or current == served:
                    continue
                try:
                    on_change(current)
                except CertificateError as exc:
                    log.error(
                        "The new serving certificate cannot be served; keeping the old one",
                        secret=self.secret_ref,
                        error=str(exc),
                    )
                    continue
                served = current
                log.info(
                    "Serving the new webhook certificate",
                    secret=self.secret_ref,
                    expires=read_certificates(current.cert_pem)[0].not_after.isoformat(),
                )
        finally:
            for informer in informers:
                await informer.stop(1.0)

    def recheck(self) -> None:
        """Ask the running :meth:`watch` loop to look at the Secret and the caBundles now."""
        self._wake.set()

    def _seconds_to_next_check(self) -> float:
        resync = self.options.resync_interval.total_seconds()
        if self._next_check is None:
            return resync
        due = (self._next_check - self._now()).total_seconds()
        # A small margin past the due moment, so the plan sees it as due.
        return max(0.05, min(resync, due + 0.05))

    async def _start_informers(self) -> list[Informer]:
        from setpoint.cache.informer import FuncHandler, Informer, InformerOptions

        def wake(*_: Any) -> None:
            self._wake.set()

        handler = FuncHandler(add=wake, update=wake, delete=wake)
        watched: list[tuple[GroupVersionKind, str, tuple[str, ...]]] = [
            (kinds.Secret, self.options.secret_name, (self._namespace,))
        ]
        watched += [(t.kind, t.name, ()) for t in self._targets]
        informers = []
        for kind, name, namespaces in watched:
            informer = Informer(
                self._client,
                kind,
                InformerOptions(namespaces=namespaces, fields=f"metadata.name={name}"),
            )
            informer.add_handler(handler)
            await informer.start()
            informers.append(informer)
        return informers

    # -- the Secret ---------------------------------------------------------------------------

    async def _sync_secret(self) -> None:
        name, namespace = self.options.secret_name, self._namespace
        for _ in range(_ATTEMPTS):
            try:
                secret = await self._client.get(kinds.Secret, name, namespace=namespace)
            except NotFound:
                secret = None
            stored = self._stored_state(secret)
            outcome = plan(stored, self.options, self._now())
            self._next_check = outcome.next_check
            if not outcome.changed:
                self._state = outcome.state
                return
            try:
                if secret is None:
                    await self._client.create(self._new_secret(outcome.state))
                else:
                    secret["data"] = {
                        **(secret.get("data") or {}),
                        **outcome.state.to_secret_data(),
                    }
                    annotations = secret["metadata"].setdefault("annotations", {})
                    annotations[MANAGED_ANNOTATION] = "true"
                    await self._client.update(secret)
            except (AlreadyExists, Conflict):
                continue  # another replica wrote first: read what it wrote and plan again
            self._state = outcome.state
            self.rotations += 1
            log.info(
                "Webhook certificates stored",
                secret=self.secret_ref,
                changes="; ".join(outcome.reasons),
                next_check=outcome.next_check.isoformat(),
            )
            return
        raise Conflict(
            f"Secret {self.secret_ref} kept changing while the webhook certificates were being "
            f"stored ({_ATTEMPTS} attempts); another writer is fighting over it: give each "
            "operator its own secret_name",
            code=409,
            reason="Conflict",
        )

    def _stored_state(self, secret: JsonObject | None) -> CertificateState | None:
        if secret is None:
            return None
        data = secret.get("data") or {}
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        ours = annotations.get(MANAGED_ANNOTATION) == "true"
        if not ours and TLS_CERT_KEY in data and CA_KEY_KEY not in data:
            raise CertificateError(
                f"Secret {self.secret_ref} holds a certificate that setpoint did not make (it "
                f"has {TLS_CERT_KEY!r} but no {CA_KEY_KEY!r} and no {MANAGED_ANNOTATION} "
                "annotation), perhaps cert-manager's; serve it from a certificate directory "
                "(CertificateDirectory) instead, or choose another secret_name"
            )
        try:
            return CertificateState.from_secret_data(data)
        except CertificateError as exc:
            if ours or not data:
                return None  # ours but damaged, or an empty Secret made for us: start afresh
            raise CertificateError(
                f"Secret {self.secret_ref} cannot hold the webhook certificates: {exc}; delete "
                "it or choose another secret_name"
            ) from None

    def _new_secret(self, state: CertificateState) -> JsonObject:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.options.secret_name,
                "namespace": self._namespace,
                "annotations": {MANAGED_ANNOTATION: "true"},
                "labels": {"app.kubernetes.io/managed-by": "setpoint"},
            },
            "type": "kubernetes.io/tls",
            "data": state.to_secret_data(),
        }

    # -- injection ----------------------------------------------------------------------------

    async def _inject_all(self) -> None:
        assert self._state is not None
        bundle = self._state.ca_bundle
        for target in self._targets:
            self._injected[target] = await self._inject(target, bundle)

    async def _inject(self, target: InjectionTarget, bundle: bytes) -> str:
        for _ in range(_ATTEMPTS):
            try:
                obj = await self._client.get(target.kind, target.name)
            except NotFound:
                if self._injected.get(target) != "not found":
                    log.warning(
                        "caBundle target not found; it gets the caBundle when it appears",
                        target=str(target),
                    )
                return "not found"
            if not inject_ca_bundle(obj, bundle):
                if target.kind == kinds.CustomResourceDefinition and not _has_webhook(obj):
                    return "no webhook conversion"
                return "up to date"
            try:
                await self._client.update(obj)
            except Conflict:
                continue
            self.injections += 1
            log.info("caBundle injected", target=str(target))
            return "injected"
        raise Conflict(
            f"{target} kept changing while its caBundle was being written ({_ATTEMPTS} "
            "attempts); is another injector (cert-manager's cainjector) writing a different "
            "caBundle into it?",
            code=409,
            reason="Conflict",
        )


def _has_webhook(crd: JsonObject) -> bool:
    return bool(((crd.get("spec") or {}).get("conversion") or {}).get("strategy") == "Webhook")
