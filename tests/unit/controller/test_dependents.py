"""Dependents in order (``setpoint.controller.dependents``) over the fake client.

The chain is tests/_support/dependents_flow.py's; tests/integration/controller/
test_dependents.py runs it in a controller on the real API server.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from setpoint.api.keys import ObjectKey
from setpoint.api.meta import JsonObject
from setpoint.client.errors import NotFound
from setpoint.controller import Context, ControllerError
from setpoint.controller.dependents import (
    Dependent,
    DependentFailed,
    DependentInvalid,
    Dependents,
    rollout_complete,
)
from setpoint.observability.logging import get_logger
from tests._support import dependents_flow as flow
from tests._support import finalizer_flow
from tests._support.finalizer_flow import Backend
from tests._support.kinds import GIZMO


@pytest.fixture
def backend() -> Backend:
    return finalizer_flow.fake_backend()


def context(backend: Backend, name: str) -> Context:
    return Context(
        request=ObjectKey(backend.namespace, name),
        reconcile_id="test",
        log=get_logger("test.dependents"),
        client=backend.client,
        reader=backend.client,
        recorder=None,
        controller="shop",
        gvk=GIZMO,
    )


async def parent(backend: Backend, name: str, **spec: Any) -> JsonObject:
    try:
        got: JsonObject = await backend.client.get(GIZMO, name, namespace=backend.namespace)
    except NotFound:
        got = await backend.client.create(flow.parent_of(name, backend.namespace, **spec))
    return got


async def exists(backend: Backend, kind: Any, name: str) -> bool:
    return await backend.read(kind, name) is not None


# -- declaration -------------------------------------------------------------------------------


def test_the_order_follows_depends_on_then_declaration() -> None:
    assert flow.chain().order == ("config", "db", "app")
    noop = flow.config
    independent = Dependents(
        Dependent("b", noop),
        Dependent("a", noop),
        Dependent("c", noop, depends_on=["a"]),
        field_manager="m",
    )
    assert independent.order == ("b", "a", "c")


def test_a_cycle_is_refused_at_declaration_and_named() -> None:
    noop = flow.config
    with pytest.raises(ControllerError, match=r"cycle: a -> b -> c -> a"):
        Dependents(
            Dependent("a", noop, depends_on=["b"]),
            Dependent("b", noop, depends_on=["c"]),
            Dependent("c", noop, depends_on=["a"]),
            field_manager="m",
        )
    with pytest.raises(ControllerError, match=r"cycle: a -> a"):
        Dependents(Dependent("a", noop, depends_on=["a"]), field_manager="m")


def test_unknown_and_repeated_names_are_refused() -> None:
    noop = flow.config
    with pytest.raises(ControllerError, match="depends on 'db', which is not declared"):
        Dependents(Dependent("app", noop, depends_on=["db"]), field_manager="m")
    with pytest.raises(ControllerError, match="two dependents are named 'a'"):
        Dependents(Dependent("a", noop), Dependent("a", noop), field_manager="m")


# -- reconcile ---------------------------------------------------------------------------------


async def test_the_chain_stops_at_the_first_dependent_not_ready_and_says_so(
    backend: Backend,
) -> None:
    dependents = flow.chain()
    shop = await parent(backend, "shop")
    outcome = await dependents.reconcile(context(backend, "shop"), shop)
    assert outcome.states == {"config": "ready", "db": "waiting", "app": "blocked"}
    assert not outcome.ready
    assert await exists(backend, flow.CONFIG_MAP, "shop-config")
    assert await exists(backend, GIZMO, "shop-db")
    assert not await exists(backend, flow.CONFIG_MAP, "shop-app")
    condition = flow.condition_of(await parent(backend, "shop"))
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Waiting")
    assert condition["message"] == "waiting for db to be ready; not applied yet: app"

    db = await backend.client.get(GIZMO, "shop-db", namespace=backend.namespace)
    assert db["metadata"]["ownerReferences"][0]["name"] == "shop"
    flow.mark_ready(db)
    await backend.client.replace_status(db)
    outcome = await dependents.reconcile(context(backend, "shop"), await parent(backend, "shop"))
    assert outcome.ready
    assert await exists(backend, flow.CONFIG_MAP, "shop-app")
    condition = flow.condition_of(await parent(backend, "shop"))
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "AllReady")
    assert condition["message"] == "ready: config, db, app"


async def test_a_ready_condition_about_an_older_generation_is_not_ready(
    backend: Backend,
) -> None:
    dependents = flow.chain()
    shop = await parent(backend, "old")
    await dependents.reconcile(context(backend, "old"), shop)
    db = await backend.client.get(GIZMO, "old-db", namespace=backend.namespace)
    flow.mark_ready(db, generation=db["metadata"]["generation"] - 1 or 99)
    await backend.client.replace_status(db)
    outcome = await dependents.reconcile(context(backend, "old"), shop)
    assert outcome.states["db"] == "waiting"


async def test_a_failing_middle_dependent_reports_fails_and_blocks_the_rest(
    backend: Backend,
) -> None:
    dependents = flow.chain()
    shop = await parent(backend, "broken", color="broken")
    with pytest.raises(DependentInvalid, match="applying dependent 'db' failed") as raised:
        await dependents.reconcile(context(backend, "broken"), shop)
    assert raised.value.dependent == "db"
    assert await exists(backend, flow.CONFIG_MAP, "broken-config")
    assert not await exists(backend, GIZMO, "broken-db")
    assert not await exists(backend, flow.CONFIG_MAP, "broken-app")
    condition = flow.condition_of(await parent(backend, "broken"))
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", "Failed")
    assert condition["message"].startswith("applying db failed: ")
    assert condition["message"].endswith("; not applied until it succeeds: app")


async def test_an_inactive_dependent_is_deleted_and_counts_as_done(backend: Backend) -> None:
    dependents = flow.chain()
    shop = await parent(backend, "toggle")
    await dependents.reconcile(context(backend, "toggle"), shop)
    db = await backend.client.get(GIZMO, "toggle-db", namespace=backend.namespace)
    flow.mark_ready(db)
    await backend.client.replace_status(db)
    await dependents.reconcile(context(backend, "toggle"), shop)
    assert await exists(backend, flow.CONFIG_MAP, "toggle-app")

    shop = await parent(backend, "toggle")
    shop["spec"]["color"] = "off"
    shop = await backend.client.update(shop)
    outcome = await dependents.reconcile(context(backend, "toggle"), shop)
    assert outcome.states["app"] == "inactive"
    assert outcome.ready
    assert not await exists(backend, flow.CONFIG_MAP, "toggle-app")
    condition = flow.condition_of(await parent(backend, "toggle"))
    assert condition is not None
    assert condition["message"] == "ready: config, db; inactive: app"


async def test_an_inactive_child_of_someone_else_is_left_alone(backend: Backend) -> None:
    foreign = flow.app({"metadata": {"name": "alone"}})
    foreign["metadata"]["namespace"] = backend.namespace
    await backend.client.create(foreign)
    shop = await parent(backend, "alone", color="off")
    outcome = await flow.chain().reconcile(context(backend, "alone"), shop)
    assert outcome.states["app"] == "inactive"
    assert await exists(backend, flow.CONFIG_MAP, "alone-app")  # not controlled by the parent


async def test_cleanups_run_dependents_before_what_they_depend_on(backend: Backend) -> None:
    order: list[tuple[str, bool]] = []

    def cleanup(name: str) -> Any:
        async def run(ctx: Context, parent: Any, child: Any) -> None:
            order.append((name, child is not None))

        return run

    dependents = Dependents(
        Dependent("config", flow.config, cleanup=cleanup("config")),
        Dependent("db", flow.db, depends_on=["config"], cleanup=cleanup("db")),
        Dependent("app", flow.app, depends_on=["db"]),
        field_manager="m",
        condition=None,
        poll_not_ready=5,
    )
    shop = await parent(backend, "clean")
    outcome = await dependents.reconcile(context(backend, "clean"), shop)
    assert outcome.ready and outcome.requeue_after is None
    await dependents.cleanup(context(backend, "clean"), shop)
    assert order == [("db", True), ("config", True)]
    assert flow.condition_of(await parent(backend, "clean")) is None  # condition=None


@pytest.mark.parametrize(
    ("status", "ready"),
    [
        (
            {
                "observedGeneration": 2,
                "updatedReplicas": 3,
                "readyReplicas": 3,
                "availableReplicas": 3,
            },
            True,
        ),
        (
            {
                "observedGeneration": 1,
                "updatedReplicas": 3,
                "readyReplicas": 3,
                "availableReplicas": 3,
            },
            False,
        ),
        ({"observedGeneration": 2, "updatedReplicas": 3, "readyReplicas": 3}, False),
        (
            {
                "observedGeneration": 2,
                "updatedReplicas": 2,
                "readyReplicas": 3,
                "availableReplicas": 3,
            },
            False,
        ),
    ],
)
def test_rollout_complete_reads_a_deployments_status(status: JsonObject, ready: bool) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "generation": 2},
        "spec": {"replicas": 3},
        "status": status,
    }
    assert rollout_complete(deployment) is ready


async def test_the_chain_in_a_controller(backend: Backend) -> None:
    await flow.chain_in_a_controller(backend)


async def test_a_parent_without_a_status_subresource_gets_no_condition(
    backend: Backend,
) -> None:
    from tests._support.kinds import DOODAD

    dependents = Dependents(Dependent("config", flow.config), field_manager="m")
    doodad = await backend.client.create(backend.obj(DOODAD, "plain"))
    for _ in range(2):  # warned once, never raised
        outcome = await dependents.reconcile(context(backend, "plain"), doodad)
        assert outcome.ready
    assert await exists(backend, flow.CONFIG_MAP, "plain-config")


async def test_a_typed_child_without_a_namespace_goes_to_the_parents(backend: Backend) -> None:
    from setpoint.api.kinds import core_v1

    made: list[Any] = []

    def typed_config(parent: JsonObject) -> Any:
        child = core_v1.ConfigMap(
            metadata={"name": f"{parent['metadata']['name']}-typed"}, data={"a": "1"}
        )
        made.append(child)
        return child

    dependents = Dependents(Dependent("config", typed_config), field_manager="m")
    shop = await parent(backend, "typed")
    outcome = await dependents.reconcile(context(backend, "typed"), shop)
    assert outcome.ready
    live = await backend.client.get(flow.CONFIG_MAP, "typed-typed", namespace=backend.namespace)
    assert live["data"] == {"a": "1"}
    assert made[0].metadata.namespace is None  # the author's object is left as it was


async def test_a_failed_deletion_of_an_inactive_child_is_reported(backend: Backend) -> None:
    from setpoint.client.errors import Forbidden

    dependents = flow.chain()
    shop = await parent(backend, "nodelete")
    await dependents.reconcile(context(backend, "nodelete"), shop)
    db = await backend.client.get(GIZMO, "nodelete-db", namespace=backend.namespace)
    flow.mark_ready(db)
    await backend.client.replace_status(db)
    await dependents.reconcile(context(backend, "nodelete"), shop)
    assert await exists(backend, flow.CONFIG_MAP, "nodelete-app")

    shop = await parent(backend, "nodelete")
    shop["spec"]["color"] = "off"
    shop = await backend.client.update(shop)

    class Refusing:
        """The fake, refusing deletes (as RBAC without the delete verb would)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(backend.client, name)

        async def delete(self, *args: Any, **kwargs: Any) -> Any:
            raise Forbidden("deleting is not allowed", code=403)

    refused = dataclasses.replace(context(backend, "nodelete"), client=Refusing())
    with pytest.raises(DependentFailed, match="deleting dependent 'app' failed"):
        await dependents.reconcile(refused, shop)
    condition = flow.condition_of(await parent(backend, "nodelete"))
    assert condition is not None and condition["reason"] == "Failed"
    assert condition["message"].startswith("deleting app failed: ")
    assert await exists(backend, flow.CONFIG_MAP, "nodelete-app")
