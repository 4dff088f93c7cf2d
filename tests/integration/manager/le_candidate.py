"""One leader-election candidate process, for the two-process leader election tests.

Run as ``python le_candidate.py --kubeconfig K --namespace N --identity ID --journal FILE``.
It runs a Manager with leader election on Lease ``N/le-test`` (lease 4 s, renew deadline 3 s,
retry 1 s) and two runnables:

- ``marker`` (not leader-only) writes ``ready`` once the manager has started its standby work;
- ``actor`` (leader-only) writes ``start`` when started, then ``tick`` every 50 ms while
  ``manager.is_leader`` holds (checked right before each write, with no await in between),
  and ``stop`` when stopped.

Every journal line is one JSON object ``{"id", "what", "t"}`` (``t`` from ``time.time()``,
shared by all processes on the host), appended with a single ``write`` to a file opened with
``O_APPEND``, so lines of concurrent processes never interleave. The exit code is 0 after a
clean shutdown (SIGTERM), 3 after losing the lease.
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
from setpoint.client import Client, load_kubeconfig
from setpoint.manager import LeaderElectionLost, LeaderElectionOptions, Manager, ManagerOptions

LEASE_NAME = "le-test"
TIMINGS: dict[str, Any] = {
    "lease_duration": 4,
    "renew_deadline": 3,
    "retry_period": 1,
    "request_timeout": 1,
}


class Journal:
    def __init__(self, path: str, identity: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._identity = identity

    def write(self, what: str) -> None:
        line = json.dumps({"id": self._identity, "what": what, "t": time.time()}) + "\n"
        os.write(self._fd, line.encode())


class Marker:
    """Not leader-only: says the process is up and campaigning."""

    name = "marker"
    group = RunnableGroup.OTHERS
    needs_leader_election = False

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    async def start(self) -> None:
        self._journal.write("ready")

    async def stop(self, timeout: float) -> None:
        return None

    def failure(self) -> BaseException | None:
        return None


class Actor:
    """Leader-only: acts (writes ticks) only while this process leads."""

    name = "actor"
    group = RunnableGroup.CONTROLLERS
    needs_leader_election = True

    def __init__(self, journal: Journal, manager: Manager) -> None:
        self._journal = journal
        self._manager = manager
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._journal.write("start")
        self._task = asyncio.create_task(self._act())

    async def _act(self) -> None:
        while True:
            if self._manager.is_leader:  # the fence: checked right before the side effect
                self._journal.write("tick")
            await asyncio.sleep(0.05)

    async def stop(self, timeout: float) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._journal.write("stop")

    def failure(self) -> BaseException | None:
        return None


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--release-on-cancel", action="store_true")
    args = parser.parse_args()

    journal = Journal(args.journal, args.identity)
    client = Client(load_kubeconfig(args.kubeconfig))
    manager = Manager(
        client,
        ManagerOptions(
            leader_election=LeaderElectionOptions(
                name=LEASE_NAME,
                namespace=args.namespace,
                identity=args.identity,
                release_on_cancel=args.release_on_cancel,
                **TIMINGS,
            ),
            metrics_bind_address="0",
            health_probe_bind_address="0",
        ),
    )
    manager.add(Marker(journal))
    manager.add(Actor(journal, manager))
    try:
        await manager.run()
    except LeaderElectionLost:
        journal.write("lost")
        return 3
    finally:
        await client.close()
    journal.write("exit")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
