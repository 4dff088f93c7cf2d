"""RBAC rules declared in Python: validation, the decorator, merging, Role/ClusterRole output."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.rbac import PolicyRule, declared_rbac_rules, rbac, rbac_rules_of
from setpoint.crd import find_rbac_rules, generate_rbac, normalize_rules
from tests._support.crd_golden import load_fixtures

FIXTURES = load_fixtures()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"groups": [""], "resources": ["pods"], "verbs": []}, "verbs is empty"),
        ({"groups": [""], "resources": ["pods"], "verbs": ["Get"]}, "lower-case letters"),
        ({"groups": [""], "verbs": ["get"]}, "either resources="),
        (
            {"groups": [""], "resources": ["pods"], "urls": ["/x"], "verbs": ["get"]},
            "not both",
        ),
        ({"resources": ["pods"], "verbs": ["get"]}, "needs groups="),
        ({"groups": "", "resources": ["pods"], "verbs": ["get"]}, "list of strings"),
        ({"urls": ["/metrics"], "groups": [""], "verbs": ["get"]}, "cannot also set"),
        ({"urls": ["/metrics"], "verbs": ["get"], "namespace": "a"}, "cluster-wide"),
        ({"urls": ["metrics"], "verbs": ["get"]}, "must start with '/'"),
        ({"groups": [""], "resources": ["Pods"], "verbs": ["get"]}, "lower-case plural"),
        ({"groups": [""], "resources": ["a/b/c"], "verbs": ["get"]}, "lower-case plural"),
        ({"groups": [""], "resources": ["pods"], "verbs": ["get"], "namespace": "A"}, "namespace"),
    ],
)
def test_invalid_rules_are_rejected(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PolicyRule(**kwargs)


def test_for_kind_derives_group_and_plural() -> None:
    rule = PolicyRule.for_kind(kinds.Deployment, verbs=["get"])
    assert (rule.groups, rule.resources) == (("apps",), ("deployments",))
    rule = rbac.for_kind(FIXTURES.Widget, verbs=["update"], subresources=["status", "scale"])
    assert rule.groups == ("fixtures.setpoint.dev",)
    assert rule.resources == ("widgets/status", "widgets/scale")
    rule = rbac.for_kind(kinds.Pod, verbs=["get"], resource_names=["p"], namespace="ns")
    assert (rule.resource_names, rule.namespace) == (("p",), "ns")


def test_for_kind_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="not a built-in kind"):
        PolicyRule.for_kind(GroupVersionKind("x.io", "v1", "Nope"), verbs=["get"])
    with pytest.raises(TypeError, match="has no resource_info"):
        PolicyRule.for_kind(dict, verbs=["get"])


def test_the_decorator_attaches_rules_in_source_order_and_records_the_module() -> None:
    first = rbac(groups=[""], resources=["secrets"], verbs=["get"])
    second = rbac(groups=[""], resources=["pods"], verbs=["list"])

    @first
    @second
    def reconcile() -> None:
        """Stand-in."""

    assert rbac_rules_of(reconcile) == (first, second)
    assert reconcile.__name__ == "reconcile"
    mine = declared_rbac_rules([__name__])
    assert first in mine and second in mine
    assert first not in declared_rbac_rules(["some.other.module"])


def test_the_decorator_rejects_objects_without_attributes() -> None:
    with pytest.raises(TypeError, match="decorate a function or a class"):
        rbac(groups=[""], resources=["pods"], verbs=["get"])(3)


def test_rules_are_merged_like_controller_gen() -> None:
    rules = [
        PolicyRule(groups=["apps"], resources=["deployments"], verbs=["get", "list"]),
        PolicyRule(groups=["apps"], resources=["deployments"], verbs=["watch", "get"]),
        PolicyRule(groups=["apps"], resources=["statefulsets"], verbs=["get", "list", "watch"]),
        PolicyRule(groups=[""], resources=["pods"], verbs=["get", "*"]),
        PolicyRule(groups=[""], resources=["secrets"], resource_names=["b", "a"], verbs=["get"]),
        PolicyRule(urls=["/metrics", "/healthz"], verbs=["get"]),
    ]
    assert normalize_rules(rules) == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["a", "b"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments", "statefulsets"],
            "verbs": ["get", "list", "watch"],
        },
        {"nonResourceURLs": ["/healthz", "/metrics"], "verbs": ["get"]},
    ]


def test_merging_does_not_depend_on_order() -> None:
    rules = find_rbac_rules([FIXTURES])
    assert normalize_rules(rules) == normalize_rules(list(reversed(rules)))


def test_cluster_role_and_namespaced_roles() -> None:
    manifest = generate_rbac(find_rbac_rules([FIXTURES]))
    assert manifest.path == "rbac/role.yaml"
    cluster, role = manifest.documents
    assert cluster["kind"] == "ClusterRole"
    assert cluster["metadata"] == {"name": "manager-role"}
    assert {"nonResourceURLs": ["/metrics"], "verbs": ["get"]} in cluster["rules"]
    widgets = next(r for r in cluster["rules"] if r.get("resources") == ["widgets"])
    assert widgets["verbs"] == ["create", "get", "list", "patch", "update", "watch"]
    assert role["kind"] == "Role"
    assert role["metadata"] == {"name": "manager-role", "namespace": "fixtures"}
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}
    ]


def test_a_namespaced_operator_gets_roles_only() -> None:
    rules = [PolicyRule(groups=[""], resources=["pods"], verbs=["get"])]
    (role,) = generate_rbac(rules, namespace="team-a", role_name="op").documents
    assert role["kind"] == "Role"
    assert role["metadata"] == {"name": "op", "namespace": "team-a"}
    (empty,) = generate_rbac([], namespace="team-a").documents
    assert (empty["kind"], empty["rules"]) == ("Role", [])


def test_urls_cannot_go_into_a_role() -> None:
    with pytest.raises(ValueError, match="only a ClusterRole grants URLs"):
        generate_rbac([PolicyRule(urls=["/metrics"], verbs=["get"])], namespace="a")


def test_no_rules_still_gives_an_empty_cluster_role() -> None:
    (cluster,) = generate_rbac([]).documents
    assert (cluster["kind"], cluster["rules"]) == ("ClusterRole", [])
