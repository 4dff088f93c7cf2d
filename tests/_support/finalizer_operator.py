"""A small operator with one finalizer handler, run as a separate process by the tests.

Run from the repository root as ``python -m tests._support.finalizer_operator --kubeconfig K
--namespace N --journal FILE [--cleanup slow|hang] [--cleanup-seconds S] [--deadline D]
[--leader-election] [--finalizer NAME]``.

It runs a Manager (metrics on 127.0.0.1, a free port) with controller ``widgets``:
``for_(Widget)`` (the CRD of tests/_support/finalizer_flow.py) with finalizer
``widgets.test.setpoint.dev/directory`` (or ``--finalizer``). The cleanup journals
``start`` when it begins and ``end`` when it returns; ``slow`` sleeps ``--cleanup-seconds``
in between, ``hang`` never returns (so only the deadline ends it). With
``--leader-election`` the manager campaigns on Lease ``N/finalizer-operator`` (lease 4 s,
renew deadline 3 s, retry 1 s).

Every journal line is one JSON object ``{"pid", "what", "name", "t", ...}`` appended with a
single ``write`` to a file opened with ``O_APPEND``, so lines of successive processes never
interleave. ``up`` is written once the manager runs, with the metrics address.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from setpoint.api.runnable import RunnableGroup
from setpoint.client import Client, NotFound, load_kubeconfig
from setpoint.controller import Context, Request, Result
from setpoint.controller.finalizers import CleanupRetry
from setpoint.manager import LeaderElectionOptions, Manager, ManagerOptions
from tests._support.finalizer_flow import FIN
from tests._support.kinds import GIZMO

LEASE_NAME = "finalizer-operator"
TIMINGS: dict[str, Any] = {
    "lease_duration": 4,
    "renew_deadline": 3,
    "retry_period": 1,
    "request_timeout": 1,
}


class Journal:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, what: str, **fields: Any) -> None:
        record = {"pid": os.getpid(), "what": what, "t": time.time(), **fields}
        os.write(self._fd, (json.dumps(record) + "\n").encode())


class Announcer:
    """Not leader-only: journals ``up`` (with the metrics address) once the manager runs."""

    name = "announcer"
    group = RunnableGroup.OTHERS
    needs_leader_election = False

    def __init__(self, journal: Journal, manager: Manager) -> None:
        self._journal = journal
        self._manager = manager

    async def start(self) -> None:
        address = self._manager.metrics_address
        metrics = f"http://{address[0]}:{address[1]}/metrics" if address else None
        self._journal.write("up", metrics=metrics)

    async def stop(self, timeout: float) -> None:
        return None

    def failure(self) -> BaseException | None:
        return None


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--cleanup", choices=("slow", "hang"), default="slow")
    parser.add_argument("--cleanup-seconds", type=float, default=0.0)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--leader-election", action="store_true")
    parser.add_argument("--finalizer", default=FIN)
    args = parser.parse_args()

    journal = Journal(args.journal)
    client = Client(load_kubeconfig(args.kubeconfig))
    manager = Manager(
        client,
        ManagerOptions(
            leader_election=(
                LeaderElectionOptions(name=LEASE_NAME, namespace=args.namespace, **TIMINGS)
                if args.leader_election
                else None
            ),
            metrics_bind_address="127.0.0.1:0",
            health_probe_bind_address="0",
        ),
    )

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        try:
            await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
        except NotFound:
            return None
        journal.write("reconcile", name=request.name)
        return None

    async def cleanup(ctx: Context, obj: Any) -> None:
        name = obj["metadata"]["name"]
        journal.write("start", name=name)
        if args.cleanup == "hang":
            await asyncio.Event().wait()
        await asyncio.sleep(args.cleanup_seconds)
        journal.write("end", name=name)

    manager.controller("widgets").for_(GIZMO).finalizer(
        args.finalizer,
        cleanup,
        deadline=args.deadline,
        retry=CleanupRetry(base_delay=0.5, max_delay=2.0),
    ).build(reconcile)
    manager.add(Announcer(journal, manager))
    try:
        await manager.run()
    finally:
        await client.close()
    journal.write("exit")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
