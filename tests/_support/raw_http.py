"""A scripted TCP server for the HTTP client's tests: each connection runs a script.

Scripts read requests with :func:`read_request` and write whatever bytes the test wants
(well-formed answers, broken ones, nothing), so the client meets servers no framework
would produce.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Raw:
    """A TCP server on 127.0.0.1 running a script per connection, counting connections."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.accepted = 0
        self.open = 0
        self.most_open = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Raw:
        """Listen on a free port."""

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            self.open += 1
            self.most_open = max(self.most_open, self.open)
            try:
                await self.script(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                self.open -= 1
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        """The server's ``http://`` URL."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Stop listening."""
        assert self.server is not None
        self.server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


def answering(*answers: bytes, then_close: bool = False) -> Script:
    """A script answering each request on a connection with the next of ``answers``."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()
        if not then_close:
            await reader.read()  # until the client closes

    return script


async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A script that reads one request and never answers, until the client closes."""
    await read_request(reader)
    await reader.read()
