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
    unless the caller writes ``key_pem`` (:meth:`CertificateAuthority.load` reads it back).
    Nothing here renews a certificate: :func:`read_certificates` tells when each one expires,
    and :mod:`setpoint.webhook.certificates` renews the webhook server's in time.
    Importing this module loads ``cryptography`` (about 0.1 s); :mod:`setpoint.tls.pem` does
    not.

Errors:
    :class:`~setpoint.tls.pem.CertificateError` from :meth:`CertificateAuthority.load` and
    :func:`read_certificates` for PEM that is not a usable certificate or key; otherwise
    ``cryptography`` raises only for programming errors here.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import ipaddress
from dataclasses import dataclass
from typing import Final, Self

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from setpoint.tls.pem import CertificateError, KeyPair

__all__ = [
    "CLOCK_SKEW",
    "VALIDITY",
    "CertificateAuthority",
    "CertificateInfo",
    "issued_by",
    "key_matches",
    "read_certificates",
    "signing_key_pair",
]

VALIDITY: Final = _dt.timedelta(days=365)
"""How long the certificates made here are valid unless told otherwise."""

CLOCK_SKEW: Final = _dt.timedelta(minutes=5)
"""Certificates are valid from this long before they are made, so a peer whose clock is a
little behind accepts them at once."""


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA, in memory, that issues serving and client certificates.

    Args:
        common_name: The CA's subject (and issuer) common name.
        validity: How long the CA certificate is valid (default :data:`VALIDITY`).
        now: The issuing time (default: now); tests pass a fixed one.

    """

    def __init__(
        self,
        common_name: str = "setpoint-local-ca",
        *,
        validity: _dt.timedelta = VALIDITY,
        now: _dt.datetime | None = None,
    ) -> None:
        key = _new_key()
        issued = now if now is not None else _dt.datetime.now(_dt.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(issued - CLOCK_SKEW)
            .not_valid_after(issued + validity)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        self._set(key, cert)

    def _set(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self._key = key
        self._cert = cert
        self.cert_pem: bytes = cert.public_bytes(serialization.Encoding.PEM)
        """The CA certificate (PEM), for ``--client-ca-file``, kubeconfigs and caBundles."""
        self.key_pem: bytes = _key_pem(key)
        """The CA private key (PEM), for kube-controller-manager's certificate signer."""

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> Self:
        """The CA whose certificate and (unencrypted PEM, ECDSA) key were saved earlier.

        Raises:
            CertificateError: the certificate or key is not PEM, the key is encrypted or not
                ECDSA, the certificate is not a CA, or the key does not belong to it.

        """
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
        except ValueError as e:
            raise CertificateError(f"the CA certificate is not PEM ({e})") from None
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as e:
            raise CertificateError(
                f"the CA key is not an unencrypted PEM private key ({e})"
            ) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertificateError(
                f"the CA key is a {type(key).__name__}, not an ECDSA key as setpoint makes them"
            )
        if key.public_key() != cert.public_key():
            raise CertificateError("the CA key does not belong to the CA certificate")
        if not _is_ca(cert):
            raise CertificateError(
                f"the certificate {cert.subject.rfc4514_string()} is not a CA (basic "
                "constraints do not say CA:TRUE)"
            )
        authority = cls.__new__(cls)
        authority._set(key, cert)
        return authority

    @property
    def not_before(self) -> _dt.datetime:
        """When the CA certificate becomes valid, in UTC."""
        return self._cert.not_valid_before_utc

    @property
    def not_after(self) -> _dt.datetime:
        """When the CA certificate expires, in UTC."""
        return self._cert.not_valid_after_utc

    def _issue(
        self,
        subject: x509.Name,
        *,
        usage: tuple[x509.ObjectIdentifier, ...],
        hosts: tuple[str, ...] = (),
        validity: _dt.timedelta = VALIDITY,
        now: _dt.datetime | None = None,
    ) -> KeyPair:
        issued = now if now is not None else _dt.datetime.now(_dt.UTC)
        if issued >= self.not_after:
            raise CertificateError(
                f"the CA {self._cert.subject.rfc4514_string()} expired at "
                f"{self.not_after:%Y-%m-%dT%H:%M}Z and can no longer issue certificates"
            )
        key = _new_key()
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(issued - CLOCK_SKEW)
            .not_valid_after(min(issued + validity, self.not_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(list(usage)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
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

    def serving_cert(
        self,
        common_name: str,
        hosts: tuple[str, ...],
        *,
        validity: _dt.timedelta = VALIDITY,
        now: _dt.datetime | None = None,
        client_auth: bool = False,
    ) -> KeyPair:
        """Issue a TLS server certificate valid for ``hosts`` (DNS names or IP addresses).

        It is valid for ``validity`` from ``now`` (default: the current time), but never past
        the CA's own expiry: a chain is only as valid as its CA. ``client_auth`` also allows
        it as a client certificate (etcd's server certificate, as kubeadm issues it: etcd
        presents it when it connects to itself and to its peers).

        Raises:
            CertificateError: the CA has expired at ``now``.

        """
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        return self._issue(
            subject,
            usage=(ExtendedKeyUsageOID.SERVER_AUTH,)
            + ((ExtendedKeyUsageOID.CLIENT_AUTH,) if client_auth else ()),
            hosts=hosts,
            validity=validity,
            now=now,
        )

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """Issue a client certificate: kube-apiserver reads CN as the user, O as groups."""
        attributes = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(x509.Name(attributes), usage=(ExtendedKeyUsageOID.CLIENT_AUTH,))


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return bool(constraints.ca)


@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """What a certificate says, read from PEM: who, by whom, for which hosts, until when."""

    subject: str
    """The subject, RFC 4514 (``CN=my-webhook``)."""
    issuer: str
    """The issuer, RFC 4514; equal to ``subject`` for a self-signed CA."""
    not_before: _dt.datetime
    """Valid from (UTC)."""
    not_after: _dt.datetime
    """Valid until (UTC)."""
    is_ca: bool
    """Basic constraints say ``CA:TRUE``."""
    hosts: tuple[str, ...]
    """Subject alternative names: DNS names, then IP addresses, as text."""
    fingerprint: str
    """SHA-256 of the DER encoding, lower-case hex (what ``openssl x509 -fingerprint`` shows
    without the colons)."""
    pem: bytes
    """This certificate alone, PEM."""

    def valid_at(self, when: _dt.datetime) -> bool:
        """Whether ``when`` lies within the validity period."""
        return self.not_before <= when < self.not_after

    def covers(self, host: str) -> bool:
        """Whether ``host`` (a DNS name or an IP address) is among :attr:`hosts`.

        Wildcards are matched as TLS clients match them: ``*.example.com`` covers one label.
        """
        try:
            wanted = str(ipaddress.ip_address(host))
        except ValueError:
            wanted = host.lower().rstrip(".")
        for entry in self.hosts:
            name = entry.lower()
            if name == wanted:
                return True
            if name.startswith("*.") and "." in wanted and wanted.split(".", 1)[1] == name[2:]:
                return True
        return False


def read_certificates(pem: bytes) -> list[CertificateInfo]:
    """Every certificate in a PEM bundle (a chain, or a caBundle of several CAs), in order.

    Raises:
        CertificateError: ``pem`` holds no certificate, or one that cannot be parsed.

    """
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise CertificateError(f"no usable PEM certificate ({e})") from None
    return [_info(cert) for cert in certs]


def _info(cert: x509.Certificate) -> CertificateInfo:
    hosts: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        pass
    else:
        hosts.extend(san.get_values_for_type(x509.DNSName))
        hosts.extend(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    der = cert.public_bytes(serialization.Encoding.DER)
    return CertificateInfo(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        is_ca=_is_ca(cert),
        hosts=tuple(hosts),
        fingerprint=hashlib.sha256(der).hexdigest(),
        pem=cert.public_bytes(serialization.Encoding.PEM),
    )


def issued_by(cert_pem: bytes, ca_bundle: bytes) -> CertificateInfo | None:
    """The CA in ``ca_bundle`` that signed the first certificate of ``cert_pem``, if any.

    Checks the signature (not only the names), as a TLS client given ``ca_bundle`` as its
    trust roots would; validity periods are not checked here (see
    :meth:`CertificateInfo.valid_at`). Unparsable input gives ``None``.
    """
    try:
        leaf = x509.load_pem_x509_certificates(cert_pem)[0]
        cas = x509.load_pem_x509_certificates(ca_bundle)
    except (ValueError, IndexError):
        return None
    for ca in cas:
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return _info(ca)
    return None


def key_matches(pair: KeyPair) -> bool:
    """Whether ``pair.key_pem`` is the private key of the first certificate in ``pair.cert_pem``.

    Unparsable or encrypted PEM gives ``False``.
    """
    try:
        cert = x509.load_pem_x509_certificate(pair.cert_pem)
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return bool(key.public_key() == cert.public_key())


def signing_key_pair() -> tuple[bytes, bytes]:
    """A fresh key pair for service-account token signing: (private PEM, public PEM)."""
    key = _new_key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public
