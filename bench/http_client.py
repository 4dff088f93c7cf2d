"""Client CPU: setpoint's HTTP/1.1 client with llhttp against its own former parser, same run.

A TLS server in a child process (so that its CPU is not counted; plain asyncio streams, so
it can stream) answers four kinds of request, as kube-apiserver would:

- ``small``: a PATCH answered with a small JSON object (``--requests`` of them,
  ``--concurrency`` at a time): client CPU per request;
- ``list``: a GET answered with a large JSON list (``--list-mib`` MiB) as it is sent: client
  CPU per MiB, bulk TLS reading and framing;
- ``list-gzip``: the same list gzip-compressed (kube-apiserver compresses answers over
  128 KiB): client CPU per MiB of the decompressed body;
- ``watch``: a watch of ``--events`` events, each its own chunk of a chunked answer, read
  as a stream: client CPU per event.

The candidates, measured in turn inside each round (``--rounds``, interleaved so that drift
hits all of them alike), all with the same TLS context:

- ``llhttp``: this tree's ``setpoint.client._http.HttpPool``;
- ``own-parser``: the ``HttpPool`` of ``--baseline`` (a tree with the hand-written parser,
  e.g. ``git worktree add ../wt-client-old 113a4fb``; its ``_http.py`` uses only the
  standard library, so it is loaded beside this tree's under another module name);
- ``llhttp+mapped``: this tree's pool with the baseline's ``_tlsbuffer`` (the TLS read
  buffer as a private memory map, which issue 28 removed): the bulk-read CPU it saved;
- ``transport``: this tree's ``Transport`` (small requests only: everything a request of the
  client pays, credentials, retries' bookkeeping, decoding, metrics hook);
- ``aiohttp`` (``--aiohttp``, small requests only; it is in the dev extra): decision 0016's
  reference.

Run it while nothing else loads the machine (2 shared cores)::

    .venv/bin/python bench/http_client.py --baseline ../wt-client-old/src --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Summary, markdown_table, ratio, run_header

SMALL = orjson.dumps(
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "w-1", "namespace": "bench", "resourceVersion": "12345"},
        "data": {"size": "3"},
    }
)
PATCH = orjson.dumps({"metadata": {"labels": {"a": "b"}}})
HEADERS = [
    ("User-Agent", "bench"),
    ("Accept", "application/json"),
    ("Authorization", "Bearer t0k"),
]
EVENT = (
    orjson.dumps(
        {
            "type": "MODIFIED",
            "object": {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {
                    "name": "w-1",
                    "namespace": "bench",
                    "resourceVersion": "12345",
                    "labels": {"app": "bench", "tier": "backend"},
                    "annotations": {"example.com/note": "x" * 200},
                },
                "spec": {"size": 3, "image": "registry.example.com/app:v1"},
                "status": {"observedGeneration": 7, "conditions": [{"type": "Ready"}]},
            },
        }
    )
    + b"\n"
)


def list_body(mib: int) -> bytes:
    """A JSON list of about ``mib`` MiB of Widget-like items, each with its own name, uid and
    resourceVersion (so that gzip compresses it about as a real list, ~20:1, not 140:1)."""
    item = orjson.loads(EVENT)["object"]
    count = mib * 1024 * 1024 // len(orjson.dumps(item))
    items = []
    for index in range(count):
        meta = dict(item["metadata"], name=f"w-{index}", uid=uuid.UUID(int=index * 7919**3).hex)
        meta["resourceVersion"] = str(100000 + index * 13)
        items.append(dict(item, metadata=meta))
    return orjson.dumps({"kind": "WidgetList", "apiVersion": "example.com/v1", "items": items})


def answer(status: str, body: bytes, *extra: str) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", *extra]
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def serve(out: multiprocessing.connection.Connection, list_mib: int, events: int) -> None:
    """The child process: a TLS server answering /small, /list, /list-gzip and /watch."""
    from setpoint.tls.certs import CertificateAuthority

    listed = list_body(list_mib)
    answers = {
        b"/small": answer("200 OK", SMALL),
        b"/list": answer("200 OK", listed),
        b"/list-gzip": answer("200 OK", gzip.compress(listed, 1), "Content-Encoding: gzip"),
    }
    chunk = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
    watch_head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    batch = chunk * 100

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                path = head.split(b" ", 2)[1].split(b"?")[0]
                if path == b"/watch":
                    writer.write(watch_head)
                    for _ in range(events // 100):
                        writer.write(batch)
                        await writer.drain()
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(answers[path])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    ca = CertificateAuthority("bench-ca")
    pair = ca.serving_cert("api", ("127.0.0.1",))
    with tempfile.TemporaryDirectory() as directory:
        cert, key = Path(directory, "tls.crt"), Path(directory, "tls.key")
        cert.write_bytes(pair.cert_pem)
        key.write_bytes(pair.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        out.send((server.sockets[0].getsockname()[1], ca.cert_pem))
        await asyncio.Event().wait()

    asyncio.run(main())


def load(name: str, path: Path) -> ModuleType:
    """The module at ``path`` (standard-library imports only), imported as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


Pool = Any
"""An ``HttpPool`` of either tree (the same interface)."""
Job = Callable[[Pool], Awaitable[int]]
"""One measured job on a pool: returns the units done (requests, MiB, events)."""


def small_job(requests: int, concurrency: int) -> Job:
    async def job(pool: Pool) -> int:
        queue = iter(range(requests))
        headers = [*HEADERS, ("Content-Type", "application/merge-patch+json")]

        async def worker() -> None:
            for _ in queue:
                raw = await pool.request("PATCH", "/small?fieldManager=bench", headers, PATCH)
                orjson.loads(raw.body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests

    return job


def list_job(path: str, times: int, mib: int) -> Job:
    async def job(pool: Pool) -> int:
        headers = [*HEADERS, ("Accept-Encoding", "gzip")]
        for _ in range(times):
            raw = await pool.request("GET", path, headers)
            assert len(raw.body) > (mib - 1) * 1024 * 1024
        return times * mib

    return job


def watch_job(events: int) -> Job:
    async def job(pool: Pool) -> int:
        stream = await pool.stream("GET", "/watch?watch=true", HEADERS, read_timeout=60)
        received = 0
        async for chunk in stream.chunks():
            received += len(chunk)
        stream.close()
        assert received == events * len(EVENT), received
        return events

    return job


async def measure(pool: Pool, job: Job) -> float:
    """Client CPU seconds per unit of ``job`` (after one warm-up run of it)."""
    await job(pool)
    started = time.process_time()
    units = await job(pool)
    return (time.process_time() - started) / units


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="src/ of a tree with the old parser")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--list-mib", type=int, default=16)
    parser.add_argument("--lists", type=int, default=6, help="list answers per measurement")
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--aiohttp", action="store_true", help="add aiohttp (small requests)")
    args = parser.parse_args()

    receive, send_port = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("spawn").Process(
        target=serve, args=(send_port, args.list_mib, args.events), daemon=True
    )
    child.start()
    port, ca = receive.recv()
    url = f"https://127.0.0.1:{port}"

    from setpoint.client._http import HttpPool

    def context() -> ssl.SSLContext:
        return ssl.create_default_context(cadata=ca.decode())

    pools: dict[str, Callable[[], Pool]] = {"llhttp": lambda: HttpPool(url, ssl_context=context())}
    if args.baseline is not None:
        old = load("baseline_http", args.baseline / "setpoint/client/_http.py")
        mapped = load("baseline_tlsbuffer", args.baseline / "setpoint/client/_tlsbuffer.py")
        pools["own-parser"] = lambda: old.HttpPool(url, ssl_context=context())
        pools["llhttp+mapped"] = lambda: HttpPool(
            url, ssl_context=mapped.read_buffer_on_demand(context())
        )
    jobs: dict[str, tuple[Job, str, float]] = {
        "small": (small_job(args.requests, args.concurrency), "us per request", 1e6),
        "list": (list_job("/list", args.lists, args.list_mib), "ms per MiB", 1e3),
        "list-gzip": (list_job("/list-gzip", args.lists, args.list_mib), "ms per MiB", 1e3),
        "watch": (watch_job(args.events), "us per event", 1e6),
    }
    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for scenario, (job, _, _) in jobs.items():
            for name, make in pools.items():
                pool = make()
                results.setdefault((scenario, name), []).append(await measure(pool, job))
                await pool.close()
            if scenario == "small":
                for name, value in (await others(url, ca, args)).items():
                    results.setdefault((scenario, name), []).append(value)
    child.kill()

    print(run_header())
    baseline = "own-parser" if args.baseline is not None else "llhttp"
    rows = []
    for scenario, (_, unit, scale) in jobs.items():
        base = Summary.of(results[(scenario, baseline)]).median
        for (kind, name), values in results.items():
            if kind == scenario:
                summary = Summary.of(values)
                rows.append(
                    [
                        scenario,
                        name,
                        f"{summary.spread(scale, 1)} {unit}",
                        ratio(summary.median, base),
                    ]
                )
    print(markdown_table(["scenario", "client", "CPU (median [range])", f"vs {baseline}"], rows))
    print(
        f"(pid {os.getpid()}; TLS on loopback; {args.rounds} interleaved rounds; small: "
        f"{args.requests} requests, {args.concurrency} at a time; list: {args.lists} x "
        f"{args.list_mib} MiB; watch: {args.events} events of {len(EVENT)} bytes)"
    )


async def others(url: str, ca: bytes, args: argparse.Namespace) -> dict[str, float]:
    """CPU per small request of the whole transport (and aiohttp, when asked)."""
    from setpoint.client import ClientConfig
    from setpoint.client.transport import Transport

    measured: dict[str, float] = {}
    transport = Transport(ClientConfig(server=url, token="t0k", ca_data=ca))

    class Adapter:
        async def request(self, method: str, target: str, headers: Any, body: bytes) -> Any:
            path, _, _ = target.partition("?")
            response = await transport.request(
                method,
                path,
                params={"fieldManager": "bench"},
                body=body,
                content_type="application/merge-patch+json",
            )

            class Raw:
                body = orjson.dumps(response.body)

            return Raw

    measured["transport"] = await measure(Adapter(), small_job(args.requests, args.concurrency))
    await transport.close()
    if args.aiohttp:
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=100, ssl=ssl.create_default_context(cadata=ca.decode())
            ),
            trust_env=False,
        )

        class AiohttpAdapter:
            async def request(self, method: str, target: str, headers: Any, body: bytes) -> Any:
                async with session.request(
                    method,
                    url + target,
                    data=body,
                    headers=dict(headers),
                    timeout=aiohttp.ClientTimeout(total=30, connect=5),
                ) as resp:

                    class Raw:
                        pass

                    Raw.body = await resp.read()  # type: ignore[attr-defined]
                    return Raw

        measured["aiohttp"] = await measure(
            AiohttpAdapter(), small_job(args.requests, args.concurrency)
        )
        await session.close()
    return measured


if __name__ == "__main__":
    asyncio.run(main())
