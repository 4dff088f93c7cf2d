"""CRUD through the client on built-in kinds and on a custom resource, against a real server."""

import base64
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client, Preconditions
from setpoint.client.errors import AlreadyExists, Conflict, Invalid, NotFound, UnknownKind
from setpoint.client.patch import MergePatch
from setpoint.testing.waits import eventually


def configmap(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


async def test_configmap_lifecycle(k8s: Client, namespace: str) -> None:
    """ConfigMap create, get, update, delete.

    The server assigns uid and resourceVersion on create, a get returns what was
    stored, an update changes data and resourceVersion, and a delete makes the
    next get raise NotFound.
    """
    created = await k8s.create(configmap("settings", namespace, {"a": "1"}))
    assert created["metadata"]["uid"]
    rv1 = created["metadata"]["resourceVersion"]

    fetched = await k8s.get(kinds.ConfigMap, "settings", namespace=namespace)
    assert fetched["data"] == {"a": "1"}
    assert fetched["kind"] == "ConfigMap"

    fetched["data"]["b"] = "2"
    updated = await k8s.update(fetched)
    assert updated["data"] == {"a": "1", "b": "2"}
    assert updated["metadata"]["resourceVersion"] != rv1

    with pytest.raises(AlreadyExists):
        await k8s.create(configmap("settings", namespace, {}))

    await k8s.delete(kinds.ConfigMap, "settings", namespace=namespace)
    with pytest.raises(NotFound) as info:
        await k8s.get(kinds.ConfigMap, "settings", namespace=namespace)
    assert "settings" in str(info.value)


async def test_secret_roundtrip(k8s: Client, namespace: str) -> None:
    """Secret stringData is stored base64-encoded in data, as the server converts it."""
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": namespace},
            "stringData": {"password": "hunter2"},
        }
    )
    secret = await k8s.get(kinds.Secret, "creds", namespace=namespace)
    assert base64.b64decode(secret["data"]["password"]) == b"hunter2"
    patched = await k8s.patch(
        kinds.Secret,
        "creds",
        MergePatch({"data": {"user": base64.b64encode(b"admin").decode()}}),
        namespace=namespace,
    )
    assert set(patched["data"]) == {"password", "user"}


async def test_namespace_lifecycle(k8s: Client) -> None:
    """A cluster-scoped Namespace is created, read, labelled and deleted.

    Deletion goes through the namespace controller of kube-controller-manager:
    the namespace passes through Terminating and disappears.
    """
    name = "crud-namespace-lifecycle"
    await k8s.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    ns = await k8s.get(kinds.Namespace, name)
    assert ns["status"]["phase"] == "Active"
    with pytest.raises(ValueError, match="cluster-scoped"):
        await k8s.get(kinds.Namespace, name, namespace="default")
    await k8s.delete(kinds.Namespace, name)

    async def gone() -> bool:
        try:
            await k8s.get(kinds.Namespace, name)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=60, description=f"namespace {name} deleted")


async def test_custom_resource_crud_and_subresources(
    k8s: Client, namespace: str, widget_crd: GroupVersionKind
) -> None:
    """A custom resource: CRUD, schema validation, status and scale subresources.

    The RESTMapper finds a kind whose CRD was installed after the client started
    (discovery is refreshed on a miss). A spec update ignores status and a status
    update ignores spec, as the status subresource promises.
    """
    widget = {
        "apiVersion": "test.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"size": 3, "replicas": 1},
    }
    created: dict[str, Any] = await k8s.create(widget)
    assert created["spec"]["size"] == 3

    with pytest.raises(Invalid) as info:
        await k8s.create(
            {**widget, "metadata": {"name": "w2", "namespace": namespace}, "spec": {"size": 0}}
        )
    assert any(c.field == "spec.size" for c in info.value.causes), info.value.causes

    created["status"] = {"phase": "Ready", "replicas": 1}
    created["spec"]["size"] = 99  # must be ignored by the status subresource
    after_status = await k8s.replace_status(created)
    assert after_status["status"]["phase"] == "Ready"
    assert after_status["spec"]["size"] == 3

    after_status["spec"]["size"] = 4
    after_status["status"]["phase"] = "Ignored"  # must be ignored by a main-resource update
    after_spec = await k8s.update(after_status)
    assert after_spec["spec"]["size"] == 4
    assert after_spec["status"]["phase"] == "Ready"

    scale = await k8s.set_scale(widget_crd, "w1", 5, namespace=namespace)
    assert scale["spec"]["replicas"] == 5
    assert (await k8s.get(widget_crd, "w1", namespace=namespace))["spec"]["replicas"] == 5
    assert (await k8s.get_scale(widget_crd, "w1", namespace=namespace))["status"]["replicas"] == 1

    listed = await k8s.list(widget_crd, namespace=namespace)
    assert [w["metadata"]["name"] for w in listed] == ["w1"]
    await k8s.delete(widget_crd, "w1", namespace=namespace)
    with pytest.raises(NotFound):
        await k8s.get(widget_crd, "w1", namespace=namespace)


async def test_unknown_kind_is_reported(k8s: Client) -> None:
    """A kind the server does not serve raises UnknownKind that names it and hints at the CRD."""
    with pytest.raises(UnknownKind) as info:
        await k8s.get(GroupVersionKind("nope.example.com", "v1", "Gadget"), "x", namespace="d")
    message = str(info.value)
    assert "Gadget" in message and "nope.example.com" in message
    assert "CustomResourceDefinition" in message


async def test_dry_run_writes_nothing(k8s: Client, namespace: str) -> None:
    """dry_run=True validates and returns the would-be object without persisting it."""
    result = await k8s.create(configmap("dry", namespace, {"k": "v"}), dry_run=True)
    assert result["data"] == {"k": "v"}
    with pytest.raises(NotFound):
        await k8s.get(kinds.ConfigMap, "dry", namespace=namespace)


async def test_delete_collection_and_preconditions(k8s: Client, namespace: str) -> None:
    """delete_collection removes every matching object; a UID precondition guards a delete."""
    for i in range(3):
        cm = configmap(f"c{i}", namespace, {})
        cm["metadata"]["labels"] = {"batch": "yes" if i < 2 else "no"}
        await k8s.create(cm)
    with pytest.raises(Conflict):
        await k8s.delete(
            kinds.ConfigMap,
            "c2",
            namespace=namespace,
            preconditions=Preconditions(uid="not-the-uid"),
        )
    await k8s.delete_collection(kinds.ConfigMap, namespace=namespace, labels={"batch": "yes"})
    remaining = await k8s.list(kinds.ConfigMap, namespace=namespace, labels="batch")
    assert [c["metadata"]["name"] for c in remaining] == ["c2"]
