"""Files only this user may read: recordings, and the keys and kubeconfigs the test tooling writes.

One home for the two ways setpoint puts something sensitive on disk:

- :func:`write_private` writes a whole file at once and replaces whatever was at the path
  (a key the local control plane regenerates, a kubeconfig): atomic, owner-only, never
  through a link.
- :func:`create_private` opens a new file to stream into (a recording): it must not exist,
  a link at the path is refused, and only this user can read it.

It lives in the lowest layer that does file I/O and that the recorder may import
(``setpoint.api`` does none; ``setpoint.testing`` and the CLI sit above).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import BinaryIO

from setpoint.api.errors import SetpointError

__all__ = ["PrivateFileError", "create_private", "write_private"]


class PrivateFileError(SetpointError, OSError):
    """A private file could not be created safely; the message names the path and the fix.

    ``errno`` is the operating system's reason (``EEXIST`` for a file or a link already at
    the path, ``ENOENT`` for a missing directory, ...).
    """


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
    import tempfile  # only the test tooling writes whole files: ~4 ms of every start otherwise

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def create_private(path: str | Path, *, what: str) -> BinaryIO:
    """Create ``path`` as a new owner-only file and return it open for (buffered) writing.

    ``what`` names the file for the error messages, with the option that chose the path
    (``"the recording (RecordOptions.path)"``).

    Expected Flow:
        1. ``open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)``.
        2. The caller writes and closes the file.

    Guarantees:
        - A new file or nothing: an existing file is never truncated or appended to, and a
          symbolic link at ``path`` (dangling or not) is never followed, so a link planted
          by another user cannot redirect the bytes (``O_EXCL`` refuses any existing name).
        - Created with mode 0600 (less if the umask removes owner bits, never more): no
          window in which another user may open it.

    Caveats:
        - Only the last component is protected: links among the parent directories are
          followed, as for any path the user gives. Choose a directory other users cannot
          write to (not a shared ``/tmp`` subdirectory owned by someone else).

    Errors:
        PrivateFileError: something already exists at ``path`` (a file, a directory, a
            symbolic link: the message says which and to remove it or choose another path),
            or the file cannot be created (a missing directory, no permission); the
            message names the path, what the file is for and what to do.

    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise _refusal(Path(path), what, exc) from None
    return os.fdopen(fd, "wb")


def _refusal(path: Path, what: str, exc: OSError) -> PrivateFileError:
    if exc.errno in (errno.EEXIST, errno.ELOOP):
        if path.is_symlink():
            found = f"is a symbolic link (to {_link_target(path)})"
        elif path.is_dir():
            found = "is a directory"
        else:
            found = "already exists"
        message = (
            f"{what}: {path} {found}; it is never written over or through: remove it or "
            "choose a new path"
        )
    elif exc.errno == errno.ENOENT:
        message = f"{what}: {path}: the directory {path.parent} does not exist; create it first"
    else:
        reason = (exc.strerror or type(exc).__name__).lower()
        message = f"{what}: {path} cannot be created ({reason}); choose a path you may write"
    error = PrivateFileError(message)
    error.errno = exc.errno
    return error


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # removed meanwhile
        return "somewhere"
