"""Drift: what the operator owns is restored at once; what others own is left alone."""

from __future__ import annotations

from typing import Any

from tenants import TENANT_LABEL

import setpoint as sp
from setpoint import kinds
from setpoint.testing import eventually

from .tenants_support import TENANT, Operator, Tenants, unique, wait_ready

OTHER_LABEL = "cost.example.com/center"


async def test_a_child_deleted_by_hand_is_recreated(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """Deleting a tenant's ResourceQuota or NetworkPolicy by hand brings a new one back.

    The delete event of an owned kind reconciles the controlling Tenant at once (owns()),
    and the reconcile applies the missing child again: a new object (new UID) with the
    desired spec.
    """
    name = unique("deleted")
    ns = f"{name}-a"
    await tenants.create(name, [ns], quota={"pods": 5})
    await wait_ready(k8s, name)
    await operator.quiescent()
    for kind, child in (
        (kinds.ResourceQuota, "tenant-quota"),
        (kinds.NetworkPolicy, "tenant-isolation"),
    ):
        before = await k8s.get(kind, child, namespace=ns)
        await k8s.delete(kind, child, namespace=ns)
        after = await eventually(
            lambda kind=kind, child=child, uid=before["metadata"]["uid"]: replaced(
                k8s, kind, child, ns, uid
            ),
            timeout=30,
            description=f"{kind.kind} recreated",
        )
        assert after["spec"] == before["spec"]


async def replaced(
    k8s: sp.Client, kind: sp.GroupVersionKind, name: str, ns: str, old_uid: str
) -> dict[str, Any] | None:
    """The object, if it exists under a UID other than ``old_uid``."""
    try:
        obj = await k8s.get(kind, name, namespace=ns)
    except sp.NotFound:
        return None
    return obj if obj["metadata"]["uid"] != old_uid else None


async def test_an_owned_field_changed_by_hand_is_restored(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """Raising a quota or removing the tenant label by hand is undone, each on its own.

    Another writer (field manager "kubectl-edit") raises the pod quota; that update of an
    owned kind reconciles the Tenant, which applies the quota again. Then the writer removes
    the tenant label from the namespace, and the Namespace update brings it back. Each
    change is repaired before the next is made, so each proves its own watch.
    """
    name = unique("edited")
    ns = f"{name}-a"
    await tenants.create(name, [ns], quota={"pods": 5})
    await wait_ready(k8s, name)
    await operator.quiescent()

    await k8s.patch(
        kinds.ResourceQuota,
        "tenant-quota",
        sp.MergePatch({"spec": {"hard": {"pods": "500"}}}),
        namespace=ns,
        field_manager="kubectl-edit",
    )

    async def quota_restored() -> bool:
        quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
        return bool(quota["spec"]["hard"]["pods"] == "5")

    await eventually(quota_restored, timeout=30, description="pod quota restored")

    await k8s.patch(
        kinds.Namespace,
        ns,
        sp.MergePatch({"metadata": {"labels": {TENANT_LABEL: None}}}),
        field_manager="kubectl-edit",
    )

    async def label_restored() -> bool:
        namespace = await k8s.get(kinds.Namespace, ns)
        return (namespace["metadata"].get("labels") or {}).get(TENANT_LABEL) == name

    await eventually(label_restored, timeout=30, description="tenant label restored")


async def test_fields_other_managers_own_are_left_alone(
    k8s: sp.Client, operator: Operator, tenants: Tenants
) -> None:
    """A label another tool adds to a namespace and to a quota survives every reconcile.

    The operator applies only its own fields (server-side apply under its field manager), so
    labels written by "cost-tool" stay through a drift repair of the same objects and
    through a spec change that re-applies every child.
    """
    name = unique("others")
    ns = f"{name}-a"
    await tenants.create(name, [ns], quota={"pods": 5})
    await wait_ready(k8s, name)
    await operator.quiescent()
    for kind, obj_name, namespace in (
        (kinds.Namespace, ns, None),
        (kinds.ResourceQuota, "tenant-quota", ns),
    ):
        await k8s.patch(
            kind,
            obj_name,
            sp.MergePatch({"metadata": {"labels": {OTHER_LABEL: "42"}}}),
            namespace=namespace,
            field_manager="cost-tool",
        )

    # Drift in an owned field of the same quota: the repair must not take the label away.
    await k8s.patch(
        kinds.ResourceQuota,
        "tenant-quota",
        sp.MergePatch({"spec": {"hard": {"pods": "500"}}}),
        namespace=ns,
        field_manager="kubectl-edit",
    )

    async def repaired() -> bool:
        quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
        return quota["spec"]["hard"]["pods"] == "5"

    await eventually(repaired, timeout=30, description="quota repaired")
    # And a spec change, which re-applies every child with new values.
    await k8s.patch(TENANT, name, sp.MergePatch({"spec": {"quota": {"pods": 6}}}))
    await wait_ready(k8s, name)

    async def applied() -> bool:
        quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
        return quota["spec"]["hard"]["pods"] == "6"

    await eventually(applied, timeout=30, description="new quota applied")
    quota = await k8s.get(kinds.ResourceQuota, "tenant-quota", namespace=ns)
    namespace = await k8s.get(kinds.Namespace, ns)
    assert quota["metadata"]["labels"][OTHER_LABEL] == "42"
    assert namespace["metadata"]["labels"][OTHER_LABEL] == "42"
    assert namespace["metadata"]["labels"][TENANT_LABEL] == name
