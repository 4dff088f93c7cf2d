"""Full against metadata-only informers of Secrets: bytes per cached object, CPU per event.

Not a test (issue 30, metadata-only watches). One local control plane holds ``--n`` Secrets
of ``--kib`` KiB each in one namespace. Each run spawns a fresh Python process (this script
with ``--child``) that syncs one cache informer of them, either

- ``full``: ``cache.informer(kinds.Secret)``, whole objects (the baseline), or
- ``metadata``: ``cache.informer(Metadata(kinds.Secret))``, ``PartialObjectMetadata``
  (``Accept: ...;as=PartialObjectMetadataList/PartialObjectMetadata;g=meta.k8s.io;v=v1``);

both list through a watch (``sendInitialEvents``, every object one ADDED event) and strip
managedFields (the cache's default transform). The child reports

- the bytes its store keeps per object (the encoded JSON the cache holds), and its RSS
  growth per object over the sync (after a ``gc.collect()``);
- CPU (user+system of the child) per event: over the sync (``--n`` ADDED events) and over
  ``--updates`` label patches the parent makes while the child watches (MODIFIED events;
  the child's CPU from its sync to the last one seen).

The same two informers in controller-runtime (``corev1.Secret`` and
``metav1.PartialObjectMetadata``, what ``WatchesMetadata`` watches, managedFields stripped
with ``cache.TransformStripManagedFields``) run side by side, from the Go peer
``bench/peers/controller-runtime`` (``-secrets full|metadata``, built first; ``--no-peer``
skips it). The Go child reports its live heap growth after a GC per object where the
Python one reports its store's bytes.

Runs alternate the candidates, ``--repeat`` times each; medians [min-max] and the ratio to
the same implementation's ``full``. The Secrets are created once (not measured)::

    .venv/bin/python bench/metadata_watch.py --n 10000 --kib 4 --updates 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import Summary, current_rss_mib, markdown_table, ratio, run_header

from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.api.metadata import Metadata
from setpoint.cache import Cache, CacheOptions, FuncHandler
from setpoint.client import Client, load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.testing import ControlPlane, ControlPlaneOptions

NAMESPACE = "bench-metadata"
MODES = ("full", "metadata")
GO_PEER = Path(__file__).resolve().parent / "peers" / "controller-runtime"
GO_BINARY = Path.home() / ".cache" / "setpoint" / "bench" / "metadata-watch-controller-runtime"
CANDIDATES = {
    "setpoint full": ("setpoint", "full"),
    "setpoint metadata": ("setpoint", "metadata"),
    "controller-runtime full": ("go", "full"),
    "controller-runtime metadata": ("go", "metadata"),
}


async def child(mode: str, kubeconfig: str, updates: int) -> None:
    """One measured process: sync, report, count ``updates`` MODIFIED events, report."""
    client = Client(load_kubeconfig(kubeconfig))
    cache = Cache(client, options=CacheOptions(namespaces=(NAMESPACE,)))
    kind: Any = Metadata(kinds.Secret) if mode == "metadata" else kinds.Secret
    seen = 0
    done = asyncio.Event()

    def updated(old: JsonObject, new: JsonObject) -> None:
        nonlocal seen
        seen += 1
        if seen >= updates:
            done.set()

    gc.collect()
    rss0 = current_rss_mib()
    cpu0 = time.process_time()
    informer = cache.informer(kind)
    informer.add_handler(FuncHandler(update=updated))
    await cache.start()
    await cache.wait_for_sync(900)
    sync_cpu = time.process_time() - cpu0
    gc.collect()
    rss1 = current_rss_mib()
    store = informer.store
    stored = 0
    for key in store:
        snapshot = store.snapshot(key)
        stored += len(snapshot) if isinstance(snapshot, bytes) else 0
    objects = len(store)
    print(json.dumps({"synced": objects}), flush=True)
    cpu1 = time.process_time()
    await asyncio.wait_for(done.wait(), 900)
    update_cpu = time.process_time() - cpu1
    print(
        json.dumps(
            {
                "objects": objects,
                "streamed": informer.stats.streamed_lists,
                "store_bytes": stored / objects,
                "rss_bytes": (rss1 - rss0) * 2**20 / objects,
                "sync_cpu_us": sync_cpu / objects * 1e6,
                "update_cpu_us": update_cpu / seen * 1e6,
            }
        ),
        flush=True,
    )
    await cache.stop(5)
    await client.close()


async def create_secrets(client: Client, n: int, kib: int) -> None:
    """``n`` Opaque Secrets with ``kib`` KiB of data each (32 creates in flight)."""
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    data = base64.b64encode(os.urandom(kib * 1024 * 3 // 4)).decode()
    gate = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with gate:
            await client.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": f"s-{i:05d}",
                        "namespace": NAMESPACE,
                        "labels": {"app": "bench"},
                    },
                    "type": "Opaque",
                    "data": {"payload": data},
                }
            )

    await asyncio.gather(*(one(i) for i in range(n)))


async def patch_secrets(client: Client, n: int, updates: int, value: str) -> None:
    """Change a label on the first ``updates`` Secrets (16 patches in flight)."""
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        async with gate:
            patch = MergePatch({"metadata": {"labels": {"round": value}}})
            await client.patch(kinds.Secret, f"s-{i % n:05d}", patch, namespace=NAMESPACE)

    await asyncio.gather(*(one(i) for i in range(updates)))


def build_go_peer() -> None:
    """Build the controller-runtime peer (its modules come from the Go module proxy)."""
    GO_BINARY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(GO_BINARY), "."], cwd=GO_PEER, check=True)


async def one_run(
    candidate: str, kubeconfig: str, client: Client, *, n: int, updates: int, value: str
) -> dict[str, Any]:
    """Spawn the child for ``candidate``, patch once it has synced, return its report."""
    impl, mode = CANDIDATES[candidate]
    if impl == "go":
        argv = [str(GO_BINARY), "-secrets", mode, "-namespace", NAMESPACE, "-updates"]
    else:
        argv = [sys.executable, __file__, "--child", mode, "--kubeconfig", kubeconfig, "--updates"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        str(updates),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": kubeconfig},
    )
    assert proc.stdout is not None
    try:
        first = json.loads(await proc.stdout.readline())
        if first.get("synced") != n:
            raise RuntimeError(f"{candidate}: synced {first} of {n} Secrets")
        await patch_secrets(client, n, updates, value)
        report: dict[str, Any] = json.loads(await proc.stdout.readline())
    finally:
        await proc.wait()
    return report


async def parent(args: argparse.Namespace) -> None:
    header = run_header()
    candidates = [c for c in CANDIDATES if args.peer or CANDIDATES[c][0] == "setpoint"]
    if args.peer:
        build_go_peer()
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
        kubeconfig = str(plane.kubeconfig_path)
        client = Client(load_kubeconfig(kubeconfig))
        started = time.monotonic()
        await create_secrets(client, args.n, args.kib)
        print(f"created {args.n} Secrets in {time.monotonic() - started:.0f}s", file=sys.stderr)
        results: dict[str, list[dict[str, Any]]] = {c: [] for c in candidates}
        for r in range(args.repeat):
            order = candidates if r % 2 == 0 else candidates[::-1]
            for i, candidate in enumerate(order):
                report = await one_run(
                    candidate, kubeconfig, client, n=args.n, updates=args.updates, value=f"{r}-{i}"
                )
                print(candidate, report, file=sys.stderr)
                results[candidate].append(report)
        await client.close()
    fields = [
        ("store_bytes", "bytes held per object (setpoint: store; Go: live heap)", 1.0, 0),
        ("rss_bytes", "RSS growth per object (bytes)", 1.0, 0),
        ("sync_cpu_us", "CPU per event, initial list (µs)", 1.0, 1),
        ("update_cpu_us", "CPU per event, updates (µs)", 1.0, 1),
    ]
    rows = []
    for key, label, scale, digits in fields:
        summaries = {c: Summary.of([r[key] for r in results[c]]) for c in candidates}
        cells = []
        for c in candidates:
            base = summaries[c.replace("metadata", "full")].median
            cells.append(
                f"{summaries[c].spread(scale, digits)} ({ratio(summaries[c].median, base)})"
            )
        rows.append([label, *cells])
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(header)
    print(
        f"- {args.n} Secrets of {args.kib} KiB, {args.updates} updates, {args.repeat} runs "
        f"each, interleaved; load average after: {load}"
    )
    print()
    print(markdown_table(["measure", *candidates], rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="Secrets (default 10000)")
    parser.add_argument("--kib", type=int, default=4, help="KiB of data per Secret")
    parser.add_argument("--updates", type=int, default=1000, help="label patches per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode")
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false", help="skip controller-runtime"
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.child, str(args.kubeconfig), args.updates))
    else:
        asyncio.run(parent(args))


if __name__ == "__main__":
    main()
