"""Certificates for the local control plane: one CA, a serving cert, client certs, SA keys.

ECDSA P-256 keys everywhere: kube-apiserver accepts them for serving, client
authentication and service-account token signing (ES256), and they generate in
about a millisecond, where RSA-2048 takes tens. Starting a plane per test
session should cost seconds of kube-apiserver boot, not of key generation.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "KeyPair"]

_VALIDITY = _dt.timedelta(days=365)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates for one plane."""

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
            .not_valid_after(now + _VALIDITY)
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
            .not_valid_after(now + _VALIDITY)
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
