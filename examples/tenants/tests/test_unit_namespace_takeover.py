"""A namespace someone else created is never taken over, even before the cache shows it.

Issue 18, item 8: the reconciler checked the cache for a foreign namespace and then applied
the Namespace with server-side apply, which adopts an existing object. A namespace created
after the cache last looked was therefore taken over: it got the tenant's label (joining the
tenant's network), the admin RoleBinding, and was deleted with the Tenant. Here the cache
(``ctx.reader``) lags behind the server (``ctx.client``) on purpose.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tenants import TENANT_LABEL, Tenant, TenantsSettings
from tenants.controller import NAMESPACE_INDEX, TenantReconciler, _Outcome, claimed_namespaces
from tenants.directory import TenantDirectory

import setpoint as sp
from setpoint import kinds
from setpoint.testing import FakeClient, context_for


def tenant_object() -> dict[str, object]:
    return {
        "apiVersion": "tenants.setpoint.dev/v1",
        "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"namespaces": ["acme-a"], "adminGroup": "acme-admins"},
    }


async def test_a_namespace_the_cache_has_not_seen_is_not_taken_over(tmp_path: Path) -> None:
    """The namespace exists on the server but not in the cache: reported, left untouched."""
    server = FakeClient(resources=[Tenant])
    created = await server.create(Tenant.from_object(tenant_object()))
    stale_cache = FakeClient(resources=[Tenant], objects=[created])
    stale_cache.add_index(Tenant, NAMESPACE_INDEX, claimed_namespaces)
    # Someone else's namespace of the same name, created after the cache last looked.
    await server.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "acme-a"}})

    reconciler = TenantReconciler(
        TenantsSettings(directory_path=tmp_path / "directory.db"),
        TenantDirectory(tmp_path / "directory.db"),
    )
    ctx = dataclasses.replace(
        context_for(server, sp.ObjectKey("", "acme"), gvk=Tenant), reader=stale_cache
    )
    outcome = _Outcome()
    await reconciler._reconcile_namespace(ctx, created, "acme-a", outcome)

    assert [reason for reason, _ in outcome.problems] == ["NamespaceNotOwned"]
    namespace = await server.get(kinds.Namespace, "acme-a")
    assert TENANT_LABEL not in (namespace["metadata"].get("labels") or {})
    assert not namespace["metadata"].get("ownerReferences")
    bindings = await server.list(kinds.RoleBinding, namespace="acme-a")
    assert list(bindings) == []
    assert outcome.present == []


async def test_a_new_namespace_is_created_for_the_tenant(tmp_path: Path) -> None:
    """The usual path still works: created with the label and controller, then children."""
    server = FakeClient(resources=[Tenant])
    created = await server.create(Tenant.from_object(tenant_object()))
    server.add_index(Tenant, NAMESPACE_INDEX, claimed_namespaces)
    reconciler = TenantReconciler(
        TenantsSettings(directory_path=tmp_path / "directory.db"),
        TenantDirectory(tmp_path / "directory.db"),
    )
    ctx = context_for(server, sp.ObjectKey("", "acme"), gvk=Tenant)
    outcome = _Outcome()
    await reconciler._reconcile_namespace(ctx, created, "acme-a", outcome)

    assert outcome.problems == []
    assert outcome.present == ["acme-a"]
    namespace = await server.get(kinds.Namespace, "acme-a")
    assert namespace["metadata"]["labels"][TENANT_LABEL] == "acme"
    assert sp.is_controlled_by(namespace, created)
    (binding,) = list(await server.list(kinds.RoleBinding, namespace="acme-a"))
    assert binding["subjects"][0]["name"] == "acme-admins"
