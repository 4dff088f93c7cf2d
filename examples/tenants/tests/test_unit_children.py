"""Desired children and the status mutation, as pure functions of a Tenant."""

from __future__ import annotations

from typing import Any

from tenants import TENANT_LABEL, Tenant, children
from tenants.controller import _Outcome, _write_status


def tenant(**spec: Any) -> Tenant:
    body: dict[str, Any] = {"namespaces": ["acme-a"], "adminGroup": "ops", **spec}
    return Tenant.from_object(
        {
            "apiVersion": "tenants.setpoint.dev/v1",
            "kind": "Tenant",
            "metadata": {"name": "acme", "uid": "u1", "generation": 3},
            "spec": body,
        }
    )


def test_quantities_are_sent_as_the_strings_the_server_stores() -> None:
    quota = children.resource_quota(tenant(quota={"cpu": 2, "memory": "3Gi", "pods": 7}), "ns")
    assert quota.to_object()["spec"]["hard"] == {
        "requests.cpu": "2",
        "requests.memory": "3Gi",
        "pods": "7",
    }
    limits = children.limit_range(tenant(containerDefaults={"cpu": 1}), "ns")
    (item,) = limits.to_object()["spec"]["limits"]
    assert item == {
        "type": "Container",
        "default": {"cpu": "1", "memory": "512Mi"},
        "defaultRequest": {"cpu": "1", "memory": "512Mi"},
    }


def test_defaults_come_from_the_model_when_the_spec_leaves_them_out() -> None:
    quota = children.resource_quota(tenant(), "ns")
    assert quota.spec is not None
    assert quota.spec.hard == {"requests.cpu": "4", "requests.memory": "8Gi", "pods": "20"}


def test_the_isolation_policy_admits_only_the_tenants_namespaces() -> None:
    policy = children.isolation_policy(tenant(), "acme-a").to_object()
    assert policy == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "tenant-isolation", "namespace": "acme-a"},
        "spec": {
            "podSelector": {},  # set, and empty: every pod of the namespace
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {TENANT_LABEL: "acme"}}}]}],
        },
    }
    namespace = children.namespace(tenant(), "acme-a")
    assert namespace.to_object() == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "acme-a", "labels": {TENANT_LABEL: "acme"}},
    }


def test_the_binding_gives_the_admin_group_the_admin_cluster_role() -> None:
    binding = children.admin_binding(tenant(adminGroup="team-x"), "acme-a").to_object()
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "admin",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-x"}
    ]


def test_status_describes_the_generation_acted_on_not_a_newer_one() -> None:
    """A status retry on a fresh copy with a newer spec must not claim that spec was seen."""
    fresh = tenant()  # generation 3 on the server
    outcome = _Outcome(present=["acme-a"])
    _write_status(fresh, outcome, generation=2)  # the reconcile acted on generation 2
    assert fresh.status is not None
    assert fresh.status.observed_generation == 2
    assert {c.type: c.observed_generation for c in fresh.status.conditions} == {
        "Ready": 2,
        "Degraded": 2,
    }


def test_problems_make_the_tenant_degraded_with_the_first_reason() -> None:
    obj = tenant()
    outcome = _Outcome()
    outcome.problem("NamespaceConflict", "namespace 'x' is already claimed by Tenant 'y'")
    outcome.problem("NamespaceTerminating", "namespace 'z' is being deleted")
    _write_status(obj, outcome, generation=3)
    assert obj.status is not None
    conditions = {c.type: c for c in obj.status.conditions}
    assert conditions["Ready"].status == "False"
    assert conditions["Degraded"].status == "True"
    assert conditions["Degraded"].reason == "NamespaceConflict"
    assert "'y'" in conditions["Degraded"].message and "'z'" in conditions["Degraded"].message
