"""The tenants operator: setpoint's flagship example of a multi-tenancy operator.

A cluster-scoped ``Tenant`` (``tenants.setpoint.dev/v1``; ``v1alpha1`` is still served,
converted by the operator's webhook server, which also runs the validating webhook that
refuses reserved or already claimed namespaces) gets namespaces, each with a
ResourceQuota, a LimitRange, a RoleBinding for its admin group and, when isolated, a
default-deny NetworkPolicy; it is registered in a tenant directory (a SQLite file) that a
finalizer keeps in sync on deletion. Start it with::

    setpoint run tenants                      # a module on sys.path
    setpoint run examples/tenants/tenants     # a path

``setpoint run`` calls :func:`setup` with the manager it built from its flags; the operator's
own settings come from ``TENANTS_*`` environment variables (:class:`TenantsSettings`).
"""

from __future__ import annotations

import setpoint as sp
from setpoint import kinds

from .api import (
    GROUP,
    TENANT_LABEL,
    ContainerDefaults,
    NamespaceUsage,
    Tenant,
    TenantQuota,
    TenantSpec,
    TenantSpecV1Alpha1,
    TenantStatus,
    TenantV1Alpha1,
)
from .controller import CONTROLLER_NAME, FINALIZER, TenantReconciler
from .directory import DirectoryEntry, DirectoryUnavailable, TenantDirectory
from .drift import add_drift_controller
from .settings import SettingsError, TenantsSettings
from .webhooks import TenantValidator

__all__ = [
    "CONTROLLER_NAME",
    "FINALIZER",
    "GROUP",
    "TENANT_LABEL",
    "ContainerDefaults",
    "DirectoryEntry",
    "DirectoryUnavailable",
    "NamespaceUsage",
    "SettingsError",
    "Tenant",
    "TenantDirectory",
    "TenantQuota",
    "TenantReconciler",
    "TenantSpec",
    "TenantSpecV1Alpha1",
    "TenantStatus",
    "TenantV1Alpha1",
    "TenantValidator",
    "TenantsSettings",
    "setup",
]


def setup(manager: sp.Manager, settings: TenantsSettings | None = None) -> TenantReconciler:
    """Register the Tenant controller (and the directory it uses) on ``manager``.

    The ``setpoint run`` contract: called once, before the manager runs. ``settings``
    defaults to :meth:`TenantsSettings.from_env`. Returns the reconciler (tests read its
    directory; ``setpoint run`` ignores the value).

    Raises:
        SettingsError: a ``TENANTS_*`` variable has an unusable value.

    """
    settings = settings if settings is not None else TenantsSettings.from_env()
    directory = TenantDirectory(
        settings.directory_path, busy_timeout=settings.directory_busy_timeout
    )
    manager.add(directory)
    # The API server converts Tenants between v1alpha1 and v1 through this webhook.
    manager.webhook_server.add_conversion(Tenant, TenantV1Alpha1)
    # ... and asks this one before storing a Tenant (config/webhook/manifests.yaml).
    manager.webhook_server.add_admission(TenantValidator(manager.client))
    reconciler = TenantReconciler(settings, directory)
    # The indexes must exist before the manager's cache syncs.
    reconciler.attach(manager.cache)
    (
        manager.controller(CONTROLLER_NAME)
        .for_(Tenant)
        .owns(kinds.Namespace)
        .owns(kinds.ResourceQuota)
        .owns(kinds.LimitRange)
        .owns(kinds.RoleBinding)
        .owns(kinds.NetworkPolicy)
        # A Tenant that lost a namespace conflict retries as soon as the winner lets go.
        .watches(kinds.Namespace, reconciler.claimants_of_namespace)
        .watches(Tenant, reconciler.co_claimants)
        .finalizer(FINALIZER, reconciler.cleanup, deadline=settings.cleanup_deadline)
        .max_concurrent_reconciles(settings.max_concurrent_reconciles)
        .build(reconciler)
    )
    # Rows edited behind the operator's back: polled, reported in status, then repaired.
    add_drift_controller(manager, directory)
    return reconciler
