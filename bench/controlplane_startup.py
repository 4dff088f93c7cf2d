"""Start-up time of the local control plane (etcd, kube-apiserver, kube-controller-manager).

Not a test: it starts and stops ``ControlPlane`` ``--repeat`` times and prints the median
[min-max] seconds from ``start()`` until the API server is ready, and of the whole
start-stop cycle. Used to check that etcd's client TLS (issue 18, item 13) kept start-up
flat: run it on two checkouts and compare.

Run::

    .venv/bin/python bench/controlplane_startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import time

from _common import Summary, markdown_table, run_header

from setpoint.testing.controlplane import ControlPlane


def main() -> None:
    """Start and stop the plane ``--repeat`` times; print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    starts, cycles = [], []
    for _ in range(args.repeat):
        plane = ControlPlane()
        began = time.perf_counter()
        plane.start()
        started = time.perf_counter()
        plane.stop()
        starts.append(started - began)
        cycles.append(time.perf_counter() - began)
    print(run_header())
    print()
    print(
        markdown_table(
            ["measure", "seconds"],
            [
                ["start() until ready", Summary.of(starts).spread(digits=2)],
                ["start() + stop()", Summary.of(cycles).spread(digits=2)],
            ],
        )
    )


if __name__ == "__main__":
    main()
