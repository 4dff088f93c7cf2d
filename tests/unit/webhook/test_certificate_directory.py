"""A certificate directory is watched: the server serves renewed files without a restart."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from setpoint.testing import serving_certificate
from setpoint.testing.waits import eventually
from setpoint.tls.certs import CertificateAuthority
from setpoint.tls.pem import CertificateError, KeyPair
from setpoint.webhook import CertificateDirectory, WebhookServer, WebhookServerOptions


async def handshake_ok(port: int, ca: CertificateAuthority) -> bool:
    """Whether a fresh TLS connection to the server verifies with ``ca``."""
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    except ssl.SSLCertVerificationError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


def write(directory: Path, pair: KeyPair) -> None:
    (directory / "tls.key").write_bytes(pair.key_pem)
    (directory / "tls.crt").write_bytes(pair.cert_pem)


async def test_renewed_files_are_served_and_a_broken_pair_is_not(tmp_path: Path) -> None:
    """New files -> new handshakes use them; a mismatched pair is skipped, the old one kept."""
    old_ca, _ = serving_certificate(tmp_path)
    server = WebhookServer(
        WebhookServerOptions(
            bind_address="127.0.0.1:0",
            certificate=CertificateDirectory(str(tmp_path), poll_interval=0.05),
        )
    )
    await server.start()
    try:
        assert server.address is not None
        port = server.address[1]
        assert await handshake_ok(port, old_ca)

        # A half-written update: the new certificate with the old key. Not served.
        new_ca = CertificateAuthority("renewed-ca")
        renewed = new_ca.serving_cert("setpoint-webhook", ("127.0.0.1",))
        (tmp_path / "tls.crt").write_bytes(renewed.cert_pem)
        await asyncio.sleep(0.3)
        assert await handshake_ok(port, old_ca)
        assert server.failure() is None

        # The key arrives: the renewed pair is served from the next handshake on.
        write(tmp_path, renewed)
        await eventually(lambda: handshake_ok(port, new_ca), timeout=5, description="reloaded")
        assert not await handshake_ok(port, old_ca)
        assert server.tls.certificate == renewed
    finally:
        await server.stop(1.0)


def test_poll_interval_must_be_positive() -> None:
    """A zero interval is refused with the option's name."""
    with pytest.raises(ValueError, match=r"CertificateDirectory\.poll_interval=0"):
        CertificateDirectory(poll_interval=0)


async def test_readiness_fails_while_the_served_certificate_is_expired(tmp_path: Path) -> None:
    """An expired certificate in the directory: the server listens, /readyz says why not."""
    import datetime as dt

    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    ca = CertificateAuthority("old-ca", now=past)
    write(tmp_path, ca.serving_cert("x", ("127.0.0.1",), validity=dt.timedelta(days=1), now=past))
    server = WebhookServer(
        WebhookServerOptions(
            bind_address="127.0.0.1:0", certificate=CertificateDirectory(str(tmp_path))
        )
    )
    await server.start()
    try:
        with pytest.raises(CertificateError, match="not valid now"):
            await server.ready()
        write(tmp_path, CertificateAuthority().serving_cert("x", ("127.0.0.1",)))
        server.tls.update(await CertificateDirectory(str(tmp_path)).load())
        assert await server.ready()
    finally:
        await server.stop(1.0)
