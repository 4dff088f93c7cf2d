"""The fake's patch engines and its server-side apply approximation (no I/O)."""

from typing import Any

import pytest

from setpoint.testing._fake_apply import Ownership, apply_configuration, format_path, leaf_paths
from setpoint.testing._fake_patch import (
    PatchError,
    json_equal,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

DOC = {"spec": {"list": [1, 2, 3], "nested": {"x": 1}, "flag": True}}


def test_json_patch_operations() -> None:
    result = json_patch(
        DOC,
        [
            {"op": "add", "path": "/spec/list/-", "value": 4},
            {"op": "add", "path": "/spec/list/0", "value": 0},
            {"op": "remove", "path": "/spec/list/1"},
            {"op": "replace", "path": "/spec/list/-1", "value": 40},
            {"op": "copy", "from": "/spec/nested", "path": "/spec/copied"},
            {"op": "move", "from": "/spec/nested/x", "path": "/spec/moved"},
            {"op": "add", "path": "/spec/a~1b", "value": "slash"},
            {"op": "test", "path": "/spec/flag", "value": True},
        ],
    )
    assert result["spec"] == {
        "list": [0, 2, 3, 40],
        "nested": {},
        "flag": True,
        "copied": {"x": 1},
        "moved": 1,
        "a/b": "slash",
    }
    assert DOC["spec"]["list"] == [1, 2, 3]  # the input is untouched


def test_json_patch_server_leniencies() -> None:
    lenient = json_patch(
        DOC,
        [
            {"op": "test", "path": "/spec/missing", "value": None},
            {"op": "replace", "path": "/spec/added", "value": 1},
        ],
    )
    assert lenient["spec"]["added"] == 1


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "test", "path": "/spec/flag", "value": 1}],  # true is not 1
        [{"op": "test", "path": "/spec/missing", "value": 0}],
        [{"op": "remove", "path": "/spec/missing"}],
        [{"op": "add", "path": "/spec/no/parent", "value": 1}],
        [{"op": "add", "path": "/spec/list/9", "value": 1}],
        [{"op": "replace", "path": "/spec/list/3", "value": 1}],
        [{"op": "add", "path": "/spec/list/x", "value": 1}],
        [{"op": "move", "from": "/spec/missing", "path": "/spec/x"}],
        [{"op": "frob", "path": "/spec"}],
        [{"op": "add", "path": "spec"}],
        [{"op": "add", "path": "/spec/x"}],
        ["not an operation"],
    ],
)
def test_json_patch_refusals(operations: list[Any]) -> None:
    with pytest.raises(PatchError):
        json_patch(DOC, operations)


def test_json_equal_distinguishes_booleans_from_numbers() -> None:
    assert json_equal({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]})
    assert not json_equal(True, 1)
    assert not json_equal([1], [1, 2])
    assert not json_equal({"a": 1}, [1])
    assert json_equal(1, 1.0)


def test_merge_patch_rfc7386() -> None:
    result = merge_patch(
        {"a": {"b": 1, "c": 2}, "l": [1, 2], "gone": 1},
        {"a": {"b": None, "d": {"e": 1}}, "l": [3], "gone": None, "new": "x"},
    )
    assert result == {"a": {"c": 2, "d": {"e": 1}}, "l": [3], "new": "x"}
    assert merge_patch({"a": 1}, ["whole"]) == ["whole"]


def test_strategic_merge_by_key_and_directives() -> None:
    target = {
        "spec": {
            "containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}],
            "ports": [{"containerPort": 80, "name": "http"}],
            "args": ["x", "y"],
            "selector": {"k": "v"},
        },
        "metadata": {"finalizers": ["a/b", "c/d"]},
    }
    result = strategic_merge_patch(
        target,
        {
            "spec": {
                "containers": [{"name": "b", "image": "2"}, {"name": "a", "$patch": "delete"}],
                "ports": [{"containerPort": 443, "name": "https"}],
                "args": ["z"],
                "selector": {"$patch": "replace", "n": "m"},
            },
            "metadata": {"finalizers": ["e/f"], "$deleteFromPrimitiveList/finalizers": ["a/b"]},
        },
    )
    assert result["spec"]["containers"] == [{"name": "b", "image": "2"}]
    assert result["spec"]["ports"] == [
        {"containerPort": 443, "name": "https"},
        {"containerPort": 80, "name": "http"},
    ]
    assert result["spec"]["args"] == ["z"]  # no merge key: replaced
    assert result["spec"]["selector"] == {"n": "m"}
    assert result["metadata"]["finalizers"] == ["e/f", "c/d"]


def test_strategic_merge_list_replace_and_errors() -> None:
    replaced = strategic_merge_patch(
        {"spec": {"volumes": [{"name": "a"}]}},
        {"spec": {"volumes": [{"name": "b"}, {"$patch": "replace"}]}},
    )
    assert replaced["spec"]["volumes"] == [{"name": "b"}]
    deleted = strategic_merge_patch(
        {"spec": {"x": {"y": 1}}}, {"spec": {"x": {"$patch": "delete"}}}
    )
    assert deleted == {"spec": {}}
    with pytest.raises(PatchError):
        strategic_merge_patch({}, {"$patch": "delete"})
    with pytest.raises(PatchError):
        strategic_merge_patch({}, {"spec": {"$patch": "frob"}})
    with pytest.raises(PatchError, match="retainKeys"):
        strategic_merge_patch({"data": {"a": "1"}}, {"data": {"$retainKeys": ["z"], "q": "1"}})
    with pytest.raises(PatchError, match="merge key"):
        strategic_merge_patch({}, {"spec": {"containers": [{"image": "x"}]}})
    with pytest.raises(PatchError, match="not identical"):
        strategic_merge_patch({}, {"metadata": {"finalizers": ["x", {"$patch": "merge"}]}})
    retained = strategic_merge_patch(
        {"data": {"a": "1", "b": "2"}}, {"data": {"$retainKeys": ["a", "c"], "c": "3"}}
    )
    assert retained == {"data": {"a": "1", "c": "3"}}


def test_leaf_paths_and_formatting() -> None:
    paths = leaf_paths(
        {
            "apiVersion": "v1",
            "kind": "X",
            "metadata": {
                "name": "n",
                "labels": {"a": "1"},
                "finalizers": ["f/1"],
                "ownerReferences": [{"uid": "u1", "name": "o"}],
            },
            "spec": {"list": [1], "empty": {}, "n": {"x": 1}},
        }
    )
    assert set(paths) == {
        ("metadata", "labels", "a"),
        ("metadata", "finalizers", "v:f/1"),
        ("metadata", "ownerReferences", "k:u1"),
        ("spec", "list"),
        ("spec", "empty"),
        ("spec", "n", "x"),
    }
    assert format_path(("spec", "n", "x")) == ".spec.n.x"
    assert format_path(("metadata", "finalizers", "v:f/1")) == '.metadata.finalizers[="f/1"]'
    assert format_path(("metadata", "ownerReferences", "k:u1")) == (
        '.metadata.ownerReferences[uid="u1"]'
    )


def test_apply_ownership_lifecycle() -> None:
    owners = Ownership()
    live: dict[str, Any] = {}
    live, conflicts = apply_configuration(
        live,
        {"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1, "y": 2}},
        owners,
        manager="m1",
        force=False,
        part="main",
    )
    assert not conflicts and live == {"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1, "y": 2}}

    _, conflicts = apply_configuration(
        live, {"spec": {"x": 5}}, owners, manager="m2", force=False, part="main"
    )
    assert [(c.field, c.manager) for c in conflicts] == [(".spec.x", "m1")]

    live, conflicts = apply_configuration(
        live, {"spec": {"x": 1, "z": 3}}, owners, manager="m2", force=False, part="main"
    )
    assert not conflicts and live["spec"] == {"x": 1, "y": 2, "z": 3}

    # m1 stops applying y and the labels: they go; x is still m2's too, so it stays.
    live, _ = apply_configuration(
        live, {"spec": {}}, owners, manager="m1", force=False, part="main"
    )
    assert live == {"metadata": {}, "spec": {"x": 1, "z": 3}}

    live, conflicts = apply_configuration(
        live, {"spec": {"x": 9}}, owners, manager="m3", force=True, part="main"
    )
    assert not conflicts and live["spec"]["x"] == 9
    assert ("spec", "x") not in owners.owners[("m2", "Apply")]


def test_update_writers_own_what_they_change() -> None:
    owners = Ownership()
    old = {"data": {"a": "1"}}
    owners.record_update("creator", None, old)
    new = {"data": {"a": "1", "b": "2"}}
    owners.record_update("editor", old, new)
    assert owners.owned_by_others("applier", ("data", "a")) == ["creator"]
    assert owners.owned_by_others("applier", ("data", "b")) == ["editor"]
    owners.record_update("editor", new, {"data": {"b": "2"}})
    assert ("creator", "Update") not in owners.owners  # its only field is gone


def test_apply_status_part_and_set_lists() -> None:
    owners = Ownership()
    live = {
        "metadata": {"finalizers": ["other/f"], "ownerReferences": [{"uid": "1", "name": "a"}]},
        "spec": {"a": 1},
    }
    status_only, _ = apply_configuration(
        live,
        {"spec": {"a": 2}, "status": {"s": 1}},
        owners,
        manager="m",
        force=False,
        part="status",
    )
    assert status_only["spec"] == {"a": 1} and status_only["status"] == {"s": 1}
    merged, _ = apply_configuration(
        live,
        {
            "metadata": {
                "finalizers": ["mine/f"],
                "ownerReferences": [{"uid": "1", "name": "renamed"}, {"uid": "2", "name": "b"}],
            }
        },
        owners,
        manager="m",
        force=False,
        part="all",
    )
    assert merged["metadata"]["finalizers"] == ["other/f", "mine/f"]
    assert merged["metadata"]["ownerReferences"] == [
        {"uid": "1", "name": "renamed"},
        {"uid": "2", "name": "b"},
    ]
    dropped, _ = apply_configuration(
        merged, {"metadata": {}}, owners, manager="m", force=False, part="all"
    )
    assert dropped["metadata"]["finalizers"] == ["other/f"]
    assert "ownerReferences" not in dropped["metadata"]
