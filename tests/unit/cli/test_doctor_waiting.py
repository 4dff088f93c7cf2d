"""``setpoint doctor``: the optional controllers a manager's Lease says are waiting for CRDs."""

from __future__ import annotations

import json
from typing import Any

from setpoint.cli.doctor_leases import diagnose_leases, render_lease_table
from setpoint.manager.optional import WAITING_ANNOTATION, parse_waiting

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def lease(waiting: Any, *, renewed: str = "2023-11-14T22:13:19Z") -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "namespace": "ops",
            "name": "backups",
            "annotations": {WAITING_ANNOTATION: json.dumps(waiting)},
        },
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "renewTime": renewed},
    }


def test_a_held_lease_names_what_waits_for_what() -> None:
    report = diagnose_leases([lease({"backup": ["Backup.v1.example.com"]})], now=NOW)
    assert report.leases[0].waiting == {"backup": ["Backup.v1.example.com"]}
    assert report.leases[0].to_json()["waiting"] == {"backup": ["Backup.v1.example.com"]}
    text = render_lease_table(report)
    assert "ops/backups: backup waits for Backup.v1.example.com" in text


def test_nothing_waiting_and_expired_leases_say_nothing() -> None:
    assert "waits for" not in render_lease_table(diagnose_leases([lease({})], now=NOW))
    stale = lease({"backup": ["Backup.v1.example.com"]}, renewed="2023-11-14T20:00:00Z")
    assert "waits for" not in render_lease_table(diagnose_leases([stale], now=NOW))


def test_a_malformed_annotation_is_ignored() -> None:
    broken = lease({})
    broken["metadata"]["annotations"][WAITING_ANNOTATION] = "{"
    assert parse_waiting(broken) == {}
    assert parse_waiting({"metadata": {}}) == {}
    assert parse_waiting(lease(["not", "a", "map"])) == {}
