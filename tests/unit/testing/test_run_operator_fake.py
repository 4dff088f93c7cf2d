"""run_operator(setup, client=FakeClient(...)): a whole operator, in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import setpoint as sp
from setpoint import kinds
from setpoint.testing import FakeClient, eventually_passes, run_operator

FINALIZER = "example.com/audit"


def operator(cleaned: list[str]) -> Callable[[sp.Manager], str]:
    """An operator that marks ConfigMaps seen and records their cleanups in ``cleaned``."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        config = await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
        if (config.get("data") or {}).get("seen") != "yes":
            await ctx.client.patch(
                kinds.ConfigMap,
                request.name,
                sp.MergePatch({"data": {"seen": "yes"}}),
                namespace=request.namespace,
            )

    async def cleanup(ctx: sp.Context, obj: dict[str, Any]) -> None:
        cleaned.append(obj["metadata"]["name"])

    def setup(manager: sp.Manager) -> str:
        controller = manager.controller("audit").for_(kinds.ConfigMap)
        controller.finalizer(FINALIZER, cleanup).build(reconcile)
        return "set up"

    return setup


async def test_an_operator_runs_on_the_fake_client() -> None:
    """The manager, cache, controller and finalizer handler run over a FakeClient.

    A created ConfigMap gets the finalizer and the reconcile's write; deleting it runs the
    cleanup and the object goes. No control plane is involved.
    """
    fake = FakeClient()
    cleaned: list[str] = []
    async with run_operator(operator(cleaned), client=fake) as op:
        assert op.setup_result == "set up"
        await fake.create(
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "c", "namespace": "default"}}
        )  # fmt: skip

        def reconciled() -> None:
            stored = fake.lookup(kinds.ConfigMap, "c", namespace="default")
            assert stored is not None
            assert stored["data"] == {"seen": "yes"}
            assert stored["metadata"]["finalizers"] == [FINALIZER]

        await eventually_passes(reconciled, timeout=10)
        await op.wait_idle(timeout=10, settle=0.1)
        await fake.delete(kinds.ConfigMap, "c", namespace="default")

        def gone() -> None:
            assert fake.lookup(kinds.ConfigMap, "c", namespace="default") is None

        await eventually_passes(gone, timeout=10)
        assert cleaned == ["c"]
        assert op.metrics.value("controller_runtime_reconcile_errors_total") == 0
    assert op.task.done() and op.task.exception() is None


async def test_run_operator_needs_one_target() -> None:
    """Neither or both of kubeconfig= and client= is a TypeError saying which to pass."""
    with pytest.raises(TypeError, match="exactly one of kubeconfig="):
        async with run_operator(operator([])):
            pass
    with pytest.raises(TypeError, match="exactly one of kubeconfig="):
        async with run_operator(operator([]), client=FakeClient(), kubeconfig="x"):
            pass
