"""A TCP proxy in front of the API server that a test can cut and restore.

Cutting it closes every proxied connection (watch streams break mid-flight) and stops
listening (new connections are refused), exactly what a client sees when the API server or
the network goes away. While it is cut the test changes objects through a direct client, so
"changes made while the informer was disconnected" happen deterministically, not by racing
the informer's reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path

from setpoint.client import Client, ClientConfig, load_kubeconfig
from setpoint.client.transport import RequestHook


class OutageProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0
        self.connections = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Refuse new connections and break every open one."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def restore(self) -> None:
        """Listen again on the same port."""
        await self.start()

    async def close(self) -> None:
        await self.cut()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        tasks = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        self._pipes.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)
            self._pipes.difference_update(tasks)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


def proxied_client(
    kubeconfig: Path, proxy: OutageProxy, *, on_request: RequestHook | None = None
) -> Client:
    """A client for the kubeconfig's cluster that connects through ``proxy``."""
    config: ClientConfig = load_kubeconfig(str(kubeconfig))
    config = dataclasses.replace(config, server=f"https://127.0.0.1:{proxy.port}")
    return Client(config, on_request=on_request)
