"""``setpoint doctor leader-election`` and ``doctor crds``: how Leases and CRDs are judged."""

from __future__ import annotations

from typing import Any

from setpoint.cli.doctor import CheckSummary, render_summary
from setpoint.cli.doctor_crds import crd_status, diagnose_crds, render_crd_table
from setpoint.cli.doctor_leases import diagnose_leases, lease_status, render_lease_table

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def lease(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"namespace": namespace, "name": name},
        "spec": spec,
    }


def test_a_fresh_lease_is_held_an_old_one_expired_and_one_without_holder_released() -> None:
    held = lease_status(
        lease(
            "ops",
            "tenants",
            holderIdentity="pod-a",
            leaseDurationSeconds=15,
            renewTime="2023-11-14T22:13:15.000000Z",
            acquireTime="2023-11-14T21:13:20.000000Z",
            leaseTransitions=2,
        ),
        NOW,
    )
    assert (held.state, held.holder, held.transitions, held.problems) == ("held", "pod-a", 2, ())
    assert held.renewed_seconds_ago == 5.0 and held.acquired_seconds_ago == 3600.0
    expired = lease_status(
        lease(
            "ops",
            "other",
            holderIdentity="pod-b",
            leaseDurationSeconds=15,
            renewTime="2023-11-14T22:10:20Z",
        ),
        NOW,
    )
    assert expired.state == "expired"
    assert "not renewed 2m45s past its 15s duration: no one leads" in expired.problems[0]
    released = lease_status(lease("ops", "gone", leaseDurationSeconds=15), NOW)
    assert (released.state, released.problems) == ("released", ())


def test_a_lease_that_changes_hands_often_is_flagged_and_node_leases_are_left_out() -> None:
    flapping = lease(
        "ops",
        "flappy",
        holderIdentity="pod-a",
        leaseDurationSeconds=15,
        renewTime="2023-11-14T22:13:19Z",
        leaseTransitions=42,
    )
    node = lease("kube-node-lease", "node-1", holderIdentity="node-1", leaseDurationSeconds=40)
    report = diagnose_leases([flapping, node], now=NOW)
    assert [s.name for s in report.leases] == ["flappy"] and report.node_leases == 1
    assert report.problems == [
        "Lease ops/flappy: changed hands 42 times: leaders keep restarting or losing their "
        "renewals; look for restarts (kubectl get pods) and for slow renewals in the leader's log"
    ]
    text = render_lease_table(report)
    assert "flappy" in text and "1 problem(s)" in text and "--include-node-leases" in text
    assert diagnose_leases([node], now=NOW, include_node_leases=True).leases[0].name == "node-1"


def test_the_finalizers_a_setpoint_manager_handles_are_shown() -> None:
    owned = lease(
        "ops",
        "tenants",
        holderIdentity="pod-a",
        leaseDurationSeconds=15,
        renewTime="2023-11-14T22:13:19Z",
    )
    owned["metadata"]["annotations"] = {"setpoint.dev/finalizers": '{"x.dev/cleanup":"tenant"}'}
    report = diagnose_leases([owned], now=NOW)
    assert report.leases[0].finalizers == {"x.dev/cleanup": "tenant"}
    assert "ops/tenants: x.dev/cleanup (tenant)" in render_lease_table(report)


def crd(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {"name": "v1", "served": True, "storage": True},
                {"name": "v1beta1", "served": False, "storage": False},
            ],
        },
        "status": status,
    }


def condition(kind: str, status: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "message": message}


def test_a_healthy_crd_has_no_problems() -> None:
    status = crd_status(
        crd(
            conditions=[condition("NamesAccepted", "True"), condition("Established", "True")],
            storedVersions=["v1"],
        )
    )
    assert (status.kind, status.served, status.storage) == ("Widget", ("v1",), "v1")
    assert status.problems == () and status.notes == ()


def test_unhealthy_conditions_and_stored_versions_are_problems_with_advice() -> None:
    status = crd_status(
        crd(
            conditions=[
                condition("NamesAccepted", "False", '"widgets" is already in use'),
                condition("Established", "False"),
                condition("NonStructuralSchema", "True", "spec.x: Required value"),
            ],
            storedVersions=["v1alpha1", "v1"],
        )
    )
    problems = "\n".join(status.problems)
    assert 'NamesAccepted is False ("widgets" is already in use): another CRD' in problems
    assert "Established is False: the kind is not served yet" in problems
    assert "NonStructuralSchema is True (spec.x: Required value)" in problems
    assert "storedVersions lists v1alpha1, no longer in spec.versions" in problems
    assert "setpoint crd migrate-storage" in status.notes[0]
    report = diagnose_crds([crd()], group="example.com")
    assert len(report.crds) == 1 and "Established is missing" in report.problems[0]
    assert diagnose_crds([crd()], group="other.org").crds == []
    assert "4 problem(s)" in render_crd_table(
        diagnose_crds(
            [
                crd(
                    conditions=[
                        condition("NamesAccepted", "False"),
                        condition("Established", "False"),
                        condition("NonStructuralSchema", "True"),
                    ],
                    storedVersions=["v1alpha1"],
                )
            ]
        )
    )


def test_the_summary_has_one_line_per_check_then_the_problems() -> None:
    text = render_summary(
        [
            CheckSummary(check="crds", ok=True, summary="3 CRDs, 0 problem(s)"),
            CheckSummary(check="finalizers", ok=False, summary="1 stuck", problems=("a: b",)),
            CheckSummary(check="webhooks", ok=None, summary="could not run", problems=("403",)),
        ],
        "https://127.0.0.1:6443",
    )
    lines = text.splitlines()
    assert lines[0] == "setpoint doctor: 3 checks against https://127.0.0.1:6443"
    assert lines[2] == "  crds        ok       3 CRDs, 0 problem(s)"
    assert lines[3] == "  finalizers  PROBLEM  1 stuck"
    assert lines[4] == "  webhooks    NOT RUN  could not run"
    assert "finalizers:\n- a: b" in text and "webhooks:\n- 403" in text
