"""Text that is safe to put into errors, logs, Events, annotations and conditions.

Two jobs, both pure and bounded:

- :func:`brief` describes a value taken from untrusted input (a kubeconfig, a plugin's
  answer, a schema) in a few dozen characters. It never expands a large or aliased
  structure (a YAML "billion laughs" document), never fails on a huge integer, and is cheap
  whatever it is given.
- :func:`redact_text` masks the credentials that commonly end up in exception text before that
  text leaves the process: bearer tokens, JWTs, PEM private keys, ``user:password@`` in
  URLs and ``password=...``-style pairs. :func:`redact_url` does the same for one URL.
- :func:`is_credential_name` and :func:`looks_like_credential` tell, for structured data
  (a recording's JSON), whether a field's name or a value's shape says it holds a
  credential.

Redaction is a safety net for text setpoint does not control (an exception raised by user
code, a server's message); it recognises common shapes only. Code that handles secrets
must still keep them out of messages in the first place.
"""

from __future__ import annotations

import binascii
import functools
import re
import reprlib
from typing import Final

__all__ = [
    "REDACTED",
    "brief",
    "is_credential_name",
    "looks_like_credential",
    "redact_text",
    "redact_url",
]

REDACTED: Final = "<redacted>"
"""What a masked secret is replaced with."""

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = 48
_REPR.maxother = 48
_REPR.maxlong = 24
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4

_SCAN_LIMIT: Final = 64 * 1024
"""Characters of a text :func:`redact_text` looks at; the rest is cut (with a marker) first."""


def brief(value: object, *, limit: int = 60) -> str:
    """A short ``repr`` of ``value`` for an error message: at most ``limit`` characters.

    Containers are shown two levels deep and four items wide, so the work is bounded even
    for a structure whose YAML aliases make it astronomically large when expanded, or one
    that contains itself. Whatever goes wrong while describing the value, the answer is its
    type name in angle brackets (``<int>`` for an integer too long to print).
    """
    try:
        text = _REPR.repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[: max(limit - 3, 1)] + "..."
    return text


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,15}://)[^\s/@]{1,256}@")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|.*)",
    re.DOTALL,
)
_PAIR = re.compile(
    r"(?i)\b([A-Za-z0-9_.-]{0,40}(?:password|passwd|secret|token|api[_-]?key|access[_-]?key)"
    r"[A-Za-z0-9_.-]{0,40})(\"?'?\s{0,3}[:=]\s{0,3}\"?'?)([^\s\"',;&}]{1,4096})"
)


def redact_text(text: str) -> str:
    """``text`` with the credentials it appears to contain replaced by :data:`REDACTED`.

    Masks: ``Bearer <token>`` and ``Basic <credentials>``, JSON Web Tokens (service-account
    and OIDC tokens: ``eyJ...``), PEM private key blocks (also a block cut short), the
    ``user:password@`` part of URLs, and values of keys named like a credential
    (``password=...``, ``"token": "..."``, ``client_secret: ...``). Texts longer than
    64 KiB are cut first. Linear in the length of the text.
    """
    if len(text) > _SCAN_LIMIT:
        text = text[:_SCAN_LIMIT] + " ...(cut)"
    text = _PRIVATE_KEY.sub(f"{REDACTED} private key", text)
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _JWT.sub(REDACTED, text)
    return _PAIR.sub(
        lambda m: m.group(0) if m.group(3) == REDACTED else f"{m.group(1)}{m.group(2)}{REDACTED}",
        text,
    )


def redact_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part masked (the user stays).

    Plain string work (``setpoint.api`` does no URL parsing with I/O libraries): the
    authority is what follows ``scheme://`` up to the next ``/``, ``?`` or ``#``. A value
    without ``://`` is passed through :func:`redact_text`.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return redact_text(url)
    cut = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" not in authority:
        return url
    userinfo, _, hostport = authority.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    masked = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{scheme}://{masked}@{hostport}{tail}"


_CREDENTIAL_WORDS: Final = (
    "password",
    "passwd",
    "passphrase",
    "token",
    "privatekey",
    "apikey",
    "accesskey",
    "secretkey",
    "clientkey",
    "signingkey",
    "encryptionkey",
    "credential",
)
_CREDENTIAL_NAMES: Final = frozenset({"auth", "authorization"})
_REFERENCE_SUFFIXES: Final = (
    "ref",
    "refs",
    "name",
    "names",
    "namespace",
    "path",
    "file",
    "files",
    "seconds",
    "selector",
)
_NAME_NOISE: Final = str.maketrans("", "", "-_. ")


@functools.lru_cache(maxsize=4096)
def is_credential_name(name: str) -> bool:
    """Whether a field or map key called ``name`` holds a credential, by its name alone.

    Yes for names containing ``password``, ``passwd``, ``passphrase``, ``token``,
    ``credential`` or a kind of key (``privateKey``, ``apiKey``, ``accessKey``,
    ``secretKey``, ``clientKey``, ``signingKey``, ``encryptionKey``), ending in ``secret``
    (``clientSecret``), ending in ``.key`` (``tls.key``, ``ca.key``), and ``auth`` or
    ``authorization``; case, ``-``, ``_`` and ``.`` do not matter (``client-key-data``,
    ``bearerToken``, ``ACCESS_TOKEN``). No for names that refer to a credential rather than
    hold it: ending in ``ref``, ``name``, ``namespace``, ``path``, ``file``, ``seconds`` or
    ``selector`` (``secretKeyRef``, ``secretName``, ``tokenFile``,
    ``tokenExpirationSeconds``), and for a bare ``key`` (a label selector's). Answers are
    cached: the same few hundred field names come back in every object.
    """
    lowered = name.lower()
    if lowered.endswith(".key"):
        return True
    squeezed = lowered.translate(_NAME_NOISE)
    if squeezed.endswith(_REFERENCE_SUFFIXES):
        return False
    return (
        squeezed.endswith("secret")
        or squeezed in _CREDENTIAL_NAMES
        or any(word in squeezed for word in _CREDENTIAL_WORDS)
    )


_CREDENTIAL_SHAPE = re.compile(
    r"PRIVATE KEY-----|\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.|LS0tLS1CRUdJTi"
)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]+")


def looks_like_credential(text: str) -> bool:
    """Whether ``text`` holds a credential, by its shape, whatever field it is in.

    Yes for a PEM private key block (``-----BEGIN ... PRIVATE KEY-----``, also cut short), the
    same base64-encoded (as in ``client-key-data`` or a Secret's ``tls.key``; also a key after
    a certificate in one encoded bundle), and a JSON Web Token (service-account and OIDC
    tokens). Certificates (public) are not credentials. Linear in the length of the text: one
    regular-expression scan, and base64 that starts like PEM (``LS0tLS1CRUdJTi``,
    ``-----BEGIN``) is decoded to tell a key from a certificate.
    """
    if "KEY-----" not in text and "eyJ" not in text and "LS0tLS1CRUdJTi" not in text:
        return False  # the usual case, three substring searches: no regular expression
    for match in _CREDENTIAL_SHAPE.finditer(text):
        if not match.group().startswith("LS0t"):
            return True
        run = _BASE64_RUN.match(text, match.start())
        encoded = run.group() if run is not None else ""
        try:
            decoded = binascii.a2b_base64(encoded[: len(encoded) - len(encoded) % 4])
        except binascii.Error:
            continue
        if b"PRIVATE KEY-----" in decoded:
            return True
    return False
