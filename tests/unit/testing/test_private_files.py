"""write_private: how the test tooling puts keys and kubeconfigs on disk (issue 18, item 13)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from setpoint.testing._files import write_private


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
