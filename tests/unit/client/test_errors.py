"""Mapping of API server responses to typed errors (client-go's apierrors rules)."""

from typing import Any

import pytest

from setpoint.client.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Expired,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerTimeout,
    TooManyRequests,
    error_from_response,
)


def status(code: int, reason: str = "", **details: object) -> dict[str, Any]:
    return {
        "kind": "Status",
        "code": code,
        "reason": reason,
        "message": f"m{code}",
        "details": details,
    }


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (409, "", Conflict),
        (410, "Gone", Gone),
        (410, "Expired", Expired),
        (404, "NotFound", NotFound),
        (403, "Forbidden", Forbidden),
        (422, "Invalid", Invalid),
        (504, "Timeout", ServerTimeout),
        (429, "TooManyRequests", TooManyRequests),
        (418, "", ApiError),
    ],
)
def test_reason_wins_over_code(code: int, reason: str, expected: type) -> None:
    error = error_from_response(code, status(code, reason), method="GET", url="https://s/x")
    assert type(error) is expected
    assert error.code == code
    assert "GET https://s/x" in str(error)


def test_expired_is_a_gone() -> None:
    error = error_from_response(410, status(410, "Expired"), method="GET", url="u")
    assert isinstance(error, Gone)


def test_non_status_body_becomes_a_readable_message() -> None:
    error = error_from_response(502, "<html>\n  Bad   gateway </html>", method="GET", url="u")
    assert "Bad gateway" in str(error)
    assert error.status["code"] == 502


def test_retry_after_header_fills_details() -> None:
    error = error_from_response(
        429, status(429, "TooManyRequests"), method="GET", url="u", retry_after=3.0
    )
    assert isinstance(error, TooManyRequests)
    assert error.retry_after == 3.0


def test_causes_are_parsed() -> None:
    body = status(
        422,
        "Invalid",
        causes=[
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.x"},
            "garbage",
        ],
    )
    error = error_from_response(422, body, method="POST", url="u")
    assert [(c.reason, c.field) for c in error.causes] == [("FieldValueRequired", "spec.x")]
