"""Event-loop lag while large ConversionReviews arrive (issue 27, finding 2).

One child process runs, on one event loop, what an operator's Pod runs there: the webhook
server (the tenants example's ``/convert``), a probe server (``/healthz``, plain HTTP) and a
coroutine ticking every 5 ms that records how late each tick wakes (the loop's lag). This
process then, from other threads, polls ``/healthz`` every 10 ms over a kept-alive
connection and posts reviews to ``/convert``; at the end the child reports its largest and
99th-percentile tick lag and its peak RSS (``VmHWM``). One child per scenario, so each peak
is its own:

- ``idle``: nothing but probes (the floor);
- ``at-cap``: two reviews at once, each of Tenants as the API server sends them, sized just
  under ``--cap-mib`` (the conversion cap);
- ``hostile``: one ConversionReview of ``--hostile-mib`` MiB of empty objects ``{}`` (the
  review of finding 2: 59 MiB);
- the worst shapes within the limits (``WebhookServerOptions`` defaults of this tree):
  ``max-values``, as many ``{}`` as ``max_review_values`` allows (the longest scan of the
  ``objects`` list); ``max-objects``, ``max_review_objects`` of them (each converted and
  refused); ``max-object``, one Tenant of ``max_object_size`` bytes whose labels hold as
  many keys as fit (the longest single decode); ``scalars``, ``max_review_values`` numbers
  where objects belong.

Run it against any tree: ``--tree DIR`` puts ``DIR/src`` first on the child's path (an old
commit checked out with ``git worktree add ../wt-old COMMIT``)::

    .venv/bin/python bench/conversion/loop_lag.py --label new
    .venv/bin/python bench/conversion/loop_lag.py --label old --tree ../wt-old --cap-mib 16

Prints one Markdown row per scenario. No time is asserted: it is a measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TENANTS = REPO / "examples" / "tenants" / "tenants"
TICK = 0.005


# ------------------------------------------------------------------------------ the child


async def serve(port: int, probe_port: int, cert_dir: str) -> None:
    """The operator side: webhook + probe server + ticker on one loop, until SIGTERM."""
    from setpoint.crd import import_targets
    from setpoint.observability.metrics import Metrics
    from setpoint.server.address import BindAddress
    from setpoint.server.http import Http1Server, HttpRequest, HttpResponse
    from setpoint.webhook import CertificateDirectory, WebhookServer, WebhookServerOptions

    package = import_targets([str(TENANTS)])[0]
    webhook = WebhookServer(
        WebhookServerOptions(
            bind_address=f"127.0.0.1:{port}", certificate=CertificateDirectory(cert_dir)
        ),
        metrics=Metrics.isolated(),
    )
    webhook.add_conversion(package.Tenant, package.TenantV1Alpha1)

    async def healthz(request: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"ok\n")

    probe = Http1Server("probe", BindAddress("127.0.0.1", probe_port), healthz)
    await webhook.start()
    await probe.start()
    lags: list[float] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def tick() -> None:
        while True:
            before = loop.time()
            await asyncio.sleep(TICK)
            lags.append(loop.time() - before - TICK)

    collections: list[float] = []  # seconds each full (generation 2) collection held the GIL
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                collections.append(time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)
    ticker = asyncio.create_task(tick())
    print("started", flush=True)
    await stop.wait()
    ticker.cancel()
    lags.sort()
    report = {
        "ticks": len(lags),
        "late_ticks": {
            f">{bound}ms": sum(1 for lag in lags if lag * 1e3 > bound) for bound in (10, 20, 40, 80)
        },
        "full_gcs_ms": [round(took * 1e3) for took in collections],
        "max_lag_ms": lags[-1] * 1e3 if lags else 0.0,
        "p99_lag_ms": lags[int(len(lags) * 0.99)] * 1e3 if lags else 0.0,
        "peak_rss_mib": _vm("VmHWM"),
    }
    print(json.dumps(report), flush=True)
    await probe.stop(1.0)
    await webhook.stop(1.0)


def _vm(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


# ------------------------------------------------------------------------------ the driver


def tenants_review(size: int, uid: str) -> bytes:
    """A ConversionReview of Tenants (as the conversion benchmark sends them) under ``size``."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from run import stored

    one = len(json.dumps(stored(0), separators=(",", ":")))
    objects = [stored(i) for i in range(max(1, (size - 300) // (one + 1)))]
    body = json.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": uid,
                "desiredAPIVersion": "tenants.setpoint.dev/v1alpha1",
                "objects": objects,
            },
        },
        separators=(",", ":"),
    ).encode()
    while len(body) > size:  # trim to fit (names grow with the index)
        objects.pop()
        body = json.dumps(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview",
                "request": {
                    "uid": uid,
                    "desiredAPIVersion": "tenants.setpoint.dev/v1alpha1",
                    "objects": objects,
                },
            },
            separators=(",", ":"),
        ).encode()
    return body


def hostile_review(size: int) -> bytes:
    """Finding 2's review: ``size`` bytes, nearly all of them ``{},``."""
    head = (
        b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":'
        b'{"uid":"h","desiredAPIVersion":"tenants.setpoint.dev/v1alpha1","objects":['
    )
    count = (size - len(head) - 3) // 3
    return head + (b"{}," * count)[:-1] + b"]}}"


def envelope(objects: bytes, uid: str = "h") -> bytes:
    """A ConversionReview to v1alpha1 around ``objects`` (the JSON list's bytes)."""
    return (
        b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":'
        b'{"uid":"' + uid.encode() + b'","desiredAPIVersion":"tenants.setpoint.dev/v1alpha1",'
        b'"objects":' + objects + b"}}"
    )


def empty_objects(count: int) -> bytes:
    """``count`` empty objects ``{}`` in a review (two JSON values each, as counted)."""
    return envelope(b"[" + b",".join([b"{}"] * count) + b"]")


def scalars(count: int) -> bytes:
    """``count`` numbers where objects belong (one JSON value each)."""
    return envelope(b"[" + b",".join([b"1"] * count) + b"]")


def widest_object(size: int) -> bytes:
    """One Tenant of about ``size`` bytes whose labels hold as many short keys as fit."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    from run import stored

    obj = stored(0)
    one = len(json.dumps(obj, separators=(",", ":")))
    count = (size - one - 64) // len('"k0000000":"",')
    obj["metadata"]["labels"] = {f"k{i:07d}": "" for i in range(count)}
    return envelope(b"[" + json.dumps(obj, separators=(",", ":")).encode() + b"]")


class Prober(threading.Thread):
    """GET /healthz every 10 ms over one kept-alive connection; records each latency."""

    def __init__(self, port: int) -> None:
        super().__init__(name="prober", daemon=True)
        self.port = port
        self.latencies: list[float] = []
        self.failures = 0
        self.done = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self.done.is_set():
            started = time.perf_counter()
            try:
                connection.request("GET", "/healthz")
                connection.getresponse().read()
                self.latencies.append(time.perf_counter() - started)
            except (OSError, http.client.HTTPException):
                self.failures += 1
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            time.sleep(0.01)
        connection.close()


def post(port: int, context: ssl.SSLContext, body: bytes, out: list[Any]) -> None:
    """POST one review to /convert; appends (status, seconds, answer bytes) to ``out``."""
    started = time.perf_counter()
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=600)
    try:
        connection.request(
            "POST", "/convert", body=body, headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        answer = response.read()
        out.append((response.status, time.perf_counter() - started, len(answer)))
    except (OSError, http.client.HTTPException) as exc:
        out.append((type(exc).__name__, time.perf_counter() - started, 0))
    finally:
        connection.close()


def scenario(
    name: str, tree: Path | None, bodies: list[bytes], cert_dir: Path, ca_pem: bytes
) -> dict[str, Any]:
    """Run one child, post ``bodies`` at once while probing; the child's report and ours."""
    from setpoint.testing import free_port

    port, probe_port = free_port(), free_port()
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree / "src")
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), str(probe_port), str(cert_dir)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "started":
        child.kill()
        raise RuntimeError(f"the {name} child did not start")
    context = ssl.create_default_context(cadata=ca_pem.decode())
    prober = Prober(probe_port)
    prober.start()
    time.sleep(1.0)  # a floor of probes before the reviews
    results: list[Any] = []
    posters = [threading.Thread(target=post, args=(port, context, b, results)) for b in bodies]
    for poster in posters:
        poster.start()
    for poster in posters:
        poster.join()
    time.sleep(1.0)
    prober.done.set()
    prober.join()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=120)
    report = json.loads(out.strip().splitlines()[-1])
    latencies = sorted(prober.latencies)
    report.update(
        scenario=name,
        reviews=[(s, round(t, 2), n) for s, t, n in results],
        probes=len(latencies),
        probe_failures=prober.failures,
        probe_p99_ms=latencies[int(len(latencies) * 0.99)] * 1e3 if latencies else None,
        probe_max_ms=latencies[-1] * 1e3 if latencies else None,
        probe_median_ms=statistics.median(latencies) * 1e3 if latencies else None,
    )
    return report


def main() -> None:
    """Parse the flags; serve (child) or drive (parent)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--label", default="this tree")
    parser.add_argument("--tree", type=Path, help="run the child on DIR/src (another commit)")
    parser.add_argument("--cap-mib", type=float, default=16.0, help="conversion cap to fill")
    parser.add_argument("--hostile-mib", type=float, default=59.0)
    parser.add_argument("--scenarios", default="idle,at-cap,hostile")
    parser.add_argument(
        "--late",
        action="store_true",
        help="also print how many ticks were late by >10/20/40/80 ms, and each full garbage "
        "collection's length",
    )
    args = parser.parse_args()
    if args.serve:
        port, probe_port, cert_dir = args.serve
        asyncio.run(serve(int(port), int(probe_port), cert_dir))
        return
    from setpoint.testing.webhook import serving_certificate
    from setpoint.webhook import WebhookServerOptions

    mib = 1024 * 1024
    limits = WebhookServerOptions()
    bodies = {
        "idle": lambda: [],
        "at-cap": lambda: [tenants_review(int(args.cap_mib * mib) - 4096, f"c{i}") for i in (1, 2)],
        "hostile": lambda: [hostile_review(int(args.hostile_mib * mib))],
        "max-values": lambda: [empty_objects(limits.max_review_values // 2 - 8)],
        "max-objects": lambda: [empty_objects(limits.max_review_objects)],
        "max-object": lambda: [widest_object(limits.max_object_size - 512)],
        "scalars": lambda: [scalars(limits.max_review_values - 16)],
    }
    with tempfile.TemporaryDirectory() as tmp:
        ca, _ = serving_certificate(Path(tmp))
        print(
            "| tree | scenario | reviews (status, s) | max lag ms | p99 lag ms | "
            "probe p99 ms | probe max ms | probe failures | peak RSS MiB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name in args.scenarios.split(","):
            report = scenario(name, args.tree, bodies[name](), Path(tmp), ca.cert_pem)
            reviews = ", ".join(f"{s} {t}" for s, t, _ in report["reviews"]) or "none"
            print(
                f"| {args.label} | {name} | {reviews} | {report['max_lag_ms']:.0f} | "
                f"{report['p99_lag_ms']:.1f} | {report['probe_p99_ms']:.1f} | "
                f"{report['probe_max_ms']:.0f} | {report['probe_failures']} | "
                f"{report['peak_rss_mib']:.0f} |",
                flush=True,
            )
            if args.late:
                print(
                    f"<!-- {name}: {report['ticks']} ticks, late {report['late_ticks']}, full "
                    f"garbage collections (ms) {report['full_gcs_ms']} -->"
                )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
