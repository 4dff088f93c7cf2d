"""Spec and metadata writes: create_or_update, create_or_patch, and declarative children."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

import orjson

from setpoint.api.gvk import split_api_version
from setpoint.api.jsonvalues import deep_copy, json_equal
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject, annotations_of, key_of, resource_version_of
from setpoint.api.owners import (
    AlreadyOwned,
    NotAdopted,
    controller_of,
    set_controller_reference,
)
from setpoint.api.types import TypedObject, is_typed
from setpoint.client._fieldpath import (
    IDENTITY_METADATA,
    apply_is_noop,
    json_patch_diff,
    managed_fields_of,
    strip_for_compare,
)
from setpoint.client._safebase import (
    DEFAULT_RETRY,
    MutateFn,
    OperationResult,
    RetryOptions,
    SafeClient,
    WriteResult,
    as_json,
    backoff,
    call_mutate,
    describe_target,
    gvk_for,
    is_lost_race,
    kind_of,
    resolve,
)
from setpoint.client._status import MutationScopeError, require_status_subresource
from setpoint.client.errors import AlreadyExists, ApiError, Invalid, NotFound
from setpoint.client.patch import JsonPatch
from setpoint.client.protocols import CachedClient

Desired = TypeVar("Desired", bound="Mapping[str, Any] | TypedObject")
"""What ``apply_child`` takes and gives back: a JSON mapping or a typed object, the same."""

__all__ = [
    "APPLIED_ANNOTATION_PREFIX",
    "Adoption",
    "apply_child",
    "apply_status",
    "create_or_patch",
    "create_or_update",
]


async def create_or_update(
    client: SafeClient,
    obj: Any,
    mutate: MutateFn,
    *,
    field_manager: str | None = None,
    retry: RetryOptions = DEFAULT_RETRY,
) -> WriteResult[Any]:
    """Make the object exist and match ``mutate``, all-or-nothing against the version read.

    ``obj`` names the object (kind, namespace, name; dict or typed). The
    object is read; ``mutate`` runs on a copy of what the server has (or, if
    it does not exist, on a copy of ``obj``, which is then created).

    Expected Flow:
        1. Read the object: from the client's cache when it has one holding the
           object (``ctx.client`` in a controller: no request), else GET it. Not
           found: run ``mutate`` on a copy of ``obj``, create it, return ``CREATED``.
        2. Run ``mutate`` on a copy. Nothing changed: return ``UNCHANGED``
           without a request.
        3. Update (PUT) the mutated object, carrying the ``resourceVersion``
           that was read, as controller-runtime's ``CreateOrUpdate`` does.
        4. Conflict (someone wrote first), or the create raced with another:
           wait, re-read, go back to 2.

    Guarantees:
        - The write applies only to the exact version the mutation saw, so
          metadata written by others (finalizers, owner references, labels)
          is never overwritten from a stale copy: a stale copy is a Conflict.
        - No request when nothing changed; spec writes never touch status.

    Caveats:
        - Any concurrent write to the object, even an unrelated status update,
          costs a retry. :func:`create_or_patch` only conflicts on the fields
          it changes.
        - A cached read may be a little behind the server: the write then loses
          its guard (a Conflict, or a failed ``test``) and is retried on a fresh GET;
          a cached copy that already matches returns ``UNCHANGED``, and the event of
          the newer version reconciles again.

    Errors:
        Conflict / Invalid: still losing the race after ``retry.attempts``.
        MutationScopeError: ``mutate`` changed the name, namespace or (for a
            kind with a status subresource) the status.

    """
    return await _create_or_write(client, obj, mutate, field_manager, retry, guard_values=False)


async def create_or_patch(
    client: SafeClient,
    obj: Any,
    mutate: MutateFn,
    *,
    field_manager: str | None = None,
    retry: RetryOptions = DEFAULT_RETRY,
) -> WriteResult[Any]:
    """Make the object exist and match ``mutate``, conflicting only on the fields it changes.

    Like :func:`create_or_update`, but instead of an Update guarded by the
    whole object's resourceVersion it sends a JSON patch of exactly the
    changed fields, each guarded by a ``test`` of the value the mutation saw.
    Concurrent writes to *other* fields (another controller's label, a status
    update) do not cause a retry; a concurrent write to the same field, or to
    a list being changed (finalizers, owner references: lists are compared
    whole), does.

    The first read comes from the client's cache when it has the object, as for
    :func:`create_or_update`: a reconcile that keeps 500 copies in line reads them from
    memory and writes only the ones that differ.

    Guarantees:
        - A list such as ``metadata.finalizers`` or ``metadata.ownerReferences``
          is replaced only if it is still exactly the list the mutation saw,
          so another writer's entry is never dropped.
        - A key being added is tested to be still absent, so a map another
          writer just created is never replaced.
        - No request when nothing changed; spec writes never touch status.

    Errors:
        Invalid: still losing the race after ``retry.attempts``, or a real
            validation failure (its ``causes`` name the fields).
        MutationScopeError: as for :func:`create_or_update`.

    """
    return await _create_or_write(client, obj, mutate, field_manager, retry, guard_values=True)


async def _create_or_write(
    client: SafeClient,
    obj: Any,
    mutate: MutateFn,
    field_manager: str | None,
    retry: RetryOptions,
    *,
    guard_values: bool,
) -> WriteResult[Any]:
    kind, key, _ = resolve(obj)
    what = f"write of {describe_target(kind, key)}"
    info = await client.resource_info(kind)
    drop = frozenset({"status"}) if "status" in info.subresources else frozenset()
    delays = retry.delays()
    # The first read comes from the client's cache when it has the object (no request);
    # the write is guarded either way, and a retry after a lost race reads the server.
    cached = _cached_copy(client, kind, key, is_typed(obj))
    while True:
        try:
            current = cached
            cached = None
            if current is None:
                current = await client.get(kind, key.name, namespace=key.namespace or None)
        except NotFound:
            created = await call_mutate(mutate, deep_copy(obj))
            _check_identity(what, key, as_json(created))
            try:
                return WriteResult(
                    OperationResult.CREATED,
                    await client.create(created, field_manager=field_manager),
                )
            except AlreadyExists as error:
                await backoff(delays, error, what, retry.attempts)
                continue
        before = as_json(deep_copy(current))
        working = await call_mutate(mutate, deep_copy(current))
        after = as_json(working)
        _check_identity(what, key, after)
        if drop and not json_equal(before.get("status"), after.get("status")):
            raise MutationScopeError(
                f"{what}: the mutation changed status, which this write never sends "
                f"({key} has a status subresource). Write status with update_status"
            )
        ops = json_patch_diff(
            strip_for_compare(before, drop=drop),
            strip_for_compare(after, drop=drop),
            guard_values=guard_values,
        )
        if not ops:
            return WriteResult(OperationResult.UNCHANGED, current)
        try:
            if guard_values:
                written = await client.patch(
                    kind,
                    key.name,
                    JsonPatch(ops),
                    namespace=key.namespace or None,
                    field_manager=field_manager,
                )
            else:
                # The copy carries the resourceVersion it was read at: a stale one is 409.
                written = await client.update(working, field_manager=field_manager)
        except ApiError as error:
            if not is_lost_race(error):
                raise
            await backoff(delays, error, what, retry.attempts)
            continue
        return WriteResult(OperationResult.UPDATED, written)


def _cached_copy(client: SafeClient, kind: Any, key: ObjectKey, typed: bool) -> Any:
    """A copy of the object from the client's cache, or ``None`` (no cache, not cached)."""
    cached_client = _cached_client(client)
    if cached_client is None:
        return None
    stored = cached_client.cache.peek(gvk_for(kind), key)
    if not isinstance(stored, dict):
        return None
    return _decode(kind, stored, typed)  # peek decodes a new object for each call


def _check_identity(what: str, key: Any, after: JsonObject) -> None:
    if key_of(after) != key:
        raise MutationScopeError(
            f"{what}: the mutation changed the object's namespace/name to {key_of(after)}; "
            "mutations must not change which object is written"
        )


# --------------------------------------------------------------------------- server-side apply


def _applied_fields(desired: JsonObject) -> JsonObject:
    """``desired`` as the set of fields an apply would own: no identity or server metadata."""
    out = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind") and v is not None}
    metadata = strip_for_compare(out).get("metadata")
    if isinstance(metadata, dict):
        metadata = {k: v for k, v in metadata.items() if k not in IDENTITY_METADATA}
        if metadata:
            out["metadata"] = metadata
        else:
            out.pop("metadata", None)
    return out


class Adoption(Enum):
    """What :func:`apply_child` does with a live child that has no controller reference."""

    NEVER = "never"
    """Refuse it with :class:`~setpoint.api.owners.NotAdopted` (the default): an object
    someone else created under the child's name is not taken over, given this controller's
    fields and owner reference, and deleted with the owner."""

    ORPHANS = "orphans"
    """Adopt it: apply to it and make the owner its controller (controller-runtime's
    behaviour, and the only way to take over children orphaned by an earlier version of the
    operator). A child controlled by another owner is still refused
    (:class:`~setpoint.api.owners.AlreadyOwned`)."""


async def apply_child(
    client: SafeClient,
    desired: Desired,
    *,
    field_manager: str,
    owner: Any = None,
    force: bool = True,
    applied_annotation: bool = True,
    adopt: Adoption = Adoption.NEVER,
) -> WriteResult[Desired]:
    """Apply a declared child object with server-side apply, writing only when needed.

    ``desired`` holds exactly the fields this controller wants to own (dict or
    typed: a typed object, such as ``kinds.apps_v1.Deployment(...)``, sends only the
    fields that were set, and the result's object is of its class). With ``owner``,
    the child gets a controller reference to it (and is garbage collected with it).

    Expected Flow:
        1. Set the controller reference (scope checked with the server's
           discovery data: cross-namespace and namespaced-owns-cluster-scoped
           are refused).
        2. With ``applied_annotation`` (the default), add the annotation
           ``setpoint.dev/applied-<hash of field_manager>: <hash of desired>``
           to what is applied. If ``client`` is a
           :class:`~setpoint.client.protocols.CachedClient` (``ctx.client`` in a
           controller is) and its cache holds the child with that very
           annotation and every desired value, return ``UNCHANGED`` at once:
           no request at all. If the cache does not reflect this process's own last
           write of the child yet (its event is still on its way), wait for it, at most
           1 s, and look again.
        3. If the cache knows the child does not exist (its informer of the kind has
           synced, and holds neither the child nor a write of it by this process still
           on its way), apply at once, with no GET: the server answers ``201 Created``
           (``CREATED``) or, if the child appeared meanwhile, ``200 OK`` (``UPDATED``).
           Otherwise GET the child. Not found: apply (which creates it): ``CREATED``.
           Found with another controller: :class:`~setpoint.api.owners.AlreadyOwned`.
           Found without a controller: adopt it only with ``adopt=Adoption.ORPHANS``,
           else :class:`~setpoint.api.owners.NotAdopted`.
        4. Find the fields ``field_manager`` owns by applying (its
           ``managedFields`` entry, operation ``Apply``). If they are exactly
           the fields in ``desired`` and the object holds the desired value in
           each, return ``UNCHANGED`` without a request.
        5. Otherwise apply ``desired``: ``UPDATED`` (``UNCHANGED`` if the
           server's resourceVersion did not move).

    The annotation:
        The cache strips ``managedFields`` (they are most of an object's size),
        so step 2 cannot see which fields the manager owns; the annotation
        stands in for them: the same hash means the same applied field set.
        It is part of every child applied this way, so tools that diff live
        objects against manifests (Argo CD, Flux, ``kubectl diff``) show it;
        tell them to ignore ``metadata.annotations["setpoint.dev/applied-*"]``,
        or pass ``applied_annotation=False``. Without it, nothing is stamped,
        step 2 is skipped, and every call costs one GET.

    Guarantees:
        - With an ``owner``, an object this controller did not create is never taken
          over unless ``adopt`` says so. If the apply meant to create the child lands on
          an object another writer created meanwhile (a ``200 OK`` in step 3, or another
          field manager in the answer after step 3's GET), the fields just applied (the
          owner reference with them) are released again and
          :class:`~setpoint.api.owners.NotAdopted` is raised.
        - Server defaults and fields other managers own (a label someone else
          added) are never compared, so they never trigger a write, and the
          apply leaves them alone: no endless update.
        - Drift in an owned field is restored: a change by another writer
          either moves ownership away (so the sets differ) or leaves a
          different value (so the values differ); both lead to an apply.
        - Fields dropped from ``desired`` are given up (and removed if no one
          else owns them), as server-side apply defines.

    Assumptions:
        - ``desired`` spells values the way the server stores them (``"500m"``,
          not ``"0.5"`` for a quantity); a value the server normalizes compares
          unequal and is re-applied every time (harmless, but a request).

    Caveats:
        - ``force=True`` (the default, as controller-runtime advises for
          controllers) takes fields over from other managers instead of
          failing with Conflict.
        - In step 3's race (another writer created the child after the cache's
          last event), the answer is ``UPDATED`` even if the apply changed
          nothing: only a read before the apply could tell, and that read is
          what step 3 saves. If that child is controlled by another owner, the
          server refuses the second controller reference and the error is
          ``AlreadyOwned``, as on the GET path.
        - In the create race above, values the other writer had set in fields this
          controller applied are lost when the fields are released. Create children
          whose names others may take (Namespaces) with ``client.create`` first, which
          fails with AlreadyExists instead.
        - Without an ``owner`` there is no controller to compare: the apply goes to
          whatever object has the name.

    Errors:
        AlreadyOwned: the live child is controlled by another owner.
        NotAdopted: the live child has no controller and ``adopt`` is
            ``Adoption.NEVER`` (or another writer created it concurrently).
        InvalidOwner: the owner/child scopes are ones Kubernetes forbids.
        Conflict: another manager owns a desired field and ``force`` is False.

    """
    return await _apply(
        client,
        desired,
        field_manager,
        owner,
        force,
        subresource="",
        marker=applied_annotation,
        adopt=adopt,
    )


async def apply_status(
    client: SafeClient,
    desired: Any,
    *,
    field_manager: str,
    force: bool = True,
) -> WriteResult[Any]:
    """Server-side apply ``desired``'s status through the ``status`` subresource, when needed.

    ``desired`` holds apiVersion, kind, metadata name/namespace and the
    ``status`` fields this manager owns. The no-op check is that of
    :func:`apply_child`, over the manager's ``status`` field set. Returns
    ``UPDATED`` or ``UNCHANGED`` (the object must exist).

    Errors:
        NotFound: the object does not exist.
        MutationScopeError: ``desired`` carries fields besides ``status``.
        ValueError: the kind has no status subresource.

    """
    data = as_json(desired)
    extra = sorted(set(_applied_fields(data)) - {"status"})
    kind, key, _ = resolve(desired)
    what = f"status apply of {describe_target(kind, key)}"
    if extra:
        raise MutationScopeError(
            f"{what}: desired carries {', '.join(extra)}; a status apply sends only status. "
            "Apply the rest with apply_child"
        )
    await require_status_subresource(client, kind, what)
    return await _apply(
        client, desired, field_manager, None, force, subresource="status", marker=False
    )


async def _apply(
    client: SafeClient,
    desired: Any,
    field_manager: str,
    owner: Any,
    force: bool,
    *,
    subresource: str,
    marker: bool,
    adopt: Adoption = Adoption.NEVER,
) -> WriteResult[Any]:
    if not field_manager:
        raise ValueError("server-side apply needs a field_manager naming the controller")
    kind, key, _ = resolve(desired)
    data = dict(as_json(deep_copy(desired)))
    if owner is not None:
        owner_info = await client.resource_info(kind_of(owner))
        child_info = await client.resource_info(kind)
        set_controller_reference(data, owner, owner_info=owner_info, dependent_info=child_info)
    typed = is_typed(desired)
    cached_client = _cached_client(client)
    if marker:
        # Remember what this manager applied, so the next reconcile can tell from the
        # cache alone that nothing changed (see _unchanged_in_cache).
        marker_key, fingerprint = applied_marker(field_manager, data)
        data.setdefault("metadata", {}).setdefault("annotations", {})[marker_key] = fingerprint
        if cached_client is not None:
            stamp = (marker_key, fingerprint)
            cached = _unchanged_in_cache(cached_client, kind, key, stamp, data)
            if cached is None and await cached_client.cache.wait_for_own_write(
                gvk_for(kind), key, _OWN_WRITE_WAIT
            ):
                # Our own last write of the child was still on its way (the owner's event
                # overtook the child's): what the cache holds now answers without a GET.
                cached = _unchanged_in_cache(cached_client, kind, key, stamp, data)
            if cached is not None:
                return WriteResult(OperationResult.UNCHANGED, _decode(kind, cached, typed))
    if (
        cached_client is not None
        and not subresource
        and cached_client.cache.known_absent(gvk_for(kind), data)
    ):
        # The cache knows the child does not exist: apply at once, and let the server's
        # answer (201 Created or 200 OK) say whether this apply created it.
        try:
            applied = await cached_client.apply_outcome(
                data, field_manager=field_manager, force=force
            )
        except Invalid as error:
            if owner is not None:
                await _raise_if_controlled_elsewhere(client, kind, key, data, error)
            raise
        if not applied.created and owner is not None and adopt is Adoption.NEVER:
            # 200 OK: the child existed after all. Unless it carried only this manager's
            # fields (an earlier write of ours), someone else's object was just taken over.
            await _check_created_by_us(client, kind, key, as_json(applied.object), field_manager)
        outcome = OperationResult.CREATED if applied.created else OperationResult.UPDATED
        return WriteResult(outcome, _decode(kind, applied.object, typed))
    try:
        current = await client.get(kind, key.name, namespace=key.namespace or None)
    except NotFound:
        if subresource:
            raise
        created = await client.apply(data, field_manager=field_manager, force=force)
        if owner is not None and adopt is Adoption.NEVER:
            await _check_created_by_us(client, kind, key, as_json(created), field_manager)
        return WriteResult(OperationResult.CREATED, _decode(kind, created, typed))
    live = as_json(current)
    if owner is not None:
        _check_controller(kind, key, live, data)
        if controller_of(live) is None and adopt is Adoption.NEVER:
            raise NotAdopted(
                f"{describe_target(kind, key)} exists and has no controller; apply_child does "
                "not take over objects it did not create (it would be deleted with its new "
                "owner). Delete or rename it, or pass adopt=Adoption.ORPHANS to adopt it"
            )
    owned = managed_fields_of(live, field_manager, subresource=subresource)
    if owned is not None and apply_is_noop(strip_for_compare(live), _applied_fields(data), owned):
        return WriteResult(OperationResult.UNCHANGED, current)
    written = await client.apply(
        data, field_manager=field_manager, force=force, subresource=subresource or None
    )
    moved = resource_version_of(written) != resource_version_of(live)
    return WriteResult(
        OperationResult.UPDATED if moved else OperationResult.UNCHANGED,
        _decode(kind, written, typed),
    )


async def _check_created_by_us(
    client: SafeClient, kind: Any, key: ObjectKey, created: JsonObject, field_manager: str
) -> None:
    """After an apply that was meant to create: refuse (and undo) if someone else created it.

    A fresh object carries only its creator's managedFields entry; any other manager means
    the object appeared before the apply, and the apply took it over.
    """
    entries = (created.get("metadata") or {}).get("managedFields") or []
    others = sorted(
        {
            str(entry.get("manager"))
            for entry in entries
            if isinstance(entry, dict) and entry.get("manager") != field_manager
        }
    )
    if not others:
        return
    # Release every field just applied: the owner reference and the forced values go.
    release: JsonObject = {
        "apiVersion": created.get("apiVersion"),
        "kind": created.get("kind"),
        "metadata": {"name": key.name, **({"namespace": key.namespace} if key.namespace else {})},
    }
    await client.apply(release, field_manager=field_manager, force=False)
    raise NotAdopted(
        f"{describe_target(kind, key)} was created by another writer ({', '.join(others)}) "
        "at the moment apply_child meant to create it; the fields just applied (the owner "
        "reference among them) were released again, so it is not adopted. Check who else "
        "creates objects of this name"
    )


def _check_controller(kind: Any, key: ObjectKey, live: JsonObject, data: JsonObject) -> None:
    """Raise AlreadyOwned when ``live`` is controlled by another owner than ``data`` names."""
    existing = controller_of(live)
    ours = controller_of(data)
    if existing is not None and ours is not None and not _same_owner(existing, ours):
        raise AlreadyOwned(
            f"{describe_target(kind, key)} is already controlled by {existing.get('kind')} "
            f"{existing.get('name')!r} (uid {existing.get('uid')}); refusing to make "
            f"{ours.get('kind')} {ours.get('name')!r} its controller too",
            owner=existing,
        )


async def _raise_if_controlled_elsewhere(
    client: SafeClient, kind: Any, key: ObjectKey, data: JsonObject, error: Invalid
) -> None:
    """After an apply the server refused as Invalid: AlreadyOwned if another owner controls.

    The cache said the child did not exist, so no owner check ran before the apply. If the
    child existed after all and another owner controls it, the server refuses a second
    controller reference (422); read it to say so as :class:`AlreadyOwned`.
    """
    try:
        current = await client.get(kind, key.name, namespace=key.namespace or None)
    except NotFound:
        return
    try:
        _check_controller(kind, key, as_json(current), data)
    except AlreadyOwned as owned:
        raise owned from error


_CACHED_TYPES: dict[type, bool] = {}


def _cached_client(client: SafeClient) -> CachedClient | None:
    """``client`` when it is a :class:`CachedClient`, else ``None``.

    The answer is remembered per class: checking a runtime protocol inspects every member
    (tens of microseconds), and ``apply_child`` asks on every call.
    """
    cls = type(client)
    known = _CACHED_TYPES.get(cls)
    if known is None:
        known = _CACHED_TYPES[cls] = isinstance(client, CachedClient)
    return client if known else None  # type: ignore[return-value]


_OWN_WRITE_WAIT = 1.0
"""Seconds :func:`apply_child` waits for the cache to see this process's own last write of a
child before it asks the server instead (a GET). The event usually arrives within
milliseconds; a lagging watch costs a reconcile this long, then the GET."""

APPLIED_ANNOTATION_PREFIX = "setpoint.dev/applied-"
"""Keys of the annotation :func:`apply_child` stamps: this prefix, then a hash of the field
manager. Tell GitOps diff tools to ignore annotations starting with it."""


def applied_marker(field_manager: str, data: JsonObject) -> tuple[str, str]:
    """The annotation recording what ``field_manager`` last applied: ``(key, fingerprint)``.

    The key is :data:`APPLIED_ANNOTATION_PREFIX` plus a hash of the manager's name
    (managers may not be valid annotation names, and two managers applying one object must
    not fight over one key); the value is a hash of the applied configuration.
    """
    digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]
    return _marker_key(field_manager), digest


@functools.lru_cache(maxsize=64)
def _marker_key(field_manager: str) -> str:
    # A process has a handful of field managers, and this runs on every apply_child.
    manager = hashlib.sha256(field_manager.encode()).hexdigest()[:10]
    return f"{APPLIED_ANNOTATION_PREFIX}{manager}"


def _unchanged_in_cache(
    client: CachedClient, kind: Any, key: ObjectKey, marker: tuple[str, str], data: JsonObject
) -> JsonObject | None:
    """The cached child, when the cache alone proves an apply would change nothing.

    That needs two things. The child carries this manager's marker for exactly this
    desired configuration, so the set of fields it owns is the one it would apply now
    (an apply that *drops* a field must go to the server, and a new configuration has a
    new marker). And every value it would apply is still there: drift in an owned field
    shows as a difference and takes the slow path, which restores it. Anything the cache
    cannot answer (no informer for the kind, not synced) also takes the slow path: a GET
    and the managedFields comparison. The cache strips managedFields, hence the marker.

    A stale cache can only make this answer "changed" (the slow path then reads the
    server) or "unchanged" for a version that did match; the event of any newer change
    reconciles the owner again, so level-based correctness holds.
    """
    cached = client.cache.peek(gvk_for(kind), key)
    marker_key, fingerprint = marker
    if not isinstance(cached, dict) or annotations_of(cached).get(marker_key) != fingerprint:
        return None
    if not _covers(cached, data):
        return None
    return cached  # peek decoded it for this call: the caller's own


def _covers(current: Any, desired: Any) -> bool:
    """Whether every value in ``desired`` is present, equal, in ``current``.

    Maps may hold more (server defaults, other managers' fields); lists must match item
    by item, each item covered, since their merge keys are not known here.
    """
    # Plain loops, not all(<generator>), and scalars compared in place rather than by a
    # call each: this runs on every reconcile of every child.
    kind = type(desired)
    if kind is dict:
        if type(current) is not dict:
            return False
        for k, v in desired.items():
            c = current.get(k, _MISSING)
            t = type(v)
            if t is dict or t is list:
                if not _covers(c, v):
                    return False
            elif type(c) is not t or c != v:
                return False
        return True
    if kind is list:
        if type(current) is not list or len(current) != len(desired):
            return False
        for c, d in zip(current, desired, strict=True):  # noqa: SIM110
            if not _covers(c, d):
                return False
        return True
    return type(current) is kind and current == desired


_MISSING = object()
"""A key absent from the current object (of no JSON type, so it covers nothing)."""


def _same_owner(a: JsonObject, b: JsonObject) -> bool:
    # Group, kind and name, as owners.set_controller_reference compares: a recreated
    # owner (new UID) is the same owner.
    def group(ref: JsonObject) -> str:
        return split_api_version(str(ref.get("apiVersion") or "v1"))[0]

    return (
        group(a) == group(b) and a.get("kind") == b.get("kind") and a.get("name") == b.get("name")
    )


def _decode(kind: Any, data: Any, typed: bool) -> Any:
    if typed and not is_typed(data):
        return kind.from_object(data)
    return data
