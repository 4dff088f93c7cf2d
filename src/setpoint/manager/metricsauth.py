"""Authenticated, authorized ``/metrics``: a scrape needs a token the API server vouches for.

kubebuilder serves metrics over HTTPS and checks each request against the API server
(controller-runtime's ``filters.WithAuthenticationAndAuthorization``). setpoint does the same
when :attr:`~setpoint.manager.options.ManagerOptions.metrics_secure` is set:

1. The request must carry ``Authorization: Bearer <token>``; otherwise 401.
2. A ``TokenReview`` asks the API server who the token belongs to; an unknown or expired
   token gets 401.
3. A ``SubjectAccessReview`` asks whether that user may ``get`` the non-resource URL of the
   request (``/metrics``); if not, 403.

The scraper (Prometheus) needs a ClusterRole with ``nonResourceURLs: ["/metrics"]``,
``verbs: ["get"]`` bound to its service account; the operator's own service account needs
``create`` on ``tokenreviews.authentication.k8s.io`` and
``subjectaccessreviews.authorization.k8s.io`` (kubebuilder's ``metrics-auth-role``).

Answers are cached for a few seconds (keyed by a hash of the token, never the token), so a
scraper costs the API server two reviews per cache period, not two per scrape; the cache is
bounded, and a flood of distinct bad tokens is bounded by the server's connection cap.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from setpoint.server.http import HttpHandler, HttpRequest, HttpResponse

__all__ = ["ApiServerAuth", "ReviewClient"]

log = logging.getLogger("setpoint.manager")

CACHE_TTL: Final = 10.0
"""Seconds an authentication or authorization answer is reused (the API server's delegated
authenticator caches for as long)."""

CACHE_SIZE: Final = 1024
"""Answers kept at most; the oldest are dropped first."""


class ReviewClient(Protocol):
    """What the filter needs of a client: ``create`` (TokenReview, SubjectAccessReview)."""

    async def create(
        self, obj: Any, *, dry_run: bool = False, field_manager: str | None = None
    ) -> Any:
        """Create ``obj`` and return the server's answer."""
        ...


@dataclass(frozen=True, slots=True)
class _User:
    name: str
    uid: str
    groups: tuple[str, ...]
    extra: Mapping[str, tuple[str, ...]]


class _TTLCache:
    """A small mapping whose entries expire; bounded in size."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any) -> tuple[bool, Any]:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock():
            self._entries.pop(key, None)
            return False, None
        return True, entry[1]

    def put(self, key: Any, value: Any) -> None:
        self._entries[key] = (self._clock() + self._ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)


class ApiServerAuth:
    """Authenticates and authorizes requests with the API server (TokenReview, SAR).

    Expected flow:
        ``ApiServerAuth(client).wrap(handler)`` gives a handler that answers 401 or 403
        itself and calls ``handler`` only for an allowed request.

    Guarantees:
        - No request reaches the wrapped handler without a token the API server
          authenticated and a user it authorized for ``<verb> <path>``.
        - Tokens are never logged, cached or echoed; the cache key is their SHA-256.
        - When the API server cannot be asked, the answer is 503 (fail closed).

    Caveats:
        Allowed and denied answers are reused for :data:`CACHE_TTL` seconds: revoking a
        scraper's access takes effect within that time.

    Every failure becomes a 401, 403 or 503 response; nothing is raised.

    Args:
        client: Creates the reviews (the manager's client).
        clock: Monotonic seconds, for the cache (a test seam).

    """

    def __init__(
        self, client: ReviewClient, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._client = client
        self._users = _TTLCache(CACHE_TTL, CACHE_SIZE, clock)
        self._decisions = _TTLCache(CACHE_TTL, CACHE_SIZE, clock)

    def wrap(self, handler: HttpHandler) -> HttpHandler:
        """``handler`` behind authentication and authorization."""

        async def guarded(request: HttpRequest) -> HttpResponse:
            refusal = await self.check(request)
            return refusal if refusal is not None else await handler(request)

        return guarded

    async def check(self, request: HttpRequest) -> HttpResponse | None:
        """``None`` if ``request`` may proceed, else the 401/403/503 response refusing it."""
        token = _bearer(request.headers.get("Authorization", ""))
        if token is None:
            return _unauthorized("a bearer token is required")
        try:
            user = await self._authenticate(token)
            if user is None:
                return _unauthorized("the token was not accepted by the API server")
            verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
            if not await self._authorize(user, verb, request.path):
                who, what = user.name[:120], request.path[:120]
                return HttpResponse.text(
                    403, f'forbidden: user "{who}" cannot {verb} path "{what}"\n'
                )
        except Exception as exc:
            log.warning(
                "metrics authentication/authorization could not ask the API server: %s",
                type(exc).__name__,
                exc_info=True,
            )
            return HttpResponse.text(503, "authentication unavailable, retry later\n")
        return None

    async def _authenticate(self, token: str) -> _User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        hit, cached = self._users.get(key)
        if hit:
            return _as_user(cached)
        review = await self._client.create(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = review.get("status") if isinstance(review, Mapping) else None
        user: _User | None = None
        if isinstance(status, Mapping) and status.get("authenticated") is True:
            info = status.get("user")
            if isinstance(info, Mapping) and isinstance(info.get("username"), str):
                groups = info.get("groups")
                extra = info.get("extra")
                user = _User(
                    name=info["username"],
                    uid=str(info.get("uid") or ""),
                    groups=tuple(g for g in groups if isinstance(g, str))
                    if isinstance(groups, list)
                    else (),
                    extra={
                        str(k): tuple(str(x) for x in v)
                        for k, v in extra.items()
                        if isinstance(v, list)
                    }
                    if isinstance(extra, Mapping)
                    else {},
                )
        self._users.put(key, user)
        return user

    async def _authorize(self, user: _User, verb: str, path: str) -> bool:
        key = (user.name, user.uid, user.groups, tuple(sorted(user.extra.items())), verb, path)
        hit, cached = self._decisions.get(key)
        if hit:
            return bool(cached)
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        review = await self._client.create(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
        )
        status = review.get("status") if isinstance(review, Mapping) else None
        allowed = isinstance(status, Mapping) and status.get("allowed") is True
        self._decisions.put(key, allowed)
        return allowed


def _as_user(value: Any) -> _User | None:
    return value if isinstance(value, _User) else None


def _bearer(header: str) -> str | None:
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def _unauthorized(why: str) -> HttpResponse:
    return HttpResponse(
        401,
        f"unauthorized: {why}\n".encode(),
        headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
    )
