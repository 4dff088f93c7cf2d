"""Storage-version migration of N objects (default 2,000): setpoint's two methods against a floor.

Starts its own local control plane (with kube-controller-manager's
storage-version-migrator-controller). For each candidate, a fresh kind gets N
objects stored at v1, then v2 becomes the storage version, and the candidate
moves every object to v2:

* ``floor``: the least work possible from a client: list all objects once,
  then one empty merge patch per object (4 in flight, no rate limit, no
  checkpoints, storedVersions left alone);
* ``setpoint-writes``: ``migrate_storage(method="writes")`` with a high qps
  (1,000/s), pages of 500 with a checkpoint each, then the guarded
  storedVersions update;
* ``setpoint-in-tree``: ``migrate_storage(method="in-tree")``: a
  StorageVersionMigration run by kube-controller-manager, followed to the end.

etcd is read afterwards to check every object is stored at v2. Times are
wall-clock seconds; ratios are to the floor of the same run.

    .venv/bin/python bench/migrate/storage.py [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import markdown_table, ratio, run_header

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client, load_kubeconfig
from setpoint.client.patch import MergePatch
from setpoint.migrate.install import apply_crd
from setpoint.migrate.storage import StorageMigrationOptions, migrate_storage
from setpoint.testing.controlplane import ControlPlane, cache_dir

NAMESPACE = "default"


def dial_crd(group: str, versions: tuple[str, ...], storage: str) -> dict[str, Any]:
    schema = {
        "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"level": {"type": "integer"}}}
            },
        }
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"dials.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Dial", "plural": "dials"},
            "versions": [
                {"name": v, "served": True, "storage": v == storage, "schema": schema}
                for v in versions
            ],
        },
    }


async def prepare(client: Client, group: str, n: int) -> None:
    await apply_crd(client, dial_crd(group, ("v1",), "v1"))
    gvk = GroupVersionKind(group, "v1", "Dial")
    for start in range(0, n, 100):
        await asyncio.gather(
            *(
                client.create(
                    {
                        "apiVersion": gvk.api_version,
                        "kind": "Dial",
                        "metadata": {"name": f"d{i:05d}", "namespace": NAMESPACE},
                        "spec": {"level": i},
                    }
                )
                for i in range(start, min(n, start + 100))
            )
        )
    await apply_crd(client, dial_crd(group, ("v1", "v2"), "v2"))


async def floor(client: Client, group: str) -> int:
    gvk = GroupVersionKind(group, "v2", "Dial")
    items = await client.list(gvk)
    semaphore = asyncio.Semaphore(4)

    async def touch(obj: dict[str, Any]) -> None:
        async with semaphore:
            meta = obj["metadata"]
            await client.patch(
                gvk,
                meta["name"],
                MergePatch({"metadata": {"resourceVersion": meta["resourceVersion"]}}),
                namespace=meta["namespace"],
            )

    await asyncio.gather(*(touch(o) for o in items))
    return len(items)


async def run(plane: ControlPlane, n: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with Client(load_kubeconfig(str(plane.kubeconfig_path))) as client:
        for name in ("floor", "setpoint-writes", "setpoint-in-tree"):
            group = f"{name.replace('-', '')}.bench.setpoint.dev"
            await prepare(client, group, n)
            started = time.perf_counter()
            if name == "floor":
                moved = await floor(client, group)
                stored_after = ["v1", "v2"]
            else:
                method = "writes" if name == "setpoint-writes" else "in-tree"
                result = await migrate_storage(
                    client,
                    f"dials.{group}",
                    options=StorageMigrationOptions(method=method, qps=1000, timeout=600),
                )
                moved = result.objects
                stored_after = list(result.stored_versions_after)
                if result.method != method:
                    raise SystemExit(f"{name}: ran {result.method}: {result.notes}")
            seconds = time.perf_counter() - started
            at_v2 = sum(
                plane.stored_api_version(f"{group}/dials/{NAMESPACE}/d{i:05d}") == f"{group}/v2"
                for i in range(n)
            )
            results[name] = {
                "seconds": seconds,
                "objects": moved,
                "stored_at_v2": at_v2,
                "storedVersions": stored_after,
            }
            await client.delete(kinds.CustomResourceDefinition, f"dials.{group}")
            print(f"{name}: {seconds:.1f}s, {at_v2}/{n} at v2", file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="objects per candidate")
    args = parser.parse_args()
    with ControlPlane() as plane:
        results = asyncio.run(run(plane, args.n))
    base = results["floor"]["seconds"]
    rows = [
        [
            name,
            f"{r['seconds']:.1f}",
            ratio(r["seconds"], base),
            f"{r['objects'] / r['seconds']:.0f}",
            f"{r['stored_at_v2']}/{args.n}",
            ", ".join(r["storedVersions"]),
        ]
        for name, r in results.items()
    ]
    print(run_header())
    print(
        markdown_table(
            ["candidate", "seconds", "vs floor", "objects/s", "stored at v2", "storedVersions"],
            rows,
        )
    )
    out = cache_dir() / "bench" / f"storage-migration-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"n": args.n, "results": results}, indent=2))
    print(f"\nJSON: {out}")


if __name__ == "__main__":
    main()
