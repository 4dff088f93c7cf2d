"""The fake checks custom resources against their schema: fieldValidation, pruning, defaults.

The same behaviour against a real API server: tests/integration/parity/test_parity_schema.py.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import pytest

import setpoint as sp
from setpoint.api import kinds
from setpoint.client import collect_warnings
from setpoint.client.errors import BadRequest, InternalError, Invalid
from setpoint.client.patch import MergePatch
from setpoint.crd import crd_for
from setpoint.testing import FakeClient

GROUP = "schema.test.setpoint.dev"


class PartSpec(sp.Model):
    """A spec with a default, an enum, a bound and a required field."""

    name: str
    """Required."""
    size: int = sp.field(default=3, minimum=1)
    """Defaulted to 3, at least 1."""
    mode: Literal["fast", "slow"] | None = None
    """An enum."""


@sp.resource(group=GROUP, version="v1")
class Part(sp.Resource):
    """A typed kind whose schema the fake generates."""

    spec: PartSpec | None = None


def part(obj_name: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Part",
        "metadata": {"name": obj_name, "namespace": "default"},
        "spec": spec,
    }


async def test_a_typed_kind_is_pruned_defaulted_and_validated() -> None:
    fake = FakeClient(resources=[Part])
    created = await fake.create(part(name="x", extra=1), field_validation="Ignore")
    assert created["spec"] == {"name": "x", "size": 3}

    with pytest.raises(Invalid) as refused:
        await fake.create(part("q", size=0, mode="medium"))
    causes = [(c.field, c.reason) for c in refused.value.causes]
    assert causes == [
        ("spec.mode", "FieldValueNotSupported"),
        ("spec.name", "FieldValueRequired"),
        ("spec.size", "FieldValueInvalid"),
    ]
    assert refused.value.causes[2].message.startswith("Invalid value: 0: spec.size in body")
    assert fake.lookup(Part, "q", namespace="default") is None


async def test_field_validation_strict_warn_ignore(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeClient(resources=[Part])
    with pytest.raises(BadRequest, match=r'unknown field "spec\.extra"'):
        await fake.create(part(name="x", extra=1), field_validation="Strict")
    with caplog.at_level(logging.WARNING), collect_warnings() as warnings:
        await fake.create(part(name="x", extra=1))  # a dict: the server's default, Warn
    assert warnings == ['unknown field "spec.extra"']
    assert any('unknown field "spec.extra"' in r.getMessage() for r in caplog.records)
    with collect_warnings() as warnings:
        await fake.patch(
            Part,
            "p",
            MergePatch({"spec": {"extra": 2}}),
            namespace="default",
            field_validation="Ignore",
        )
    assert warnings == []
    with pytest.raises(Invalid) as strict_patch:
        await fake.patch(Part, "p", MergePatch({"spec": {"extra": 2}}), namespace="default")
    assert [c.field for c in strict_patch.value.causes] == ["patch"]  # typed kind: Strict
    with pytest.raises(InternalError, match=r"\.spec\.extra: field not declared in schema"):
        await fake.apply(part(name="x", extra=1), field_manager="m", field_validation="Ignore")


async def test_a_typed_object_is_strict_by_default() -> None:
    fake = FakeClient(resources=[Part])
    typed = Part.from_object(part(name="x", extra=1))
    with pytest.raises(BadRequest, match=r'unknown field "spec\.extra"'):
        await fake.create(typed)


async def test_the_crd_created_in_the_fake_is_the_schema_used() -> None:
    """A CRD written in the fake replaces the schema generated from the Python type."""
    crd = crd_for(Part)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["extra"] = {"type": "integer"}
    fake = FakeClient(resources=[Part])
    await fake.create(crd)
    created = await fake.create(part(name="x", extra=1), field_validation="Strict")
    assert created["spec"]["extra"] == 1


async def test_kinds_without_a_schema_are_stored_as_sent() -> None:
    """Registered by ResourceInfo only (or built in): nothing to check against."""
    fake = FakeClient(resources=[Part.resource_info()])
    created = await fake.create(part(size=0, extra=1), field_validation="Strict")
    assert created["spec"] == {"size": 0, "extra": 1}
    cm = await fake.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "default"},
            "bogus": 1,
        },
        field_validation="Strict",
    )
    assert cm["bogus"] == 1
    assert (await fake.get(kinds.ConfigMap, "c", namespace="default"))["bogus"] == 1
