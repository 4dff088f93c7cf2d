"""The Tenant kind's whole evolution, v1alpha1 to v1, on the real control plane.

The path the "Changing CRDs safely" guide describes, with `crd diff` at every step:

1. v1alpha1 is the only version, and the storage version; v1alpha1 clients write Tenants.
2. v1 is added, converted by the operator's webhook; the operator (which reads v1)
   makes every Tenant Ready.
3. v1 becomes the storage version; dropping v1alpha1 is still refused (it is stored).
4. `migrate-storage` rewrites every Tenant at v1 (etcd shows it) and cleans storedVersions.
5. v1alpha1 is no longer served.

Every Tenant reads back at every served version after each step, and the snapshot
taken when the operator first converged equals the one at the end: nothing was lost.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from tenants import Tenant, TenantsSettings, TenantV1Alpha1, setup

import setpoint as sp
from setpoint.crd import crd_for
from setpoint.crd.conversion import CONVERT_PATH, WebhookClientConfig
from setpoint.migrate import Finding, diff_crds
from setpoint.migrate.install import StoredVersionInUse, apply_crd
from setpoint.migrate.storage import migrate_storage
from setpoint.testing import ControlPlane, UpgradeCheck, eventually, free_port, run_operator
from setpoint.testing.webhook import serving_certificate
from setpoint.webhook.server import StaticCertificate, WebhookServerOptions

from .tenants_support import CRD_NAME, install_crd, is_ready, unique

pytestmark = pytest.mark.e2e

V1ALPHA1 = TenantV1Alpha1.gvk
V1 = Tenant.gvk


def errors(findings: list[Finding]) -> set[tuple[str, str | None]]:
    return {(f.check, f.version) for f in findings if f.level == "error"}


def version(crd: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in crd["spec"]["versions"] if v["name"] == name)


def v1alpha1_only(full: dict[str, Any]) -> dict[str, Any]:
    """Step 1: the CRD as it was before v1 existed."""
    crd = copy.deepcopy(full)
    only = version(crd, "v1alpha1")
    only.update(served=True, storage=True)
    only.pop("deprecated", None)
    only.pop("deprecationWarning", None)
    crd["spec"]["versions"] = [only]
    crd["spec"].pop("conversion", None)
    return crd


def with_storage(full: dict[str, Any], storage: str) -> dict[str, Any]:
    crd = copy.deepcopy(full)
    for v in crd["spec"]["versions"]:
        v["storage"] = v["name"] == storage
    return crd


async def remove_all_tenants(k8s: sp.Client) -> None:
    """No Tenant may block the CRD's deletion with a finalizer nobody processes.

    Tried at both versions: with the webhook gone only the storage version reads.
    """
    for gvk in (V1, V1ALPHA1):
        with contextlib.suppress(sp.ApiError, sp.UnknownKind):
            for tenant in await k8s.list(gvk):
                name = tenant["metadata"]["name"]
                with contextlib.suppress(sp.NotFound):
                    await k8s.patch(gvk, name, sp.MergePatch({"metadata": {"finalizers": None}}))
                    await k8s.delete(gvk, name)


async def delete_crd(k8s: sp.Client) -> None:
    with contextlib.suppress(sp.NotFound):
        await k8s.delete(sp.kinds.CustomResourceDefinition, CRD_NAME)

    async def gone() -> bool:
        try:
            await k8s.get(sp.kinds.CustomResourceDefinition, CRD_NAME)
        except sp.NotFound:
            return True
        return False

    await eventually(gone, timeout=60, description="the Tenant CRD deleted")


async def test_tenant_kind_evolves_from_v1alpha1_to_v1(
    k8s: sp.Client,
    kubeconfig_path: Any,
    control_plane: ControlPlane,
    settings: TenantsSettings,
) -> None:
    """v1alpha1 stored -> v1 added with conversion -> storage flipped -> migrated -> retired."""
    await remove_all_tenants(k8s)
    await delete_crd(k8s)
    names = [unique("evo") for _ in range(3)]
    try:
        await walk(k8s, kubeconfig_path, control_plane, settings, names)
    finally:
        # The generated CRD again, fresh, for the tests that follow (an apply onto this
        # one would merge its Service client config with the URL used here).
        await remove_all_tenants(k8s)
        await delete_crd(k8s)
        await install_crd(k8s)


async def walk(
    k8s: sp.Client,
    kubeconfig_path: Any,
    control_plane: ControlPlane,
    settings: TenantsSettings,
    names: list[str],
) -> None:
    check = UpgradeCheck(k8s, kinds=[V1])
    generated = crd_for(Tenant, TenantV1Alpha1)

    # 1. v1alpha1 only: what v1alpha1 clients wrote.
    step1 = v1alpha1_only(generated)
    assert errors(diff_crds([], [step1])) == set()
    await apply_crd(k8s, step1)
    for i, name in enumerate(names):
        await k8s.create(
            {
                "apiVersion": V1ALPHA1.api_version,
                "kind": "Tenant",
                "metadata": {"name": name},
                "spec": {"namespaces": [name], "admins": f"team-{i}", "podQuota": 5 + i},
            }
        )
    assert {control_plane.stored_api_version(f"{V1.group}/tenants/{n}") for n in names} == {
        V1ALPHA1.api_version
    }

    # 2. v1 added, converted by the operator's webhook; v1alpha1 still the storage. The
    # operator reads v1, so it starts once v1 is served: its webhook address and CA are
    # fixed up front for the CRD to name them.
    ca, pair = serving_certificate()
    port = free_port()
    webhook = WebhookClientConfig(
        url=f"https://127.0.0.1:{port}{CONVERT_PATH}", ca_bundle=ca.cert_pem
    )
    full = crd_for(Tenant, TenantV1Alpha1, webhook=webhook)
    step2 = with_storage(full, "v1alpha1")
    findings = diff_crds([step1], [step2])
    assert errors(findings) == set(), [str(f) for f in findings]
    assert {f.check for f in findings} >= {"conversion", "servedVersionDrift"}
    await apply_crd(k8s, step2)
    options = sp.ManagerOptions(
        webhook_server=WebhookServerOptions(
            bind_address=f"127.0.0.1:{port}", certificate=StaticCertificate(pair)
        )
    )
    async with run_operator(
        lambda manager: setup(manager, settings), kubeconfig=kubeconfig_path, options=options
    ) as operator:
        await check.converged(is_ready, timeout=90)
        await operator.wait_idle(timeout=60)
        await check.readable_at_every_version()
        before = await check.snapshot()
        hub = await k8s.get(Tenant, names[1])
        assert (hub.spec.admin_group, hub.spec.quota.pods) == ("team-1", 6)

        # 3. v1 becomes the storage version; the old objects are still stored at v1alpha1.
        step3 = with_storage(full, "v1")
        findings = diff_crds([await live_crd(k8s)], [step3])
        assert errors(findings) == set(), [str(f) for f in findings]
        assert "storageVersionChange" in {f.check for f in findings}
        await apply_crd(k8s, step3)
        retired = copy.deepcopy(step3)
        retired["spec"]["versions"] = [version(retired, "v1")]
        assert ("storedVersionRemoval", None) in errors(diff_crds([await live_crd(k8s)], [retired]))
        with pytest.raises(StoredVersionInUse, match="setpoint crd migrate-storage"):
            await apply_crd(k8s, retired)

        # 4. Every Tenant rewritten at v1; storedVersions cleaned.
        result = await migrate_storage(k8s, CRD_NAME)
        assert result.stored_versions_before == ("v1alpha1", "v1")
        assert result.stored_versions_after == ("v1",)
        assert {control_plane.stored_api_version(f"{V1.group}/tenants/{n}") for n in names} == {
            V1.api_version
        }

        # 5. v1alpha1 no longer served: breaking for v1alpha1 clients, and diff says so.
        step5 = copy.deepcopy(step3)
        version(step5, "v1alpha1")["served"] = False
        findings = diff_crds([await live_crd(k8s)], [step5])
        assert errors(findings) == {("servedVersionRemoval", None)}, [str(f) for f in findings]
        await apply_crd(k8s, step5)

        async def v1alpha1_gone() -> bool:
            # Discovery drops the version a moment after the CRD changes.
            await k8s.mapper.refresh()
            try:
                await k8s.resource_info(V1ALPHA1)
            except sp.UnknownKind:
                return True
            return False

        await eventually(v1alpha1_gone, timeout=30, description="v1alpha1 no longer served")
        with pytest.raises(sp.UnknownKind):
            await k8s.list(V1ALPHA1)
        await check.readable_at_every_version()
        await check.converged(is_ready, timeout=60)
        await operator.wait_idle(timeout=60)
        after = await check.snapshot()
        check.assert_diff(before, after, expected=[])

        for name in names:
            await k8s.delete(V1, name)
        for name in names:
            await eventually(
                lambda name=name: _gone(k8s, name), timeout=90, description=f"Tenant {name} gone"
            )


async def _gone(k8s: sp.Client, name: str) -> bool:
    try:
        await k8s.get(V1, name)
    except sp.NotFound:
        return True
    return False


async def live_crd(k8s: sp.Client) -> dict[str, Any]:
    crd: dict[str, Any] = await k8s.get(sp.kinds.CustomResourceDefinition, CRD_NAME)
    return crd
