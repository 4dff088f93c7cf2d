"""The compatibility matrix: the integration and e2e suites on every supported release.

For each release in ``SUPPORTED_KUBERNETES_VERSIONS`` (or ``--versions``):

1. ``setpoint controlplane build --version <release>`` (a no-op when cached);
2. ``SETPOINT_CONTROLPLANE_VERSION=<release> pytest -m integration tests/integration`` and
   ``... -m e2e tests/e2e examples``, each with a JUnit report;
3. passed/failed/errors/skipped per suite and the failing test ids.

The results go to ``~/.cache/setpoint/matrix/<date>.json`` and are printed as the
Markdown table docs/compatibility.md records. Exit 1 if any suite failed.

Run: ``make test-matrix`` (``MATRIX_VERSIONS="v1.36.3 v1.37.2"`` narrows it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from setpoint.testing.controlplane import (
    SUPPORTED_KUBERNETES_VERSIONS,
    VERSION_ENV,
    cache_dir,
)

ROOT = Path(__file__).resolve().parents[1]

SUITES: dict[str, list[str]] = {
    "integration": ["-m", "integration", "tests/integration"],
    "e2e": ["-m", "e2e", "tests/e2e", "examples"],
}


@dataclass
class SuiteResult:
    """One suite's outcome on one release."""

    version: str
    suite: str
    exit: int
    passed: int
    failed: int
    skipped: int
    seconds: int
    failing: list[str] = field(default_factory=list)


def run_suite(version: str, suite: str, out: Path) -> SuiteResult:
    """Run one suite against one release; return its counts and failures."""
    report = out / f"{version}-{suite}.xml"
    env = dict(os.environ)
    env[VERSION_ENV] = version
    for name in ("KUBEBUILDER_ASSETS", "SETPOINT_CONTROLPLANE_BIN"):
        env.pop(name, None)  # the release's cached binaries, nothing else
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *SUITES[suite],
    ]
    began = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, check=False, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - began
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[str] = []
    if report.is_file():
        root = ET.parse(report).getroot()
        for suite_element in root.iter("testsuite"):
            for key in counts:
                counts[key] += int(suite_element.get(key, "0"))
        for case in root.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(f"{case.get('classname')}::{case.get('name')}")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return SuiteResult(
        version=version,
        suite=suite,
        exit=result.returncode,
        passed=passed,
        failed=counts["failures"] + counts["errors"],
        skipped=counts["skipped"],
        seconds=round(seconds),
        failing=failed,
    )


def probe(version: str) -> dict[str, object]:
    """Start a plane of ``version`` and ask its API server what it offers."""
    import asyncio

    from setpoint.client import Client, load_kubeconfig
    from setpoint.client.features import probe_server_features
    from setpoint.testing import ControlPlane, ControlPlaneOptions

    async def ask(kubeconfig: str) -> dict[str, object]:
        async with Client(load_kubeconfig(kubeconfig)) as client:
            features = await probe_server_features(client, watch_list=True)
        return {
            "git_version": features.git_version,
            "storage_version_migration": features.storage_version_migration,
            "validating_admission_policy": features.validating_admission_policy,
            "watch_list": features.watch_list,
            "degradations": features.degradations(),
        }

    with ControlPlane(ControlPlaneOptions(version=version)) as plane:
        return asyncio.run(ask(str(plane.kubeconfig_path)))


def table(results: list[SuiteResult]) -> str:
    """The Markdown table of ``results``."""
    lines = [
        "| release | suite | result | passed | failed | time |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        verdict = "pass" if r.exit == 0 else "FAIL"
        minutes, seconds = divmod(r.seconds, 60)
        lines.append(
            f"| {r.version} | {r.suite} | {verdict} | {r.passed} | {r.failed} "
            f"| {minutes} min {seconds:02d} s |"
        )
    return "\n".join(lines)


def main() -> int:
    """Build, run every suite on every release, record and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--versions", nargs="*", default=list(SUPPORTED_KUBERNETES_VERSIONS))
    parser.add_argument("--suites", nargs="*", default=list(SUITES), choices=list(SUITES))
    args = parser.parse_args()
    out = cache_dir() / "matrix"
    out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    results: list[SuiteResult] = []
    features: dict[str, dict[str, object]] = {}
    for version in args.versions:
        subprocess.run(
            [sys.executable, "-m", "setpoint", "controlplane", "build", "--version", version],
            cwd=ROOT,
            check=True,
        )
        features[version] = probe(version)
        print(f"\n== features of Kubernetes {version}: {features[version]}", flush=True)
        for suite in args.suites:
            print(f"\n== {suite} on Kubernetes {version}", flush=True)
            results.append(run_suite(version, suite, out))
            print(table(results[-1:]), flush=True)
    record = out / f"{started:%Y-%m-%dT%H%M%SZ}.json"
    record.write_text(
        json.dumps(
            {
                "started": started.isoformat(timespec="seconds"),
                "features": features,
                "results": [asdict(r) for r in results],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nmatrix run of {started:%Y-%m-%d} ({record}):\n\n{table(results)}")
    for r in results:
        for test in r.failing:
            print(f"  {r.version} {r.suite}: {test}")
    return 0 if all(r.exit == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
