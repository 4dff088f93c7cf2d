"""Fixtures of the Widget operator's tests.

``import widgets`` works because the pytest configuration puts the project root on the
import path (``pythonpath``: this project's pyproject.toml, and the setpoint checkout's
when it runs these tests as an example). The ``control_plane``, ``kubeconfig_path``,
``k8s`` and ``namespace`` fixtures come from setpoint's pytest plugin, which installing
``setpoint[testing]`` registers.
"""

from __future__ import annotations

import pytest_asyncio
import widgets

import setpoint as sp
from setpoint.crd import crd_for
from setpoint.testing import eventually

CRD = sp.GroupVersionKind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def widget_crd(k8s: sp.Client) -> sp.GroupVersionKind:
    """The Widget CRD, generated from the Python types, installed and served."""
    crd = crd_for(widgets.Widget)
    await k8s.apply(crd, field_manager="widget-tests", force=True)

    async def established() -> bool:
        live = await k8s.get(CRD, crd["metadata"]["name"])
        conditions = (live.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, timeout=60, description="the Widget CRD Established")

    async def served() -> bool:
        await k8s.list(widgets.Widget.gvk)
        return True

    await eventually(served, timeout=60, description="the Widget kind served")
    return widgets.Widget.gvk
