"""The webhook server's settings, in a module of their own.

:class:`WebhookServerOptions` is a field of every :class:`~setpoint.manager.ManagerOptions`,
so it is built whenever a manager is, webhooks or not; it lives here, apart from the server
(:mod:`setpoint.webhook.server`, which re-exports it), so that an operator without webhooks
does not import the server to build its options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from setpoint.server.address import parse_bind_address

if TYPE_CHECKING:
    from setpoint.webhook.server import CertificateSource

__all__ = ["WebhookServerOptions"]

_MiB: Final = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class WebhookServerOptions:
    """Settings of the :class:`~setpoint.webhook.server.WebhookServer`; each default is here."""

    bind_address: str = ":9443"
    """Where to listen, ``host:port`` (``:9443``: every interface, controller-runtime's
    default port; ``127.0.0.1:0`` picks a free loopback port)."""

    certificate: CertificateSource | None = None
    """Where the serving certificate comes from. ``None``: ``CertificateDirectory()``, the
    ``tls.crt``/``tls.key`` pair in :data:`~setpoint.webhook.server.DEFAULT_CERT_DIR`."""

    max_body_size: int = 64 * _MiB
    """Largest request accepted, in bytes (larger gets 413). A ConversionReview for a list
    carries every object of the list, so this is well above an admission request's size."""

    inline_objects: int = 16
    """Reviews with at most this many objects are converted on the event loop; larger ones in
    a worker thread, so a list of thousands never stalls the loop (probes, other requests)."""

    def __post_init__(self) -> None:
        address = parse_bind_address(self.bind_address, option="WebhookServerOptions.bind_address")
        if address is None:
            raise ValueError(
                "WebhookServerOptions.bind_address='0' would disable the webhook server; the "
                "API server must reach it, so give host:port (':9443' by default)"
            )
        if self.max_body_size < _MiB:
            raise ValueError(
                f"WebhookServerOptions.max_body_size={self.max_body_size} is below 1 MiB; one "
                "object alone may be 1.5 MiB"
            )
        if self.inline_objects < 0:
            raise ValueError(
                f"WebhookServerOptions.inline_objects={self.inline_objects} must be >= 0"
            )
