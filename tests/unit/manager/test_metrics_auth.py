"""The metrics filter's decisions and cache (the real API server is in the integration test).

A small review client answers TokenReview and SubjectAccessReview from tables, and counts the
reviews, so each test states exactly what the API server would say.
"""

from __future__ import annotations

from typing import Any

from setpoint.manager.metricsauth import CACHE_TTL, ApiServerAuth
from setpoint.manager.options import ManagerOptions
from setpoint.server import HttpRequest, HttpResponse


class Reviews:
    """Answers reviews: ``tokens`` maps a token to a user name; ``allowed`` holds user names."""

    def __init__(self) -> None:
        self.tokens: dict[str, str] = {"good": "system:serviceaccount:monitoring:prometheus"}
        self.allowed: set[str] = {"system:serviceaccount:monitoring:prometheus"}
        self.calls: list[dict[str, Any]] = []
        self.fail = False

    async def create(
        self, obj: Any, *, dry_run: bool = False, field_manager: str | None = None
    ) -> Any:
        self.calls.append(obj)
        if self.fail:
            raise ConnectionError("API server unreachable")
        if obj["kind"] == "TokenReview":
            user = self.tokens.get(obj["spec"]["token"])
            status: dict[str, Any] = {"authenticated": user is not None}
            if user is not None:
                status["user"] = {"username": user, "uid": "u-1", "groups": ["g"]}
            return {**obj, "status": status}
        spec = obj["spec"]
        assert spec["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
        return {**obj, "status": {"allowed": spec["user"] in self.allowed}}


async def metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse.text(200, "metric 1\n")


def scrape(token: str | None) -> HttpRequest:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return HttpRequest("GET", "/metrics", headers=headers, remote="10.0.0.9")


async def test_requests_need_an_authenticated_and_authorized_token() -> None:
    """No token or a bad one: 401; a known user without RBAC: 403; allowed: the metrics."""
    reviews = Reviews()
    reviews.tokens["nobody"] = "system:serviceaccount:default:nobody"
    handler = ApiServerAuth(reviews).wrap(metrics)
    missing = await handler(scrape(None))
    assert missing.status == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert (await handler(scrape("bad"))).status == 401
    denied = await handler(scrape("nobody"))
    assert denied.status == 403
    assert b"system:serviceaccount:default:nobody" in denied.body
    allowed = await handler(scrape("good"))
    assert (allowed.status, allowed.body) == (200, b"metric 1\n")
    basic = HttpRequest("GET", "/metrics", headers={"Authorization": "Basic Z29vZA=="})
    assert (await handler(basic)).status == 401


async def test_answers_are_cached_for_a_while_and_tokens_never_kept() -> None:
    """Repeated scrapes reuse the reviews for CACHE_TTL seconds; the cache holds no token."""
    now = [1000.0]
    reviews = Reviews()
    auth = ApiServerAuth(reviews, clock=lambda: now[0])
    handler = auth.wrap(metrics)
    for _ in range(5):
        assert (await handler(scrape("good"))).status == 200
    assert len(reviews.calls) == 2  # one TokenReview, one SubjectAccessReview
    assert "good" not in repr(auth._users._entries)
    now[0] += CACHE_TTL + 1
    assert (await handler(scrape("good"))).status == 200
    assert len(reviews.calls) == 4
    reviews.allowed.clear()  # access revoked: seen once the cached answer expires
    now[0] += CACHE_TTL + 1
    assert (await handler(scrape("good"))).status == 403


async def test_fails_closed_when_the_api_server_cannot_be_asked() -> None:
    """A review that fails: 503, and the wrapped handler never runs."""
    reviews = Reviews()
    reviews.fail = True
    assert (await ApiServerAuth(reviews).wrap(metrics)(scrape("good"))).status == 503


def test_metrics_default_to_loopback_only() -> None:
    """Issue 10/18: with no settings, /metrics listens on 127.0.0.1 only."""
    assert ManagerOptions().metrics_bind_address == "127.0.0.1:8080"
    assert ManagerOptions().metrics_secure is False
