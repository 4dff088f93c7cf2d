"""A check before an operator starts: can this client reach the API server and do its job.

Without it, an operator with a broken connection starts its caches, which retry with
backoff until the sync timeout runs out minutes later, and the message at the end no longer
says why. :func:`preflight` asks the server once, up front, and fails at once with a message
naming the kubeconfig, the server and what to do::

    user = await preflight(client, [AccessNeed(kinds.ConfigMap, why="controller 'audit'")])

Expected flow
-------------
1. ``GET /version``: proves the server is reachable and that the TLS handshake succeeds
   (the client trusts the server's certificate). Answers to anonymous requests too.
2. A ``SelfSubjectReview`` (``authentication.k8s.io/v1``): who the server thinks the client
   is. A rejected token or certificate is 401 here; a client without credentials is the
   anonymous user, which may not create the review (403).
3. One ``SelfSubjectAccessReview`` per needed verb, kind and namespace (``list`` and
   ``watch`` for a cache), all at once. A ``False`` answer is a missing RBAC rule.
   All three steps (with the discovery that step 3 needs) are asked at the same time, to
   save two round trips at every start; their answers are judged in the order above, so
   the failure of the earliest step is the one reported, as if the later ones had waited.

Guarantees
----------
- Each failure is one :class:`PreflightFailed` whose :attr:`~PreflightFailed.problem` says
  which (unreachable, untrusted certificate, unauthorized, no credentials, forbidden) and
  whose message names the kubeconfig (``ClientConfig.source``), the server URL and the fix.
- Nothing is written: the reviews are not stored by the server.

Caveats
-------
- An older server without ``SelfSubjectReview`` (before Kubernetes 1.28) is checked from
  step 3 on; the user is then named as the kubeconfig's.
- Kinds the server does not serve are skipped: the cache reports them itself
  (``KindNotServed``, naming the kind and its CRD).
- Access reviews do not know label or field selectors: a rule that allows the list anyway
  passes.

Errors
------
:class:`PreflightFailed`, a :class:`~setpoint.client.errors.ClientError`. Other API errors
(a 500 from the server) propagate as they are.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.client.errors import (
    ApiError,
    ClientError,
    ConnectionFailed,
    Forbidden,
    RequestTimeout,
    TLSVerificationFailed,
    Unauthorized,
    UnknownKind,
)

if TYPE_CHECKING:
    from setpoint.client.client import Client

__all__ = ["AccessNeed", "PreflightFailed", "PreflightProblem", "preflight"]

_ANONYMOUS = "system:anonymous"
_USER_IN_MESSAGE = re.compile(r'User "([^"]*)"')


class PreflightProblem(Enum):
    """Which part of :func:`preflight` failed."""

    UNREACHABLE = "unreachable"
    """No connection: refused, DNS, timeout."""
    UNTRUSTED_CERTIFICATE = "untrusted-certificate"
    """The server's certificate failed verification."""
    UNAUTHORIZED = "unauthorized"
    """401: the token or client certificate was rejected (expired, revoked, wrong cluster)."""
    NO_CREDENTIALS = "no-credentials"
    """The server treats the client as ``system:anonymous``."""
    FORBIDDEN = "forbidden"
    """The user may not do what the operator needs (an RBAC rule is missing)."""


class PreflightFailed(ClientError):
    """The API server cannot be used as configured; the message says why and what to do."""

    def __init__(
        self, message: str, *, problem: PreflightProblem, server: str, source: str
    ) -> None:
        super().__init__(message)
        self.problem = problem
        """Which check failed."""
        self.server = server
        """The API server URL."""
        self.source = source
        """Where the configuration came from (``kubeconfig /path (context c)``)."""


@dataclass(frozen=True, slots=True)
class AccessNeed:
    """Verbs the operator needs on a kind, checked with a ``SelfSubjectAccessReview``."""

    kind: GroupVersionKind
    """The kind."""
    verbs: tuple[str, ...] = ("list", "watch")
    """The verbs needed (a cache needs ``list`` and ``watch``)."""
    namespace: str | None = None
    """Where: one namespace, or ``None`` for all namespaces (and cluster-scoped kinds)."""
    why: str = ""
    """Who needs it, for the message (``"controller 'audit'"``)."""


async def preflight(client: Client, needs: Iterable[AccessNeed] = ()) -> str:
    """Check the connection, the credentials and the access ``needs``; return the user name.

    See the module docstring for the steps and the guarantees.

    Raises:
        PreflightFailed: the server is unreachable, its certificate is not trusted, the
            credentials are rejected or missing, or a needed verb is denied.

    """
    return await _Check(client).run(list(needs))


class _Check:
    """One preflight run: the client and what messages say about it."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.server = client.config.server
        self.source = client.config.source or "the client configuration"

    def failed(self, problem: PreflightProblem, message: str) -> PreflightFailed:
        return PreflightFailed(message, problem=problem, server=self.server, source=self.source)

    def unauthorized(self) -> PreflightFailed:
        return self.failed(
            PreflightProblem.UNAUTHORIZED,
            f"the API server {self.server} rejected the credentials from {self.source} (401 "
            "Unauthorized): the token or client certificate is invalid, expired or from "
            "another cluster. Get fresh credentials (for a cloud cluster, re-run its CLI's "
            "login or get-credentials command; for a service account, check its token)",
        )

    def anonymous(self) -> PreflightFailed:
        return self.failed(
            PreflightProblem.NO_CREDENTIALS,
            f"the API server {self.server} treats the client as {_ANONYMOUS}: {self.source} "
            "gives no credentials (no token, client certificate or exec plugin for its "
            "user). Add the user's credentials to the kubeconfig, or pick a context that has "
            "them",
        )

    async def run(self, needs: list[AccessNeed]) -> str:
        # All steps at once (two round trips less at every start); a failure of an earlier
        # step wins, as when they were asked in that order.
        reached, who, access = await asyncio.gather(
            self.reach(), self.who_am_i(), self.access(needs), return_exceptions=True
        )
        if isinstance(reached, BaseException):
            raise reached
        if isinstance(who, BaseException):
            raise who
        if isinstance(access, BaseException):
            raise access
        user: str = who
        checks, answers = access
        denied: dict[tuple[str, str | None, str], list[str]] = {}
        for (need, verb, body), allowed in zip(checks, answers, strict=True):
            if allowed:
                continue
            attributes = body["spec"]["resourceAttributes"]
            group = attributes["group"]
            resource = attributes["resource"] + (f".{group}" if group else "")
            verbs = denied.setdefault((resource, attributes.get("namespace"), need.why), [])
            if verb not in verbs:
                verbs.append(verb)
        if denied:
            what = "; ".join(
                f"{'/'.join(verbs)} {resource} "
                + (f"in namespace {namespace}" if namespace else "in all namespaces")
                + (f" (needed by {why})" if why else "")
                for (resource, namespace, why), verbs in denied.items()
            )
            raise self.failed(
                PreflightProblem.FORBIDDEN,
                f"user {user!r} (from {self.source}) may not {what}, on {self.server}. Grant "
                "the operator's RBAC (`setpoint generate rbac` writes it from the operator's "
                "markers) to this user or service account, or connect as one that has it",
            )
        return user

    async def reach(self) -> None:
        """Step 1: ``GET /version``, its failures named (unreachable, untrusted, 401)."""
        try:
            await self.client.server_version()
        except TLSVerificationFailed as exc:
            raise self.failed(
                PreflightProblem.UNTRUSTED_CERTIFICATE, f"{self.source}: {exc}"
            ) from exc
        except (ConnectionFailed, RequestTimeout) as exc:
            os_error = getattr(exc.__cause__, "os_error", None)
            if isinstance(exc, RequestTimeout):
                reason = f"no answer within {exc.timeout:g}s"
            else:
                reason = str(os_error or exc.__cause__ or exc)
            raise self.failed(
                PreflightProblem.UNREACHABLE,
                f"cannot connect to the API server {self.server} named by {self.source} "
                f"({reason}): check that the API server is running and reachable from here, "
                "and that the server URL (or the context) names the cluster you mean",
            ) from exc
        except Unauthorized as exc:
            raise self.unauthorized() from exc

    async def access(
        self, needs: list[AccessNeed]
    ) -> tuple[list[tuple[AccessNeed, str, dict[str, Any]]], list[bool]]:
        """The review asked for each verb of each need (of a served kind), and its answer."""
        checks: list[tuple[AccessNeed, str, dict[str, Any]]] = []
        for need in needs:
            info = await self.info(need.kind)
            if info is not None:
                checks.extend((need, verb, _review(need, verb, info)) for verb in need.verbs)
        answers = await asyncio.gather(*(self.allowed(body) for _, _, body in checks))
        return checks, list(answers)

    async def who_am_i(self) -> str:
        """The user the server sees, from a SelfSubjectReview (the kubeconfig's if absent)."""
        fallback = "the kubeconfig's user"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            response = await self.client.transport.request(
                "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body
            )
        except Unauthorized as exc:
            raise self.unauthorized() from exc
        except Forbidden as exc:
            match = _USER_IN_MESSAGE.search(str(exc))
            user = match.group(1) if match else fallback
            if user == _ANONYMOUS:
                raise self.anonymous() from exc
            return user
        except ApiError:
            return fallback  # a server before 1.28: no SelfSubjectReview
        status = response.body.get("status") if isinstance(response.body, dict) else None
        info = status.get("userInfo") if isinstance(status, dict) else None
        name = info.get("username") if isinstance(info, dict) else None
        if name == _ANONYMOUS:
            raise self.anonymous()
        return str(name) if name else fallback

    async def info(self, kind: GroupVersionKind) -> ResourceInfo | None:
        try:
            return await self.client.resource_info(kind)
        except UnknownKind:
            return None  # the cache names the kind itself (KindNotServed)

    async def allowed(self, body: dict[str, Any]) -> bool:
        try:
            response = await self.client.transport.request(
                "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body
            )
        except Forbidden as exc:
            match = _USER_IN_MESSAGE.search(str(exc))
            if match and match.group(1) == _ANONYMOUS:
                raise self.anonymous() from exc
            return True  # may not ask: let the cache find out (it reports its own 403)
        status = response.body.get("status") if isinstance(response.body, dict) else None
        return bool(isinstance(status, dict) and status.get("allowed"))


def _review(need: AccessNeed, verb: str, info: ResourceInfo) -> dict[str, Any]:
    attributes: dict[str, Any] = {"group": need.kind.group, "resource": info.plural, "verb": verb}
    if need.namespace and info.namespaced:
        attributes["namespace"] = need.namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
