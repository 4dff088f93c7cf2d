"""write_private: how the test tooling puts keys and kubeconfigs on disk (issue 18, item 13)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from setpoint.observability.privatefiles import PrivateFileError, create_private, write_private


def test_a_symlink_is_replaced_never_written_through(tmp_path: Path) -> None:
    """A link at the path (planted by another user, say) is replaced; its target is untouched."""
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "admin.key"
    link.symlink_to(target)
    write_private(link, b"secret")
    assert target.read_text() == "keep"
    assert not link.is_symlink()
    assert link.read_bytes() == b"secret"


def test_the_file_is_owner_only_whatever_the_umask_or_the_old_mode(tmp_path: Path) -> None:
    """Mode 0600 from creation under umask 0, and also over a world-readable file."""
    existing = tmp_path / "old.kubeconfig"
    existing.write_text("old")
    existing.chmod(0o644)
    fresh = tmp_path / "new.kubeconfig"
    old = os.umask(0)
    try:
        write_private(existing, b"new")
        write_private(fresh, b"new")
    finally:
        os.umask(old)
    for path in (existing, fresh):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert path.read_bytes() == b"new"


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    """When the final rename fails (the path is a directory), the temporary file goes too."""
    (tmp_path / "taken").mkdir()
    with pytest.raises(OSError):
        write_private(tmp_path / "taken", b"k")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_create_private_makes_a_new_owner_only_file(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    old = os.umask(0)
    try:
        with create_private(path, what="the test file") as handle:
            handle.write(b"line\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b"line\n"


@pytest.mark.parametrize("planted", ["file", "directory", "link"])
def test_create_private_refuses_anything_already_at_the_path(tmp_path: Path, planted: str) -> None:
    """Whatever is there stays as it was; the error names the path, what it is and the fix."""
    target = tmp_path / "target"
    target.write_text("keep")
    path = tmp_path / "taken"
    if planted == "file":
        path.write_text("keep")
    elif planted == "directory":
        path.mkdir()
    else:
        path.symlink_to(target)
    found = {"file": "already exists", "directory": "is a directory", "link": "is a symbolic link"}
    with pytest.raises(PrivateFileError, match=rf"the test file: .*taken {found[planted]}") as err:
        create_private(path, what="the test file")
    assert err.value.errno == errno.EEXIST
    assert "remove it or choose a new path" in str(err.value)
    assert target.read_text() == "keep"
    if planted == "file":
        assert path.read_text() == "keep"
