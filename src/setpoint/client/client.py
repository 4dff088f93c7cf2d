"""The async client for any resource, built-in or custom.

::

    async with Client.from_kubeconfig() as client:
        cm = await client.get(kinds.ConfigMap, "settings", namespace="prod")
        async for event in client.watch(kinds.ConfigMap, namespace="prod"):
            ...

Kinds are :class:`~setpoint.api.types.Kind` handles: a
:class:`~setpoint.api.gvk.GroupVersionKind` (objects come back as JSON dicts) or a typed
class (objects come back as instances of it). Objects to write may be dicts or typed
instances and come back as the same. Each method has the one signature of
:mod:`setpoint.client.protocols`.
Every request has a timeout; errors are typed (:mod:`setpoint.client.errors`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject, describe, name_of, namespace_of
from setpoint.api.metadata import METADATA_ACCEPT, METADATA_LIST_ACCEPT, Metadata
from setpoint.api.redaction import brief
from setpoint.api.types import Kind, Obj, TypedObject, is_typed, kind_of
from setpoint.client._watchdecode import MAX_WATCH_LINE, RawWatchEvent, WatchDecoder
from setpoint.client.config import ClientConfig
from setpoint.client.discovery import RESTMapper
from setpoint.client.errors import ConnectionFailed, Expired, MalformedResponse
from setpoint.client.kubeconfig import load_config, load_kubeconfig
from setpoint.client.objects import Applied, ObjectList, WatchEvent, WatchEventType
from setpoint.client.patch import ApplyPatch, Patch
from setpoint.client.server_warnings import FieldValidation
from setpoint.client.transport import RequestHook, Transport, TransportOptions, quote_segment

__all__ = [
    "Client",
    "ClientOptions",
    "Preconditions",
    "PropagationPolicy",
    "Selector",
    "Watch",
    "field_validation_for",
]

log = logging.getLogger("setpoint.client")

T = TypeVar("T")
Selector = str | Mapping[str, str]
"""A label or field selector: ``"app=web,tier!=db"`` or ``{"app": "web"}`` (equality only)."""

PropagationPolicy = Literal["Foreground", "Background", "Orphan"]
"""How deletion treats dependents (``metadata.ownerReferences`` pointing at the object)."""

_EVENT_TYPES: dict[str, WatchEventType] = {
    "ADDED": "ADDED",
    "MODIFIED": "MODIFIED",
    "DELETED": "DELETED",
    "BOOKMARK": "BOOKMARK",
}


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """Client-wide settings. Every default is documented on its attribute."""

    field_manager: str = "setpoint"
    """Field manager recorded for every write (``managedFields``); controllers override it."""

    transport: TransportOptions = field(default_factory=TransportOptions)
    """Connection pool, timeouts and retries."""

    page_size: int = 500
    """Objects per page when :meth:`Client.list` paginates (``limit``)."""

    watch_timeout: int = 300
    """Server-side duration of one watch request, in seconds (``timeoutSeconds``).

    The stream ends cleanly after it; informers re-watch from the last
    resourceVersion. A bounded watch also bounds the damage of a connection that
    dies silently."""

    max_watch_line: int = MAX_WATCH_LINE
    """Longest line of a watch stream, in bytes (16 MiB, client-go's limit): a longer one
    fails the watch with :class:`~setpoint.client.errors.MalformedResponse` before it is
    buffered whole."""

    def __post_init__(self) -> None:
        if not self.field_manager or len(self.field_manager) > 128:
            raise ValueError("ClientOptions.field_manager must be 1-128 characters")
        if self.page_size < 1:
            raise ValueError("ClientOptions.page_size must be >= 1")
        if self.watch_timeout < 1:
            raise ValueError("ClientOptions.watch_timeout must be >= 1 second")
        if self.max_watch_line < 1:
            raise ValueError("ClientOptions.max_watch_line must be >= 1 byte")


@dataclass(frozen=True, slots=True)
class Preconditions:
    """Delete only if the object still has this UID and/or resourceVersion (else Conflict)."""

    uid: str | None = None
    resource_version: str | None = None


def _selector(value: Selector | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return ",".join(f"{k}={v}" for k, v in sorted(value.items()))


def check_continue_token(token: str, seen: set[str], *, url: str) -> None:
    """Refuse a ``continue`` token seen before in this list, then remember it.

    A server (or a proxy) that keeps answering with the same token would make a pager loop
    forever while its result grows; client-go's pager trusts the server, setpoint stops.

    Raises:
        MalformedResponse: ``token`` is in ``seen``.

    """
    if token in seen:
        raise MalformedResponse(
            f"the list of {url} returned a continue token it had returned before, after "
            f"{len(seen)} page(s); paging would never end, so the list was stopped",
            url=url,
        )
    seen.add(token)


def _to_json(obj: JsonObject | TypedObject) -> JsonObject:
    return obj.to_object() if is_typed(obj) else obj


def field_validation_for(
    obj_or_kind: object, asked: FieldValidation | None
) -> FieldValidation | None:
    """The ``fieldValidation`` a write sends: what was asked, else the default for its body.

    ``Strict`` for a typed object (or a patch of a typed kind): a field the Python type
    has and the installed schema lacks is version skew the caller wants to hear about.
    ``None`` (the parameter is not sent: the server's default, ``Warn``) for a dict,
    which often carries fields from elsewhere; the warnings still reach the log and
    :func:`~setpoint.client.server_warnings.collect_warnings`. Decision 0033.
    """
    if asked is not None:
        if asked not in ("Strict", "Warn", "Ignore"):
            raise ValueError(
                f"field_validation must be 'Strict', 'Warn' or 'Ignore', not {asked!r}"
            )
        return asked
    typed = is_typed(obj_or_kind) or (
        isinstance(obj_or_kind, type) and hasattr(obj_or_kind, "from_object")
    )
    return "Strict" if typed else None


class Client:
    """An async Kubernetes API client. See the module docstring.

    Satisfies every protocol of :mod:`setpoint.client.protocols` that a client can
    (:class:`~setpoint.client.protocols.ApiClient` and the smaller ones it is made of), as do
    the tracking client and the testing fake client.
    """

    def __init__(
        self,
        config: ClientConfig,
        options: ClientOptions | None = None,
        *,
        on_request: RequestHook | None = None,
    ) -> None:
        self.config = config
        """Where and how this client connects."""
        self.options = options or ClientOptions()
        """Client-wide settings."""
        self.transport = Transport(config, self.options.transport, on_request=on_request)
        """The HTTP transport (connection pool, retries, metrics hook)."""
        self.mapper = RESTMapper(self.transport)
        """Kind ↔ resource mapping from discovery."""

    # -- construction ---------------------------------------------------------

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | None = None,
        *,
        context: str | None = None,
        options: ClientOptions | None = None,
    ) -> Self:
        """A client from a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` by default)."""
        return cls(load_kubeconfig(path, context=context), options)

    @classmethod
    def from_environment(cls, *, options: ClientOptions | None = None) -> Self:
        """A client from the kubeconfig if there is one, else the in-cluster service account."""
        return cls(load_config(), options)

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
        """Close the connection pool."""
        await self.transport.close()

    @property
    def default_namespace(self) -> str:
        """The namespace of the kubeconfig context (or the pod's, in-cluster)."""
        return self.config.namespace

    # -- addressing -------------------------------------------------------------

    async def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """How the server serves ``kind`` (plural, scope, subresources).

        Raises:
            UnknownKind: the server does not serve it (e.g. its CRD is not installed).

        """
        return await self.mapper.mapping(kind.gvk)

    async def _path(
        self,
        kind: Kind[object],
        *,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
        require_namespace: bool = True,
    ) -> tuple[ResourceInfo, str]:
        info = await self.resource_info(kind)
        gvk = info.gvk
        base = f"/apis/{gvk.group}/{gvk.version}" if gvk.group else f"/api/{gvk.version}"
        if info.namespaced:
            if namespace:
                base += f"/namespaces/{quote_segment(namespace)}"
            elif require_namespace:
                raise ValueError(
                    f"{gvk.kind} is namespaced: pass namespace= (or set metadata.namespace) "
                    f"for {gvk.kind} {name!r}"
                )
        elif namespace:
            raise ValueError(
                f"{gvk.kind} is cluster-scoped: do not pass a namespace ({namespace!r}) "
                f"for {gvk.kind} {name!r}"
            )
        path = f"{base}/{info.plural}"
        if name is not None:
            if not name:
                raise ValueError(f"{gvk.kind}: an object name must not be empty")
            path += f"/{quote_segment(name)}"
        if subresource:
            path += f"/{subresource}"
        return info, path

    def _params(
        self,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        write: bool = True,
        **extra: str | None,
    ) -> dict[str, str]:
        params: dict[str, str] = {}
        if write:
            params["fieldManager"] = field_manager or self.options.field_manager
        if dry_run:
            params["dryRun"] = "All"
        params.update({k: v for k, v in extra.items() if v is not None})
        return params

    # -- reads --------------------------------------------------------------------

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object.

        Raises:
            NotFound: no such object.
            UnknownKind: the server does not serve this kind.

        """
        _, path = await self._path(kind, namespace=namespace, name=name)
        accept = METADATA_ACCEPT if isinstance(kind, Metadata) else "application/json"
        resp = await self.transport.request("GET", path, accept=accept)
        return kind.from_object(resp.body)

    async def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        resource_version: str | None = None,
    ) -> ObjectList[T]:
        """List every matching object, following ``continue`` tokens page by page.

        ``namespace=None`` lists a namespaced kind across all namespaces. All
        pages come from one consistent snapshot; if the snapshot expires mid-way
        (410 Expired), the list restarts once without paging, as client-go's
        pager does, so the result is never a mix of two snapshots.

        Raises:
            MalformedResponse: the server sent a ``continue`` token it had sent before
                (paging would never end).

        """
        items: list[T] = []
        token: str | None = None
        seen_tokens: set[str] = set()
        first_rv = ""
        while True:
            try:
                page = await self.list_page(
                    kind,
                    namespace=namespace,
                    labels=labels,
                    fields=fields,
                    limit=self.options.page_size,
                    continue_token=token,
                    resource_version=None if token else resource_version,
                )
            except Expired:
                if token is None:
                    raise
                return await self.list_page(
                    kind, namespace=namespace, labels=labels, fields=fields, limit=None
                )
            items.extend(page.items)
            first_rv = first_rv or page.resource_version
            token = page.continue_token
            if not token:
                return ObjectList(items, first_rv)
            check_continue_token(token, seen_tokens, url=f"{self.transport.server} ({kind})")

    async def list_page(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: Literal["Exact", "NotOlderThan"] | None = None,
    ) -> ObjectList[T]:
        """One page of a list: at most ``limit`` items, and a ``continue_token`` if more remain.

        Items get ``apiVersion`` and ``kind`` filled in (the server omits them
        inside lists of built-in kinds), so every object is self-describing.
        """
        info, path = await self._path(kind, namespace=namespace, require_namespace=False)
        params = self._params(
            write=False,
            labelSelector=_selector(labels),
            fieldSelector=_selector(fields),
            limit=str(limit) if limit else None,
            resourceVersion=resource_version,
            resourceVersionMatch=resource_version_match,
        )
        if continue_token:
            params["continue"] = continue_token
        accept = METADATA_LIST_ACCEPT if isinstance(kind, Metadata) else "application/json"
        resp = await self.transport.request("GET", path, params=params, accept=accept)
        body = resp.body if isinstance(resp.body, dict) else {}
        api_version, kind_name = info.gvk.api_version, info.gvk.kind
        raw_items = body.get("items") or []
        for item in raw_items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind_name)
        meta = body.get("metadata") or {}
        # A GVK's objects are the dicts themselves: no call per item on a large list.
        items: list[T] = (
            raw_items
            if isinstance(kind, GroupVersionKind)
            else [kind.from_object(i) for i in raw_items]
        )
        token = meta.get("continue")
        return ObjectList(
            items,
            str(meta.get("resourceVersion") or ""),
            token if isinstance(token, str) and token else None,
            meta.get("remainingItemCount"),
        )

    def watch(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        send_initial_events: bool = False,
    ) -> Watch[T]:
        """Watch changes after ``resource_version``.

        With ``resource_version=None`` the server first sends a synthetic
        ``ADDED`` for every existing object, then changes ("get state and start
        at most recent"); ``"0"`` does the same from any cached state; a list's
        resourceVersion gives exactly the changes after that list.

        Returns a :class:`Watch`: iterate it with ``async for``, and close it
        (``async with`` does) to release the connection. A ``resource_version``
        older than the server keeps raises :class:`~setpoint.client.errors.Gone`
        (or ``Expired``) from the iteration: relist, then watch again.
        """
        return Watch(
            self,
            kind,
            namespace=namespace,
            resource_version=resource_version,
            labels=labels,
            fields=fields,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds or self._jittered_watch_timeout(),
            send_initial_events=send_initial_events,
        )

    def _jittered_watch_timeout(self) -> int:
        # Spread re-watches of many informers over time, as client-go does.
        base = self.options.watch_timeout
        return int(base * (1 + random.random()))

    # -- writes ---------------------------------------------------------------------

    async def create(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Create ``obj`` and return it as stored (with uid, resourceVersion, defaults).

        ``field_validation`` says what the server does with fields the schema does not
        declare (see :data:`~setpoint.client.server_warnings.FieldValidation`); by default
        ``Strict`` for a typed object and the server's default (``Warn``) for a dict.

        Raises:
            AlreadyExists: the name is taken.
            BadRequest: under ``Strict``, a field the schema does not declare.
            Invalid: validation failed; ``causes`` name the fields.

        """
        data = _to_json(obj)
        kind = kind_of(obj)
        _, path = await self._path(kind, namespace=namespace_of(data) or None)
        resp = await self.transport.request(
            "POST",
            path,
            params=self._params(
                dry_run=dry_run,
                field_manager=field_manager,
                fieldValidation=field_validation_for(obj, field_validation),
            ),
            body=data,
        )
        return kind.from_object(resp.body)

    async def update(
        self,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace ``obj`` (PUT), optimistically: its ``metadata.resourceVersion`` is checked.

        If the object changed since it was read, the server answers
        :class:`~setpoint.client.errors.Conflict` instead of losing that change.
        ``subresource="status"`` writes only status (the server ignores the rest).
        ``field_validation`` as for :meth:`create` (the whole body is checked, status too).
        """
        data = _to_json(obj)
        kind = kind_of(obj)
        _, path = await self._path(
            kind,
            namespace=namespace_of(data) or None,
            name=self._name(data),
            subresource=subresource,
        )
        resp = await self.transport.request(
            "PUT",
            path,
            params=self._params(
                dry_run=dry_run,
                field_manager=field_manager,
                fieldValidation=field_validation_for(obj, field_validation),
            ),
            body=data,
        )
        return kind.from_object(resp.body)

    async def replace_status(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace ``obj``'s status through the ``status`` subresource (a PUT; spec is ignored).

        The raw write, optimistic on ``obj``'s resourceVersion: a stale copy is a Conflict.
        For a status change that re-reads and retries on Conflict, use
        :func:`setpoint.update_status` (``setpoint.client.safe.update_status``).
        """
        return await self.update(
            obj,
            subresource="status",
            dry_run=dry_run,
            field_manager=field_manager,
            field_validation=field_validation,
        )

    async def patch(
        self,
        kind: Kind[T],
        name: str,
        patch: Patch,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> T:
        """Patch one object with any of the four patch kinds (see :mod:`setpoint.client.patch`).

        ``field_validation`` as for :meth:`create` (``Strict`` by default when ``kind`` is a
        typed class); the server checks the patched object. An apply patch is refused
        whatever it says when it sets a field the schema does not declare.

        Raises:
            Invalid: for a JSON patch whose ``test`` failed, among other causes; under
                ``Strict``, a field the schema does not declare (cause ``patch``).
            Conflict: a server-side apply conflict (``causes`` name the fields).
            UnsupportedMediaType: strategic merge on a custom resource.

        """
        _, path = await self._path(kind, namespace=namespace, name=name, subresource=subresource)
        params = self._params(
            dry_run=dry_run,
            field_manager=field_manager,
            fieldValidation=field_validation_for(kind, field_validation),
        )
        if isinstance(patch, ApplyPatch) and patch.force:
            params["force"] = "true"
        resp = await self.transport.request(
            "PATCH", path, params=params, body=patch.body(), content_type=patch.content_type
        )
        return kind.from_object(resp.body)

    async def apply(
        self,
        obj: Obj,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Server-side apply ``obj``: create it, or merge the fields this manager owns.

        ``obj`` should contain only the fields this manager wants to own. The server
        refuses an apply that sets a field the schema does not declare whatever
        ``field_validation`` says (500, ``.spec.x: field not declared in schema``);
        ``field_validation`` (default as for :meth:`create`) then decides about duplicates.
        """
        applied = await self.apply_outcome(
            obj,
            field_manager=field_manager,
            force=force,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
        )
        return applied.object

    async def apply_outcome(
        self,
        obj: Obj,
        *,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: FieldValidation | None = None,
    ) -> Applied[Obj]:
        """Server-side apply ``obj`` (as :meth:`apply`) and say whether it created the object.

        kube-apiserver answers an apply that creates the object with ``201 Created`` and
        one that finds it with ``200 OK`` (checked against the real server by
        ``tests/integration/parity``). That answer is the only exact one: a read before the
        apply could be overtaken by another writer. :func:`~setpoint.client.safe.apply_child`
        uses it to report ``CREATED`` without a GET before the first apply.
        """
        data = _to_json(obj)
        kind = kind_of(obj)
        _, path = await self._path(
            kind,
            namespace=namespace_of(data) or None,
            name=self._name(data),
            subresource=subresource,
        )
        params = self._params(
            dry_run=dry_run,
            field_manager=field_manager,
            fieldValidation=field_validation_for(obj, field_validation),
        )
        patch = ApplyPatch(data, force=force)
        if force:
            params["force"] = "true"
        resp = await self.transport.request(
            "PATCH", path, params=params, body=patch.body(), content_type=patch.content_type
        )
        return Applied(kind.from_object(resp.body), resp.status == 201)

    async def delete(
        self,
        kind: Kind[object],
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: PropagationPolicy | None = None,
        preconditions: Preconditions | None = None,
        grace_period_seconds: int | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Delete one object and return what the server returned.

        That is the object while finalizers or foreground deletion keep it (with
        ``deletionTimestamp``), or a ``Status``.

        Raises:
            NotFound: no such object.
            Conflict: ``preconditions`` did not hold.

        """
        _, path = await self._path(kind, namespace=namespace, name=name)
        resp = await self.transport.request(
            "DELETE",
            path,
            params=self._params(write=False, dryRun="All" if dry_run else None),
            body=self._delete_options(propagation_policy, preconditions, grace_period_seconds),
        )
        return resp.body if isinstance(resp.body, dict) else {}

    async def delete_collection(
        self,
        kind: Kind[object],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        propagation_policy: PropagationPolicy | None = None,
        dry_run: bool = False,
    ) -> None:
        """Delete every matching object of ``kind`` (in ``namespace``, or cluster-wide)."""
        _, path = await self._path(kind, namespace=namespace, require_namespace=False)
        await self.transport.request(
            "DELETE",
            path,
            params=self._params(
                write=False,
                labelSelector=_selector(labels),
                fieldSelector=_selector(fields),
                dryRun="All" if dry_run else None,
            ),
            body=self._delete_options(propagation_policy, None, None),
        )

    @staticmethod
    def _delete_options(
        propagation_policy: str | None,
        preconditions: Preconditions | None,
        grace_period_seconds: int | None,
    ) -> JsonObject:
        options: JsonObject = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if preconditions is not None:
            pre = {
                k: v
                for k, v in (
                    ("uid", preconditions.uid),
                    ("resourceVersion", preconditions.resource_version),
                )
                if v
            }
            options["preconditions"] = pre
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        return options

    # -- subresources ---------------------------------------------------------------

    async def _subresource(
        self,
        method: str,
        kind: Kind[object],
        name: str,
        subresource: str,
        *,
        namespace: str | None,
        body: JsonObject | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JsonObject:
        # Subresources answer with their own kinds (Scale, TokenRequest, ...), never the
        # parent's typed class, so the body comes back as JSON whatever ``kind`` is.
        _, path = await self._path(kind, namespace=namespace, name=name, subresource=subresource)
        resp = await self.transport.request(
            method, path, params=params, body=body, content_type=content_type
        )
        return resp.body if isinstance(resp.body, dict) else {}

    async def get_subresource(
        self, kind: Kind[object], name: str, subresource: str, *, namespace: str | None = None
    ) -> JsonObject:
        """Read a subresource (``scale``, ``status``) of one object, as JSON."""
        return await self._subresource("GET", kind, name, subresource, namespace=namespace)

    async def create_subresource(
        self,
        kind: Kind[object],
        name: str,
        subresource: str,
        body: JsonObject,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """POST to a subresource: a ServiceAccount ``token``, a Pod ``eviction``, ..."""
        return await self._subresource(
            "POST",
            kind,
            name,
            subresource,
            namespace=namespace,
            body=body,
            params=self._params(dry_run=dry_run),
        )

    async def update_subresource(
        self,
        kind: Kind[object],
        name: str,
        subresource: str,
        body: JsonObject,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """PUT a subresource, e.g. a ``Scale`` object to ``scale``."""
        return await self._subresource(
            "PUT",
            kind,
            name,
            subresource,
            namespace=namespace,
            body=body,
            params=self._params(dry_run=dry_run),
        )

    async def get_scale(
        self, kind: Kind[object], name: str, *, namespace: str | None = None
    ) -> JsonObject:
        """The object's ``autoscaling/v1`` Scale (``spec.replicas``, ``status.replicas``)."""
        return await self.get_subresource(kind, name, "scale", namespace=namespace)

    async def set_scale(
        self, kind: Kind[object], name: str, replicas: int, *, namespace: str | None = None
    ) -> JsonObject:
        """Set ``spec.replicas`` through the ``scale`` subresource (a merge patch)."""
        return await self._subresource(
            "PATCH",
            kind,
            name,
            "scale",
            namespace=namespace,
            body={"spec": {"replicas": replicas}},
            params=self._params(),
            content_type="application/merge-patch+json",
        )

    # -- helpers ----------------------------------------------------------------------

    @staticmethod
    def _name(data: JsonObject) -> str:
        name = name_of(data)
        if not name:
            raise ValueError(f"{describe(data)} has no metadata.name; set it before this call")
        return name

    async def server_version(self) -> JsonObject:
        """The server's ``/version`` document (``gitVersion``, ``major``, ``minor``, ...)."""
        resp = await self.transport.request("GET", "/version")
        return resp.body if isinstance(resp.body, dict) else {}


class Watch(Generic[T]):
    """A running watch: an async iterator of :class:`WatchEvent`, and an async context manager.

    ``resource_version`` tracks the last event (bookmarks included), so a caller
    can resume after the stream ends or breaks. Iteration ends when the server
    closes the stream (after ``timeout_seconds``).

    Iterating raises :class:`Gone` or :class:`Expired` when the start resourceVersion is
    too old (relist and re-watch), and :class:`ConnectionFailed` when the connection broke
    mid-stream (re-watch from ``resource_version``).
    """

    def __init__(
        self,
        client: Client,
        kind: Kind[T],
        *,
        namespace: str | None,
        resource_version: str | None,
        labels: Selector | None,
        fields: Selector | None,
        allow_bookmarks: bool,
        timeout_seconds: int,
        send_initial_events: bool,
    ) -> None:
        self._client = client
        self._kind = kind
        self._namespace = namespace
        self.resource_version: str = resource_version or ""
        """The resourceVersion of the last event received (or the start version)."""
        self._labels = labels
        self._fields = fields
        self._allow_bookmarks = allow_bookmarks
        self._timeout_seconds = timeout_seconds
        self._send_initial_events = send_initial_events
        self._iterator: AsyncIterator[WatchEvent[T]] | None = None
        self._response: Any = None
        self._closing = False

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

    async def __anext__(self) -> WatchEvent[T]:
        if self._iterator is None:
            self._iterator = self._events()
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        """Stop the watch and release its connection.

        Safe to call from another task while one is iterating: the connection is
        closed under it, and that iteration ends cleanly (``StopAsyncIteration``).
        """
        self._closing = True
        response = self._response
        if response is not None:
            response.close()
        iterator, self._iterator = self._iterator, None
        if iterator is not None and not getattr(iterator, "ag_running", False):
            await iterator.aclose()  # type: ignore[attr-defined]

    async def _events(self) -> AsyncIterator[WatchEvent[T]]:
        client = self._client
        info, path = await client._path(
            self._kind, namespace=self._namespace, require_namespace=False
        )
        params = client._params(
            write=False,
            watch="true",
            resourceVersion=self.resource_version or None,
            labelSelector=_selector(self._labels),
            fieldSelector=_selector(self._fields),
            allowWatchBookmarks="true" if self._allow_bookmarks else None,
            timeoutSeconds=str(self._timeout_seconds),
        )
        if self._send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        api_version, kind_name = info.gvk.api_version, info.gvk.kind
        url = f"{client.transport.server}{path}"
        accept = METADATA_ACCEPT if isinstance(self._kind, Metadata) else "application/json"
        async with client.transport.stream(
            "GET", path, params=params, read_timeout=self._timeout_seconds + 30, accept=accept
        ) as resp:
            self._response = resp
            decoder = WatchDecoder(url, max_line=client.options.max_watch_line)
            try:
                event: WatchEvent[T] | None = None
                async for chunk in resp.chunks():
                    raws = decoder.feed(chunk)
                    del chunk  # not held while the watch waits for the next one,
                    raws.reverse()
                    while raws:  # nor its events: each leaves the list as it is handed out
                        event = self._event(raws.pop(), api_version, kind_name, url)
                        if event is not None:
                            yield event
                    event = None
            except Exception as exc:
                if self._closing:
                    return  # aclose() closed the connection under us: a clean stop
                if isinstance(exc, TimeoutError):
                    raise ConnectionFailed(
                        f"watch {url} was silent for {self._timeout_seconds + 30}s; the "
                        "connection is presumed dead. Re-watch from resourceVersion "
                        f"{self.resource_version}",
                        url=url,
                    ) from exc
                if isinstance(exc, OSError):  # the HTTP client's errors are OSErrors
                    raise ConnectionFailed(
                        f"watch {url} broke: {exc}. Re-watch from resourceVersion "
                        f"{self.resource_version}",
                        url=url,
                    ) from exc
                raise
            finally:
                self._response = None

    def _event(
        self, raw: RawWatchEvent, api_version: str, kind_name: str, url: str
    ) -> WatchEvent[T] | None:
        obj = raw.object
        kind = _EVENT_TYPES.get(raw.type)
        if kind is None:
            log.warning("ignoring unknown watch event type %s from %s", brief(raw.type), url)
            return None
        meta = obj.get("metadata") or {}
        rv = meta.get("resourceVersion")
        rv = rv if isinstance(rv, str) else ""
        if rv:
            self.resource_version = rv
        if kind == "BOOKMARK":
            return WatchEvent("BOOKMARK", obj, rv)
        obj.setdefault("apiVersion", api_version)
        obj.setdefault("kind", kind_name)
        return WatchEvent(kind, self._kind.from_object(obj), rv)


if TYPE_CHECKING:
    from setpoint.client.protocols import ApiClient

    def _conforms(client: Client) -> ApiClient:
        # Checked by mypy only: the live client satisfies the widest protocol.
        return client
