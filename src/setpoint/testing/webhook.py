"""A conversion webhook on loopback for tests and local runs against the local control plane.

::

    async with LocalWebhook() as hook:
        hook.server.add_conversion(Machine, MachineV1)
        await install(k8s, hook.crd(Machine, MachineV1))   # clientConfig.url + caBundle
        ...                                                 # reads at v1 go through it

:class:`LocalWebhook` is the certificate seam in its simplest form: a fresh CA made in memory
(:mod:`setpoint.tls.certs`), a serving certificate for the loopback addresses, and the CA
written into the CRD as ``caBundle`` when the CRD is generated (``hook.crd(...)``). The
kube-apiserver of the local control plane calls ``https://127.0.0.1:<port>/convert``
directly. :func:`serving_certificate` writes the same kind of pair into a directory, for an
operator started as a subprocess with ``--webhook-cert-dir``.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from setpoint.crd.conversion import CONVERT_PATH, WebhookClientConfig
from setpoint.crd.generator import crd_for
from setpoint.observability.privatefiles import write_private
from setpoint.tls.certs import CertificateAuthority
from setpoint.tls.pem import KeyPair
from setpoint.webhook.server import StaticCertificate, WebhookServer, WebhookServerOptions

if TYPE_CHECKING:
    from setpoint.api.resource import Resource
    from setpoint.observability.metrics import Metrics

__all__ = ["LOOPBACK_HOSTS", "LocalWebhook", "serving_certificate"]

LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost", "::1")
"""The names a loopback serving certificate is valid for."""


def serving_certificate(
    directory: Path | None = None, *, hosts: tuple[str, ...] = LOOPBACK_HOSTS
) -> tuple[CertificateAuthority, KeyPair]:
    """A fresh CA and a serving certificate it signed for ``hosts``.

    With ``directory``, the pair is also written there as ``tls.crt`` and ``tls.key`` (mode
    0600 for the key), the layout ``setpoint run --webhook-cert-dir`` reads. Returns the CA
    (its ``cert_pem`` is the caBundle to trust) and the :class:`~setpoint.tls.pem.KeyPair`.
    """
    ca = CertificateAuthority("setpoint-webhook-ca")
    pair = ca.serving_cert("setpoint-webhook", hosts)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        write_private(directory / "tls.crt", pair.cert_pem)
        write_private(directory / "tls.key", pair.key_pem)
    return ca, pair


class LocalWebhook:
    """A :class:`~setpoint.webhook.WebhookServer` on a free loopback port with its own CA.

    Use it as an async context manager: the server is listening inside the block and
    stopped after it. Register conversions on :attr:`server` before or after entering.
    """

    def __init__(self, *, metrics: Metrics | None = None, host: str = "127.0.0.1") -> None:
        self.ca, pair = serving_certificate()
        self.server = WebhookServer(
            WebhookServerOptions(
                bind_address=f"{host}:0" if ":" not in host else f"[{host}]:0",
                certificate=StaticCertificate(pair),
            ),
            metrics=metrics,
        )
        """The webhook server (started inside the ``async with`` block)."""

    async def __aenter__(self) -> Self:
        await self.server.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.server.stop(5.0)

    def client_config(self, path: str = CONVERT_PATH) -> WebhookClientConfig:
        """How the API server reaches ``path`` here: its URL and this CA as caBundle."""
        return WebhookClientConfig(url=self.server.url(path), ca_bundle=self.ca.cert_pem)

    def crd(self, *classes: type[Resource]) -> dict[str, Any]:
        """The CRD of these version classes, converting through this webhook."""
        return crd_for(*classes, webhook=self.client_config())
