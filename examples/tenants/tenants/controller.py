"""The Tenant controller: namespaces and their children kept in place, a directory kept in sync.

One reconcile of a Tenant, level-based (it is told which Tenant, never what changed):

1. Read the Tenant from the cache. Gone or being deleted: nothing to do here; the
   finalizer's cleanup unregisters it, and the garbage collector removes everything it owns.
2. For each namespace of the spec: skip it when another Tenant claims it (the oldest claim
   wins; an existing Namespace belongs to whoever controls it) or when it exists without
   being ours; otherwise apply the Namespace and its ResourceQuota, LimitRange, RoleBinding
   and (when isolated) NetworkPolicy with server-side apply, each with a controller
   reference to the Tenant.
3. Register it in the tenant directory (UPSERT) with the namespaces it got. The finalizer
   registry calls this reconcile only once the finalizer is on the object, so a Tenant is
   never in the directory without a finalizer that will take it out. A directory failure
   does not stop the rest; it makes the Tenant Degraded and the reconcile is retried.
4. Delete the namespaces this Tenant controls that left the spec.
5. Write status through the status subresource: conditions, observedGeneration, the
   namespaces that exist, and quota usage from each ResourceQuota's ``status.used``.

Everything is declared next to the code: the RBAC rules the controller needs
(``setpoint generate rbac`` collects them) and the watches that make drift repair immediate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import setpoint as sp
from setpoint import kinds
from setpoint.api.kinds import core_v1

from . import children
from .api import GROUP, NamespaceUsage, Tenant, TenantStatus
from .directory import DirectoryUnavailable, TenantDirectory
from .settings import TenantsSettings

__all__ = [
    "CONTROLLER_NAME",
    "FINALIZER",
    "TenantReconciler",
    "claimed_namespaces",
]

CONTROLLER_NAME = "tenant"
"""The controller's name: label of its metrics and logs, and reporter of its Events."""

FINALIZER = f"{GROUP}/directory"
"""The finalizer that keeps a deleted Tenant until it is unregistered from the directory."""

NAMESPACE_INDEX = "namespace"
"""Cache index of Tenants by the namespaces their spec claims."""

CONTROLLER_INDEX = "tenant-controller"
"""Cache index of Namespaces by their controlling Tenant."""

# Condition types and reasons (CamelCase, as the API requires).
READY = "Ready"
DEGRADED = "Degraded"


def claimed_namespaces(obj: dict[str, Any]) -> list[str]:
    """Index function: the namespaces a Tenant's spec claims (JSON form, as the cache holds it)."""
    spec = obj.get("spec") or {}
    listed = spec.get("namespaces") or []
    return [str(ns) for ns in listed if isinstance(ns, str)]


@dataclass
class _Outcome:
    """What one reconcile found, turned into status at the end."""

    present: list[str] = field(default_factory=list)
    usage: list[NamespaceUsage] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of everything that keeps the Tenant from being Ready."""
    directory_error: DirectoryUnavailable | None = None

    def problem(self, reason: str, message: str) -> None:
        self.problems.append((reason, message))


# Least privilege: apply is a PATCH (plus create when the object is new), finalizers are
# guarded JSON patches, status is a PUT to /status. Nothing here needs update on a main
# resource; the least-privilege test runs a full cycle bound to exactly these rules.
@sp.rbac.for_kind(Tenant, verbs=["get", "list", "watch", "patch"])
@sp.rbac.for_kind(Tenant, subresources=["status"], verbs=["get", "update", "patch"])
# Owner references with blockOwnerDeletion need update on the owner's finalizers subresource
# where the OwnerReferencesPermissionEnforcement admission plugin is enabled (OpenShift).
@sp.rbac.for_kind(Tenant, subresources=["finalizers"], verbs=["update"])
@sp.rbac.for_kind(kinds.Namespace, verbs=["get", "list", "watch", "create", "patch", "delete"])
@sp.rbac.for_kind(kinds.ResourceQuota, verbs=["get", "list", "watch", "create", "patch"])
@sp.rbac.for_kind(kinds.LimitRange, verbs=["get", "list", "watch", "create", "patch"])
@sp.rbac.for_kind(kinds.RoleBinding, verbs=["get", "list", "watch", "create", "patch"])
@sp.rbac.for_kind(kinds.NetworkPolicy, verbs=["get", "list", "watch", "create", "patch", "delete"])
# The API server lets a subject create a RoleBinding to a role only if it holds every
# permission of the role, or may "bind" it. bind on exactly "admin" is the least privilege.
@sp.rbac.for_kind(kinds.ClusterRole, verbs=["bind"], resource_names=["admin"])
# Events about Tenants (cluster-scoped) land in "default"; the recorder creates and patches.
@sp.rbac.for_kind(kinds.Event, verbs=["create", "patch"])
class TenantReconciler:
    """Reconciles Tenants; holds the settings and the directory (see the module docstring)."""

    def __init__(self, settings: TenantsSettings, directory: TenantDirectory) -> None:
        self.settings = settings
        """The operator's settings."""
        self.directory = directory
        """The tenant directory."""
        self._cache: sp.Cache | None = None

    def attach(self, cache: sp.Cache) -> None:
        """Add the cache indexes the reconciler and its mappers read (before the cache syncs)."""
        cache.add_index(Tenant, NAMESPACE_INDEX, claimed_namespaces)
        cache.add_index(kinds.Namespace, CONTROLLER_INDEX, sp.by_controller(Tenant.gvk))
        self._cache = cache

    # -- reconcile ------------------------------------------------------------------------------

    async def reconcile(self, ctx: sp.Context, request: sp.Request) -> sp.Result | None:
        """Make the Tenant's namespaces, children, directory entry and status match its spec."""
        try:
            tenant = await ctx.reader.get(Tenant, request.name)
        except sp.NotFound:
            return None  # deleted: its finalizer ran already; GC removes what it owned
        if tenant.metadata.deletion_timestamp is not None:
            return None  # the finalizer's cleanup is in charge now
        outcome = _Outcome()
        desired = sorted(set(tenant.spec.namespaces))
        for ns in desired:
            await self._reconcile_namespace(ctx, tenant, ns, outcome)
        try:
            # The directory records what the tenant was granted: the namespaces that exist
            # for it now (a namespace lost to a conflict is not listed).
            written = await self.directory.register(
                name=_name(tenant),
                uid=str(tenant.metadata.uid),
                admin_group=tenant.spec.admin_group,
                namespaces=outcome.present,
            )
            if written:
                ctx.log.info("Registered the tenant in the directory", namespaces=outcome.present)
        except DirectoryUnavailable as exc:
            # The namespaces are in place anyway: they do not depend on the directory.
            outcome.directory_error = exc
            outcome.problem("DirectoryUnavailable", str(exc))
        await self._delete_dropped(ctx, tenant, desired)
        generation = int(tenant.metadata.generation or 0)
        await sp.update_status(
            ctx.client, tenant, lambda obj: _write_status(obj, outcome, generation)
        )
        if outcome.directory_error is not None:
            error = str(outcome.directory_error)
            ctx.log.warning("The tenant directory is unavailable", error=error)
            raise outcome.directory_error  # retried with backoff; Degraded says why meanwhile
        if outcome.problems:
            return sp.Result(requeue_after=self.settings.degraded_requeue_after)
        return None

    async def _reconcile_namespace(
        self, ctx: sp.Context, tenant: Tenant, ns: str, outcome: _Outcome
    ) -> None:
        try:
            existing: dict[str, Any] | None = await ctx.reader.get(kinds.Namespace, ns)
        except sp.NotFound:
            existing = None
        if existing is not None and not sp.is_controlled_by(existing, tenant):
            outcome.problem(*_foreign(existing, tenant, ns))
            return
        if existing is None:
            winner = await self._first_claimant(ctx, ns)
            if winner is not None and winner != _name(tenant):
                outcome.problem(
                    "NamespaceConflict",
                    f"namespace {ns!r} is already claimed by Tenant {winner!r}; it is left "
                    "untouched",
                )
                return
        elif sp.meta.metadata_of(existing).get("deletionTimestamp"):
            outcome.problem(
                "NamespaceTerminating",
                f"namespace {ns!r} is being deleted; it is recreated once it is gone",
            )
            return
        if existing is None and not await self._create_namespace(ctx, tenant, ns, outcome):
            return
        try:
            result, _ = await sp.apply_child(
                ctx.client,
                children.namespace(tenant, ns),
                field_manager=self._manager,
                owner=tenant,
            )
        except (sp.NotAdopted, sp.AlreadyOwned):
            # Someone else's namespace that the cache had not shown yet: never taken over.
            outcome.problem(*_foreign({"metadata": {"name": ns}}, tenant, ns))
            return
        if result is sp.OperationResult.UPDATED:
            ctx.log.info("Restored a namespace", tenant_namespace=ns)
        desired: list[children.Child] = [
            children.resource_quota(tenant, ns),
            children.limit_range(tenant, ns),
            children.admin_binding(tenant, ns),
        ]
        if tenant.spec.isolated:
            desired.append(children.isolation_policy(tenant, ns))
        else:
            await self._delete_child(ctx, tenant, kinds.NetworkPolicy, ns)
        quota: core_v1.ResourceQuota | None = None
        for child in desired:
            result, live = await sp.apply_child(
                ctx.client, child, field_manager=self._manager, owner=tenant
            )
            if result is not sp.OperationResult.UNCHANGED:
                ctx.log.info(
                    "Applied a child",
                    tenant_namespace=ns,
                    kind=child.gvk.kind,
                    child=child.metadata.name,
                    result=result.value,
                )
            if isinstance(live, core_v1.ResourceQuota):
                quota = live
        outcome.present.append(ns)
        outcome.usage.append(_usage(ns, quota))

    async def _create_namespace(
        self, ctx: sp.Context, tenant: Tenant, ns: str, outcome: _Outcome
    ) -> bool:
        """Create ``ns`` for ``tenant``, or report it as foreign if it already exists.

        A plain create, not an apply: it fails with AlreadyExists for a namespace someone
        created after the cache last looked, so an existing namespace is never taken over
        (an apply would give it the Tenant's label, RoleBinding and owner reference, and
        delete it with the Tenant). Only the label and the owner reference are created here;
        apply_child then owns the namespace's fields as for every child.
        """
        created = children.namespace(tenant, ns)
        sp.set_controller_reference(created, tenant)
        try:
            await ctx.client.create(created, field_manager=self._manager)
        except sp.AlreadyExists:
            outcome.problem(*_foreign({"metadata": {"name": ns}}, tenant, ns))
            return False
        ctx.log.info("Created a namespace", tenant_namespace=ns)
        _record(ctx, tenant, "Normal", "NamespaceCreated", f"Created namespace {ns}")
        return True

    async def _first_claimant(self, ctx: sp.Context, ns: str) -> str | None:
        """The Tenant whose claim on ``ns`` wins: the oldest live claim (ties: by name)."""
        claims = await ctx.reader.list_by_index(Tenant, NAMESPACE_INDEX, ns)
        live = [t for t in claims.items if t.metadata.deletion_timestamp is None]
        if not live:
            return None
        oldest = min(live, key=lambda t: (t.metadata.creation_timestamp, t.metadata.name or ""))
        return str(oldest.metadata.name)

    async def _delete_dropped(self, ctx: sp.Context, tenant: Tenant, desired: list[str]) -> None:
        """Delete the namespaces this Tenant controls that its spec no longer lists."""
        owned = await ctx.reader.list_by_index(kinds.Namespace, CONTROLLER_INDEX, _name(tenant))
        for ns in owned.items:
            name = sp.meta.name_of(ns)
            if name in desired or not sp.is_controlled_by(ns, tenant):
                continue
            if sp.meta.metadata_of(ns).get("deletionTimestamp"):
                continue  # already going
            try:
                await ctx.client.delete(
                    kinds.Namespace,
                    name,
                    preconditions=sp.Preconditions(uid=sp.meta.uid_of(ns)),
                )
            except (sp.NotFound, sp.Conflict):
                continue  # gone, or replaced by another namespace of that name: not ours
            ctx.log.info("Deleted a namespace removed from the spec", tenant_namespace=name)
            _record(ctx, tenant, "Normal", "NamespaceDeleted", f"Deleted namespace {name}")

    async def _delete_child(
        self, ctx: sp.Context, tenant: Tenant, kind: sp.GroupVersionKind, ns: str
    ) -> None:
        """Delete the isolation policy (after ``spec.isolated`` was turned off), if ours."""
        try:
            live = await ctx.reader.get(kind, children.ISOLATION_POLICY, namespace=ns)
        except sp.NotFound:
            return
        if not sp.is_controlled_by(live, tenant):
            return
        try:
            await ctx.client.delete(
                kind,
                children.ISOLATION_POLICY,
                namespace=ns,
                preconditions=sp.Preconditions(uid=sp.meta.uid_of(live)),
            )
        except (sp.NotFound, sp.Conflict):
            return
        ctx.log.info("Deleted the isolation policy", tenant_namespace=ns)

    # -- finalizer -----------------------------------------------------------------------------

    async def cleanup(self, ctx: sp.Context, tenant: Tenant) -> None:
        """Unregister a deleted Tenant from the directory (the finalizer's cleanup).

        Idempotent: ``DELETE ... WHERE name AND uid`` succeeds whether or not the row is
        still there, so running it again after a crash, a timeout or a lost lease is safe.
        Raises :class:`DirectoryUnavailable` while the directory fails; the finalizer
        registry then keeps the finalizer, reports the failure and retries with backoff.
        """
        removed = await self.directory.unregister(name=_name(tenant), uid=str(tenant.metadata.uid))
        ctx.log.info("Unregistered the tenant from the directory", removed=removed)

    # -- watch mappers -----------------------------------------------------------------------

    async def claimants_of_namespace(self, ns: dict[str, Any]) -> list[sp.ObjectKey]:
        """Tenants claiming a Namespace: a loser retries as soon as the winner lets it go."""
        name = sp.meta.name_of(ns)
        return [sp.ObjectKey("", tenant) for tenant in await self._claimants(name)]

    async def co_claimants(self, tenant: Tenant) -> list[sp.ObjectKey]:
        """Other Tenants claiming any of this Tenant's namespaces (for when it changes or goes)."""
        me = tenant.metadata.name
        keys: set[str] = set()
        for ns in tenant.spec.namespaces:
            keys.update(t for t in await self._claimants(ns) if t != me)
        return [sp.ObjectKey("", t) for t in sorted(keys)]

    async def _claimants(self, ns: str) -> Iterable[str]:
        cache = self._cache
        if cache is None:
            raise RuntimeError("TenantReconciler.attach(cache) was not called")
        claims = await cache.list_by_index(Tenant, NAMESPACE_INDEX, ns)
        return [str(t.metadata.name) for t in claims.items]

    @property
    def _manager(self) -> str:
        return self.settings.field_manager


# -- helpers ---------------------------------------------------------------------------------


def _name(tenant: Tenant) -> str:
    return str(tenant.metadata.name)


def _foreign(existing: dict[str, Any], tenant: Tenant, ns: str) -> tuple[str, str]:
    """Why an existing namespace that this Tenant does not control is left alone."""
    ref = sp.controller_of(existing)
    by_tenant = ref is not None and ref.get("kind") == Tenant.gvk.kind
    if ref is not None and by_tenant and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
        other = ref.get("name")
        if other == _name(tenant):
            return (
                "NamespaceTerminating",
                f"namespace {ns!r} belongs to an earlier Tenant named {other!r} and is being "
                "garbage-collected; it is recreated once it is gone",
            )
        return (
            "NamespaceConflict",
            f"namespace {ns!r} is already claimed by Tenant {other!r}; it is left untouched",
        )
    return (
        "NamespaceNotOwned",
        f"namespace {ns!r} exists and was not created for a Tenant; the operator does not "
        "adopt it (deleting the Tenant would delete it). Remove it from spec.namespaces, or "
        "delete the namespace so the operator can create it",
    )


def _usage(ns: str, quota: core_v1.ResourceQuota | None) -> NamespaceUsage:
    status = quota.status if quota is not None else None
    used = (status.used if status is not None else None) or {}
    return NamespaceUsage(
        namespace=ns,
        cpu=used.get("requests.cpu"),
        memory=used.get("requests.memory"),
        pods=used.get("pods"),
    )


def _record(ctx: sp.Context, tenant: Tenant, kind: str, reason: str, message: str) -> None:
    if ctx.recorder is not None:
        ctx.recorder.event(tenant, kind, reason, message)


def _write_status(tenant: Tenant, outcome: _Outcome, generation: int) -> None:
    """The status mutation; ``generation`` is the one the outcome was computed from.

    update_status re-runs this on a fresh copy after a Conflict, and that copy may carry a
    newer spec than the one acted on (the cache lagged, or the spec changed meanwhile). So
    observedGeneration is the generation acted on, never the fresh copy's: status must not
    claim to describe a spec the reconcile has not seen. The newer spec's own event brings
    the next reconcile.
    """
    if tenant.status is None:
        tenant.status = TenantStatus()
    status = tenant.status
    # Plain assignments: update_status compares values, so an unchanged status is no write.
    status.observed_generation = generation
    status.namespaces = sorted(outcome.present)
    status.usage = sorted(outcome.usage, key=lambda u: u.namespace)
    if outcome.problems:
        reason = outcome.problems[0][0]
        message = "; ".join(message for _, message in outcome.problems)
        sp.set_condition(status, READY, False, reason, message, observed_generation=generation)
        sp.set_condition(status, DEGRADED, True, reason, message, observed_generation=generation)
    else:
        count = len(outcome.present)
        sp.set_condition(
            status,
            READY,
            True,
            "Provisioned",
            f"{count} namespace{'s' if count != 1 else ''} in place",
            observed_generation=generation,
        )
        sp.set_condition(status, DEGRADED, False, "AsExpected", "", observed_generation=generation)
