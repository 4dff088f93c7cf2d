"""``setpoint demo``: the main job, on the embedded local control plane.

Until the flagship example lands, the demo starts the control plane, shows
how to reach it, lists its namespaces with kubectl, and stops it again
(``--keep`` leaves it running until Ctrl-C).
"""

from __future__ import annotations

import argparse
import subprocess
import threading

from setpoint.testing.controlplane import ControlPlane

__all__ = ["register"]


def _cmd_demo(args: argparse.Namespace) -> int:
    with ControlPlane() as plane:
        print(f"control plane up at {plane.server}")
        print(f"  export KUBECONFIG={plane.kubeconfig_path}")
        kubectl = plane.binaries.kubectl if plane.binaries else None
        if kubectl is not None:
            print(f"  {kubectl} get ns")
            subprocess.run(
                [str(kubectl), "--kubeconfig", str(plane.kubeconfig_path), "get", "ns"],
                check=True,
                timeout=60,
            )
        if args.keep:
            print("--keep: the plane stays up; Ctrl-C stops it")
            stop = threading.Event()
            try:
                while not stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
    print("control plane stopped; nothing left running")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser("demo", help="run the demo on the local control plane")
    parser.add_argument("--keep", action="store_true", help="leave it running until Ctrl-C")
    parser.set_defaults(func=_cmd_demo)
