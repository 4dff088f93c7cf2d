"""Garbage collection through kube-controller-manager, and RBAC, on the real control plane."""

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client, load_kubeconfig
from setpoint.client.errors import Forbidden, NotFound
from setpoint.client.patch import MergePatch
from setpoint.testing import ControlPlane
from setpoint.testing.waits import eventually


async def _exists(k8s: Client, kind: GroupVersionKind, name: str, namespace: str) -> bool:
    try:
        await k8s.get(kind, name, namespace=namespace)
    except NotFound:
        return False
    return True


async def _owner_and_child(
    k8s: Client, namespace: str, child_finalizer: bool = False
) -> dict[str, Any]:
    owner: dict[str, Any] = await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owner", "namespace": namespace},
        }
    )
    meta: dict[str, Any] = {
        "name": "child",
        "namespace": namespace,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": "owner",
                "uid": owner["metadata"]["uid"],
                "blockOwnerDeletion": True,
            }
        ],
    }
    if child_finalizer:
        meta["finalizers"] = ["test.setpoint.dev/hold"]
    await k8s.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
    return owner


async def test_deleting_owner_removes_dependents(k8s: Client, namespace: str) -> None:
    """Deleting an owner removes its dependents through the real garbage collector."""
    await _owner_and_child(k8s, namespace)
    await k8s.delete(kinds.ConfigMap, "owner", namespace=namespace, propagation_policy="Background")

    async def child_gone() -> bool:
        return not await _exists(k8s, kinds.ConfigMap, "child", namespace)

    await eventually(child_gone, timeout=60, description="dependent removed by the GC")


async def test_foreground_deletion_waits_for_dependents(k8s: Client, namespace: str) -> None:
    """Foreground deletion keeps the owner until its dependents are gone.

    The dependent holds a finalizer, so it cannot go yet: the owner stays with a
    deletionTimestamp and the foregroundDeletion finalizer. Releasing the
    dependent lets the garbage collector finish both.
    """
    await _owner_and_child(k8s, namespace, child_finalizer=True)
    await k8s.delete(kinds.ConfigMap, "owner", namespace=namespace, propagation_policy="Foreground")
    owner = await k8s.get(kinds.ConfigMap, "owner", namespace=namespace)
    assert owner["metadata"].get("deletionTimestamp")
    assert "foregroundDeletion" in owner["metadata"].get("finalizers", [])

    async def child_terminating() -> bool:
        child = await k8s.get(kinds.ConfigMap, "child", namespace=namespace)
        return bool(child["metadata"].get("deletionTimestamp"))

    await eventually(child_terminating, timeout=60, description="GC deleting the dependent")
    assert await _exists(k8s, kinds.ConfigMap, "owner", namespace)

    await k8s.patch(
        kinds.ConfigMap,
        "child",
        MergePatch({"metadata": {"finalizers": None}}),
        namespace=namespace,
    )

    async def both_gone() -> bool:
        return not (
            await _exists(k8s, kinds.ConfigMap, "child", namespace)
            or await _exists(k8s, kinds.ConfigMap, "owner", namespace)
        )

    await eventually(both_gone, timeout=60, description="owner and dependent gone")


async def test_rbac_forbids_verbs_not_granted(
    k8s: Client, namespace: str, control_plane: ControlPlane
) -> None:
    """A service-account user without a verb gets Forbidden, naming the verb and resource.

    The service account gets a real bound token through the TokenRequest API
    (signed by the plane's service-account key) and a Role that grants only
    `get` on configmaps. Listing them is Forbidden, and the message says so.
    """
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "reader", "namespace": namespace},
        }
    )
    await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "get-only", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        }
    )
    await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "reader-get-only", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "get-only",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        }
    )
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "visible", "namespace": namespace},
        }
    )
    token = await k8s.create_subresource(
        kinds.ServiceAccount,
        "reader",
        "token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
        namespace=namespace,
    )
    path = control_plane.kubeconfig_for_token(token["status"]["token"], name=f"{namespace}-sa")
    async with Client(load_kubeconfig(str(path))) as limited:
        got = await limited.get(kinds.ConfigMap, "visible", namespace=namespace)
        assert got["metadata"]["name"] == "visible"
        with pytest.raises(Forbidden) as info:
            await limited.list(kinds.ConfigMap, namespace=namespace)
    message = str(info.value)
    assert f"system:serviceaccount:{namespace}:reader" in message
    assert '"list"' in message or "list" in message.split("cannot", 1)[1]
    assert "configmaps" in message
    assert info.value.code == 403
