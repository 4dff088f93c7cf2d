"""Fault injection for the fake client and for the real one: failures, latency, timeouts.

A reconciler's failure paths (a Conflict on the status write, a timeout on a
delete, a 429 storm) are where operators break, and a healthy test cluster
never produces them on demand. :class:`Faults` does::

    fake = FakeClient(objects=[...])
    fake.faults.fail_next("replace_status", kind=Widget, error=Conflict)
    fake.faults.add_latency("get", 0.2)
    fake.faults.timeout_next("delete", applied=True)   # the delete happens, the answer is lost

The same rules wrap the real client, in the spirit of controller-runtime's
interceptor package, so integration tests can inject faults too::

    client = FaultInjectingClient(k8s)
    client.faults.fail_next("create", kind=kinds.ConfigMap, error=TooManyRequests)

Verbs are the client's method names (``get``, ``list``, ``list_page``,
``watch``, ``create``, ``update``, ``replace_status``, ``patch``, ``apply``,
``delete``, ``delete_collection``, ``get_subresource``,
``create_subresource``, ``update_subresource``, ``get_scale``, ``set_scale``)
or ``"*"`` for any. A rule fires for calls matching its verb and its optional
kind, namespace and name; ``skip`` lets that many matching calls through
first and ``times`` bounds how often it fires (``None``: until removed).
Every call is recorded in :attr:`Faults.calls`, so tests can also assert what
was (not) called. For a ``watch``, rules run when iteration starts, which is
when the real client sends the request.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, cast

from setpoint.api.clock import Clock, LoopClock, clock_sleep
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject, gvk_of, name_of, namespace_of
from setpoint.api.types import TypedObject, is_typed
from setpoint.client.errors import (
    ApiError,
    ConnectionFailed,
    InternalError,
    RequestTimeout,
    error_from_response,
)
from setpoint.client.patch import Patch

if TYPE_CHECKING:
    from setpoint.api.kinds import ResourceInfo
    from setpoint.api.types import Kind
    from setpoint.client.client import Client, Preconditions
    from setpoint.client.objects import WatchEvent

__all__ = [
    "Call",
    "ErrorSpec",
    "FaultInjectingClient",
    "FaultRule",
    "Faults",
    "Verb",
]

T = TypeVar("T")

Verb = Literal[
    "*",
    "get",
    "list",
    "list_page",
    "watch",
    "create",
    "update",
    "replace_status",
    "patch",
    "apply",
    "delete",
    "delete_collection",
    "get_subresource",
    "create_subresource",
    "update_subresource",
    "get_scale",
    "set_scale",
]
"""A client method name, or ``"*"`` for every method."""

_VERBS = frozenset(Verb.__args__)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Call:
    """One client call as fault rules see it (and as :attr:`Faults.calls` records it)."""

    verb: str
    """The client method called."""
    gvk: GroupVersionKind | None
    """The kind addressed."""
    namespace: str | None = None
    """The namespace addressed (``None`` for cluster-scoped kinds and all-namespace lists)."""
    name: str | None = None
    """The object name addressed (``None`` for lists, watches and generateName creates)."""
    subresource: str | None = None
    """The subresource addressed, if any."""
    body: Any = None
    """What was sent: the object for create/update/apply, the patch for patch."""
    resource_version: str | None = None
    """The resourceVersion a list or watch asked for (where a watch resumes from), if any."""

    @property
    def path(self) -> str:
        """A REST-like path naming the call's target, for error messages."""
        gvk = self.gvk
        base = (
            "" if gvk is None else (f"/apis/{gvk.group}/{gvk.version}" if gvk.group else "/api/v1")
        )
        if self.namespace:
            base += f"/namespaces/{self.namespace}"
        if gvk is not None:
            base += f"/{gvk.kind.lower()}"
        if self.name:
            base += f"/{self.name}"
        if self.subresource:
            base += f"/{self.subresource}"
        return base


ErrorSpec = BaseException | type[BaseException] | Callable[[Call], BaseException]
"""What a failing rule raises: an exception (copied per raise), an exception class (built
with a server-like message naming the call), or a function of the :class:`Call`."""

_METHODS = {
    "get": "GET",
    "list": "GET",
    "list_page": "GET",
    "watch": "GET",
    "get_subresource": "GET",
    "get_scale": "GET",
    "create": "POST",
    "create_subresource": "POST",
    "update": "PUT",
    "replace_status": "PUT",
    "update_subresource": "PUT",
    "patch": "PATCH",
    "apply": "PATCH",
    "set_scale": "PATCH",
    "delete": "DELETE",
    "delete_collection": "DELETE",
}

_DEFAULT_STATUS: dict[str, tuple[int, str, str]] = {
    "BadRequest": (400, "BadRequest", "the request is malformed"),
    "Unauthorized": (401, "Unauthorized", "Unauthorized"),
    "Forbidden": (403, "Forbidden", "the user may not perform this request"),
    "NotFound": (404, "NotFound", "the object was not found"),
    "MethodNotAllowed": (405, "MethodNotAllowed", "the verb is not supported"),
    "AlreadyExists": (409, "AlreadyExists", "the object already exists"),
    "Conflict": (
        409,
        "Conflict",
        "the object has been modified; please apply your changes to the latest version and "
        "try again",
    ),
    "Gone": (410, "Gone", "the requested resourceVersion is too old"),
    "Expired": (410, "Expired", "too old resource version"),
    "UnsupportedMediaType": (415, "UnsupportedMediaType", "unsupported media type"),
    "Invalid": (422, "Invalid", "the object is invalid"),
    "TooManyRequests": (429, "TooManyRequests", "too many requests, please try again later"),
    "InternalError": (500, "InternalError", "an error on the server has prevented the request"),
    "ServiceUnavailable": (503, "ServiceUnavailable", "the server is currently unavailable"),
    "ServerTimeout": (504, "Timeout", "the server was unable to return a response in time"),
}


def build_error(spec: ErrorSpec | None, call: Call) -> BaseException:
    """The exception a failing rule raises for ``call`` (see :data:`ErrorSpec`)."""
    method = _METHODS.get(call.verb, "GET")
    url = f"fault://{call.path}"
    if spec is None:
        spec = InternalError
    if isinstance(spec, BaseException):
        # A fresh exception per raise (tracebacks would pile up on one instance); built
        # without __init__, since typed errors take keyword-only arguments copy cannot pass.
        fresh = type(spec).__new__(type(spec))
        fresh.__dict__.update(spec.__dict__)
        fresh.args = spec.args
        return fresh
    if isinstance(spec, type):
        if issubclass(spec, ApiError):
            code, reason, text = _DEFAULT_STATUS.get(
                spec.__name__, (500, "InternalError", "an injected error")
            )
            details: dict[str, Any] = {}
            if call.name:
                details["name"] = call.name
            if call.gvk is not None:
                details["kind"] = call.gvk.kind
                if call.gvk.group:
                    details["group"] = call.gvk.group
            if reason == "TooManyRequests":
                details["retryAfterSeconds"] = 1
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": f"injected fault: {text} ({call.verb} {call.path})",
                "reason": reason,
                "code": code,
                "details": details,
            }
            error = error_from_response(code, status, method=method, url=url)
            if not isinstance(error, spec):
                error = spec(str(error), code=code, reason=reason, status=status, url=url)
            return error
        if issubclass(spec, RequestTimeout):
            return RequestTimeout(
                f"injected fault: {method} {url} did not complete in time", url=url, timeout=0.0
            )
        if issubclass(spec, ConnectionFailed):
            return ConnectionFailed(f"injected fault: cannot reach {url}", url=url)
        return cast("type[BaseException]", spec)(f"injected fault on {call.verb} {call.path}")
    return spec(call)


Action = Callable[[Call], Awaitable[None]]


@dataclass(eq=False)
class FaultRule:
    """One fault rule. Keep the handle to inspect :attr:`hits` or :meth:`remove` it."""

    verbs: frozenset[str]
    kind: GroupVersionKind | None
    namespace: str | None
    name: str | None
    times: int | None
    skip: int
    before: Action | None
    after: Action | None
    description: str
    hits: int = 0
    """How many times the rule fired."""
    seen: int = 0
    """How many matching calls it saw (fired or skipped)."""
    _owner: Faults | None = field(default=None, repr=False)

    def matches(self, call: Call) -> bool:
        """Whether ``call`` is one this rule targets (ignoring skip and times)."""
        return (
            ("*" in self.verbs or call.verb in self.verbs)
            and (self.kind is None or call.gvk == self.kind)
            and (self.namespace is None or call.namespace == self.namespace)
            and (self.name is None or call.name == self.name)
        )

    @property
    def exhausted(self) -> bool:
        """Whether the rule has fired as often as it may."""
        return self.times is not None and self.hits >= self.times

    def remove(self) -> None:
        """Stop applying this rule."""
        if self._owner is not None:
            self._owner.remove(self)


def _kind(kind: GroupVersionKind | type[TypedObject] | None) -> GroupVersionKind | None:
    if kind is None or isinstance(kind, GroupVersionKind):
        return kind
    gvk = getattr(kind, "gvk", None)
    if not isinstance(gvk, GroupVersionKind):
        raise TypeError(f"kind must be a GroupVersionKind or a typed class, not {kind!r}")
    return gvk


def _verbs(verb: str | Sequence[str]) -> frozenset[str]:
    verbs = frozenset([verb] if isinstance(verb, str) else verb)
    unknown = verbs - _VERBS
    if unknown or not verbs:
        raise ValueError(
            f"unknown verb(s) {sorted(unknown)}: use client method names "
            f"({', '.join(sorted(_VERBS - {'*'}))}) or '*'"
        )
    return verbs


class Faults:
    """A set of fault rules and a log of calls. See the module docstring.

    Injected latency and timeouts wait on ``clock`` (the running loop's by default); a test
    that passes a :class:`~setpoint.api.clock.ManualClock` moves time itself instead of
    sleeping.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else LoopClock()
        """Where injected latency and timeouts wait."""
        self.rules: list[FaultRule] = []
        """Active rules, applied in the order they were added."""
        self.calls: list[Call] = []
        """Every call seen, in order (a test can assert on it)."""

    # -- adding rules ----------------------------------------------------------------------

    def _add(
        self,
        verb: str | Sequence[str],
        *,
        kind: GroupVersionKind | type[TypedObject] | None,
        namespace: str | None,
        name: str | None,
        times: int | None,
        skip: int,
        before: Action | None = None,
        after: Action | None = None,
        description: str,
    ) -> FaultRule:
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1 (or None for every call), not {times}")
        if skip < 0:
            raise ValueError(f"skip must be >= 0, not {skip}")
        rule = FaultRule(
            verbs=_verbs(verb),
            kind=_kind(kind),
            namespace=namespace,
            name=name,
            times=times,
            skip=skip,
            before=before,
            after=after,
            description=description,
            _owner=self,
        )
        self.rules.append(rule)
        return rule

    def fail_next(
        self,
        verb: Verb | Sequence[Verb] = "*",
        *,
        kind: GroupVersionKind | type[TypedObject] | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        skip: int = 0,
        error: ErrorSpec | None = None,
        applied: bool = False,
    ) -> FaultRule:
        """Make the next ``times`` matching calls raise ``error`` (default: 500 InternalError).

        ``error`` may be an exception class (``Conflict``, ``TooManyRequests``, ...),
        which is built with a server-like message naming the call, an exception,
        or a function of the :class:`Call`. With ``applied=True`` the call takes
        effect before the error is raised, like a write whose answer was lost.
        """

        async def fail(call: Call) -> None:
            raise build_error(error, call)

        return self._add(
            verb,
            kind=kind,
            namespace=namespace,
            name=name,
            times=times,
            skip=skip,
            before=None if applied else fail,
            after=fail if applied else None,
            description=f"fail {verb} with {error!r}",
        )

    def add_latency(
        self,
        verb: Verb | Sequence[Verb],
        seconds: float,
        *,
        kind: GroupVersionKind | type[TypedObject] | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = None,
        skip: int = 0,
    ) -> FaultRule:
        """Delay matching calls by ``seconds`` before they run (every call unless ``times``)."""
        if seconds < 0:
            raise ValueError(f"latency must be >= 0 seconds, not {seconds}")

        async def delay(call: Call) -> None:
            await clock_sleep(self.clock, seconds)

        return self._add(
            verb,
            kind=kind,
            namespace=namespace,
            name=name,
            times=times,
            skip=skip,
            before=delay,
            description=f"delay {verb} by {seconds}s",
        )

    def timeout_next(
        self,
        verb: Verb | Sequence[Verb] = "*",
        *,
        kind: GroupVersionKind | type[TypedObject] | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = 1,
        skip: int = 0,
        after: float = 0.0,
        applied: bool = False,
    ) -> FaultRule:
        """Make matching calls raise :class:`RequestTimeout` after ``after`` seconds.

        With ``applied=True`` the call takes effect first: the ambiguous
        outcome a real client timeout leaves (did the write happen?).
        """
        if after < 0:
            raise ValueError(f"after must be >= 0 seconds, not {after}")

        async def time_out(call: Call) -> None:
            await clock_sleep(self.clock, after)
            method = _METHODS.get(call.verb, "GET")
            raise RequestTimeout(
                f"injected fault: {method} fault://{call.path} did not complete within "
                f"{after:.1f}s",
                url=f"fault://{call.path}",
                timeout=after,
            )

        return self._add(
            verb,
            kind=kind,
            namespace=namespace,
            name=name,
            times=times,
            skip=skip,
            before=None if applied else time_out,
            after=time_out if applied else None,
            description=f"time out {verb} after {after}s",
        )

    def intercept(
        self,
        verb: Verb | Sequence[Verb],
        handler: Callable[[Call], Awaitable[None] | None],
        *,
        kind: GroupVersionKind | type[TypedObject] | None = None,
        namespace: str | None = None,
        name: str | None = None,
        times: int | None = None,
        skip: int = 0,
    ) -> FaultRule:
        """Run ``handler(call)`` (sync or async) before matching calls; it may raise.

        Use it to simulate another writer that gets in first (change the object
        in the fake from the handler, and the intercepted update meets a real
        Conflict), or to record arguments.
        """

        async def run(call: Call) -> None:
            result = handler(call)
            if inspect.isawaitable(result):
                await result

        return self._add(
            verb,
            kind=kind,
            namespace=namespace,
            name=name,
            times=times,
            skip=skip,
            before=run,
            description=f"intercept {verb} with {handler!r}",
        )

    def remove(self, rule: FaultRule) -> None:
        """Stop applying ``rule``."""
        if rule in self.rules:
            self.rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule and forget recorded calls."""
        self.rules.clear()
        self.calls.clear()

    def calls_to(
        self, verb: Verb, kind: GroupVersionKind | type[TypedObject] | None = None
    ) -> list[Call]:
        """The recorded calls of one verb (and kind, if given)."""
        gvk = _kind(kind)
        return [c for c in self.calls if c.verb == verb and (gvk is None or c.gvk == gvk)]

    # -- running -------------------------------------------------------------------------------

    def _firing(self, call: Call) -> list[FaultRule]:
        firing = []
        for rule in list(self.rules):
            if rule.exhausted or not rule.matches(call):
                continue
            rule.seen += 1
            if rule.seen <= rule.skip:
                continue
            rule.hits += 1
            firing.append(rule)
            if rule.exhausted:
                self.remove(rule)
        return firing

    async def run(self, call: Call, operation: Callable[[], Awaitable[T]]) -> T:
        """Record ``call``, apply the rules before it, run ``operation``, apply rules after it."""
        self.calls.append(call)
        firing = self._firing(call)
        for rule in firing:
            if rule.before is not None:
                await rule.before(call)
        result = await operation()
        for rule in firing:
            if rule.after is not None:
                await rule.after(call)
        return result


# ----------------------------------------------------------------------------- call helpers


def kind_gvk(kind: Any) -> GroupVersionKind | None:
    """The GVK of a kind argument (GVK or typed class), or ``None`` if it has none."""
    if isinstance(kind, GroupVersionKind):
        return kind
    gvk = getattr(kind, "gvk", None)
    return gvk if isinstance(gvk, GroupVersionKind) else None


def object_call(verb: str, obj: Any, *, subresource: str | None = None) -> Call:
    """The :class:`Call` for a write that carries an object (create, update, apply)."""
    data: JsonObject = obj.to_object() if is_typed(obj) else obj
    try:
        gvk: GroupVersionKind | None = type(obj).gvk if is_typed(obj) else gvk_of(data)
    except ValueError:
        gvk = None
    return Call(
        verb,
        gvk,
        namespace_of(data) or None,
        name_of(data) or None,
        subresource,
        body=data,
    )


# ----------------------------------------------------------------------------- interceptor


class FaultInjectingClient:
    """Wraps a client (the real one, or any with its methods) and applies :class:`Faults`.

    Every verb goes through :meth:`Faults.run` and then to the wrapped client;
    attributes it does not define (``config``, ``transport``, ``mapper``,
    ``default_namespace``, ...) come from the wrapped client. Closing this
    client closes the wrapped one.
    """

    def __init__(self, inner: Client | Any, faults: Faults | None = None) -> None:
        self.inner = inner
        """The wrapped client."""
        self.faults = faults or Faults()
        """The rules applied to every call."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # The members of ApiClient that are not verbs, written out: from Python 3.12 on,
    # isinstance() with a runtime protocol does not see what __getattr__ lends.
    @property
    def default_namespace(self) -> str:
        """The wrapped client's default namespace."""
        return str(self.inner.default_namespace)

    async def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """The wrapped client's discovery answer for ``kind``, without faults."""
        info: ResourceInfo = await self.inner.resource_info(kind)
        return info

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the wrapped client."""
        await self.inner.close()

    async def get(self, kind: Kind[object], name: str, *, namespace: str | None = None) -> Any:
        """:meth:`Client.get <setpoint.client.Client.get>`, with faults."""
        call = Call("get", kind_gvk(kind), namespace, name)
        return await self.faults.run(call, lambda: self.inner.get(kind, name, namespace=namespace))

    async def list(self, kind: Kind[object], **kwargs: Any) -> Any:
        """:meth:`Client.list <setpoint.client.Client.list>`, with faults."""
        call = Call(
            "list",
            kind_gvk(kind),
            kwargs.get("namespace"),
            resource_version=kwargs.get("resource_version"),
        )
        return await self.faults.run(call, lambda: self.inner.list(kind, **kwargs))

    async def list_page(self, kind: Kind[object], **kwargs: Any) -> Any:
        """:meth:`Client.list_page <setpoint.client.Client.list_page>`, with faults."""
        call = Call(
            "list_page",
            kind_gvk(kind),
            kwargs.get("namespace"),
            resource_version=kwargs.get("resource_version"),
        )
        return await self.faults.run(call, lambda: self.inner.list_page(kind, **kwargs))

    def watch(self, kind: Kind[object], **kwargs: Any) -> _FaultyWatch:
        """:meth:`Client.watch <setpoint.client.Client.watch>`; rules run when iteration starts."""
        call = Call(
            "watch",
            kind_gvk(kind),
            kwargs.get("namespace"),
            resource_version=kwargs.get("resource_version"),
        )
        return _FaultyWatch(self.faults, call, self.inner.watch(kind, **kwargs))

    async def create(self, obj: Any, **kwargs: Any) -> Any:
        """:meth:`Client.create <setpoint.client.Client.create>`, with faults."""
        call = object_call("create", obj)
        return await self.faults.run(call, lambda: self.inner.create(obj, **kwargs))

    async def update(self, obj: Any, **kwargs: Any) -> Any:
        """:meth:`Client.update <setpoint.client.Client.update>`, with faults."""
        call = object_call("update", obj, subresource=kwargs.get("subresource"))
        return await self.faults.run(call, lambda: self.inner.update(obj, **kwargs))

    async def replace_status(self, obj: Any, **kwargs: Any) -> Any:
        """:meth:`Client.replace_status <setpoint.client.Client.replace_status>`, with faults."""
        call = object_call("replace_status", obj, subresource="status")
        return await self.faults.run(call, lambda: self.inner.replace_status(obj, **kwargs))

    async def patch(self, kind: Kind[object], name: str, patch: Patch, **kwargs: Any) -> Any:
        """:meth:`Client.patch <setpoint.client.Client.patch>`, with faults."""
        call = Call(
            "patch",
            kind_gvk(kind),
            kwargs.get("namespace"),
            name,
            kwargs.get("subresource"),
            body=patch,
        )
        return await self.faults.run(call, lambda: self.inner.patch(kind, name, patch, **kwargs))

    async def apply(self, obj: Any, **kwargs: Any) -> Any:
        """:meth:`Client.apply <setpoint.client.Client.apply>`, with faults."""
        call = object_call("apply", obj, subresource=kwargs.get("subresource"))
        return await self.faults.run(call, lambda: self.inner.apply(obj, **kwargs))

    async def apply_outcome(self, obj: Any, **kwargs: Any) -> Any:
        """:meth:`Client.apply_outcome <setpoint.client.Client.apply_outcome>`, with faults.

        Rules for ``apply`` match it: it is the same request.
        """
        call = object_call("apply", obj, subresource=kwargs.get("subresource"))
        return await self.faults.run(call, lambda: self.inner.apply_outcome(obj, **kwargs))

    async def delete(
        self,
        kind: Kind[object],
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: Any = None,
        preconditions: Preconditions | None = None,
        **kwargs: Any,
    ) -> JsonObject:
        """:meth:`Client.delete <setpoint.client.Client.delete>`, with faults."""
        call = Call("delete", kind_gvk(kind), namespace, name)
        result: JsonObject = await self.faults.run(
            call,
            lambda: self.inner.delete(
                kind,
                name,
                namespace=namespace,
                propagation_policy=propagation_policy,
                preconditions=preconditions,
                **kwargs,
            ),
        )
        return result

    async def delete_collection(self, kind: Kind[object], **kwargs: Any) -> None:
        """:meth:`Client.delete_collection <setpoint.client.Client.delete_collection>`."""
        call = Call("delete_collection", kind_gvk(kind), kwargs.get("namespace"))
        await self.faults.run(call, lambda: self.inner.delete_collection(kind, **kwargs))

    async def get_subresource(
        self, kind: Kind[object], name: str, subresource: str, **kwargs: Any
    ) -> JsonObject:
        """:meth:`Client.get_subresource <setpoint.client.Client.get_subresource>`."""
        call = Call("get_subresource", kind_gvk(kind), kwargs.get("namespace"), name, subresource)
        result: JsonObject = await self.faults.run(
            call, lambda: self.inner.get_subresource(kind, name, subresource, **kwargs)
        )
        return result

    async def create_subresource(
        self, kind: Kind[object], name: str, subresource: str, body: JsonObject, **kwargs: Any
    ) -> JsonObject:
        """:meth:`Client.create_subresource <setpoint.client.Client.create_subresource>`."""
        call = Call(
            "create_subresource",
            kind_gvk(kind),
            kwargs.get("namespace"),
            name,
            subresource,
            body=body,
        )
        result: JsonObject = await self.faults.run(
            call, lambda: self.inner.create_subresource(kind, name, subresource, body, **kwargs)
        )
        return result

    async def update_subresource(
        self, kind: Kind[object], name: str, subresource: str, body: JsonObject, **kwargs: Any
    ) -> JsonObject:
        """:meth:`Client.update_subresource <setpoint.client.Client.update_subresource>`."""
        call = Call(
            "update_subresource",
            kind_gvk(kind),
            kwargs.get("namespace"),
            name,
            subresource,
            body=body,
        )
        result: JsonObject = await self.faults.run(
            call, lambda: self.inner.update_subresource(kind, name, subresource, body, **kwargs)
        )
        return result

    async def get_scale(self, kind: Kind[object], name: str, **kwargs: Any) -> JsonObject:
        """:meth:`Client.get_scale <setpoint.client.Client.get_scale>`, with faults."""
        call = Call("get_scale", kind_gvk(kind), kwargs.get("namespace"), name, "scale")
        result: JsonObject = await self.faults.run(
            call, lambda: self.inner.get_scale(kind, name, **kwargs)
        )
        return result

    async def set_scale(
        self, kind: Kind[object], name: str, replicas: int, **kwargs: Any
    ) -> JsonObject:
        """:meth:`Client.set_scale <setpoint.client.Client.set_scale>`, with faults."""
        call = Call(
            "set_scale", kind_gvk(kind), kwargs.get("namespace"), name, "scale", body=replicas
        )
        result: JsonObject = await self.faults.run(
            call, lambda: self.inner.set_scale(kind, name, replicas, **kwargs)
        )
        return result


class _FaultyWatch:
    """A watch whose first iteration step goes through the fault rules."""

    def __init__(self, faults: Faults, call: Call, inner: Any) -> None:
        self._faults = faults
        self._call = call
        self._inner = inner
        self._started = False

    @property
    def resource_version(self) -> str:
        """The resourceVersion of the last event received (or the start version)."""
        return str(self._inner.resource_version)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> WatchEvent[Any]:
        if not self._started:
            self._started = True
            event: WatchEvent[Any] = await self._faults.run(self._call, self._inner.__anext__)
            return event
        result: WatchEvent[Any] = await self._inner.__anext__()
        return result

    async def aclose(self) -> None:
        """Stop the watch and release its connection."""
        await self._inner.aclose()
