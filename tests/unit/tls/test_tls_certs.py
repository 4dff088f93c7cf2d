"""Certificate helpers: reloading a CA, reading bundles, hosts, issuers, expiry bounds."""

from __future__ import annotations

import datetime as dt

import pytest

from setpoint.tls.certs import CertificateAuthority, issued_by, key_matches, read_certificates
from setpoint.tls.pem import CertificateError, KeyPair

T0 = dt.datetime(2030, 6, 1, tzinfo=dt.UTC)


def test_a_saved_ca_loads_back_and_keeps_issuing() -> None:
    """CertificateAuthority.load reads cert_pem/key_pem back; what it issues chains to it."""
    ca = CertificateAuthority("saved", validity=dt.timedelta(days=10), now=T0)
    again = CertificateAuthority.load(ca.cert_pem, ca.key_pem)
    assert again.cert_pem == ca.cert_pem
    assert (again.not_before, again.not_after) == (ca.not_before, ca.not_after)
    pair = again.serving_cert("svc", ("svc.ns.svc", "10.0.0.1"), now=T0)
    assert issued_by(pair.cert_pem, ca.cert_pem) == read_certificates(ca.cert_pem)[0]


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        (b"garbage", None, "not PEM"),
        (None, b"garbage", "not an unencrypted PEM private key"),
        (None, "other", "does not belong"),
        ("leaf", "leaf", "is not a CA"),
    ],
)
def test_load_names_what_is_wrong(cert: object, key: object, message: str) -> None:
    """A wrong certificate or key is refused with a reason, never a cryptography traceback."""
    ca = CertificateAuthority()
    leaf = ca.serving_cert("x", ("x",))
    cert_pem = {None: ca.cert_pem, "leaf": leaf.cert_pem}.get(cert, cert)  # type: ignore[call-overload]
    key_pem = {None: ca.key_pem, "other": CertificateAuthority().key_pem, "leaf": leaf.key_pem}.get(
        key,  # type: ignore[call-overload]
        key,
    )
    with pytest.raises(CertificateError, match=message):
        CertificateAuthority.load(cert_pem, key_pem)


def test_serving_certificates_never_outlive_their_ca() -> None:
    """validity is capped at the CA's expiry; an expired CA refuses to issue."""
    ca = CertificateAuthority(validity=dt.timedelta(days=30), now=T0)
    pair = ca.serving_cert("x", ("x",), validity=dt.timedelta(days=365), now=T0)
    assert read_certificates(pair.cert_pem)[0].not_after == ca.not_after
    with pytest.raises(CertificateError, match="expired"):
        ca.serving_cert("x", ("x",), now=T0 + dt.timedelta(days=31))


def test_read_certificates_reads_a_bundle_in_order() -> None:
    """A caBundle of two CAs reads as two infos, in order, with their validity and CA flag."""
    first, second = CertificateAuthority("one", now=T0), CertificateAuthority("two", now=T0)
    infos = read_certificates(first.cert_pem + second.cert_pem)
    assert [i.subject for i in infos] == ["CN=one", "CN=two"]
    assert all(
        i.is_ca and i.valid_at(T0) and not i.valid_at(T0 + dt.timedelta(days=400)) for i in infos
    )
    assert len({i.fingerprint for i in infos}) == 2
    with pytest.raises(CertificateError, match="no usable PEM certificate"):
        read_certificates(b"not a certificate")


def test_covers_matches_hosts_as_tls_clients_do() -> None:
    """Exact DNS names and IPs match; a wildcard covers exactly one label."""
    ca = CertificateAuthority()
    info = read_certificates(ca.serving_cert("x", ("*.ns.svc", "svc.ns.svc", "::1")).cert_pem)[0]
    assert info.covers("svc.ns.svc") and info.covers("SVC.ns.svc.")
    assert info.covers("other.ns.svc") and not info.covers("a.b.ns.svc")
    assert info.covers("0:0::1") and not info.covers("127.0.0.1")
    assert info.hosts == ("*.ns.svc", "svc.ns.svc", "::1")


def test_issued_by_checks_the_signature_not_the_name() -> None:
    """Two CAs with the same name: only the one that signed is the issuer."""
    signer, impostor = CertificateAuthority("same"), CertificateAuthority("same")
    pair = signer.serving_cert("x", ("x",))
    assert issued_by(pair.cert_pem, impostor.cert_pem) is None
    found = issued_by(pair.cert_pem, impostor.cert_pem + signer.cert_pem)
    assert found is not None and found.pem == signer.cert_pem
    assert issued_by(b"junk", signer.cert_pem) is None


def test_key_matches_pairs_a_key_with_its_certificate() -> None:
    """A pair's own key matches; another key, or junk, does not."""
    ca = CertificateAuthority()
    pair, other = ca.serving_cert("x", ("x",)), ca.serving_cert("y", ("y",))
    assert key_matches(pair)
    assert not key_matches(KeyPair(pair.cert_pem, other.key_pem))
    assert not key_matches(KeyPair(b"junk", pair.key_pem))
