"""The floor of the converge benchmark: the operator's writes, done by a plain script.

No cache, no queue, no watch: list all Widgets once, then with ``--workers`` concurrent
tasks, for each Widget create its child ConfigMap (with a controller owner reference) and
write the Ready condition through the status subresource. Two writes per object is the
least any operator can do, so ``run.py`` reports every implementation as a ratio to this.

With ``--watch`` (``run.py``'s ``floor-watch``) it also watches what an operator's informers
would: Widgets from the list's resourceVersion and ConfigMaps, each event decoded and
dropped, until every child's ADDED and every Widget's Ready status has come back. That is
the least a program that watches its objects can do, so the difference between an
operator and ``floor-watch`` is the runtime's own work (cache, queue, reconciles), and the
difference between ``floor-watch`` and ``floor`` the cost of the events themselves.

With ``--cpu-work`` (``run.py``'s ``floor-cpu``) it first does, for each Widget, the ~20 ms of
pure-Python work the CPU-bound variant's operators do (``cpu_work.render``), in its one
process: the floor of issue 34's CPU-bound benchmark. ``--processes N`` (``floor-cpu-p2``)
runs N copies of itself, each doing every N-th Widget of the same list (``--part i/N``): the
least a program using N processes can do on this machine, the API server sharing its cores.

Run by ``bench/converge/run.py`` as its own process (``KUBECONFIG`` points at the plane)::

    .venv/bin/python bench/converge/floor.py --workers 8 --namespace bench [--watch]
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: process start as the script sees it

import argparse  # noqa: E402
import asyncio  # noqa: E402
import datetime  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from setpoint import Client, GroupVersionKind, kinds  # noqa: E402

WIDGET = GroupVersionKind("bench.setpoint.dev", "v1", "Widget")


def child_of(widget: dict[str, Any]) -> dict[str, Any]:
    """The child ConfigMap, with the controller owner reference written out by hand."""
    metadata = widget["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": widget["apiVersion"],
                    "kind": widget["kind"],
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {"size": str((widget.get("spec") or {}).get("size", 0))},
    }


def with_ready(widget: dict[str, Any], now: str) -> dict[str, Any]:
    """``widget`` with status Ready=True for its generation (the listed copy is reused)."""
    generation = widget["metadata"]["generation"]
    widget["status"] = {
        "observedGeneration": generation,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "ChildCreated",
                "message": "the child ConfigMap exists",
                "observedGeneration": generation,
                "lastTransitionTime": now,
            }
        ],
    }
    return widget


async def drain(
    client: Client,
    kind: Any,
    *,
    namespace: str,
    resource_version: str,
    done: Callable[[Any], bool],
    expected: int,
) -> None:
    """Watch ``kind`` from ``resource_version`` until ``expected`` events satisfy ``done``."""
    seen = 0
    rv = resource_version
    while seen < expected:
        async with client.watch(kind, namespace=namespace, resource_version=rv) as watch:
            async for event in watch:
                rv = event.resource_version or rv
                if event.type != "BOOKMARK" and done(event):
                    seen += 1
                    if seen >= expected:
                        return


def is_ready_event(event: Any) -> bool:
    """A Widget event whose object has the Ready condition set to True."""
    conditions = (event.object.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def run(
    workers: int, namespace: str, watch: bool, cpu_work: bool = False, part: str = "0/1"
) -> None:
    """List once, then create each child and write each status with ``workers`` tasks.

    ``part`` ``i/N``: only every N-th Widget of the list, from the i-th (``--processes``).
    """
    index, count = (int(x) for x in part.split("/"))
    render = None
    if cpu_work:
        from cpu_work import render  # the script's directory is on sys.path
    async with Client.from_environment() as client:
        listed = await client.list(WIDGET, namespace=namespace)
        widgets = list(listed)[index::count]
        watchers: list[asyncio.Task[None]] = []
        if watch:
            children = await client.list_page(kinds.ConfigMap, namespace=namespace, limit=1)
            watchers = [
                asyncio.create_task(
                    drain(
                        client,
                        WIDGET,
                        namespace=namespace,
                        resource_version=str(listed.resource_version),
                        done=is_ready_event,
                        expected=len(widgets),
                    )
                ),
                asyncio.create_task(
                    drain(
                        client,
                        kinds.ConfigMap,
                        namespace=namespace,
                        resource_version=str(children.resource_version),
                        done=lambda event: event.type == "ADDED",
                        expected=len(widgets),
                    )
                ),
            ]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for widget in widgets:
            widget.setdefault("apiVersion", WIDGET.api_version)
            widget.setdefault("kind", WIDGET.kind)
            queue.put_nowait(widget)

        async def worker() -> None:
            while not queue.empty():
                widget = queue.get_nowait()
                if render is not None:
                    render(widget["metadata"]["name"], queue.qsize())
                await client.create(child_of(widget))
                await client.update(with_ready(widget, now), subresource="status")

        await asyncio.gather(*(worker() for _ in range(workers)))
        await asyncio.gather(*watchers)
    print(f"done {len(widgets)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8, help="concurrent tasks")
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--watch", action="store_true", help="also watch Widgets and children")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop's event loop")
    parser.add_argument("--cpu-work", action="store_true", help="~20 ms of Python per Widget")
    parser.add_argument("--processes", type=int, default=1, help="copies, each a part")
    parser.add_argument("--part", default="0/1", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.processes > 1:
        import subprocess
        import sys

        argv = ["--workers", str(args.workers), "--namespace", args.namespace]
        argv += [
            flag
            for flag in ("--watch", "--uvloop", "--cpu-work")
            if getattr(args, flag[2:].replace("-", "_"))
        ]
        print(f"started {STARTED:.6f}", flush=True)
        parts = [
            subprocess.Popen([sys.executable, __file__, *argv, "--part", f"{i}/{args.processes}"])
            for i in range(args.processes)
        ]
        raise SystemExit(max(p.wait() for p in parts))
    from _sampler import start_if_asked  # a wall-clock profile, if asked: see _sampler.py

    start_if_asked("floor")
    print(f"started {STARTED:.6f}", flush=True)
    if args.uvloop:
        import uvloop  # a benchmark experiment: run.py's floor-uvloop

        uvloop.run(run(args.workers, args.namespace, args.watch, args.cpu_work, args.part))
    else:
        asyncio.run(run(args.workers, args.namespace, args.watch, args.cpu_work, args.part))


if __name__ == "__main__":
    main()
