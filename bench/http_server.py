"""Server CPU and latency per request, two source trees in the same run; and the slow-body attack.

``compare`` starts one ``Http1Server`` per source tree (``--tree NAME=SRC``, e.g. the old
hand-written parser from a ``git worktree`` of 113a4fb against this checkout's llhttp
parser), each in its own child process with ``PYTHONPATH`` set to that tree, then sends
requests over loopback on one kept-alive connection per server, one at a time, and reports
the server process's CPU per request (from ``/proc``) and the client-observed latency
(p50, p99), per tree and workload, over interleaved rounds, with the ratio to the first
tree. Workloads: ``small`` (a webhook-like POST of 1 KiB of JSON with the API server's
headers) and ``1mib`` (a POST of 1 MiB, as a large AdmissionReview arrives: in 64 KiB
writes)::

    git worktree add ../setpoint-113a4fb 113a4fb
    .venv/bin/python bench/http_server.py compare --tree old=../setpoint-113a4fb/src \\
        --tree llhttp=src --rounds 6

``instructions`` counts, under valgrind, the instructions one server connection spends per
request of each workload (the connection protocol on an in-process fake transport: parsing,
the handler's task, the answer's write; no sockets), for each tree: exact where CPU time on a
shared machine is not (counts repeat within 0.1%)::

    .venv/bin/python bench/http_server.py instructions --tree old=../setpoint-113a4fb/src \\
        --tree llhttp=src

``slow-bodies`` reproduces issue 27's finding 1: ``--connections`` clients each declare a
``--size`` MiB body to a server configured as the webhook's (64 MiB body cap) and send it
slowly, all at once; the server's RSS before, at its peak, and the answers the clients got::

    .venv/bin/python bench/http_server.py slow-bodies --tree old=../setpoint-113a4fb/src \\
        --tree llhttp=src --connections 8 --size 60
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Summary, markdown_table, proc_stats, ratio, run_header

SERVER = """
import asyncio, sys
from setpoint.server import BindAddress, Http1Server, HttpResponse, HttpServerOptions

async def answer(request):
    return HttpResponse(200, b'{"len":%d}' % len(request.body), "application/json")

async def main():
    options = HttpServerOptions(max_body_size=int(sys.argv[1]), body_timeout=60.0)
    server = Http1Server("bench", BindAddress("127.0.0.1", 0), answer, options=options)
    await server.start()
    print(server.address[1], flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""

HEADERS = (
    b"Host: 127.0.0.1:9443\r\nUser-Agent: kube-apiserver-admission\r\n"
    b"Accept: application/json, */*\r\nContent-Type: application/json\r\n"
    b"Accept-Encoding: gzip\r\n"
)
SMALL = b'{"kind":"AdmissionReview","request":{"uid":"u","object":{"a":"' + b"x" * 960 + b'"}}}'
BIG = b"y" * (1 << 20)


class Server:
    """One child process serving with one source tree."""

    def __init__(self, name: str, src: str, max_body: int) -> None:
        self.name = name
        env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(max_body)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def request(body: bytes, path: bytes = b"/validate") -> bytes:
    return b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (path, HEADERS, len(body)) + body


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return head + await reader.readexactly(length)


async def loop_requests(port: int, raw: bytes, count: int, piece: int) -> list[float]:
    """``count`` requests on one connection, one at a time; each one's latency in seconds."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    latencies = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            for at in range(0, len(raw), piece):
                writer.write(raw[at : at + piece])
            await read_answer(reader)
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()
    return latencies


def compare(args: argparse.Namespace) -> None:
    trees = [tuple(t.split("=", 1)) for t in args.tree]
    servers = [Server(name, src, 8 << 20) for name, src in trees]
    workloads = {
        "small": (request(SMALL), args.requests, 1 << 20),
        "1mib": (request(BIG), max(50, args.requests // 40), 64 * 1024),
    }
    cpu: dict[tuple[str, str], list[float]] = {}
    lat: dict[tuple[str, str], list[float]] = {}
    try:
        for server in servers:  # warm up: imports, first connection
            asyncio.run(loop_requests(server.port, request(SMALL), 200, 1 << 20))
        for _ in range(args.rounds):
            for workload, (raw, count, piece) in workloads.items():
                for server in servers:
                    before = proc_stats(server.proc.pid).cpu_seconds
                    latencies = asyncio.run(loop_requests(server.port, raw, count, piece))
                    used = proc_stats(server.proc.pid).cpu_seconds - before
                    cpu.setdefault((workload, server.name), []).append(used / count)
                    lat.setdefault((workload, server.name), []).extend(latencies)
    finally:
        for server in servers:
            server.stop()
    rows = []
    for workload in workloads:
        base = Summary.of(cpu[(workload, servers[0].name)]).median
        for server in servers:
            per = Summary.of(cpu[(workload, server.name)])
            times = sorted(lat[(workload, server.name)])
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            rows.append(
                [
                    f"{workload}, {server.name}",
                    per.spread(1e6, 1),
                    ratio(per.median, base),
                    f"{statistics.median(times) * 1e3:.3f}",
                    f"{p99 * 1e3:.3f}",
                ]
            )
    print(run_header())
    print(f"- {args.rounds} interleaved rounds; small: {args.requests} requests per round\n")
    headers = ["workload, tree", "server CPU µs/request", "x first", "p50 ms", "p99 ms"]
    print(markdown_table(headers, rows))


CONNECTION = """
import asyncio, inspect, os, sys
from setpoint.server import HttpResponse
from setpoint.server import _http1 as m

HEADERS = @HEADERS@
WORKLOAD = sys.argv[1]
BODY = @SMALL@ if WORKLOAD == "small" else b"y" * (1 << 20)
REQ = b"POST /validate HTTP/1.1\\r\\n" + HEADERS
REQ += b"Content-Length: %d\\r\\n\\r\\n" % len(BODY) + BODY
PARTS = [REQ[i : i + 65536] for i in range(0, len(REQ), 65536)]  # as 64 KiB reads
ANSWER = HttpResponse(200, b'{"ok":1}', "application/json")

class Transport(asyncio.Transport):
    def __init__(self):
        super().__init__()
        self.writes = 0
    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default
    def write(self, data):
        self.writes += 1
    def is_closing(self):
        return False

async def serve(*args):
    return ANSWER

async def main():
    guard = {"max_connections": 1}
    if "body_budget" in inspect.signature(m.ConnectionGuard).parameters:
        guard["body_budget"] = 1 << 30
    settings = dict(
        guard=m.ConnectionGuard("bench", **guard), serve=serve, tls=None, max_body=8 << 20,
        header_timeout=30.0, idle_timeout=30.0, body_timeout=30.0,
    )
    if "body_limits" in m.ConnectionSettings.__dataclass_fields__:
        settings["body_limits"] = {}
    if "clock" in m.ConnectionSettings.__dataclass_fields__:
        from setpoint.api.clock import LoopClock
        settings["clock"] = LoopClock()
    protocol = m.new_connection(m.ConnectionSettings(**settings))()
    transport = Transport()
    protocol.connection_made(transport)
    for _ in range(int(sys.argv[2])):
        for part in PARTS:
            protocol.data_received(part)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    assert transport.writes == int(sys.argv[2])

asyncio.run(main())
""".replace("@HEADERS@", repr(HEADERS)).replace("@SMALL@", repr(SMALL))


def count_instructions(src: str, workload: str, requests: int) -> int:
    """valgrind's instruction count for ``requests`` requests on one connection."""
    from _common import VALGRIND, instruction_count

    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    done = subprocess.run(
        [*VALGRIND, sys.executable, "-c", CONNECTION, workload, str(requests)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return instruction_count(done.stderr)


def instructions(args: argparse.Namespace) -> None:
    trees = [tuple(t.split("=", 1)) for t in args.tree]
    rows = []
    for workload, (few, many) in {"small": (1000, 3000), "1mib": (20, 60)}.items():
        base = 0.0
        for name, src in trees:
            # The difference of two runs: start-up and imports cancel out.
            more = count_instructions(src, workload, many) - count_instructions(src, workload, few)
            per = more / (many - few)
            base = base or per
            rows.append([f"{workload}, {name}", f"{per / 1000:.1f}", ratio(per, base)])
    print(run_header())
    print("- one connection, in-process fake transport; small: 1 KiB POST, 1mib: in 64 KiB reads\n")
    print(markdown_table(["workload, tree", "k instructions/request", "x first"], rows))


async def slow_client(port: int, size: int, seconds: float) -> str:
    """Declare ``size`` bytes, send all but the last byte over ``seconds``; what came back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = request(b"", b"/convert").replace(b"Content-Length: 0", b"Content-Length: %d" % size)
    writer.write(head)
    answer = asyncio.create_task(reader.readuntil(b"\r\n"))  # a 503 comes at once
    piece = 256 * 1024
    steps = (size - 1) // piece
    try:
        for _ in range(steps):
            if answer.done() or writer.is_closing():
                break
            writer.write(BIG[:piece])
            await writer.drain()
            await asyncio.sleep(seconds / steps)
    except ConnectionError:
        pass
    try:
        async with asyncio.timeout(1):
            line = await answer
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        line = b"(no answer: still in flight)"
    writer.close()
    return line.decode(errors="replace").strip()


async def attack(
    port: int, pid: int, connections: int, size: int, seconds: float
) -> tuple[float, list[str]]:
    """Run the slow clients together; the server's peak RSS meanwhile, and their answers."""
    peak = 0.0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, proc_stats(pid).rss_mib)
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    answers = await asyncio.gather(*(slow_client(port, size, seconds) for _ in range(connections)))
    watcher.cancel()
    return peak, list(answers)


def slow_bodies(args: argparse.Namespace) -> None:
    rows = []
    for name, src in (tuple(t.split("=", 1)) for t in args.tree):
        server = Server(name, src, 64 << 20)  # the webhook server's cap before issue 27
        try:
            asyncio.run(loop_requests(server.port, request(SMALL), 50, 1 << 20))
            before = proc_stats(server.proc.pid).rss_mib
            peak, answers = asyncio.run(
                attack(
                    server.port, server.proc.pid, args.connections, args.size << 20, args.seconds
                )
            )
            kinds = sorted({a.split(" ", 2)[1] if a.startswith("HTTP/") else a for a in answers})
            counts = ", ".join(f"{sum(1 for a in answers if kind in a)}x {kind}" for kind in kinds)
            rows.append([name, f"{before:.1f}", f"{peak:.1f}", f"+{peak - before:.1f}", counts])
        finally:
            server.stop()
    print(run_header())
    print(
        f"- {args.connections} connections, each declaring {args.size} MiB and sending all but "
        f"its last byte over {args.seconds:.0f} s; server max_body_size 64 MiB\n"
    )
    print(markdown_table(["tree", "RSS before MiB", "peak MiB", "growth MiB", "answers"], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("compare")
    one.add_argument("--tree", action="append", required=True, help="NAME=SRC, first is the base")
    one.add_argument("--rounds", type=int, default=6)
    one.add_argument("--requests", type=int, default=4000)
    three = sub.add_parser("instructions")
    three.add_argument("--tree", action="append", required=True, help="NAME=SRC, first is the base")
    two = sub.add_parser("slow-bodies")
    two.add_argument("--tree", action="append", required=True, help="NAME=SRC")
    two.add_argument("--connections", type=int, default=8)
    two.add_argument("--size", type=int, default=60, help="MiB each client declares")
    two.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    {"compare": compare, "instructions": instructions, "slow-bodies": slow_bodies}[args.command](
        args
    )


if __name__ == "__main__":
    main()
