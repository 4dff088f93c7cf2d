"""HTTPS serving: certificates from memory or files, swapped while serving, mutual TLS."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from setpoint.server import (
    BindAddress,
    Http1Server,
    HttpRequest,
    HttpResponse,
    HttpServerOptions,
    ServerTLS,
)
from setpoint.tls.certs import CertificateAuthority
from setpoint.tls.pem import CertificateError, KeyPair, load_key_pair


async def hello(request: HttpRequest) -> HttpResponse:
    return HttpResponse.text(200, f"hello {request.path}\n")


def trusting(ca: CertificateAuthority, client: KeyPair | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
    if client is not None:
        from setpoint.tls.pem import load_cert_chain

        load_cert_chain(ctx, client.cert_pem, client.key_pem)
    return ctx


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # A fresh connection per request, so each request does its own TLS handshake.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        yield s


async def serve(tls: ServerTLS) -> tuple[Http1Server, str]:
    server = Http1Server(
        "webhook-server", BindAddress("127.0.0.1", 0), hello, options=HttpServerOptions(tls=tls)
    )
    await server.start()
    assert server.address is not None
    return server, f"https://127.0.0.1:{server.address[1]}"


async def test_https_with_a_certificate_held_in_memory(http: aiohttp.ClientSession) -> None:
    """A server with ServerTLS answers HTTPS; a client trusting the CA verifies it."""
    ca = CertificateAuthority("test-ca")
    server, url = await serve(ServerTLS(ca.serving_cert("webhook", ("127.0.0.1",))))
    try:
        assert server.scheme == "https"
        async with http.get(f"{url}/ok", ssl=trusting(ca)) as resp:
            assert resp.status == 200
            assert await resp.text() == "hello /ok\n"
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await http.get(f"{url}/ok", ssl=trusting(CertificateAuthority("other-ca")))
    finally:
        await server.stop(1.0)


async def test_update_swaps_the_certificate_without_a_restart(
    http: aiohttp.ClientSession,
) -> None:
    """After update(), new handshakes (without SNI, to an IP) get the new certificate."""
    old_ca, new_ca = CertificateAuthority("old-ca"), CertificateAuthority("new-ca")
    tls = ServerTLS(old_ca.serving_cert("webhook", ("127.0.0.1",)))
    server, url = await serve(tls)
    listening = tls.context
    try:
        async with http.get(url, ssl=trusting(old_ca)) as resp:
            assert resp.status == 200
        new_pair = new_ca.serving_cert("webhook", ("127.0.0.1",))
        tls.update(new_pair)
        assert tls.certificate == new_pair and tls.context is listening
        async with http.get(url, ssl=trusting(new_ca)) as resp:
            assert resp.status == 200
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await http.get(url, ssl=trusting(old_ca))
    finally:
        await server.stop(1.0)


async def test_a_bad_update_keeps_the_good_certificate(http: aiohttp.ClientSession) -> None:
    """update() with a key that does not match raises CertificateError and changes nothing."""
    ca = CertificateAuthority("test-ca")
    good = ca.serving_cert("webhook", ("127.0.0.1",))
    other = ca.serving_cert("webhook", ("127.0.0.1",))
    tls = ServerTLS(good)
    server, url = await serve(tls)
    try:
        with pytest.raises(CertificateError, match="serving certificate and key cannot be used"):
            tls.update(KeyPair(good.cert_pem, other.key_pem))
        assert tls.certificate == good
        async with http.get(url, ssl=trusting(ca)) as resp:
            assert resp.status == 200
    finally:
        await server.stop(1.0)


async def test_mutual_tls_requires_a_client_certificate(http: aiohttp.ClientSession) -> None:
    """With client_ca_pem, only clients presenting a certificate from that CA get through."""
    ca = CertificateAuthority("test-ca")
    tls = ServerTLS(ca.serving_cert("webhook", ("127.0.0.1",)), client_ca_pem=ca.cert_pem)
    server, url = await serve(tls)
    try:
        async with http.get(url, ssl=trusting(ca, ca.client_cert("kube-apiserver"))) as resp:
            assert resp.status == 200
        with pytest.raises(aiohttp.ClientError):
            await http.get(url, ssl=trusting(ca))
    finally:
        await server.stop(1.0)


def write_pair(directory: Path, pair: KeyPair) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return cert, key


async def test_from_files_serves_a_mounted_secret(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """ServerTLS.from_files reads tls.crt/tls.key as a mounted TLS Secret provides them."""
    ca = CertificateAuthority("test-ca")
    cert, key = write_pair(tmp_path, ca.serving_cert("webhook", ("127.0.0.1", "localhost")))
    server, url = await serve(ServerTLS.from_files(cert, key))
    try:
        async with http.get(url, ssl=trusting(ca)) as resp:
            assert resp.status == 200
    finally:
        await server.stop(1.0)


def test_load_key_pair_names_the_file_and_the_problem(tmp_path: Path) -> None:
    """Missing files, non-PEM data and a key of another certificate each get a clear message."""
    ca = CertificateAuthority("test-ca")
    pair = ca.serving_cert("webhook", ("127.0.0.1",))
    cert, key = write_pair(tmp_path, pair)
    assert load_key_pair(cert, key) == pair
    assert pair.not_after > pair.not_after.replace(year=pair.not_after.year - 1)

    with pytest.raises(CertificateError, match=r"cannot read the certificate file .*missing\.crt"):
        load_key_pair(tmp_path / "missing.crt", key)
    (tmp_path / "garbage.crt").write_text("not a certificate")
    with pytest.raises(CertificateError, match="holds no PEM certificate"):
        load_key_pair(tmp_path / "garbage.crt", key)
    other = tmp_path / "other"
    other.mkdir()
    _, other_key = write_pair(other, ca.serving_cert("webhook", ("127.0.0.1",)))
    with pytest.raises(CertificateError, match=r"tls\.crt and key .*other/tls\.key cannot be used"):
        load_key_pair(cert, other_key)
