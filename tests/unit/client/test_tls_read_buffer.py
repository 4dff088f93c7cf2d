"""The client's TLS connections read into a buffer whose memory is committed as it is used."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import gc
import json
import mmap
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.client._tlsbuffer import read_buffer_on_demand
from setpoint.client.config import ClientConfig
from setpoint.client.transport import Transport
from setpoint.tls.certs import CertificateAuthority

BIG = {"items": ["x" * 1000] * 3000}
"""About 3 MB of JSON: many reads that fill the whole 256 KiB buffer."""


def _protocols(port: int, *, server_side: bool) -> list[Any]:
    """The open TLS protocols of this process on the test server's ``port``, one side."""
    gc.collect()
    end = "sockname" if server_side else "peername"
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, asyncio.sslproto.SSLProtocol)
        and o._server_side is server_side
        and o._transport is not None
        and o._transport.get_extra_info(end)[1] == port
    ]


@pytest.fixture
async def https_server(tmp_path: Path) -> AsyncIterator[tuple[int, bytes]]:
    """An HTTPS server on 127.0.0.1 answering ``/big`` with ``BIG`` and anything else ``{}``."""
    ca = CertificateAuthority("buffer-ca")
    pair = ca.serving_cert("localhost", ("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    big = json.dumps(BIG).encode()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            body = big if head.startswith(b"GET /big ") else b"{}"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], ca.cert_pem
    finally:
        server.close()
        await server.wait_closed()


async def test_client_connection_reads_through_a_mapped_buffer_and_the_body_is_intact(
    https_server: tuple[int, bytes],
) -> None:
    """The transport's TLS connection reads into a private memory map of asyncio's size.

    A small and a 3 MB answer (every read fills the buffer) arrive intact; the client's
    ``SSLProtocol`` holds a ``max_size`` map instead of a ``bytearray``, while the test
    server's connection (a context setpoint did not make) keeps asyncio's ``bytearray``.
    """
    port, ca = https_server
    transport = Transport(ClientConfig(server=f"https://127.0.0.1:{port}", ca_data=ca))
    try:
        assert (await transport.request("GET", "/small")).body == {}
        assert (await transport.request("GET", "/big")).body == BIG
        [client] = _protocols(port, server_side=False)
        assert isinstance(client._ssl_buffer, mmap.mmap)
        assert len(client._ssl_buffer) == asyncio.sslproto.SSLProtocol.max_size
        assert client.max_size == asyncio.sslproto.SSLProtocol.max_size  # reads as before
        assert client._ssl_buffer_view.obj is client._ssl_buffer
        [server] = _protocols(port, server_side=True)
        assert type(server._ssl_buffer) is bytearray
    finally:
        await transport.close()


async def test_other_contexts_keep_asyncio_buffer(https_server: tuple[int, bytes]) -> None:
    """Only contexts passed to ``read_buffer_on_demand`` get the map; others are untouched."""
    port, ca = https_server
    for marked in (False, True):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cadata=ca.decode())
        if marked:
            assert read_buffer_on_demand(context) is context
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        assert json.loads(await reader.readexactly(length)) == BIG
        [client] = _protocols(port, server_side=False)
        expected = mmap.mmap if marked else bytearray
        assert type(client._ssl_buffer) is expected
        assert len(client._ssl_buffer) == asyncio.sslproto.SSLProtocol.max_size
        writer.close()
        await writer.wait_closed()
        del reader, writer, client
