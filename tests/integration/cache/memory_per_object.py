"""Measure the memory one cached object takes (a script, not a test).

    .venv/bin/python tests/integration/cache/memory_per_object.py [--count 2000]

Starts a local control plane, creates ``count`` ConfigMaps (two labels, one small data
key, written by two field managers so managedFields are realistic), lists them as an
informer does, and measures with tracemalloc what the informer's store retains per object:
decoding the JSON, the transform (default: strip managedFields), the stored JSON bytes and the
store's own bookkeeping. Prints bytes per object with and without the default transform.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tracemalloc

import orjson

from setpoint.api import kinds
from setpoint.api.meta import key_of
from setpoint.cache import Informer, InformerOptions
from setpoint.client import Client, load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.testing import ControlPlane, ControlPlaneOptions, FakeClient


def retained_per_object(raw: list[bytes], options: InformerOptions) -> float:
    informer = Informer(FakeClient(), kinds.ConfigMap, options)  # never started: no requests
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for data in raw:
        obj = informer._prepare(orjson.loads(data))
        informer.store.put(key_of(obj), obj)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(informer.store) == len(raw)
    return (after - before) / len(raw)


async def collect(plane: ControlPlane, count: int) -> list[bytes]:
    async with Client(load_kubeconfig(str(plane.kubeconfig_path))) as client:
        limit = asyncio.Semaphore(20)

        async def one(i: int) -> None:
            async with limit:
                await client.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": f"cm-{i:05d}",
                            "namespace": "default",
                            "labels": {"app": "web", "tier": f"t{i % 3}"},
                        },
                        "data": {"setting": f"value-{i}"},
                    }
                )
                await client.patch(
                    kinds.ConfigMap,
                    f"cm-{i:05d}",
                    MergePatch({"metadata": {"annotations": {"owner": "team-a"}}}),
                    namespace="default",
                    field_manager="other-manager",
                )

        await asyncio.gather(*(one(i) for i in range(count)))
        listing = await client.list(kinds.ConfigMap, namespace="default", labels="app=web")
        return [orjson.dumps(obj) for obj in listing.items]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    with ControlPlane(ControlPlaneOptions(controller_manager=False)) as plane:
        raw = asyncio.run(collect(plane, args.count))
    wire = sum(len(r) for r in raw) / len(raw)
    stripped = retained_per_object(raw, InformerOptions())
    full = retained_per_object(raw, InformerOptions(transform=None))
    print(f"objects: {len(raw)} ConfigMaps; JSON on the wire: {wire:.0f} bytes/object")
    print(f"cached, managedFields stripped (default): {stripped:.0f} bytes/object")
    print(f"cached, kept as received:                 {full:.0f} bytes/object")


if __name__ == "__main__":
    main()
