"""Conditions helpers: metav1.Condition semantics on dicts and typed status models."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from setpoint.api.conditions import (
    Condition,
    ConditionError,
    find_condition,
    is_condition_false,
    is_condition_true,
    remove_condition,
    set_condition,
    set_observed_generation,
    validate_condition,
)
from setpoint.api.declaration import field, resource
from setpoint.api.resource import Model, Resource
from setpoint.api.validation import CONDITION_REASON_PATTERN, ConditionStatus

T0 = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


class GadgetStatus(Model):
    conditions: list[Condition] = field(
        default_factory=list, list_type="map", list_map_keys=["type"]
    )
    observed_generation: int | None = None


class GadgetSpec(Model):
    size: int = 1


@resource(group="unit.setpoint.dev", version="v1")
class Gadget(Resource):
    spec: GadgetSpec = field(default_factory=GadgetSpec)
    status: GadgetStatus | None = None


class BareStatus(Model):
    conditions: list[Condition] | None = None


def test_set_creates_the_list_and_writes_the_wire_form() -> None:
    status: dict[str, Any] = {}
    assert set_condition(status, "Ready", True, "Available", "up", observed_generation=3, now=T0)
    assert status == {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "message": "up",
                "observedGeneration": 3,
                "lastTransitionTime": "2024-01-02T03:04:05Z",
            }
        ]
    }


def test_transition_time_moves_only_when_status_flips() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", False, "Starting", now=T0)
    assert set_condition(status, "Ready", False, "StillStarting", "slow", now=T1)
    cond = status["conditions"][0]
    assert (cond["reason"], cond["message"], cond["lastTransitionTime"]) == (
        "StillStarting",
        "slow",
        "2024-01-02T03:04:05Z",
    )
    assert not set_condition(status, "Ready", False, "StillStarting", "slow", now=T1)
    assert set_condition(status, "Ready", "True", "Available", now=T1)
    assert status["conditions"][0]["lastTransitionTime"] == "2024-01-02T03:09:05Z"
    assert len(status["conditions"]) == 1


def test_observed_generation_none_removes_it() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", True, "Ok", observed_generation=2, now=T0)
    assert set_condition(status, "Ready", True, "Ok", now=T0)
    assert "observedGeneration" not in status["conditions"][0]


def test_now_defaults_to_current_time_in_whole_seconds() -> None:
    status: dict[str, Any] = {}
    before = datetime.now(UTC).replace(microsecond=0)
    set_condition(status, "Ready", True, "Ok")
    stamp = datetime.strptime(status["conditions"][0]["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")
    assert stamp.replace(tzinfo=UTC) >= before


@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"type": "Ready", "status": "True", "reason": "has space"}, "reason"),
        ({"type": "Ready", "status": "True", "reason": "1Leading"}, "reason"),
        ({"type": "Ready", "status": "True", "reason": "Trailing:"}, "reason"),
        ({"type": "Ready", "status": "True", "reason": ""}, "reason"),
        ({"type": "Ready", "status": "True", "reason": "R" * 1025}, "reason"),
        ({"type": "not ok", "status": "True", "reason": "Ok"}, "type"),
        ({"type": "Bad_/Ready", "status": "True", "reason": "Ok"}, "type"),
        ({"type": "Ready", "status": "Yes", "reason": "Ok"}, "status"),
        ({"type": "Ready", "status": "True", "reason": "Ok", "message": "m" * 32769}, "message"),
        (
            {"type": "Ready", "status": "True", "reason": "Ok", "observed_generation": -1},
            "observedGeneration",
        ),
    ],
)
def test_validation_names_the_bad_field(kwargs: dict[str, Any], field_name: str) -> None:
    problems = validate_condition(**kwargs)
    assert len(problems) == 1
    assert problems[0].startswith(field_name)
    status: dict[str, Any] = {}
    with pytest.raises(ConditionError, match=field_name):
        set_condition(
            status,
            kwargs["type"],
            kwargs["status"],
            kwargs["reason"],
            kwargs.get("message", ""),
            observed_generation=kwargs.get("observed_generation"),
        )
    assert status == {}


@pytest.mark.parametrize(
    ("type_", "reason"),
    [
        ("Ready", "MinimumReplicasAvailable"),
        ("example.com/Ready", "Reason_With,Commas:And_Underscores"),
        ("a", "r"),
        ("Ready", "lowerCamel"),
    ],
)
def test_valid_conditions_pass(type_: str, reason: str) -> None:
    assert validate_condition(type_, "Unknown", reason) == []


def test_naive_now_is_refused() -> None:
    with pytest.raises(ConditionError, match="timezone"):
        set_condition({}, "Ready", True, "Ok", now=datetime(2024, 1, 1))
    status: dict[str, Any] = {}
    set_condition(status, "Ready", True, "Ok")
    with pytest.raises(ConditionError, match="timezone"):  # also when nothing would change
        set_condition(status, "Ready", True, "Ok", now=datetime(2024, 1, 1))


def test_remembered_valid_conditions_do_not_let_an_invalid_one_through() -> None:
    """set_condition skips re-validating a condition it validated before, never a bad one."""
    status: dict[str, Any] = {}
    for _ in range(2):
        assert set_condition(status, "Ready", True, "Fine", "ok") in (True, False)
        with pytest.raises(ConditionError, match="reason"):
            set_condition(status, "Ready", True, "not fine", "ok")
        with pytest.raises(ConditionError, match="observedGeneration"):
            set_condition(status, "Ready", True, "Fine", "ok", observed_generation=-1)
    assert status["conditions"][0]["reason"] == "Fine"


def test_find_remove_and_truth() -> None:
    status: dict[str, Any] = {}
    set_condition(status, "Ready", True, "Ok", now=T0)
    set_condition(status, "Degraded", False, "Fine", now=T0)
    set_condition(status, "Progressing", "Unknown", "Waiting", now=T0)
    assert is_condition_true(status, "Ready")
    assert not is_condition_false(status, "Ready")
    assert is_condition_false(status, "Degraded")
    assert not is_condition_true(status, "Progressing")
    assert not is_condition_false(status, "Progressing")
    assert not is_condition_true(status, "Missing")
    found = find_condition(status, "Degraded")
    assert found is not None
    assert (found.status, found.reason, found.last_transition_time) == ("False", "Fine", T0)
    assert find_condition(status, "Missing") is None
    assert remove_condition(status, "Degraded")
    assert not remove_condition(status, "Degraded")
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Progressing"]
    assert not remove_condition({}, "Ready")


def test_find_reports_a_malformed_stored_condition() -> None:
    status = {"conditions": [{"type": "Ready", "status": "True"}]}
    with pytest.raises(ConditionError, match="malformed"):
        find_condition(status, "Ready")


def test_typed_status_holds_condition_models() -> None:
    status = GadgetStatus()
    assert set_condition(status, "Ready", True, "Ok", observed_generation=1, now=T0)
    assert isinstance(status.conditions[0], Condition)
    assert not set_condition(status, "Ready", True, "Ok", observed_generation=1, now=T1)
    assert set_condition(status, "Ready", False, "Broken", now=T1)
    assert status.conditions[0].last_transition_time == T1
    assert status.model_dump(mode="json", by_alias=True) == {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "lastTransitionTime": "2024-01-02T03:09:05Z",
                "reason": "Broken",
                "message": "",
            }
        ]
    }
    assert find_condition(status, "Ready") is status.conditions[0]
    assert is_condition_false(status, "Ready")
    assert remove_condition(status, "Ready")
    assert status.conditions == []


def test_typed_status_with_unset_list_and_a_bare_typed_list() -> None:
    status = BareStatus()
    assert not remove_condition(status, "Ready")
    assert status.conditions is None
    set_condition(status, "Ready", True, "Ok", now=T0)
    assert status.conditions is not None and isinstance(status.conditions[0], Condition)
    items = status.conditions
    set_condition(items, "Other", True, "Ok", now=T0)
    assert isinstance(items[1], Condition)
    parsed = BareStatus.model_validate(status.model_dump(mode="json", by_alias=True))
    assert parsed == status


def test_not_a_holder_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="conditions"):
        set_condition(42, "Ready", True, "Ok")


def test_observed_generation_on_dicts() -> None:
    obj = {"kind": "Gadget", "metadata": {"name": "g", "generation": 4}}
    assert set_observed_generation(obj)
    assert obj["status"] == {"observedGeneration": 4}
    assert not set_observed_generation(obj)
    with pytest.raises(ValueError, match="generation"):
        set_observed_generation({"kind": "Gadget", "metadata": {"name": "new"}})


def test_observed_generation_on_typed_resources() -> None:
    gadget = Gadget.from_object(
        {"apiVersion": "unit.setpoint.dev/v1", "kind": "Gadget", "metadata": {"generation": 7}}
    )
    assert set_observed_generation(gadget)
    assert gadget.status is not None and gadget.status.observed_generation == 7
    assert gadget.to_object()["status"] == {"observedGeneration": 7}
    assert not set_observed_generation(gadget)
    with pytest.raises(ValueError, match="generation"):
        set_observed_generation(Gadget())

    @resource(group="unit.setpoint.dev", version="v1", kind="Plain")
    class Plain(Resource):
        status: BareStatus | None = None

    plain = Plain.from_object({"metadata": {"generation": 1}})
    with pytest.raises(ValueError, match="observed_generation"):
        set_observed_generation(plain)


@given(
    reason=st.from_regex(CONDITION_REASON_PATTERN, fullmatch=True).filter(lambda r: len(r) <= 1024),
    message=st.text(max_size=50),
    status=st.sampled_from(["True", "False", "Unknown"]),
    generation=st.none() | st.integers(min_value=0, max_value=2**40),
)
def test_setting_twice_is_idempotent(
    reason: str, message: str, status: ConditionStatus, generation: int | None
) -> None:
    holder: dict[str, Any] = {}
    assert set_condition(
        holder,
        "Ready",
        status,
        reason,
        message,
        observed_generation=generation,
        now=T0,
    )
    snapshot = [dict(c) for c in holder["conditions"]]
    assert not set_condition(
        holder,
        "Ready",
        status,
        reason,
        message,
        observed_generation=generation,
        now=T1,
    )
    assert holder["conditions"] == snapshot
    found = find_condition(holder, "Ready")
    assert found is not None and found.reason == reason


def test_observed_generation_can_be_the_one_acted_on() -> None:
    """A retried mutation on a fresher copy must not claim the newer generation."""
    fresher: dict[str, Any] = {
        "metadata": {"name": "t", "generation": 5},
        "status": {"observedGeneration": 3},
    }
    assert set_observed_generation(fresher, 4)
    assert fresher["status"]["observedGeneration"] == 4
    assert not set_observed_generation(fresher, 4)
