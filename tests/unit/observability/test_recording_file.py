"""The recording's file: created new, owner-only, never through a link (issue 27, finding 3)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from setpoint.api.errors import SetpointError
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability import recording
from setpoint.observability.privatefiles import PrivateFileError
from setpoint.testing import FakeClient, eventually


def test_the_file_is_created_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    old = os.umask(0o022)
    try:
        with recording.recording(recording.RecordOptions(path=path)) as recorder:
            recorder.event("v1, Kind=ConfigMap", "add", {"metadata": {"name": "a"}})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [e["type"] for e in recording.load(path)] == ["event"]


def test_a_planted_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """Another user plants ``r.jsonl -> ~/.bashrc``; the recorder must not write through it."""
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "r.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError, match=r"r\.jsonl.*symbolic link.*choose") as caught:
        recording.Recorder(recording.RecordOptions(path=link))
    assert isinstance(caught.value, SetpointError)
    assert target.read_text() == "keep"
    assert link.is_symlink()
    assert recording.active_recorder() is None


def test_a_dangling_symlink_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    link = tmp_path / "r.jsonl"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link"):
        recording.Recorder(recording.RecordOptions(path=link))
    assert not (tmp_path / "elsewhere").exists()


def test_an_existing_file_is_refused_not_truncated(tmp_path: Path) -> None:
    """A recording of an earlier run (or anything else) is never overwritten."""
    path = tmp_path / "r.jsonl"
    path.write_text("earlier run\n")
    with (
        pytest.raises(OSError, match=r"r\.jsonl.*already exists.*remove it or choose"),
        recording.recording(recording.RecordOptions(path=path)),
    ):
        pass
    assert path.read_text() == "earlier run\n"
    assert recording.active_recorder() is None


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    path = tmp_path / "no" / "r.jsonl"
    with pytest.raises(OSError, match=r"no/r\.jsonl.*directory"):
        recording.Recorder(recording.RecordOptions(path=path))


async def test_a_manager_refuses_an_existing_file_before_starting_anything(
    tmp_path: Path,
) -> None:
    """The error names the path; nothing was started, so the manager can run once it is moved."""
    path = tmp_path / "run.jsonl"
    path.write_text("the last run's recording\n")
    fake = FakeClient()
    options = ManagerOptions(
        metrics_bind_address="0",
        health_probe_bind_address="0",
        handle_signals=False,
        record=recording.RecordOptions(path=path),
    )
    manager = Manager(fake, options)
    with pytest.raises(PrivateFileError, match=r"--record.*run\.jsonl already exists"):
        await manager.run()
    assert path.read_text() == "the last run's recording\n"
    assert recording.active_recorder() is None
    path.rename(tmp_path / "kept.jsonl")
    task = asyncio.create_task(manager.run())
    await eventually(lambda: path.exists() or task.done(), description="the recording started")
    manager.stop()
    await asyncio.wait_for(task, 30)  # raises if the second run was refused
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
