"""The API server's warnings (``Warning`` headers), handed to the code that made the request.

The API server answers some successful requests with advice in ``Warning`` headers: an
unknown or duplicate field it dropped (``fieldValidation=Warn``, its default), a
deprecated API version, an admission webhook's warning. The client logs each one (logger
``setpoint.client.transport``, level WARNING) and, inside :func:`collect_warnings`, also
hands it to the caller::

    with collect_warnings() as warnings:
        await client.create(obj, field_validation="Warn")
    if warnings:
        ...  # ['unknown field "spec.colour"']

The fake client (:class:`setpoint.testing.FakeClient`) reports the warnings it words
(unknown fields under ``Warn``) the same way, so a test can assert on them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Literal

__all__ = [
    "FieldValidation",
    "collect_warnings",
    "record_warning",
    "warning_text",
]

FieldValidation = Literal["Strict", "Warn", "Ignore"]
"""What the server does with fields a write's body has but the schema does not declare
(and with duplicate fields): ``Strict`` refuses the write (400 BadRequest, or 422 for a
patch), ``Warn`` drops them and answers a ``Warning`` header per field, ``Ignore`` drops
them silently. The query parameter ``fieldValidation`` of create, update, patch and apply.
"""

_collectors: ContextVar[tuple[list[str], ...]] = ContextVar(
    "setpoint_server_warning_collectors", default=()
)

# RFC 7234 warning-value: warn-code SP warn-agent SP quoted-string [SP warn-date]. The API
# server always sends code 299 and agent "-".
_WARNING = re.compile(r'^\s*\d{3}\s+\S+\s+"((?:[^"\\]|\\.)*)"')


def warning_text(header: str) -> str:
    """The text of one ``Warning`` header value (``299 - "text"`` -> ``text``).

    A value that is not in the RFC 7234 form is returned as it is.
    """
    match = _WARNING.match(header)
    if match is None:
        return header
    return re.sub(r"\\(.)", r"\1", match.group(1))


@contextlib.contextmanager
def collect_warnings() -> Iterator[list[str]]:
    """Collect the server warnings of the requests made inside the block, in order.

    Yields the list the warnings are appended to (their text, without the ``299 -``
    code and quotes). Blocks nest: an inner block's warnings also reach the outer one.
    The collection follows the task's context (``contextvars``): requests made by tasks
    started inside the block are collected too, other tasks' requests are not.
    """
    collected: list[str] = []
    token = _collectors.set((*_collectors.get(), collected))
    try:
        yield collected
    finally:
        _collectors.reset(token)


def record_warning(text: str) -> None:
    """Hand one warning's text to every :func:`collect_warnings` block around the caller.

    Called by the transport for each ``Warning`` header, and by the fake client.
    """
    for collected in _collectors.get():
        collected.append(text)
