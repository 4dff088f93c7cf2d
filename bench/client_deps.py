"""Which HTTP library and JSON codec should setpoint's client use? Measured on a real API server.

Candidates: aiohttp and httpx (HTTP/1.1, and httpx over HTTP/2 with h2) crossed with the JSON
codecs json (stdlib), orjson and msgspec, plus setpoint's own ``Client`` (aiohttp + orjson with
everything the client does on top) as a reference row. For each candidate:

1. ``lists``: list-and-decode all ConfigMaps of one namespace (default 10,000, each with a few
   labels and ~1 KiB of data), paginated with ``limit=500`` and unpaginated: wall time, CPU time
   and RSS growth of the client process;
2. ``watch``: every candidate opens a watch, then a *separate writer process* makes M updates
   (default 5,000) and each watcher reports events/s and CPU time per event ("live"; all
   watchers watch the same writer run, or one each with ``--watch-solo``). Then each candidate
   alone replays the same M events from the API server's watch cache as fast as it can
   ("backlog"), which shows what a watcher can decode when the writer is not the limit;
3. ``codecs``: each codec alone, in one process, on the real list body and one watch event;
4. ``imports``: import time, added modules and RSS of each library (fresh interpreters).

Every list and watch measurement runs in a fresh child process, so its CPU time and peak RSS
belong to one candidate alone, and candidates are interleaved round by round (in a rotating
order) so that the drift of a shared machine spreads over all of them instead of favouring one.
Results are medians with the [lowest-highest] run, and ratios to the best candidate *of the
same run*.

Run (about 5-8 minutes on 2 shared cores)::

    .venv/bin/pip install httpx msgspec h2     # benchmark only, not setpoint dependencies
    .venv/bin/python bench/client_deps.py

The Markdown it prints is what docs/benchmarks.md quotes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import random
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from _common import Summary, current_rss_mib, markdown_table, peak_rss_mib, ratio, run_header

HTTP_LIBRARIES = ("aiohttp", "httpx", "httpx-h2")
CODECS = ("json", "orjson", "msgspec")
REFERENCE = "setpoint"
"""The reference candidate: setpoint's own Client (aiohttp + orjson), not a choice on its own."""

PARTS = ("lists", "watch", "codecs", "imports")
NAMESPACE = "bench-deps"
PAGE_SIZE = 500
IMPORT_RUNS = 9
CHILD_TIMEOUT = 300.0
"""Seconds any one child process may take before the benchmark gives up on it."""

WATCH_TIMEOUT = 120
"""Seconds a watcher may wait for its events (the server ends the watch after this, too)."""

Decoder = Callable[[bytes], Any]


class BenchError(RuntimeError):
    """A benchmark step failed; the message says which one and why."""


# -- candidates ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Candidate:
    """One HTTP library with one JSON codec (or the setpoint reference, whose codec is orjson)."""

    http: str
    codec: str

    @property
    def label(self) -> str:
        """How tables name it."""
        if self.http == REFERENCE:
            return "setpoint Client (aiohttp+orjson)"
        return f"{self.http} + {self.codec}"

    @property
    def is_reference(self) -> bool:
        """True for setpoint's own client, which is shown but never the ratio baseline."""
        return self.http == REFERENCE


def decoder(codec: str) -> Decoder:
    """The ``bytes -> object`` function of a codec, imported only in the child that uses it."""
    if codec == "json":
        return json.loads
    if codec == "orjson":
        import orjson

        return orjson.loads
    if codec == "msgspec":
        import msgspec

        # A reusable Decoder skips msgspec's per-call setup; it decodes to plain dicts/lists,
        # the same objects the other codecs return.
        return msgspec.json.Decoder().decode
    raise BenchError(f"unknown codec {codec!r}; choose one of {', '.join(CODECS)}")


class HttpClient(Protocol):
    """What the benchmark needs from an HTTP library: a GET, a streaming GET, and close."""

    http_version: str
    content_encoding: str

    async def get(self, path: str, params: Mapping[str, str]) -> bytes:
        """GET ``path`` and return the (decompressed) body; raise BenchError unless 200."""
        ...

    def stream(
        self, path: str, params: Mapping[str, str]
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """Open a streaming GET; the context yields the body's chunks as they arrive."""
        ...

    async def aclose(self) -> None:
        """Close the connection pool."""
        ...


def _headers(encoding: str) -> dict[str, str]:
    # Every library gets the same headers, so each one receives the same bytes. aiohttp and
    # httpx both ask for gzip by default (as does client-go), and kube-apiserver compresses
    # list responses over 128 KiB when asked.
    return {
        "Accept": "application/json",
        "Accept-Encoding": encoding,
        "User-Agent": "setpoint-bench/0.1",
    }


class AiohttpClient:
    """aiohttp ClientSession with one TCPConnector, configured like setpoint's transport."""

    def __init__(self, server: str, ctx: ssl.SSLContext, encoding: str) -> None:
        import aiohttp

        self._aiohttp = aiohttp
        self._server = server
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=10),
            headers=_headers(encoding),
            auto_decompress=True,
        )
        self.http_version = "?"
        self.content_encoding = ""

    async def get(self, path: str, params: Mapping[str, str]) -> bytes:
        timeout = self._aiohttp.ClientTimeout(total=CHILD_TIMEOUT)
        async with self._session.get(self._server + path, params=params, timeout=timeout) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise BenchError(f"GET {path} answered {resp.status}: {body[:300]!r}")
            self.http_version = (
                f"{resp.version.major}.{resp.version.minor}" if resp.version else "?"
            )
            self.content_encoding = resp.headers.get("Content-Encoding", "")
            return body

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, str]
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        timeout = self._aiohttp.ClientTimeout(total=None, sock_read=CHILD_TIMEOUT)
        async with self._session.get(self._server + path, params=params, timeout=timeout) as resp:
            if resp.status != 200:
                raise BenchError(f"watch {path} answered {resp.status}: {await resp.read()!r}")
            self.http_version = (
                f"{resp.version.major}.{resp.version.minor}" if resp.version else "?"
            )
            # iter_any() is what setpoint's Watch reads: whatever bytes have arrived.
            yield resp.content.iter_any()

    async def aclose(self) -> None:
        await self._session.close()


class HttpxClient:
    """httpx AsyncClient over HTTP/1.1 or, with ``http2``, HTTP/2 (h2)."""

    def __init__(self, server: str, ctx: ssl.SSLContext, encoding: str, *, http2: bool) -> None:
        import httpx

        # httpcore sets the ALPN protocols on the SSLContext it is given, so this context
        # must not be shared with another client.
        self._client = httpx.AsyncClient(
            base_url=server,
            verify=ctx,
            http2=http2,
            headers=_headers(encoding),
            timeout=httpx.Timeout(CHILD_TIMEOUT),
        )
        self.http_version = "?"
        self.content_encoding = ""

    async def get(self, path: str, params: Mapping[str, str]) -> bytes:
        resp = await self._client.get(path, params=dict(params))
        if resp.status_code != 200:
            raise BenchError(f"GET {path} answered {resp.status_code}: {resp.content[:300]!r}")
        self.http_version = resp.http_version
        self.content_encoding = resp.headers.get("Content-Encoding", "")
        return resp.content

    @contextlib.asynccontextmanager
    async def stream(
        self, path: str, params: Mapping[str, str]
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self._client.stream("GET", path, params=dict(params)) as resp:
            if resp.status_code != 200:
                raise BenchError(
                    f"watch {path} answered {resp.status_code}: {await resp.aread()!r}"
                )
            self.http_version = resp.http_version
            yield resp.aiter_bytes()

    async def aclose(self) -> None:
        await self._client.aclose()


def http_client(name: str, kubeconfig: str, encoding: str) -> HttpClient:
    """A raw client for library ``name`` with the kubeconfig's CA and admin client certificate."""
    from setpoint.client.kubeconfig import load_kubeconfig

    config = load_kubeconfig(kubeconfig)
    ctx = config.ssl_context()
    if name == "aiohttp":
        return AiohttpClient(config.server, ctx, encoding)
    if name in ("httpx", "httpx-h2"):
        return HttpxClient(config.server, ctx, encoding, http2=name == "httpx-h2")
    raise BenchError(f"unknown HTTP library {name!r}; choose one of {', '.join(HTTP_LIBRARIES)}")


def _configmaps_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


# -- child: list-and-decode --------------------------------------------------------------


async def _list_raw(
    client: HttpClient, decode: Decoder, namespace: str, paginate: bool
) -> tuple[list[Any], int]:
    path = _configmaps_path(namespace)
    items: list[Any] = []
    received = 0
    params = {"limit": str(PAGE_SIZE)} if paginate else {}
    while True:
        body = await client.get(path, params)
        received += len(body)
        page = decode(body)
        items.extend(page["items"])
        token = page["metadata"].get("continue")
        if not paginate or not token:
            return items, received
        params = {"limit": str(PAGE_SIZE), "continue": token}


async def list_child(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, then list-and-decode every ConfigMap once; report time, CPU and memory."""
    result: dict[str, Any] = {}
    if args.http == REFERENCE:
        from setpoint.api import kinds
        from setpoint.client import Client, ClientOptions

        async with Client.from_kubeconfig(
            args.kubeconfig, options=ClientOptions(page_size=PAGE_SIZE)
        ) as sp:
            # Warm-up: discovery, the TLS connection and the decoding code paths.
            await sp.list_page(kinds.ConfigMap, namespace=args.namespace, limit=1)
            rss_ready = current_rss_mib()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            if args.paginate:
                items = (await sp.list(kinds.ConfigMap, namespace=args.namespace)).items
            else:
                items = (
                    await sp.list_page(kinds.ConfigMap, namespace=args.namespace, limit=None)
                ).items
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            result.update(http_version="1.1", content_encoding="(aiohttp default)", bytes=0)
    else:
        decode = decoder(args.codec)
        client = http_client(args.http, args.kubeconfig, args.encoding)
        try:
            decode(await client.get(_configmaps_path(args.namespace), {"limit": "1"}))
            rss_ready = current_rss_mib()
            wall0, cpu0 = time.perf_counter(), time.process_time()
            items, received = await _list_raw(client, decode, args.namespace, args.paginate)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            result.update(
                http_version=client.http_version,
                content_encoding=client.content_encoding or "identity",
                bytes=received,
            )
        finally:
            await client.aclose()
    if len(items) != args.objects:
        raise BenchError(f"listed {len(items)} ConfigMaps in {args.namespace}, want {args.objects}")
    result.update(wall=wall, cpu=cpu, rss_ready=rss_ready, rss_peak=peak_rss_mib())
    return result


# -- child: watch ------------------------------------------------------------------------


async def _consume(
    client: HttpClient,
    path: str,
    params: Mapping[str, str],
    decode: Decoder,
    expected: int,
    *,
    announce: bool,
) -> dict[str, float]:
    """Read watch events until ``expected`` MODIFIED ones have been decoded; time them."""
    count = 0
    first = last = 0.0
    async with client.stream(path, params) as chunks:
        if announce:
            # The stream is established (headers received): the writer may start now.
            print("READY", flush=True)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        buffer = b""
        # The same line splitting for every candidate. It slices each complete line out of the
        # chunk instead of re-copying the remainder per line, so that a library that hands over
        # large chunks is not charged for quadratic copying.
        async for chunk in chunks:
            buffer += chunk
            start = 0
            while count < expected:
                end = buffer.find(b"\n", start)
                if end < 0:
                    break
                event = decode(buffer[start:end])
                start = end + 1
                kind = event["type"]
                if kind == "ERROR":
                    raise BenchError(f"watch {path} sent an error: {event['object']}")
                # What a watcher touches on every event: the type and the resourceVersion.
                _ = event["object"]["metadata"]["resourceVersion"]
                if kind != "MODIFIED":
                    continue
                count += 1
                if count == 1:
                    first = time.perf_counter()
            buffer = buffer[start:]
            if count == expected:
                last = time.perf_counter()
                break
        cpu = time.process_time() - cpu0
        wall = last - wall0
    if count != expected:
        raise BenchError(f"watch {path} ended after {count} of {expected} events")
    rate = (expected - 1) / (last - first) if last > first else float("inf")
    return {"events_per_s": rate, "cpu_per_event": cpu / expected, "wall": wall}


async def watch_child(args: argparse.Namespace) -> dict[str, Any]:
    """Decode ``updates`` MODIFIED events after ``resource_version``, live or replayed."""
    if args.http == REFERENCE:
        return await _watch_reference(args)
    path = _configmaps_path(args.namespace)
    params = {
        "watch": "true",
        "resourceVersion": args.resource_version,
        "allowWatchBookmarks": "false",
        "timeoutSeconds": str(WATCH_TIMEOUT),
    }
    decode = decoder(args.codec)
    client = http_client(args.http, args.kubeconfig, args.encoding)
    try:
        # A pooled connection first, so the watch does not pay for the TLS handshake.
        await client.get(path, {"limit": "1"})
        result = await _consume(
            client, path, params, decode, args.updates, announce=not args.replay
        )
        return {**result, "http_version": client.http_version}
    finally:
        await client.aclose()


async def _watch_reference(args: argparse.Namespace) -> dict[str, Any]:
    from setpoint.api import kinds
    from setpoint.client import Client

    async def consume(sp: Client, announce: bool) -> dict[str, float]:
        count = 0
        first = last = 0.0
        watch = sp.watch(
            kinds.ConfigMap,
            namespace=args.namespace,
            resource_version=args.resource_version,
            allow_bookmarks=False,
            timeout_seconds=WATCH_TIMEOUT,
        )
        async with watch:
            iterator = aiter(watch)
            if announce:
                # setpoint's Watch opens its stream on the first __anext__, so it cannot say
                # when the stream is up. Nothing is lost if the writer is early (the watch
                # starts from a resourceVersion), and the writer needs ~0.5 s to start anyway.
                pending = asyncio.ensure_future(anext(iterator))
                await asyncio.sleep(0.2)
                print("READY", flush=True)
            else:
                pending = asyncio.ensure_future(anext(iterator))
            wall0, cpu0 = time.perf_counter(), time.process_time()
            event = await pending
            while True:
                if event.type == "MODIFIED":
                    count += 1
                    if count == 1:
                        first = time.perf_counter()
                    if count == args.updates:
                        last = time.perf_counter()
                        break
                event = await anext(iterator)
            cpu = time.process_time() - cpu0
        rate = (args.updates - 1) / (last - first) if last > first else float("inf")
        return {"events_per_s": rate, "cpu_per_event": cpu / args.updates, "wall": last - wall0}

    async with Client.from_kubeconfig(args.kubeconfig) as sp:
        await sp.list_page(kinds.ConfigMap, namespace=args.namespace, limit=1)
        result = await consume(sp, not args.replay)
    return {**result, "http_version": "1.1"}


# -- child: writer -----------------------------------------------------------------------


async def writer_child(args: argparse.Namespace) -> dict[str, Any]:
    """Make ``updates`` merge patches, spread over distinct ConfigMaps, 16 at a time."""
    from setpoint.api import kinds
    from setpoint.client import Client
    from setpoint.client.patch import MergePatch

    # A value no earlier run has written: a patch that changes nothing makes no event.
    stamp = time.time_ns()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(args.updates):
        queue.put_nowait(i)

    async with Client.from_kubeconfig(args.kubeconfig) as sp:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                patch = MergePatch({"data": {"generation": f"{stamp}-{i}"}})
                await sp.patch(
                    kinds.ConfigMap, _object_name(i % args.objects), patch, namespace=args.namespace
                )

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(16)))
        elapsed = time.perf_counter() - start
    return {"updates_per_s": args.updates / elapsed}


# -- child: import time ------------------------------------------------------------------

_IMPORT_PROBE = """
import asyncio, ssl, sys, time, importlib
rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20
before_modules, before_rss = len(sys.modules), rss()
start = time.perf_counter()
for name in sys.argv[1].split(","):
    importlib.import_module(name)
elapsed = time.perf_counter() - start
print(elapsed, len(sys.modules) - before_modules, rss() - before_rss)
"""

IMPORT_TARGETS = {
    "aiohttp": "aiohttp",
    "httpx": "httpx",
    "httpx + h2 (http2=True)": "httpx,h2.connection,h2.events,h2.config,h2.settings",
    "json": "json",
    "orjson": "orjson",
    "msgspec": "msgspec.json",
    "setpoint.client (reference)": "setpoint.client",
}
"""What each import-time row imports. asyncio and ssl are loaded first in every probe: every
candidate needs them and setpoint imports them anyway, so they are not the library's cost."""


def measure_imports() -> dict[str, dict[str, float]]:
    """Median import time, added modules and RSS of each target, in fresh interpreters.

    The targets are interleaved run by run, so that a burst of load from the rest of the
    machine lands on all of them instead of on one target's consecutive runs.
    """
    samples: dict[str, list[tuple[float, int, float]]] = {label: [] for label in IMPORT_TARGETS}
    for attempt in range(IMPORT_RUNS + 1):
        for label, modules in IMPORT_TARGETS.items():
            out = subprocess.run(
                [sys.executable, "-c", _IMPORT_PROBE, modules],
                check=True,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout.split()
            if attempt:  # the first round only warms the page cache and .pyc files
                samples[label].append((float(out[0]), int(out[1]), float(out[2])))
    results: dict[str, dict[str, float]] = {}
    for label, runs in samples.items():
        times = Summary.of([s[0] for s in runs])
        results[label] = {
            "ms": times.median * 1000,
            "ms_low": times.low * 1000,
            "ms_high": times.high * 1000,
            "modules": float(runs[0][1]),
            "rss_mib": Summary.of([s[2] for s in runs]).median,
        }
    return results


# -- orchestration -----------------------------------------------------------------------


def _object_name(i: int) -> str:
    return f"cm-{i:05d}"


def _configmap(i: int, rng: random.Random) -> dict[str, Any]:
    """A realistic ConfigMap: a few labels, an annotation and ~1 KiB of varied data."""
    words = ("replicas", "timeout", "endpoint", "region", "retry", "cache", "level", "mode")
    lines = [f"{rng.choice(words)}_{k}: {rng.randrange(10**8):08d}" for k in range(38)]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": _object_name(i),
            "labels": {
                "app.kubernetes.io/name": f"service-{i % 37}",
                "app.kubernetes.io/part-of": "setpoint-bench",
                "tier": ("frontend", "backend", "data")[i % 3],
                "shard": str(i % 16),
            },
            "annotations": {"setpoint.dev/owner": f"team-{i % 11}"},
        },
        "data": {"settings.yaml": "\n".join(lines), "generation": "0"},
    }


async def populate(kubeconfig: str, objects: int) -> tuple[float, str]:
    """Create the namespace and ``objects`` ConfigMaps; return the seconds taken and the RV."""
    from setpoint.api import kinds
    from setpoint.client import Client

    rng = random.Random(42)
    bodies = [_configmap(i, rng) for i in range(objects)]
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    async with Client.from_kubeconfig(kubeconfig) as sp:
        await sp.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                body["metadata"]["namespace"] = NAMESPACE
                await sp.create(body)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(32)))
        elapsed = time.perf_counter() - start
        page = await sp.list_page(kinds.ConfigMap, namespace=NAMESPACE, limit=1)
    return elapsed, page.resource_version


def _child_argv(args: argparse.Namespace, mode: str, candidate: Candidate) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        mode,
        "--http",
        candidate.http,
        "--codec",
        candidate.codec,
        "--kubeconfig",
        args.kubeconfig,
        "--namespace",
        NAMESPACE,
        "--objects",
        str(args.objects),
        "--updates",
        str(args.updates),
        "--encoding",
        args.encoding,
    ]


def _last_json_line(output: str, what: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            value: dict[str, Any] = json.loads(line)
            return value
    raise BenchError(f"{what} printed no result; its output was:\n{output[-2000:]}")


def run_list(args: argparse.Namespace, candidate: Candidate, paginate: bool) -> dict[str, Any]:
    """One list-and-decode measurement in a fresh child process."""
    argv = [*_child_argv(args, "_list", candidate), "--paginate" if paginate else "--no-paginate"]
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if proc.returncode:
        raise BenchError(f"list child for {candidate.label} failed:\n{proc.stderr[-3000:]}")
    return _last_json_line(proc.stdout, f"list child for {candidate.label}")


def run_live(
    args: argparse.Namespace, group: Sequence[Candidate], resource_version: str
) -> tuple[dict[str, dict[str, Any]], float]:
    """Start a watcher per candidate, wait until all are watching, then run the writer once.

    Returns each watcher's result by label, and the writer's updates/s.
    """
    procs: list[tuple[Candidate, subprocess.Popen[str]]] = []
    argv_tail = ["--resource-version", resource_version, "--no-replay"]
    try:
        for candidate in group:
            argv = [*_child_argv(args, "_watch", candidate), *argv_tail]
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append((candidate, proc))
        for candidate, proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "READY":
                _, err = proc.communicate(timeout=10)
                raise BenchError(f"watcher for {candidate.label} did not start:\n{err[-3000:]}")
        writer = subprocess.run(
            _child_argv(args, "_write", Candidate(REFERENCE, "orjson")),
            check=False,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
        )
        if writer.returncode:
            raise BenchError(f"writer failed:\n{writer.stderr[-3000:]}")
        results: dict[str, dict[str, Any]] = {}
        for candidate, proc in procs:
            out, err = proc.communicate(timeout=WATCH_TIMEOUT)
            if proc.returncode:
                raise BenchError(f"watcher for {candidate.label} failed:\n{err[-3000:]}")
            results[candidate.label] = _last_json_line(out, f"watcher for {candidate.label}")
        rate = float(_last_json_line(writer.stdout, "writer")["updates_per_s"])
        return results, rate
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def run_replay(
    args: argparse.Namespace, candidate: Candidate, resource_version: str
) -> dict[str, Any]:
    """Replay the last run's events from the watch cache, in a fresh child, alone."""
    argv = [
        *_child_argv(args, "_watch", candidate),
        "--resource-version",
        resource_version,
        "--replay",
    ]
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=WATCH_TIMEOUT)
    if proc.returncode:
        raise BenchError(f"replay for {candidate.label} failed:\n{proc.stderr[-3000:]}")
    return _last_json_line(proc.stdout, f"replay for {candidate.label}")


def _current_rv(kubeconfig: str) -> str:
    async def get() -> str:
        from setpoint.api import kinds
        from setpoint.client import Client

        async with Client.from_kubeconfig(kubeconfig) as sp:
            page = await sp.list_page(kinds.ConfigMap, namespace=NAMESPACE, limit=1)
            return page.resource_version

    return asyncio.run(get())


def candidates(args: argparse.Namespace) -> list[Candidate]:
    """Every HTTP library x codec asked for on the command line, then the reference."""
    chosen = [Candidate(h, c) for h in args.http for c in args.codec]
    if args.reference and args.encoding == "gzip":
        chosen.append(Candidate(REFERENCE, "orjson"))
    return chosen


def measure_codecs(kubeconfig: str, codecs: Sequence[str], runs: int) -> dict[str, Any]:
    """Codec alone, in this process: decode and encode the real list body and one watch event.

    This separates the codec's share from everything else a request costs (TLS, HTTP parsing,
    gzip), which the end-to-end tables include.
    """

    async def fetch() -> tuple[bytes, bytes]:
        client = http_client("aiohttp", kubeconfig, "identity")
        try:
            path = _configmaps_path(NAMESPACE)
            body = await client.get(path, {})
            one = json.loads(await client.get(path, {"limit": "1"}))["items"][0]
            event = json.dumps({"type": "MODIFIED", "object": one}, separators=(",", ":"))
            return body, event.encode()
        finally:
            await client.aclose()

    import msgspec
    import orjson

    body, event = asyncio.run(fetch())
    encoders: dict[str, Callable[[Any], bytes]] = {
        "json": lambda o: json.dumps(o, separators=(",", ":")).encode(),
        "orjson": orjson.dumps,
        "msgspec": msgspec.json.Encoder().encode,
    }
    results: dict[str, Any] = {"list_bytes": len(body), "event_bytes": len(event)}
    loops = 5_000
    names = ("list_decode", "list_decode_nogc", "list_encode", "event_decode")
    samples: dict[str, dict[str, list[float]]] = {c: {n: [] for n in names} for c in codecs}

    def timed(action: Callable[[], object], *, collect: bool = True) -> float:
        # A full collection first, so every codec starts from the same heap; with
        # collect=False the cyclic GC is also off while the action runs.
        gc.collect()
        if not collect:
            gc.disable()
        try:
            start = time.process_time()
            action()
            return time.process_time() - start
        finally:
            gc.enable()

    # Interleaved rounds in a rotating order, like the other measurements.
    for round_no in range(runs):
        shift = round_no % len(codecs)
        for codec in [*codecs[shift:], *codecs[:shift]]:
            got = samples[codec]
            decode, encode = decoder(codec), encoders[codec]
            got["list_decode"].append(timed(partial(decode, body)))
            got["list_decode_nogc"].append(timed(partial(decode, body), collect=False))
            got["list_encode"].append(timed(partial(encode, decode(body))))
            got["event_decode"].append(timed(partial(_repeat, decode, event, loops)) / loops)
    results["codecs"] = {
        codec: {name: Summary.of(values) for name, values in by_name.items()}
        for codec, by_name in samples.items()
    }
    return results


def _repeat(function: Callable[[bytes], object], argument: bytes, times: int) -> None:
    for _ in range(times):
        function(argument)


def main_run(args: argparse.Namespace) -> None:
    """Start a plane, populate it, measure every candidate, print Markdown tables."""
    from setpoint.testing import ControlPlane, ControlPlaneOptions

    chosen = candidates(args)
    raw: dict[str, Any] = {}
    started = time.perf_counter()
    if "imports" in args.parts:
        print(f"importing each library in fresh interpreters ({IMPORT_RUNS} runs)", file=sys.stderr)
        raw["imports"] = measure_imports()
    if set(args.parts) == {"imports"}:
        raw["elapsed"] = time.perf_counter() - started
        print(report(args, chosen, raw))
        return
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
        args.kubeconfig = str(plane.kubeconfig_path)
        raw["create_seconds"], _ = asyncio.run(populate(args.kubeconfig, args.objects))
        print(f"created {args.objects} ConfigMaps in {raw['create_seconds']:.1f}s", file=sys.stderr)
        if "codecs" in args.parts:
            raw["codecs"] = measure_codecs(args.kubeconfig, args.codec, args.runs)
        if "lists" in args.parts:
            raw["lists"] = measure_lists(args, chosen)
        if "watch" in args.parts:
            raw["watch"] = measure_watch(args, chosen)
    raw["elapsed"] = time.perf_counter() - started
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(raw, indent=1, default=repr))
    print(report(args, chosen, raw))


def _rotated(chosen: Sequence[Candidate], round_no: int) -> list[Candidate]:
    # Each round starts with a different candidate, so none always goes first or last.
    shift = round_no % len(chosen)
    return [*chosen[shift:], *chosen[:shift]]


def measure_lists(
    args: argparse.Namespace, chosen: Sequence[Candidate]
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every candidate, paginated and unpaginated, ``args.runs`` interleaved rounds."""
    lists: dict[str, dict[str, list[dict[str, Any]]]] = {
        c.label: {"paginated": [], "unpaginated": []} for c in chosen
    }
    for round_no in range(args.runs):
        for candidate in _rotated(chosen, round_no):
            for paginate in (True, False):
                key = "paginated" if paginate else "unpaginated"
                lists[candidate.label][key].append(run_list(args, candidate, paginate))
        print(f"list round {round_no + 1}/{args.runs} done", file=sys.stderr)
    return lists


def measure_watch(args: argparse.Namespace, chosen: Sequence[Candidate]) -> dict[str, Any]:
    """Live watches during a writer run, then a replay per candidate, ``watch_runs`` rounds."""
    watches: dict[str, list[dict[str, Any]]] = {c.label: [] for c in chosen}
    for round_no in range(args.watch_runs):
        order = _rotated(chosen, round_no)
        # Shared (default): every watcher sees the same writer run at the same time, so
        # they all face the same load; solo: one watcher per writer run (slower).
        groups = [[c] for c in order] if args.watch_solo else [order]
        for group in groups:
            rv = _current_rv(args.kubeconfig)
            live, writer_rate = run_live(args, group, rv)
            # The replays run one at a time right after, while the watch cache still
            # holds the events.
            for candidate in group:
                watches[candidate.label].append(
                    {
                        "live": live[candidate.label],
                        "backlog": run_replay(args, candidate, rv),
                        "writer": {"updates_per_s": writer_rate},
                    }
                )
        print(f"watch round {round_no + 1}/{args.watch_runs} done", file=sys.stderr)
    return watches


def _raw_only(chosen: Sequence[Candidate]) -> list[Candidate]:
    return [c for c in chosen if not c.is_reference]


def report(args: argparse.Namespace, chosen: Sequence[Candidate], raw: dict[str, Any]) -> str:
    """Markdown for every part that ran, each with ratios to the best candidate of this run."""
    out = [run_header(), ""]
    if "create_seconds" in raw:
        out.append(
            f"{args.objects} ConfigMaps; creating them took {raw['create_seconds']:.0f}s; "
            f"whole run {raw['elapsed'] / 60:.1f} min."
        )
        out.append("")
    if "lists" in raw:
        out += _report_lists(args, chosen, raw["lists"])
    if "watch" in raw:
        out += _report_watch(args, chosen, raw["watch"])
    if "codecs" in raw:
        out += _report_codecs(args, raw["codecs"])
    if "imports" in raw:
        out += _report_imports(raw["imports"])
    return "\n".join(out).rstrip() + "\n"


def _report_lists(
    args: argparse.Namespace, chosen: Sequence[Candidate], lists: dict[str, Any]
) -> list[str]:
    out: list[str] = []
    sample = lists[_raw_only(chosen)[0].label]["unpaginated"][0]
    out.append(
        f"The unpaginated list is {sample['bytes'] / 2**20:.1f} MiB of JSON "
        f"(Accept-Encoding: {args.encoding}; the server answered "
        f"Content-Encoding: {sample['content_encoding']})."
    )
    out.append("")
    for key in ("paginated", "unpaginated"):
        title = f"limit={PAGE_SIZE}" if key == "paginated" else "one request"
        runs = {c.label: lists[c.label][key] for c in chosen}
        wall = {label: Summary.of([r["wall"] for r in rs]) for label, rs in runs.items()}
        cpu = {label: Summary.of([r["cpu"] for r in rs]) for label, rs in runs.items()}
        best_wall = min(wall[c.label].median for c in _raw_only(chosen))
        best_cpu = min(cpu[c.label].median for c in _raw_only(chosen))
        rows = []
        for c in sorted(chosen, key=lambda c: cpu[c.label].median):
            ready = Summary.of([r["rss_ready"] for r in runs[c.label]]).median
            peak = Summary.of([r["rss_peak"] for r in runs[c.label]]).median
            rows.append(
                [
                    c.label,
                    wall[c.label].spread(1000),
                    ratio(wall[c.label].median, best_wall),
                    cpu[c.label].spread(1000),
                    ratio(cpu[c.label].median, best_cpu),
                    f"{ready:.0f} / {peak:.0f}",
                    f"{peak - ready:.0f}",
                ]
            )
        out.append(
            f"**List-and-decode {args.objects} ConfigMaps, {title}** (median [min-max] of "
            f"{args.runs} runs, each in a fresh process; RSS 'ready' is after a warm-up request, "
            "'growth' is peak minus ready, the list's own cost):"
        )
        out.append("")
        headers = ["candidate", "wall ms", "wall ratio", "client CPU ms", "CPU ratio"]
        headers += ["RSS ready / peak MiB", "growth MiB"]
        out.append(markdown_table(headers, rows))
        out.append("")
    return out


def _report_watch(
    args: argparse.Namespace, chosen: Sequence[Candidate], watches: dict[str, Any]
) -> list[str]:
    def summary(label: str, phase: str, field: str) -> Summary:
        return Summary.of([r[phase][field] for r in watches[label]])

    raw_only = _raw_only(chosen)
    live_cpu = min(summary(c.label, "live", "cpu_per_event").median for c in raw_only)
    backlog_cpu = min(summary(c.label, "backlog", "cpu_per_event").median for c in raw_only)
    backlog_rate = max(summary(c.label, "backlog", "events_per_s").median for c in raw_only)
    writer = Summary.of([r["writer"]["updates_per_s"] for rs in watches.values() for r in rs])
    rows = []
    for c in sorted(chosen, key=lambda c: summary(c.label, "live", "cpu_per_event").median):
        live = summary(c.label, "live", "cpu_per_event")
        backlog = summary(c.label, "backlog", "cpu_per_event")
        rate = summary(c.label, "backlog", "events_per_s")
        rows.append(
            [
                c.label,
                summary(c.label, "live", "events_per_s").spread(),
                live.spread(1e6, 1),
                ratio(live.median, live_cpu),
                rate.spread(),
                ratio(backlog_rate, rate.median),
                backlog.spread(1e6, 1),
                ratio(backlog.median, backlog_cpu),
            ]
        )
    mode = (
        "each watcher alone, with its own writer run"
        if args.watch_solo
        else "all watchers at once on the same writer run"
    )
    out = [
        f"**Watch, {args.updates} updates per run** (median [min-max] of {args.watch_runs} runs. "
        f"Live: {mode}; the writer, a separate process, made {writer.spread()} updates/s. "
        "Backlog: the same events replayed from the watch cache, one watcher at a time. "
        "'time ratio' is the best backlog rate divided by this one):",
        "",
    ]
    headers = ["candidate", "live events/s", "live CPU us/event", "CPU ratio"]
    headers += ["backlog events/s", "time ratio", "backlog CPU us/event", "CPU ratio"]
    out += [markdown_table(headers, rows), ""]
    return out


def _report_codecs(args: argparse.Namespace, codecs: dict[str, Any]) -> list[str]:
    table: dict[str, dict[str, Summary]] = codecs["codecs"]
    best = {
        name: min(table[c][name].median for c in table)
        for name in ("list_decode", "list_decode_nogc", "list_encode", "event_decode")
    }
    rows = []
    for codec, s in sorted(table.items(), key=lambda kv: kv[1]["list_decode"].median):
        rows.append(
            [
                codec,
                s["list_decode"].spread(1000),
                ratio(s["list_decode"].median, best["list_decode"]),
                s["list_decode_nogc"].spread(1000),
                ratio(s["list_decode_nogc"].median, best["list_decode_nogc"]),
                s["list_encode"].spread(1000),
                ratio(s["list_encode"].median, best["list_encode"]),
                s["event_decode"].spread(1e6, 2),
                ratio(s["event_decode"].median, best["event_decode"]),
            ]
        )
    return [
        f"**Codec alone** (CPU time in one process, no HTTP; the {codecs['list_bytes'] / 2**20:.1f}"
        f" MiB list body and one {codecs['event_bytes']:,}-byte watch event from this run; "
        f"median [min-max] of {args.runs} runs):",
        "",
        markdown_table(
            [
                "codec",
                "decode list ms",
                "ratio",
                "same, GC off ms",
                "ratio",
                "encode list ms",
                "ratio",
                "decode event us",
                "ratio",
            ],
            rows,
        ),
        "",
    ]


def _report_imports(imports: dict[str, dict[str, float]]) -> list[str]:
    http_labels = [label for label in imports if label.split()[0] in ("aiohttp", "httpx")]
    best = min(imports[label]["ms"] for label in http_labels)
    rows = [
        [
            label,
            f"{v['ms']:.0f} [{v['ms_low']:.0f}-{v['ms_high']:.0f}]",
            ratio(v["ms"], best),
            f"{v['modules']:.0f}",
            f"{v['rss_mib']:.1f}",
        ]
        for label, v in imports.items()
    ]
    return [
        "**Import** (a fresh interpreter per run, with asyncio and ssl already loaded; median "
        f"[min-max] of {IMPORT_RUNS} interleaved runs after one warm-up round; the ratio is to "
        "the fastest HTTP library):",
        "",
        markdown_table(["import", "ms", "ratio", "modules added", "RSS added MiB"], rows),
        "",
    ]


# -- command line ------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The orchestrator's options, and the hidden child modes it runs itself."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "mode",
        nargs="?",
        default="run",
        choices=("run", "_list", "_watch", "_write"),
        help="'run' (default) runs the whole benchmark; the others are its child processes",
    )
    parser.add_argument("--objects", type=int, default=10_000, help="ConfigMaps to list")
    parser.add_argument("--updates", type=int, default=5_000, help="watch events per run")
    parser.add_argument("--runs", type=int, default=5, help="list runs per candidate")
    parser.add_argument("--watch-runs", type=int, default=5, help="watch runs per candidate")
    parser.add_argument(
        "--http", nargs="+", default=list(HTTP_LIBRARIES), choices=(*HTTP_LIBRARIES, REFERENCE)
    )
    parser.add_argument("--codec", nargs="+", default=list(CODECS), choices=CODECS)
    parser.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="leave out the setpoint Client reference row",
    )
    parser.add_argument(
        "--encoding",
        default="gzip",
        choices=("gzip", "identity"),
        help="Accept-Encoding sent by the raw candidates (gzip is every library's default)",
    )
    parser.add_argument(
        "--watch-solo",
        action="store_true",
        help="run one live watcher per writer run instead of all at once (takes ~10x longer)",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        default=list(PARTS),
        choices=PARTS,
        help="which measurements to run (default: all)",
    )
    parser.add_argument("--json-out", help="also write the raw measurements to this file")
    # Child-only options.
    parser.add_argument("--kubeconfig", default="", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", default=NAMESPACE, help=argparse.SUPPRESS)
    parser.add_argument("--paginate", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    parser.add_argument("--resource-version", default="", help=argparse.SUPPRESS)
    parser.add_argument("--replay", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode != "run" and (len(args.http) != 1 or len(args.codec) != 1):
        parser.error("child modes take exactly one --http and one --codec")
    if args.mode != "run":
        args.http, args.codec = args.http[0], args.codec[0]
    return args


def main() -> None:
    """Dispatch to the orchestrator or to one child mode (which prints one JSON line)."""
    args = parse_args()
    if args.mode == "run":
        main_run(args)
        return
    child = {"_list": list_child, "_watch": watch_child, "_write": writer_child}[args.mode]
    print(json.dumps(asyncio.run(child(args))), flush=True)


if __name__ == "__main__":
    main()
