"""setpoint.webhook: the HTTPS webhook server and the webhooks it serves (docs/architecture.md).

- :mod:`setpoint.webhook.server`: :class:`WebhookServer`, a runnable in the manager's
  ``WEBHOOKS`` group with a route table, controller-runtime's webhook metrics and a
  :class:`CertificateSource` seam for the serving certificate.
- :mod:`setpoint.webhook.conversion_review`: :class:`ConversionWebhook`, ``/convert`` for
  ``apiextensions.k8s.io/v1`` ConversionReviews, built on :mod:`setpoint.api.conversion`.
- :mod:`setpoint.webhook.admission_review`: :class:`AdmissionWebhook`, ``admission.k8s.io/v1``
  AdmissionReviews answered by the validators and defaulters of :mod:`setpoint.api.admission`.
- :mod:`setpoint.webhook.reviews`: :class:`ReviewWorkers`, the threads large reviews are
  answered in; the split that decodes a large review one object at a time (msgspec, then
  orjson per object); and the limits that refuse a review too large to decode
  (:class:`ReviewTooLarge`, 413).
- :mod:`setpoint.webhook.certificates`: self-managed serving certificates (a CA and a
  serving certificate in a Secret, renewed, caBundle injected), a :class:`CertificateSource`.
  Imported on its own (it loads ``cryptography``): ``from setpoint.webhook.certificates
  import SelfManagedCertificates``, or ``sp.SelfManagedCertificates``.

The layer stands on :mod:`setpoint.server` (HTTP and TLS), :mod:`setpoint.client` and
:mod:`setpoint.api`; the manager builds one server per process (``manager.webhook_server``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from setpoint._lazy import lazy_module

if TYPE_CHECKING:
    from setpoint.webhook.admission_review import (
        ADMISSION_REVIEW_API_VERSION,
        AdmissionWebhook,
        MalformedAdmissionReview,
    )
    from setpoint.webhook.conversion_review import (
        CONVERT_PATH,
        REVIEW_API_VERSION,
        ConversionWebhook,
        MalformedConversionReview,
    )
    from setpoint.webhook.options import WebhookServerOptions
    from setpoint.webhook.reviews import ReviewTooLarge, ReviewWorkers
    from setpoint.webhook.server import (
        DEFAULT_CERT_DIR,
        CertificateDirectory,
        CertificateSource,
        StaticCertificate,
        WebhookServer,
    )

# Names load on first use (PEP 562): the manager imports ``setpoint.webhook.options`` for its
# options, and an operator without webhooks must not pay for the server, the admission and
# the conversion modules (the last two load pydantic, through setpoint.api.resource).
_EXPORTS: dict[str, str] = {
    "ADMISSION_REVIEW_API_VERSION": "setpoint.webhook.admission_review",
    "AdmissionWebhook": "setpoint.webhook.admission_review",
    "MalformedAdmissionReview": "setpoint.webhook.admission_review",
    "CONVERT_PATH": "setpoint.webhook.conversion_review",
    "REVIEW_API_VERSION": "setpoint.webhook.conversion_review",
    "ConversionWebhook": "setpoint.webhook.conversion_review",
    "MalformedConversionReview": "setpoint.webhook.conversion_review",
    "DEFAULT_CERT_DIR": "setpoint.webhook.server",
    "CertificateDirectory": "setpoint.webhook.server",
    "CertificateSource": "setpoint.webhook.server",
    "StaticCertificate": "setpoint.webhook.server",
    "WebhookServer": "setpoint.webhook.server",
    "WebhookServerOptions": "setpoint.webhook.options",
    "ReviewTooLarge": "setpoint.webhook.reviews",
    "ReviewWorkers": "setpoint.webhook.reviews",
}


__getattr__, __dir__ = lazy_module("setpoint.webhook", globals(), _EXPORTS)


__all__ = [
    "ADMISSION_REVIEW_API_VERSION",
    "CONVERT_PATH",
    "DEFAULT_CERT_DIR",
    "REVIEW_API_VERSION",
    "AdmissionWebhook",
    "CertificateDirectory",
    "CertificateSource",
    "ConversionWebhook",
    "MalformedAdmissionReview",
    "MalformedConversionReview",
    "ReviewTooLarge",
    "ReviewWorkers",
    "StaticCertificate",
    "WebhookServer",
    "WebhookServerOptions",
]
