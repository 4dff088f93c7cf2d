"""Integration tests: the Widget operator running against a real local control plane."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import widgets
import widgets.blocking

import setpoint as sp
from setpoint import kinds
from setpoint.api.kinds import apps_v1
from setpoint.testing import eventually, run_operator

pytestmark = pytest.mark.e2e


def widget(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "quickstart.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas},
    }


@pytest.mark.parametrize(
    "setup", [widgets.setup, widgets.blocking.setup], ids=["async", "blocking"]
)
async def test_a_widget_gets_its_config_map_and_follows_its_spec(
    setup: Callable[[sp.Manager], None],
    widget_crd: sp.GroupVersionKind,
    k8s: sp.Client,
    namespace: str,
    kubeconfig_path: Path,
) -> None:
    """A Widget gets a ConfigMap and a typed Deployment with its replicas; a change follows.

    The operator runs in-process (``setpoint.testing.run_operator``) against the plugin's
    control plane, with the CRD generated from the Python types. The ConfigMap is
    controlled by the Widget; after ``spec.replicas`` changes, the ConfigMap, the
    Deployment (applied as an ``apps_v1.Deployment`` model, read back as one) and
    ``status.observedGeneration`` catch up with the new generation. The operator's field
    manager owns only the Deployment fields the model set: not ``spec.strategy``, which the
    server defaulted. The same holds for
    ``widgets.blocking``, the operator written as a plain ``def`` reconcile that runs in the
    controller's threads with a ``SyncContext``.
    """
    async with run_operator(setup, kubeconfig=kubeconfig_path) as op:
        created = await k8s.create(widget("w1", namespace, 3))

        async def announced(replicas: str) -> dict[str, Any]:
            config = await k8s.get(kinds.ConfigMap, "w1-config", namespace=namespace)
            assert config["data"] == {"replicas": replicas}
            return config

        config = await eventually(lambda: announced("3"), description="ConfigMap with 3")
        (owner,) = config["metadata"]["ownerReferences"]
        assert owner["uid"] == created["metadata"]["uid"]
        assert owner["controller"] is True

        await k8s.patch(
            widget_crd, "w1", sp.MergePatch({"spec": {"replicas": 5}}), namespace=namespace
        )
        await eventually(lambda: announced("5"), description="ConfigMap with 5")

        async def deployed() -> apps_v1.Deployment:
            web = await k8s.get(apps_v1.Deployment, "w1-web", namespace=namespace)
            assert web.spec.replicas == 5
            return web

        web = await eventually(deployed, description="Deployment with 5 replicas")
        assert [ref.uid for ref in web.metadata.owner_references] == [created["metadata"]["uid"]]
        assert web.spec.strategy is not None  # the server's default ...
        (mine,) = [m for m in web.metadata.managed_fields if m["manager"] == widgets.FIELD_MANAGER]
        assert "f:strategy" not in mine["fieldsV1"]["f:spec"]  # ... owned by no one
        assert "f:replicas" in mine["fieldsV1"]["f:spec"]

        async def observed() -> bool:
            live = await k8s.get(widget_crd, "w1", namespace=namespace)
            status = live.get("status") or {}
            return status.get("observedGeneration") == live["metadata"]["generation"] == 2

        await eventually(observed, description="status.observedGeneration 2")
        await op.wait_idle()
        errors = op.metrics.value("controller_runtime_reconcile_errors_total", controller="widget")
        assert errors == 0
