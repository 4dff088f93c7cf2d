"""The setpoint operator of the converge benchmark: each Widget gets a child ConfigMap and Ready.

Run by ``bench/converge/run.py`` as its own process (``KUBECONFIG`` points at the plane)::

    .venv/bin/python bench/converge/widget_operator.py --workers 8 [--style safe|lean]

Two reconcilers, both written only with setpoint's public API:

- ``safe`` (the default; what the safe-writes guide recommends): ``apply_child`` makes the
  child with server-side apply and a controller reference, ``update_status`` sets the
  condition through the status subresource.
- ``lean``: the same steps as the controller-runtime peer's reconciler (read the child from
  the cache, create it if missing, then ``update_status``). It isolates the runtime's cost
  (cache, queue, workers) from the cost of the safe-write helpers' extra requests.

``--cprofile PATH`` runs the operator under cProfile with the main thread's CPU time as the
clock (``time.thread_time``), so waiting for the network, for the GIL or for a CPU on a busy
machine is not counted: what remains is the CPU the event loop's thread spent, per function.

``--cpu-work`` makes the first reconcile of each Widget (in this process) do ~20 ms of
pure-Python work before its writes (``cpu_work.render``, a template render): issue 34's
CPU-bound variant, where the operator, not the API server, is the bottleneck.
``--processes N`` runs the manager with ``ManagerOptions(processes=N)``: with N > 1, this
process becomes the supervisor of N worker processes (each running this script again), with
leader election on (the Lease ``widget-operator`` in the Widgets' namespace) and the Widget
controller sharded across the workers; 1 is the default, today's single process.

``--measure-cache`` does not reconcile: it starts a cache of Widgets and ConfigMaps with
``tracemalloc`` on and prints the Python heap it took per cached object, as JSON.

``--sync-only`` does not reconcile either: it starts a cache of Widgets, prints
``synced <time> <objects>`` once it has synced, and waits for SIGTERM (``bench/converge/scale.py
cache``). ``--paginated`` makes its informer list with pages instead of streaming the list.
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: process start as the operator sees it

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from setpoint import (  # noqa: E402
    AlreadyExists,
    GroupVersionKind,
    LeaderElectionOptions,
    Manager,
    ManagerOptions,
    NotFound,
    apply_child,
    configure_logging,
    kinds,
    set_condition,
    set_controller_reference,
    update_status,
)
from setpoint.controller import Context, Controller, Request  # noqa: E402

WIDGET = GroupVersionKind("bench.setpoint.dev", "v1", "Widget")
NAMESPACE = "bench"
FIELD_MANAGER = "widget-operator"


def desired_child(widget: dict[str, Any]) -> dict[str, Any]:
    """The child ConfigMap of ``widget``: same namespace and name, carrying ``spec.size``."""
    metadata = widget["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
        "data": {"size": str((widget.get("spec") or {}).get("size", 0))},
    }


def mark_ready(widget: dict[str, Any]) -> None:
    """The status mutation: Ready=True for the widget's current generation."""
    generation = widget["metadata"]["generation"]
    status = widget.setdefault("status", {})
    status["observedGeneration"] = generation
    set_condition(
        status,
        "Ready",
        True,
        "ChildCreated",
        "the child ConfigMap exists",
        observed_generation=generation,
    )


async def reconcile_safe(ctx: Context, request: Request) -> None:
    """Make the child with server-side apply, then set Ready (the guide's way)."""
    try:
        widget = await ctx.reader.get(WIDGET, request.name, namespace=request.namespace)
    except NotFound:
        return
    await apply_child(ctx.client, desired_child(widget), field_manager=FIELD_MANAGER, owner=widget)
    await update_status(ctx.client, widget, mark_ready)


async def reconcile_lean(ctx: Context, request: Request) -> None:
    """Read the child from the cache, create it if missing, then set Ready (as the Go peer)."""
    try:
        widget = await ctx.reader.get(WIDGET, request.name, namespace=request.namespace)
    except NotFound:
        return
    try:
        await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
    except NotFound:
        child = desired_child(widget)
        widget_info = await ctx.client.resource_info(WIDGET)
        child_info = await ctx.client.resource_info(kinds.ConfigMap)
        set_controller_reference(child, widget, owner_info=widget_info, dependent_info=child_info)
        # AlreadyExists: made by an earlier reconcile whose event the cache has not seen yet.
        with contextlib.suppress(AlreadyExists):
            await ctx.client.create(child, field_manager=FIELD_MANAGER)
    await update_status(ctx.client, widget, mark_ready)


def add_controller(manager: Manager, reconciler: Any, workers: int) -> Controller:
    """The benchmark's controller: Widgets, their child ConfigMaps, ``workers`` at once."""
    return (
        manager.controller("widget")
        .for_(WIDGET)
        .owns(kinds.ConfigMap)
        .max_concurrent_reconciles(workers)
        .needs_leader_election(False)
        .build(reconciler)
    )


def manager_options(processes: int, sharder_workers: int = 0) -> ManagerOptions:
    """The manager's options: no servers; with ``processes`` > 1, leader election on.

    ``sharder_workers``: with processes, shard with that many label writes in flight (the
    default otherwise, decided by the processes mode).
    """
    if processes <= 1:
        return ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0")
    sharding = None
    if sharder_workers:
        from setpoint.manager.sharding import ShardingOptions

        sharding = ShardingOptions(
            ring="widget-operator", every_controller=True, sharder_workers=sharder_workers
        )
    return ManagerOptions(
        sharding=sharding,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        processes=processes,
        leader_election=LeaderElectionOptions(
            name="widget-operator", namespace=NAMESPACE, release_on_cancel=True
        ),
    )


async def run_operator(
    workers: int, style: str, cpu_work: bool = False, processes: int = 1, sharder_workers: int = 0
) -> None:
    """Run the manager with one controller until SIGTERM."""
    configure_logging(level="info")
    manager = Manager.from_environment(manager_options(processes, sharder_workers))
    inner = reconcile_safe if style == "safe" else reconcile_lean
    calls = 0
    rendered: set[tuple[str | None, str]] = set()
    render = None
    if cpu_work:
        from cpu_work import render  # the script's directory is on sys.path

    async def reconciler(ctx: Context, request: Request) -> None:
        nonlocal calls
        calls += 1
        key = (request.namespace, request.name)
        if render is not None and key not in rendered:
            rendered.add(key)
            render(request.name, len(rendered))  # the first reconcile's ~20 ms of Python
        await inner(ctx, request)

    add_controller(manager, reconciler, workers)
    print(f"started {STARTED:.6f}", flush=True)
    try:
        await manager.run()
    finally:
        print(f"reconciles {calls}", flush=True)  # run.py reports them per object


async def measure_cache() -> None:
    """Print the traced Python heap a synced cache of Widgets and ConfigMaps holds per object."""
    import tracemalloc

    from setpoint import Cache, Client

    async with Client.from_environment() as client:
        await client.resource_info(WIDGET)  # discovery outside the measured window
        await client.resource_info(kinds.ConfigMap)
        cache = Cache(client)
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        await cache.start()
        widgets = cache.informer(WIDGET)
        config_maps = cache.informer(kinds.ConfigMap)
        await widgets.wait_for_sync(120)
        await config_maps.wait_for_sync(120)
        after = tracemalloc.take_snapshot()
        objects = len(widgets.store) + len(config_maps.store)
        grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        await cache.stop(5)
    print(json.dumps({"objects": objects, "bytes": grown, "bytes_per_object": grown / objects}))


async def sync_only(streaming: bool) -> None:
    """Sync a cache of Widgets, say when, then hold it until SIGTERM."""
    import signal

    from setpoint import Cache, CacheOptions, Client

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with Client.from_environment() as client:
        cache = Cache(client, options=CacheOptions(streaming_list=streaming))
        await cache.start()
        informer = cache.informer(WIDGET)
        await informer.wait_for_sync(600)
        print(f"synced {time.time():.6f} {len(informer.store)}", flush=True)
        await stop.wait()
        await cache.stop(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8, help="max concurrent reconciles")
    parser.add_argument("--style", choices=("safe", "lean"), default="safe")
    parser.add_argument("--measure-cache", action="store_true")
    parser.add_argument("--sync-only", action="store_true", help="sync a Widget cache, hold it")
    parser.add_argument("--paginated", action="store_true", help="--sync-only with list pages")
    parser.add_argument("--cprofile", metavar="PATH", help="write main-thread CPU stats here")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop's event loop")
    parser.add_argument("--cpu-work", action="store_true", help="~20 ms of Python per Widget")
    parser.add_argument("--processes", type=int, default=1, help="ManagerOptions.processes")
    parser.add_argument("--sharder-workers", type=int, default=0, help="with --processes")
    args = parser.parse_args()
    operator = functools.partial(
        run_operator, args.workers, args.style, args.cpu_work, args.processes, args.sharder_workers
    )
    if not (getattr(args, "measure_cache", False) or getattr(args, "sync_only", False)):
        from _sampler import start_if_asked  # a wall-clock profile, if asked: see _sampler.py

        start_if_asked("widget_operator")
    if args.measure_cache:
        asyncio.run(measure_cache())
    elif args.sync_only:
        asyncio.run(sync_only(streaming=not args.paginated))
    elif args.cprofile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        try:
            asyncio.run(operator())
        finally:
            profiler.disable()
            profiler.dump_stats(args.cprofile)
    elif args.uvloop:
        import uvloop  # a benchmark experiment: run.py's setpoint-uvloop

        uvloop.run(operator())
    else:
        asyncio.run(operator())
    sys.exit(0)


if __name__ == "__main__":
    main()
