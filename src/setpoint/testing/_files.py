"""Writing secrets to disk for the test tooling: owner-only, atomic, never through a link."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_private"]


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that only this user can read it, whatever was there.

    Guarantees:
        - The bytes are written to a new file created exclusively with mode 0600 in
          ``path``'s directory (``mkstemp``: no umask, no race in which another user can
          open it), then renamed over ``path``. A symlink at ``path`` is replaced, never
          written through; an existing file is replaced whole, its old mode forgotten.
        - Readers see the old content or the new, never half of it.

    Errors:
        OSError: the directory is not writable, or ``path`` belongs to another user in a
            sticky directory such as ``/tmp`` (the rename is refused).

    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
