"""Property tests: typed objects round-trip losslessly for any object valid under their CRD schema.

Objects are generated from the generated schema itself (see crd_strategies),
so the properties cover every declaration in the fixture types.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.api.resource import Resource
from setpoint.crd import find_resources, resource_schema, validate_default
from tests._support.crd_golden import load_fixtures
from tests._support.crd_strategies import for_schema

FIXTURES = load_fixtures()
RESOURCES = find_resources([FIXTURES])
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def objects_of(cls: type[Resource], *, unknown_fields: bool) -> Any:
    schema = resource_schema(cls).schema
    gvk = cls.declaration().gvk
    return for_schema(schema, unknown_fields=unknown_fields, resource_root=True).map(
        lambda obj: {**obj, "apiVersion": gvk.api_version, "kind": gvk.kind}
    )


def _without_meta(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}


@pytest.mark.parametrize("cls", RESOURCES, ids=lambda c: c.__name__)
@SETTINGS
@given(data=st.data())
def test_generated_objects_are_valid_for_the_schema(cls: type[Resource], data: Any) -> None:
    # Self-check of the strategy: what it generates passes the schema's own value rules.
    schema = resource_schema(cls).schema
    obj = data.draw(objects_of(cls, unknown_fields=False))
    body_schema = {
        **schema,
        "properties": {
            k: v
            for k, v in schema["properties"].items()
            if k not in ("apiVersion", "kind", "metadata")
        },
    }
    assert validate_default(_without_meta(obj), body_schema, ()) == []


@pytest.mark.parametrize("cls", RESOURCES, ids=lambda c: c.__name__)
@SETTINGS
@given(data=st.data())
def test_json_model_json_is_lossless(cls: type[Resource], data: Any) -> None:
    obj = data.draw(objects_of(cls, unknown_fields=True))
    original = copy.deepcopy(obj)
    model = cls.from_object(obj)
    out = model.to_object()
    assert out == original  # nothing dropped, nothing invented, unknown fields kept
    assert obj == original  # the input was not mutated


@pytest.mark.parametrize("cls", RESOURCES, ids=lambda c: c.__name__)
@SETTINGS
@given(data=st.data())
def test_model_json_model_is_stable(cls: type[Resource], data: Any) -> None:
    model = cls.from_object(data.draw(objects_of(cls, unknown_fields=True)))
    again = cls.from_object(model.to_object())
    assert again == model
    assert again.to_object() == model.to_object()
    assert again.model_fields_set == model.model_fields_set
