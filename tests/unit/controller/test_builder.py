"""The builder: sources, options and validation, before anything runs."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.cache import Cache
from setpoint.controller import (
    Builder,
    Context,
    ControllerError,
    ControllerOptions,
    GenerationChanged,
    Request,
    Result,
)
from setpoint.controller.blocking import SyncContext
from setpoint.controller.controller import Controller

PARENT = GroupVersionKind("test.setpoint.dev", "v1", "Parent")


async def reconcile(ctx: Context, request: Request) -> Result | None:
    return None


class Dummy:
    """Stands in for a client: building never talks to the API."""


def build(builder: Builder, reconciler: Any = reconcile) -> Controller:
    client: Any = Dummy()
    return builder.build(reconciler, client=client, cache=Cache(client))


def test_sources_in_order_with_their_predicates() -> None:
    predicate = GenerationChanged()
    builder = (
        Builder("parents")
        .for_(PARENT, predicates=[predicate])
        .owns(kinds.ConfigMap)
        .watches(kinds.Secret, lambda obj: [])
    )
    assert builder.for_kind == PARENT
    controller = build(builder)
    roles = [(s.role, s.kind.kind, s.predicates) for s in controller._sources]
    assert roles == [
        ("for", "Parent", (predicate,)),
        ("owns", "ConfigMap", ()),
        ("watches", "Secret", ()),
    ]
    assert "for:Parent" in repr(builder)


def test_option_shortcuts_and_with_options() -> None:
    builder = (
        Builder("x").for_(PARENT).max_concurrent_reconciles(8).reconcile_timeout(None)
        .needs_leader_election(False)
    )  # fmt: skip
    assert builder.options.max_concurrent_reconciles == 8
    assert builder.options.reconcile_timeout is None
    controller = build(builder)
    assert controller.options.max_concurrent_reconciles == 8
    assert controller.needs_leader_election is False
    replaced = Builder("y").for_(PARENT).with_options(ControllerOptions(reconcile_timeout=1))
    assert replaced.options.reconcile_timeout == 1
    with pytest.raises(TypeError, match="ControllerOptions"):
        a_dict: Any = {"reconcile_timeout": 1}  # deliberately not ControllerOptions
        Builder("z").with_options(a_dict)


def test_defaults_are_documented_values() -> None:
    options = ControllerOptions()
    assert options.max_concurrent_reconciles == 1
    assert options.reconcile_timeout == 300.0
    assert options.needs_leader_election is True
    assert options.read_after_write_timeout is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_concurrent_reconciles", 0),
        ("max_concurrent_reconciles", True),
        ("reconcile_timeout", 0),
        ("reconcile_timeout", math.inf),
        ("read_after_write_timeout", -1),
        ("cache_sync_timeout", 0),
        ("mapper_timeout", 0),
    ],
)
def test_invalid_options_are_explained(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(ControllerOptions(), **{field: value})


@pytest.mark.parametrize("name", ["", "has space", "a/b", "-lead", "x" * 64])
def test_names_must_be_metric_labels(name: str) -> None:
    with pytest.raises(ControllerError, match="not valid"):
        Builder(name)


def test_a_controller_needs_something_to_watch() -> None:
    with pytest.raises(ControllerError, match="watches nothing"):
        build(Builder("empty"))


def test_owns_needs_for() -> None:
    with pytest.raises(ControllerError, match="owns"):
        build(Builder("orphan").owns(kinds.ConfigMap))


def test_for_is_given_once() -> None:
    with pytest.raises(ControllerError, match="one kind"):
        Builder("twice").for_(PARENT).for_(kinds.ConfigMap)


def test_watches_needs_a_mapper() -> None:
    with pytest.raises(ControllerError, match="mapper"):
        not_callable: Any = "not callable"  # deliberately the wrong type
        Builder("w").watches(kinds.Secret, not_callable)


def test_blocking_reconcilers_are_accepted() -> None:
    # Issue 30: a plain def (function or method) is a blocking reconciler, run in threads.
    def sync_reconcile(ctx: SyncContext, request: Request) -> None:
        return None

    class SyncReconciler:
        def reconcile(self, ctx: SyncContext, request: Request) -> None:
            return None

    assert build(Builder("s").for_(PARENT), sync_reconcile).controller_name == "s"
    assert build(Builder("t").for_(PARENT), SyncReconciler()).controller_name == "t"
    with pytest.raises(ControllerError, match="not a reconciler"):
        build(Builder("s").for_(PARENT), 42)


def test_reconciler_objects_and_functions_are_accepted() -> None:
    class Reconciler:
        async def reconcile(self, ctx: Context, request: Request) -> Result:
            return Result()

    assert build(Builder("o").for_(PARENT), Reconciler()).controller_name == "o"
    assert build(Builder("f").for_(PARENT), reconcile).controller_name == "f"


def test_result_validation() -> None:
    assert Result().requeue_after is None
    assert Result(requeue_after=1.5).requeue_after == 1.5
    for bad in (0, -1, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="requeue_after"):
            Result(requeue_after=bad)
