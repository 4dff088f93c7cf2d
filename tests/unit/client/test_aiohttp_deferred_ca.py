"""aiohttp's default TLS contexts read the CA bundle at first use, and still verify peers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from setpoint.tls.certs import CertificateAuthority

# Runs in a fresh interpreter: the deferral happens when setpoint's client first imports
# aiohttp, and this test process has imported aiohttp long before.
PROBE = textwrap.dedent(
    """
    import asyncio, ssl, sys

    assert "aiohttp" not in sys.modules
    import setpoint.client.transport
    import aiohttp
    import aiohttp.connector as connector

    verified = connector._SSL_CONTEXT_VERIFIED
    # Deferred: per-instance wrappers wait for the first use; nothing read yet.
    assert "wrap_bio" in vars(verified), vars(verified)
    assert "set_default_verify_paths" not in vars(ssl.SSLContext)
    assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname

    trusted_dir, untrusted_dir = sys.argv[1], sys.argv[2]

    async def serve(directory):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(f"{directory}/tls.crt", f"{directory}/tls.key")

        async def answer(reader, writer):
            await reader.readuntil(b"\\r\\n\\r\\n")
            writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n")
            writer.write(b"Connection: close\\r\\n\\r\\nok")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
        return server, server.sockets[0].getsockname()[1]

    async def main():
        trusted, trusted_port = await serve(trusted_dir)
        untrusted, untrusted_port = await serve(untrusted_dir)
        async with aiohttp.ClientSession() as session:  # aiohttp's default: verify
            try:
                await session.get(f"https://127.0.0.1:{untrusted_port}/")
            except aiohttp.ClientConnectorCertificateError:
                print("untrusted refused")
            async with session.get(f"https://127.0.0.1:{trusted_port}/") as response:
                print("trusted", response.status, await response.text())
        assert "wrap_bio" not in vars(verified), "the wrappers stay after the first use"
        print("ca certs", len(verified.get_ca_certs()))
        trusted.close()
        untrusted.close()

    asyncio.run(main())
    """
)


def _write_pair(directory: Path, ca: CertificateAuthority) -> None:
    pair = ca.serving_cert("localhost", ("127.0.0.1",))
    directory.mkdir()
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)


def test_aiohttp_default_context_reads_the_ca_bundle_at_first_use_and_verifies(
    tmp_path: Path,
) -> None:
    """aiohttp's default context, deferred by setpoint's client, trusts exactly the bundle.

    The system bundle is replaced by one test CA (``SSL_CERT_FILE``, empty ``SSL_CERT_DIR``):
    a server with a certificate from that CA is accepted, one from another CA is refused,
    and after the first connection the context holds the bundle's one CA certificate.
    """
    trusted_ca, other_ca = CertificateAuthority("bundle-ca"), CertificateAuthority("other-ca")
    _write_pair(tmp_path / "trusted", trusted_ca)
    _write_pair(tmp_path / "untrusted", other_ca)
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(trusted_ca.cert_pem)
    (tmp_path / "certs").mkdir()
    env = dict(os.environ, SSL_CERT_FILE=str(bundle), SSL_CERT_DIR=str(tmp_path / "certs"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "trusted"), str(tmp_path / "untrusted")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["untrusted refused", "trusted 200 ok", "ca certs 1"]
