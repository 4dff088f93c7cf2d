"""``setpoint doctor finalizers``: durations, owner status from Leases, diagnosis, output.

The scan itself (discovery, metadata-only lists) runs against the real API server in
tests/integration/finalizers/test_finalizers_processes.py.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from setpoint.cli import doctor
from setpoint.cli.doctor import (
    FinalizerReport,
    diagnose,
    format_duration,
    owner_status,
    parse_duration,
    render_table,
)
from setpoint.controller.finalizers import (
    OWNED_FINALIZERS_ANNOTATION,
    CleanupRecord,
    cleanup_annotation,
)
from tests._support.finalizer_flow import FIN, FIN2, FOREIGN

NOON = 1714564800.0  # 2024-05-01T12:00:00Z


def lease(
    name: str, owned: dict[str, str], *, holder: str = "pod-1", renewed: str, duration: int = 15
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ops",
            "annotations": {OWNED_FINALIZERS_ANNOTATION: json.dumps(owned)},
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": renewed,
        },
    }


def stuck_widget(
    name: str, deleted: str, finalizers: list[str], **annotations: str
) -> dict[str, Any]:
    return {
        "apiVersion": "finalizers.test.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {
            "name": name,
            "namespace": "apps",
            "uid": f"uid-{name}",
            "deletionTimestamp": deleted,
            "finalizers": finalizers,
            "annotations": annotations,
        },
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("0", 0),
        ("45s", 45),
        ("5m", 300),
        ("1h30m", 5400),
        ("2d", 172800),
        ("250ms", 0.25),
        ("1.5h", 5400),
    ],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "m5", "5m 3s", "-5", "1h-3m"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_durations_format_like_kubectl() -> None:
    assert [format_duration(s) for s in (0, 12, 60, 250, 3600, 7500, 86400, 97200)] == [
        "0s",
        "12s",
        "1m",
        "4m10s",
        "1h",
        "2h5m",
        "1d",
        "1d3h",
    ]


def test_owner_running_stopped_released_and_unknown() -> None:
    fresh = lease("op", {FIN: "widgets"}, renewed="2024-05-01T11:59:55.000000Z")
    status = owner_status(FIN, [fresh], NOON)
    assert (status.state, status.controller, status.lease, status.holder) == (
        "running",
        "widgets",
        "ops/op",
        "pod-1",
    )
    assert status.renewed_seconds_ago == pytest.approx(5)

    expired = lease("op", {FIN: "widgets"}, renewed="2024-05-01T11:50:00.000000Z")
    status = owner_status(FIN, [expired], NOON)
    assert status.state == "stopped"
    assert "expired 9m45s ago" in status.detail

    released = lease("op", {FIN: "widgets"}, holder="", renewed="2024-05-01T11:59:59.000000Z")
    status = owner_status(FIN, [released], NOON)
    assert status.state == "stopped" and "released" in status.detail

    # Any fresh Lease wins over a stale one (an old deployment's Lease left behind).
    assert owner_status(FIN, [expired, fresh], NOON).state == "running"

    unknown = owner_status(FIN2, [fresh], NOON)
    assert unknown.state == "unknown" and "without leader election" in unknown.detail
    builtin = owner_status("kubernetes.io/pvc-protection", [], NOON)
    assert builtin.state == "unknown" and "Kubernetes finalizer" in builtin.detail
    assert "Kubernetes" in owner_status("foregroundDeletion", [], NOON).detail


def test_diagnose_keeps_objects_stuck_longer_than_the_threshold() -> None:
    record = CleanupRecord(
        finalizer=FIN,
        controller="widgets",
        error="TimeoutError: cleanup did not finish within its deadline of 30s",
        reason="CleanupDeadlineExceeded",
        failures=7,
        first_failure="2024-05-01T11:00:00Z",
        last_failure="2024-05-01T11:58:00Z",
    )
    objects = [
        stuck_widget(
            "old",
            "2024-05-01T10:00:00Z",
            [FOREIGN, FIN],
            **{cleanup_annotation(FIN): record.to_json()},
        ),
        stuck_widget("older", "2024-05-01T09:00:00Z", [FIN2]),
        stuck_widget("recent", "2024-05-01T11:58:00Z", [FIN]),
        stuck_widget("no-finalizers", "2024-05-01T09:00:00Z", []),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "live", "finalizers": [FIN]},
        },
    ]
    leases = [lease("op", {FIN: "widgets"}, renewed="2024-05-01T11:59:58.000000Z")]
    stuck = diagnose(objects, leases, now=NOON, older_than=300)
    assert [s.name for s in stuck] == ["older", "old"]
    old = stuck[1]
    assert old.waiting_seconds == 7200 and old.namespace == "apps"
    assert [f.name for f in old.finalizers] == [FOREIGN, FIN]
    assert old.finalizers[0].last_error is None
    assert old.finalizers[1].last_error == record
    assert old.finalizers[1].owner.state == "running"
    assert old.finalizers[0].owner.state == "unknown"

    data = old.to_json()
    assert data["finalizers"][1]["lastError"]["failures"] == 7
    assert data["finalizers"][1]["owner"]["controller"] == "widgets"
    assert data["waitingSeconds"] == 7200

    report = FinalizerReport(
        older_than=300,
        namespace=None,
        stuck=stuck,
        resources_scanned=3,
        objects_scanned=5,
        skipped=[("secrets.v1", "Forbidden: no")],
    )
    table = render_table(report)
    assert "old" in table and "2h" in table and "TimeoutError" in table and "(7x" in table
    assert "running" in table and "secrets.v1: Forbidden: no" in table
    assert json.loads(json.dumps(report.to_json()))["stuck"][0]["name"] == "older"


def test_empty_report_says_so() -> None:
    table = render_table(FinalizerReport(older_than=300, namespace="apps"))
    assert table.startswith("No objects stuck in deletion for more than 5m (namespace apps)")


def test_command_line_options() -> None:
    parser = argparse.ArgumentParser()
    doctor.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "doctor",
            "finalizers",
            "--older-than",
            "10m",
            "-n",
            "apps",
            "--kind",
            "widgets",
            "--kind",
            "cm",
            "-o",
            "json",
        ]
    )
    assert (args.older_than, args.namespace, args.kind, args.output) == (
        600,
        "apps",
        ["widgets", "cm"],
        "json",
    )
    defaults = parser.parse_args(["doctor", "finalizers"])
    assert (defaults.older_than, defaults.namespace, defaults.output) == (300, None, "table")
    with pytest.raises(SystemExit):
        parser.parse_args(["doctor", "finalizers", "-n", "apps", "-A"])


def test_main_reports_errors_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main(["finalizers", "--kubeconfig", "/nonexistent/kubeconfig"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("setpoint: error:") and err.count("\n") == 1


def test_owner_prefers_a_lease_in_the_objects_namespace() -> None:
    """Two operators (one per namespace) advertise one finalizer: name the object's own."""
    import json as _json

    from setpoint.cli.doctor import owner_status

    def lease(namespace: str) -> dict[str, Any]:
        return {
            "metadata": {
                "namespace": namespace,
                "name": "op",
                "annotations": {"setpoint.dev/finalizers": _json.dumps({"x.dev/f": "c"})},
                "labels": {"setpoint.dev/advertises-finalizers": "true"},
            },
            "spec": {
                "holderIdentity": f"pod-{namespace}",
                "leaseDurationSeconds": 15,
                "renewTime": "2026-01-01T00:00:00.000000Z",
            },
        }

    now = 1767225600.0 + 1  # one second after that renewTime
    leases = [lease("team-a"), lease("team-b")]
    assert owner_status("x.dev/f", leases, now, namespace="team-b").lease == "team-b/op"
    assert owner_status("x.dev/f", leases, now, namespace="team-a").lease == "team-a/op"
