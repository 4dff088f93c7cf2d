"""FakeClient: generation, status subresource, finalizers, garbage collection, namespaces."""

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.client.errors import AlreadyExists, Conflict, Forbidden, Invalid, NotFound
from setpoint.client.patch import JsonPatch, MergePatch
from setpoint.testing.fake import FakeClient, FakeOptions
from tests._support.stored import stored

WITH_STATUS = GroupVersionKind("fake.example.com", "v1", "Gizmo")
WITHOUT_STATUS = GroupVersionKind("fake.example.com", "v1", "Doodad")
RESOURCES = [
    ResourceInfo(WITH_STATUS, "gizmos", True, frozenset({"status"})),
    ResourceInfo(WITHOUT_STATUS, "doodads", True),
]
FINALIZER = "fake.example.com/cleanup"


def obj(kind: GroupVersionKind, name: str, **fields: object) -> dict[str, Any]:
    metadata = {"name": name, "namespace": "ns", **fields.pop("metadata", {})}  # type: ignore[dict-item]
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata, **fields}


def cm(name: str, namespace: str = "ns", **metadata: object) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **metadata},
    }


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient(resources=RESOURCES)


async def test_generation_with_status_subresource(fake: FakeClient) -> None:
    made = await fake.create(obj(WITH_STATUS, "g", spec={"a": 1}, status={"dropped": True}))
    assert made["metadata"]["generation"] == 1 and "status" not in made
    made["metadata"]["labels"] = {"l": "1"}
    made = await fake.update(made)
    assert made["metadata"]["generation"] == 1
    made["status"] = {"s": 1}
    ignored = await fake.update(made)
    assert "status" not in ignored
    assert ignored["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    status = await fake.replace_status(made)
    assert status["status"] == {"s": 1} and status["metadata"]["generation"] == 1
    status["spec"] = {"a": 2}
    status["status"] = {"s": "ignored"}
    respecced = await fake.update(status)
    assert respecced["metadata"]["generation"] == 2
    assert respecced["status"] == {"s": 1}


async def test_generation_without_status_subresource(fake: FakeClient) -> None:
    made = await fake.create(obj(WITHOUT_STATUS, "d", spec={"a": 1}, status={"kept": True}))
    assert made["status"] == {"kept": True}
    made["status"] = {"kept": False}
    changed = await fake.update(made)
    assert changed["metadata"]["generation"] == 2
    with pytest.raises(NotFound):
        await fake.replace_status(changed)
    changed["metadata"]["annotations"] = {"a": "b"}
    assert (await fake.update(changed))["metadata"]["generation"] == 2


async def test_builtin_generation_rules(fake: FakeClient) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"replicas": 1},
        "status": {"replicas": 5},
    }
    made: dict[str, Any] = await fake.create(deployment)
    assert made["metadata"]["generation"] == 1 and "status" not in made
    for patch, generation in (
        ({"metadata": {"labels": {"a": "b"}}}, 1),
        ({"metadata": {"annotations": {"a": "b"}}}, 2),
        ({"spec": {"replicas": 2}}, 3),
    ):
        result = await fake.patch(kinds.Deployment, "d", MergePatch(patch), namespace="ns")
        assert result["metadata"]["generation"] == generation
    kept = await fake.create(
        {**cm("c"), "metadata": {"name": "c", "namespace": "ns", "generation": 4}}
    )
    assert kept["metadata"]["generation"] == 4
    kept["metadata"]["generation"] = 9
    kept["data"] = {"x": "y"}
    assert (await fake.update(kept))["metadata"]["generation"] == 4
    pod: dict[str, Any] = await fake.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"x": 1},
        }
    )
    assert pod["metadata"]["generation"] == 1


async def test_stale_versions_conflict_everywhere(fake: FakeClient) -> None:
    made = await fake.create(obj(WITH_STATUS, "g", spec={"a": 1}))
    made["spec"] = {"a": 2}
    await fake.update(made)
    for write in (
        fake.update(made),
        fake.replace_status(made),
        fake.patch(
            WITH_STATUS,
            "g",
            MergePatch({"metadata": {"resourceVersion": made["metadata"]["resourceVersion"]}}),
            namespace="ns",
        ),
        fake.apply(
            {**obj(WITH_STATUS, "g"), "metadata": {**made["metadata"], "managedFields": None}},
            field_manager="x",
        ),
    ):
        with pytest.raises(Conflict):
            await write


async def test_finalizers_hold_deletion(fake: FakeClient) -> None:
    made = await fake.create(obj(WITH_STATUS, "g", metadata={"finalizers": [FINALIZER]}, spec={}))
    marked = await fake.delete(WITH_STATUS, "g", namespace="ns")
    meta = marked["metadata"]
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == 2
    assert (await fake.delete(WITH_STATUS, "g", namespace="ns"))["metadata"][
        "resourceVersion"
    ] == meta["resourceVersion"]
    with pytest.raises(AlreadyExists, match="object is being deleted"):
        await fake.create(obj(WITH_STATUS, "g"))
    marked["metadata"]["finalizers"] = [FINALIZER, "other/late"]
    with pytest.raises(Invalid) as info:
        await fake.update(marked)
    assert info.value.causes[0].reason == "FieldValueForbidden"
    with pytest.raises(Invalid):
        await fake.patch(
            WITH_STATUS,
            "g",
            JsonPatch([{"op": "add", "path": "/metadata/finalizers/-", "value": "x/y"}]),
            namespace="ns",
        )
    # The deletion timestamp cannot be removed by an update.
    current = await fake.get(WITH_STATUS, "g", namespace="ns")
    del current["metadata"]["deletionTimestamp"]
    assert (await fake.update(current))["metadata"]["deletionTimestamp"] == meta[
        "deletionTimestamp"
    ]
    released = await fake.patch(
        WITH_STATUS, "g", MergePatch({"metadata": {"finalizers": None}}), namespace="ns"
    )
    assert "finalizers" not in released["metadata"]
    assert released["metadata"]["uid"] == made["metadata"]["uid"]
    assert fake.lookup(WITH_STATUS, "g", namespace="ns") is None


async def test_background_garbage_collection(fake: FakeClient) -> None:
    owner = await fake.create(cm("owner"))
    co_owner = await fake.create(cm("co-owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    co_ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "co-owner",
        "uid": co_owner["metadata"]["uid"],
    }
    await fake.create(cm("child", ownerReferences=[ref]))
    await fake.create(
        cm(
            "grandchild",
            ownerReferences=[
                {
                    **ref,
                    "name": "child",
                    "uid": stored(fake, kinds.ConfigMap, "child", namespace="ns")["metadata"][
                        "uid"
                    ],
                }
            ],
        )
    )
    await fake.create(cm("shared", ownerReferences=[ref, co_ref]))
    await fake.create(cm("held", ownerReferences=[ref], finalizers=[FINALIZER]))
    await fake.create(cm("stranger", ownerReferences=[{**ref, "uid": "never-existed"}]))
    await fake.delete(kinds.ConfigMap, "owner", namespace="ns")
    names = {o["metadata"]["name"] for o in fake.contents(kinds.ConfigMap)}
    assert names == {"co-owner", "shared", "held", "stranger"}
    assert stored(fake, kinds.ConfigMap, "shared", namespace="ns")["metadata"][
        "ownerReferences"
    ] == [co_ref]
    assert stored(fake, kinds.ConfigMap, "held", namespace="ns")["metadata"]["deletionTimestamp"]


async def test_foreground_waits_for_dependents(fake: FakeClient) -> None:
    owner = await fake.create(cm("owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    await fake.create(cm("free", ownerReferences=[ref]))
    await fake.create(cm("held", ownerReferences=[ref], finalizers=[FINALIZER]))
    marked = await fake.delete(
        kinds.ConfigMap, "owner", namespace="ns", propagation_policy="Foreground"
    )
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert fake.lookup(kinds.ConfigMap, "free", namespace="ns") is None
    assert fake.lookup(kinds.ConfigMap, "owner", namespace="ns") is not None
    await fake.patch(
        kinds.ConfigMap, "held", MergePatch({"metadata": {"finalizers": None}}), namespace="ns"
    )
    assert fake.contents(kinds.ConfigMap) == []


async def test_orphan_keeps_dependents(fake: FakeClient) -> None:
    owner = await fake.create(cm("owner", finalizers=[FINALIZER]))
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    await fake.create(cm("dep", ownerReferences=[ref]))
    marked = await fake.delete(
        kinds.ConfigMap, "owner", namespace="ns", propagation_policy="Orphan"
    )
    assert "orphan" in marked["metadata"]["finalizers"]
    owner_now = stored(fake, kinds.ConfigMap, "owner", namespace="ns")
    assert owner_now["metadata"]["finalizers"] == [FINALIZER]  # orphaning done, ours remains
    assert "ownerReferences" not in stored(fake, kinds.ConfigMap, "dep", namespace="ns")["metadata"]


async def test_without_garbage_collection_nothing_is_collected() -> None:
    fake = FakeClient(options=FakeOptions(garbage_collection=False))
    owner = await fake.create(cm("owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    await fake.create(cm("dep", ownerReferences=[ref]))
    await fake.delete(kinds.ConfigMap, "owner", namespace="ns")
    assert fake.lookup(kinds.ConfigMap, "dep", namespace="ns") is not None
    await fake.create(cm("fg"))
    await fake.delete(kinds.ConfigMap, "fg", namespace="ns", propagation_policy="Foreground")
    assert stored(fake, kinds.ConfigMap, "fg", namespace="ns")["metadata"]["finalizers"] == [
        "foregroundDeletion"
    ]


async def test_namespaces() -> None:
    fake = FakeClient(options=FakeOptions(require_namespaces=True))
    with pytest.raises(NotFound, match='namespaces "ns" not found'):
        await fake.create(cm("a"))
    namespace = await fake.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}}
    )
    assert namespace["spec"] == {"finalizers": ["kubernetes"]}
    await fake.create(cm("a"))
    await fake.create(cm("held", finalizers=[FINALIZER]))
    marked = await fake.delete(kinds.Namespace, "ns")
    assert marked["status"]["phase"] == "Terminating"
    assert fake.lookup(kinds.ConfigMap, "a", namespace="ns") is None
    with pytest.raises(Forbidden, match="being terminated"):
        await fake.create(cm("late"))
    await fake.patch(
        kinds.ConfigMap, "held", MergePatch({"metadata": {"finalizers": None}}), namespace="ns"
    )
    assert fake.lookup(kinds.Namespace, "ns") is None

    relaxed = FakeClient()
    assert (await relaxed.create(cm("anywhere", namespace="nowhere")))["metadata"][
        "namespace"
    ] == "nowhere"


async def test_dependent_created_after_its_owner_went_is_collected(fake: FakeClient) -> None:
    owner = await fake.create(cm("owner"))
    await fake.delete(kinds.ConfigMap, "owner", namespace="ns")
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    made = await fake.create(cm("late", ownerReferences=[ref]))
    assert made["metadata"]["name"] == "late"  # the create itself succeeds...
    assert fake.lookup(kinds.ConfigMap, "late", namespace="ns") is None  # ...then it is collected


async def test_cascades_through_generations_and_many_dependents(fake: FakeClient) -> None:
    root = await fake.create(cm("root"))
    parents = []
    for i in range(50):
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "root",
            "uid": root["metadata"]["uid"],
        }
        parents.append(await fake.create(cm(f"p{i}", ownerReferences=[ref])))
    for i, parent in enumerate(parents):
        ref = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": f"p{i}",
            "uid": parent["metadata"]["uid"],
        }
        await fake.create(cm(f"c{i}", ownerReferences=[ref]))
    await fake.create(cm("bystander"))
    await fake.delete(kinds.ConfigMap, "root", namespace="ns", propagation_policy="Foreground")
    assert [o["metadata"]["name"] for o in fake.contents(kinds.ConfigMap)] == ["bystander"]
