"""Owner references and create_or_update/create_or_patch against a real API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.owners import (
    InvalidOwner,
    controller_of,
    is_controlled_by,
    is_owned_by,
    set_controller_reference,
    set_owner_reference,
)
from setpoint.api.types import Kind
from setpoint.client import Client, NotFound
from setpoint.client.patch import JsonPatch, MergePatch, json_pointer
from setpoint.client.safe import OperationResult, apply_child, create_or_patch, create_or_update
from setpoint.testing.waits import eventually
from tests._support.request_log import RequestLog

LABEL_WRITES = 40


def cm(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


async def test_owner_references_survive_concurrent_metadata_patches(
    k8s: Client, namespace: str
) -> None:
    """Owner references set through create_or_patch survive another writer's concurrent patches.

    While our controller makes one owner the controller of a dependent and
    adds a second owner, another writer patches the dependent's metadata
    forty times with merge patches of labels, and adds a third owner
    reference with a test-guarded JSON patch just between our read and our
    write of the owner list. At the end every label and all three owner
    references are there: no write overwrote another's metadata.
    """
    owners = [await k8s.create(cm(f"owner-{i}", namespace)) for i in range(3)]
    await k8s.create(cm("dependent", namespace, v="0"))

    async def add_third_owner() -> None:
        # A well-behaved other writer adds its own owner reference: append guarded by test.
        live = await k8s.get(kinds.ConfigMap, "dependent", namespace=namespace)
        refs = live["metadata"].get("ownerReferences")
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "owner-2",
            "uid": owners[2]["metadata"]["uid"],
        }
        path = json_pointer("metadata", "ownerReferences")
        ops = [
            {"op": "test", "path": path, "value": refs},
            {"op": "add", "path": path + "/-", "value": ref}
            if refs
            else {"op": "add", "path": path, "value": [ref]},
        ]
        await k8s.patch(kinds.ConfigMap, "dependent", JsonPatch(ops), namespace=namespace)

    async def other_writer() -> None:
        for i in range(LABEL_WRITES):
            await k8s.patch(
                kinds.ConfigMap,
                "dependent",
                MergePatch({"metadata": {"labels": {f"other-{i}": "x"}}}),
                namespace=namespace,
            )

    third_added = False

    async def our_controller() -> None:
        for i in range(LABEL_WRITES // 2):

            async def mutate(obj: dict[str, Any], i: int = i) -> None:
                nonlocal third_added
                set_controller_reference(obj, owners[0])
                if i >= 5:
                    set_owner_reference(obj, owners[1])
                if i == 5 and not third_added:
                    # The other writer's owner reference lands between our read and our
                    # write, exactly when we change the list ourselves.
                    third_added = True
                    await add_third_owner()
                obj["data"]["v"] = str(i)

            await create_or_patch(k8s, cm("dependent", namespace), mutate)

    await asyncio.gather(other_writer(), our_controller())
    final = await k8s.get(kinds.ConfigMap, "dependent", namespace=namespace)
    assert {f"other-{i}" for i in range(LABEL_WRITES)} <= set(final["metadata"]["labels"])
    assert is_controlled_by(final, owners[0])
    assert is_owned_by(final, owners[1])
    assert is_owned_by(final, owners[2])
    assert len(final["metadata"]["ownerReferences"]) == 3
    assert final["data"]["v"] == str(LABEL_WRITES // 2 - 1)


async def test_deleting_the_owner_cascades_to_dependents(k8s: Client, namespace: str) -> None:
    """Dependents created with the owner helpers are garbage collected with their owner.

    A ConfigMap owner gets a dependent Secret made by create_or_update and a
    dependent ConfigMap applied by apply_child; a cluster-scoped owner (a
    ClusterRole) owns a third, namespaced dependent. Deleting each owner
    makes the garbage collector delete its dependents.
    """
    owner = await k8s.create(cm("gc-owner", namespace))
    cluster_owner = await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{namespace}-owner"},
            "rules": [],
        }
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gc-secret", "namespace": namespace},
        "stringData": {"k": "v"},
    }
    result, _ = await create_or_update(
        k8s, secret, lambda obj: set_controller_reference(obj, owner)
    )
    assert result is OperationResult.CREATED
    result, child = await apply_child(
        k8s, cm("gc-child", namespace, k="v"), field_manager="gc-test", owner=owner
    )
    assert result is OperationResult.CREATED
    assert is_controlled_by(child, owner)
    result, _ = await create_or_patch(
        k8s, cm("gc-cluster-child", namespace), lambda obj: set_owner_reference(obj, cluster_owner)
    )
    assert result is OperationResult.CREATED

    await k8s.delete(kinds.ConfigMap, "gc-owner", namespace=namespace)
    await k8s.delete(kinds.ClusterRole, f"{namespace}-owner")

    async def gone(kind: Kind[object], name: str) -> bool:
        try:
            await k8s.get(kind, name, namespace=namespace)
        except NotFound:
            return True
        return False

    await eventually(lambda: gone(kinds.Secret, "gc-secret"), timeout=60, description="secret GC")
    await eventually(lambda: gone(kinds.ConfigMap, "gc-child"), timeout=60, description="child GC")
    await eventually(
        lambda: gone(kinds.ConfigMap, "gc-cluster-child"), timeout=60, description="cluster GC"
    )


async def test_forbidden_owner_shapes_are_refused_before_any_request(
    k8s: Client, namespace: str, counted: tuple[Client, RequestLog]
) -> None:
    """A namespaced owner of a cluster-scoped object, or of another namespace's object, is refused.

    apply_child checks scope with the server's discovery data and raises
    InvalidOwner naming both objects, without writing anything.
    """
    client, log = counted
    owner = await client.create(cm("scoped-owner", namespace))
    log.clear()
    with pytest.raises(InvalidOwner, match="cluster-scoped"):
        await apply_child(
            client,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": f"{namespace}-child"},
                "rules": [],
            },
            field_manager="scope-test",
            owner=owner,
        )
    with pytest.raises(InvalidOwner, match="cross-namespace"):
        await apply_child(
            client, cm("elsewhere", "default"), field_manager="scope-test", owner=owner
        )
    assert log.writes() == []


async def test_create_or_update_and_patch_write_only_when_needed(
    k8s: Client, namespace: str, counted: tuple[Client, RequestLog]
) -> None:
    """create_or_update/create_or_patch report created, updated or unchanged; skip empty writes.

    A mutation that changes nothing sends no write. A concurrent write to an
    unrelated field makes create_or_update (guarded by resourceVersion) retry
    with a fresh read, while create_or_patch (guarded per field) applies
    without retrying; both keep the other writer's change.
    """
    client, log = counted

    def settle(obj: dict[str, Any]) -> None:
        obj.setdefault("data", {})["mode"] = "on"

    for write in (create_or_update, create_or_patch):
        name = f"cu-{write.__name__.replace('_', '-')}"
        result, _ = await write(client, cm(name, namespace), settle)
        assert result is OperationResult.CREATED
        log.clear()
        result, _ = await write(client, cm(name, namespace), settle)
        assert result is OperationResult.UNCHANGED
        assert log.writes() == []

        calls = 0

        async def mutate(obj: dict[str, Any], name: str = name) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                await k8s.patch(
                    kinds.ConfigMap,
                    name,
                    MergePatch({"metadata": {"annotations": {"other": "writer"}}}),
                    namespace=namespace,
                )
            obj["data"]["mode"] = "off"

        result, updated = await write(client, cm(name, namespace), mutate)
        assert result is OperationResult.UPDATED
        assert updated["data"]["mode"] == "off"
        assert updated["metadata"]["annotations"] == {"other": "writer"}
        assert calls == (2 if write is create_or_update else 1)
        assert controller_of(updated) is None
