"""Field paths: guarded JSON-patch diffs and the FieldsV1 no-op check of apply_child."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from setpoint.client._apply import _covers
from setpoint.client._fieldpath import apply_is_noop, json_patch_diff, managed_fields_of

# managedFields exactly as kube-apiserver recorded them for an applied Deployment
# (containers keyed by name, ports by containerPort+protocol with a defaulted protocol,
# an atomic selector, an atomic args list).
DEPLOYMENT_FIELDS: dict[str, Any] = {
    "f:metadata": {"f:labels": {"f:app": {}}, "f:ownerReferences": {'k:{"uid":"u1"}': {}}},
    "f:spec": {
        "f:replicas": {},
        "f:selector": {},
        "f:template": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:containers": {
                    'k:{"name":"c"}': {
                        ".": {},
                        "f:args": {},
                        "f:image": {},
                        "f:name": {},
                        "f:ports": {
                            'k:{"containerPort":80,"protocol":"TCP"}': {
                                ".": {},
                                "f:containerPort": {},
                            }
                        },
                    }
                }
            },
        },
    },
}

DESIRED: dict[str, Any] = {
    "metadata": {
        "labels": {"app": "d"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u1"}],
    },
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "d"}},
        "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "args": ["a", "b"],
                        "ports": [{"containerPort": 80}],
                    }
                ]
            },
        },
    },
}

LIVE: dict[str, Any] = {
    "metadata": {
        "labels": {"app": "d", "team": "blue"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u1"},
            {"apiVersion": "v1", "kind": "Y", "name": "p", "uid": "u2"},
        ],
    },
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "d"}},
        "strategy": {"type": "RollingUpdate"},
        "template": {
            "metadata": {"labels": {"app": "d"}},
            "spec": {
                "containers": [
                    {
                        "name": "sidecar",
                        "image": "other",
                    },
                    {
                        "name": "c",
                        "image": "busybox",
                        "args": ["a", "b"],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "imagePullPolicy": "Always",
                    },
                ],
                "restartPolicy": "Always",
            },
        },
    },
}


def test_matching_owned_fields_is_a_noop_despite_defaults_and_foreign_fields() -> None:
    assert apply_is_noop(LIVE, DESIRED, DEPLOYMENT_FIELDS)


def test_value_drift_in_an_owned_field_needs_an_apply() -> None:
    for path, value in (
        (("spec", "replicas"), 3),
        (("metadata", "labels", "app"), "x"),
        (("spec", "selector", "matchLabels", "app"), "x"),
    ):
        live = copy.deepcopy(LIVE)
        target: Any = live
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        assert not apply_is_noop(live, DESIRED, DEPLOYMENT_FIELDS), path
    live = copy.deepcopy(LIVE)
    live["spec"]["template"]["spec"]["containers"][1]["args"] = ["a"]
    assert not apply_is_noop(live, DESIRED, DEPLOYMENT_FIELDS)
    live["spec"]["template"]["spec"]["containers"].pop()
    assert not apply_is_noop(live, DESIRED, DEPLOYMENT_FIELDS)


def test_a_changed_field_set_needs_an_apply() -> None:
    more = copy.deepcopy(DESIRED)
    more["metadata"]["labels"]["team"] = "blue"  # present live, but not ours yet
    assert not apply_is_noop(LIVE, more, DEPLOYMENT_FIELDS)
    fewer = copy.deepcopy(DESIRED)
    del fewer["spec"]["replicas"]  # we would give the field up
    assert not apply_is_noop(LIVE, fewer, DEPLOYMENT_FIELDS)
    other_port = copy.deepcopy(DESIRED)
    other_port["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 81}]
    assert not apply_is_noop(LIVE, other_port, DEPLOYMENT_FIELDS)
    two = copy.deepcopy(DESIRED)
    two["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "other"})
    assert not apply_is_noop(LIVE, two, DEPLOYMENT_FIELDS)
    assert not apply_is_noop(LIVE, DESIRED, None)


def test_set_lists_and_index_entries() -> None:
    owned: dict[str, Any] = {"f:spec": {"f:tags": {'v:"a"': {}, 'v:"b"': {}}}}
    assert apply_is_noop({"spec": {"tags": ["b", "x", "a"]}}, {"spec": {"tags": ["a", "b"]}}, owned)
    assert not apply_is_noop({"spec": {"tags": ["b", "x"]}}, {"spec": {"tags": ["a", "b"]}}, owned)
    assert not apply_is_noop({"spec": {"tags": ["a", "b"]}}, {"spec": {"tags": ["a"]}}, owned)
    indexed: dict[str, Any] = {"f:spec": {"f:items": {"i:0": {"f:v": {}}}}}
    assert apply_is_noop(
        {"spec": {"items": [{"v": 1, "w": 2}]}}, {"spec": {"items": [{"v": 1}]}}, indexed
    )
    assert not apply_is_noop(
        {"spec": {"items": [{"v": 2}]}}, {"spec": {"items": [{"v": 1}]}}, indexed
    )


def test_scalars_compare_as_json() -> None:
    owned: dict[str, Any] = {"f:spec": {"f:on": {}, "f:n": {}}}
    assert apply_is_noop({"spec": {"on": True, "n": 1.0}}, {"spec": {"on": True, "n": 1}}, owned)
    assert not apply_is_noop({"spec": {"on": 1, "n": 1}}, {"spec": {"on": True, "n": 1}}, owned)


def test_managed_fields_selects_the_apply_entry_of_the_manager() -> None:
    obj = {
        "metadata": {
            "managedFields": [
                {"manager": "me", "operation": "Update", "fieldsV1": {"f:a": {}}},
                {
                    "manager": "me",
                    "operation": "Apply",
                    "subresource": "status",
                    "fieldsV1": {"f:s": {}},
                },
                {"manager": "me", "operation": "Apply", "fieldsV1": {"f:b": {}}},
                {"manager": "you", "operation": "Apply", "fieldsV1": {"f:c": {}}},
            ]
        }
    }
    assert managed_fields_of(obj, "me") == {"f:b": {}}
    assert managed_fields_of(obj, "me", subresource="status") == {"f:s": {}}
    assert managed_fields_of(obj, "nobody") is None


def test_unguarded_diff_sends_only_the_changes() -> None:
    old = {"metadata": {"labels": {"a": "1", "b/c": "2"}}, "data": {"k": "v"}}
    new = {"metadata": {"labels": {"a": "9", "d": "4"}}, "data": {"k": "v"}, "extra": [1]}
    assert json_patch_diff(old, new, guard_values=False) == [
        {"op": "remove", "path": "/metadata/labels/b~1c"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "9"},
        {"op": "add", "path": "/metadata/labels/d", "value": "4"},
        {"op": "add", "path": "/extra", "value": [1]},
    ]
    assert json_patch_diff(old, copy.deepcopy(old), guard_values=True) == []


def test_guarded_diff_tests_every_value_it_changes() -> None:
    old = {"metadata": {"finalizers": ["x/a"], "labels": {"gone": "1"}}}
    new = {"metadata": {"finalizers": ["x/a", "x/b"], "annotations": {"n": "1"}}}
    assert json_patch_diff(old, new, guard_values=True) == [
        {"op": "test", "path": "/metadata/labels", "value": {"gone": "1"}},
        {"op": "remove", "path": "/metadata/labels"},
        {"op": "test", "path": "/metadata/finalizers", "value": ["x/a"]},
        {"op": "replace", "path": "/metadata/finalizers", "value": ["x/a", "x/b"]},
        {"op": "test", "path": "/metadata/annotations", "value": None},
        {"op": "add", "path": "/metadata/annotations", "value": {"n": "1"}},
    ]
    # A bool replacing an equal-comparing int is a change (JSON types differ).
    assert json_patch_diff({"v": 1}, {"v": True}, guard_values=False) == [
        {"op": "replace", "path": "/v", "value": True}
    ]


@pytest.mark.parametrize(
    ("current", "desired", "covered"),
    [
        ({"a": 1, "extra": "x"}, {"a": 1}, True),  # the live object may hold more
        ({"a": {"b": [1, {"c": "d", "e": 0}]}}, {"a": {"b": [1, {"c": "d"}]}}, True),
        ({"a": 1}, {"a": True}, False),  # JSON types apart: true is not 1
        ({"a": True}, {"a": 1}, False),
        ({"a": 1.0}, {"a": 1}, False),
        ({}, {"a": None}, False),  # absent is not null
        ({"a": None}, {"a": None}, True),
        ({"a": [1, 2]}, {"a": [1]}, False),  # lists match item by item
        ({"a": "1"}, {"a": {"b": 1}}, False),
        ({"a": {"b": 1}}, {"a": {}}, True),
    ],
)
def test_apply_child_cache_check_needs_every_desired_value_with_its_json_type(
    current: dict[str, Any], desired: dict[str, Any], covered: bool
) -> None:
    """apply_child's no-op check from the cache: every desired value present, equal, same type."""
    assert _covers(current, desired) is covered
