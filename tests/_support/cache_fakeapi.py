"""A tiny scripted API server for informer unit tests.

It implements only what an informer calls on a client (``resource_info``, ``list``,
``watch``), over an in-memory object table with a global revision counter and an event
history, so tests can script exactly what the real server does: events in revision order,
bookmarks, compaction (410 Gone for older watches), broken connections and failing lists.
Relist and re-watch semantics are also tested against the real server
(tests/integration/cache).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import key_of
from setpoint.cache.selectors import FieldSelector, LabelSelector
from setpoint.client.client import ObjectList, WatchEvent
from setpoint.client.errors import ConnectionFailed, Gone, UnknownKind

WIDGET = GroupVersionKind("test.setpoint.dev", "v1", "Widget")
CLUSTER_THING = GroupVersionKind("test.setpoint.dev", "v1", "ClusterThing")


def widget(name: str, namespace: str = "default", **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": WIDGET.api_version,
        "kind": WIDGET.kind,
        "metadata": {"name": name, "namespace": namespace, **extra.pop("metadata", {})},
    }
    obj.update(extra)
    return obj


@dataclass(eq=False)
class _Watcher:
    kind: GroupVersionKind
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    queue: asyncio.Queue[WatchEvent[Any] | BaseException | None] = field(
        default_factory=asyncio.Queue
    )


class FakeWatch:
    """Registers with the server when iteration starts (after ``watch_gate``, if any), so a
    test can hold a re-watch back while it changes objects and compacts history."""

    def __init__(
        self, api: FakeApi, kind: GroupVersionKind, watcher: _Watcher, start: int | None
    ) -> None:
        self._api = api
        self._kind = kind
        self._watcher = watcher
        self._start = start
        self.resource_version = ""

    async def __aenter__(self) -> FakeWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._api._watchers.discard(self._watcher)

    def __aiter__(self) -> AsyncIterator[WatchEvent[Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[WatchEvent[Any]]:
        api = self._api
        if api.watch_gate is not None:
            await api.watch_gate.wait()
        if api.watch_failures:
            raise api.watch_failures.pop(0)
        start = self._start if self._start is not None else api.revision
        if start < api.compacted:
            raise Gone(
                f"too old resource version: {start} ({api.compacted})", code=410, reason="Expired"
            )
        for revision, kind, event_type, obj in api.history:
            if revision > start and kind == self._kind:
                event = api._filtered(self._watcher, event_type, obj, revision)
                if event is not None:
                    self._watcher.queue.put_nowait(event)
        api._watchers.add(self._watcher)
        while True:
            item = await self._watcher.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


class FakeApi:
    """The server side: objects, revisions, history and the watches connected to it."""

    def __init__(self, kinds: dict[GroupVersionKind, bool] | None = None) -> None:
        # kind -> namespaced
        self.kinds = kinds if kinds is not None else {WIDGET: True, CLUSTER_THING: False}
        self.revision = 100
        self.objects: dict[tuple[GroupVersionKind, ObjectKey], dict[str, Any]] = {}
        self.history: list[tuple[int, GroupVersionKind, str, dict[str, Any]]] = []
        self.compacted = 0
        self._watchers: set[_Watcher] = set()
        self.list_failures: list[BaseException] = []
        self.watch_failures: list[BaseException] = []
        self.calls: list[str] = []
        self.list_gate: asyncio.Event | None = None
        self.watch_gate: asyncio.Event | None = None
        self._held: list[tuple[GroupVersionKind, str, dict[str, Any], int]] | None = None
        self.rv_prefix = ""

    # -- what a client offers --------------------------------------------------------------

    async def resource_info(self, kind: GroupVersionKind) -> ResourceInfo:
        self.calls.append("resource_info")
        if kind not in self.kinds:
            raise UnknownKind(
                f"the server does not serve kind {kind.kind!r} in group {kind.group!r}. "
                "Is its CustomResourceDefinition installed?"
            )
        return ResourceInfo(kind, kind.kind.lower() + "s", self.kinds[kind])

    async def list(
        self,
        kind: GroupVersionKind,
        *,
        namespace: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
        resource_version: str | None = None,
    ) -> ObjectList[Any]:
        self.calls.append(f"list {namespace}")
        if self.list_gate is not None:
            await self.list_gate.wait()
        if self.list_failures:
            raise self.list_failures.pop(0)
        if kind not in self.kinds:
            raise UnknownKind(f"kind {kind.kind} not served")
        label_selector = LabelSelector.parse(labels)
        field_selector = FieldSelector.parse(fields)
        items = [
            copy.deepcopy(obj)
            for (k, key), obj in sorted(self.objects.items(), key=lambda kv: kv[0][1])
            if k == kind
            and (namespace is None or key.namespace == namespace)
            and label_selector.matches_object(obj)
            and field_selector.matches(obj)
        ]
        return ObjectList(items, self.rv(self.revision))

    def watch(
        self,
        kind: GroupVersionKind,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        labels: str | None = None,
        fields: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        send_initial_events: bool = False,
    ) -> FakeWatch:
        self.calls.append(f"watch {namespace} {resource_version}")
        watcher = _Watcher(
            kind, namespace, LabelSelector.parse(labels), FieldSelector.parse(fields)
        )
        start = int(resource_version.removeprefix(self.rv_prefix)) if resource_version else None
        return FakeWatch(self, kind, watcher, start)

    # -- what a test scripts ---------------------------------------------------------------------

    def _filtered(
        self, watcher: _Watcher, event_type: str, obj: dict[str, Any], revision: int
    ) -> WatchEvent[Any] | None:
        if watcher.namespace is not None and key_of(obj).namespace != watcher.namespace:
            return None
        if not (watcher.labels.matches_object(obj) and watcher.fields.matches(obj)):
            return None
        return WatchEvent(event_type, copy.deepcopy(obj), self.rv(revision))  # type: ignore[arg-type]

    def hold(self) -> None:
        """Hold back watch events (the cache lags) until :meth:`release`."""
        self._held = []

    def release(self) -> None:
        """Deliver the held events, in order."""
        held, self._held = self._held, None
        for kind, event_type, obj, revision in held or ():
            self._deliver(kind, event_type, obj, revision)

    def _emit(self, kind: GroupVersionKind, event_type: str, obj: dict[str, Any]) -> None:
        self.history.append((self.revision, kind, event_type, copy.deepcopy(obj)))
        if self._held is not None:
            self._held.append((kind, event_type, copy.deepcopy(obj), self.revision))
            return
        self._deliver(kind, event_type, obj, self.revision)

    def _deliver(
        self, kind: GroupVersionKind, event_type: str, obj: dict[str, Any], revision: int
    ) -> None:
        for watcher in list(self._watchers):
            if watcher.kind != kind:
                continue
            event = self._filtered(watcher, event_type, obj, revision)
            if event is not None:
                watcher.queue.put_nowait(event)

    def put(self, obj: dict[str, Any], kind: GroupVersionKind = WIDGET) -> dict[str, Any]:
        """Create or replace an object server-side; returns it with its new resourceVersion."""
        self.revision += 1
        obj = copy.deepcopy(obj)
        key = key_of(obj)
        existed = (kind, key) in self.objects
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = self.rv(self.revision)
        meta.setdefault("uid", f"uid-{key.namespace}-{key.name}-{self.revision}")
        if existed:
            meta["uid"] = self.objects[(kind, key)]["metadata"]["uid"]
        self.objects[(kind, key)] = obj
        self._emit(kind, "MODIFIED" if existed else "ADDED", obj)
        return copy.deepcopy(obj)

    def remove(self, key: ObjectKey, kind: GroupVersionKind = WIDGET) -> dict[str, Any]:
        self.revision += 1
        obj = self.objects.pop((kind, key))
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = self.rv(self.revision)
        self._emit(kind, "DELETED", obj)
        return obj

    def rv(self, revision: int) -> str:
        """How the server spells a revision (a prefix makes versions non-integers)."""
        return f"{self.rv_prefix}{revision}"

    def bookmark(self) -> None:
        """Send a bookmark at the current revision to every watch."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(
                WatchEvent(
                    "BOOKMARK",
                    {"metadata": {"resourceVersion": self.rv(self.revision)}},
                    self.rv(self.revision),
                )
            )

    def advance(self, n: int = 1) -> None:
        """Writes to other resources: the revision moves on without events for us."""
        self.revision += n

    def compact(self) -> None:
        """Forget history: watches from older revisions get 410 Gone."""
        self.compacted = self.revision
        self.history.clear()

    def break_watches(self, error: BaseException | None = None) -> None:
        """Break every open watch stream (``None`` closes them cleanly)."""
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(
                error
                if error is not None
                else ConnectionFailed("connection reset by peer", url="https://fake")
            )
        self._watchers.clear()

    def end_watches(self) -> None:
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        self._watchers.clear()

    @property
    def open_watches(self) -> int:
        return len(self._watchers)
