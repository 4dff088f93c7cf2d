"""Snapshots: normalized documents, and differences between two of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.cli.main import main
from setpoint.migrate.snapshot import SNAPSHOT_API_VERSION, SnapshotError, diff_snapshots, normalize


def obj(name: str, level: int, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "Dial",
        "apiVersion": "demo.io/v1",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "u-" + name,
            "resourceVersion": "12",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "labels": {"b": "2", "a": "1"},
        },
        "spec": {"level": level},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z"}
            ]
        },
        **extra,
    }


def snap(*objects: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": SNAPSHOT_API_VERSION,
        "kind": "Snapshot",
        "objects": [normalize(o) for o in objects],
    }


def test_normalize_strips_server_fields_and_timestamps_and_sorts_keys() -> None:
    doc = normalize(obj("a", 1))
    assert doc == {
        "apiVersion": "demo.io/v1",
        "kind": "Dial",
        "metadata": {"labels": {"a": "1", "b": "2"}, "name": "a", "namespace": "ns"},
        "spec": {"level": 1},
        "status": {"conditions": [{"status": "True", "type": "Ready"}]},
    }
    assert list(doc) == sorted(doc)
    assert list(doc["metadata"]["labels"]) == ["a", "b"]


def test_same_data_written_again_gives_no_difference() -> None:
    """A rewrite (new resourceVersion, timestamps, another version) is not a difference."""
    again = obj("a", 1)
    again["metadata"].update(resourceVersion="99", uid="other")
    again["status"]["conditions"][0]["lastTransitionTime"] = "2026-05-05T05:05:05.5+02:00"
    again["apiVersion"] = "demo.io/v2"
    assert diff_snapshots(snap(obj("a", 1)), snap(again)) == []


def test_differences_name_the_object_and_field() -> None:
    before = snap(obj("a", 1), obj("b", 2))
    after = snap(obj("a", 5, extra={"x": 1}), obj("c", 3))
    assert [str(d) for d in diff_snapshots(before, after)] == [
        "demo.io/Dial ns/a .extra: added None -> {'x': 1}",
        "demo.io/Dial ns/a .spec.level: changed 1 -> 5",
        "demo.io/Dial ns/b: object removed",
        "demo.io/Dial ns/c: object added",
    ]
    assert [str(d) for d in diff_snapshots(before, after, ignore=[".spec", ".extra"])] == [
        "demo.io/Dial ns/b: object removed",
        "demo.io/Dial ns/c: object added",
    ]


def test_not_a_snapshot_is_an_error() -> None:
    with pytest.raises(SnapshotError, match="the first snapshot is not a setpoint snapshot"):
        diff_snapshots({"objects": []}, snap())


def test_cli_snapshot_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`setpoint snapshot diff A B` prints each difference and exits 1, or 0 when equal."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(yaml.safe_dump(snap(obj("a", 1))))
    b.write_text(yaml.safe_dump(snap(obj("a", 2))))
    assert main(["snapshot", "diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "demo.io/Dial ns/a .spec.level: changed 1 -> 2" in out
    assert "1 difference(s)" in out
    assert main(["snapshot", "diff", str(a), str(a)]) == 0
    assert main(["snapshot", "diff", str(a)]) == 1
    assert "takes two files" in capsys.readouterr().err
