"""``setpoint doctor webhooks``: reading configurations, judging certificates, the report."""

from __future__ import annotations

import base64
import datetime as dt

from setpoint.cli.doctor_webhooks import (
    WebhookCheck,
    WebhookReport,
    check_certificate,
    endpoints_of,
    render_webhook_table,
)
from setpoint.tls.certs import CertificateAuthority
from tests._support.cert_targets import crd_with_webhook, validating_configuration

NOW = dt.datetime(2031, 3, 1, tzinfo=dt.UTC)


def test_endpoints_are_read_from_crds_and_webhook_configurations() -> None:
    """A CRD with webhook conversion gives one endpoint, each admission webhook one; None none."""
    ca = CertificateAuthority().cert_pem
    crd = crd_with_webhook("doctor.test.setpoint.dev")
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
    (conversion,) = endpoints_of(crd)
    assert conversion.type == "conversion"
    assert conversion.url == "https://127.0.0.1:1/convert"
    assert conversion.ca_bundle == ca
    assert conversion.desired_api_version == "doctor.test.setpoint.dev/v1"
    assert endpoints_of(crd_with_webhook("x.test.setpoint.dev", strategy="None")) == []

    hooks = validating_configuration("probe-hooks", "doctor.test.setpoint.dev", hooks=2)
    hooks["webhooks"][1]["clientConfig"] = {
        "service": {"namespace": "ops", "name": "webhook-service", "path": "/validate-x"}
    }
    first, second = endpoints_of(hooks)
    assert (first.type, first.rule) == ("validating", ("doctor.test.setpoint.dev", "v1", "probes"))
    assert first.address == "https://127.0.0.1:1/validate"
    assert second.service == ("ops", "webhook-service", 443, "/validate-x")
    assert second.address == "service ops/webhook-service:443/validate-x"


def test_certificate_verdicts() -> None:
    """matches / mismatch / expired / wrong host / no caBundle, each with its detail."""
    ca = CertificateAuthority("webhook-ca", now=NOW - dt.timedelta(days=10))
    pair = ca.serving_cert("svc", ("127.0.0.1",), now=NOW - dt.timedelta(days=10))

    def judge(
        serving: bytes, bundle: bytes | None, host: str = "127.0.0.1", at: dt.datetime = NOW
    ) -> tuple[str, str]:
        check = check_certificate(serving, bundle, host, now=at, source="endpoint")
        return check.verdict, check.detail

    assert judge(pair.cert_pem, ca.cert_pem) == (
        "matches",
        "signed by CN=webhook-ca, which the caBundle holds",
    )
    other = CertificateAuthority("other-ca")
    verdict, detail = judge(pair.cert_pem, other.cert_pem)
    assert verdict == "mismatch"
    assert "issued by CN=webhook-ca, but the caBundle holds CN=other-ca" in detail
    assert judge(pair.cert_pem, ca.cert_pem, at=NOW + dt.timedelta(days=400))[0] == "expired"
    verdict, detail = judge(pair.cert_pem, ca.cert_pem, host="webhook.ns.svc")
    assert verdict == "wrong host" and "not webhook.ns.svc" in detail
    assert judge(pair.cert_pem, None)[0] == "no caBundle"
    # Both bundles together: the signer is found whatever its position.
    assert judge(pair.cert_pem, other.cert_pem + ca.cert_pem)[0] == "matches"
    expiry = check_certificate(pair.cert_pem, ca.cert_pem, None, now=NOW, source="x")
    assert expiry.serving_not_after == pair.not_after
    assert expiry.ca_not_after == ca.not_after


def test_the_table_lists_webhooks_then_problems_with_what_to_do() -> None:
    """Healthy webhooks are one line each; a down one is explained."""
    ca = CertificateAuthority("webhook-ca", now=NOW)
    pair = ca.serving_cert("svc", ("127.0.0.1",), now=NOW)
    hooks = validating_configuration("probe-hooks", "doctor.test.setpoint.dev", hooks=2)
    good, down = endpoints_of(hooks)
    matches = check_certificate(pair.cert_pem, ca.cert_pem, "127.0.0.1", now=NOW, source="endpoint")
    missing = check_certificate(None, ca.cert_pem, "127.0.0.1", now=NOW, source="endpoint")
    report = WebhookReport(
        checks=[
            WebhookCheck(endpoint=good, answers=True, answer="allowed", certificate=matches),
            WebhookCheck(
                endpoint=down,
                answers=False,
                answer="connection refused: nothing listens on 127.0.0.1:1",
                certificate=missing,
                problems=("https://127.0.0.1:1/validate does not answer (...)",),
            ),
        ]
    )
    text = render_webhook_table(report, now=NOW)
    lines = text.splitlines()
    assert lines[0].split() == [
        "WEBHOOK",
        "TYPE",
        "ENDPOINT",
        "ANSWERS",
        "CA",
        "BUNDLE",
        "SERVING",
        "CERT",
        "EXPIRES",
    ]
    assert lines[1].split()[:5] == [good.webhook, "validating", good.address, "yes", "matches"]
    assert lines[1].endswith("2032-02-29 (365d)")
    assert lines[2].split()[3:6] == ["NO", "not", "checked"]
    assert "1 webhook(s) need attention:" in text
    assert f"- {down.webhook} (ValidatingWebhookConfiguration probe-hooks):" in text
    data = report.to_json()
    assert data["healthy"] is False
    assert data["webhooks"][0]["servingCertificateExpires"] == "2032-02-29T00:00:00Z"
    assert render_webhook_table(WebhookReport()).startswith("No conversion or admission webhooks")
