"""A request log for one client: every HTTP request it made, for "no write" assertions."""

from __future__ import annotations


class RequestLog:
    """Every HTTP request one client makes, as (method, code), via ``transport.on_request``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def __call__(self, method: str, host: str, code: str) -> None:
        self.requests.append((method, code))

    def writes(self) -> list[tuple[str, str]]:
        """Requests other than reads."""
        return [r for r in self.requests if r[0] not in ("GET", "HEAD")]

    def clear(self) -> None:
        self.requests.clear()
