"""Conversion benchmark: setpoint's /convert beside controller-runtime's, in one run.

Both webhooks convert the tenants example's Tenant between v1 (hub, storage) and v1alpha1
(``examples/tenants/tenants/api.py``; the Go peer is
``bench/peers/controller-runtime/conversion-webhook``, the same mapping and the same
conversion-data annotation). Each runs as its own process on a loopback port with the same
certificate. Two measurements, alternating between the two webhooks in blocks so that the
machine's drift hits both alike:

- **direct**: ConversionReviews of 1 and of 100 objects (v1 Tenants as the API server sends
  them, managedFields included, to v1alpha1) posted one after another over one keep-alive
  HTTPS connection by a Go HTTP/1.1 client, as kube-apiserver posts them
  (``bench/peers/controller-runtime/review-driver``; ``--driver python`` posts them from an
  aiohttp session in this process instead, whose own pauses then land in both webhooks'
  tails); p50 and p99 latency per review, objects converted per second, and the webhook
  process's CPU time per review (read from ``/proc``: steadier than wall time on a shared
  machine);
- **end to end**: on the local control plane, N Tenants stored at v1 are listed at v1alpha1
  through the API server, the CRD's clientConfig pointing at one webhook, then at the
  other; the median list time, the webhook's CPU time per list, and the same list at v1 (no
  conversion) as the floor. kube-apiserver runs with ``--watch-cache=false``: with its
  watch cache, the API server converts each object once, when it enters the cache kept for
  the version read, and serves every later list from memory without calling the webhook,
  so a list would measure the cache, not conversion. Without it, a list reads etcd and the
  API server converts the objects one by one: one single-object ConversionReview per
  object, one after another (a list of 200 made 200 reviews in an instrumented run), so
  the end-to-end time is mostly per-request cost, on both sides.

Results are printed as Markdown (for docs/benchmarks.md) and written as JSON to
``~/.cache/setpoint/bench/conversion-<date>.json``::

    .venv/bin/python bench/conversion/run.py --objects 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import json
import logging
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _common import markdown_table, ratio, run_header  # noqa: E402

from setpoint import Client, GroupVersionKind  # noqa: E402
from setpoint.crd import WebhookClientConfig, crd_for, import_targets  # noqa: E402
from setpoint.migrate.install import apply_crd  # noqa: E402
from setpoint.testing import ControlPlane, ControlPlaneOptions, free_port  # noqa: E402
from setpoint.testing.webhook import serving_certificate  # noqa: E402

CACHE = Path.home() / ".cache" / "setpoint" / "bench"
GO_PEER = REPO / "bench" / "peers" / "controller-runtime"
GO_BINARY = CACHE / "conversion-webhook-controller-runtime"
GO_DRIVER = CACHE / "review-driver"
TENANTS = REPO / "examples" / "tenants" / "tenants"
V1 = GroupVersionKind("tenants.setpoint.dev", "v1", "Tenant")
V1ALPHA1 = GroupVersionKind("tenants.setpoint.dev", "v1alpha1", "Tenant")
WEBHOOKS = ("setpoint", "controller-runtime")


def build_go_peer() -> None:
    """Build the controller-runtime webhook and the Go review driver into the cache (never
    into the repository)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for binary, package in ((GO_BINARY, "./conversion-webhook"), (GO_DRIVER, "./review-driver")):
        subprocess.run(
            ["go", "build", "-o", str(binary), package], cwd=GO_PEER, check=True, timeout=1800
        )


@dataclass
class Webhook:
    """One webhook process and where it listens."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        """Its /convert URL."""
        return f"https://127.0.0.1:{self.port}/convert"


@contextlib.contextmanager
def webhooks(cert_dir: Path, ca_pem: bytes) -> Iterator[dict[str, Webhook]]:
    """Start both webhooks; stop them at the end."""
    started: dict[str, Webhook] = {}
    try:
        for name in WEBHOOKS:
            port = free_port()
            if name == "setpoint":
                argv = [sys.executable, str(HERE / "setpoint_webhook.py")]
                argv += ["--port", str(port), "--cert-dir", str(cert_dir)]
            else:
                argv = [str(GO_BINARY), "-port", str(port), "-cert-dir", str(cert_dir)]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
            started[name] = Webhook(name, port, proc)
        for hook in started.values():
            wait_listening(hook, ca_pem)
        yield started
    finally:
        for hook in started.values():
            hook.proc.send_signal(signal.SIGTERM)
        for hook in started.values():
            try:
                hook.proc.wait(10)
            except subprocess.TimeoutExpired:
                hook.proc.kill()


def cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    """CPU time (user + system) the process has used so far, from ``/proc/<pid>/stat``."""
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_listening(hook: Webhook, ca_pem: bytes, timeout: float = 60.0) -> None:
    """Wait until ``hook`` completes a TLS handshake with its certificate."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hook.proc.poll() is not None:
            raise RuntimeError(f"the {hook.name} webhook exited with {hook.proc.returncode}")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", hook.port), 1) as sock,
            ctx.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return
        time.sleep(0.1)
    raise TimeoutError(f"the {hook.name} webhook did not listen within {timeout:.0f}s")


# -------------------------------------------------------------------------------- objects


def tenant(index: int) -> dict[str, Any]:
    """Tenant number ``index`` at v1, as a user creates it (containerDefaults set)."""
    name = f"t{index:05d}"
    return {
        "apiVersion": V1.api_version,
        "kind": "Tenant",
        "metadata": {"name": name, "labels": {"bench": "conversion"}},
        "spec": {
            "namespaces": [f"{name}-dev", f"{name}-prod"],
            "adminGroup": f"{name}-admins",
            "quota": {"cpu": "4", "memory": "8Gi", "pods": 20},
            "containerDefaults": {"cpu": "250m", "memory": "256Mi"},
            "isolated": index % 2 == 0,
        },
    }


def stored(index: int) -> dict[str, Any]:
    """Tenant ``index`` as the API server sends it to a webhook (server-set metadata)."""
    obj = tenant(index)
    obj["metadata"].update(
        uid=f"5f1c0a2e-0000-4000-8000-{index:012d}",
        resourceVersion=str(1000 + index),
        generation=1,
        creationTimestamp="2026-01-02T03:04:05Z",
        managedFields=[
            {
                "manager": "bench",
                "operation": "Update",
                "apiVersion": V1.api_version,
                "time": "2026-01-02T03:04:05Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:bench": {}}}, "f:spec": {}},
            }
        ],
    )
    return obj


def review(count: int, uid: str) -> bytes:
    """A ConversionReview of ``count`` stored Tenants to v1alpha1."""
    body = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": uid,
            "desiredAPIVersion": V1ALPHA1.api_version,
            "objects": [stored(i) for i in range(count)],
        },
    }
    return orjson.dumps(body)


# -------------------------------------------------------------------------------- direct


@dataclass
class Direct:
    """Latency of one review size against one webhook."""

    webhook: str
    objects: int
    requests: int
    p50_ms: float
    p99_ms: float
    objects_per_s: float
    cpu_ms: float
    """The webhook process's CPU time per review (steadier than wall time on a busy machine)."""


async def post_reviews(
    session: aiohttp.ClientSession, url: str, body: bytes, count: int
) -> list[float]:
    """Post ``body`` ``count`` times, one after another; each latency in seconds."""
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            answer = await r.read()
        latencies.append(time.perf_counter() - started)
        if r.status != 200 or b'"Success"' not in answer:
            raise RuntimeError(f"{url} answered {r.status}: {answer[:300]!r}")
    return latencies


def go_reviews(url: str, ca_file: Path, body_file: Path, count: int, warmup: int) -> list[float]:
    """Post the review in ``body_file`` with the Go driver; each timed latency in seconds."""
    argv = [str(GO_DRIVER), "-url", url, "-ca", str(ca_file), "-body", str(body_file)]
    argv += ["-n", str(count), "-warmup", str(warmup)]
    done = subprocess.run(argv, capture_output=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the review driver failed: {done.stderr.decode()[-500:]}")
    return [ns / 1e9 for ns in orjson.loads(done.stdout)]


async def go_block(
    hook: Webhook, *, ca_file: Path, body_file: Path, count: int, warmup: int
) -> list[float]:
    """One block of reviews to ``hook`` posted by the Go driver (in a thread)."""
    return await asyncio.to_thread(go_reviews, hook.url, ca_file, body_file, count, warmup)


async def python_block(
    hook: Webhook, *, session: aiohttp.ClientSession, body: bytes, count: int
) -> list[float]:
    """One block of reviews to ``hook`` posted by the aiohttp ``session``."""
    return await post_reviews(session, hook.url, body, count)


async def direct(
    hooks: dict[str, Webhook],
    ca_pem: bytes,
    sizes: dict[int, int],
    blocks: int,
    *,
    driver: str = "go",
    workdir: Path | None = None,
) -> list[Direct]:
    """Reviews of each size, ``sizes[size]`` per webhook, in ``blocks`` alternating blocks.

    ``driver="go"``: each block is posted by the Go review driver (a Go HTTP/1.1 client,
    as kube-apiserver is; its warm-up requests are untimed but their CPU is counted, so CPU
    per review divides by every request sent). ``driver="python"``: by an aiohttp session
    in this process, one connection for the whole run.
    """
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    results = []
    if driver == "go":
        assert workdir is not None
        ca_file = workdir / "driver-ca.pem"
        ca_file.write_bytes(ca_pem)
    for size, total in sizes.items():
        body = review(size, "bench-uid")
        latencies: dict[str, list[float]] = {name: [] for name in hooks}
        cpu: dict[str, float] = dict.fromkeys(hooks, 0.0)
        sent: dict[str, int] = dict.fromkeys(hooks, 0)
        per_block = total // blocks
        async with contextlib.AsyncExitStack() as stack:
            if driver == "go":
                body_file = workdir / f"review-{size}.json"  # type: ignore[operator]
                body_file.write_bytes(body)
                warmup = max(10, per_block // 10)

                post = functools.partial(
                    go_block, ca_file=ca_file, body_file=body_file, count=per_block, warmup=warmup
                )
                extra = warmup  # the driver's warm-up requests are sent in every block
            else:
                session = await stack.enter_async_context(
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1))
                )
                for hook in hooks.values():  # warm up: connection, caches, JIT-less paths
                    await post_reviews(session, hook.url, body, 50)

                post = functools.partial(python_block, session=session, body=body, count=per_block)
                extra = 0
            for block in range(blocks):
                order = list(hooks.values())
                if block % 2:
                    order.reverse()
                for hook in order:
                    before = cpu_seconds(hook.proc)
                    latencies[hook.name] += await post(hook)
                    cpu[hook.name] += cpu_seconds(hook.proc) - before
                    sent[hook.name] += per_block + extra
        for name, values in latencies.items():
            values.sort()
            p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
            results.append(
                Direct(
                    name,
                    size,
                    len(values),
                    statistics.median(values) * 1e3,
                    p99 * 1e3,
                    size * len(values) / sum(values),
                    cpu[name] / sent[name] * 1e3,
                )
            )
    return results


async def same_answers(hooks: dict[str, Webhook], ca_pem: bytes) -> str:
    """Whether both webhooks convert 100 Tenants to the same v1alpha1 specs."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    specs = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
        for hook in hooks.values():
            async with session.post(hook.url, data=review(100, "check")) as r:
                answer = orjson.loads(await r.read())
            if not answer.get("response", {}).get("convertedObjects"):
                raise RuntimeError(f"{hook.name} did not convert: {str(answer)[:1000]}")
            specs[hook.name] = [o["spec"] for o in answer["response"]["convertedObjects"]]
    a, b = specs.values()
    return "yes" if a == b else "NO: the specs differ"


# -------------------------------------------------------------------------------- end to end


@dataclass
class EndToEnd:
    """List times through the API server with the CRD pointing at one webhook."""

    webhook: str
    objects: int
    lists: int
    median_s: float
    low_s: float
    high_s: float
    cpu_ms: float
    """The webhook process's CPU time per list (0 for the floor, which calls no webhook)."""


async def create_all(client: Client, count: int) -> None:
    """Create ``count`` Tenants at v1, 16 at a time."""
    gate = asyncio.Semaphore(16)

    async def one(index: int) -> None:
        async with gate:
            await client.create(tenant(index))

    await asyncio.gather(*(one(i) for i in range(count)))


async def timed_lists(client: Client, kind: GroupVersionKind, count: int, n: int) -> list[float]:
    """``n`` full lists of ``kind`` (each must hold ``count`` objects); seconds each."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        listed = await client.list(kind)
        times.append(time.perf_counter() - started)
        if len(listed.items) != count:
            raise RuntimeError(f"listed {len(listed.items)} Tenants, expected {count}")
        spec = listed.items[-1]["spec"]
        if ("admins" in spec) != (kind == V1ALPHA1):
            raise RuntimeError(f"a Tenant listed at {kind.api_version} has the wrong spec: {spec}")
    return times


async def end_to_end(
    plane: ControlPlane,
    hooks: dict[str, Webhook],
    ca_pem: bytes,
    classes: Sequence[type[Any]],
    *,
    count: int,
    lists: int,
    rounds: int,
) -> list[EndToEnd]:
    """Create ``count`` Tenants; list them at v1alpha1 through each webhook, and at v1."""
    floor = "floor (v1, no conversion)"
    times: dict[str, list[float]] = {name: [] for name in (*hooks, floor)}
    cpu: dict[str, float] = dict.fromkeys(times, 0.0)
    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
        first = next(iter(hooks.values()))
        config = WebhookClientConfig(url=first.url, ca_bundle=ca_pem)
        await apply_crd(client, crd_for(*classes, webhook=config))
        await create_all(client, count)
        for index in range(rounds):
            order = list(hooks.values()) if index % 2 == 0 else list(reversed(hooks.values()))
            for hook in order:
                config = WebhookClientConfig(url=hook.url, ca_bundle=ca_pem)
                await apply_crd(client, crd_for(*classes, webhook=config))
                # The API server swaps the CRD's handler a moment after the update: warm up
                # until a list converts, then once more through the new handler.
                await warm_up(client, count)
                before = cpu_seconds(hook.proc)
                times[hook.name] += await timed_lists(client, V1ALPHA1, count, lists)
                cpu[hook.name] += cpu_seconds(hook.proc) - before
            times[floor] += await timed_lists(client, V1, count, lists)
    return [
        EndToEnd(
            name, count, len(v), statistics.median(v), min(v), max(v), cpu[name] / len(v) * 1e3
        )
        for name, v in times.items()
    ]


async def warm_up(client: Client, count: int) -> None:
    """List at v1alpha1 until it works twice in a row."""
    ok = 0
    deadline = time.monotonic() + 60
    while ok < 2:
        try:
            await timed_lists(client, V1ALPHA1, count, 1)
            ok += 1
        except Exception:
            ok = 0
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    await asyncio.sleep(1.0)


# -------------------------------------------------------------------------------- report


def report(
    argv: Sequence[str],
    direct_results: list[Direct],
    e2e: list[EndToEnd],
    same: str,
    loads: Sequence[Sequence[float]],
    *,
    driver: str = "go",
) -> str:
    """The Markdown section for docs/benchmarks.md; ``loads`` are the load averages seen."""
    by = {(d.webhook, d.objects): d for d in direct_results}
    rows = []
    for size in sorted({d.objects for d in direct_results}):
        base = by[("controller-runtime", size)]
        for name in WEBHOOKS:
            d = by[(name, size)]
            rows.append(
                [
                    f"{name}, {size} object{'s' if size > 1 else ''}",
                    f"{d.p50_ms:.2f}",
                    f"{d.p99_ms:.2f}",
                    f"{d.objects_per_s:,.0f}",
                    ratio(d.p50_ms, base.p50_ms),
                    f"{d.cpu_ms:.3f}",
                    ratio(d.cpu_ms, base.cpu_ms),
                ]
            )
    direct_table = markdown_table(
        [
            "review",
            "p50 ms",
            "p99 ms",
            "objects/s",
            "p50 vs controller-runtime",
            "webhook CPU ms/review",
            "CPU vs controller-runtime",
        ],
        rows,
    )
    e2e_by = {e.webhook: e for e in e2e}
    base_e2e = e2e_by["controller-runtime"]
    e2e_rows = [
        [
            name,
            f"{e.median_s * 1e3:.0f} [{e.low_s * 1e3:.0f}-{e.high_s * 1e3:.0f}]",
            str(e.lists),
            ratio(e.median_s, base_e2e.median_s),
            f"{e.cpu_ms:.0f}" if e.cpu_ms else "-",
        ]
        for name, e in e2e_by.items()
    ]
    e2e_table = markdown_table(
        [
            f"list of {base_e2e.objects} Tenants",
            "ms median [min-max]",
            "lists",
            "vs controller-runtime",
            "webhook CPU ms/list",
        ],
        e2e_rows,
    )
    one = by[("setpoint", 1)]
    e2e_ratio = e2e_by["setpoint"].median_s / base_e2e.median_s
    targets = [
        f"- Target p99 of a 1-object review <= 2 ms: setpoint {one.p99_ms:.2f} ms "
        f"({'met' if one.p99_ms <= 2.0 else 'NOT met'}; controller-runtime "
        f"{by[('controller-runtime', 1)].p99_ms:.2f} ms)",
        f"- Target end-to-end list <= 1.2x controller-runtime: {e2e_ratio:.2f}x "
        f"({'met' if e2e_ratio <= 1.2 else 'NOT met'})",
    ]
    return "\n".join(
        [
            run_header(argv),
            "- Load average (1/5/15 min) at start, after the direct reviews, at the end: "
            + "; ".join("/".join(f"{x:.2f}" for x in load) for load in loads),
            *targets,
            f"- Both webhooks convert to the same v1alpha1 specs: {same}",
            "",
            "Direct ConversionReviews (v1 -> v1alpha1, one keep-alive HTTPS connection, "
            f"sequential, posted by {'the Go review driver' if driver == 'go' else 'aiohttp'}):",
            "",
            direct_table,
            "",
            "End to end: list at v1alpha1 through kube-apiserver without its watch cache "
            "(one single-object review per object), floor = the same list at v1:",
            "",
            e2e_table,
        ]
    )


async def main_async(args: argparse.Namespace) -> str:
    """Run everything; return the report."""
    # Each list at v1alpha1 carries the version's deprecation warning: measured, not logged.
    logging.getLogger("setpoint.client").setLevel(logging.ERROR)
    package = import_targets([str(TENANTS)])[0]  # the package, then its submodules
    classes = (package.Tenant, package.TenantV1Alpha1)
    loads = [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="setpoint-bench-conversion-") as tmp:
        workdir = Path(tmp)
        ca, _ = serving_certificate(workdir / "certs")
        with webhooks(workdir / "certs", ca.cert_pem) as hooks:
            same = await same_answers(hooks, ca.cert_pem)
            print(f"same answers: {same}", file=sys.stderr)
            sizes = {1: args.one_object_reviews, 100: args.hundred_object_reviews}
            direct_results = await direct(
                hooks, ca.cert_pem, sizes, args.blocks, driver=args.driver, workdir=workdir
            )
            for d in direct_results:
                print(d, file=sys.stderr)
            loads.append(os.getloadavg())
            # Without the watch cache every list reads etcd and converts every object through
            # the webhook; with it, each object is converted once, when it enters the cache
            # of the version read, and lists are served from memory (module docstring).
            plane = ControlPlane(
                ControlPlaneOptions(
                    base_dir=workdir / "plane", apiserver_args={"watch-cache": "false"}
                )
            )
            plane.start()
            try:
                e2e = await end_to_end(
                    plane,
                    hooks,
                    ca.cert_pem,
                    classes,
                    count=args.objects,
                    lists=args.lists,
                    rounds=args.rounds,
                )
            finally:
                plane.stop()
            for e in e2e:
                print(e, file=sys.stderr)
    loads.append(os.getloadavg())
    text = report(sys.argv, direct_results, e2e, same, loads, driver=args.driver)
    CACHE.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    (CACHE / f"conversion-{stamp}.json").write_text(
        json.dumps(
            {
                "direct": [asdict(d) for d in direct_results],
                "end_to_end": [asdict(e) for e in e2e],
                "same_answers": same,
                "load": loads,
                "driver": args.driver,
            },
            indent=2,
        )
    )
    return text


def main() -> None:
    """Parse the flags, build the Go peer, run, print the Markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--objects", type=int, default=2000, help="Tenants listed end to end")
    parser.add_argument("--lists", type=int, default=5, help="lists per webhook per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the CRD")
    parser.add_argument("--one-object-reviews", type=int, default=4000)
    parser.add_argument("--hundred-object-reviews", type=int, default=400)
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks (direct)")
    parser.add_argument("--skip-build", action="store_true", help="use the cached Go binaries")
    parser.add_argument(
        "--driver",
        choices=("go", "python"),
        default="go",
        help="who posts the direct reviews: the Go review driver (as kube-apiserver, the "
        "default) or an aiohttp session in this process",
    )
    args = parser.parse_args()
    if not args.skip_build:
        build_go_peer()
    print(asyncio.run(main_async(args)))


if __name__ == "__main__":
    main()
