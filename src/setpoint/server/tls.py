"""The TLS side of a server: its certificate, swappable while the server runs.

A :class:`ServerTLS` owns the ``ssl.SSLContext`` a server listens with. :meth:`ServerTLS.update`
puts a new certificate in place without a restart: every TLS handshake from then on uses it,
while connections already open keep the one they started with. Certificate rotation and hot
reload (re-reading a mounted Secret when it changes) are built on this one call.

Expected flow::

    tls = ServerTLS.from_files("certs/tls.crt", "certs/tls.key")
    server = Http1Server("webhook-server", BindAddress(None, 9443), handler,
                         options=HttpServerOptions(tls=tls, group=RunnableGroup.WEBHOOKS))
    ...
    tls.update(load_key_pair(cert_file, key_file))   # when the files change

Guarantees:
    The listening context is built once and never changes; a handshake picks the current
    context in the TLS server-name callback, which OpenSSL runs for every ClientHello, with
    or without SNI. :meth:`ServerTLS.update` checks the new certificate completely (PEM,
    matching key) before it swaps, so a bad certificate never replaces a good one. TLS 1.2 is
    the oldest version offered (what kube-apiserver's webhook client requires at least).

Caveats:
    ``update`` only swaps; it does not watch files or renew anything. Call it from the event
    loop thread (the swap is a plain attribute write read by handshakes on that loop).

Errors:
    :class:`~setpoint.tls.pem.CertificateError` naming what is wrong, from the constructor,
    :meth:`ServerTLS.from_files` and :meth:`ServerTLS.update`.
"""

from __future__ import annotations

import os
import ssl

from setpoint.tls.pem import (
    CertificateError,
    KeyPair,
    load_ca,
    load_cert_chain,
    load_key_pair,
    ssl_reason,
)

__all__ = ["ServerTLS"]


class ServerTLS:
    """A server's certificate and the ``ssl.SSLContext`` it listens with. See the module docstring.

    Args:
        certificate: The serving certificate (chain) and key.
        client_ca_pem: When given, clients must present a certificate signed by one of these
            CAs (mutual TLS); ``None`` (the default) asks for no client certificate.

    """

    def __init__(self, certificate: KeyPair, *, client_ca_pem: bytes | None = None) -> None:
        self._client_ca_pem = client_ca_pem
        self._current = self._build(certificate)
        self._certificate = certificate
        self._listening = self._current
        self._listening.sni_callback = self._select

    @classmethod
    def from_files(
        cls,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        *,
        client_ca_pem: bytes | None = None,
    ) -> ServerTLS:
        """Serve the certificate and key in these PEM files (``tls.crt`` and ``tls.key``).

        Raises:
            CertificateError: a file is missing, not PEM, or the key does not match.

        """
        return cls(load_key_pair(cert_file, key_file), client_ca_pem=client_ca_pem)

    @property
    def context(self) -> ssl.SSLContext:
        """The context to listen with; it stays the same object across :meth:`update`."""
        return self._listening

    @property
    def certificate(self) -> KeyPair:
        """The certificate new handshakes use."""
        return self._certificate

    def update(self, certificate: KeyPair) -> None:
        """Serve ``certificate`` from the next handshake on; open connections are untouched.

        Raises:
            CertificateError: the certificate or key cannot be used; the old one stays.

        """
        context = self._build(certificate)
        self._current = context
        self._certificate = certificate

    def _build(self, certificate: KeyPair) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            load_cert_chain(context, certificate.cert_pem, certificate.key_pem)
        except (ssl.SSLError, ValueError, OSError) as e:
            raise CertificateError(
                f"the serving certificate and key cannot be used ({ssl_reason(e)}); check that "
                "they are PEM, that the key is unencrypted and belongs to the certificate"
            ) from None
        if self._client_ca_pem is not None:
            try:
                load_ca(context, self._client_ca_pem)
            except (ssl.SSLError, ValueError) as e:
                raise CertificateError(
                    f"the client CA bundle is not usable PEM ({ssl_reason(e)})"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        # OpenSSL's server-name callback runs for every ClientHello; switching the
        # connection's context here is how a listening socket serves a new certificate.
        current = self._current
        if connection.context is not current:
            connection.context = current
