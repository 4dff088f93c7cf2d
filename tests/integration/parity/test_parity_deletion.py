"""Parity: deletionTimestamp and finalizers, cascading deletion, namespace termination."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from setpoint.api import kinds
from setpoint.client.errors import AlreadyExists, Forbidden, Invalid, NotFound
from setpoint.client.patch import JsonPatch, MergePatch
from setpoint.testing.waits import eventually

if TYPE_CHECKING:
    from tests._support.parity import Api

FINALIZER = "parity.setpoint.dev/cleanup"


async def test_finalizer_keeps_object_until_removed(crds: Api) -> None:
    """Delete marks an object with finalizers; removing the last finalizer deletes it.

    The marked object has deletionTimestamp, deletionGracePeriodSeconds 0, a
    generation bumped by one and a new resourceVersion, and is still readable.
    Deleting it again changes nothing. Removing the last finalizer returns
    the object without finalizers, after which it is gone.
    """
    c, ns = crds.client, crds.namespace
    made = await c.create(
        crds.obj(crds.gizmo, "held", metadata={"finalizers": [FINALIZER]}, spec={"a": 1})
    )
    marked = await c.delete(crds.gizmo, "held", namespace=ns)
    meta = marked["metadata"]
    assert meta["deletionTimestamp"]
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == made["metadata"]["generation"] + 1
    assert int(meta["resourceVersion"]) > int(made["metadata"]["resourceVersion"])
    assert meta["finalizers"] == [FINALIZER]
    again = await c.delete(crds.gizmo, "held", namespace=ns)
    assert again["metadata"]["resourceVersion"] == meta["resourceVersion"]
    still = await c.get(crds.gizmo, "held", namespace=ns)
    assert still["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]

    released = await c.patch(
        crds.gizmo,
        "held",
        JsonPatch(
            [
                {"op": "test", "path": "/metadata/finalizers", "value": [FINALIZER]},
                {"op": "remove", "path": "/metadata/finalizers"},
            ]
        ),
        namespace=ns,
    )
    assert "finalizers" not in released["metadata"]
    with pytest.raises(NotFound):
        await c.get(crds.gizmo, "held", namespace=ns)


async def test_no_new_finalizers_on_a_deleting_object(crds: Api) -> None:
    """A deleting object refuses new finalizers (422 Invalid, FieldValueForbidden).

    Adding one, or swapping one for another, is refused through update and
    merge patch alike; other changes (spec) are still allowed, and so is
    removing finalizers.
    """
    c, ns = crds.client, crds.namespace
    await c.create(crds.obj(crds.gizmo, "closing", metadata={"finalizers": [FINALIZER]}, spec={}))
    marked = await c.delete(crds.gizmo, "closing", namespace=ns)
    marked["metadata"]["finalizers"] = [FINALIZER, "parity.setpoint.dev/late"]
    with pytest.raises(Invalid) as info:
        await c.update(marked)
    cause = info.value.causes[0]
    assert (cause.field, cause.reason) == ("metadata.finalizers", "FieldValueForbidden")
    assert 'found new finalizers []string{"parity.setpoint.dev/late"}' in cause.message
    assert info.value.status["message"].startswith(
        'Gizmo.test.setpoint.dev "closing" is invalid: metadata.finalizers: Forbidden: '
        "no new finalizers can be added if the object is being deleted"
    )
    with pytest.raises(Invalid):
        await c.patch(
            crds.gizmo,
            "closing",
            MergePatch({"metadata": {"finalizers": ["parity.setpoint.dev/other"]}}),
            namespace=ns,
        )
    respecced = await c.patch(crds.gizmo, "closing", MergePatch({"spec": {"b": 2}}), namespace=ns)
    assert respecced["spec"] == {"b": 2}
    await c.patch(
        crds.gizmo, "closing", MergePatch({"metadata": {"finalizers": None}}), namespace=ns
    )
    with pytest.raises(NotFound):
        await c.get(crds.gizmo, "closing", namespace=ns)


async def test_create_over_a_deleting_object(api: Api) -> None:
    """Creating a name that is being deleted is AlreadyExists, saying it is being deleted."""
    c, ns = api.client, api.namespace
    await c.create(api.cm("phoenix", finalizers=[FINALIZER]))
    await c.delete(kinds.ConfigMap, "phoenix", namespace=ns)
    with pytest.raises(AlreadyExists) as info:
        await c.create(api.cm("phoenix"))
    assert info.value.status["message"] == (
        'object is being deleted: configmaps "phoenix" already exists'
    )
    await c.patch(
        kinds.ConfigMap, "phoenix", MergePatch({"metadata": {"finalizers": None}}), namespace=ns
    )


def _owned(api: Api, name: str, owner: dict[str, Any], *, block: bool = False) -> dict[str, Any]:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block:
        ref["blockOwnerDeletion"] = True
    return api.cm(name, ownerReferences=[ref])


async def _names(api: Api, prefix: str) -> set[str]:
    listed = await api.client.list(kinds.ConfigMap, namespace=api.namespace)
    return {o["metadata"]["name"] for o in listed if o["metadata"]["name"].startswith(prefix)}


async def test_background_deletion_collects_dependents(api: Api) -> None:
    """Deleting an owner removes its dependents; one with a live co-owner only loses the ref.

    The fake collects at once, the server's garbage collector shortly after;
    both end in the same state.
    """
    c = api.client
    owner = await c.create(api.cm("bg-owner"))
    other = await c.create(api.cm("bg-other"))
    await c.create(_owned(api, "bg-dep", owner))
    shared = _owned(api, "bg-shared", owner)
    shared["metadata"]["ownerReferences"].append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "bg-other",
            "uid": other["metadata"]["uid"],
        }
    )
    await c.create(shared)
    await c.delete(kinds.ConfigMap, "bg-owner", namespace=api.namespace)
    await eventually(
        lambda: _gone(api, {"bg-other", "bg-shared"}),
        timeout=30,
        description="dependents collected",
    )

    # The server's collector deletes bg-dep and strips bg-shared's reference in
    # separate steps, in no fixed order: wait for the second one too.
    async def only_other_owner_left() -> bool:
        kept = await c.get(kinds.ConfigMap, "bg-shared", namespace=api.namespace)
        return [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["bg-other"]

    await eventually(
        only_other_owner_left,
        timeout=30,
        description="the deleted owner's reference removed from the co-owned dependent",
    )


async def _gone(api: Api, expected: set[str]) -> bool:
    return await _names(api, "bg-") == expected


async def test_foreground_and_orphan_propagation(api: Api) -> None:
    """Foreground and orphan propagation behave as the real server's.

    Foreground deletion holds the owner (foregroundDeletion finalizer) until dependents go;
    orphan deletion (orphan finalizer) strips the owner references and keeps the dependents.
    """
    c, ns = api.client, api.namespace
    owner = await c.create(api.cm("fg-owner"))
    await c.create(_owned(api, "fg-dep", owner, block=True))
    marked = await c.delete(
        kinds.ConfigMap, "fg-owner", namespace=ns, propagation_policy="Foreground"
    )
    assert "foregroundDeletion" in marked["metadata"]["finalizers"]

    async def foreground_done() -> bool:
        return not await _names(api, "fg-")

    await eventually(foreground_done, timeout=30, description="foreground deletion finished")

    owner2 = await c.create(api.cm("or-owner"))
    await c.create(_owned(api, "or-dep", owner2))
    marked2 = await c.delete(kinds.ConfigMap, "or-owner", namespace=ns, propagation_policy="Orphan")
    assert "orphan" in marked2["metadata"]["finalizers"]

    async def orphaned() -> bool:
        names = await _names(api, "or-")
        if names != {"or-dep"}:
            return False
        dep = await c.get(kinds.ConfigMap, "or-dep", namespace=ns)
        return "ownerReferences" not in dep["metadata"]

    await eventually(orphaned, timeout=30, description="orphan deletion finished")


async def test_terminating_namespace_refuses_new_content(api: Api) -> None:
    """A deleted namespace is Terminating until its content is gone, and refuses new objects.

    The namespace keeps its `kubernetes` finalizer in spec while its content is
    removed; a ConfigMap with a finalizer holds it there. Creating in it is
    403 Forbidden with reason NamespaceTerminating. Once the last finalizer of
    the content is removed, the namespace goes. (The fake removes content
    synchronously, so without the held ConfigMap it would be gone at once.)
    """
    c = api.client
    name = f"parity-term-{uuid.uuid4().hex[:6]}"
    made = await c.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert made["status"] == {"phase": "Active"}
    assert made["spec"] == {"finalizers": ["kubernetes"]}
    assert made["metadata"]["labels"] == {"kubernetes.io/metadata.name": name}
    inside = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "inside", "namespace": name, "finalizers": [FINALIZER]},
    }
    await c.create(inside)
    marked = await c.delete(kinds.Namespace, name)
    assert marked["status"]["phase"] == "Terminating"
    assert marked["metadata"]["deletionTimestamp"]
    late = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "late", "namespace": name},
    }
    with pytest.raises(Forbidden) as info:
        await c.create(late)
    assert info.value.status["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {name} '
        "because it is being terminated"
    )
    assert info.value.causes[0].reason == "NamespaceTerminating"

    async def content_deleting() -> bool:
        held = await c.get(kinds.ConfigMap, "inside", namespace=name)
        return bool(held["metadata"].get("deletionTimestamp"))

    await eventually(content_deleting, timeout=30, description="namespace content deleted")
    await c.patch(
        kinds.ConfigMap, "inside", MergePatch({"metadata": {"finalizers": None}}), namespace=name
    )

    async def gone() -> bool:
        try:
            await c.get(kinds.Namespace, name)
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=60, description=f"namespace {name} removed")
