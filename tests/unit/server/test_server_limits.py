"""Slow and numerous clients: header and idle timeouts, the connection cap (issue 18, item 2).

Raw sockets play the slow clients: they connect and send half a request line, or nothing,
or finish one request and then idle. The last test runs a server in a subprocess with a
256-descriptor limit and holds 300 half-sent requests against it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

from setpoint.api.clock import ManualClock
from setpoint.server import (
    BindAddress,
    Http1Server,
    HttpRequest,
    HttpResponse,
    HttpServerOptions,
    ServerTLS,
)
from setpoint.tls.certs import CertificateAuthority
from tests._support.virtual_time import settle

LOCAL = BindAddress("127.0.0.1", 0)
HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"  # the blank line that ends the headers never comes


async def ok(request: HttpRequest) -> HttpResponse:
    return HttpResponse.text(200, f"ok {request.remote}\n")


async def started(**options: object) -> Http1Server:
    server = Http1Server("test-server", LOCAL, ok, options=HttpServerOptions(**options))  # type: ignore[arg-type]
    await server.start()
    return server


async def connect(server: Http1Server) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert server.address is not None
    return await asyncio.open_connection(*server.address)


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection (EOF or reset) within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def eventually(check: Callable[[], bool], within: float = 10.0) -> bool:
    """Poll ``check`` until it holds or ``within`` seconds pass (a bounded wait)."""
    for _ in range(int(within / 0.05) + 1):
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def test_half_sent_request_is_closed_after_the_header_timeout() -> None:
    """A client that never finishes its headers is disconnected once read_header_timeout has
    passed since accept, not before (on a manual clock: no waiting, no wall time)."""
    clock = ManualClock(start=100.0)
    server = await started(read_header_timeout=30.0, clock=clock)
    try:
        reader, writer = await connect(server)
        writer.write(HALF)
        await writer.drain()
        assert await eventually(lambda: server.open_connections == 1)
        assert clock.next_deadline == 130.0  # set at accept
        clock.advance(29.9)
        await settle()
        assert server.open_connections == 1
        clock.advance(0.1)
        assert await closed_by_server(reader, within=10)
        assert await eventually(lambda: server.open_connections == 0)
        writer.close()
    finally:
        await server.stop(1.0)


async def test_silent_connection_is_closed_too() -> None:
    """A client that connects and sends nothing at all gets the same deadline."""
    server = await started(read_header_timeout=0.5)
    try:
        reader, writer = await connect(server)
        assert await closed_by_server(reader, within=10)
        writer.close()
    finally:
        await server.stop(1.0)


async def test_idle_keep_alive_connection_is_closed_after_idle_timeout() -> None:
    """After a complete request, a kept-alive connection lives for idle_timeout, no longer."""
    server = await started(read_header_timeout=30, idle_timeout=0.5)
    try:
        reader, writer = await connect(server)
        writer.write(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert await closed_by_server(reader, within=10)
        writer.close()
    finally:
        await server.stop(1.0)


async def test_connections_beyond_the_cap_are_closed_at_once() -> None:
    """With max_connections=4, a fifth concurrent connection is closed immediately."""
    server = await started(max_connections=4, read_header_timeout=30)
    held = []
    try:
        for _ in range(4):
            reader, writer = await connect(server)
            writer.write(HALF)
            held.append((reader, writer))
        assert await eventually(lambda: server.open_connections == 4)
        reader, writer = await connect(server)
        assert await closed_by_server(reader, within=5)
        writer.close()
        assert server.open_connections == 4
        for _, w in held:
            w.close()
        assert await eventually(lambda: server.open_connections == 0)
        reader, writer = await connect(server)  # room again
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        await server.stop(1.0)


async def test_tls_handshake_that_never_comes_is_counted_and_closed() -> None:
    """An HTTPS server: a TCP connection that never starts TLS counts and times out."""
    ca = CertificateAuthority("ca")
    tls = ServerTLS(ca.serving_cert("srv", ("127.0.0.1",)))
    server = await started(tls=tls, read_header_timeout=0.5, max_connections=2)
    try:
        reader, writer = await connect(server)
        assert await eventually(lambda: server.open_connections == 1)
        assert await closed_by_server(reader, within=10)
        assert await eventually(lambda: server.open_connections == 0)
        writer.close()
        # A real HTTPS client still gets through.
        ctx = ssl.create_default_context(cadata=ca.cert_pem.decode())
        assert server.address is not None
        reader, writer = await asyncio.open_connection(*server.address, ssl=ctx)
        writer.write(b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await reader.read()).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        await server.stop(1.0)


async def test_remote_address_reaches_the_handler() -> None:
    """HttpRequest.remote is the socket's peer address; is_loopback says it is local."""
    seen: list[HttpRequest] = []

    async def record(request: HttpRequest) -> HttpResponse:
        seen.append(request)
        return HttpResponse.text(200, "ok")

    server = Http1Server("test-server", LOCAL, record)
    await server.start()
    try:
        reader, writer = await connect(server)
        writer.write(
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 8.8.8.8\r\nConnection: close\r\n\r\n"
        )
        await reader.read()
        writer.close()
    finally:
        await server.stop(1.0)
    assert seen[0].remote == "127.0.0.1"
    assert seen[0].is_loopback
    assert not HttpRequest("GET", "/", remote="10.0.0.1").is_loopback
    assert not HttpRequest("GET", "/").is_loopback


SERVER_SCRIPT = """
import asyncio, json, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from setpoint.server import Http1Server, BindAddress, HttpResponse, HttpServerOptions

failures = 0
most = 0

async def probe_files():
    global failures, most
    while True:
        most = max(most, len(os.listdir("/proc/self/fd")))
        try:
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(8)]
        except OSError:
            failures += 1
        else:
            for fd in fds:
                os.close(fd)
        await asyncio.sleep(0.05)

async def report(request):
    return HttpResponse.text(200, json.dumps({"failures": failures, "most_fds": most}))

async def main():
    options = json.loads(sys.argv[1])
    server = Http1Server(
        "metrics-server", BindAddress("127.0.0.1", 0), report,
        options=HttpServerOptions(**options),
    )
    await server.start()
    print(server.address[1], flush=True)
    task = asyncio.create_task(probe_files())
    await asyncio.sleep(120)

asyncio.run(main())
"""


async def test_300_half_sent_requests_do_not_exhaust_256_descriptors(tmp_path: Path) -> None:
    """Under RLIMIT_NOFILE=256, 300 stalled clients never stop the server opening files,
    and once their headers are overdue the server answers again."""
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    options = {"read_header_timeout": 2.0}  # everything else: the defaults
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        json.dumps(options),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    writers: list[asyncio.StreamWriter] = []
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            port = int(await proc.stdout.readline())
        for _ in range(300):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue  # refused: fine, the point is what the server can still do
            writer.write(HALF)
            writers.append(writer)
        # The stalled clients stay connected; the server drops them when their headers are
        # overdue (2 s), and must have kept descriptors free for files meanwhile.
        await asyncio.sleep(2.5)
        body = ""
        for _ in range(40):
            try:
                async with asyncio.timeout(2):
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.write(b"GET /report HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    response = await reader.read()
                    writer.close()
            except (OSError, TimeoutError):
                await asyncio.sleep(0.25)
                continue
            if response.startswith(b"HTTP/1.1 200"):
                body = response.split(b"\r\n\r\n", 1)[1].decode()
                break
            await asyncio.sleep(0.25)
        assert body, "the server never answered again"
        report = json.loads(body)
        assert report["failures"] == 0, report
        assert report["most_fds"] < 200, report
    finally:
        for writer in writers:
            writer.close()
        proc.kill()
        await proc.wait()
