"""Parity: JSON patch, merge patch, strategic merge patch and server-side apply."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from setpoint.api import kinds
from setpoint.client.errors import Conflict, Invalid, UnsupportedMediaType
from setpoint.client.patch import JsonPatch, MergePatch, StrategicMergePatch, json_pointer

if TYPE_CHECKING:
    from tests._support.parity import Api


async def test_json_patch_test_failure_applies_nothing(crds: Api) -> None:
    """A JSON patch whose `test` fails is 422 Invalid and changes nothing; a passing one applies.

    The server's json-patch library is lenient in two ways the fake copies: a
    `test` of a missing path compares against null, and `replace` of a missing
    member adds it. Removing a missing path is refused.
    """
    c, ns = crds.client, crds.namespace
    made = await c.create(crds.obj(crds.gizmo, "jp", spec={"v": 1, "list": [1, 2, 3]}))
    with pytest.raises(Invalid):
        await c.patch(
            crds.gizmo,
            "jp",
            JsonPatch(
                [
                    {"op": "test", "path": "/spec/v", "value": 0},
                    {"op": "replace", "path": "/spec/v", "value": 2},
                ]
            ),
            namespace=ns,
        )
    unchanged = await c.get(crds.gizmo, "jp", namespace=ns)
    assert unchanged["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]

    lenient = await c.patch(
        crds.gizmo,
        "jp",
        JsonPatch(
            [
                {"op": "test", "path": "/spec/missing", "value": None},
                {"op": "replace", "path": "/spec/added", "value": "yes"},
                {"op": "add", "path": "/spec/list/-", "value": 4},
                {"op": "replace", "path": "/spec/list/-1", "value": 40},
                {"op": "move", "from": "/spec/v", "path": "/spec/moved"},
            ]
        ),
        namespace=ns,
    )
    assert lenient["spec"] == {"added": "yes", "list": [1, 2, 3, 40], "moved": 1}
    for bad in (
        [{"op": "remove", "path": "/spec/nothere"}],
        [{"op": "add", "path": "/spec/a/b", "value": 1}],
        [{"op": "test", "path": "/spec/missing", "value": 1}],
        [{"op": "add", "path": "/spec/list/9", "value": 1}],
    ):
        with pytest.raises(Invalid):
            await c.patch(crds.gizmo, "jp", JsonPatch(bad), namespace=ns)


async def test_json_patch_guards_finalizers(api: Api) -> None:
    """The finalizer idiom: test the list, then replace it; a concurrent change makes it fail."""
    c, ns = api.client, api.namespace
    await c.create(api.cm("fin", finalizers=["a.io/one"]))
    path = json_pointer("metadata", "finalizers")
    added = await c.patch(
        kinds.ConfigMap,
        "fin",
        JsonPatch(
            [
                {"op": "test", "path": path, "value": ["a.io/one"]},
                {"op": "replace", "path": path, "value": ["a.io/one", "b.io/two"]},
            ]
        ),
        namespace=ns,
    )
    assert added["metadata"]["finalizers"] == ["a.io/one", "b.io/two"]
    with pytest.raises(Invalid):
        await c.patch(
            kinds.ConfigMap,
            "fin",
            JsonPatch([{"op": "test", "path": path, "value": ["a.io/one"]}]),
            namespace=ns,
        )
    await c.patch(
        kinds.ConfigMap, "fin", MergePatch({"metadata": {"finalizers": None}}), namespace=ns
    )


async def test_merge_patch_semantics(crds: Api) -> None:
    """A merge patch merges objects, replaces lists whole, and deletes keys set to null."""
    c, ns = crds.client, crds.namespace
    await c.create(
        crds.obj(
            crds.gizmo,
            "mp",
            metadata={"labels": {"a": "1", "b": "2"}},
            spec={"list": [1, 2, 3], "nested": {"x": 1, "y": 2}, "keep": True},
        )
    )
    patched = await c.patch(
        crds.gizmo,
        "mp",
        MergePatch(
            {
                "metadata": {"labels": {"a": None, "c": "3"}},
                "spec": {"list": [9], "nested": {"x": None, "z": {"deep": 1}}},
            }
        ),
        namespace=ns,
    )
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert patched["spec"] == {"keep": True, "list": [9], "nested": {"y": 2, "z": {"deep": 1}}}
    assert patched["metadata"]["generation"] == 2


async def test_strategic_merge_patch(crds: Api) -> None:
    """Strategic merge merges keyed lists and finalizers on built-ins, and is 415 on a CR.

    Service ports merge by port (a `$patch: delete` item removes one), a
    `$patch: replace` map replaces, finalizers merge as a set with the patch's
    entries first, and `$deleteFromPrimitiveList` removes entries.
    """
    c, ns = crds.client, crds.namespace
    await c.create(
        crds.obj(
            kinds.Service,
            "svc",
            spec={
                "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81}],
                "selector": {"x": "1"},
            },
        )
    )
    patched = await c.patch(
        kinds.Service,
        "svc",
        StrategicMergePatch(
            {
                "spec": {
                    "ports": [
                        {"port": 81, "name": "bb"},
                        {"port": 82, "name": "c"},
                        {"port": 80, "$patch": "delete"},
                    ],
                    "selector": {"$patch": "replace", "y": "2"},
                }
            }
        ),
        namespace=ns,
    )
    assert [(p["name"], p["port"]) for p in patched["spec"]["ports"]] == [("bb", 81), ("c", 82)]
    assert patched["spec"]["selector"] == {"y": "2"}

    await c.create(
        dict(crds.cm("smp", finalizers=["a/b", "c/d"], labels={"x": "1"}), data={"a": "1"})
    )
    merged = await c.patch(
        kinds.ConfigMap,
        "smp",
        StrategicMergePatch({"metadata": {"finalizers": ["e/f"], "labels": {"x": None}}}),
        namespace=ns,
    )
    assert merged["metadata"]["finalizers"] == ["e/f", "a/b", "c/d"]
    assert "labels" not in merged["metadata"]
    pruned = await c.patch(
        kinds.ConfigMap,
        "smp",
        StrategicMergePatch({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/b"]}}),
        namespace=ns,
    )
    assert pruned["metadata"]["finalizers"] == ["e/f", "c/d"]
    replaced = await c.patch(
        kinds.ConfigMap,
        "smp",
        StrategicMergePatch({"data": {"$patch": "replace", "z": "9"}}),
        namespace=ns,
    )
    assert replaced["data"] == {"z": "9"}
    await c.patch(
        kinds.ConfigMap, "smp", MergePatch({"metadata": {"finalizers": None}}), namespace=ns
    )

    await c.create(crds.obj(crds.gizmo, "g", spec={}))
    with pytest.raises(UnsupportedMediaType):
        await c.patch(crds.gizmo, "g", StrategicMergePatch({"spec": {"x": 1}}), namespace=ns)


async def test_server_side_apply_ownership(crds: Api) -> None:
    """Server-side apply: create, drop fields no longer applied, conflict, share, force.

    A manager that re-applies without a field removes it (labels included). A
    second manager changing an owned field gets Conflict naming the field and
    the owner; applying the same value shares ownership without conflict;
    force takes the field over. On the main resource, status is ignored; on
    the status subresource, only status is applied.
    """
    c = crds.client
    first = await c.apply(
        crds.obj(crds.gizmo, "ssa", metadata={"labels": {"x": "1"}}, spec={"a": 1, "b": [1, 2]}),
        field_manager="m1",
    )
    assert first["spec"] == {"a": 1, "b": [1, 2]}
    second = await c.apply(crds.obj(crds.gizmo, "ssa", spec={"a": 2}), field_manager="m1")
    assert second["spec"] == {"a": 2}
    assert "labels" not in second["metadata"]

    with pytest.raises(Conflict) as info:
        await c.apply(crds.obj(crds.gizmo, "ssa", spec={"a": 3}), field_manager="m2")
    assert [(x.field, x.reason) for x in info.value.causes] == [(".spec.a", "FieldManagerConflict")]
    assert (
        info.value.status["message"] == 'Apply failed with 1 conflict: conflict with "m1": .spec.a'
    )

    shared = await c.apply(crds.obj(crds.gizmo, "ssa", spec={"a": 2, "c": 1}), field_manager="m2")
    assert shared["spec"] == {"a": 2, "c": 1}
    forced = await c.apply(
        crds.obj(crds.gizmo, "ssa", spec={"a": 5, "c": 1}), field_manager="m2", force=True
    )
    assert forced["spec"]["a"] == 5

    ignored = await c.apply(crds.obj(crds.gizmo, "ssa", status={"phase": "x"}), field_manager="m3")
    assert "status" not in ignored
    status = await c.apply(
        crds.obj(crds.gizmo, "ssa", status={"phase": "y"}), field_manager="m3", subresource="status"
    )
    assert status["status"] == {"phase": "y"}
    assert status["spec"]["a"] == 5

    stale = crds.obj(crds.gizmo, "ssa", metadata={"resourceVersion": "1"}, spec={"a": 5})
    with pytest.raises(Conflict):
        await c.apply(stale, field_manager="m2")


async def test_apply_conflicts_with_a_plain_writer(api: Api) -> None:
    """Fields set by create or update belong to that writer: applying another value conflicts."""
    c = api.client
    await c.create(dict(api.cm("mixed"), data={"color": "red"}), field_manager="creator")
    with pytest.raises(Conflict) as info:
        await c.apply(dict(api.cm("mixed"), data={"color": "blue"}), field_manager="applier")
    assert [x.field for x in info.value.causes] == [".data.color"]
    assert "creator" in info.value.status["message"]


async def test_apply_says_whether_it_created(api: Api) -> None:
    """An apply that creates answers 201, one that finds the object 200, changed or not.

    apply_child reports CREATED from this answer instead of a GET before the apply. A
    second controller reference is refused as Invalid (422), which apply_child turns into
    AlreadyOwned when the cache wrongly said the child did not exist.
    """
    c = api.client
    desired = dict(api.cm("applied"), data={"a": "1"})
    created = await c.apply_outcome(desired, field_manager="m1")
    assert created.created is True
    assert created.object["data"] == {"a": "1"}
    same = await c.apply_outcome(desired, field_manager="m1")
    assert same.created is False
    assert (
        same.object["metadata"]["resourceVersion"]
        == (created.object["metadata"]["resourceVersion"])
    )
    changed = await c.apply_outcome(dict(desired, data={"a": "2"}), field_manager="m1")
    assert changed.created is False
    assert changed.object["data"] == {"a": "2"}
    assert await c.apply(desired, field_manager="m1") == (
        await c.get(kinds.ConfigMap, "applied", namespace=api.namespace)
    )

    def controller(owner: dict[str, Any]) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }

    # Real owners: the garbage collector deletes a dependent whose owner does not exist.
    one = await c.create(api.cm("one"))
    two = await c.create(api.cm("two"))
    owned = api.cm("owned", ownerReferences=[controller(one)])
    assert (await c.apply_outcome(owned, field_manager="owner-one")).created is True
    second = api.cm("owned", ownerReferences=[controller(two)])
    with pytest.raises(Invalid) as info:
        await c.apply_outcome(second, field_manager="owner-two", force=True)
    assert "Only one reference can have Controller set to true" in str(info.value)
