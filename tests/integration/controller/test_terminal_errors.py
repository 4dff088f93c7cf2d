"""Terminal errors on the real server: a Stalled condition, a Warning Event, and no loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import setpoint as sp
from setpoint.api import kinds
from setpoint.api.conditions import find_condition
from setpoint.client import Client
from setpoint.crd.generator import crd_for
from setpoint.migrate.install import apply_crd
from setpoint.testing import eventually, run_operator

GROUP = "terminal.test.setpoint.dev"


class ProbeSpec(sp.Model):
    """What the probe reads."""

    selector: str = ""
    """Namespaces to look at (a label selector)."""
    child: str = "probe-child"
    """Name of a ConfigMap to create."""


class ProbeStatus(sp.Model):
    """What the probe saw."""

    conditions: list[sp.Condition] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["type"]
    )
    """Conditions."""


@sp.resource(group=GROUP, version="v1")
class Probe(sp.Resource):
    """A test kind whose spec carries user input: a selector and a child's name."""

    spec: ProbeSpec
    status: ProbeStatus | None = None


PROBE = sp.GroupVersionKind(GROUP, "v1", "Probe")


@pytest.fixture
async def probe_crd(k8s: Client) -> None:
    await apply_crd(k8s, crd_for(Probe))


def operator(namespace: str, calls: list[str]) -> Any:
    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        probe = await ctx.reader.get(Probe, request.name, namespace=request.namespace)
        calls.append(probe.spec.selector)
        await ctx.reader.list(kinds.Namespace, labels=probe.spec.selector)
        await sp.apply_child(
            ctx.client,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": probe.spec.child, "namespace": request.namespace},
            },
            owner=probe,
            field_manager="probe",
        )

    def setup(manager: sp.Manager) -> None:
        manager.controller("probe").for_(Probe).owns(kinds.ConfigMap).build(reconcile)

    return setup


def _probe(namespace: str, selector: str, child: str = "probe-child") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Probe",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": {"selector": selector, "child": child},
    }


async def _stalled(k8s: Client, namespace: str) -> sp.Condition | None:
    obj = await k8s.get(PROBE, "p", namespace=namespace)
    return find_condition(obj.get("status") or {}, "Stalled")


async def _warning_reasons(k8s: Client, namespace: str) -> list[str]:
    listed = await k8s.list(kinds.Event, namespace=namespace)
    return [
        str(e.get("reason"))
        for e in listed.items
        if e.get("type") == "Warning" and (e.get("regarding") or {}).get("name") == "p"
    ]


@pytest.mark.usefixtures("probe_crd")
async def test_bad_input_stalls_once_and_resumes_after_the_fix(
    k8s: Client, namespace: str, kubeconfig_path: Path
) -> None:
    """An invalid selector, then an invalid child name: each stalls the Probe, once.

    Each bad spec gets a Stalled condition (InvalidSelector, then Invalid from the server's
    422 naming metadata.name) and a Warning Event, and is reconciled once however long the
    operator waits; each fix reconciles it again, and the last one clears the condition.
    """
    calls: list[str] = []
    async with run_operator(operator(namespace, calls), kubeconfig=kubeconfig_path) as op:
        await k8s.create(_probe(namespace, "not a label!"))

        async def stalled_with(reason: str) -> bool:
            condition = await _stalled(k8s, namespace)
            return condition is not None and condition.reason == reason

        await eventually(lambda: stalled_with("InvalidSelector"), timeout=30)
        await eventually(
            lambda: _warning_reasons(k8s, namespace), timeout=30, description="the Event"
        )
        await op.wait_idle(timeout=30, settle=1.0)
        assert calls == ["not a label!"]
        assert await _warning_reasons(k8s, namespace) == ["InvalidSelector"]

        live = await k8s.get(PROBE, "p", namespace=namespace)
        live["spec"] = {"selector": "team=a", "child": "Not_A_Name"}
        await k8s.update(live)
        await eventually(lambda: stalled_with("Invalid"), timeout=30)
        condition = await _stalled(k8s, namespace)
        assert condition is not None and "metadata.name" in condition.message
        await op.wait_idle(timeout=30, settle=1.0)
        assert calls.count("team=a") == 1

        live = await k8s.get(PROBE, "p", namespace=namespace)
        live["spec"]["child"] = "probe-child"
        await k8s.update(live)

        async def cleared() -> bool:
            return await _stalled(k8s, namespace) is None

        await eventually(cleared, timeout=30, description="the Stalled condition removed")
        await k8s.get(kinds.ConfigMap, "probe-child", namespace=namespace)
        metrics = op.metrics
        assert metrics.value("controller_runtime_terminal_reconcile_errors_total") == 2
        assert metrics.value("controller_runtime_reconcile_panics_total") == 0
