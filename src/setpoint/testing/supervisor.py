"""A named control plane that outlives the command that started it.

``setpoint controlplane up`` starts this module as a detached process. It runs
one :class:`~setpoint.testing.ControlPlane`, records where to reach it in a
state file (``<cache>/planes/<name>/state.json``), and stops the plane cleanly
on SIGTERM or SIGINT (``setpoint controlplane down``). Because the components
die with their parent (``PR_SET_PDEATHSIG``), even killing this process
outright leaves no etcd or kube-apiserver behind.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from setpoint.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    ControlPlaneOptions,
    cache_dir,
)

__all__ = ["PlaneState", "plane_dir", "read_state", "run_supervisor"]


@dataclass(frozen=True, slots=True)
class PlaneState:
    """What ``state.json`` records about a running named plane."""

    name: str
    pid: int
    kubeconfig: str
    server: str
    started_at: float

    @property
    def alive(self) -> bool:
        """Whether the supervisor process still runs."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def plane_dir(name: str) -> Path:
    """The directory holding a named plane's state file and supervisor log."""
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ControlPlaneError(
            f"control plane name {name!r} is invalid: use letters, digits, '-' and '_'"
        )
    return cache_dir() / "planes" / name


def read_state(name: str) -> PlaneState | None:
    """The state of the named plane, or ``None`` if it is not running (stale state is removed)."""
    path = plane_dir(name) / "state.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        state = PlaneState(**data)
    except (OSError, ValueError, TypeError):
        return None
    if not state.alive:
        path.unlink(missing_ok=True)
        return None
    return state


def run_supervisor(name: str, nodes: int = 0) -> int:
    """Run the named plane (with ``nodes`` worker nodes) until SIGTERM/SIGINT.

    Returns the process exit code. What stopping the nodes could not undo is written to
    ``leftovers.json`` beside the state file (``setpoint controlplane down`` reports it).
    """
    directory = plane_dir(name)
    directory.mkdir(parents=True, exist_ok=True)
    state_path = directory / "state.json"
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    leftovers_path = directory / "leftovers.json"
    leftovers_path.unlink(missing_ok=True)
    plane = ControlPlane(ControlPlaneOptions(nodes=nodes))
    try:
        plane.start()
    except ControlPlaneError as exc:
        print(f"control plane {name!r} failed to start: {exc}", file=sys.stderr, flush=True)
        return 1
    try:
        state = PlaneState(
            name=name,
            pid=os.getpid(),
            kubeconfig=str(plane.kubeconfig_path),
            server=plane.server,
            started_at=time.time(),
        )
        tmp = state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(state)))
        tmp.replace(state_path)
        print(f"control plane {name!r} ready at {plane.server}", flush=True)
        while not stop.wait(1.0):
            if not plane.running:
                print(
                    f"control plane {name!r}: a component exited; stopping",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
        return 0
    finally:
        with contextlib.suppress(OSError):
            state_path.unlink()
        plane.stop()
        if plane.node_leftovers:
            leftovers_path.write_text(json.dumps(plane.node_leftovers))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m setpoint.testing.supervisor --name NAME``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="default")
    parser.add_argument("--nodes", type=int, default=0)
    args = parser.parse_args(argv)
    return run_supervisor(args.name, args.nodes)


if __name__ == "__main__":
    raise SystemExit(main())
