"""setpoint.testing.run_operator: an operator in-process against the real control plane."""

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest_asyncio

import setpoint as sp
from setpoint.api import kinds
from setpoint.client import Client
from setpoint.testing import RunningOperator, run_operator


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


def recorder(seen: list[str]) -> Callable[[sp.Manager], None]:
    """An operator that records the namespace of every ConfigMap it reconciles."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        seen.append(request.namespace or "")

    def setup(manager: sp.Manager) -> None:
        manager.controller("recorder").for_(kinds.ConfigMap).build(reconcile)

    return setup


@pytest_asyncio.fixture(loop_scope="session")
async def started_early(kubeconfig_path: Path) -> AsyncIterator[tuple[list[str], RunningOperator]]:
    """An operator started by a fixture that does not ask for the namespace fixture."""
    seen: list[str] = []
    async with run_operator(recorder(seen), kubeconfig=kubeconfig_path) as op:
        yield seen, op


async def test_a_tests_operator_watches_only_the_tests_namespace(
    k8s: Client,
    started_early: tuple[list[str], RunningOperator],
    namespace: str,
    kubeconfig_path: Path,
) -> None:
    """An operator run in a test with the namespace fixture reconciles only that namespace.

    Objects in other namespaces (as earlier tests leave them, their namespaces still
    Terminating) never reach its reconciler: neither for an operator started in the test
    body nor for one a fixture started before the namespace fixture was set up.
    ``namespaces=()`` watches every namespace, for an operator that works across them.
    """
    early_seen, early = started_early
    assert early.namespaces == (namespace,)
    other = f"{namespace[:50]}-other"
    await k8s.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    try:
        await k8s.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "left", "namespace": other},
            }
        )
        seen: list[str] = []
        async with run_operator(recorder(seen), kubeconfig=kubeconfig_path) as op:
            assert op.namespaces == (namespace,)
            await k8s.create(
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "mine", "namespace": namespace}}
            )  # fmt: skip
            await op.wait_idle(timeout=30)
            await early.wait_idle(timeout=30)
        assert set(seen) == {namespace}
        assert set(early_seen) == {namespace}
        everywhere: list[str] = []
        async with run_operator(
            recorder(everywhere), kubeconfig=kubeconfig_path, namespaces=()
        ) as op:
            await op.wait_idle(timeout=30)
        assert {namespace, other} <= set(everywhere)
    finally:
        await k8s.delete(kinds.Namespace, other)
