"""Typed errors built from the API server's ``Status`` responses.

Callers branch on the type, never on message text::

    try:
        await client.update(obj)
    except Conflict:
        ...  # re-read and retry

Every error carries the HTTP code, the ``reason`` and ``details`` the server
sent, and a message that names the object and, where it helps, what to do.
The mapping from a response to a type follows the server's ``reason`` first
and the HTTP code second, as client-go's ``apierrors`` does: a 409 may be
``Conflict`` or ``AlreadyExists`` depending on the reason, and a 410 is
``Gone`` (reason ``Gone``) or ``Expired`` (reason ``Expired``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from setpoint.api.errors import SetpointError

__all__ = [
    "AlreadyExists",
    "ApiError",
    "BadRequest",
    "Cause",
    "ClientError",
    "Conflict",
    "ConnectionFailed",
    "Expired",
    "Forbidden",
    "Gone",
    "InternalError",
    "Invalid",
    "MalformedResponse",
    "MethodNotAllowed",
    "NotFound",
    "RequestTimeout",
    "ResponseTooLarge",
    "ServerTimeout",
    "ServiceUnavailable",
    "TLSVerificationFailed",
    "TooManyRequests",
    "Unauthorized",
    "UnknownKind",
    "UnsupportedMediaType",
    "error_from_response",
]


class ClientError(SetpointError):
    """Base of every error the setpoint client raises."""

    __module__ = "setpoint"


class ConnectionFailed(ClientError):
    """The API server could not be reached (refused, DNS, TLS, reset). Names the URL."""

    __module__ = "setpoint"

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url
        """The URL that could not be reached."""


class TLSVerificationFailed(ConnectionFailed):
    """The API server's certificate was not trusted (or not issued for its address).

    Retrying cannot help: the client's certificate authority (the kubeconfig's
    ``certificate-authority`` for the cluster, or the service account's ``ca.crt``) is not
    the one that signed the server's certificate, the server URL points at another server,
    or the certificate does not name the host. The message says which, and where the CA
    came from.
    """


class RequestTimeout(ClientError):
    """A request did not complete within its client-side timeout. Names the URL and timeout."""

    __module__ = "setpoint"

    def __init__(self, message: str, *, url: str, timeout: float) -> None:
        super().__init__(message)
        self.url = url
        """The URL of the request that timed out."""
        self.timeout = timeout
        """The timeout, in seconds, that ran out."""


class MalformedResponse(ClientError):
    """The API server (or something posing as it) sent data that breaks the API's protocol.

    A watch line that is not a watch event, a line longer than the decoder's limit, a list
    whose ``continue`` token repeats. Names the URL; the message says what was wrong without
    quoting the data (it may hold Secrets). Retrying may help if a proxy mangled the
    response; an informer relists.
    """

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url
        """The URL of the response."""


class ResponseTooLarge(MalformedResponse):
    """An answer's body, or one watch event, was larger than the client accepts.

    The client caps what it reads and decompresses (issue 27, finding 4): a list's body
    (``TransportOptions.max_list_body``), a single object's (``max_object_body``) and one
    watch event (``ClientOptions.max_watch_line``). The message names the request, the cap
    and the setting; raise that setting if your objects or lists are really that large.
    Sending the request again brings the same answer, so it is not retried; a watch that
    fails this way is re-established by its informer, which relists.
    """

    def __init__(self, message: str, *, url: str, method: str, limit: int, setting: str) -> None:
        super().__init__(message, url=url)
        self.method = method
        """The request's HTTP method."""
        self.limit = limit
        """The cap that was passed, in bytes."""
        self.setting = setting
        """The option that sets the cap (``TransportOptions.max_object_body``, ...)."""


class UnknownKind(ClientError):
    """The server does not serve this kind (for a custom resource: its CRD is not installed)."""

    __module__ = "setpoint"


@dataclass(frozen=True, slots=True)
class Cause:
    """One cause of a failure, usually one invalid field.

    ``field`` is the server's field path (``spec.replicas``, ``metadata.name``);
    ``reason`` is machine-readable (``FieldValueInvalid``, ``FieldValueRequired``).
    """

    reason: str
    message: str
    field: str


class ApiError(ClientError):
    """The API server answered with an error ``Status``.

    Subclasses name the common cases; catch :class:`ApiError` for any of them.
    """

    __module__ = "setpoint"

    code_default: int = 0

    def __init__(
        self,
        message: str,
        *,
        code: int,
        reason: str = "",
        status: Mapping[str, Any] | None = None,
        method: str = "",
        url: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        """HTTP status code."""
        self.reason = reason
        """The ``Status.reason`` field (``NotFound``, ``Conflict``, ``Invalid``, ...)."""
        self.status: Mapping[str, Any] = status or {}
        """The full ``Status`` object the server sent (empty if the body was not a Status)."""
        self.method = method
        """The HTTP method of the failed request."""
        self.url = url
        """The URL of the failed request."""

    @property
    def details(self) -> Mapping[str, Any]:
        """``Status.details``: name, group, kind, uid, causes, retryAfterSeconds."""
        details = self.status.get("details")
        return details if isinstance(details, Mapping) else {}

    @property
    def causes(self) -> list[Cause]:
        """``Status.details.causes`` as :class:`Cause` objects (may be empty)."""
        return [
            Cause(
                reason=str(c.get("reason", "")),
                message=str(c.get("message", "")),
                field=str(c.get("field", "")),
            )
            for c in self.details.get("causes") or []
            if isinstance(c, Mapping)
        ]


class BadRequest(ApiError):
    """400: the request itself is malformed (bad patch, bad selector, wrong body)."""


class Unauthorized(ApiError):
    """401: the credentials were not accepted (expired token, unknown client certificate)."""


class Forbidden(ApiError):
    """403: authenticated, but RBAC (or admission) forbids this verb on this resource.

    The server's message names the user, the verb, the resource and the namespace.
    """

    __module__ = "setpoint"


class NotFound(ApiError):
    """404: the object (or the resource type) does not exist."""

    __module__ = "setpoint"


class MethodNotAllowed(ApiError):
    """405: the resource does not support this verb (e.g. ``patch`` on a virtual resource)."""


class AlreadyExists(ApiError):
    """409 with reason ``AlreadyExists``: ``create`` of a name that is taken."""

    __module__ = "setpoint"


class Conflict(ApiError):
    """409 with reason ``Conflict``: a stale resourceVersion, precondition or apply conflict.

    The three causes: a stale ``resourceVersion`` (optimistic concurrency), a
    failed precondition, or a server-side apply field conflict. For the first
    two, re-read and retry. For an apply conflict, ``causes`` name the
    conflicting fields and their managers; retry with ``force=True`` only when
    this manager should take ownership.
    """

    __module__ = "setpoint"


class Gone(ApiError):
    """410: the requested ``resourceVersion`` is too old (compacted) or a continue token expired.

    A watcher must relist; a pager must restart the list.
    """

    __module__ = "setpoint"


class Expired(Gone):
    """410 with reason ``Expired``: a continue token or resourceVersion has expired."""

    __module__ = "setpoint"


class UnsupportedMediaType(ApiError):
    """415: the patch type is not supported for this resource (e.g. strategic merge on a CR)."""


class Invalid(ApiError):
    """422: the object failed validation. ``causes`` name each invalid field and why."""

    __module__ = "setpoint"


class TooManyRequests(ApiError):
    """429: the server is throttling (API Priority and Fairness). Honour ``retry_after``."""

    __module__ = "setpoint"

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked the client to wait, if it said."""
        value = self.details.get("retryAfterSeconds")
        return float(value) if isinstance(value, int | float) else None


class InternalError(ApiError):
    """500: the server failed; retried only when the server says when (``Retry-After``)."""


class ServiceUnavailable(ApiError):
    """503: the server (or an aggregated API / webhook behind it) is unavailable."""


class ServerTimeout(ApiError):
    """504 or reason ``ServerTimeout``/``Timeout``: the server gave up on the request."""


_BY_REASON: dict[str, type[ApiError]] = {
    "BadRequest": BadRequest,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "MethodNotAllowed": MethodNotAllowed,
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Gone": Gone,
    "Expired": Expired,
    "UnsupportedMediaType": UnsupportedMediaType,
    "Invalid": Invalid,
    "TooManyRequests": TooManyRequests,
    "InternalError": InternalError,
    "ServiceUnavailable": ServiceUnavailable,
    "ServerTimeout": ServerTimeout,
    "Timeout": ServerTimeout,
}

_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}


def error_from_response(
    code: int,
    body: Any,
    *,
    method: str,
    url: str,
    retry_after: float | None = None,
) -> ApiError:
    """Build the typed error for a failed response.

    ``body`` is the decoded JSON body (a ``Status`` for real API errors) or the
    raw text when it was not JSON. ``retry_after`` is the ``Retry-After``
    header, copied into ``details.retryAfterSeconds`` when the body lacks it.
    """
    status: dict[str, Any] = dict(body) if isinstance(body, Mapping) else {}
    if status.get("kind") != "Status":
        text = body if isinstance(body, str) else ""
        snippet = " ".join(text.split())[:300]
        status = {"kind": "Status", "code": code, "message": snippet or f"HTTP {code}"}
    given_reason = status.get("reason")
    reason = given_reason if isinstance(given_reason, str) else ""
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code) or ApiError
    if retry_after is not None:
        given = status.get("details")
        details = dict(given) if isinstance(given, Mapping) else {}
        details.setdefault("retryAfterSeconds", retry_after)
        status["details"] = details
    given_message = status.get("message")
    message = (
        given_message
        if isinstance(given_message, str) and given_message
        else f"HTTP {code} {reason}".strip()
    )
    return cls(
        f"{message} ({method} {url} -> {code}{' ' + reason if reason else ''})",
        code=code,
        reason=reason,
        status=status,
        method=method,
        url=url,
    )
