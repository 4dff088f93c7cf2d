"""The sharder's CPU per object it labels, and the hash ring's balance (issue 34).

Not a test. Two modes.

**CPU** (default). One local control plane (no nodes) holds ``--n`` unlabelled Widgets
(the converge benchmark's CRD). Each run spawns a fresh Python process (this script with
``--child``) that creates two shard Leases of a ring of its own, held by fake shards and
renewed far into the future, then runs a :class:`~setpoint.manager.sharder.Sharder` alone
(``every_controller``, 8 writers, the defaults) until every Widget carries the ring's shard
label. The child reports the process CPU (``time.process_time``: user + system of every
thread) from just before ``Sharder.start()`` to the last label seen, split into the start
(cache sync) and the labelling, per object, the wall time, the HTTP requests per object
(the client's request hook), and the API server's and etcd's CPU over the same span. Then
the parent writes every Widget's status once (as reconciles do; 16 writers) and the child
reports its CPU per such update event, which changes nothing the sharder decides by.
Between runs the parent strips the run's label and record again (not measured), so every
run labels the same objects from scratch. ``--status-kib K`` first gives every Widget a
status of K KiB (a condition's message): what a metadata-only watch does not carry.

``--trees before=PATH,after=.`` runs each named source tree's ``src`` (``PYTHONPATH``) in
the child, interleaved in a rotating order, ``--repeat`` rounds; a tree is a checkout or a ``git
archive`` of one (the before/after of a change, on one plane, in one run)::

    before=$(mktemp -d) && git archive HEAD~1 src | tar -x -C "$before"
    .venv/bin/python bench/sharder_cpu.py --n 2000 --repeat 3 \\
        --trees before="$before",after=.

``--profile DIR`` writes one cProfile file per child run there.

**Ring** (``--ring``, pure Python, no plane). For 2, 3 and 4 shards and ``--virtual-nodes``
100, 400 and 1000: over ``--sets`` random sets of shard ids (``<random host>-w<i>`` like
the workers of ``ManagerOptions.processes``, and random 8-hex ids), the largest shard's
share of the hash space (median, p90 and max; 1/n is perfect), and the cost of building a
4-shard ring and of one ``owner()`` lookup::

    .venv/bin/python bench/sharder_cpu.py --ring --sets 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import (
    Summary,
    cpu_seconds_of,
    markdown_table,
    pids_with_argument,
    ratio,
    run_header,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NAMESPACE = "bench-sharder"
LEASE_NAMESPACE = "bench-sharder-leases"
SHARDS = ("a", "b")
"""The two fake shards; each run's Leases are ``<ring>-a`` and ``<ring>-b``."""


# --------------------------------------------------------------------------------- ring mode


def _random_host(rng: random.Random) -> str:
    suffix = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(5))
    return f"widget-operator-{rng.randrange(16**10):010x}-{suffix}"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ring_mode(sets: int, seed: int, virtual_nodes: list[int], counts: list[int]) -> None:
    """Print the balance and cost tables of the ring (see the module docstring)."""
    from setpoint.manager.sharding import HashRing

    print(run_header())
    print(f"- {sets} random shard-id sets per row, seed {seed}\n")
    rows: list[list[str]] = []
    for style in ("worker", "random"):
        for n in counts:
            for vn in virtual_nodes:
                rng = random.Random(f"{seed}/{style}/{n}")  # same id sets for every vn
                largest: list[float] = []
                for _ in range(sets):
                    if style == "worker":
                        host = _random_host(rng)
                        ids = [f"{host}-w{i}" for i in range(n)]
                    else:
                        ids = [f"shard-{rng.randrange(16**8):08x}" for _ in range(n)]
                    shares = HashRing(ids, virtual_nodes=vn).shares()
                    largest.append(max(shares.values()))
                ideal = 1 / n
                rows.append(
                    [
                        style,
                        str(n),
                        str(vn),
                        f"{ideal * 100:.1f}%",
                        f"{statistics.median(largest) * 100:.1f}%",
                        f"{_percentile(largest, 0.9) * 100:.1f}%",
                        f"{max(largest) * 100:.1f}%",
                        f"{(statistics.median(largest) / ideal - 1) * 100:+.1f}%",
                    ]
                )
    print("Larger share of the hash space (largest shard's fraction):\n")
    print(
        markdown_table(
            ["ids", "shards", "virtual nodes", "ideal", "median", "p90", "max", "median over"],
            rows,
        )
    )
    cost_rows: list[list[str]] = []
    keys = [f"uid/{random.Random(i).getrandbits(128):032x}" for i in range(20000)]
    for vn in virtual_nodes:
        ids = [f"widget-operator-7d9f-w{i}" for i in range(4)]
        builds: list[float] = []
        for _ in range(20):
            t0 = time.perf_counter()
            ring = HashRing(ids, virtual_nodes=vn)
            builds.append(time.perf_counter() - t0)
        lookups: list[float] = []
        for _ in range(5):
            t0 = time.perf_counter()
            for key in keys:
                ring.owner(key)
            lookups.append((time.perf_counter() - t0) / len(keys))
        cost_rows.append(
            [
                str(vn),
                f"{Summary.of(builds).median * 1e3:.2f}",
                f"{Summary.of(lookups).median * 1e6:.2f}",
            ]
        )
    print("\nCost (4 shards; build: median of 20, lookup: median of 5 x 20,000 keys):\n")
    print(markdown_table(["virtual nodes", "build ms", "owner() µs"], cost_rows))


# --------------------------------------------------------------------------------- CPU mode


def _lease(name: str, ring: str) -> dict[str, Any]:
    from setpoint.manager.sharding import RING_LABEL

    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "labels": {RING_LABEL: ring}},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    }


async def child(kubeconfig: str, ring: str, n: int, profile: str | None) -> None:
    """One measured sharder: print one JSON line with its CPU, wall time and requests."""
    import cProfile

    from setpoint.cache import FuncHandler
    from setpoint.client import Client, load_kubeconfig
    from setpoint.manager.sharder import Sharder
    from setpoint.manager.sharding import ShardingOptions, shard_of

    sys.path.insert(0, str(HERE / "converge"))
    from run import WIDGET  # the converge benchmark's kind

    requests: Counter[str] = Counter()

    def on_request(method: str, host: str, code: str) -> None:
        requests[method] += 1

    client = Client(load_kubeconfig(kubeconfig), on_request=on_request)
    for name in SHARDS:
        await client.create(_lease(f"{ring}-{name}", ring))
    requests.clear()
    sharder = Sharder(
        client,
        ShardingOptions(ring=ring, every_controller=True, resync_period=3600.0),
        namespace=LEASE_NAMESPACE,
        kinds=[WIDGET],
        identity="bench",
    )
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await sharder.start()
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    cache = sharder._cache  # the bench watches the sharder's own informer
    assert cache is not None
    informers = cache._informers  # whichever one the sharder made
    informer = next(i for k, i in informers.items() if getattr(k, "gvk", k) == WIDGET)
    labelled: dict[Any, str] = {}
    done = asyncio.Event()

    def seen(obj: Any) -> None:
        shard = shard_of(obj, ring)
        if shard:
            labelled[obj["metadata"]["name"]] = shard
            if len(labelled) >= n:
                done.set()

    informer.add_handler(FuncHandler(add=lambda obj, _: seen(obj), update=lambda _, obj: seen(obj)))
    await done.wait()
    cpu1, wall1 = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)  # type: ignore[arg-type]
    labelling = {
        "cpu": cpu1 - cpu0,
        "cpu_start": cpu_start - cpu0,
        "cpu_label": cpu1 - cpu_start,
        "wall": wall1 - wall0,
        "wall_label": wall1 - wall_start,
        "requests": dict(requests),
        "shards": dict(Counter(labelled.values())),
    }
    print(json.dumps(labelling), flush=True)
    # Phase 2: the parent writes every Widget's status once (as reconciles do); the sharder
    # sees each as an update event that changes nothing it decides by.
    line = await asyncio.to_thread(sys.stdin.readline)
    expected = int(line.split()[1])
    updates = 0
    quiet = asyncio.Event()

    def updated() -> None:
        nonlocal updates
        updates += 1
        if updates >= expected:
            quiet.set()

    informer.add_handler(FuncHandler(update=lambda _, __: updated()))
    await asyncio.sleep(0.5)  # the handler's replay of the store, and the loop, settle
    requests.clear()
    cpu2 = time.process_time()
    print("go", flush=True)
    await asyncio.wait_for(quiet.wait(), 300)
    cpu3 = time.process_time()
    await sharder.stop(5.0)
    await client.close()
    print(json.dumps({"cpu_updates": cpu3 - cpu2, "update_requests": dict(requests)}), flush=True)


async def write_status(client: Any, widget: Any, n: int, generation: int) -> None:
    """Patch every Widget's status once (a foreign write the sharder sees; not measured)."""
    from setpoint.client.patch import MergePatch

    names = iter(range(n))
    patch = MergePatch({"status": {"observedGeneration": generation}})

    async def worker() -> None:
        for i in names:
            await client.patch(
                widget, f"widget-{i:05d}", patch, namespace=NAMESPACE, subresource="status"
            )

    await asyncio.gather(*(worker() for _ in range(16)))


async def strip(client: Any, widget: Any, ring: str, n: int) -> None:
    """Remove ``ring``'s label and record from every Widget (between runs; not measured)."""
    from setpoint.client.patch import MergePatch
    from setpoint.manager.sharding import drain_label, handover_annotation, shard_label

    patch = MergePatch(
        {
            "metadata": {
                "labels": {shard_label(ring): None, drain_label(ring): None},
                "annotations": {handover_annotation(ring): None},
            }
        }
    )
    names = iter(range(n))

    async def worker() -> None:
        for i in names:
            await client.patch(widget, f"widget-{i:05d}", patch, namespace=NAMESPACE)

    await asyncio.gather(*(worker() for _ in range(16)))


async def big_status(client: Any, widget: Any, n: int, kib: int) -> None:
    """Give every Widget a status condition whose message is ``kib`` KiB (not metadata)."""
    from setpoint.client.patch import MergePatch

    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Bench",
        "message": "x" * (kib * 1024),
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = MergePatch({"status": {"conditions": [condition]}})
    names = iter(range(n))

    async def worker() -> None:
        for i in names:
            await client.patch(
                widget, f"widget-{i:05d}", patch, namespace=NAMESPACE, subresource="status"
            )

    await asyncio.gather(*(worker() for _ in range(16)))


def cpu_mode(
    n: int, repeat: int, trees: dict[str, Path], profile: Path | None, status_kib: int = 0
) -> None:
    """Start a plane, create the Widgets, run each tree's sharder ``repeat`` times."""
    from setpoint.client import Client
    from setpoint.testing import ControlPlane, ControlPlaneOptions

    sys.path.insert(0, str(HERE / "converge"))
    import run as converge

    converge.NAMESPACE = NAMESPACE
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    print(run_header())
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:

        async def setup() -> None:
            async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
                await converge.prepare(client)
                await client.create(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}
                )
                await converge.create_widgets(client, n)
                if status_kib:
                    await big_status(client, converge.WIDGET, n, status_kib)

        asyncio.run(setup())
        print(
            f"- Server: {n} Widgets created (status {status_kib} KiB); trees: {trees}\n",
            flush=True,
        )
        for round_ in range(repeat):
            names = list(trees)
            shift = round_ % len(names)  # a rotating order: drift spreads over every tree
            for index, name in enumerate(names[shift:] + names[:shift]):
                tree = trees[name]
                ring = f"r{round_}-{name}"[:50]
                env = dict(os.environ, PYTHONPATH=str(tree / "src"))
                argv = [sys.executable, str(Path(__file__).resolve()), "--child"]
                argv += ["--kubeconfig", str(plane.kubeconfig_path), "--ring-name", ring]
                argv += ["--n", str(n)]
                if profile is not None:
                    profile.mkdir(parents=True, exist_ok=True)
                    argv += ["--profile", str(profile / f"{name}-{round_}.prof")]
                servers = pids_with_argument(str(plane.directory))
                server0 = sum(cpu_seconds_of(servers).values())
                with tempfile.TemporaryFile("w+") as err:
                    proc = subprocess.Popen(
                        argv,
                        env=env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                    )
                    assert proc.stdin is not None and proc.stdout is not None
                    first = proc.stdout.readline()
                    if not first:
                        proc.wait(60)
                        err.seek(0)
                        print(err.read(), file=sys.stderr)
                        raise SystemExit(f"child {name} round {round_} failed")
                    result = json.loads(first)
                    server1 = sum(cpu_seconds_of(servers).values())
                    proc.stdin.write(f"updates {n}\n")
                    proc.stdin.flush()
                    if proc.stdout.readline().strip() != "go":
                        raise SystemExit(f"child {name} round {round_} failed")

                    async def statuses(generation: int = len(trees) * round_ + index + 1) -> None:
                        async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
                            await write_status(client, converge.WIDGET, n, generation)

                    server2 = sum(cpu_seconds_of(servers).values())
                    asyncio.run(statuses())
                    line = proc.stdout.readline()
                    result["server_updates"] = sum(cpu_seconds_of(servers).values()) - server2
                    if proc.wait(60) != 0 or not line:
                        err.seek(0)
                        print(err.read(), file=sys.stderr)
                        raise SystemExit(f"child {name} round {round_} failed")
                    result.update(json.loads(line))
                result["server_label"] = server1 - server0
                results[name].append(result)
                print(f"  round {round_} {name}: {json.dumps(result)}", flush=True)

                async def reset(ring: str = ring) -> None:
                    async with Client.from_kubeconfig(str(plane.kubeconfig_path)) as client:
                        await strip(client, converge.WIDGET, ring, n)

                asyncio.run(reset())
    base = next(iter(trees))
    rows: list[list[str]] = []

    def med(name: str, field: str) -> float:
        return Summary.of([r[field] for r in results[name]]).median

    for name in trees:
        runs = results[name]
        rows.append(
            [
                name,
                Summary.of([r["cpu"] / n for r in runs]).spread(scale=1e3, digits=3),
                ratio(med(name, "cpu"), med(base, "cpu")),
                Summary.of([r["cpu_start"] for r in runs]).spread(digits=2),
                Summary.of([r["cpu_label"] for r in runs]).spread(digits=2),
                Summary.of([r["wall"] for r in runs]).spread(digits=2),
                Summary.of([sum(r["requests"].values()) / n for r in runs]).spread(digits=3),
                Summary.of([r["server_label"] / n for r in runs]).spread(scale=1e3, digits=3),
                Summary.of([r["cpu_updates"] / n for r in runs]).spread(scale=1e3, digits=3),
                ratio(med(name, "cpu_updates"), med(base, "cpu_updates")),
                Summary.of([r["server_updates"] / n for r in runs]).spread(scale=1e3, digits=3),
            ]
        )
    print(f"\n{n} Widgets, 2 live shards, {repeat} rounds, median [min-max]:\n")
    print(
        markdown_table(
            [
                "tree",
                "CPU ms/object",
                "vs " + base,
                "start (sync) CPU s",
                "labelling CPU s",
                "wall s",
                "requests/object",
                "API server+etcd CPU ms/object",
                "CPU ms/status update",
                "vs " + base,
                "API server+etcd CPU ms/status update",
            ],
            rows,
        )
    )


def main() -> None:
    """Parse the arguments and run the chosen mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ring", action="store_true", help="ring balance and cost (no plane)")
    parser.add_argument("--sets", type=int, default=200, help="ring: random shard-id sets")
    parser.add_argument("--seed", type=int, default=34, help="ring: random seed")
    parser.add_argument("--virtual-nodes", default="100,400,1000", help="ring: values to try")
    parser.add_argument("--shards", default="2,3,4", help="ring: shard counts to try")
    parser.add_argument("--n", type=int, default=2000, help="CPU: Widgets")
    parser.add_argument("--repeat", type=int, default=3, help="CPU: rounds")
    parser.add_argument("--trees", default="current=.", help="CPU: name=PATH,... source trees")
    parser.add_argument("--profile", type=Path, help="CPU: write cProfile files here")
    parser.add_argument(
        "--status-kib", type=int, default=0, help="CPU: a status of this many KiB per Widget"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    parser.add_argument("--ring-name", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        asyncio.run(child(args.kubeconfig, args.ring_name, args.n, args.profile))
        return
    if args.ring:
        ring_mode(
            args.sets,
            args.seed,
            [int(v) for v in args.virtual_nodes.split(",")],
            [int(v) for v in args.shards.split(",")],
        )
        return
    trees: dict[str, Path] = {}
    for part in args.trees.split(","):
        name, _, path = part.partition("=")
        trees[name] = Path(path or ".").resolve()
    cpu_mode(args.n, args.repeat, trees, args.profile, args.status_kib)


if __name__ == "__main__":
    main()
