"""The fake API server's storage: objects, one global revision, history, reads and writes.

Every public method of :class:`FakeServerStore` does one whole request without
awaiting, so under asyncio each request is atomic, as an etcd transaction is.
The async :class:`~setpoint.testing.fake.FakeClient` wraps it. The store keeps
objects by kind and key, assigns resourceVersions, keeps the event history that
watches and old-version lists read, and implements the write semantics (create,
update, the four patch kinds, delete). It leans on its neighbours for the rest:

- :mod:`~setpoint.testing._fake_kinds`: per-kind rules (scope, status, generation);
- :mod:`~setpoint.testing._fake_validation`: what a write may store (400s and 422s);
- :mod:`~setpoint.testing._fake_errors`: errors worded as the server words them;
- :mod:`~setpoint.testing._fake_gc`: garbage collection and namespace teardown;
- :mod:`~setpoint.testing._fake_apply`, :mod:`~setpoint.testing._fake_patch`: server-side
  apply and the patch formats.

The rules implemented here were checked against a real kube-apiserver by the
parity suite (``tests/integration/parity``); where a rule is the fake's own
simplification, the comment says so.
"""

from __future__ import annotations

import base64
import random
import string
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from setpoint.api.conversion import ConversionError, KindConversion
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.jsonvalues import copy_json, json_equal
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import JsonObject
from setpoint.cache.selectors import FieldMatcher, LabelMatcher, SelectorError
from setpoint.client.errors import ApiError, Cause
from setpoint.client.patch import ApplyPatch, JsonPatch, MergePatch, Patch, StrategicMergePatch
from setpoint.client.server_warnings import FieldValidation
from setpoint.crd.objects import prune_and_default
from setpoint.testing._fake_apply import Ownership, Record, apply_configuration
from setpoint.testing._fake_errors import (
    api_error,
    invalid,
    kind_details,
    not_found,
    resource_details,
    stale,
)
from setpoint.testing._fake_gc import GC_MANAGER, GarbageCollector, Slot
from setpoint.testing._fake_kinds import (
    KindRules,
    crd_resources,
    generation_relevant,
    path_of,
    rules_for,
    storage_key,
)
from setpoint.testing._fake_patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from setpoint.testing._fake_schema import check_apply, check_fields, schema_causes
from setpoint.testing._fake_validation import (
    check_decodable,
    finalizers_added_while_deleting,
    metadata_problems,
    normalize_metadata,
)

__all__ = [
    "INITIAL_EVENTS_END",
    "Change",
    "FakeServerStore",
    "Listing",
    "Record",
    "clone",
    "random_token",
]

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]

# The alphabet of generateName suffixes (no vowels, no confusable characters), as the server.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "resourceVersion",
)

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""Annotation of the bookmark that ends the initial events of a watch."""


@dataclass(frozen=True, slots=True)
class Change:
    """One committed change: the object after it (for DELETED: the last state) and before it.

    What watches of the fake are made from; the client's own is
    :class:`~setpoint.client.objects.WatchEvent`.
    """

    revision: int
    type: ChangeType
    group_kind: tuple[str, str]
    namespace: str
    obj: JsonObject
    previous: JsonObject | None


@dataclass(frozen=True, slots=True)
class Listing:
    """A page of a list: items, the list's resourceVersion, continue token, remaining count."""

    items: list[JsonObject]
    resource_version: str
    continue_token: str | None
    remaining: int | None


def clone(obj: Any) -> Any:
    """A deep copy through JSON, which also refuses what a real server could not receive."""
    return copy_json(obj)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: JsonObject) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


class FakeServerStore:
    """All objects of a fake cluster, one revision counter, the event history and watchers.

    The fake API server's state, behind :class:`~setpoint.testing.fake.FakeClient`; not a
    fake of the cache's :class:`~setpoint.cache.store.Store`.
    """

    def __init__(
        self,
        *,
        history: int,
        garbage_collection: bool,
        require_namespaces: bool,
        resource_version_prefix: str = "",
    ) -> None:
        self.revision = 0
        """The last revision committed (``resourceVersion`` of the newest write)."""
        self.kinds: dict[GroupVersionKind, KindRules] = {}
        self._objects: dict[tuple[str, str], dict[str, Record]] = {}
        self._log: deque[Change] = deque(maxlen=history)
        self.compacted = 0
        """Revisions up to this one are no longer in the history (watch/list from them: 410)."""
        self._listeners: list[Callable[[Change], None]] = []
        self._require_namespaces = require_namespaces
        self._rules_by_gk: dict[tuple[str, str], KindRules] = {}
        self._conversions: dict[tuple[str, str], tuple[KindConversion, str]] = {}
        self._gc = GarbageCollector(self, enabled=garbage_collection)
        self._rv_prefix = resource_version_prefix
        self._schemas: dict[GroupVersionKind, tuple[Mapping[str, Any], bool]] = {}

    # -- resource versions ------------------------------------------------------------

    def format_rv(self, revision: int) -> str:
        """How this server spells a revision as a resourceVersion (prefix + number)."""
        return f"{self._rv_prefix}{revision}"

    def revision_of(self, value: str) -> int | None:
        """The revision a resourceVersion this server issued names, or ``None``."""
        number = value.removeprefix(self._rv_prefix) if self._rv_prefix else value
        if (self._rv_prefix and not value.startswith(self._rv_prefix)) or not number.isdigit():
            return None
        return int(number)

    # -- kinds ------------------------------------------------------------------------

    def register(self, info: ResourceInfo) -> KindRules:
        """Serve ``info``'s kind from now on (a later registration of the same GVK replaces it)."""
        rules = rules_for(info)
        self.kinds[info.gvk] = rules
        self._rules_by_gk.setdefault(rules.group_kind, rules)
        return rules

    def register_schema(
        self, gvk: GroupVersionKind, schema: Mapping[str, Any], *, from_crd: bool
    ) -> None:
        """Validate custom resources of ``gvk`` against ``schema`` (its ``openAPIV3Schema``).

        A schema from a CustomResourceDefinition written in the fake (``from_crd``) is what
        the server would use and replaces any other; one generated from a Python type is
        kept only while no CRD gave one.
        """
        known = self._schemas.get(gvk)
        if from_crd or known is None or not known[1]:
            self._schemas[gvk] = (schema, from_crd)

    def schema_of(self, gvk: GroupVersionKind) -> Mapping[str, Any] | None:
        """The schema objects of ``gvk`` are validated against, if the fake knows one."""
        known = self._schemas.get(gvk)
        return known[0] if known is not None else None

    def _object_schema(self, obj: JsonObject) -> Mapping[str, Any] | None:
        api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        group, _, version = api_version.rpartition("/")
        return self.schema_of(GroupVersionKind(group, version, kind))

    def _schema_problems(self, obj: JsonObject) -> tuple[JsonObject, list[Cause]]:
        """``obj`` pruned and defaulted by its schema, and the schema's 422 causes."""
        schema = self._object_schema(obj)
        if schema is None:
            return obj, []
        stored = prune_and_default(obj, schema)
        return stored, schema_causes(stored, schema)

    def register_conversion(self, conversion: KindConversion, storage_version: str) -> None:
        """Store the kind at ``storage_version`` and convert with ``conversion`` on the way.

        As the API server does with a ``Webhook`` conversion: a write at another version is
        converted to the storage version before it is stored, a read at another version is
        converted from it, and a patch applies to the object at the patch's version.
        """
        self._conversions[(conversion.group, conversion.kind)] = (
            conversion,
            f"{conversion.group}/{storage_version}",
        )

    def _to_storage(
        self, rules: KindRules, obj: JsonObject, *, method: str, path: str
    ) -> JsonObject:
        """``obj``, written at ``rules``' version, as it is stored."""
        obj["apiVersion"] = rules.info.gvk.api_version
        obj["kind"] = rules.info.gvk.kind
        entry = self._conversions.get(rules.group_kind)
        if entry is None or entry[1] == obj["apiVersion"]:
            return obj
        return self._convert(rules, obj, entry, method=method, path=path)

    def _convert(
        self,
        rules: KindRules,
        obj: JsonObject,
        entry: tuple[KindConversion, str],
        *,
        method: str,
        path: str,
        to: str | None = None,
    ) -> JsonObject:
        conversion, storage = entry
        target = to or storage
        try:
            converted: JsonObject = clone(conversion.convert(obj, target))
        except ConversionError as exc:
            gvk = f"{obj.get('apiVersion')}, Kind={rules.info.gvk.kind}"
            raise api_error(
                500,
                "InternalError",
                f"Internal error occurred: conversion webhook for {gvk} failed: {exc}",
                method=method,
                path=path,
            ) from None
        return converted

    def resolve(self, slot: Slot) -> tuple[KindRules, Record] | None:
        """The rules and record stored at ``slot`` (for the garbage collector)."""
        rules = self._rules_by_gk.get(slot[0])
        record = self._objects.get(slot[0], {}).get(slot[1])
        if rules is None or record is None:
            return None
        return rules, record

    def system_update(self, rules: KindRules, record: Record, new: JsonObject) -> None:
        """Replace ``record``'s object as the garbage collector (no preconditions)."""
        self._write(rules, record, new, manager=GC_MANAGER, dry_run=False, method="PUT")

    # -- reads ------------------------------------------------------------------------

    def _bucket(self, rules: KindRules) -> dict[str, Record]:
        return self._objects.setdefault(rules.group_kind, {})

    def _record(self, rules: KindRules, namespace: str, name: str) -> Record | None:
        return self._objects.get(rules.group_kind, {}).get(storage_key(namespace, name))

    def exists(self, rules: KindRules, namespace: str, name: str) -> bool:
        """Whether an object of this kind is stored under ``namespace``/``name``."""
        return self._record(rules, namespace, name) is not None

    def present(self, rules: KindRules, obj: JsonObject) -> JsonObject:
        """A copy of a stored object as the client sees it: at the asked version.

        Converted from the storage version when the kind has a conversion; otherwise (the
        API server's ``None`` strategy) only relabelled.
        """
        entry = self._conversions.get(rules.group_kind)
        if entry is not None and obj.get("apiVersion") != rules.info.gvk.api_version:
            meta = obj.get("metadata") or {}
            path = path_of(rules.info, meta.get("namespace") or "", meta.get("name") or "")
            return self._convert(
                rules, obj, entry, method="GET", path=path, to=rules.info.gvk.api_version
            )
        out: JsonObject = clone(obj)
        out["apiVersion"] = rules.info.gvk.api_version
        out["kind"] = rules.info.gvk.kind
        return out

    def get(self, rules: KindRules, namespace: str, name: str) -> JsonObject:
        """One object, or NotFound."""
        record = self._record(rules, namespace, name)
        if record is None:
            raise not_found(rules, name, method="GET", path=path_of(rules.info, namespace, name))
        return self.present(rules, record.obj)

    def selectors(
        self,
        rules: KindRules,
        labels: str | Mapping[str, str] | None,
        fields: str | Mapping[str, str] | None,
        *,
        path: str,
    ) -> tuple[LabelMatcher, FieldMatcher]:
        """Parse both selectors, answering a malformed one with 400 as the server does."""
        try:
            return (
                LabelMatcher.parse(labels),
                FieldMatcher.parse(fields).require_fields(rules.fields, custom=rules.custom),
            )
        except SelectorError as exc:
            raise api_error(400, "BadRequest", exc.reason, method="GET", path=path) from None

    def snapshot(self, rules: KindRules, revision: int) -> dict[str, JsonObject]:
        """The objects of one kind as they were at ``revision`` (undoing newer events)."""
        state = {k: r.obj for k, r in self._bucket(rules).items()}
        for event in reversed(self._log):
            if event.revision <= revision:
                break
            if event.group_kind != rules.group_kind:
                continue
            key = storage_key(event.namespace, event.obj["metadata"]["name"])
            if event.previous is None:
                state.pop(key, None)
            else:
                state[key] = event.previous
        return state

    def list_objects(
        self,
        rules: KindRules,
        *,
        namespace: str | None,
        labels: str | Mapping[str, str] | None,
        fields: str | Mapping[str, str] | None,
        limit: int | None,
        continue_token: str | None,
        resource_version: str | None,
        resource_version_match: str | None,
    ) -> Listing:
        """One page of a list, following the server's resourceVersion semantics."""
        path = path_of(rules.info, namespace)
        label_sel, field_sel = self.selectors(rules, labels, fields, path=path)
        start_after = ""
        if continue_token:
            revision, start_after = self._decode_continue(continue_token, path)
        elif resource_version_match == "Exact":
            revision = self._parse_rv(resource_version, path)
            if revision > self.revision:
                raise self._too_large(revision, path)
        else:
            wanted = self._parse_rv(resource_version, path) if resource_version else 0
            if wanted > self.revision:
                raise self._too_large(wanted, path)
            revision = self.revision
        if revision < self.revision:
            if revision < self.compacted:
                raise api_error(
                    410,
                    "Expired",
                    "The resourceVersion for the provided list is too old."
                    if not continue_token
                    else "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter, or "
                    "use the continue token in this response to retrieve the remainder of the "
                    "results. Continuing with the provided token results in an inconsistent "
                    "list - objects that were created, modified, or deleted between the time "
                    "the first chunk was returned and now may show up in the list.",
                    method="GET",
                    path=path,
                )
            state = self.snapshot(rules, revision)
        else:
            state = {k: r.obj for k, r in self._bucket(rules).items()}
        keys = sorted(
            k
            for k, obj in state.items()
            if (namespace is None or obj["metadata"].get("namespace", "") == namespace)
            and k > start_after
            and label_sel.matches(obj["metadata"].get("labels") or {})
            and field_sel.matches(obj)
        )
        page = keys if not limit else keys[:limit]
        more = len(keys) > len(page)
        token = self._encode_continue(revision, page[-1]) if more else None
        remaining = (
            len(keys) - len(page)
            if more and not label_sel.requirements and not field_sel.requirements
            else None
        )
        items = [self.present(rules, state[k]) for k in page]
        return Listing(items, self.format_rv(revision), token, remaining)

    def _parse_rv(self, value: str | None, path: str) -> int:
        revision = self.revision_of(value) if value else 0
        if revision is None:
            raise api_error(
                400,
                "BadRequest",
                f'invalid resource version: resourceVersion: Invalid value: "{value}": '
                f'strconv.ParseUint: parsing "{value}": invalid syntax',
                method="GET",
                path=path,
            )
        return revision

    def _too_large(self, revision: int, path: str) -> ApiError:
        # The server waits a few seconds for the revision before giving up; the fake cannot
        # reach a future revision by waiting, so it answers at once.
        return api_error(
            504,
            "Timeout",
            f"Timeout: Too large resource version: {revision}, current: {self.revision}",
            method="GET",
            path=path,
            details={
                "causes": [
                    {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                ],
                "retryAfterSeconds": 1,
            },
        )

    @staticmethod
    def _encode_continue(revision: int, key: str) -> str:
        raw = orjson.dumps({"v": "fake", "rv": revision, "start": key})
        return base64.urlsafe_b64encode(raw).decode()

    def _decode_continue(self, token: str, path: str) -> tuple[int, str]:
        try:
            data = orjson.loads(base64.urlsafe_b64decode(token.encode()))
            return int(data["rv"]), str(data["start"])
        except (ValueError, KeyError, TypeError):
            raise api_error(
                400,
                "BadRequest",
                f"continue key is not valid: {token!r}",
                method="GET",
                path=path,
            ) from None

    # -- history and watchers ---------------------------------------------------------------

    def listen(self, listener: Callable[[Change], None]) -> None:
        """Call ``listener`` with every committed event from now on."""
        self._listeners.append(listener)

    def unlisten(self, listener: Callable[[Change], None]) -> None:
        """Stop calling ``listener``."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def events_since(self, rules: KindRules, revision: int) -> list[Change]:
        """Events of one kind newer than ``revision`` (which must not be compacted)."""
        return [e for e in self._log if e.revision > revision and e.group_kind == rules.group_kind]

    def compact(self) -> None:
        """Forget all history, as an etcd compaction at the current revision does."""
        self._log.clear()
        self.compacted = self.revision

    def current(self, rules: KindRules) -> list[JsonObject]:
        """Every stored object of one kind, in key order (not copied)."""
        bucket = self._bucket(rules)
        return [bucket[k].obj for k in sorted(bucket)]

    def _emit(
        self, kind: ChangeType, rules: KindRules, obj: JsonObject, previous: JsonObject | None
    ) -> None:
        if len(self._log) == self._log.maxlen and self._log:
            self.compacted = self._log[0].revision
        event = Change(
            self.revision,
            kind,
            rules.group_kind,
            obj["metadata"].get("namespace", ""),
            obj,
            previous,
        )
        self._log.append(event)
        for listener in list(self._listeners):
            listener(event)

    # -- writes --------------------------------------------------------------------------------

    def _bump(self) -> str:
        self.revision += 1
        return self.format_rv(self.revision)

    def _check_namespace(
        self, rules: KindRules, namespace: str, name: str, *, method: str, path: str
    ) -> None:
        if not rules.info.namespaced:
            return
        ns_rules = self.kinds.get(GroupVersionKind("", "v1", "Namespace"))
        ns_record = self._objects.get(("", "Namespace"), {}).get(namespace) if ns_rules else None
        if ns_record is None:
            if self._require_namespaces:
                raise api_error(
                    404,
                    "NotFound",
                    f'namespaces "{namespace}" not found',
                    method=method,
                    path=path,
                    details={"name": namespace, "kind": "namespaces"},
                )
            return
        if ns_record.obj["metadata"].get("deletionTimestamp"):
            raise api_error(
                403,
                "Forbidden",
                f'{rules.resource} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                method=method,
                path=path,
                details={
                    **resource_details(rules, name),
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {namespace} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    def create(
        self,
        rules: KindRules,
        obj: JsonObject,
        *,
        manager: str,
        dry_run: bool,
        field_validation: FieldValidation | None = None,
    ) -> JsonObject:
        """Create ``obj`` (already checked for scope), or raise the server's error."""
        new = clone(obj)
        meta = _meta(new)
        namespace = str(meta.get("namespace") or "")
        path = path_of(rules.info, namespace)
        check_fields(
            rules,
            new,
            self.schema_of(rules.info.gvk),
            field_validation,
            method="POST",
            path=path,
        )
        if meta.get("resourceVersion"):
            raise api_error(
                500,
                "",
                "resourceVersion should not be set on objects to be created",
                method="POST",
                path=path,
            )
        name = str(meta.get("name") or "")
        if not name and meta.get("generateName"):
            bucket = self._bucket(rules)
            while True:
                suffix = "".join(random.choice(_NAME_ALPHABET) for _ in range(5))
                candidate = f"{meta['generateName']}{suffix}"
                if storage_key(namespace, candidate) not in bucket:
                    break
            name = candidate
            meta["name"] = name
        if not name:
            raise invalid(
                rules,
                "",
                [
                    Cause(
                        reason="FieldValueRequired",
                        field="metadata.name",
                        message="Required value: name or generateName is required",
                    )
                ],
                method="POST",
                path=path,
            )
        check_decodable(rules, new, method="POST", path=path)
        problems = metadata_problems(rules, new, creating=True)
        new["apiVersion"], new["kind"] = rules.info.gvk.api_version, rules.info.gvk.kind
        new, schema_problems = self._schema_problems(new)
        meta = _meta(new)
        problems += schema_problems
        if problems:
            raise invalid(rules, name, problems, method="POST", path=path)
        self._check_namespace(rules, namespace, name, method="POST", path=path)
        existing = self._record(rules, namespace, name)
        if existing is not None:
            deleting = bool(existing.obj["metadata"].get("deletionTimestamp"))
            raise api_error(
                409,
                "AlreadyExists",
                ("object is being deleted: " if deleting else "")
                + f'{rules.resource} "{name}" already exists',
                method="POST",
                path=path,
                details=resource_details(rules, name),
            )
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
            meta.pop(key, None)
        normalize_metadata(meta)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        if rules.generation != "none":
            meta["generation"] = 1
        if rules.status:
            new.pop("status", None)
        new = self._to_storage(rules, new, method="POST", path=path)
        meta = _meta(new)
        self._initialize(rules, new)
        if dry_run:
            return self.present(rules, new)
        meta["resourceVersion"] = self._bump()
        record = Record(new)
        record.ownership.record_update(manager, None, new)
        self._bucket(rules)[storage_key(namespace, name)] = record
        self._gc.index(rules, new)
        self._emit("ADDED", rules, new, None)
        self._after_write(rules, new)
        answer = self.present(rules, new)
        self._gc.collect()  # an owner that is already gone makes it garbage at once
        return answer

    def seed(self, rules: KindRules, obj: JsonObject) -> None:
        """Store ``obj`` as given (status and deletion state included), for test setup.

        Raises:
            ValueError: the object has no name, or a deletionTimestamp without
                finalizers (a state the server never stores).
            AlreadyExists: an object of that name exists.

        """
        new = clone(obj)
        meta = _meta(new)
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or "")
        if not name:
            raise ValueError(f"cannot add {rules.info.gvk.kind} without metadata.name")
        if rules.info.namespaced and not namespace:
            raise ValueError(
                f"{rules.info.gvk.kind} {name!r} is namespaced: set metadata.namespace"
            )
        if not rules.info.namespaced and namespace:
            raise ValueError(
                f"{rules.info.gvk.kind} {name!r} is cluster-scoped: remove metadata.namespace"
            )
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not (rules.group_kind == ("", "Namespace"))
        ):
            raise ValueError(
                f"{rules.info.gvk.kind} {name!r} has a deletionTimestamp but no finalizers; "
                "the server would already have deleted it"
            )
        path = path_of(rules.info, namespace)
        if self._record(rules, namespace, name) is not None:
            raise api_error(
                409,
                "AlreadyExists",
                f'{rules.resource} "{name}" already exists',
                method="POST",
                path=path,
                details=resource_details(rules, name),
            )
        check_decodable(rules, new, method="POST", path=path)
        problems = metadata_problems(rules, new, creating=True)
        if problems:
            raise invalid(rules, name, problems, method="POST", path=path)
        meta.pop("managedFields", None)
        normalize_metadata(meta)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        if rules.generation != "none":
            meta.setdefault("generation", 1)
        if meta.get("deletionTimestamp"):
            meta.setdefault("deletionGracePeriodSeconds", 0)
        new = self._to_storage(rules, new, method="POST", path=path)
        meta = _meta(new)
        if (
            rules.group_kind
            in (
                ("", "Namespace"),
                ("apiextensions.k8s.io", "CustomResourceDefinition"),
            )
            and "status" not in new
        ):
            self._initialize(rules, new)
        meta["resourceVersion"] = self._bump()
        self._bucket(rules)[storage_key(namespace, name)] = Record(new)
        self._gc.index(rules, new)
        self._emit("ADDED", rules, new, None)
        self._after_write(rules, new)

    def _initialize(self, rules: KindRules, obj: JsonObject) -> None:
        """What built-in strategies add on create, for the kinds whose additions operators see."""
        gk = rules.group_kind
        meta = _meta(obj)
        if gk == ("", "Namespace"):
            labels = meta.setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = meta["name"]
            spec = obj.setdefault("spec", {})
            spec.setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        elif gk == ("apiextensions.k8s.io", "CustomResourceDefinition"):
            # The fake establishes a CRD at once; a real server takes a moment (wait on the
            # Established condition there).
            names = (obj.get("spec") or {}).get("names") or {}
            conditions = [
                {
                    "type": t,
                    "status": "True",
                    "reason": r,
                    "message": m,
                    "lastTransitionTime": _now(),
                }
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ]
            versions = [
                v.get("name")
                for v in (obj.get("spec") or {}).get("versions") or []
                if v.get("storage")
            ]
            obj["status"] = {
                "conditions": conditions,
                "acceptedNames": dict(names),
                "storedVersions": versions,
            }

    def _after_write(self, rules: KindRules, obj: JsonObject) -> None:
        if rules.group_kind == ("apiextensions.k8s.io", "CustomResourceDefinition"):
            for info in crd_resources(obj):
                self.register(info)
            spec = obj.get("spec") or {}
            for version in spec.get("versions") or []:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if isinstance(schema, Mapping):
                    gvk = GroupVersionKind(
                        spec.get("group") or "",
                        version.get("name") or "",
                        (spec.get("names") or {}).get("kind") or "",
                    )
                    self.register_schema(gvk, schema, from_crd=True)

    def update(
        self,
        rules: KindRules,
        obj: JsonObject,
        *,
        manager: str,
        dry_run: bool,
        subresource: str | None,
        method: str = "PUT",
        field_validation: FieldValidation | None = None,
    ) -> JsonObject:
        """Replace an object (or its status), optimistically on ``resourceVersion``."""
        incoming = clone(obj)
        meta = _meta(incoming)
        namespace = str(meta.get("namespace") or "")
        name = str(meta.get("name") or "")
        path = path_of(rules.info, namespace, name, subresource or "")
        check_fields(
            rules,
            incoming,
            self.schema_of(rules.info.gvk),
            field_validation,
            method=method,
            path=path,
        )
        if rules.group_kind in self._conversions:
            incoming = self._to_storage(rules, incoming, method=method, path=path)
            meta = _meta(incoming)
        if subresource not in (None, "status") or (subresource == "status" and not rules.status):
            raise not_found(rules, name, method=method, path=path)
        record = self._record(rules, namespace, name)
        if record is None:
            raise not_found(rules, name, method=method, path=path)
        old = record.obj
        rv = str(meta.get("resourceVersion") or "")
        if not rv and rules.custom:
            raise invalid(
                rules,
                name,
                [
                    Cause(
                        reason="FieldValueInvalid",
                        field="metadata.resourceVersion",
                        message="Invalid value: 0: must be specified for an update",
                    )
                ],
                method=method,
                path=path,
            )
        if rv and self.revision_of(rv) is None:
            raise api_error(
                500,
                "",
                f'strconv.ParseUint: parsing "{rv}": invalid syntax',
                method=method,
                path=path,
            )
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise stale(rules, name, method=method, path=path)
        uid = meta.get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise api_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rules.resource} "{name}": Precondition '
                f"failed: UID in precondition: {uid}, UID in object meta: "
                f"{old['metadata']['uid']}",
                method=method,
                path=path,
                details=resource_details(rules, name),
            )
        if subresource == "status":
            new = clone(old)
            if "status" in incoming:
                new["status"] = incoming["status"]
            else:
                new.pop("status", None)
        else:
            new = incoming
            if rules.status:
                if "status" in old:
                    new["status"] = clone(old["status"])
                else:
                    new.pop("status", None)
        return self._write(rules, record, new, manager=manager, dry_run=dry_run, method=method)

    def _write(
        self,
        rules: KindRules,
        record: Record,
        new: JsonObject,
        *,
        manager: str,
        dry_run: bool,
        method: str,
        ownership: Ownership | None = None,
    ) -> JsonObject:
        """Validate and commit ``new`` over ``record``; shared by update, patch and apply."""
        old = record.obj
        meta = _meta(new)
        old_meta = old["metadata"]
        name = old_meta["name"]
        namespace = old_meta.get("namespace", "")
        path = path_of(rules.info, namespace, name)
        new["apiVersion"] = old["apiVersion"]
        new["kind"] = old["kind"]
        meta["name"] = name
        if namespace:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        meta.pop("managedFields", None)
        meta.pop("selfLink", None)
        for key in _SYSTEM_METADATA:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if "generation" in old_meta:
            meta["generation"] = old_meta["generation"]
        else:
            meta.pop("generation", None)
        check_decodable(rules, new, method=method, path=path)
        problems: list[Cause] = metadata_problems(rules, new, creating=False)
        problems += finalizers_added_while_deleting(old_meta, meta)
        new, schema_problems = self._schema_problems(new)
        meta = _meta(new)
        problems += schema_problems
        if problems:
            raise invalid(rules, name, problems, method=method, path=path)
        if rules.generation != "none" and not json_equal(
            generation_relevant(rules, old), generation_relevant(rules, new)
        ):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        normalize_metadata(meta)
        if json_equal(new, old):
            # The server skips writes that change nothing: same resourceVersion, no event.
            # (An apply that only changes who owns a field is such a write here; the server
            # records it in managedFields and so makes a new version.)
            if ownership is not None and not dry_run:
                record.ownership = ownership
            return self.present(rules, old)
        if dry_run:
            return self.present(rules, new)
        ownership = ownership or record.ownership
        if (
            old_meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not (
                rules.group_kind == ("", "Namespace") and (new.get("spec") or {}).get("finalizers")
            )
        ):
            # The last finalizer is gone: the server deletes instead of updating. The caller
            # gets the object it wrote (old resourceVersion); watchers get DELETED with the
            # last stored state at a new revision.
            self.remove(rules, record)
            return self.present(rules, new)
        meta["resourceVersion"] = self._bump()
        if ownership is record.ownership:
            record.ownership.record_update(manager, old, new)
        else:
            record.ownership = ownership
        self._gc.unindex(rules, old)
        record.obj = new
        self._gc.index(rules, new)
        self._emit("MODIFIED", rules, new, old)
        self._after_write(rules, new)
        if meta.get("deletionTimestamp"):
            self._gc.enqueue(rules, new)
            self._gc.collect()
        return self.present(rules, new)

    def patch(
        self,
        rules: KindRules,
        namespace: str,
        name: str,
        patch: Patch,
        *,
        manager: str,
        dry_run: bool,
        subresource: str | None,
        field_validation: FieldValidation | None = None,
    ) -> JsonObject:
        """Patch an object with any of the four patch kinds (apply may create it)."""
        path = path_of(rules.info, namespace, name, subresource or "")
        if subresource not in (None, "status") or (subresource == "status" and not rules.status):
            raise not_found(rules, name, method="PATCH", path=path)
        if isinstance(patch, StrategicMergePatch) and rules.custom:
            raise api_error(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml",
                method="PATCH",
                path=path,
            )
        record = self._record(rules, namespace, name)
        if isinstance(patch, ApplyPatch):
            return self._apply(
                rules,
                record=record,
                namespace=namespace,
                name=name,
                patch=patch,
                manager=manager,
                dry_run=dry_run,
                subresource=subresource,
                path=path,
            )
        if record is None:
            raise not_found(rules, name, method="PATCH", path=path)
        # A patch applies to the object at the patch's version (converted when the kind
        # converts); update() converts the result back to the storage version.
        old = (
            self.present(rules, record.obj) if rules.group_kind in self._conversions else record.obj
        )
        try:
            if isinstance(patch, JsonPatch):
                patched = json_patch(old, patch.operations)
            elif isinstance(patch, MergePatch):
                if not isinstance(patch.patch, Mapping):
                    raise PatchError("a merge patch must be a JSON object")
                patched = merge_patch(old, patch.patch)
            else:
                patched = strategic_merge_patch(old, patch.patch)
        except PatchError as exc:
            if isinstance(patch, JsonPatch):
                raise api_error(
                    422,
                    "Invalid",
                    f"the server rejected our request due to an error in our request: {exc}",
                    method="PATCH",
                    path=path,
                    details={},
                ) from None
            raise api_error(400, "BadRequest", str(exc), method="PATCH", path=path) from None
        if not isinstance(patched, dict):
            raise api_error(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request: the patched "
                "document is not an object",
                method="PATCH",
                path=path,
            )
        self._check_identity(rules, old, patched, path)
        check_fields(
            rules,
            patched,
            self.schema_of(rules.info.gvk),
            field_validation,
            method="PATCH",
            path=path,
            patched=True,
        )
        return self.update(
            rules,
            patched,
            manager=manager,
            dry_run=dry_run,
            subresource=subresource,
            method="PATCH",
            field_validation="Ignore",  # checked above, on the patched object
        )

    def _check_identity(
        self, rules: KindRules, old: JsonObject, patched: JsonObject, path: str
    ) -> None:
        meta = _meta(patched)
        old_meta = old["metadata"]
        for key, what in (("name", "name"), ("namespace", "namespace")):
            have = meta.get(key) or ""
            want = old_meta.get(key) or ""
            if have != want:
                raise api_error(
                    400,
                    "BadRequest",
                    f"the {what} of the object ({have}) does not match the {what} on the URL "
                    f"({want})",
                    method="PATCH",
                    path=path,
                )
        if meta.get("uid") != old_meta.get("uid"):
            raise invalid(
                rules,
                old_meta["name"],
                [
                    Cause(
                        reason="FieldValueInvalid",
                        field="metadata.uid",
                        message=f'Invalid value: "{meta.get("uid")}": field is immutable',
                    )
                ],
                method="PATCH",
                path=path,
            )
        if not meta.get("resourceVersion"):
            # A patch that removes resourceVersion is not a precondition: keep the live one.
            meta["resourceVersion"] = old_meta["resourceVersion"]

    def _apply(
        self,
        rules: KindRules,
        *,
        record: Record | None,
        namespace: str,
        name: str,
        patch: ApplyPatch,
        manager: str,
        dry_run: bool,
        subresource: str | None,
        path: str,
    ) -> JsonObject:
        config = clone(dict(patch.obj))
        meta = _meta(config)
        if not config.get("apiVersion") or not config.get("kind"):
            raise api_error(
                400,
                "BadRequest",
                "apiVersion and kind must be set in an apply configuration",
                method="PATCH",
                path=path,
            )
        if (meta.get("name") or "") != name:
            raise api_error(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name') or ''}) does not match the name on "
                f"the URL ({name})",
                method="PATCH",
                path=path,
            )
        check_apply(rules, config, self.schema_of(rules.info.gvk), path=path)
        part: Literal["main", "status", "all"] = (
            "status" if subresource == "status" else ("main" if rules.status else "all")
        )
        if record is None:
            if subresource == "status":
                raise not_found(rules, name, method="PATCH", path=path)
            fresh = clone(config)
            fresh_meta = _meta(fresh)
            fresh_meta.pop("resourceVersion", None)
            if namespace:
                fresh_meta["namespace"] = namespace
            result = self.create(rules, fresh, manager=manager, dry_run=dry_run)
            stored = self._record(rules, namespace, name)
            if stored is not None and not dry_run:
                stored.ownership = Ownership()
                apply_configuration(
                    {}, config, stored.ownership, manager=manager, force=True, part=part
                )
            return result
        rv = str(meta.get("resourceVersion") or "")
        if rv and rv != record.obj["metadata"]["resourceVersion"]:
            raise stale(rules, name, method="PATCH", path=path)
        ownership = record.ownership.copy()
        converting = rules.group_kind in self._conversions
        # With a conversion, apply works on the object at the configuration's version and the
        # result goes back to the storage version (field ownership is then tracked in the
        # applied version's field names: the fake's simplification).
        current = self.present(rules, record.obj) if converting else record.obj
        result, conflicts = apply_configuration(
            current, config, ownership, manager=manager, force=patch.force, part=part
        )
        if converting:
            result = self._to_storage(rules, result, method="PATCH", path=path)
        if conflicts:
            fields = sorted({c.field for c in conflicts})
            managers = sorted({c.manager for c in conflicts})
            if len(conflicts) == 1:
                text = f'Apply failed with 1 conflict: conflict with "{managers[0]}": {fields[0]}'
            else:
                listed = "\n".join(f'- conflict with "{c.manager}": {c.field}' for c in conflicts)
                text = f"Apply failed with {len(conflicts)} conflicts: \n{listed}"
            raise api_error(
                409,
                "Conflict",
                text,
                method="PATCH",
                path=path,
                details={
                    "causes": [
                        {
                            "reason": "FieldManagerConflict",
                            "message": f'conflict with "{c.manager}"',
                            "field": c.field,
                        }
                        for c in conflicts
                    ]
                },
            )
        return self._write(
            rules,
            record,
            result,
            manager=manager,
            dry_run=dry_run,
            method="PATCH",
            ownership=ownership,
        )

    # -- deletion ------------------------------------------------------------------------------

    def delete(
        self,
        rules: KindRules,
        namespace: str,
        name: str,
        *,
        propagation_policy: str | None,
        uid: str | None,
        resource_version: str | None,
        dry_run: bool,
    ) -> JsonObject:
        """Delete one object: mark it while finalizers remain, else remove it."""
        path = path_of(rules.info, namespace, name)
        record = self._record(rules, namespace, name)
        if record is None:
            raise not_found(rules, name, method="DELETE", path=path)
        meta = record.obj["metadata"]
        where = f'Operation cannot be fulfilled on {rules.qualified_kind} "{name}": '
        if uid and uid != meta["uid"]:
            raise api_error(
                409,
                "Conflict",
                where + f"the UID in the precondition ({uid}) does not match the UID in record "
                f"({meta['uid']}). The object might have been deleted and then recreated",
                method="DELETE",
                path=path,
                details=kind_details(rules, name),
            )
        if resource_version and resource_version != meta["resourceVersion"]:
            raise api_error(
                409,
                "Conflict",
                where + f"the ResourceVersion in the precondition ({resource_version}) does not "
                f"match the ResourceVersion in record ({meta['resourceVersion']}). The object "
                "might have been modified",
                method="DELETE",
                path=path,
                details=kind_details(rules, name),
            )
        if meta.get("deletionTimestamp"):
            return self.present(rules, record.obj)
        finalizers = list(meta.get("finalizers") or [])
        extra = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}.get(
            propagation_policy or ""
        )
        if extra and extra not in finalizers:
            finalizers.append(extra)
        is_namespace = rules.group_kind == ("", "Namespace")
        if finalizers or is_namespace:
            new = clone(record.obj)
            new_meta = new["metadata"]
            new_meta["deletionTimestamp"] = _now()
            new_meta["deletionGracePeriodSeconds"] = 0
            if finalizers:
                new_meta["finalizers"] = finalizers
            if int(new_meta.get("generation") or 0) > 0:
                new_meta["generation"] += 1
            if is_namespace:
                new["status"] = {**(new.get("status") or {}), "phase": "Terminating"}
            if dry_run:
                return self.present(rules, new)
            old = record.obj
            new_meta["resourceVersion"] = self._bump()
            self._gc.unindex(rules, old)
            record.obj = new
            self._gc.index(rules, new)
            self._emit("MODIFIED", rules, new, old)
            self._gc.enqueue(rules, new)
            self._gc.collect()
            # The answer is the object as marked; what collection did since is not in it,
            # just as the server answers before its garbage collector acts.
            return self.present(rules, new)
        status: JsonObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {**resource_details(rules, name), "uid": meta["uid"]},
        }
        if not dry_run:
            self.remove(rules, record)
        return status

    def remove(self, rules: KindRules, record: Record) -> None:
        """Take ``record`` out of storage now (DELETED to watchers), then let the GC act."""
        meta = record.obj["metadata"]
        key = storage_key(meta.get("namespace", ""), meta["name"])
        self._bucket(rules).pop(key, None)
        self._gc.unindex(rules, record.obj)
        last = clone(record.obj)
        last["metadata"]["resourceVersion"] = self._bump()
        self._emit("DELETED", rules, last, record.obj)
        self._gc.removed(record.obj)

    def delete_collection(
        self,
        rules: KindRules,
        *,
        namespace: str | None,
        labels: str | Mapping[str, str] | None,
        fields: str | Mapping[str, str] | None,
        propagation_policy: str | None,
        dry_run: bool,
    ) -> None:
        """Delete every matching object (each as :meth:`delete` would)."""
        listing = self.list_objects(
            rules,
            namespace=namespace,
            labels=labels,
            fields=fields,
            limit=None,
            continue_token=None,
            resource_version=None,
            resource_version_match=None,
        )
        for obj in listing.items:
            meta = obj["metadata"]
            if self._record(rules, meta.get("namespace", ""), meta["name"]) is None:
                continue  # already collected as a dependent of an earlier one
            self.delete(
                rules,
                meta.get("namespace", ""),
                meta["name"],
                propagation_policy=propagation_policy,
                uid=None,
                resource_version=None,
                dry_run=dry_run,
            )


def random_token(length: int = 32) -> str:
    """A random opaque token (for fake ServiceAccount tokens)."""
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(length))
