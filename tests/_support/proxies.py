"""Small proxies for the client's proxy support: HTTP ``CONNECT`` and SOCKS5, with a login.

Each accepts one user and password, records the targets it tunnelled to and the logins it
saw, and pipes bytes both ways once the tunnel is open. ``hosts`` maps names a client asks
for to the addresses the proxy connects to (a SOCKS5 proxy resolves names itself).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import struct
from collections.abc import Mapping
from typing import Literal


class Proxy:
    """A ``CONNECT`` or SOCKS5 proxy on 127.0.0.1 that wants ``user``/``password``."""

    def __init__(
        self,
        kind: Literal["connect", "socks5"],
        *,
        user: str = "u",
        password: str = "p",
        hosts: Mapping[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.user = user
        self.password = password
        self.hosts = dict(hosts or {})
        self.tunnels: list[tuple[str, int]] = []
        """Each (host, port) a client was connected to, in order."""
        self.logins: list[str] = []
        """Each ``user:password`` a client presented (HTTP: from Proxy-Authorization)."""
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Proxy:
        """Listen on a free port of 127.0.0.1."""
        serve = self._connect if self.kind == "connect" else self._socks5
        self._server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, password: str | None = None) -> str:
        """The proxy URL, with the right password (or ``password``)."""
        scheme = "http" if self.kind == "connect" else "socks5"
        return f"{scheme}://{self.user}:{password or self.password}@127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop listening (tunnels already open run until their ends close)."""
        if self._server is not None:
            self._server.close()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.lower() == b"proxy-authorization":
                    scheme, _, encoded = value.strip().partition(b" ")
                    if scheme == b"Basic":
                        self.logins.append(base64.b64decode(encoded).decode())
            if not self.logins or self.logins[-1] != f"{self.user}:{self.password}":
                writer.write(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
                )
                await writer.drain()
                writer.close()
                return
            host, port = head.split(b" ")[1].decode().rsplit(":", 1)
            await self._tunnel(
                reader, writer, host.strip("[]"), int(port), b"HTTP/1.1 200 OK\r\n\r\n"
            )

    async def _socks5(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            version, count = await reader.readexactly(2)
            methods = await reader.readexactly(count)
            if version != 5 or 2 not in methods:
                writer.write(b"\x05\xff")  # no acceptable method: a login is required
                writer.close()
                return
            writer.write(b"\x05\x02")
            _, size = await reader.readexactly(2)
            user = (await reader.readexactly(size)).decode()
            (size,) = await reader.readexactly(1)
            password = (await reader.readexactly(size)).decode()
            self.logins.append(f"{user}:{password}")
            if (user, password) != (self.user, self.password):
                writer.write(b"\x01\x01")
                writer.close()
                return
            writer.write(b"\x01\x00")
            _, command, _, kind = await reader.readexactly(4)
            if kind == 3:
                (size,) = await reader.readexactly(1)
                host = (await reader.readexactly(size)).decode()
            else:
                packed = await reader.readexactly(4 if kind == 1 else 16)
                host = str(ipaddress.ip_address(packed))
            (port,) = struct.unpack("!H", await reader.readexactly(2))
            if command != 1:
                writer.write(b"\x05\x07\x00\x01" + bytes(6))
                writer.close()
                return
            reply = b"\x05\x00\x00\x01" + bytes(4) + struct.pack("!H", port)
            await self._tunnel(reader, writer, host, port, reply)

    async def _tunnel(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        host: str,
        port: int,
        reply: bytes,
    ) -> None:
        self.tunnels.append((host, port))
        up_reader, up_writer = await asyncio.open_connection(self.hosts.get(host, host), port)
        writer.write(reply)
        await writer.drain()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
