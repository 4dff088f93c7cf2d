"""PEM certificates and keys: read them, and load them into an :class:`ssl.SSLContext`.

:class:`KeyPair` is a certificate (chain) with its key, as bytes; :func:`load_key_pair` reads
one from files (a mounted ``kubernetes.io/tls`` Secret) and checks it.

``ssl`` reads certificate chains only from files. :func:`load_cert_chain` hands OpenSSL an
anonymous memory file instead (``memfd_create``, Linux), or a private temporary file removed
at once elsewhere, so a key from a kubeconfig, an exec plugin or a Secret never lands on disk
longer than the call.

:func:`load_ca` and :func:`load_cert_chain` leave errors as ``ssl.SSLError``, ``ValueError``
or ``OSError`` for the caller to wrap in its own typed error; :func:`ssl_reason` and
:func:`os_reason` give the one-line reason to put in that message (without OpenSSL's
``file:line`` noise). :func:`load_key_pair` raises :class:`CertificateError`.

Only the standard library is imported here (``cryptography`` only when
:attr:`KeyPair.not_after` is read), so the client and the servers load it for free.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from setpoint.api.errors import SetpointError

__all__ = [
    "CertificateError",
    "KeyPair",
    "load_ca",
    "load_cert_chain",
    "load_key_pair",
    "os_reason",
    "pem_files",
    "ssl_reason",
]


class CertificateError(SetpointError, ValueError):
    """A certificate or key that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate (chain, leaf first) and its unencrypted PEM private key."""

    cert_pem: bytes
    """The certificate, then any intermediates, in PEM."""
    key_pem: bytes = field(repr=False)
    """The private key of the first certificate, unencrypted PEM."""

    @property
    def not_after(self) -> _dt.datetime:
        """When the (first) certificate expires, in UTC; renew before then.

        Raises:
            CertificateError: ``cert_pem`` holds no parsable certificate.

        """
        from cryptography import x509

        try:
            leaf = x509.load_pem_x509_certificate(self.cert_pem)
        except ValueError as e:
            raise CertificateError(f"the certificate is not PEM ({e})") from None
        return leaf.not_valid_after_utc


def load_key_pair(cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> KeyPair:
    """Read a certificate (chain) and its key from PEM files, and check that they belong together.

    The usual source is a ``kubernetes.io/tls`` Secret mounted as ``tls.crt`` and ``tls.key``.

    Raises:
        CertificateError: a file is missing or unreadable, is not PEM, the key is encrypted,
            or the key does not match the certificate; the message names the files.

    """
    pair = KeyPair(_read(cert_file, "certificate"), _read(key_file, "private key"))
    if b"-----BEGIN CERTIFICATE-----" not in pair.cert_pem:
        raise CertificateError(
            f"the certificate file {cert_file} holds no PEM certificate; it should contain "
            "-----BEGIN CERTIFICATE-----"
        )
    try:
        load_cert_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), pair.cert_pem, pair.key_pem)
    except (ssl.SSLError, ValueError, OSError) as e:
        raise CertificateError(
            f"the certificate {cert_file} and key {key_file} cannot be used ({ssl_reason(e)}); "
            "check that both are PEM, that the key is unencrypted and that it belongs to the "
            "certificate"
        ) from None
    return pair


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise CertificateError(
            f"cannot read the {what} file {path}: {os_reason(e)}; check the path (and that the "
            "Secret is mounted there)"
        ) from None


def load_ca(ctx: ssl.SSLContext, pem: bytes) -> None:
    """Trust the certificates in ``pem``.

    Raises:
        ValueError: ``pem`` holds no PEM certificate.
        ssl.SSLError: a certificate in it cannot be parsed.

    """
    text = pem.decode("ascii", errors="replace")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("no PEM certificate found")
    ctx.load_verify_locations(cadata=text)


def _refuse_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal and block the loop.
    raise ValueError("the private key is encrypted; use an unencrypted PEM key")


def load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load a PEM certificate (chain) and its unencrypted PEM key into ``ctx``.

    Raises:
        ssl.SSLError: the certificate or key cannot be parsed, or they do not match.
        ValueError: the key is encrypted.
        OSError: no memory file or private temporary file could be made.

    """
    with pem_files(cert, key) as (cert_path, key_path):
        ctx.load_cert_chain(cert_path, key_path, password=_refuse_password)


@contextlib.contextmanager
def pem_files(*blobs: bytes) -> Iterator[tuple[str, ...]]:
    """Paths from which OpenSSL can read ``blobs``, valid inside the ``with`` block.

    On Linux an anonymous memory file (``memfd_create``) reached through ``/proc/self/fd``
    never touches a disk and disappears when closed. Elsewhere, a private (0600) temporary
    file that is removed as soon as the block ends.
    """
    memfd_create: Callable[..., int] | None = getattr(os, "memfd_create", None)
    fds: list[int] = []
    try:
        if memfd_create is not None and os.path.isdir("/proc/self/fd"):
            try:
                for blob in blobs:
                    fd = memfd_create("setpoint-pem", os.MFD_CLOEXEC)
                    fds.append(fd)
                    _write_all(fd, blob)
            except OSError:
                for fd in fds:
                    os.close(fd)
                fds = []
            else:
                yield tuple(f"/proc/self/fd/{fd}" for fd in fds)
                return
        import tempfile  # rare fallback, imported here: ~4 ms of every start otherwise

        with tempfile.TemporaryDirectory(prefix="setpoint-pem-") as tmp:
            os.chmod(tmp, 0o700)
            paths = []
            for i, blob in enumerate(blobs):
                path = os.path.join(tmp, f"{i}.pem")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    _write_all(fd, blob)
                finally:
                    os.close(fd)
                paths.append(path)
            yield tuple(paths)
    finally:
        for fd in fds:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def ssl_reason(e: BaseException) -> str:
    """A one-line reason for an ``ssl.SSLError`` or ``ValueError``, for an error message."""
    if isinstance(e, ssl.SSLError) and e.reason:
        return str(e.reason).lower().replace("_", " ")
    return str(e) or type(e).__name__


def os_reason(e: BaseException) -> str:
    """A one-line reason for an ``OSError`` (``no such file or directory``)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return str(e) or type(e).__name__
