"""Start-up and idle memory of the tenants operator: children as dicts against typed models.

Issue 30 (decision 0032): the typed built-in kinds must not slow an operator's start. Each
candidate is a copy of ``examples/tenants`` (``--trees LABEL=PATH``; ``PATH`` is the directory
holding the ``tenants`` package, e.g. a ``git archive`` of an older commit). Each run spawns a
fresh process that imports ``tenants`` (and setpoint), starts the operator in-process
(``setpoint.testing.run_operator``) and waits for one Tenant, created just before by this
script, to turn Ready: the process reports the seconds from its first line to the end of the
import and to the Ready, the CPU it used by then, its RSS after 2 s idle, and how many
typed-kind modules it loaded. It then deletes its Tenant (the operator runs its finalizer).
Candidates are interleaved, ``--repeat`` times each.

Run (a plane of your own: ``setpoint controlplane up --name bench``)::

    git archive <before> examples/tenants | tar -x -C ../tenants-before
    .venv/bin/python bench/typed_kinds_startup.py --kubeconfig $KUBECONFIG --repeat 7 \\
        --trees before=../tenants-before/examples/tenants,after=examples/tenants
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from _common import compile_setpoint_bytecode, run_header  # noqa: E402

CHILD = """
import time
started = time.perf_counter()
import asyncio, json, resource, sys
sys.path.insert(0, {tree!r})
import tenants
import setpoint as sp
from setpoint.testing import eventually, run_operator
imported = time.perf_counter() - started

async def main():
    settings = tenants.TenantsSettings(directory_path={db!r})
    async with run_operator(
        lambda manager: tenants.setup(manager, settings), kubeconfig={kubeconfig!r}, namespaces=()
    ) as op:
        client = op.manager.client
        async def ready():
            live = await client.get(tenants.Tenant, {name!r})
            conditions = live.status.conditions if live.status else []
            return any(c.type == "Ready" and c.status == "True" for c in conditions)
        await eventually(ready, timeout=60, interval=0.01, description="Ready")
        at_ready = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime
        await asyncio.sleep(2)
        rss = next(
            int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")
        )
        typed = sorted(m for m in sys.modules if m.startswith("setpoint.api.kinds."))
        out = dict(imported=imported, ready=at_ready, cpu=cpu, rss_kib=rss, typed=typed)
        print(json.dumps(out))
        await client.delete(tenants.Tenant, {name!r})
        async def gone():
            try:
                await client.get(tenants.Tenant, {name!r})
            except sp.NotFound:
                return True
            return False
        await eventually(gone, timeout=60, description="deleted")

asyncio.run(main())
"""


async def _create_tenant(kubeconfig: str, name: str) -> None:
    import setpoint as sp

    async with sp.Client.from_kubeconfig(kubeconfig) as client:
        await client.create(
            {
                "apiVersion": "tenants.setpoint.dev/v1",
                "kind": "Tenant",
                "metadata": {"name": name},
                "spec": {"namespaces": [f"{name}-a"], "adminGroup": "ops", "isolated": True},
            }
        )


async def _install_crd(kubeconfig: str) -> None:
    sys.path.insert(0, str(REPO / "examples" / "tenants"))
    sys.path.insert(0, str(REPO / "examples" / "tenants" / "tests"))
    from tenants_support import install_crd

    import setpoint as sp

    async with sp.Client.from_kubeconfig(kubeconfig) as client:
        await install_crd(client)


def run_one(tree: str, kubeconfig: str, workdir: Path) -> dict[str, Any]:
    """One process of one candidate: its figures, as the child printed them."""
    name = f"bench-{uuid.uuid4().hex[:6]}"
    asyncio.run(_create_tenant(kubeconfig, name))
    code = CHILD.format(tree=tree, kubeconfig=kubeconfig, name=name, db=str(workdir / f"{name}.db"))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=workdir
    )
    if done.returncode:
        raise SystemExit(f"the operator process failed:\n{done.stderr[-3000:]}")
    line = [x for x in done.stdout.splitlines() if x.startswith("{")][-1]
    result: dict[str, Any] = json.loads(line)
    return result


def _cell(values: list[float], digits: int = 2) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def main() -> None:
    """Run the candidates interleaved and print a Markdown table of medians [min-max]."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--trees", required=True, help="LABEL=PATH,LABEL=PATH")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    trees = {label: str(Path(path).resolve()) for label, path in trees.items()}
    print(run_header())
    print(f"- Load: {os.getloadavg()[0]:.1f}", flush=True)
    compile_setpoint_bytecode()  # every process imports the same, byte-compiled setpoint
    for tree in trees.values():
        compileall.compile_dir(tree, quiet=1, workers=1)
    asyncio.run(_install_crd(args.kubeconfig))
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    with tempfile.TemporaryDirectory(prefix="typed-kinds-") as tmp:
        for round_ in range(args.repeat):
            for label, tree in trees.items():
                results[label].append(run_one(tree, args.kubeconfig, Path(tmp)))
                last = results[label][-1]
                print(
                    f"# round {round_ + 1} {label}: import {last['imported']:.3f} s, ready "
                    f"{last['ready']:.3f} s, cpu {last['cpu']:.3f} s, rss "
                    f"{last['rss_kib'] / 1024:.1f} MiB, typed-kind modules {len(last['typed'])}",
                    flush=True,
                )
    print()
    print(
        "| candidate | import s | start to Ready s | CPU at Ready s | idle RSS MiB "
        "| typed models loaded |"
    )
    print("| :--- | ---: | ---: | ---: | ---: | :--- |")
    for label, runs in results.items():
        classes = [m for m in runs[0]["typed"] if m.rsplit(".", 1)[1].startswith("_")]
        packages = [m.rsplit(".", 1)[1] for m in runs[0]["typed"] if m not in classes]
        modules = f"{len(classes) - 1} classes of {', '.join(packages)}" if classes else "none"
        print(
            f"| {label} | {_cell([r['imported'] for r in runs])} | "
            f"{_cell([r['ready'] for r in runs])} | {_cell([r['cpu'] for r in runs])} | "
            f"{_cell([r['rss_kib'] / 1024 for r in runs], 1)} | {modules} |"
        )


if __name__ == "__main__":
    main()
