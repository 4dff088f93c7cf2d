"""``setpoint doctor paused``: which objects are paused, for whom, and held deletions.

The scan itself (discovery, metadata-only lists) runs against the real API server in
tests/integration/controller/test_pause.py.
"""

from __future__ import annotations

from typing import Any

from setpoint.cli.doctor_paused import (
    PausedReport,
    find_paused,
    paused_summary,
    render_paused,
)


def gizmo(
    name: str, annotations: dict[str, str] | None = None, *, deleting: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "apps", "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return {"apiVersion": "test.setpoint.dev/v1", "kind": "Gizmo", "metadata": metadata}


OBJECTS = [
    gizmo("plain"),
    gizmo("off", {"setpoint.dev/paused": "false"}),
    gizmo("all", {"setpoint.dev/paused": "true"}),
    gizmo("some", {"setpoint.dev/paused": "dns, billing"}),
    gizmo(
        "held",
        {"setpoint.dev/paused": "true", "setpoint.dev/paused-deletion": "true"},
        deleting=True,
    ),
]


def test_only_paused_objects_are_found_with_the_controllers_they_pause() -> None:
    found = {p.name: p for p in find_paused(OBJECTS)}
    assert sorted(found) == ["all", "held", "some"]
    assert found["all"].controllers is None
    assert found["some"].controllers == ("billing", "dns")
    assert found["held"].deletion_held
    assert not found["all"].deletion_held


def test_a_held_deletion_is_the_only_problem() -> None:
    report = PausedReport(namespace=None, paused=find_paused(OBJECTS), objects_scanned=5)
    assert len(report.problems) == 1
    assert "Gizmo apps/held is being deleted" in report.problems[0]
    summary = paused_summary(report)
    assert (summary.check, summary.ok) == ("paused", False)
    assert summary.summary.startswith("3 paused object(s), 1 deletion(s) held")
    text = render_paused(report)
    assert "Gizmo.test.setpoint.dev   apps        some   billing,dns        runs" in text
    assert "every controller   held" in text
    assert report.to_json()["paused"][2]["controllers"] == ["billing", "dns"]


def test_no_paused_objects_is_ok() -> None:
    report = PausedReport(namespace="apps", paused=find_paused([gizmo("plain")]))
    assert paused_summary(report).ok is True
    assert render_paused(report).startswith("No paused objects (namespace apps).")
