"""Optimistic concurrency and server-side apply, as the real server enforces them."""

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.client.errors import Conflict, Invalid, UnsupportedMediaType
from setpoint.client.patch import ApplyPatch, JsonPatch, StrategicMergePatch, json_pointer


def cm(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


async def test_stale_resource_version_conflicts(k8s: Client, namespace: str) -> None:
    """An update carrying a stale resourceVersion is refused with Conflict, losing nothing.

    Two writers read the same version; the first update wins, the second gets
    Conflict, and the first writer's change is still there.
    """
    await k8s.create(cm("shared", namespace, owner="none"))
    a = await k8s.get(kinds.ConfigMap, "shared", namespace=namespace)
    b = await k8s.get(kinds.ConfigMap, "shared", namespace=namespace)
    a["data"]["owner"] = "a"
    await k8s.update(a)
    b["data"]["owner"] = "b"
    with pytest.raises(Conflict) as info:
        await k8s.update(b)
    assert info.value.code == 409
    assert "modified" in str(info.value)
    assert (await k8s.get(kinds.ConfigMap, "shared", namespace=namespace))["data"] == {"owner": "a"}


async def test_server_side_apply_conflict_and_force(k8s: Client, namespace: str) -> None:
    """Server-side apply: a second manager's conflicting field is refused; force takes it over.

    The Conflict names the field and the manager that owns it. Applying again
    with force=True moves ownership to the second manager.
    """
    await k8s.apply(cm("applied", namespace, color="red"), field_manager="alpha")
    with pytest.raises(Conflict) as info:
        await k8s.apply(cm("applied", namespace, color="blue"), field_manager="beta")
    causes = info.value.causes
    assert any(c.field == ".data.color" for c in causes), causes
    assert "alpha" in str(info.value)

    forced = await k8s.apply(
        cm("applied", namespace, color="blue"), field_manager="beta", force=True
    )
    assert forced["data"]["color"] == "blue"
    managers = {m["manager"] for m in forced["metadata"]["managedFields"]}
    assert "beta" in managers


async def test_json_patch_test_operation_guards_the_write(k8s: Client, namespace: str) -> None:
    """A JSON patch with a failing `test` operation applies nothing (422 Invalid)."""
    await k8s.create(cm("guarded", namespace, v="1"))
    with pytest.raises(Invalid):
        await k8s.patch(
            kinds.ConfigMap,
            "guarded",
            JsonPatch(
                [
                    {"op": "test", "path": json_pointer("data", "v"), "value": "0"},
                    {"op": "replace", "path": json_pointer("data", "v"), "value": "2"},
                ]
            ),
            namespace=namespace,
        )
    ok = await k8s.patch(
        kinds.ConfigMap,
        "guarded",
        JsonPatch(
            [
                {"op": "test", "path": json_pointer("data", "v"), "value": "1"},
                {"op": "replace", "path": json_pointer("data", "v"), "value": "2"},
            ]
        ),
        namespace=namespace,
    )
    assert ok["data"]["v"] == "2"


async def test_strategic_merge_patch_merges_lists_by_key(k8s: Client, namespace: str) -> None:
    """A strategic merge patch on a built-in kind merges list items by their merge key."""
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 80}]},
    }
    await k8s.create(svc)
    patched = await k8s.patch(
        kinds.Service,
        "web",
        StrategicMergePatch({"spec": {"ports": [{"name": "https", "port": 443}]}}),
        namespace=namespace,
    )
    assert sorted(p["port"] for p in patched["spec"]["ports"]) == [80, 443]


async def test_strategic_merge_on_custom_resource_is_unsupported(
    k8s: Client, namespace: str, widget_crd: GroupVersionKind
) -> None:
    """Strategic merge on a custom resource is refused with 415, a typed error."""
    await k8s.create(
        {
            "apiVersion": "test.setpoint.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "namespace": namespace},
            "spec": {"size": 1},
        }
    )
    with pytest.raises(UnsupportedMediaType):
        await k8s.patch(
            widget_crd, "w", StrategicMergePatch({"spec": {"size": 2}}), namespace=namespace
        )


async def test_apply_patch_object_form(k8s: Client, namespace: str) -> None:
    """patch() with an ApplyPatch creates the object when it does not exist yet."""
    created = await k8s.patch(
        kinds.ConfigMap,
        "via-patch",
        ApplyPatch(cm("via-patch", namespace, a="b")),
        namespace=namespace,
        field_manager="tester",
    )
    assert created["data"] == {"a": "b"}
