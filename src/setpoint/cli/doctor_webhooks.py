"""``setpoint doctor webhooks``: whether the API server can reach every webhook and trusts it.

For each CRD converting through a webhook (``spec.conversion.strategy: Webhook``) and each
webhook of every ValidatingWebhookConfiguration and MutatingWebhookConfiguration, three
questions, the ones to ask when the API server reports ``failed calling webhook`` or
``conversion webhook ... failed``:

1. **Does the endpoint answer a sample review?** A ConversionReview with no objects, or an
   AdmissionReview of a stub object with ``dryRun: true`` (sent only to webhooks declaring
   ``sideEffects: None`` or ``NoneOnDryRun``). A ``url`` endpoint is called directly; a
   ``service`` endpoint through the API server's service proxy
   (``/api/v1/namespaces/<ns>/services/https:<name>:<port>/proxy/<path>``), which reaches it
   the way the API server's webhook client does, except that the proxy does not check the
   certificate.
2. **Does the caBundle match the serving certificate?** For a ``url``, the certificate the
   endpoint presents is checked against the caBundle as the API server checks it: signed by a
   CA in the bundle, valid now, and issued for the URL's host. For a ``service``, the
   endpoint's certificate cannot be seen through the proxy; when the Service's namespace
   holds a Secret made by setpoint's self-managed certificates
   (:mod:`setpoint.webhook.certificates`), its ``tls.crt`` is checked instead.
3. **When does it expire?** The serving certificate's and the caBundle's earliest expiry.

Each finding comes with what to do. The human output is a table and a list of problems;
``-o json`` gives the same as data. Exit status: 0 when the scan ran (whatever it found),
1 on an error (unreachable API server, missing permissions).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as _dt
import ipaddress
import socket
import ssl
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote, urlsplit

import orjson

from setpoint.api import kinds
from setpoint.cli.doctor import add_check, run_check, table_lines
from setpoint.client.client import Client
from setpoint.client.errors import ApiError, ClientError
from setpoint.tls.pem import CertificateError

if TYPE_CHECKING:
    from setpoint.tls.certs import CertificateInfo

__all__ = [
    "CertificateCheck",
    "WebhookCheck",
    "WebhookEndpoint",
    "WebhookReport",
    "check_certificate",
    "endpoints_of",
    "register_checks",
    "render_webhook_table",
    "scan_webhooks",
]

_SAMPLE_NAME: Final = "setpoint-doctor-probe"
_USER_AGENT: Final = "setpoint-doctor"
_SOON: Final = _dt.timedelta(days=30)


# -- the model ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WebhookEndpoint:
    """One webhook as its configuration declares it."""

    source: str
    """``CustomResourceDefinition <name>``, ``ValidatingWebhookConfiguration <name>`` or
    ``MutatingWebhookConfiguration <name>``."""
    webhook: str
    """The webhook's name (``conversion`` for a CRD)."""
    type: str
    """``conversion``, ``validating`` or ``mutating``."""
    url: str | None = None
    """The ``clientConfig.url``, if given."""
    service: tuple[str, str, int, str] | None = None
    """``(namespace, name, port, path)`` of ``clientConfig.service``, if given."""
    ca_bundle: bytes | None = None
    """The decoded ``clientConfig.caBundle`` (``None`` if absent or not base64)."""
    side_effects: str = "None"
    """The webhook's ``sideEffects`` (conversion webhooks have none)."""
    rule: tuple[str, str, str] | None = None
    """``(group, version, resource)`` of the first rule of an admission webhook."""
    review_version: str = "v1"
    """The review version sent: the first of ``conversionReviewVersions`` /
    ``admissionReviewVersions`` that setpoint speaks (``v1``)."""
    desired_api_version: str = ""
    """For a conversion webhook: the CRD's storage ``group/version``."""

    @property
    def address(self) -> str:
        """The endpoint, as a user would write it."""
        if self.url is not None:
            return self.url
        if self.service is not None:
            namespace, name, port, path = self.service
            return f"service {namespace}/{name}:{port}{path}"
        return "(no clientConfig)"


@dataclass(frozen=True, kw_only=True)
class CertificateCheck:
    """How the caBundle and the serving certificate relate, and when they expire."""

    verdict: str
    """``matches``, ``mismatch``, ``expired``, ``wrong host``, ``no caBundle`` or
    ``not checked``."""
    detail: str
    """One sentence: who signed what, for which hosts, or why it was not checked."""
    serving_not_after: _dt.datetime | None = None
    """When the serving certificate expires."""
    ca_not_after: _dt.datetime | None = None
    """When the first CA in the caBundle to expire expires."""
    serving_source: str = ""
    """Where the serving certificate was read: ``endpoint`` or ``Secret <ns>/<name>``."""


@dataclass(frozen=True, kw_only=True)
class WebhookCheck:
    """What the doctor found for one webhook."""

    endpoint: WebhookEndpoint
    """The webhook."""
    answers: bool | None
    """Whether it answered the sample review (``None``: not asked, see :attr:`answer`)."""
    answer: str
    """What it answered (``Success``, ``allowed``, ``denied (400): ...``), or the error."""
    certificate: CertificateCheck
    """The caBundle check."""
    problems: tuple[str, ...] = ()
    """What is wrong and what to do, one sentence each."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (camelCase keys)."""
        e, c = self.endpoint, self.certificate
        return {
            "source": e.source,
            "webhook": e.webhook,
            "type": e.type,
            "endpoint": e.address,
            "answers": self.answers,
            "answer": self.answer,
            "caBundle": c.verdict,
            "caBundleDetail": c.detail,
            "servingCertificateSource": c.serving_source or None,
            "servingCertificateExpires": _iso(c.serving_not_after),
            "caBundleExpires": _iso(c.ca_not_after),
            "problems": list(self.problems),
        }


@dataclass(kw_only=True)
class WebhookReport:
    """What ``setpoint doctor webhooks`` found."""

    checks: list[WebhookCheck] = field(default_factory=list)
    """One per webhook, sorted by source and name."""
    notes: list[str] = field(default_factory=list)
    """Configurations that could not be listed, and why."""

    @property
    def healthy(self) -> bool:
        """No webhook has a problem."""
        return not any(c.problems for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        """The JSON form printed by ``-o json``."""
        return {
            "healthy": self.healthy,
            "webhooks": [c.to_json() for c in self.checks],
            "notes": list(self.notes),
        }


def _iso(value: _dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


# -- reading the configurations -----------------------------------------------------------


def _decode_bundle(value: object) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return None


def _client_config(config: object) -> dict[str, Any]:
    if not isinstance(config, Mapping):
        return {}
    out: dict[str, Any] = {"ca_bundle": _decode_bundle(config.get("caBundle"))}
    if isinstance(config.get("url"), str):
        out["url"] = config["url"]
    service = config.get("service")
    if isinstance(service, Mapping):
        out["service"] = (
            str(service.get("namespace", "")),
            str(service.get("name", "")),
            int(service.get("port") or 443),
            str(service.get("path") or "/"),
        )
    return out


def endpoints_of(obj: Mapping[str, Any]) -> list[WebhookEndpoint]:
    """The webhooks a CRD or webhook configuration declares (none for a CRD without one)."""
    kind = obj.get("kind", "")
    name = (obj.get("metadata") or {}).get("name", "")
    source = f"{kind} {name}"
    if kind == "CustomResourceDefinition":
        spec = obj.get("spec") or {}
        conversion = spec.get("conversion") or {}
        if conversion.get("strategy") != "Webhook":
            return []
        webhook = conversion.get("webhook") or {}
        storage = next(
            (v.get("name") for v in spec.get("versions") or () if v.get("storage")), "v1"
        )
        return [
            WebhookEndpoint(
                source=source,
                webhook="conversion",
                type="conversion",
                desired_api_version=f"{spec.get('group', '')}/{storage}",
                **_client_config(webhook.get("clientConfig")),
            )
        ]
    kind_type = "validating" if kind == "ValidatingWebhookConfiguration" else "mutating"
    out = []
    for hook in obj.get("webhooks") or ():
        if not isinstance(hook, Mapping):
            continue
        rules = [r for r in hook.get("rules") or () if isinstance(r, Mapping)]
        rule = None
        if rules:
            first = rules[0]
            rule = (
                (first.get("apiGroups") or [""])[0],
                (first.get("apiVersions") or ["v1"])[0],
                (first.get("resources") or ["*"])[0],
            )
        out.append(
            WebhookEndpoint(
                source=source,
                webhook=str(hook.get("name", "")),
                type=kind_type,
                side_effects=str(hook.get("sideEffects", "Unknown")),
                rule=rule,
                **_client_config(hook.get("clientConfig")),
            )
        )
    return out


# -- the certificate check ----------------------------------------------------------------


def check_certificate(
    serving_pem: bytes | None,
    ca_bundle: bytes | None,
    host: str | None,
    *,
    now: _dt.datetime,
    source: str,
) -> CertificateCheck:
    """Judge a serving certificate against a caBundle as the API server's TLS client would.

    ``host`` is the name the API server connects to (``None``: not known, not checked).
    """
    # Imported here: cryptography costs a tenth of a second, and every command loads this
    # module to register its arguments.
    from setpoint.tls.certs import issued_by, read_certificates

    ca_infos: list[CertificateInfo] = []
    if ca_bundle:
        try:
            ca_infos = read_certificates(ca_bundle)
        except CertificateError:
            ca_infos = []
    ca_expiry = min((c.not_after for c in ca_infos), default=None)
    if serving_pem is None:
        verdict = "no caBundle" if not ca_bundle else "not checked"
        return CertificateCheck(
            verdict=verdict,
            detail="the serving certificate could not be read",
            ca_not_after=ca_expiry,
        )
    try:
        serving = read_certificates(serving_pem)[0]
    except CertificateError as exc:
        return CertificateCheck(verdict="not checked", detail=str(exc), ca_not_after=ca_expiry)

    def found(verdict: str, detail: str) -> CertificateCheck:
        return CertificateCheck(
            verdict=verdict,
            detail=detail,
            serving_not_after=serving.not_after,
            ca_not_after=ca_expiry,
            serving_source=source,
        )

    if not ca_bundle:
        return found(
            "no caBundle",
            (
                f"no caBundle: the API server trusts only its own system CAs, and the serving "
                f"certificate was issued by {serving.issuer}"
            ),
        )
    if not ca_infos:
        return found("mismatch", "the caBundle holds no PEM certificate")
    signer = issued_by(serving_pem, ca_bundle)
    if signer is None:
        held = ", ".join(c.subject for c in ca_infos)
        return found(
            "mismatch",
            (
                f"the serving certificate was issued by {serving.issuer}, but the caBundle "
                f"holds {held}"
            ),
        )
    if not serving.valid_at(now):
        return found(
            "expired",
            (
                f"the serving certificate is valid from {_iso(serving.not_before)} to "
                f"{_iso(serving.not_after)}"
            ),
        )
    if not signer.valid_at(now):
        return found(
            "expired",
            f"the CA {signer.subject} expired {_iso(signer.not_after)}",
        )
    if host is not None and not serving.covers(host):
        return found(
            "wrong host",
            (f"the serving certificate is for {', '.join(serving.hosts) or 'no host'}, not {host}"),
        )
    return found(
        "matches",
        f"signed by {signer.subject}, which the caBundle holds",
    )


# -- sample reviews -----------------------------------------------------------------------


def _sample_review(endpoint: WebhookEndpoint, kind_name: str | None) -> dict[str, Any]:
    uid = str(uuid.uuid4())
    if endpoint.type == "conversion":
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": uid,
                "desiredAPIVersion": endpoint.desired_api_version,
                "objects": [],
            },
        }
    group, version, resource = endpoint.rule or ("", "v1", "*")
    api_version = f"{group}/{version}" if group else version
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "metadata": {"name": _SAMPLE_NAME, "namespace": "default"},
    }
    if kind_name:
        obj["kind"] = kind_name
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind_name or ""},
            "resource": {"group": group, "version": version, "resource": resource},
            "operation": "CREATE",
            "name": _SAMPLE_NAME,
            "namespace": "default",
            "object": obj,
            "dryRun": True,
            "userInfo": {"username": _USER_AGENT},
        },
    }


def _judge_answer(sent: Mapping[str, Any], body: Any) -> tuple[bool, str]:
    """``(answers, what)`` for the body a webhook returned to ``sent``."""
    uid = sent["request"]["uid"]
    if not isinstance(body, Mapping):
        return False, "answered with something that is not a review"
    response = body.get("response")
    if not isinstance(response, Mapping):
        return False, "answered without a response"
    if response.get("uid") != uid:
        return False, f"answered with uid {response.get('uid')!r}, not the request's {uid!r}"
    if sent["kind"] == "ConversionReview":
        result = response.get("result") or {}
        status = result.get("status", "?") if isinstance(result, Mapping) else "?"
        message = result.get("message", "") if isinstance(result, Mapping) else ""
        return True, str(status) + (f": {message}" if message else "")
    if response.get("allowed") is True:
        return True, "allowed"
    status = response.get("status") or {}
    code = status.get("code", "?") if isinstance(status, Mapping) else "?"
    message = status.get("message", "") if isinstance(status, Mapping) else ""
    return True, f"denied ({code}): {message}"


@dataclass(frozen=True, slots=True)
class _Direct:
    """What calling a ``url`` endpoint directly gave."""

    serving_pem: bytes | None
    verify_error: str | None
    status: int | None
    body: Any
    error: str | None


def _call_direct(url: str, ca_bundle: bytes | None, review: bytes, timeout: float) -> _Direct:
    """Handshake (without verification, to read the certificate), then POST the review.

    The POST is verified against ``ca_bundle`` first; if only verification fails, it is
    sent again without, to tell "untrusted" from "down".
    """
    import http.client

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or 443
    path = parts.path or "/"
    server_name = None if _is_ip(host) else host
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    serving_pem: bytes | None = None
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as sock,
            insecure.wrap_socket(sock, server_hostname=server_name) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
            if der:
                serving_pem = ssl.DER_cert_to_PEM_cert(der).encode()
    except (OSError, ssl.SSLError) as exc:
        return _Direct(None, None, None, None, _os_error(exc, host, port))
    verify_error: str | None = None
    contexts: list[ssl.SSLContext] = []
    if ca_bundle:
        try:
            verified = ssl.create_default_context(cadata=ca_bundle.decode("ascii", "replace"))
            contexts.append(verified)
        except (ssl.SSLError, ValueError) as exc:
            verify_error = f"the caBundle cannot be loaded ({exc})"
    else:
        contexts.append(ssl.create_default_context())
    contexts.append(insecure)
    for context in contexts:
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        try:
            connection.request(
                "POST",
                path,
                body=review,
                headers={"Content-Type": "application/json", "User-Agent": _USER_AGENT},
            )
            response = connection.getresponse()
            raw = response.read()
        except ssl.SSLCertVerificationError as exc:
            verify_error = exc.verify_message or str(exc)
            continue
        except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
            return _Direct(serving_pem, verify_error, None, None, _os_error(exc, host, port))
        finally:
            connection.close()
        try:
            body: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", "replace")[:300]
        return _Direct(serving_pem, verify_error, response.status, body, None)
    return _Direct(serving_pem, verify_error, None, None, "no attempt succeeded")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _os_error(exc: BaseException, host: str, port: int) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused: nothing listens on {host}:{port}"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer from {host}:{port} in time"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {host}: {exc.strerror or exc}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake with {host}:{port} failed: {exc.reason or exc}"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"{host}:{port}: {text}"


# -- the scan -------------------------------------------------------------------------------


async def _kind_for(client: Client, rule: tuple[str, str, str] | None) -> str | None:
    if rule is None or rule[2] in ("*", ""):
        return None
    group, version, resource = rule
    try:
        matches = await client.mapper.lookup(f"{resource}.{group}" if group else resource)
    except ClientError:
        return None
    for info in matches:
        if info.gvk.version == version:
            return info.gvk.kind
    return matches[0].gvk.kind if matches else None


async def _secret_certificate(client: Client, namespace: str) -> tuple[bytes | None, str]:
    """The ``tls.crt`` of a setpoint self-managed certificate Secret in ``namespace``."""
    from setpoint.webhook.certificates import MANAGED_ANNOTATION, TLS_CERT_KEY

    try:
        secrets = await client.list(
            kinds.Secret, namespace=namespace, labels="app.kubernetes.io/managed-by=setpoint"
        )
    except ApiError as exc:
        return None, f"Secrets in {namespace} could not be listed ({exc.reason or exc.code})"
    for secret in secrets:
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        if annotations.get(MANAGED_ANNOTATION) == "true":
            data = _decode_bundle((secret.get("data") or {}).get(TLS_CERT_KEY))
            name = secret["metadata"]["name"]
            return data, f"Secret {namespace}/{name}"
    return None, f"no setpoint certificate Secret in {namespace}"


async def _check(
    client: Client, endpoint: WebhookEndpoint, *, timeout: float, now: _dt.datetime
) -> WebhookCheck:
    problems: list[str] = []
    kind_name = await _kind_for(client, endpoint.rule) if endpoint.type != "conversion" else None
    sample = _sample_review(endpoint, kind_name)
    send = endpoint.type == "conversion" or endpoint.side_effects in ("None", "NoneOnDryRun")
    answers: bool | None = None
    answer = f"not asked: sideEffects is {endpoint.side_effects}, a sample could have effects"
    certificate: CertificateCheck
    if endpoint.url is not None:
        host = urlsplit(endpoint.url).hostname
        direct = await asyncio.to_thread(
            _call_direct, endpoint.url, endpoint.ca_bundle, orjson.dumps(sample), timeout
        )
        certificate = check_certificate(
            direct.serving_pem, endpoint.ca_bundle, host, now=now, source="endpoint"
        )
        if direct.error is not None:
            answers, answer = False, direct.error
        elif not send:
            pass
        elif direct.status != 200:
            answers, answer = False, f"HTTP {direct.status}: {str(direct.body)[:200]}"
        else:
            answers, answer = _judge_answer(sample, direct.body)
        if direct.verify_error and certificate.verdict == "matches":
            problems.append(f"TLS verification with the caBundle failed: {direct.verify_error}")
    elif endpoint.service is not None:
        namespace, name, port, path = endpoint.service
        serving, source = await _secret_certificate(client, namespace)
        certificate = check_certificate(
            serving, endpoint.ca_bundle, f"{name}.{namespace}.svc", now=now, source=source
        )
        if certificate.verdict == "not checked":
            certificate = CertificateCheck(
                verdict="not checked",
                detail=(
                    "reached through the API server's service proxy, which does not show the "
                    f"certificate; and {source}"
                ),
                ca_not_after=certificate.ca_not_after,
            )
        if send:
            proxy = (
                f"/api/v1/namespaces/{quote(namespace)}/services/https:{quote(name)}:{port}"
                f"/proxy{path}"
            )
            try:
                response = await client.transport.request(
                    "POST", proxy, body=sample, timeout=timeout
                )
            except ClientError as exc:
                answers, answer = False, f"the service proxy answered: {exc}"
            else:
                answers, answer = _judge_answer(sample, response.body)
    else:
        certificate = CertificateCheck(verdict="not checked", detail="no clientConfig")
        answers, answer = False, "the clientConfig names neither a url nor a service"
    problems.extend(_problems(endpoint, answers, answer, certificate, now))
    return WebhookCheck(
        endpoint=endpoint,
        answers=answers,
        answer=answer,
        certificate=certificate,
        problems=tuple(problems),
    )


def _problems(
    endpoint: WebhookEndpoint,
    answers: bool | None,
    answer: str,
    certificate: CertificateCheck,
    now: _dt.datetime,
) -> list[str]:
    out: list[str] = []
    if answers is False:
        if "connection refused" in answer:
            out.append(
                f"{endpoint.address} does not answer ({answer}): the webhook server is not "
                "running there. Is the operator up? Its log says 'webhook-server listening on "
                "...'; the configuration may point at an old address"
            )
        elif "service proxy" in answer:
            out.append(
                f"{endpoint.address} does not answer ({answer}): check that the Service has "
                "ready endpoints (kubectl get endpointslices -n "
                f"{endpoint.service[0] if endpoint.service else ''}) and that the operator's "
                "webhook port matches the Service's targetPort"
            )
        else:
            out.append(f"{endpoint.address} does not answer a sample review: {answer}")
    verdict = certificate.verdict
    if verdict == "mismatch":
        out.append(
            f"the caBundle does not match the serving certificate ({certificate.detail}): the "
            "API server refuses the connection. With setpoint's self-managed certificates the "
            "running operator re-injects it within seconds (is it running, may it update this "
            "object?); with cert-manager, check the cert-manager.io/inject-ca-from annotation"
        )
    elif verdict == "expired":
        out.append(f"a certificate has expired ({certificate.detail}): renew it")
    elif verdict == "wrong host":
        out.append(
            f"{certificate.detail}: the API server refuses it; issue the certificate for the "
            "host in the clientConfig"
        )
    elif verdict == "no caBundle" and certificate.serving_not_after is not None:
        out.append(
            f"{certificate.detail}; inject the CA that signed it as caBundle (setpoint's "
            "self-managed certificates or cert-manager's CA injector do)"
        )
    for label, when in (
        ("serving certificate", certificate.serving_not_after),
        ("CA", certificate.ca_not_after),
    ):
        if when is not None and now <= when < now + _SOON:
            out.append(f"the {label} expires {_iso(when)}, in less than 30 days")
    return out


async def scan_webhooks(
    client: Client, *, timeout: float = 5.0, now: _dt.datetime | None = None
) -> WebhookReport:
    """Check every conversion and admission webhook of the cluster (see the module docstring)."""
    report = WebhookReport()
    endpoints: list[WebhookEndpoint] = []
    for kind in (
        kinds.CustomResourceDefinition,
        kinds.ValidatingWebhookConfiguration,
        kinds.MutatingWebhookConfiguration,
    ):
        try:
            objects = await client.list(kind)
        except ApiError as exc:
            report.notes.append(f"{kind.kind}s could not be listed: {exc}")
            continue
        for obj in objects:
            endpoints.extend(endpoints_of(obj))
    current = now or _dt.datetime.now(_dt.UTC)
    checks = await asyncio.gather(
        *(_check(client, e, timeout=timeout, now=current) for e in endpoints)
    )
    report.checks = sorted(checks, key=lambda c: (c.endpoint.source, c.endpoint.webhook))
    return report


# -- output ---------------------------------------------------------------------------------


def _expiry(value: _dt.datetime | None, now: _dt.datetime) -> str:
    if value is None:
        return "-"
    days = (value - now).days
    return f"{value:%Y-%m-%d} ({days}d)" if days >= 0 else f"{value:%Y-%m-%d} (EXPIRED)"


def render_webhook_table(report: WebhookReport, *, now: _dt.datetime | None = None) -> str:
    """The human output: a table of webhooks, then each problem with what to do."""
    current = now or _dt.datetime.now(_dt.UTC)
    if not report.checks:
        lines = ["No conversion or admission webhooks are configured."]
        return "\n".join(lines + report.notes)
    header = ("WEBHOOK", "TYPE", "ENDPOINT", "ANSWERS", "CA BUNDLE", "SERVING CERT EXPIRES")
    rows = [header]
    for check in report.checks:
        e = check.endpoint
        name = e.source.split(" ", 1)[1] if e.type == "conversion" else e.webhook
        answers = {True: "yes", False: "NO", None: "not asked"}[check.answers]
        rows.append(
            (
                name,
                e.type,
                e.address,
                answers,
                check.certificate.verdict,
                _expiry(check.certificate.serving_not_after, current),
            )
        )
    lines = table_lines(rows)
    troubled = [c for c in report.checks if c.problems]
    if troubled:
        lines.append("")
        lines.append(f"{len(troubled)} webhook(s) need attention:")
        for check in troubled:
            lines.append(f"- {check.endpoint.webhook} ({check.endpoint.source}):")
            lines.extend(f"    {p}" for p in check.problems)
    else:
        lines.append("")
        lines.append("Every webhook answers and its caBundle matches.")
    lines.extend(report.notes)
    return "\n".join(lines)


# -- the command ----------------------------------------------------------------------------


def _cmd_webhooks(args: argparse.Namespace) -> int:
    return run_check(
        args,
        lambda client: scan_webhooks(client, timeout=args.timeout),
        WebhookReport.to_json,
        render_webhook_table,
    )


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def register_checks(checks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``doctor webhooks`` to the doctor's checks."""
    parser = add_check(
        checks,
        "webhooks",
        help="check every conversion and admission webhook: does it answer, does its "
        "caBundle match its certificate, when does it expire",
        description=(
            "For each CRD converting through a webhook and each admission webhook: send a "
            "sample review (dry run), check the serving certificate against the caBundle, "
            "and show when they expire."
        ),
        run=_cmd_webhooks,
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for each webhook (default 5)",
    )
