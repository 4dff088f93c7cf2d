"""setpoint.testing.run_operator: an operator in-process against the real control plane."""

from collections.abc import Callable
from pathlib import Path

import setpoint as sp
from setpoint.api import kinds
from setpoint.client import Client
from setpoint.testing import run_operator


def labeller(namespace: str) -> Callable[[sp.Manager], str]:
    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        cm = await ctx.reader.get(kinds.ConfigMap, request.name, namespace=request.namespace)
        if cm.get("data", {}).get("seen") != "yes":
            await ctx.client.patch(
                kinds.ConfigMap,
                request.name,
                sp.MergePatch({"data": {"seen": "yes"}}),
                namespace=request.namespace,
            )

    def setup(manager: sp.Manager) -> str:
        manager.controller("labeller").for_(
            kinds.ConfigMap,
            predicates=[lambda event: sp.meta.namespace_of(event.object) == namespace],
        ).build(reconcile)
        return "set up"

    return setup


async def test_run_operator_runs_setup_and_waits_until_idle(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """run_operator runs an operator's setup(manager) in-process until the block ends.

    The controller reconciles a ConfigMap created during the block; wait_idle returns
    only after the reconcile and the one caused by its own write have run, and the
    private metrics registry counts exactly this operator's reconciles.
    """
    async with run_operator(labeller(namespace), kubeconfig=kubeconfig_path) as op:
        assert op.setup_result == "set up"
        await k8s.create(
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "x", "namespace": namespace}}
        )  # fmt: skip
        await op.wait_idle(timeout=30)
        got = await k8s.get(kinds.ConfigMap, "x", namespace=namespace)
        assert got["data"] == {"seen": "yes"}
        successes = op.metrics.value(
            "controller_runtime_reconcile_total", controller="labeller", result="success"
        )
        assert successes >= 2  # the create, then the event of its own patch
        assert op.metrics.value("controller_runtime_reconcile_errors_total") == 0
    assert op.task.done() and op.task.exception() is None
