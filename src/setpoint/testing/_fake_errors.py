"""The fake API server's errors: typed exceptions built from a ``Status``, worded as the server.

Every failure the fake answers goes through :func:`api_error`, which builds the ``Status``
document the server would send and turns it into the client's typed error exactly as the
live client does (:func:`setpoint.client.errors.error_from_response`), so code under test
sees the same class, reason, details and message. The helpers below word the common ones
(404, a stale resourceVersion, 422 with causes) as kube-apiserver does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from setpoint.client.errors import ApiError, Cause, error_from_response
from setpoint.testing._fake_kinds import KindRules

__all__ = [
    "api_error",
    "invalid",
    "kind_details",
    "not_found",
    "resource_details",
    "stale",
]


def api_error(
    code: int,
    reason: str,
    message: str,
    *,
    method: str,
    path: str,
    details: Mapping[str, Any] | None = None,
) -> ApiError:
    """A typed error built from a ``Status`` exactly as the live client builds it."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        status["details"] = dict(details)
    return error_from_response(code, status, method=method, url=f"fake://{path}")


def resource_details(rules: KindRules, name: str) -> dict[str, Any]:
    """``Status.details`` naming the resource (plural), as 404s and 409s do."""
    details: dict[str, Any] = {"name": name}
    if rules.info.gvk.group:
        details["group"] = rules.info.gvk.group
    details["kind"] = rules.info.plural
    return details


def kind_details(rules: KindRules, name: str) -> dict[str, Any]:
    """``Status.details`` naming the kind, as 422s and delete preconditions do."""
    details: dict[str, Any] = {"name": name}
    if rules.info.gvk.group:
        details["group"] = rules.info.gvk.group
    details["kind"] = rules.info.gvk.kind
    return details


def not_found(rules: KindRules, name: str, *, method: str, path: str) -> ApiError:
    """404 for one object, worded as the server words it."""
    return api_error(
        404,
        "NotFound",
        f'{rules.resource} "{name}" not found',
        method=method,
        path=path,
        details=resource_details(rules, name),
    )


def stale(rules: KindRules, name: str, *, method: str, path: str) -> ApiError:
    """409 for a write carrying a resourceVersion that is no longer the object's."""
    return api_error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rules.resource} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        method=method,
        path=path,
        details=resource_details(rules, name),
    )


def invalid(
    rules: KindRules, name: str, causes: list[Cause], *, method: str, path: str
) -> ApiError:
    """422 Invalid listing ``causes``, with the server's message layout."""
    parts = [f"{c.field}: {c.message}" for c in causes]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = kind_details(rules, name)
    details["causes"] = [
        {"reason": c.reason, "message": c.message, "field": c.field} for c in causes
    ]
    return api_error(
        422,
        "Invalid",
        f'{rules.qualified_kind} "{name}" is invalid: {text}',
        method=method,
        path=path,
        details=details,
    )
