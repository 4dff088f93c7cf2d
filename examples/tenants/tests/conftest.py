"""Fixtures of the tenants operator's tests.

The example is not installed: the repository's pytest configuration puts examples/tenants on
the import path (``pythonpath``), as ``setpoint run examples/tenants/tenants`` does for a
path, so ``import tenants`` is the operator package. The tests' own helpers are in
``tenants_support.py`` next to them, imported relatively.
Tests that need a cluster use the setpoint pytest plugin's session control plane (real
kube-apiserver, etcd and kube-controller-manager, RBAC enforced).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tenants import TenantsSettings

import setpoint as sp

from .tenants_support import Operator, Tenants, install_crd, running_operator


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything but the unit tests runs the example end to end against the control plane.
    here = Path(__file__).resolve().parent
    for item in items:
        path = Path(str(item.path)).resolve()
        if path.parent == here and not path.name.startswith("test_unit_"):
            item.add_marker(pytest.mark.e2e)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def tenant_crd(k8s: sp.Client) -> sp.GroupVersionKind:
    """The Tenant CRD from config/crd/bases, installed and served."""
    await install_crd(k8s)
    from tenants import Tenant

    return Tenant.gvk


@pytest.fixture
def settings(tmp_path: Path) -> TenantsSettings:
    """Operator settings with a fresh directory file and short retry bounds."""
    return TenantsSettings(
        directory_path=tmp_path / "directory.db",
        directory_busy_timeout=0.5,
        cleanup_deadline=10.0,
        degraded_requeue_after=5.0,
    )


@pytest_asyncio.fixture(loop_scope="session")
async def operator(
    tenant_crd: sp.GroupVersionKind, kubeconfig_path: Path, settings: TenantsSettings
) -> AsyncIterator[Operator]:
    """The operator running in-process with admin credentials, for the whole test."""
    async with running_operator(kubeconfig_path, settings) as running:
        yield running


@pytest_asyncio.fixture(loop_scope="session")
async def tenants(operator: Operator, k8s: sp.Client) -> AsyncIterator[Tenants]:
    """Creates Tenants; deletes them at the end while the operator still runs."""
    made = Tenants(k8s)
    try:
        yield made
    finally:
        await made.delete_all()
