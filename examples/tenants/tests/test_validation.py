"""Bad Tenant specs are refused by the API server, with the field and a clear message."""

from __future__ import annotations

from typing import Any

import pytest

import setpoint as sp

from .tenants_support import tenant_manifest, unique


def causes(error: sp.Invalid) -> dict[str, str]:
    """field path -> message, from the server's Status details."""
    return {c.field: c.message for c in error.causes}


async def create_invalid(k8s: sp.Client, spec: dict[str, Any]) -> sp.Invalid:
    obj = tenant_manifest(unique("invalid"), ["placeholder"])
    obj["spec"].update(spec)
    with pytest.raises(sp.Invalid) as caught:
        await k8s.create(obj)
    return caught.value


async def test_a_namespace_name_that_is_not_a_dns_label_is_refused(
    k8s: sp.Client, tenant_crd: sp.GroupVersionKind
) -> None:
    """Namespace names are checked by a CEL rule on each list item: the path names the item.

    "Team_A" (upper case, underscore) and "-x" (leading dash) are refused; a valid name in
    the same list is not reported.
    """
    error = await create_invalid(k8s, {"namespaces": ["good-one", "Team_A", "-x"]})
    found = causes(error)
    assert set(found) == {"spec.namespaces[1]", "spec.namespaces[2]"}
    for message in found.values():
        assert "must be a valid namespace name (a DNS label)" in message


@pytest.mark.parametrize(
    ("spec", "field", "expected"),
    [
        ({"quota": {"cpu": "-1"}}, "spec.quota.cpu", "cpu must not be negative"),
        ({"quota": {"memory": "-0.5Gi"}}, "spec.quota.memory", "memory must not be negative"),
        ({"quota": {"cpu": -2}}, "spec.quota.cpu", "cpu must not be negative"),
        ({"quota": {"pods": -1}}, "spec.quota.pods", "greater than or equal to 0"),
        (
            {"containerDefaults": {"memory": "-1e3"}},
            "spec.containerDefaults.memory",
            "memory must not be negative",
        ),
        ({"quota": {"cpu": "lots"}}, "spec.quota.cpu", "should match"),
    ],
)
async def test_a_negative_or_malformed_quota_is_refused(
    k8s: sp.Client,
    tenant_crd: sp.GroupVersionKind,
    spec: dict[str, Any],
    field: str,
    expected: str,
) -> None:
    """Negative quantities are refused by a CEL rule using the Kubernetes quantity library.

    The rule compares the parsed quantity, so "-1", "-0.5Gi", the integer -2 and "-1e3" are
    all caught; a pod count below zero is caught by the schema minimum; a string that is not
    a quantity at all by the quantity pattern.
    """
    error = await create_invalid(k8s, spec)
    found = causes(error)
    assert field in found, found
    assert expected in found[field]


@pytest.mark.parametrize(
    "group", ["system:authenticated", "system:serviceaccounts", "system:masters"]
)
async def test_a_system_group_as_admin_group_is_refused(
    k8s: sp.Client, tenant_crd: sp.GroupVersionKind, group: str
) -> None:
    """adminGroup may not be a system: group (issue 18, item 9): a CEL rule on the field.

    The group gets 'admin' in every tenant namespace; system:authenticated would give that
    to every user of the cluster.
    """
    error = await create_invalid(k8s, {"adminGroup": group})
    found = causes(error)
    assert "spec.adminGroup" in found, found
    assert "must not be a 'system:' group" in found["spec.adminGroup"]


async def test_a_valid_tenant_is_stored_with_its_defaults(
    k8s: sp.Client, tenant_crd: sp.GroupVersionKind
) -> None:
    """A minimal valid Tenant is accepted and the server fills in the documented defaults.

    No operator runs here and the Tenant has no finalizer, so deleting it needs nothing.
    """
    name = unique("valid")
    created = await k8s.create(tenant_manifest(name, [f"{name}-a"]))
    try:
        spec = created["spec"]
        assert spec["quota"] == {"cpu": "4", "memory": "8Gi", "pods": 20}
        assert spec["containerDefaults"] == {"cpu": "500m", "memory": "512Mi"}
        assert spec["isolated"] is True
    finally:
        await k8s.delete(sp.GroupVersionKind("tenants.setpoint.dev", "v1", "Tenant"), name)
