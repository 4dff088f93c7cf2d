"""The webhook socket of worker processes (decision 0038): opened once, served by every worker."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

from setpoint.server.address import BindAddress
from setpoint.server.http import Http1Server, HttpRequest, HttpResponse, HttpServerOptions
from setpoint.tls.certs import CertificateAuthority
from setpoint.webhook.options import WebhookServerOptions
from setpoint.webhook.server import StaticCertificate, WebhookServer


async def _get(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await reader.read()
    writer.close()
    return data.decode().rpartition("\r\n\r\n")[2]


def _worker(name: str, listening: socket.socket) -> Http1Server:
    async def answer(request: HttpRequest) -> HttpResponse:
        return HttpResponse.text(200, name)

    # What a worker gets: its own descriptor of the one listening socket.
    inherited = socket.socket(fileno=os.dup(listening.fileno()))
    return Http1Server(
        name,
        BindAddress("203.0.113.1", 1),  # never bound: the socket is used instead
        answer,
        options=HttpServerOptions(listen_socket=inherited),
    )


async def test_two_servers_accept_from_one_inherited_socket_and_one_survives_the_other() -> None:
    listening = WebhookServer(WebhookServerOptions(bind_address="127.0.0.1:0")).listen()
    try:
        assert listening.get_inheritable()
        port = listening.getsockname()[1]
        first, second = _worker("w0", listening), _worker("w1", listening)
        await first.start()
        await second.start()
        assert first.address == second.address == ("127.0.0.1", port)
        answers = {await _get(port) for _ in range(40)}
        assert answers <= {"w0", "w1"} and answers
        await first.stop(1.0)
        assert {await _get(port) for _ in range(10)} == {"w1"}
        await second.stop(1.0)
    finally:
        listening.close()


async def test_a_webhook_server_serves_the_socket_it_is_given() -> None:
    listening = WebhookServer(WebhookServerOptions(bind_address="127.0.0.1:0")).listen()
    port = listening.getsockname()[1]
    ca = CertificateAuthority("test-ca")
    server = WebhookServer(
        WebhookServerOptions(
            bind_address="127.0.0.1:1",  # never bound: the inherited socket is served
            certificate=StaticCertificate(ca.serving_cert("w", ("127.0.0.1",))),
        )
    )
    server.serve_socket(socket.socket(fileno=os.dup(listening.fileno())))
    listening.close()
    await server.start()
    try:
        assert server.address == ("127.0.0.1", port)
        context = ssl.create_default_context(cadata=ca.cert_pem.decode())
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
        )
        writer.write(b"GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 ")
        writer.close()
    finally:
        await server.stop(1.0)
