"""Owner-reference helpers: controller uniqueness, scope rules, dicts and typed objects."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.api.declaration import resource
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.api.owners import (
    AlreadyOwned,
    InvalidOwner,
    controller_of,
    is_controlled_by,
    is_owned_by,
    owner_reference,
    owner_references_of,
    remove_owner_reference,
    set_controller_reference,
    set_owner_reference,
)
from setpoint.api.resource import OwnerReference, Resource

TENANT = GroupVersionKind("unit.setpoint.dev", "v1", "Tenant")
TENANT_INFO = ResourceInfo(TENANT, "tenants", namespaced=False)


def obj(
    kind: str,
    name: str,
    namespace: str | None = "ns",
    uid: str | None = None,
    api: str = "v1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if uid:
        meta["uid"] = uid
    return {"apiVersion": api, "kind": kind, "metadata": meta}


@resource(group="unit.setpoint.dev", version="v1", kind="Widget")
class Widget(Resource):
    pass


def test_owner_reference_needs_the_servers_identity() -> None:
    assert owner_reference(obj("ConfigMap", "o", uid="u1"), controller=True) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "o",
        "uid": "u1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert "blockOwnerDeletion" not in owner_reference(
        obj("ConfigMap", "o", uid="u1"), block_owner_deletion=False
    )
    with pytest.raises(InvalidOwner, match="uid"):
        owner_reference(obj("ConfigMap", "o"))


def test_controller_reference_is_set_once_and_is_idempotent() -> None:
    dep = obj("ConfigMap", "dep")
    owner = obj("Deployment", "web", uid="u1", api="apps/v1")
    assert set_controller_reference(dep, owner)
    assert not set_controller_reference(dep, owner)
    assert controller_of(dep) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": "u1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert is_controlled_by(dep, owner)
    assert is_owned_by(dep, owner)


def test_a_second_controller_is_refused_naming_the_first() -> None:
    dep = obj("ConfigMap", "dep")
    set_controller_reference(dep, obj("Deployment", "web", uid="u1", api="apps/v1"))
    with pytest.raises(AlreadyOwned, match=r"Deployment 'web'.*uid u1") as info:
        set_controller_reference(dep, obj("ConfigMap", "other", uid="u2"))
    assert info.value.owner["name"] == "web"
    assert len(owner_references_of(dep)) == 1


def test_recreated_owner_replaces_its_stale_reference() -> None:
    dep = obj("ConfigMap", "dep")
    set_controller_reference(dep, obj("Deployment", "web", uid="old", api="apps/v1"))
    assert set_controller_reference(dep, obj("Deployment", "web", uid="new", api="apps/v1"))
    assert [r["uid"] for r in owner_references_of(dep)] == ["new"]


def test_plain_owners_accumulate_and_never_demote_the_controller() -> None:
    dep = obj("ConfigMap", "dep")
    web = obj("Deployment", "web", uid="u1", api="apps/v1")
    set_controller_reference(dep, web)
    assert set_owner_reference(dep, obj("ConfigMap", "a", uid="ua"))
    assert set_owner_reference(dep, obj("ConfigMap", "b", uid="ub"))
    assert not set_owner_reference(dep, web, block_owner_deletion=True)
    assert is_controlled_by(dep, web)
    assert [r["name"] for r in owner_references_of(dep)] == ["web", "a", "b"]
    assert remove_owner_reference(dep, obj("ConfigMap", "a", uid="ua"))
    assert not remove_owner_reference(dep, obj("ConfigMap", "a", uid="ua"))
    assert [r["name"] for r in owner_references_of(dep)] == ["web", "b"]
    assert remove_owner_reference(dep, web)
    assert remove_owner_reference(dep, obj("ConfigMap", "b", uid="ub"))
    assert "ownerReferences" not in dep["metadata"]
    assert controller_of(dep) is None


def test_cross_namespace_owner_is_refused() -> None:
    dep = obj("ConfigMap", "dep", namespace="a")
    with pytest.raises(InvalidOwner, match="cross-namespace"):
        set_controller_reference(dep, obj("ConfigMap", "o", namespace="b", uid="u"))
    assert owner_references_of(dep) == []


def test_namespaced_owner_of_cluster_scoped_dependent_is_refused() -> None:
    role = obj("ClusterRole", "r", namespace=None, api="rbac.authorization.k8s.io/v1")
    with pytest.raises(InvalidOwner, match="cluster-scoped"):
        set_owner_reference(role, obj("ConfigMap", "o", uid="u"))
    tenant = obj("Tenant", "t", namespace=None, api=TENANT.api_version)
    with pytest.raises(InvalidOwner, match="cluster-scoped"):
        set_owner_reference(tenant, obj("ConfigMap", "o", uid="u"), dependent_info=TENANT_INFO)


def test_cluster_scoped_owner_may_own_anything() -> None:
    owner = obj("Namespace", "team", namespace=None, uid="n1")
    dep = obj("ConfigMap", "dep", namespace="elsewhere")
    assert set_controller_reference(dep, owner)
    tenant = obj("Tenant", "t", namespace=None, uid="t1", api=TENANT.api_version)
    assert set_owner_reference(dep, tenant, owner_info=TENANT_INFO)
    role = obj("ClusterRole", "r", namespace=None, api="rbac.authorization.k8s.io/v1")
    assert set_controller_reference(role, tenant, owner_info=TENANT_INFO)


def test_scope_comes_from_info_then_builtins_then_the_object() -> None:
    # A namespaced owner read without its namespace is refused, not taken as cluster-scoped.
    with pytest.raises(InvalidOwner, match=r"no metadata\.namespace"):
        set_owner_reference(obj("ConfigMap", "dep"), obj("ConfigMap", "o", namespace=None, uid="u"))
    # A dependent of a known namespaced kind must carry its namespace.
    with pytest.raises(InvalidOwner, match="set it"):
        set_owner_reference(obj("ConfigMap", "dep", namespace=None), obj("ConfigMap", "o", uid="u"))
    # Unknown kinds: the object's namespace tells.
    unknown_owner = obj("Thing", "o", uid="u", api="x.example.com/v1")
    assert set_owner_reference(obj("Other", "d", api="y.example.com/v1"), unknown_owner)


def test_typed_owner_and_typed_dependent() -> None:
    owner = Widget.from_object({"metadata": {"name": "w", "namespace": "ns", "uid": "wu"}})
    dep = Widget.from_object({"metadata": {"name": "d", "namespace": "ns"}})
    assert set_controller_reference(dep, owner)
    assert dep.metadata.owner_references == [
        OwnerReference(
            api_version="unit.setpoint.dev/v1",
            kind="Widget",
            name="w",
            uid="wu",
            controller=True,
            block_owner_deletion=True,
        )
    ]
    assert dep.to_object()["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True
    assert is_controlled_by(dep, owner)
    assert remove_owner_reference(dep, owner)
    assert dep.metadata.owner_references == []
