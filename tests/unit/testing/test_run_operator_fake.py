"""run_operator(setup, client=FakeClient(...)): a whole operator, in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import setpoint as sp
from setpoint import kinds
from setpoint.api.clock import ManualClock
from setpoint.testing import FakeClient, eventually_passes, run_operator
from setpoint.testing._test_scope import set_test_namespace

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


def periodic(calls: list[tuple[str, float]], clock: sp.Clock) -> Callable[[sp.Manager], None]:
    """An operator that looks at each ConfigMap every 30 seconds (``requeue_after``)."""

    async def reconcile(ctx: sp.Context, request: sp.Request) -> sp.Result:
        calls.append((request.name, clock.now()))
        return sp.Result(requeue_after=30)

    def setup(manager: sp.Manager) -> None:
        manager.controller("periodic").for_(kinds.ConfigMap).build(reconcile)

    return setup


def config_map(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace}}  # fmt: skip


async def test_a_periodic_reconcile_runs_on_a_manual_clock() -> None:
    """requeue_after waits on the operator's ManualClock: advance() runs each period's reconcile.

    Nothing happens while the clock stands still, however long the test takes; advancing
    it runs the reconciles due, each at its own time, without waiting the period.
    """
    fake = FakeClient()
    clock = ManualClock()
    calls: list[tuple[str, float]] = []
    async with run_operator(periodic(calls, clock), client=fake, clock=clock) as op:
        assert op.clock is clock
        await fake.create(config_map("c", "default"))
        await op.wait_idle(timeout=10, settle=0.1)
        assert calls == [("c", 0.0)]
        assert clock.next_deadline == 30.0
        await op.advance(29.5)
        assert calls == [("c", 0.0)]
        await op.advance(0.5)
        assert calls == [("c", 0.0), ("c", 30.0)]
        await op.advance(65)
        assert calls == [("c", 0.0), ("c", 30.0), ("c", 60.0), ("c", 90.0)]
        assert clock.now() == 95.0


async def test_advance_needs_a_manual_clock() -> None:
    async with run_operator(lambda manager: None, client=FakeClient()) as op:
        with pytest.raises(TypeError, match=r"clock=ManualClock\(\)"):
            await op.advance(1)


async def test_an_operator_watches_the_namespaces_it_is_given() -> None:
    """namespaces=("mine",) keeps other namespaces' objects from the reconciler; () does not."""
    fake = FakeClient()
    clock = ManualClock()
    await fake.create(config_map("a", "mine"))
    await fake.create(config_map("b", "other"))
    calls: list[tuple[str, float]] = []
    async with run_operator(
        periodic(calls, clock), client=fake, clock=clock, namespaces=("mine",)
    ) as op:
        await op.wait_idle(timeout=10, settle=0.1)
        assert op.namespaces == ("mine",)
        assert calls == [("a", 0.0)]
    calls.clear()
    async with run_operator(periodic(calls, clock), client=fake, namespaces=()) as op:
        await op.wait_idle(timeout=10, settle=0.1)
        assert op.namespaces == ()
        assert sorted(calls) == [("a", 0.0), ("b", 0.0)]


async def test_a_tests_operator_watches_the_tests_namespace_by_default() -> None:
    """In a test that uses the plugin's namespace fixture, only that namespace is watched.

    The plugin records the name (here set by hand, as it does before the test's fixtures
    run); run_operator without namespaces= picks it up.
    """
    fake = FakeClient()
    clock = ManualClock()
    await fake.create(config_map("a", "mine"))
    await fake.create(config_map("b", "left-by-an-earlier-test"))
    calls: list[tuple[str, float]] = []
    set_test_namespace("mine")
    try:
        async with run_operator(periodic(calls, clock), client=fake, clock=clock) as op:
            await op.wait_idle(timeout=10, settle=0.1)
            assert op.namespaces == ("mine",)
            assert calls == [("a", 0.0)]
    finally:
        set_test_namespace(None)
    with pytest.raises(TypeError, match="namespaces=\\('mine',\\)"):
        async with run_operator(lambda manager: None, client=fake, namespaces="mine"):
            pass
