"""Client CPU per request: setpoint's HTTP/1.1 client against aiohttp's, same server, same run.

A TLS server (setpoint's ``Http1Server`` in a child process, so that its CPU is not counted)
answers every request with a small JSON object, as kube-apiserver answers a PATCH. The
benchmark process then sends ``--requests`` requests, ``--concurrency`` at a time, with each
candidate in turn, interleaved over ``--rounds`` rounds, and reports the client process's CPU
per request (median and range over rounds) and its ratio to aiohttp's:

- ``aiohttp``: an ``aiohttp.ClientSession`` set up as setpoint's transport set it up until
  decision 0016 (``trust_env=False``, a ``TCPConnector`` with the transport's pool size);
- ``setpoint-pool``: ``setpoint.client._http.HttpPool`` alone;
- ``setpoint-transport``: ``setpoint.client.transport.Transport``, everything a request of
  the client pays (timeouts, credentials, retries' bookkeeping, decoding, metrics hook).

Run (aiohttp is in the dev extra)::

    .venv/bin/python bench/http_client.py --requests 4000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Summary, markdown_table, ratio, run_header

BODY = orjson.dumps(
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "w-1", "namespace": "bench", "resourceVersion": "12345"},
        "data": {"size": "3"},
    }
)
PATCH = orjson.dumps({"metadata": {"labels": {"a": "b"}}})


def serve(port_out: multiprocessing.connection.Connection) -> None:
    """The child process: a TLS Http1Server answering every request with BODY."""
    from setpoint.server import (
        BindAddress,
        Http1Server,
        HttpRequest,
        HttpResponse,
        HttpServerOptions,
        ServerTLS,
    )
    from setpoint.tls.certs import CertificateAuthority

    async def answer(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, BODY, "application/json")

    async def main() -> None:
        ca = CertificateAuthority("bench-ca")
        server = Http1Server(
            "bench",
            BindAddress("127.0.0.1", 0),
            answer,
            options=HttpServerOptions(tls=ServerTLS(ca.serving_cert("api", ("127.0.0.1",)))),
        )
        await server.start()
        assert server.address is not None
        port_out.send((server.address[1], ca.cert_pem))
        await asyncio.Event().wait()

    asyncio.run(main())


Send = Callable[[], Awaitable[object]]


async def aiohttp_client(
    url: str, context: ssl.SSLContext
) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=100, ssl=context),
        headers={"User-Agent": "bench"},
        trust_env=False,
    )

    async def send() -> object:
        async with session.request(
            "PATCH",
            f"{url}/api/v1/namespaces/bench/configmaps/w-1",
            params={"fieldManager": "bench"},
            data=PATCH,
            headers={
                "Authorization": "Bearer t0k",
                "Content-Type": "application/merge-patch+json",
                "Accept": "application/json",
            },
            timeout=aiohttp.ClientTimeout(total=30, connect=5),
        ) as resp:
            return orjson.loads(await resp.read())

    return send, session.close


async def pool_client(
    url: str, context: ssl.SSLContext
) -> tuple[Send, Callable[[], Awaitable[None]]]:
    from setpoint.client._http import HttpPool

    pool = HttpPool(url, ssl_context=context, limit=100)
    headers = [
        ("User-Agent", "bench"),
        ("Accept", "application/json"),
        ("Authorization", "Bearer t0k"),
        ("Content-Type", "application/merge-patch+json"),
    ]

    async def send() -> object:
        async with asyncio.timeout(30):
            raw = await pool.request(
                "PATCH",
                "/api/v1/namespaces/bench/configmaps/w-1?fieldManager=bench",
                headers,
                PATCH,
            )
        return orjson.loads(raw.body)

    return send, pool.close


async def transport_client(
    url: str, context: ssl.SSLContext, ca: bytes
) -> tuple[Send, Callable[[], Awaitable[None]]]:
    from setpoint.client import ClientConfig
    from setpoint.client.transport import Transport

    transport = Transport(ClientConfig(server=url, token="t0k", ca_data=ca))

    async def send() -> object:
        return (
            await transport.request(
                "PATCH",
                "/api/v1/namespaces/bench/configmaps/w-1",
                params={"fieldManager": "bench"},
                body=PATCH,
                content_type="application/merge-patch+json",
            )
        ).body

    return send, transport.close


async def measure(send: Send, requests: int, concurrency: int) -> float:
    """Client CPU seconds per request for ``requests`` requests, ``concurrency`` at a time."""
    for _ in range(50):  # open the connections, warm the caches
        await send()
    queue = iter(range(requests))

    async def worker() -> None:
        for _ in queue:
            await send()

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - started) / requests


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    receive, send_port = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(
        target=serve, args=(send_port,), daemon=True
    )
    child.start()
    port, ca = receive.recv()
    url = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cadata=ca.decode())
    makers = {
        "aiohttp": lambda: aiohttp_client(url, context),
        "setpoint-pool": lambda: pool_client(url, context),
        "setpoint-transport": lambda: transport_client(url, context, ca),
    }
    results: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(args.rounds):
        for name, make in makers.items():
            send, close = await make()
            results[name].append(await measure(send, args.requests, args.concurrency))
            await close()
    child.kill()

    print(run_header())
    base = Summary.of(results["aiohttp"]).median
    rows = []
    for name, values in results.items():
        summary = Summary.of(values)
        rows.append([name, summary.spread(1e6), ratio(summary.median, base)])
    print(markdown_table(["client", "CPU per request, us (median [range])", "vs aiohttp"], rows))
    print(f"(pid {os.getpid()}; {args.concurrency} requests at a time, TLS, loopback)")


if __name__ == "__main__":
    asyncio.run(main())
