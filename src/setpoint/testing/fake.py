"""An in-memory client that behaves like the API server on what operators depend on.

::

    fake = FakeClient(objects=[{"apiVersion": "apps/v1", "kind": "Deployment", ...}])
    ctx = context_for(fake, ObjectKey("prod", "web"))     # setpoint.testing.context_for
    await reconcile(ctx, ctx.request)                     # as the controller calls it
    assert (await fake.get(kinds.ConfigMap, "web-config", namespace="prod"))["data"] == {...}

(docs/guide/testing.md has the complete pattern.)

:class:`FakeClient` has the methods and signatures of
:class:`setpoint.client.Client` and satisfies the same protocols
(:class:`~setpoint.client.protocols.Reader`, ``Writer``, ``StatusWriter``), so
code under test cannot tell it from the live client. Kinds are GVKs (objects
are dicts) or typed classes (objects are instances), as with the client. The
kinds it serves come from :data:`setpoint.api.kinds.BUILTIN_RESOURCES`, from
``resources=[...]``/:meth:`FakeClient.register`, from a typed class's
``resource_info()`` (registered on first use), and from
CustomResourceDefinitions created in the fake.

What it mirrors (each checked against a real kube-apiserver by the parity
suite in ``tests/integration/parity``):

- ``resourceVersion`` from one global counter; Conflict on a stale one in
  update, replace_status and patches carrying it; no new version (and no
  event) for a write that changes nothing.
- ``metadata.generation``: custom resources bump it on any change outside
  metadata (and outside status when the status subresource is on);
  Deployments on spec and annotations; other built-ins that track it on
  spec; kinds that do not track it keep what the client sent at create.
- The status subresource: update and patch ignore status; replace_status and
  status patches change nothing but status; kinds without it answer 404 on
  ``/status``.
- Deletion: ``deletionTimestamp`` (and ``deletionGracePeriodSeconds: 0``, a
  generation bump) while finalizers remain; removing the last finalizer
  deletes the object; adding a finalizer to a deleting object is 422
  Invalid; creating over a deleting object is AlreadyExists.
- AlreadyExists / NotFound / Conflict / Invalid / BadRequest with the
  server's types, reasons, details and message wording; uid and
  creationTimestamp assigned; ``generateName``; names and label keys/values
  validated; a resourceVersion on create refused (500, as the server does).
- Label selectors (full syntax) and field selectors on ``metadata.name``,
  ``metadata.namespace`` (plus a few per-kind fields the server supports).
- Watches: ADDED/MODIFIED/DELETED from a resourceVersion (a selector change
  turns into ADDED/DELETED, as on the server), synthetic ADDED events and the
  ``k8s.io/initial-events-end`` BOOKMARK when starting without one.
- Lists: consistent pages with continue tokens, ``resourceVersionMatch=Exact``
  snapshots from history.
- After :meth:`FakeClient.compact` (or beyond ``FakeOptions.history``), 410
  Expired for watches, Exact lists and continue tokens from older versions.

Where the fake does not agree with the server (see also docs/guide/testing.md):

- **Custom resources are checked against their schema, built-ins are not.** A
  custom resource whose schema the fake knows (its CRD was created in the fake,
  or its Python type was registered or used; a ResourceInfo alone carries no
  schema) goes through ``fieldValidation`` (Strict/Warn/Ignore, worded as the
  server), pruning, defaulting and validation (422 with the server's field paths
  and reasons; the messages are setpoint's wording): see
  :mod:`setpoint.testing._fake_schema`. CEL rules are not evaluated; duplicate
  JSON fields cannot reach the fake. Built-in kinds are stored as sent (a
  Deployment gets no ``strategy``, unknown fields are kept); no admission, no
  webhooks, no quota, no RBAC.
- **Garbage collection and namespace teardown are synchronous**, done inside
  the delete call rather than eventually by controllers; dependents are
  collected only for owners the fake saw deleted (a real collector also
  removes dependents whose owner never existed). With
  ``FakeOptions(garbage_collection=False)`` nothing is collected, like a
  cluster without kube-controller-manager.
- **Namespaces need not exist** unless ``FakeOptions(require_namespaces=True)``;
  creating in a *terminating* namespace is refused either way.
- **managedFields are not tracked** (never written). Server-side apply is
  approximated by private field ownership; see
  :mod:`setpoint.testing._fake_apply` for exactly how. Objects passed in
  ``objects=`` or :meth:`FakeClient.add` have no owners.
- **Strategic merge** knows the merge keys of common built-in lists only; other
  lists are replaced (:mod:`setpoint.testing._fake_patch`).
- **One storage version**: a kind served in several versions shares one store.
  Objects are converted with the kind's converters (``sp.Convertible``) when a
  spoke class is registered or used, exactly as the conversion webhook would
  (so a test that writes at v1alpha1 and reads at v1 sees what the real server
  shows); otherwise they are only relabelled with the asked apiVersion (the
  server's ``None`` strategy). With converters, server-side apply tracks field
  ownership in the applied version's field names.
- A list at a future resourceVersion fails at once (504) instead of waiting;
  periodic bookmarks come only from :meth:`FakeClient.send_bookmark`; watches
  never time out unless given ``timeout_seconds``.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar, cast

from setpoint._extras import ExtraNotInstalled
from setpoint.api.conversion import KindConversion, hub_of
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import BUILTIN_RESOURCES, ResourceInfo
from setpoint.api.meta import JsonObject, describe, gvk_of, name_of, namespace_of
from setpoint.api.resource import Resource
from setpoint.api.types import Kind, Obj, TypedObject, is_typed, kind_of
from setpoint.cache.store import IndexFunc
from setpoint.client.client import (
    Preconditions,
    PropagationPolicy,
    Selector,
    field_validation_for,
)
from setpoint.client.errors import ApiError, UnknownKind
from setpoint.client.objects import Applied, ObjectList, WatchEvent
from setpoint.client.patch import ApplyPatch, MergePatch, Patch
from setpoint.client.server_warnings import FieldValidation
from setpoint.crd.errors import CRDGenerationError
from setpoint.crd.generator import crd_for
from setpoint.testing._fake_errors import api_error
from setpoint.testing._fake_kinds import BUILTIN_GROUPS, KindRules, path_of
from setpoint.testing._fake_schema import warn_without_re2
from setpoint.testing._fake_store import (
    INITIAL_EVENTS_END,
    Change,
    FakeServerStore,
    clone,
    random_token,
)
from setpoint.testing.faults import Call, Faults, kind_gvk, object_call

if TYPE_CHECKING:
    from setpoint.client.protocols import (
        ApiClient,
        IndexReader,
        ListWatcher,
        Reader,
        StatusWriter,
        Writer,
    )
    from setpoint.client.safe import SafeClient
    from setpoint.testing.faults import FaultInjectingClient

__all__ = ["FakeClient", "FakeOptions", "FakeWatch"]

T = TypeVar("T")
R = TypeVar("R")

FAKE_SERVER_VERSION = "v1.37.2"
"""The Kubernetes version the fake reports (the release the local control plane runs)."""


@dataclass(frozen=True, kw_only=True)
class FakeOptions:
    """Settings of one :class:`FakeClient`. Every default is documented on its attribute."""

    field_manager: str = "setpoint"
    """Field manager of writes that do not name one (as ``ClientOptions.field_manager``)."""

    default_namespace: str = "default"
    """What :attr:`FakeClient.default_namespace` returns (a kubeconfig context's namespace)."""

    require_namespaces: bool = False
    """Refuse to create namespaced objects whose Namespace does not exist (404), as the
    server does. Off by default so unit tests need not create namespaces."""

    garbage_collection: bool = True
    """Collect dependents of deleted owners, honour Foreground/Orphan propagation and tear
    down deleted namespaces, synchronously. Off: like a cluster without
    kube-controller-manager (``foregroundDeletion``/``orphan`` finalizers stay)."""

    history: int = 10_000
    """Events kept for watches and lists from an older resourceVersion; older ones answer
    410 Expired, like etcd after compaction."""

    resource_version_prefix: str = ""
    """Spell every resourceVersion as this prefix plus the revision (``"v"``: ``"v17"``),
    to prove code treats resourceVersions as opaque strings, as the API conventions require
    (an aggregated API server need not use etcd's integers). Empty: plain integers, as
    kube-apiserver sends them. Letters only."""

    def __post_init__(self) -> None:
        if not self.field_manager or len(self.field_manager) > 128:
            raise ValueError("FakeOptions.field_manager must be 1-128 characters")
        if not self.default_namespace:
            raise ValueError("FakeOptions.default_namespace must not be empty")
        if self.resource_version_prefix and not self.resource_version_prefix.isalpha():
            raise ValueError(
                "FakeOptions.resource_version_prefix must be letters only (got "
                f"{self.resource_version_prefix!r}), so the revision after it stays readable"
            )
        if self.history < 1:
            raise ValueError(
                f"FakeOptions.history must be >= 1 event (got {self.history}); a fake without "
                "history could not resume any watch"
            )


_END = object()


@dataclass(frozen=True, slots=True)
class _Bookmark:
    revision: int
    initial_events_end: bool = False


@dataclass(frozen=True, slots=True)
class _Break:
    error: BaseException


class FakeClient:
    """An in-memory stand-in for :class:`setpoint.client.Client`; see the module docstring.

    Args:
        resources: kinds to serve besides the built-ins: ``ResourceInfo`` values
            or typed classes with ``resource_info()``.
        objects: objects present from the start (dicts or typed instances). They
            keep the status, finalizers, uid and deletionTimestamp they carry and
            get a resourceVersion; Namespaces and CRDs among them go first.
        options: see :class:`FakeOptions`.
        faults: fault rules to apply (default: a fresh :class:`~setpoint.testing.faults.Faults`).

    """

    def __init__(
        self,
        *,
        resources: Iterable[ResourceInfo | type[TypedObject]] = (),
        objects: Iterable[JsonObject | TypedObject] = (),
        options: FakeOptions | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.options = options or FakeOptions()
        """Settings of this fake."""
        self.faults = faults or Faults()
        """Fault rules applied to every call, and the log of calls."""
        self._store = FakeServerStore(
            history=self.options.history,
            garbage_collection=self.options.garbage_collection,
            require_namespaces=self.options.require_namespaces,
            resource_version_prefix=self.options.resource_version_prefix,
        )
        for info in BUILTIN_RESOURCES.values():
            self._store.register(info)
        self._conversion_classes: dict[tuple[str, str], dict[type[Resource], None]] = {}
        self.register(*resources)
        self._watches: set[FakeWatch[Any]] = set()
        self._indexes: dict[tuple[GroupVersionKind, str], IndexFunc] = {}
        self._held: list[tuple[FakeWatch[Any], object]] | None = None
        self.add(*objects)

    # -- test helpers (synchronous, no faults, not recorded) ---------------------------------

    def register(self, *resources: ResourceInfo | type[TypedObject]) -> None:
        """Serve more kinds: ``ResourceInfo`` values or typed classes with ``resource_info()``.

        A spoke version class (``sp.Convertible[Hub]``) also registers its hub and the
        conversion between them: objects are then stored at the storage version and
        converted on every read and write at another version, with the same converters the
        webhook runs (``fake.register(TenantV1Alpha1)``). Using a spoke class in a call
        registers it too.
        """
        for resource in resources:
            if isinstance(resource, ResourceInfo):
                self._store.register(resource)
            else:
                self._register_class(resource)

    def _register_class(self, kind: type[TypedObject]) -> None:
        self._store.register(_info_of_class(kind))
        if not (isinstance(kind, type) and issubclass(kind, Resource)):
            return
        cls: type[Resource] = kind
        self._register_schema(cls)
        if hub_of(cls) is None:
            return
        gvk = cls.declaration().gvk
        known = self._conversion_classes.setdefault((gvk.group, gvk.kind), {})
        known[cls] = None
        conversion = KindConversion.of(*known)
        versions = [conversion.class_of(v) for v in conversion.versions]
        for version_cls in versions:
            if version_cls.gvk not in self._store.kinds:
                self._store.register(_info_of_class(version_cls))
                self._register_schema(version_cls)
        storage = [c for c in versions if c.declaration().storage]
        storage_version = storage[0].gvk.version if len(storage) == 1 else conversion.hub_version
        self._store.register_conversion(conversion, storage_version)

    def _register_schema(self, cls: type[Resource]) -> None:
        """Validate ``cls``'s objects against the schema ``setpoint generate crd`` makes for it."""
        schema = _generated_schema(cls)
        if schema is not None:
            self._store.register_schema(cls.declaration().gvk, schema, from_crd=False)

    def add(self, *objects: JsonObject | TypedObject) -> None:
        """Store objects as they are (status, finalizers and deletionTimestamp included).

        A ``resourceVersion`` they carry is replaced; uid and creationTimestamp
        are filled in when missing. Raises ValueError for an object the server
        could never hold (no name, a deletionTimestamp without finalizers) and
        AlreadyExists for a duplicate.
        """
        data = [_to_json(o) for o in objects]
        order = {"CustomResourceDefinition": 0, "Namespace": 1}
        for obj in sorted(data, key=lambda o: order.get(str(o.get("kind")), 2)):
            rules = self._rules_now(gvk_of(obj))
            self._store.seed(rules, obj)

    def lookup(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T | None:
        """The stored object, or ``None``, without going through faults or the call log."""
        rules = self._rules_now(kind)
        try:
            obj = self._store.get(rules, namespace or "", name)
        except ApiError:
            return None
        return kind.from_object(obj)

    def contents(self, kind: Kind[T], *, namespace: str | None = None) -> builtins.list[T]:
        """Every stored object of ``kind`` (in ``namespace``), in key order, without faults."""
        rules = self._rules_now(kind)
        return [
            kind.from_object(self._store.present(rules, o))
            for o in self._store.current(rules)
            if namespace is None or o["metadata"].get("namespace", "") == namespace
        ]

    def add_index(self, kind: Kind[object], name: str, fn: IndexFunc) -> None:
        """Index ``kind`` as ``Cache.add_index`` does, for :meth:`list_by_index`.

        Raises:
            ValueError: ``kind`` already has an index called ``name``.

        """
        key = (self._rules_now(kind).info.gvk, name)
        if key in self._indexes:
            raise ValueError(f"{key[0].kind} already has an index called {name!r}")
        self._indexes[key] = fn

    async def list_by_index(self, kind: Kind[T], index: str, value: str) -> ObjectList[T]:
        """The objects of ``kind`` whose index ``index`` includes ``value`` (as the cache lists).

        Reads the current objects (the fake has no cache lag) and computes the index on the
        fly; items come in key order. Not subject to faults: in production this read is
        served by the cache, not the API server.

        Raises:
            KeyError: no index ``index`` was added for ``kind`` (see :meth:`add_index`).

        """
        rules = self._rules_now(kind)
        fn = self._indexes.get((rules.info.gvk, index))
        if fn is None:
            raise KeyError(
                f"{rules.info.gvk.kind} has no index {index!r}; add it first with "
                f"fake.add_index({rules.info.gvk.kind}, {index!r}, fn), as the controller adds "
                "it to the cache"
            )
        items = []
        for stored in self._store.current(rules):
            obj = self._store.present(rules, stored)
            values = fn(obj)
            found = [] if values is None else [values] if isinstance(values, str) else values
            if value in found:
                items.append(kind.from_object(obj))
        return ObjectList(items, self.resource_version)

    @property
    def resource_version(self) -> str:
        """The newest resourceVersion (the global revision of the last write)."""
        return self._store.format_rv(self._store.revision)

    def compact(self) -> None:
        """Forget history: watches and lists from an older resourceVersion get 410 Expired."""
        self._store.compact()

    def send_bookmark(self) -> None:
        """Send a BOOKMARK at the current resourceVersion to every watch that allows them."""
        for watch in list(self._watches):
            self._deliver(watch, _Bookmark(self._store.revision))

    def hold_watch_events(self) -> None:
        """Hold back what running watches receive until :meth:`release_watch_events`.

        Writes take effect and reads and lists see them, but watch events and bookmarks
        queue up: a watch stream (and so an informer's cache) lagging behind the server,
        which is what read-after-write code must cope with. Watches started meanwhile still
        replay their backlog at once. :meth:`break_watches` and :meth:`end_watches` are not
        held (the connection itself fails or ends).
        """
        if self._held is None:
            self._held = []

    def release_watch_events(self) -> None:
        """Deliver the held events and bookmarks, in order, to the watches still running."""
        held, self._held = self._held, None
        for watch, item in held or ():
            if watch in self._watches:
                watch._push(item)

    def _deliver(self, watch: FakeWatch[Any], item: object) -> None:
        if self._held is not None:
            self._held.append((watch, item))
        else:
            watch._push(item)

    def end_watches(self) -> None:
        """End every running watch cleanly, as the server does when ``timeoutSeconds`` ends."""
        for watch in list(self._watches):
            watch._push(_END)

    def break_watches(self, error: BaseException | None = None) -> None:
        """Make every running watch raise ``error`` (default: a 410 Expired, forcing a relist)."""
        for watch in list(self._watches):
            watch._push(
                _Break(
                    error
                    if error is not None
                    else api_error(
                        410,
                        "Expired",
                        f"too old resource version: {watch.resource_version or 0} "
                        f"({self._store.revision})",
                        method="GET",
                        path="/watch",
                    )
                )
            )

    @property
    def active_watches(self) -> int:
        """How many watches are running (started and not yet closed or ended)."""
        return len(self._watches)

    # -- lifecycle, like Client ------------------------------------------------------------

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
        """End every running watch (there is no connection to close)."""
        self.end_watches()

    @property
    def default_namespace(self) -> str:
        """``FakeOptions.default_namespace``."""
        return self.options.default_namespace

    # -- addressing ---------------------------------------------------------------------------

    def _rules_now(self, kind: Kind[object]) -> KindRules:
        if isinstance(kind, GroupVersionKind):
            gvk = kind
        else:
            gvk = kind.gvk
            if gvk not in self._store.kinds and hasattr(kind, "resource_info"):
                self._register_class(cast("type[TypedObject]", kind))
        rules = self._store.kinds.get(gvk)
        if rules is None:
            raise UnknownKind(self._unknown_message(gvk))
        return rules

    def _unknown_message(self, gvk: GroupVersionKind) -> str:
        served = sorted(
            g.version for g in self._store.kinds if (g.group, g.kind) == (gvk.group, gvk.kind)
        )
        what = f"kind {gvk.kind!r} in group {gvk.group or 'core'!r}"
        if served:
            return (
                f"the fake API server does not serve version {gvk.version!r} of {what}; it "
                f"serves {', '.join(served)}. Use one of those versions"
            )
        return (
            f"the fake API server does not serve {what}: pass its ResourceInfo in "
            "FakeClient(resources=[...]) or fake.register(...), use a typed class with "
            "resource_info(), or create its CustomResourceDefinition in the fake"
        )

    def _target(
        self,
        kind: Kind[object],
        *,
        namespace: str | None,
        name: str | None = None,
        require_namespace: bool = True,
    ) -> KindRules:
        """Resolve ``kind`` and check scope and name exactly as ``Client._path`` does."""
        rules = self._rules_now(kind)
        gvk = rules.info.gvk
        if rules.info.namespaced:
            if not namespace and require_namespace:
                raise ValueError(
                    f"{gvk.kind} is namespaced: pass namespace= (or set metadata.namespace) "
                    f"for {gvk.kind} {name!r}"
                )
        elif namespace:
            raise ValueError(
                f"{gvk.kind} is cluster-scoped: do not pass a namespace ({namespace!r}) "
                f"for {gvk.kind} {name!r}"
            )
        if name is not None and not name:
            raise ValueError(f"{gvk.kind}: an object name must not be empty")
        return rules

    async def _run(self, call: Call, operation: Callable[[], R]) -> R:
        async def run() -> R:
            # Yield like a real request would, so concurrent tasks interleave.
            await asyncio.sleep(0)
            return operation()

        return await self.faults.run(call, run)

    async def resource_info(self, kind: Kind[object]) -> ResourceInfo:
        """How the fake serves ``kind`` (plural, scope, subresources).

        Raises:
            UnknownKind: the fake does not serve it (register it, or create its CRD).

        """
        return self._rules_now(kind).info

    # -- reads ----------------------------------------------------------------------------------

    async def get(self, kind: Kind[T], name: str, *, namespace: str | None = None) -> T:
        """Read one object.

        Raises:
            NotFound: no such object.
            UnknownKind: the fake does not serve this kind.

        """

        def op() -> T:
            rules = self._target(kind, namespace=namespace, name=name)
            return kind.from_object(self._store.get(rules, namespace or "", name))

        return await self._run(Call("get", kind_gvk(kind), namespace, name), op)

    async def list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None = None,
        labels: Selector | None = None,
        fields: Selector | None = None,
        resource_version: str | None = None,
    ) -> ObjectList[T]:
        """List every matching object (one consistent snapshot), as ``Client.list``."""

        def op() -> ObjectList[T]:
            return self._list(
                kind,
                namespace=namespace,
                labels=labels,
                fields=fields,
                limit=None,
                continue_token=None,
                resource_version=resource_version,
                resource_version_match=None,
            )

        call = Call("list", kind_gvk(kind), namespace, resource_version=resource_version)
        return await self._run(call, op)

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
        """One page of a list: at most ``limit`` items, and a ``continue_token`` if more remain."""

        def op() -> ObjectList[T]:
            return self._list(
                kind,
                namespace=namespace,
                labels=labels,
                fields=fields,
                limit=limit,
                continue_token=continue_token,
                resource_version=resource_version,
                resource_version_match=resource_version_match,
            )

        call = Call("list_page", kind_gvk(kind), namespace, resource_version=resource_version)
        return await self._run(call, op)

    def _list(
        self,
        kind: Kind[T],
        *,
        namespace: str | None,
        labels: Selector | None,
        fields: Selector | None,
        limit: int | None,
        continue_token: str | None,
        resource_version: str | None,
        resource_version_match: str | None,
    ) -> ObjectList[T]:
        rules = self._target(kind, namespace=namespace, require_namespace=False)
        listing = self._store.list_objects(
            rules,
            namespace=namespace if rules.info.namespaced else None,
            labels=labels,
            fields=fields,
            limit=limit,
            continue_token=continue_token,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
        )
        return ObjectList(
            [kind.from_object(item) for item in listing.items],
            listing.resource_version,
            listing.continue_token,
            listing.remaining,
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
        timeout_seconds: float | None = None,
        send_initial_events: bool = False,
    ) -> FakeWatch[T]:
        """Watch changes after ``resource_version``; see :class:`FakeWatch`.

        ``None`` or ``"0"`` starts with synthetic ADDED events for what exists
        and a BOOKMARK marking their end, as the server does. The watch ends
        after ``timeout_seconds`` (fractions allowed, for tests); ``None`` or
        ``0`` means it runs until closed or :meth:`end_watches`.
        """
        return FakeWatch(
            self,
            kind,
            namespace=namespace,
            resource_version=resource_version,
            labels=labels,
            fields=fields,
            allow_bookmarks=allow_bookmarks,
            timeout_seconds=timeout_seconds,
            send_initial_events=send_initial_events,
        )

    # -- writes ------------------------------------------------------------------------------

    async def create(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Create ``obj`` and return it as stored (uid, resourceVersion, creationTimestamp).

        A custom resource whose schema the fake knows is checked under
        ``field_validation`` (default as the client's), pruned, defaulted and validated
        as the server does (see the module docstring).

        Raises:
            AlreadyExists: the name is taken (also while an object of that name
                is being deleted).
            BadRequest: under ``Strict``, a field the schema does not declare.
            Invalid: no name, or an invalid name, label or annotation, or a value
                the schema refuses.

        """

        def op() -> Obj:
            data = _to_json(obj)
            kind = kind_of(obj)
            rules = self._target(kind, namespace=namespace_of(data) or None)
            created = self._store.create(
                rules,
                data,
                manager=self._manager(field_manager),
                dry_run=dry_run,
                field_validation=field_validation_for(obj, field_validation),
            )
            return kind.from_object(created)

        return await self._run(object_call("create", obj), op)

    async def update(
        self,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Replace ``obj``, optimistically on its ``metadata.resourceVersion``.

        Status is ignored when the kind has a status subresource;
        ``subresource="status"`` writes only status. ``field_validation`` as for
        :meth:`create`.

        Raises:
            Conflict: the resourceVersion is stale.
            Invalid: a custom resource without resourceVersion, a new finalizer
                on a deleting object, or invalid metadata.
            NotFound: no such object (or no such subresource).

        """
        call = object_call("update", obj, subresource=subresource)
        return await self._run(
            call,
            lambda: self._update(obj, subresource, dry_run, field_manager, field_validation),
        )

    def _update(
        self,
        obj: Obj,
        subresource: str | None,
        dry_run: bool,
        field_manager: str | None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        data = _to_json(obj)
        kind = kind_of(obj)
        name = name_of(data)
        if not name:
            raise ValueError(f"{describe(data)} has no metadata.name; set it before this call")
        rules = self._target(kind, namespace=namespace_of(data) or None, name=name)
        if subresource == "scale":
            # The server answers a PUT to ``scale`` with the Scale, whatever ``obj`` is.
            scale: Any = self._set_scale(rules, namespace_of(data), name, data, dry_run)
            return cast("Obj", scale)
        updated = self._store.update(
            rules,
            data,
            manager=self._manager(field_manager),
            dry_run=dry_run,
            subresource=subresource,
            field_validation=field_validation_for(obj, field_validation),
        )
        return kind.from_object(updated)

    async def replace_status(
        self,
        obj: Obj,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: FieldValidation | None = None,
    ) -> Obj:
        """Write ``obj``'s status through the status subresource (everything else is ignored)."""
        call = object_call("replace_status", obj, subresource="status")
        return await self._run(
            call,
            lambda: self._update(obj, "status", dry_run, field_manager, field_validation),
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
        """Patch one object with any of the four patch kinds.

        ``field_validation`` as for :meth:`create`, checked on the patched object; an apply
        patch setting a field the schema does not declare is refused whatever it says.

        Raises:
            Invalid: a JSON patch whose ``test`` (or another operation) failed.
            Conflict: a stale ``metadata.resourceVersion`` in the patch, or a
                server-side apply conflict (``causes`` name the fields).
            UnsupportedMediaType: strategic merge on a custom resource.
            NotFound: no such object (apply creates it instead).

        """

        def op() -> T:
            rules = self._target(kind, namespace=namespace, name=name)
            result = self._store.patch(
                rules,
                namespace or "",
                name,
                patch,
                manager=self._manager(field_manager),
                dry_run=dry_run,
                subresource=subresource,
                field_validation=field_validation_for(kind, field_validation),
            )
            return kind.from_object(result)

        call = Call("patch", kind_gvk(kind), namespace, name, subresource, body=patch)
        return await self._run(call, op)

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
        """Server-side apply ``obj`` (approximated; see the module docstring)."""
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
        """Server-side apply ``obj`` and say whether it created the object (the server's 201).

        Recorded as an ``apply`` call, like :meth:`apply`.
        """

        def op() -> Applied[Obj]:
            data = _to_json(obj)
            kind = kind_of(obj)
            name = name_of(data)
            if not name:
                raise ValueError(f"{describe(data)} has no metadata.name; set it before this call")
            namespace = namespace_of(data)
            rules = self._target(kind, namespace=namespace or None, name=name)
            existed = self._store.exists(rules, namespace, name)
            result = self._store.patch(
                rules,
                namespace,
                name,
                ApplyPatch(data, force=force),
                manager=self._manager(field_manager),
                dry_run=dry_run,
                subresource=subresource,
                field_validation=field_validation_for(obj, field_validation),
            )
            return Applied(kind.from_object(result), not existed)

        return await self._run(object_call("apply", obj, subresource=subresource), op)

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
        """Delete one object; return it while finalizers keep it, else a ``Status``.

        ``grace_period_seconds`` is accepted and ignored (nothing runs pods).

        Raises:
            NotFound: no such object.
            Conflict: ``preconditions`` did not hold.

        """

        def op() -> JsonObject:
            rules = self._target(kind, namespace=namespace, name=name)
            return self._store.delete(
                rules,
                namespace or "",
                name,
                propagation_policy=propagation_policy,
                uid=preconditions.uid if preconditions else None,
                resource_version=preconditions.resource_version if preconditions else None,
                dry_run=dry_run,
            )

        return await self._run(Call("delete", kind_gvk(kind), namespace, name), op)

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

        def op() -> None:
            rules = self._target(kind, namespace=namespace, require_namespace=False)
            self._store.delete_collection(
                rules,
                namespace=namespace if rules.info.namespaced else None,
                labels=labels,
                fields=fields,
                propagation_policy=propagation_policy,
                dry_run=dry_run,
            )

        await self._run(Call("delete_collection", kind_gvk(kind), namespace), op)

    # -- subresources ---------------------------------------------------------------------------

    def _subresource_missing(self, rules: KindRules, namespace: str, name: str, sub: str) -> Any:
        return api_error(
            404,
            "NotFound",
            f"the server could not find the requested resource (the fake serves no {sub!r} "
            f"subresource for {rules.info.gvk.kind})",
            method="GET",
            path=path_of(rules.info, namespace, name, sub),
            details={},
        )

    async def get_subresource(
        self, kind: Kind[object], name: str, subresource: str, *, namespace: str | None = None
    ) -> JsonObject:
        """Read ``status`` (the whole object) or ``scale`` (an autoscaling/v1 Scale)."""

        def op() -> JsonObject:
            rules = self._target(kind, namespace=namespace, name=name)
            ns = namespace or ""
            if subresource not in rules.info.subresources or subresource not in (
                "status",
                "scale",
            ):
                raise self._subresource_missing(rules, ns, name, subresource)
            obj = self._store.get(rules, ns, name)
            return _scale_of(obj) if subresource == "scale" else obj

        call = Call("get_subresource", kind_gvk(kind), namespace, name, subresource)
        return await self._run(call, op)

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
        """POST to a subresource: ServiceAccount ``token`` and Pod ``eviction`` are served.

        A token is a random string (nothing can verify it); an eviction deletes
        the pod (no PodDisruptionBudget is consulted).
        """

        def op() -> JsonObject:
            rules = self._target(kind, namespace=namespace, name=name)
            ns = namespace or ""
            gk = rules.group_kind
            if gk == ("", "ServiceAccount") and subresource == "token":
                account = self._store.get(rules, ns, name)
                seconds = int((body.get("spec") or {}).get("expirationSeconds") or 3600)
                expires = datetime.now(UTC) + timedelta(seconds=seconds)
                return {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "creationTimestamp": account["metadata"]["creationTimestamp"],
                    },
                    "spec": {**(body.get("spec") or {}), "expirationSeconds": seconds},
                    "status": {
                        "token": f"fake.{random_token()}",
                        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    },
                }
            if gk == ("", "Pod") and subresource == "eviction":
                self._store.delete(
                    rules,
                    ns,
                    name,
                    propagation_policy=None,
                    uid=None,
                    resource_version=None,
                    dry_run=dry_run,
                )
                return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
            raise self._subresource_missing(rules, ns, name, subresource)

        call = Call("create_subresource", kind_gvk(kind), namespace, name, subresource, body=body)
        return await self._run(call, op)

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
        """PUT a subresource: a Scale to ``scale``, or an object to ``status``."""

        def op() -> JsonObject:
            rules = self._target(kind, namespace=namespace, name=name)
            ns = namespace or ""
            if subresource == "scale" and "scale" in rules.info.subresources:
                return self._set_scale(rules, ns, name, body, dry_run)
            if subresource == "status":
                data = clone(body)
                meta = data.setdefault("metadata", {})
                meta.setdefault("name", name)
                if ns:
                    meta.setdefault("namespace", ns)
                return self._store.update(
                    rules,
                    data,
                    manager=self.options.field_manager,
                    dry_run=dry_run,
                    subresource="status",
                )
            raise self._subresource_missing(rules, ns, name, subresource)

        call = Call("update_subresource", kind_gvk(kind), namespace, name, subresource, body=body)
        return await self._run(call, op)

    def _set_scale(
        self, rules: KindRules, namespace: str, name: str, scale: JsonObject, dry_run: bool
    ) -> JsonObject:
        if "scale" not in rules.info.subresources:
            raise self._subresource_missing(rules, namespace, name, "scale")
        replicas = (scale.get("spec") or {}).get("replicas")
        patch: dict[str, Any] = {"spec": {"replicas": replicas}}
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv:
            patch["metadata"] = {"resourceVersion": rv}
        result = self._store.patch(
            rules,
            namespace,
            name,
            MergePatch(patch),
            manager=self.options.field_manager,
            dry_run=dry_run,
            subresource=None,
        )
        return _scale_of(result)

    async def get_scale(
        self, kind: Kind[object], name: str, *, namespace: str | None = None
    ) -> JsonObject:
        """The object's ``autoscaling/v1`` Scale (``spec.replicas``, ``status.replicas``)."""

        def op() -> JsonObject:
            rules = self._target(kind, namespace=namespace, name=name)
            if "scale" not in rules.info.subresources:
                raise self._subresource_missing(rules, namespace or "", name, "scale")
            return _scale_of(self._store.get(rules, namespace or "", name))

        return await self._run(Call("get_scale", kind_gvk(kind), namespace, name, "scale"), op)

    async def set_scale(
        self, kind: Kind[object], name: str, replicas: int, *, namespace: str | None = None
    ) -> JsonObject:
        """Set ``spec.replicas`` through the ``scale`` subresource."""

        def op() -> JsonObject:
            rules = self._target(kind, namespace=namespace, name=name)
            return self._set_scale(
                rules, namespace or "", name, {"spec": {"replicas": replicas}}, False
            )

        call = Call("set_scale", kind_gvk(kind), namespace, name, "scale", body=replicas)
        return await self._run(call, op)

    async def server_version(self) -> JsonObject:
        """A ``/version`` document naming the release the fake imitates."""
        major, minor, *_ = FAKE_SERVER_VERSION.lstrip("v").split(".")
        return {
            "major": major,
            "minor": minor,
            "gitVersion": FAKE_SERVER_VERSION,
            "platform": "setpoint/fake",
        }

    def _manager(self, field_manager: str | None) -> str:
        return field_manager or self.options.field_manager


class FakeWatch(Generic[T]):
    """A watch on a :class:`FakeClient`: the interface of :class:`setpoint.client.Watch`.

    An async iterator of :class:`~setpoint.client.WatchEvent` and an async
    context manager; ``resource_version`` tracks the last event (bookmarks
    included). The watch starts (and fault rules for ``watch`` run) on the
    first iteration, as the live client sends its request then.

    Raises from iteration:
        Expired: the start resourceVersion was compacted away (relist).
        BadRequest: a malformed selector.
        UnknownKind: the fake does not serve the kind.
    """

    def __init__(
        self,
        client: FakeClient,
        kind: Kind[T],
        *,
        namespace: str | None,
        resource_version: str | None,
        labels: Selector | None,
        fields: Selector | None,
        allow_bookmarks: bool,
        timeout_seconds: float | None,
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
        self._timeout = timeout_seconds or None  # 0 means the default, as for the client
        self._initial = send_initial_events
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._iterator: AsyncIterator[WatchEvent[T]] | None = None
        self._rules: KindRules | None = None
        self._closed = False

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
        if self._closed:
            raise StopAsyncIteration
        if self._iterator is None:
            self._iterator = self._events()
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        """Stop the watch; a task iterating it (even right now) sees the iteration end."""
        self._closed = True
        self._push(_END)
        iterator, self._iterator = self._iterator, None
        # Closing a generator another task is suspended in would raise; the _END pushed
        # above makes that task finish it instead.
        if iterator is not None and not getattr(iterator, "ag_running", False):
            await iterator.aclose()  # type: ignore[attr-defined]
        self._stop()

    def _push(self, item: object) -> None:
        self._queue.put_nowait(item)

    def _listener(self, event: Change) -> None:
        self._client._deliver(self, event)

    def _stop(self) -> None:
        self._client._store.unlisten(self._listener)
        self._client._watches.discard(self)

    def _start(self) -> None:
        """Subscribe and queue the backlog in one synchronous step, so no event slips between."""
        client = self._client
        store = client._store
        rules = client._target(self._kind, namespace=self._namespace, require_namespace=False)
        self._rules = rules
        path = path_of(rules.info, self._namespace)
        self._selectors = store.selectors(rules, self._labels, self._fields, path=path)
        start = self.resource_version
        if start in ("", "0") or self._initial:
            for obj in store.current(rules):
                self._queue.put_nowait(Change(0, "ADDED", rules.group_kind, "", obj, None))
            if self._allow_bookmarks:
                self._queue.put_nowait(_Bookmark(store.revision, initial_events_end=True))
        else:
            revision = store.revision_of(start)
            if revision is None:
                raise api_error(
                    400,
                    "BadRequest",
                    f"invalid resource version {start!r}",
                    method="GET",
                    path=path,
                )
            if revision < store.compacted:
                raise api_error(
                    410,
                    "Expired",
                    f"too old resource version: {revision} ({store.compacted})",
                    method="GET",
                    path=path,
                )
            for event in store.events_since(rules, revision):
                self._queue.put_nowait(event)
        store.listen(self._listener)
        client._watches.add(self)

    def _matches(self, obj: JsonObject) -> bool:
        meta = obj["metadata"]
        if self._namespace and meta.get("namespace", "") != self._namespace:
            return False
        label_sel, field_sel = self._selectors
        return label_sel.matches(meta.get("labels") or {}) and field_sel.matches(obj)

    def _translate(self, event: Change) -> WatchEvent[T] | None:
        rules = self._rules
        assert rules is not None
        if event.group_kind != rules.group_kind:
            return None
        now = self._matches(event.obj)
        before = event.previous is not None and self._matches(event.previous)
        kind: Literal["ADDED", "MODIFIED", "DELETED"]
        if event.type == "ADDED":
            if not now:
                return None
            kind = "ADDED"
        elif event.type == "DELETED":
            if not now:
                return None
            kind = "DELETED"
        elif now and before:
            kind = "MODIFIED"
        elif now:
            kind = "ADDED"
        elif before:
            kind = "DELETED"
        else:
            return None
        source = event.obj
        if kind == "DELETED" and event.type == "MODIFIED" and event.previous is not None:
            # Leaving the selection: the server sends the previous content (the state that
            # matched) at the new resourceVersion.
            source = clone(event.previous)
            source["metadata"]["resourceVersion"] = event.obj["metadata"]["resourceVersion"]
        obj = self._client._store.present(rules, source)
        rv = str(obj["metadata"].get("resourceVersion") or "")
        self.resource_version = rv
        return WatchEvent(kind, self._kind.from_object(obj), rv)

    def _bookmark(self, bookmark: _Bookmark) -> WatchEvent[T]:
        rules = self._rules
        assert rules is not None
        metadata: dict[str, Any] = {
            "resourceVersion": self._client._store.format_rv(bookmark.revision)
        }
        if bookmark.initial_events_end:
            metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
        obj = {
            "apiVersion": rules.info.gvk.api_version,
            "kind": rules.info.gvk.kind,
            "metadata": metadata,
        }
        self.resource_version = metadata["resourceVersion"]
        return WatchEvent("BOOKMARK", obj, metadata["resourceVersion"])

    async def _events(self) -> AsyncIterator[WatchEvent[T]]:
        client = self._client
        call = Call(
            "watch",
            kind_gvk(self._kind),
            self._namespace,
            resource_version=self.resource_version or None,
        )

        async def start() -> None:
            await asyncio.sleep(0)
            self._start()

        await client.faults.run(call, start)
        loop = asyncio.get_running_loop()
        deadline = None if self._timeout is None else loop.time() + self._timeout
        try:
            while True:
                if deadline is None:
                    item = await self._queue.get()
                else:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return
                    try:
                        item = await asyncio.wait_for(self._queue.get(), remaining)
                    except TimeoutError:
                        return
                if item is _END:
                    return
                if isinstance(item, _Break):
                    raise item.error
                if isinstance(item, _Bookmark):
                    if self._allow_bookmarks:
                        yield self._bookmark(item)
                    continue
                assert isinstance(item, Change)
                translated = self._translate(item)
                if translated is not None:
                    yield translated
        finally:
            self._stop()


# ----------------------------------------------------------------------------- helpers


def _to_json(obj: JsonObject | TypedObject) -> JsonObject:
    return obj.to_object() if is_typed(obj) else obj


@functools.lru_cache(maxsize=512)
def _generated_schema(cls: type[Resource]) -> Mapping[str, Any] | None:
    """The ``openAPIV3Schema`` ``setpoint generate crd`` makes for ``cls``'s version, if any.

    ``None`` for a built-in group, for a type the generator refuses, and without the tools
    extra's RE2 (a warning says so); such objects are stored unchecked. Cached per class:
    generation takes about a millisecond, and unit tests build many fakes.
    The fake only reads the schema.
    """
    gvk = cls.declaration().gvk
    if gvk.group in BUILTIN_GROUPS:
        return None
    try:
        crd = crd_for(cls)
    except CRDGenerationError:
        return None
    except ExtraNotInstalled as missing:
        # The runtime alone (no tools extra): the generator checks defaults against
        # patterns with RE2. Store the kind's objects unchecked, and say so once.
        warn_without_re2(f"{cls.__name__}'s schema (generated from the type) is", str(missing))
        return None
    for version in crd["spec"]["versions"]:
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if version["name"] == gvk.version and isinstance(schema, Mapping):
            return cast("Mapping[str, Any]", schema)
    return None


def _info_of_class(cls: type[Any]) -> ResourceInfo:
    get_info = getattr(cls, "resource_info", None)
    if get_info is None:
        gvk = getattr(cls, "gvk", None)
        raise UnknownKind(
            f"{cls.__qualname__} ({gvk}) has no resource_info(); register a ResourceInfo for it "
            "with FakeClient(resources=[...])"
        )
    info = get_info()
    if not isinstance(info, ResourceInfo):
        raise TypeError(f"{cls.__qualname__}.resource_info() did not return a ResourceInfo")
    return info


def _scale_of(obj: Mapping[str, Any]) -> JsonObject:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    scale_status: dict[str, Any] = {"replicas": int(status.get("replicas") or 0)}
    match_labels = (spec.get("selector") or {}).get("matchLabels")
    if isinstance(match_labels, Mapping):
        scale_status["selector"] = ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": int(spec.get("replicas") or 0)},
        "status": scale_status,
    }


if TYPE_CHECKING:

    def _satisfies_protocols(
        fake: FakeClient, faulty: FaultInjectingClient
    ) -> tuple[
        Reader,
        Writer,
        StatusWriter,
        SafeClient,
        ListWatcher,
        IndexReader,
        ApiClient,
        Reader,
        Writer,
        StatusWriter,
        SafeClient,
        ApiClient,
    ]:
        """Checked by mypy only: both clients fit wherever the live client does."""
        return fake, fake, fake, fake, fake, fake, fake, faulty, faulty, faulty, faulty, faulty
