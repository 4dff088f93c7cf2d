"""``setpoint doctor leader-election``, ``doctor crds`` and a bare ``doctor``, on a real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from setpoint.api import kinds
from setpoint.cli.doctor_crds import scan_crds
from setpoint.cli.doctor_leases import scan_leases
from setpoint.cli.main import main
from setpoint.client import Client, NotFound
from setpoint.testing.waits import eventually


def crd(group: str, plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }


def stamp(seconds_ago: float) -> str:
    moment = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_the_doctor_reads_leases_and_crds_as_the_server_reports_them(
    k8s: Client, namespace: str, kubeconfig_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An expired Lease, the API server's held identity Lease, and a CRD whose kind clashes."""
    await k8s.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "namespace": namespace,
                "name": "crashed-operator",
                "annotations": {"setpoint.dev/finalizers": '{"x.dev/cleanup":"widget"}'},
            },
            "spec": {
                "holderIdentity": "pod-a",
                "leaseDurationSeconds": 15,
                "renewTime": stamp(120),
                "acquireTime": stamp(600),
                "leaseTransitions": 3,
            },
        }
    )
    leases = await scan_leases(k8s)
    by_name = {(s.namespace, s.name): s for s in leases.leases}
    crashed = by_name[(namespace, "crashed-operator")]
    assert (crashed.state, crashed.holder, crashed.transitions) == ("expired", "pod-a", 3)
    assert crashed.finalizers == {"x.dev/cleanup": "widget"}
    assert "not renewed 1m4" in crashed.problems[0]  # ~1m45s past its 15 s
    # kube-apiserver renews its identity Lease (kube-system/apiserver-<id>) every few seconds.
    identity = [s for s in leases.leases if s.name.startswith("apiserver-")]
    assert identity and all(s.state == "held" and s.holder for s in identity)
    assert all(s.problems == () for s in identity)
    assert all(s.namespace != "kube-node-lease" for s in leases.leases)

    group = f"doctor-{uuid.uuid4().hex[:8]}.test.setpoint.dev"
    first, clash = crd(group, "gauges", "Gauge"), crd(group, "meters", "Gauge")
    await k8s.create(first)

    async def established() -> bool:
        report = await scan_crds(k8s, group=group)
        return [c.problems for c in report.crds] == [()]

    try:
        await eventually(established, timeout=60, description="the first CRD established")
        await k8s.create(clash)

        async def clash_reported() -> list[str] | None:
            report = await scan_crds(k8s, group=group)
            problems = report.problems
            return problems if any("NamesAccepted is False" in p for p in problems) else None

        problems = await eventually(clash_reported, timeout=60, description="the clash reported")
        assert problems is not None
        text = "\n".join(problems)
        assert f"CRD meters.{group}: NamesAccepted is False" in text
        assert "another CRD uses one of these names" in text
        assert f"CRD meters.{group}: Established is False" in text

        code = await asyncio.to_thread(
            main, ["doctor", "--kubeconfig", str(kubeconfig_path), "-o", "json"]
        )
        assert code == 0
        summary = orjson.loads(capsys.readouterr().out)
        checks = {c["check"]: c for c in summary["checks"]}
        assert set(checks) == {
            "crds",
            "leader-election",
            "finalizers",
            "paused",
            "rollout",
            "webhooks",
            "shards",
        }
        assert checks["crds"]["ok"] is False
        assert any(f"meters.{group}" in p for p in checks["crds"]["problems"])
        assert checks["leader-election"]["ok"] is False
        assert any(
            f"{namespace}/crashed-operator" in p for p in checks["leader-election"]["problems"]
        )
        assert checks["finalizers"]["ok"] is not None
        assert checks["shards"]["ok"] is not None
        assert checks["rollout"]["ok"] is True
    finally:
        for obj in (clash, first):
            with contextlib.suppress(NotFound):
                await k8s.delete(kinds.CustomResourceDefinition, obj["metadata"]["name"])
