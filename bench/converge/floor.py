"""The floor of the converge benchmark: the operator's writes, done by a plain script.

No cache, no queue, no watch: list all Widgets once, then with ``--workers`` concurrent
tasks, for each Widget create its child ConfigMap (with a controller owner reference) and
write the Ready condition through the status subresource. Two writes per object is the
least any operator can do, so ``run.py`` reports every implementation as a ratio to this.

Run by ``bench/converge/run.py`` as its own process (``KUBECONFIG`` points at the plane)::

    .venv/bin/python bench/converge/floor.py --workers 8 --namespace bench
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports: process start as the script sees it

import argparse  # noqa: E402
import asyncio  # noqa: E402
import datetime  # noqa: E402
from typing import Any  # noqa: E402

from setpoint import Client, GroupVersionKind  # noqa: E402

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


async def run(workers: int, namespace: str) -> None:
    """List once, then create each child and write each status with ``workers`` tasks."""
    async with Client.from_environment() as client:
        widgets = list(await client.list(WIDGET, namespace=namespace))
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for widget in widgets:
            widget.setdefault("apiVersion", WIDGET.api_version)
            widget.setdefault("kind", WIDGET.kind)
            queue.put_nowait(widget)

        async def worker() -> None:
            while not queue.empty():
                widget = queue.get_nowait()
                await client.create(child_of(widget))
                await client.update(with_ready(widget, now), subresource="status")

        await asyncio.gather(*(worker() for _ in range(workers)))
    print(f"done {len(widgets)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8, help="concurrent tasks")
    parser.add_argument("--namespace", default="bench")
    parser.add_argument(
        "--no-trust-env", action="store_true", help="an experiment: see _experiments.py"
    )
    args = parser.parse_args()
    if not (getattr(args, "measure_cache", False) or getattr(args, "sync_only", False)):
        from _sampler import start_if_asked  # a wall-clock profile, if asked: see _sampler.py

        start_if_asked("floor")
    if args.no_trust_env:
        from _experiments import ignore_environment

        ignore_environment()
    print(f"started {STARTED:.6f}", flush=True)
    asyncio.run(run(args.workers, args.namespace))


if __name__ == "__main__":
    main()
