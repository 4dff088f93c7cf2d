"""The Tenant validating webhook: refuse at ``kubectl apply`` what the schema cannot know.

The CRD's schema and CEL rules check each Tenant on its own. Two mistakes need more than
that, so a validating webhook answers them before anything is stored:

- a namespace that belongs to the cluster (``default``, ``kube-*``) can never be a
  tenant's: refused with the name;
- a namespace another Tenant already claims: refused, naming that Tenant. (The
  reconciler still reports a conflict in the Degraded condition: two Tenants created at the
  same instant both pass the webhook, and only one can win.)

It also warns, without refusing: a Tenant that is not isolated, and an update that drops
namespaces (the operator deletes them, with everything in them).

``setpoint generate webhook tenants --output-dir config`` writes the
ValidatingWebhookConfiguration that sends Tenant creates and updates here;
:func:`tenants.setup` serves it on the manager's webhook server.
"""

from __future__ import annotations

from typing import Final

import setpoint as sp
from setpoint import kinds

from .api import Tenant

__all__ = ["RESERVED_PREFIXES", "TenantValidator"]

RESERVED_PREFIXES: Final = ("kube-",)
"""Namespaces starting with these belong to the cluster."""
_RESERVED_NAMES: Final = frozenset({"default"})
_CRD_NAME: Final = "tenants.tenants.setpoint.dev"
_CONFIGURATION: Final = "tenants-validating-webhook-configuration"
"""The generated configuration's name after config/default's ``namePrefix: tenants-``."""


# Self-managed webhook certificates (setpoint run --webhook-cert-secret): the operator keeps
# the caBundle of the CRD (conversion) and of the validating configuration. The Secret holding
# the certificate is granted in config/rbac/webhook_certificate_role.yaml (its own namespace).
@sp.rbac.for_kind(kinds.CustomResourceDefinition, verbs=["get", "list", "watch"])
@sp.rbac.for_kind(kinds.CustomResourceDefinition, verbs=["update"], resource_names=[_CRD_NAME])
@sp.rbac.for_kind(kinds.ValidatingWebhookConfiguration, verbs=["get", "list", "watch"])
@sp.rbac.for_kind(
    kinds.ValidatingWebhookConfiguration, verbs=["update"], resource_names=[_CONFIGURATION]
)
class TenantValidator(sp.CustomValidator[Tenant]):
    """Refuses reserved or already claimed namespaces; warns about isolation and deletions.

    Args:
        reader: Where the other Tenants are read (the manager's live client: the webhook
            answers before the cache has synced).

    """

    webhook_options = sp.AdmissionOptions(failure_policy="Fail", timeout_seconds=5)

    def __init__(self, reader: sp.Reader) -> None:
        self._reader = reader

    async def validate_create(self, obj: Tenant) -> sp.Warnings:
        """Check a new Tenant's namespaces against the cluster's and the other Tenants'."""
        return await self._check(obj, None)

    async def validate_update(self, old: Tenant, new: Tenant) -> sp.Warnings:
        """Check a changed Tenant; warn about namespaces it drops (they will be deleted)."""
        return await self._check(new, old)

    async def _check(self, tenant: Tenant, old: Tenant | None) -> sp.Warnings:
        namespaces = tenant.spec.namespaces
        for namespace in namespaces:
            if namespace in _RESERVED_NAMES or namespace.startswith(RESERVED_PREFIXES):
                raise sp.Denied(
                    f"spec.namespaces: {namespace!r} belongs to the cluster and cannot be a "
                    "tenant's; choose another name"
                )
        added = set(namespaces) - set(old.spec.namespaces if old is not None else ())
        if added:
            others = await self._reader.list(Tenant)
            for other in others:
                if other.metadata.name == tenant.metadata.name:
                    continue
                taken = sorted(added & set(other.spec.namespaces))
                if taken:
                    raise sp.Denied(
                        f"spec.namespaces: {taken[0]!r} is already claimed by Tenant "
                        f"{other.metadata.name!r}; a namespace belongs to one tenant"
                    )
        warnings: list[str] = []
        if not tenant.spec.isolated:
            warnings.append(
                "spec.isolated is false: pods in every namespace can reach this tenant's pods"
            )
        if old is not None:
            dropped = sorted(set(old.spec.namespaces) - set(namespaces))
            if dropped:
                warnings.append(
                    f"spec.namespaces: {', '.join(dropped)} will be deleted, with everything "
                    "in them"
                )
        return warnings or None
