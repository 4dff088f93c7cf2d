"""A three-level chain of dependents: a ConfigMap, a Gizmo that must turn Ready, a ConfigMap.

The parent is a Gizmo. ``config`` (a ConfigMap) is ready once applied; ``db`` (a child
Gizmo) is ready when its ``Ready`` condition is True, which the test sets by hand (as a
database operator would); ``app`` (a ConfigMap) depends on ``db`` and applies only while
the parent's ``spec.color`` is not ``"off"``. A parent with ``spec.color == "broken"`` makes
``db`` invalid (a label value the server refuses with 422).

tests/unit/controller/test_dependents.py drives it over the fake client;
tests/integration/controller/test_dependents.py runs it in a controller on the real plane.
"""

from __future__ import annotations

from typing import Any

from setpoint.api import kinds
from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.client.errors import NotFound
from setpoint.client.patch import MergePatch
from setpoint.controller import Builder, Context, Request, Result
from setpoint.controller.dependents import Dependent, Dependents
from setpoint.testing import eventually
from tests._support.finalizer_flow import Backend, Operator
from tests._support.kinds import GIZMO

FIELD_MANAGER = "dependents-test"


def config(parent: JsonObject) -> JsonObject:
    name = parent["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config"},
        "data": {"size": str((parent.get("spec") or {}).get("size", 1))},
    }


def db(parent: JsonObject) -> JsonObject:
    name = parent["metadata"]["name"]
    spec = parent.get("spec") or {}
    # A label value must start and end with a letter or digit: the server refuses "-x-".
    tier = f"-{spec['color']}-" if spec.get("color") == "broken" else "db"
    return {
        "apiVersion": GIZMO.api_version,
        "kind": GIZMO.kind,
        "metadata": {"name": f"{name}-db", "labels": {"tier": tier}},
        "spec": {"size": spec.get("size", 1)},
    }


def app(parent: JsonObject) -> JsonObject:
    name = parent["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-app"},
        "data": {"database": f"{name}-db"},
    }


def app_enabled(parent: JsonObject) -> bool:
    return (parent.get("spec") or {}).get("color") != "off"


def chain(**options: Any) -> Dependents:
    """The three-level chain, declared out of order (the order comes from depends_on)."""
    return Dependents(
        Dependent("app", app, depends_on=["db"], activate=app_enabled),
        Dependent("db", db, depends_on=["config"], ready="Ready"),
        Dependent("config", config),
        field_manager=FIELD_MANAGER,
        **options,
    )


def parent_of(name: str, namespace: str, **spec: Any) -> JsonObject:
    return {
        "apiVersion": GIZMO.api_version,
        "kind": GIZMO.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": 2, **spec},
    }


def mark_ready(db_object: JsonObject, generation: int | None = None) -> None:
    """Set the child Gizmo's Ready condition in place (the test plays the db's operator)."""
    status = db_object.setdefault("status", {})
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Up",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": generation or db_object["metadata"].get("generation", 1),
        }
    ]


def condition_of(parent: JsonObject, kind: str = "DependentsReady") -> JsonObject | None:
    for condition in (parent.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            found: JsonObject = condition
            return found
    return None


CONFIG_MAP = kinds.ConfigMap


# -- the scenario, in a controller ---------------------------------------------------------------


async def chain_in_a_controller(backend: Backend) -> None:
    """The chain in a running controller: each level waits for the one before, a broken
    middle level stops it, and a fix of the parent's spec lets it go on."""
    dependents = chain()

    async def reconcile(ctx: Context, request: Request) -> Result | None:
        try:
            obj = await ctx.reader.get(GIZMO, request.name, namespace=request.namespace)
        except NotFound:
            return None
        if obj["metadata"].get("ownerReferences"):
            return None  # a "db" child: the parents are the Gizmos nobody owns
        outcome = await dependents.reconcile(ctx, obj)
        return Result(requeue_after=outcome.requeue_after) if outcome.requeue_after else None

    operator = Operator(backend, name="shop")
    operator.reconcile = reconcile  # type: ignore[method-assign]
    builder = Builder("shop").for_(GIZMO).owns(GIZMO).owns(kinds.ConfigMap)
    await operator.start(builder)
    try:
        await _good_chain(backend)
        await _settled_chain_writes_nothing(backend, operator)
        await _broken_middle(backend)
    finally:
        await operator.stop()


async def _condition(backend: Backend, name: str, reason: str) -> JsonObject | None:
    parent = await backend.read(GIZMO, name)
    condition = condition_of(parent) if parent is not None else None
    return condition if condition is not None and condition["reason"] == reason else None


async def _good_chain(backend: Backend) -> None:
    client = backend.client
    await client.create(parent_of("shop", backend.namespace))
    waiting = await eventually(
        lambda: _condition(backend, "shop", "Waiting"), timeout=30, description="Waiting"
    )
    assert waiting["message"] == "waiting for db to be ready; not applied yet: app"
    assert await backend.read(CONFIG_MAP, "shop-config") is not None
    assert await backend.read(CONFIG_MAP, "shop-app") is None

    db = await client.get(GIZMO, "shop-db", namespace=backend.namespace)
    mark_ready(db)
    await client.replace_status(db)  # the db's own operator reports it Ready
    ready = await eventually(
        lambda: _condition(backend, "shop", "AllReady"), timeout=30, description="AllReady"
    )
    assert ready["status"] == "True"
    app_map = await backend.read(CONFIG_MAP, "shop-app")
    assert app_map is not None and app_map["data"] == {"database": "shop-db"}


async def _settled_chain_writes_nothing(backend: Backend, operator: Operator) -> None:
    """Reconciling a settled chain again changes no object: the applies and the condition
    find everything as wanted."""
    names = [(GIZMO, "shop"), (CONFIG_MAP, "shop-config"), (GIZMO, "shop-db")]
    names.append((CONFIG_MAP, "shop-app"))
    controller = operator.controller
    assert controller is not None
    await controller.wait_idle(timeout=30, settle=0.5)

    async def versions() -> list[str]:
        found = [await backend.read(kind, name) for kind, name in names]
        return [obj["metadata"]["resourceVersion"] for obj in found if obj is not None]

    before = await versions()
    reconciles = operator.successes()
    controller.enqueue(ObjectKey(backend.namespace, "shop"))
    await eventually(
        lambda: operator.successes() > reconciles, timeout=30, description="reconciled again"
    )
    await controller.wait_idle(timeout=30, settle=0.5)
    assert await versions() == before


async def _broken_middle(backend: Backend) -> None:
    client = backend.client
    await client.create(parent_of("broken", backend.namespace, color="broken"))
    failed = await eventually(
        lambda: _condition(backend, "broken", "Failed"), timeout=30, description="Failed"
    )
    assert failed["message"].startswith("applying db failed: ")
    assert failed["message"].endswith("; not applied until it succeeds: app")
    assert await backend.read(CONFIG_MAP, "broken-config") is not None
    assert await backend.read(GIZMO, "broken-db") is None
    assert await backend.read(CONFIG_MAP, "broken-app") is None

    # The server refused the child as invalid: a terminal error, not retried ...
    async def stalled() -> bool:
        parent = await backend.read(GIZMO, "broken")
        condition = condition_of(parent, "Stalled") if parent is not None else None
        return condition is not None and condition["reason"] == "DependentInvalid"

    await eventually(stalled, timeout=30, description="Stalled: DependentInvalid")
    # ... until the parent changes: fixed, the chain goes on to wait for the db.
    await client.patch(
        GIZMO, "broken", MergePatch({"spec": {"color": "blue"}}), namespace=backend.namespace
    )
    await eventually(
        lambda: _condition(backend, "broken", "Waiting"), timeout=30, description="Waiting"
    )
    assert await backend.read(GIZMO, "broken-db") is not None
