"""Manifest files: stable YAML and writes that only touch what changed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from setpoint.crd import Manifest, render_yaml, write_manifests


def test_rendering_sorts_keys_and_starts_each_document() -> None:
    text = render_yaml([{"b": 1, "a": {"d": 2, "c": 3}}, {"z": []}])
    assert text == "---\na:\n  c: 3\n  d: 2\nb: 1\n---\nz: []\n"
    assert list(yaml.safe_load_all(text)) == [{"a": {"c": 3, "d": 2}, "b": 1}, {"z": []}]


def test_shared_objects_are_not_written_as_anchors() -> None:
    shared = {"type": "string"}
    text = render_yaml([{"a": shared, "b": shared}])
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == {"a": shared, "b": shared}


def test_multi_line_text_is_a_block_literal() -> None:
    text = render_yaml([{"description": "line one\nline two"}])
    assert "description: |-\n  line one\n  line two\n" in text
    assert yaml.safe_load(text) == {"description": "line one\nline two"}


def test_special_strings_survive_rendering() -> None:
    values = {"a": "yes", "b": "1", "c": "!self.x", "d": "", "e": "trailing \n", "f": "ünï"}
    assert yaml.safe_load(render_yaml([values])) == values


def test_write_creates_then_leaves_unchanged_files_alone(tmp_path: Path) -> None:
    manifest = Manifest("crd/bases/a.yaml", ({"kind": "A"},))
    (first,) = write_manifests([manifest], tmp_path)
    assert first.status == "created"
    target = tmp_path / "crd" / "bases" / "a.yaml"
    assert target.read_text() == "---\nkind: A\n"
    os.utime(target, (1_000_000, 1_000_000))
    (second,) = write_manifests([manifest], tmp_path)
    assert second.status == "unchanged"
    assert target.stat().st_mtime == 1_000_000
    assert [p.name for p in target.parent.iterdir()] == ["a.yaml"]  # no temp files left


def test_write_updates_changed_files(tmp_path: Path) -> None:
    write_manifests([Manifest("x.yaml", ({"v": 1},))], tmp_path)
    (result,) = write_manifests([Manifest("x.yaml", ({"v": 2},))], tmp_path)
    assert result.status == "updated"
    assert (tmp_path / "x.yaml").read_text() == "---\nv: 2\n"


def test_check_mode_reports_without_writing(tmp_path: Path) -> None:
    (missing,) = write_manifests([Manifest("x.yaml", ({"v": 1},))], tmp_path, check=True)
    assert missing.status == "created"
    assert not (tmp_path / "x.yaml").exists()
    write_manifests([Manifest("x.yaml", ({"v": 1},))], tmp_path)
    (same,) = write_manifests([Manifest("x.yaml", ({"v": 1},))], tmp_path, check=True)
    assert same.status == "unchanged"
    (stale,) = write_manifests([Manifest("x.yaml", ({"v": 9},))], tmp_path, check=True)
    assert stale.status == "updated"
    assert (tmp_path / "x.yaml").read_text() == "---\nv: 1\n"


@pytest.mark.parametrize("path", ["/etc/x.yaml", "../x.yaml", "a/../../x.yaml", ""])
def test_manifest_paths_stay_inside_the_output_directory(path: str) -> None:
    with pytest.raises(ValueError, match="relative and stay inside"):
        Manifest(path, ())
