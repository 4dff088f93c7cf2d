"""Record what an operator saw and did: informer events and API requests, as bounded JSONL.

A race that corrupted a status in production happened once, in one interleaving of requests.
A recording keeps that interleaving: every event the informers delivered and every API
request the client sent, with its answer, in the order they happened, one JSON object per
line. :func:`setpoint.testing.replay` then plays the recorded requests back against the fake
client in the same order, so the race happens again, in a unit test, every time.

Turn it on with ``setpoint run --record FILE`` or ``ManagerOptions(record=RecordOptions(...))``
(:class:`RecordOptions`), or in a test with :func:`recording` around the code. Each line is one
of::

    {"seq": 1, "t": 0.0021, "type": "request", "sent": 0.0013, "actor": "gizmo:prod/g1",
     "method": "PUT", "path": "/apis/.../gizmos/g1/status", "params": {...}, "body": {...},
     "status": 200, "response": {...}}
    {"seq": 2, "t": 0.0107, "type": "event", "kind": "example.com/v1, Kind=Gizmo",
     "event": "update", "object": {...}}

``actor`` names who sent the request: the reconcile it ran in (``controller:namespace/name``),
a name set with :func:`actor` (a test's foreign writer), or ``null`` (informers, leader
election). ``t`` is seconds since the recording started, when the line was written (for a
request: when its answer arrived); a request's ``sent`` is when it went out.

Guarantees:
    - Bounded: once a line would take the file past ``max_bytes``, one last line
      ``{"type": "truncated"}`` is written and recording stops (the operator runs on).
    - Redacted by what a body or an answer is, not only by an object's ``kind`` (list items
      and patches carry none): everything sent to or answered from ``secrets`` is treated
      as Secrets (lists, patches of every type, tables), an informer's Secrets too, and in
      every object the fields named like a credential and the values shaped like one; see
      :func:`redact` for what is redacted and what is kept. Request headers (credentials)
      are never recorded, nor bodies sent as raw bytes. ``managedFields`` are dropped
      (large, and no reconcile reads them).
    - Private: the file is created new, owner-only (0600), never over an existing file and
      never through a symbolic link (:func:`setpoint.observability.privatefiles.create_private`);
      a path that exists is refused with an error that says so.
    - Off costs nothing: each hook is one call returning ``None``.

Caveats:
    - Lines are written synchronously from the event loop thread (buffered; flushed when
      recording stops). It is a diagnosis tool: turn it on to catch a problem, not always.
    - Watch streams are recorded as the events the informers delivered, not as HTTP.
    - Redaction recognises Secrets, credential names and credential shapes. A credential
      kept under an innocent name in plain text (a custom resource's ``spec.value``) is not
      recognised: treat a recording as sensitive anyway, as the cluster's objects are.
    - A replay sees a Secret's values as ``"<redacted>"``; writers that decode them must
      be given their values another way (the test's ``setup``).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import orjson

from setpoint.api.redaction import REDACTED, is_credential_name, looks_like_credential, redact_text
from setpoint.observability.privatefiles import create_private
from setpoint.observability.runtime import current_reconcile

__all__ = [
    "REDACTED",
    "RecordOptions",
    "Recorder",
    "active_recorder",
    "actor",
    "current_actor",
    "load",
    "recording",
    "redact",
    "set_recorder",
]

_ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "setpoint_record_actor", default=None
)
_active: Recorder | None = None


@dataclass(frozen=True, kw_only=True)
class RecordOptions:
    """Where and how much to record (see the module docstring)."""

    path: str | Path
    """The JSONL file to create: it must not exist (a recording never overwrites a file or
    writes through a link); created owner-only (0600)."""

    max_bytes: int = 64 * 2**20
    """Stop recording (with a ``truncated`` line) before the file grows past this. 64 MiB
    holds tens of thousands of requests with their objects."""

    def __post_init__(self) -> None:
        if not str(self.path):
            raise ValueError("RecordOptions.path: give the file to record to")
        if self.max_bytes < 4096:
            raise ValueError(f"RecordOptions.max_bytes={self.max_bytes}: give at least 4096 bytes")


def active_recorder() -> Recorder | None:
    """The recorder in use, or ``None`` when nothing is recorded (the usual case)."""
    return _active


def set_recorder(recorder: Recorder | None) -> Recorder | None:
    """Install ``recorder`` (``None``: stop recording); return the one installed before."""
    global _active
    previous, _active = _active, recorder
    return previous


@contextlib.contextmanager
def actor(name: str) -> Iterator[None]:
    """Name who sends the requests made inside the block (a test's writer, a script)."""
    token = _ACTOR.set(name)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_actor() -> str | None:
    """Who the caller is: :func:`actor`'s name, else its reconcile, else ``None``."""
    name = _ACTOR.get()
    if name is not None:
        return name
    info = current_reconcile()
    if info is not None:
        return f"{info.controller}:{info.key}"
    return None


_SECRET_FIELDS: Final = ("data", "stringData")
_LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"
_SECRET_KINDS: Final = frozenset({"Secret", "SecretList"})
_SECRET_INFORMER: Final = "v1, Kind=Secret"
"""How the informer of Secrets names its kind (``str`` of core/v1 Secret's kind)."""


def redact(value: Any, *, path: str | None = None, secret: bool = False) -> Any:
    """A copy of ``value`` with every credential in it redacted and ``managedFields`` dropped.

    ``path`` is the API path ``value`` was sent to or answered from: a body sent to or an
    answer from ``secrets`` (core/v1: ``/api/v1/secrets``,
    ``/api/v1/namespaces/NS/secrets[/NAME]``) is a Secret, a list of them, a patch of one or
    a table of them, whether it carries a ``kind`` or not. ``secret=True`` says the same of
    an informer's object. Otherwise an object is a Secret by its ``kind`` (``Secret``, or an
    item of a ``SecretList``), at any depth.

    Redacted (replaced by :data:`REDACTED`):
        - in a Secret: every value of ``data`` and ``stringData`` (a ``null``, a key being
          deleted by a merge patch, stays ``null``), and kubectl's
          ``last-applied-configuration`` annotation (a copy of the whole Secret);
        - in a JSON patch (a list of ``{"op", "path", "value"}``), the ``value`` of an
          operation by where it lands: ``/data/...`` of a Secret, ``/spec/password``;
        - in any object: every string under a field or map key named like a credential
          (:func:`setpoint.api.redaction.is_credential_name`: ``token``, ``password``,
          ``bearerToken``, ``clientSecret``, ``privateKey``, ``client-key-data``, ``tls.key``
          and other ``*.key`` data keys, ...), so TokenRequest and TokenReview tokens too;
        - any string shaped like a credential under any name
          (:func:`setpoint.api.redaction.looks_like_credential`: a PEM private key, the same
          in base64, a JWT);
        - in an error ``Status``, the credentials in its messages
          (:func:`setpoint.api.redaction.redact_text`); reason, code and details stay.

    Kept, so a recording still replays and reads: kinds, names, namespaces, UIDs,
    resourceVersions, labels, other annotations, a Secret's ``type`` and the keys of its
    ``data``, numbers and booleans (``expirationSeconds``), patch operations and their
    paths, and everything of other objects that is not named or shaped like a credential.
    Other kubectl ``last-applied-configuration`` annotations are redacted inside (parsed,
    redacted as their object, written back). Redacting twice gives the same result.
    """
    context = secret or (path is not None and _is_secrets_path(path))
    return _redact(value, context)


def _is_secrets_path(path: str) -> bool:
    """Whether ``path`` names core/v1 ``secrets`` (a list, one Secret or its subresources)."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if len(parts) < 3 or parts[:2] != ["api", "v1"]:
        return False
    rest = parts[2:]
    if rest[0] == "watch":
        rest = rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return bool(rest) and rest[0] == "secrets"


def _redact(value: Any, secret: bool) -> Any:
    if isinstance(value, str):
        return REDACTED if looks_like_credential(value) else value
    if isinstance(value, list):
        return [
            _redact_operation(item, secret) if _is_operation(item) else _redact(item, secret)
            for item in value
        ]
    if not isinstance(value, dict):
        if hasattr(value, "model_dump"):  # a typed object: redact its JSON, never its repr
            return _redact(value.model_dump(mode="json", by_alias=True), secret)
        return value
    kind = value.get("kind")
    if kind == "Status":
        return _redact_status(value)
    secret = secret or kind in _SECRET_KINDS
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = key if type(key) is str else str(key)  # JSON's keys are; a caller's may not be
        # Strings first, without a call per value: most of a recording is strings.
        if type(item) is str:
            hidden = (
                (secret and name in _SECRET_FIELDS)
                or is_credential_name(name)
                or looks_like_credential(item)
            )
            out[key] = REDACTED if hidden else item
        elif name == "metadata" and isinstance(item, dict):
            out[key] = _redact_metadata(item, secret)
        elif secret and name in _SECRET_FIELDS:
            out[key] = _hide_values(item)
        elif is_credential_name(name):
            out[key] = _hide_strings(item)
        else:
            out[key] = _redact(item, secret)
    return out


def _redact_metadata(meta: dict[str, Any], secret: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in meta.items():
        if key == "managedFields":
            continue
        if key == "annotations" and isinstance(item, dict) and _LAST_APPLIED in item:
            applied = _redact_last_applied(item[_LAST_APPLIED], secret)
            out[key] = _redact({**item, _LAST_APPLIED: applied}, secret)
        else:
            out[key] = _redact(item, secret)
    return out


def _redact_last_applied(applied: Any, secret: bool) -> Any:
    """Kubectl's copy of what it applied: a Secret's whole; another object's, inside."""
    if secret or not isinstance(applied, str) or applied == REDACTED:
        return REDACTED
    try:
        parsed = orjson.loads(applied)
    except orjson.JSONDecodeError:
        return REDACTED
    if isinstance(parsed, dict) and parsed.get("kind") in _SECRET_KINDS:
        return REDACTED
    return orjson.dumps(_redact(parsed, False)).decode()


def _hide_values(item: Any) -> Any:
    """A Secret's ``data``/``stringData``: keys kept, values gone (``null`` stays ``null``)."""
    if isinstance(item, dict):
        return {key: None if value is None else REDACTED for key, value in item.items()}
    return None if item is None else REDACTED


def _hide_strings(item: Any) -> Any:
    """A credential-named field: every string in it gone; structure, numbers, booleans kept."""
    if isinstance(item, str):
        return REDACTED
    if isinstance(item, list):
        return [_hide_strings(entry) for entry in item]
    if isinstance(item, dict):
        return {key: _hide_strings(entry) for key, entry in item.items()}
    return item


def _is_operation(item: Any) -> bool:
    """A JSON patch operation (RFC 6902): ``{"op": ..., "path": ..., ...}``."""
    return (
        isinstance(item, dict)
        and isinstance(item.get("op"), str)
        and isinstance(item.get("path"), str)
    )


def _redact_operation(operation: dict[str, Any], secret: bool) -> dict[str, Any]:
    """An operation with its ``value`` redacted as it would be where it lands.

    The value is put at the operation's path in an empty object, that object is redacted as
    the patched object would be (a Secret, or any object), and the value is taken back: so
    ``/data/password`` of a Secret is hidden and ``/metadata/labels/tier`` is not.
    """
    out = {key: item for key, item in operation.items() if key != "value"}
    if "value" not in operation:
        return out
    tokens = [
        token.replace("~1", "/").replace("~0", "~") for token in operation["path"].split("/")[1:]
    ]
    wrapped: Any = operation["value"]
    for token in reversed(tokens):
        wrapped = {token: wrapped}
    redacted = _redact(wrapped, secret)
    for token in tokens:
        if not isinstance(redacted, dict) or token not in redacted:
            redacted = REDACTED  # redacted whole on the way (managedFields, a Secret field)
            break
        redacted = redacted[token]
    out["value"] = redacted
    return out


def _redact_status(status: dict[str, Any]) -> Any:
    """An error ``Status``: every text's credentials masked, the rest as it is."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            masked = redact_text(value)
            return REDACTED if looks_like_credential(masked) else masked
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {
                key: _hide_strings(item) if is_credential_name(str(key)) else walk(item)
                for key, item in value.items()
            }
        return value

    return walk(status)


class Recorder:
    """Writes the recording (see the module docstring); build it with :func:`recording`.

    Raises:
        PrivateFileError: (an ``OSError``) ``options.path`` exists (a file, a directory, a
            symbolic link) or cannot be created; the message names the path and what to do.

    """

    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        """What this recorder was asked for."""
        self._file: IO[bytes] | None = create_private(
            options.path, what="the recording (--record, RecordOptions.path)"
        )
        self._size = 0
        self._seq = 0
        self._started = time.monotonic()
        self.truncated = False
        """Whether the bound was reached (the file ends with a ``truncated`` line)."""

    def _write(self, entry: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._seq += 1
        entry = {"seq": self._seq, "t": round(time.monotonic() - self._started, 6), **entry}
        line = orjson.dumps(entry, default=str) + b"\n"
        if self._size + len(line) > self.options.max_bytes - 64:
            self._file.write(orjson.dumps({"seq": self._seq, "type": "truncated"}) + b"\n")
            self.truncated = True
            self.close()
            return
        self._size += len(line)
        self._file.write(line)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None,
        body: Any,
        status: int | None,
        response: Any,
        sent: float | None = None,
    ) -> None:
        """Record one API request and its answer (``status`` ``None``: no answer arrived).

        ``sent`` is the ``time.monotonic()`` at which the request went out; the line is
        written when the answer arrives, so two requests in flight at once can be seen to
        overlap (``sent`` of one before ``t`` of the other).
        """
        self._write(
            {
                "type": "request",
                "sent": None if sent is None else round(sent - self._started, 6),
                "actor": current_actor(),
                "method": method,
                "path": path,
                "params": dict(params) if params else None,
                "body": redact(body, path=path) if not isinstance(body, bytes) else None,
                "status": status,
                "response": redact(response, path=path),
            }
        )

    def event(self, kind: str, event: str, obj: Any) -> None:
        """Record one informer event (``add``, ``update``, ``delete``) of ``kind``."""
        secret = kind == _SECRET_INFORMER
        self._write(
            {"type": "event", "kind": kind, "event": event, "object": redact(obj, secret=secret)}
        )

    def close(self) -> None:
        """Flush and close the file; later calls record nothing."""
        file, self._file = self._file, None
        if file is not None:
            file.close()


@contextlib.contextmanager
def recording(options: RecordOptions) -> Iterator[Recorder]:
    """Record everything this process does inside the block (one recorder at a time).

    Raises:
        RuntimeError: another recording is already running.
        PrivateFileError: the file cannot be created (see :class:`Recorder`).

    """
    if _active is not None:
        raise RuntimeError(
            f"already recording to {_active.options.path}; stop that recording first"
        )
    recorder = Recorder(options)
    set_recorder(recorder)
    try:
        yield recorder
    finally:
        set_recorder(None)
        recorder.close()


def load(path: str | Path) -> list[dict[str, Any]]:
    """The entries of a recording, in order.

    Raises:
        ValueError: a line is not a JSON object; names the file and line.

    """
    entries: list[dict[str, Any]] = []
    with Path(path).open("rb") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc})") from None
            if not isinstance(entry, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object per line")
            entries.append(entry)
    return entries
