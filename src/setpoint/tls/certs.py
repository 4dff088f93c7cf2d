"""Certificates: make a CA and the certificates it signs, and read certificate files.

Who uses it:

- the local control plane (:mod:`setpoint.testing.controlplane`) makes one CA per plane, a
  serving certificate for kube-apiserver, client certificates and a service-account signing
  key;
- a webhook or metrics server serving HTTPS makes its certificate with
  :class:`CertificateAuthority` in a development setup (in production it reads the files a
  cert-manager Secret mounts, with :func:`setpoint.tls.pem.load_key_pair`), and hands it to
  :class:`setpoint.server.ServerTLS`.

Expected flow::

    ca = CertificateAuthority("my-webhook-ca")
    pair = ca.serving_cert("my-webhook", ("my-webhook.ns.svc", "127.0.0.1"))
    # ... serve with pair; give ca.cert_pem to the API server as the caBundle

Guarantees:
    Keys are ECDSA P-256: kube-apiserver accepts them for serving, client authentication and
    service-account token signing (ES256), and they generate in about a millisecond, where
    RSA-2048 takes tens. Certificates are valid from five minutes ago (clock skew) for
    :data:`VALIDITY`. Serving certificates carry every host as a subject alternative name
    (IP addresses as IP entries), which is what TLS clients check, not the common name.

Caveats:
    A :class:`CertificateAuthority` lives in memory only; its key is not written anywhere
    unless the caller writes ``key_pem``. Nothing here renews a certificate: read
    :attr:`~setpoint.tls.pem.KeyPair.not_after` and issue a new one in time.
    Importing this module loads ``cryptography`` (about 0.1 s); :mod:`setpoint.tls.pem` does
    not.

Errors:
    None of its own: ``cryptography`` raises only for programming errors here.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from setpoint.tls.pem import KeyPair

__all__ = ["VALIDITY", "CertificateAuthority", "signing_key_pair"]

VALIDITY: Final = _dt.timedelta(days=365)
"""How long the certificates made here are valid."""


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA, in memory, that issues serving and client certificates."""

    def __init__(self, common_name: str = "setpoint-local-ca") -> None:
        self._key = _new_key()
        now = _dt.datetime.now(_dt.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        """The CA certificate (PEM), for ``--client-ca-file`` and kubeconfigs."""
        self.key_pem: bytes = _key_pem(self._key)
        """The CA private key (PEM), for kube-controller-manager's certificate signer."""

    def _issue(
        self,
        subject: x509.Name,
        *,
        usage: x509.ObjectIdentifier,
        hosts: tuple[str, ...] = (),
    ) -> KeyPair:
        key = _new_key()
        now = _dt.datetime.now(_dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def serving_cert(self, common_name: str, hosts: tuple[str, ...]) -> KeyPair:
        """Issue a TLS server certificate valid for ``hosts`` (DNS names or IP addresses)."""
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        return self._issue(subject, usage=ExtendedKeyUsageOID.SERVER_AUTH, hosts=hosts)

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """Issue a client certificate: kube-apiserver reads CN as the user, O as groups."""
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(x509.Name(attributes), usage=ExtendedKeyUsageOID.CLIENT_AUTH)


def signing_key_pair() -> tuple[bytes, bytes]:
    """A fresh key pair for service-account token signing: (private PEM, public PEM)."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public
