"""``setpoint.dev/paused`` on a running controller over the fake client, and its parsing.

The controller scenarios live in tests/_support/pause_flow.py;
tests/integration/controller/test_pause.py runs the main ones against the real API server.
"""

from __future__ import annotations

import pytest

from setpoint.controller.pause import Pause, pause_changed, pause_of
from tests._support import finalizer_flow, pause_flow
from tests._support.finalizer_flow import Backend


@pytest.fixture
def backend() -> Backend:
    """The fake, with the test CRDs and a namespace."""
    return finalizer_flow.fake_backend()


def annotated(**annotations: str) -> dict[str, object]:
    return {"metadata": {"name": "x", "annotations": annotations}}


@pytest.mark.parametrize(
    ("value", "controllers"),
    [
        ("true", None),
        ("TRUE", None),
        (" True ", None),
        ("tenant", frozenset({"tenant"})),
        ("tenant, dns ,", frozenset({"tenant", "dns"})),
    ],
)
def test_a_pause_value_names_every_controller_or_a_list(
    value: str, controllers: frozenset[str] | None
) -> None:
    pause = pause_of(annotated(**{"setpoint.dev/paused": value}))
    assert pause is not None
    assert pause.controllers == controllers
    assert pause.applies_to("tenant")
    assert pause.applies_to("billing") is (controllers is None)
    assert not pause.hold_deletion


@pytest.mark.parametrize("value", ["", "false", "False", " , "])
def test_false_empty_and_no_name_pause_nothing(value: str) -> None:
    assert pause_of(annotated(**{"setpoint.dev/paused": value})) is None
    assert pause_of(annotated()) is None
    assert pause_of({}) is None


def test_paused_deletion_counts_only_on_a_paused_object() -> None:
    both = annotated(**{"setpoint.dev/paused": "true", "setpoint.dev/paused-deletion": "True"})
    assert pause_of(both) == Pause(value="true", controllers=None, hold_deletion=True)
    assert pause_of(annotated(**{"setpoint.dev/paused-deletion": "true"})) is None


def test_pause_changed_sees_either_annotation() -> None:
    plain = annotated(other="1")
    assert not pause_changed(plain, annotated(other="2"))
    assert pause_changed(plain, annotated(**{"setpoint.dev/paused": "true"}))
    assert pause_changed(
        annotated(**{"setpoint.dev/paused": "true"}),
        annotated(**{"setpoint.dev/paused": "true", "setpoint.dev/paused-deletion": "true"}),
    )


async def test_paused_object_is_left_alone_then_resumes(backend: Backend) -> None:
    await pause_flow.paused_object_is_left_alone_then_resumes(backend)


async def test_paused_object_being_deleted_still_runs_its_cleanup(backend: Backend) -> None:
    await pause_flow.paused_object_being_deleted_still_runs_its_cleanup(backend)


async def test_paused_deletion_holds_the_cleanup_until_the_pause_ends(backend: Backend) -> None:
    await pause_flow.paused_deletion_holds_the_cleanup_until_the_pause_ends(backend)


async def test_pause_names_controllers(backend: Backend) -> None:
    await pause_flow.pause_names_controllers(backend)


async def test_kind_without_status_gets_the_event_once(backend: Backend) -> None:
    await pause_flow.kind_without_status_gets_the_event_once(backend)
