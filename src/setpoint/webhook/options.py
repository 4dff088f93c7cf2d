"""The webhook server's settings, in a module of their own.

:class:`WebhookServerOptions` is a field of every :class:`~setpoint.manager.ManagerOptions`,
so it is built whenever a manager is, webhooks or not; it lives here, apart from the server
(:mod:`setpoint.webhook.server`, which re-exports it), so that an operator without webhooks
does not import the server to build its options.

Where the size limits come from (issue 27, finding 2; docs/security.md):

- **Admission** (:data:`ADMISSION_MAX_BODY_SIZE`, 7 MiB). kube-apiserver accepts request
  bodies up to 3 MiB (``MaxRequestBodyBytes``, k8s.io/apiserver ``pkg/server/config.go``:
  twice etcd's 1.5 MiB recommended request size, since JSON is larger than the protobuf
  stored). An AdmissionReview carries the object and, on UPDATE, its old version: two such
  objects plus the review's own fields. controller-runtime's admission webhook reads at most
  7 MiB for the same reason (``maxRequestSize``, sigs.k8s.io/controller-runtime
  ``pkg/webhook/admission/http.go``).
- **Conversion** (:data:`CONVERSION_MAX_BODY_SIZE`, 16 MiB). The API server converts a
  list's items in one ConversionReview (k8s.io/apiextensions-apiserver
  ``pkg/apiserver/conversion/webhook_converter.go``: ``getObjectsToConvert`` puts every item
  of an ``UnstructuredList`` not yet at the desired version into one request), so a review
  can carry many objects and no upstream figure bounds it (controller-runtime's conversion
  webhook decodes without a limit). 16 MiB holds about 25,000 objects as the API server
  sends them (the conversion benchmark's Tenants, ~660 bytes each) or five at the API
  server's 3 MiB maximum. Raise it for larger lists.
- **Decoding** (:data:`MAX_REVIEW_VALUES`, 1.5 million). Decoding JSON into Python objects
  costs up to ~160 bytes per value (an empty object ``{}`` costs ~90 bytes for 3 bytes of
  JSON; measured for the worst shapes, docs/benchmarks.md, issue 27), so a body's
  size alone does not bound its memory: 16 MiB of ``{},`` decode to ~490 MiB. Before
  decoding, a review's ``{``, ``[`` and ``,`` bytes are counted (an upper bound on its
  values, cheap); past this limit it gets 413. 1.5 million bounds one decode to ~240 MiB;
  real reviews hold ~62 values per KiB (~1 million at 16 MiB).
- **One object** (:data:`MAX_OBJECT_SIZE`, 3 MiB). A review above ``inline_body_size`` is
  split and decoded one object at a time, so the longest the event loop waits is one
  object's decode. No object the API server handles is larger than its request body limit:
  kube-apiserver refuses request bodies over 3 MiB (``MaxRequestBodyBytes``, k8s.io/apiserver
  ``pkg/server/config.go``) and etcd requests over 1.5 MiB (``DefaultMaxRequestBytes``,
  etcd ``server/embed/config.go``), so a stored object is at most ~1.5 MiB and an object in
  a write request at most 3 MiB. An object larger than this in a review gets 413 naming it.
- **Objects per review** (:data:`MAX_REVIEW_OBJECTS`, 100,000). Splitting ``objects`` costs
  one small allocation per object in a single call. A 16 MiB list as the API server sends it
  holds 25,000-80,000 objects (every object carries its uid, resourceVersion,
  creationTimestamp and managedFields: more than 168 bytes, the size at which 100,000 fill
  16 MiB); more gets 413. The count is taken by a first scan that stops at the first item
  that is not an object, so the scans of the worst review within these limits (half a
  million ``{}``) take tens of milliseconds each (docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from setpoint.server.address import parse_bind_address
from setpoint.server.http import BODY_BUDGET

if TYPE_CHECKING:
    from setpoint.webhook.server import CertificateSource

__all__ = [
    "ADMISSION_MAX_BODY_SIZE",
    "CONVERSION_MAX_BODY_SIZE",
    "INLINE_BODY_SIZE",
    "MAX_OBJECT_SIZE",
    "MAX_REVIEW_OBJECTS",
    "MAX_REVIEW_VALUES",
    "WebhookServerOptions",
]

_MiB: Final = 1024 * 1024

ADMISSION_MAX_BODY_SIZE: Final = 7 * _MiB
"""The default :attr:`WebhookServerOptions.admission_max_body_size`: two objects at the API
server's 3 MiB request limit plus the review (controller-runtime's figure)."""

CONVERSION_MAX_BODY_SIZE: Final = 16 * _MiB
"""The default :attr:`WebhookServerOptions.conversion_max_body_size`: a list's worth of
objects in one ConversionReview (~25,000 typical objects)."""

INLINE_BODY_SIZE: Final = 8 * 1024
"""The default :attr:`WebhookServerOptions.inline_body_size`: a review this large costs
about 1 ms to decode and convert (8-12 typical objects), so larger ones go to a worker."""

MAX_REVIEW_VALUES: Final = 1_500_000
"""The default :attr:`WebhookServerOptions.max_review_values`: ~240 MiB of decoded objects
at the worst measured ~160 bytes per value."""

MAX_OBJECT_SIZE: Final = 3 * _MiB
"""The default :attr:`WebhookServerOptions.max_object_size`: kube-apiserver's request body
limit (twice etcd's 1.5 MiB), which no object the API server handles exceeds."""

MAX_REVIEW_OBJECTS: Final = 100_000
"""The default :attr:`WebhookServerOptions.max_review_objects`: more than a 16 MiB list of
real objects holds (25,000-80,000)."""


@dataclass(frozen=True, kw_only=True)
class WebhookServerOptions:
    """Settings of the :class:`~setpoint.webhook.server.WebhookServer`; each default is here.

    The limits (the module docstring says where each figure comes from): bodies larger than
    their path's cap get 413 before they are read; bodies past :attr:`body_budget` in flight
    get 503; reviews larger than :attr:`inline_body_size` are decoded and answered in one of
    :attr:`review_workers` threads, the others waiting their turn, split and decoded one
    object at a time; reviews holding more than :attr:`max_review_values` JSON values get 413
    before they are decoded, and so do reviews of more than :attr:`max_review_objects`
    objects or with an object larger than :attr:`max_object_size`.
    """

    bind_address: str = ":9443"
    """Where to listen, ``host:port`` (``:9443``: every interface, controller-runtime's
    default port; ``127.0.0.1:0`` picks a free loopback port)."""

    certificate: CertificateSource | None = None
    """Where the serving certificate comes from. ``None``: ``CertificateDirectory()``, the
    ``tls.crt``/``tls.key`` pair in :data:`~setpoint.webhook.server.DEFAULT_CERT_DIR`."""

    admission_max_body_size: int = ADMISSION_MAX_BODY_SIZE
    """Largest request body on every path but ``/convert`` (admission webhooks, handlers
    given to ``register()``), in bytes; larger gets 413 unread. 7 MiB: an AdmissionReview of
    an object and its old version at the API server's 3 MiB request limit."""

    conversion_max_body_size: int = CONVERSION_MAX_BODY_SIZE
    """Largest request body on ``/convert``, in bytes; larger gets 413 unread. 16 MiB: the
    API server converts a list's items in one review; raise it (and :attr:`body_budget`,
    :attr:`max_review_values`) if reads of larger lists at another version fail."""

    body_budget: int = BODY_BUDGET
    """Bytes of request bodies the server holds at once, over all connections; a request
    past it gets 503 with ``Retry-After`` (the API server's call fails and is retried by its
    caller). Default: :data:`setpoint.server.http.BODY_BUDGET` (128 MiB, a quarter of the
    scaffolded Pod's memory limit). Must be at least both caps."""

    inline_body_size: int = INLINE_BODY_SIZE
    """Reviews whose body is at most this many bytes are decoded and answered on the event
    loop (the fast path: no thread hop for the API server's usual one-object review); larger
    ones in a review worker, so the loop keeps serving probes, other webhooks and the
    controllers. 8 KiB: about 1 ms of decoding and conversion."""

    inline_objects: int = 16
    """Conversion reviews small enough to decode inline but with more than this many
    objects are converted in a review worker (16 typical objects convert in ~1-2 ms)."""

    review_workers: int = 1
    """Threads that decode and answer large reviews, conversion and admission together: at
    most this many at once, the others wait (in the server's limits: ``body_budget`` bytes,
    ``max_connections`` requests) and are dropped if their request goes away first. One by
    default: Python runs one thread at a time, so a second thread would not convert faster,
    but it would double the memory that decoding takes at its peak."""

    max_review_values: int = MAX_REVIEW_VALUES
    """Most JSON values a review may hold (counted as its ``{``, ``[`` and ``,`` bytes,
    before decoding); more gets 413. Decoding costs up to ~160 bytes of memory per value, so
    1.5 million bounds one decode to ~240 MiB; a real review holds ~62 values per KiB."""

    max_object_size: int = MAX_OBJECT_SIZE
    """Largest object (or other part) of a review decoded, in bytes of JSON; a review
    carrying a larger one gets 413 naming it (``request.objects[3]``, ``request.object``).
    A large review is decoded one object at a time, so this bounds the longest single
    decode, the one wait the event loop still has. 3 MiB: kube-apiserver accepts no request
    body larger (and etcd stores no object over 1.5 MiB). At least :attr:`inline_body_size`
    (a body decoded whole holds no larger object)."""

    max_review_objects: int = MAX_REVIEW_OBJECTS
    """Most objects one ConversionReview may carry; more gets 413. Splitting a review
    costs one small allocation per object in one call, which this bounds. 100,000: a 16 MiB
    list as the API server sends it holds 25,000-80,000; raise it with
    :attr:`conversion_max_body_size`."""

    def __post_init__(self) -> None:
        address = parse_bind_address(self.bind_address, option="WebhookServerOptions.bind_address")
        if address is None:
            raise ValueError(
                "WebhookServerOptions.bind_address='0' would disable the webhook server; the "
                "API server must reach it, so give host:port (':9443' by default)"
            )
        for attr in ("admission_max_body_size", "conversion_max_body_size"):
            value = getattr(self, attr)
            if value < _MiB:
                raise ValueError(
                    f"WebhookServerOptions.{attr}={value} is below 1 MiB; one object alone "
                    "may be 1.5 MiB"
                )
        largest = max(self.admission_max_body_size, self.conversion_max_body_size)
        if self.body_budget < largest:
            raise ValueError(
                f"WebhookServerOptions.body_budget={self.body_budget} is below the largest "
                f"body cap ({largest} bytes): a review at that cap could never be served; "
                "raise body_budget or lower admission_max_body_size/conversion_max_body_size"
            )
        for attr, least in (
            ("inline_body_size", 0),
            ("inline_objects", 0),
            ("review_workers", 1),
            ("max_review_values", 1),
            ("max_review_objects", 1),
        ):
            value = getattr(self, attr)
            if value < least:
                raise ValueError(f"WebhookServerOptions.{attr}={value} must be >= {least}")
        if self.max_object_size < self.inline_body_size:
            raise ValueError(
                f"WebhookServerOptions.max_object_size={self.max_object_size} is below "
                f"inline_body_size={self.inline_body_size}: bodies up to inline_body_size are "
                "decoded whole, so their objects would not be measured; raise "
                "max_object_size or lower inline_body_size"
            )
