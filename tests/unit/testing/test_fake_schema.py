"""The fake checks custom resources against their schema: fieldValidation, pruning, defaults.

The same behaviour against a real API server: tests/integration/parity/test_parity_schema.py.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import pytest

import setpoint as sp
from setpoint.api import kinds
from setpoint.cache import Cache
from setpoint.client import collect_warnings
from setpoint.client.errors import BadRequest, InternalError, Invalid
from setpoint.client.patch import MergePatch
from setpoint.crd import crd_for
from setpoint.crd.objects import prune_and_default
from setpoint.testing import FakeClient
from setpoint.testing._fake_schema import schema_causes

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


def _causes_for(value: Any, node: dict[str, Any]) -> list[tuple[str, str, str]]:
    spec = {"type": "object", "properties": {"c": node}}
    schema = {"type": "object", "properties": {"spec": spec}}
    stored = prune_and_default({"spec": {"c": value}}, schema)
    return [(c.field, c.reason, c.message) for c in schema_causes(stored, schema)]


def _body(value: str, text: str) -> tuple[str, str, str]:
    return ("spec.c", "FieldValueInvalid", f"Invalid value: {value}: spec.c in body {text}")


def _type(value: str, expected: str) -> tuple[str, str, str]:
    message = f"Invalid value: {value}: spec.c in body must be of type {expected}: {value}"
    return ("spec.c", "FieldValueTypeInvalid", message)


_ALL_OF = 'Invalid value: "": "spec.c" must validate all the schemas (allOf). None validated'
_STRING = {"type": "string"}


@pytest.mark.parametrize(
    ("value", "node", "expected"),
    [
        # Each expected cause is what the local control plane answered for the same case.
        (
            -2,
            {"type": "number", "minimum": 2.5},
            [_body("-2", "should be greater than or equal to 2")],
        ),
        (
            3.5e38,
            {"type": "number", "maximum": 2.5},
            [_body("3.5e+38", "should be less than or equal to 2.5")],
        ),
        ("日本", {**_STRING, "format": "ipv4"}, [_type('"日本"', "ipv4")]),
        (1.5, {**_STRING, "format": "uri"}, [_type('"float64"', "uri")]),
        (
            {},
            {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, _STRING]},
            [_type('"object"', "integer,string")],
        ),
        (
            -4,
            {"type": "integer", "allOf": [{"multipleOf": 3}, {"minimum": 3}]},
            [
                ("<nil>", "FieldValueInvalid", _ALL_OF),
                _body("-4", "should be a multiple of 3"),
                _body("-4", "should be greater than or equal to 3"),
            ],
        ),
        (
            "b",
            {**_STRING, "minLength": 2, "pattern": "^a"},
            [_body('"b"', "should be at least 2 chars long")],
        ),
        (
            {"unknown": 1},
            {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"d": _STRING},
            },
            [
                ("spec.c.apiVersion", "FieldValueRequired", "Required value"),
                ("spec.c.kind", "FieldValueRequired", "Required value"),
            ],
        ),
        (
            ["a", "a"],
            {"type": "array", "items": _STRING, "x-kubernetes-list-type": "set", "maxItems": 1},
            [
                ("spec.c", "FieldValueTooMany", "Too many: 2: must have at most 1 item"),
                ("spec.c[1]", "FieldValueDuplicate", 'Duplicate value: "a"'),
            ],
        ),
    ],
)
def test_refusals_are_worded_as_the_server_words_them(
    value: Any, node: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    assert _causes_for(value, node) == expected


async def test_the_controllers_tracking_client_passes_field_validation_on() -> None:
    """``ctx.client`` (the cache's tracking client) hands ``field_validation`` to the client.

    Without the pass-through every write through ``ctx.client`` used the default, so an
    author's ``Ignore`` was refused here as an undeclared field.
    """
    fake = FakeClient(resources=[Part])
    cache = Cache(fake)
    tracking = cache.tracking_client(fake)
    with pytest.raises(BadRequest, match=r"unknown field \"spec.extra\""):
        await tracking.create(part("s", name="x", extra=1), field_validation="Strict")
    created = await tracking.create(part("i", name="x", extra=1), field_validation="Ignore")
    assert created["spec"] == {"name": "x", "size": 3}
    applied = await tracking.apply(
        part("a", name="x", size=2), field_manager="m", field_validation="Ignore"
    )
    assert applied["spec"] == {"name": "x", "size": 2}


class TagSpec(sp.Model):
    """A pattern (RE2) and a bound (no RE2 needed)."""

    tag: str | None = sp.field(default=None, pattern="^[a-z]+$")
    """Lower-case letters only."""
    size: int = sp.field(default=1, minimum=1)
    """At least 1."""


@sp.resource(group=GROUP, version="v1")
class Tag(sp.Resource):
    """A typed kind with a pattern."""

    spec: TagSpec | None = None


def _tag(obj_name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Tag",
        "metadata": {"name": obj_name, "namespace": "default"},
        "spec": spec,
    }


async def test_without_re2_patterns_are_left_out_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The runtime alone (no tools extra, so no RE2): every check but the patterns runs."""
    from setpoint._extras import TOOLS, ExtraNotInstalled
    from setpoint.crd import patterns
    from setpoint.testing import _fake_schema

    fake = FakeClient(resources=[Tag])
    with pytest.raises(Invalid, match="should match"):
        await fake.create(_tag("with-re2", tag="UPPER"))

    def no_re2(pattern: str) -> Any:
        raise ExtraNotInstalled("checking a schema pattern with RE2", TOOLS, ["google-re2"])

    monkeypatch.setattr(patterns, "_compile", no_re2)
    _fake_schema.warn_without_re2.cache_clear()
    with caplog.at_level(logging.WARNING, logger="setpoint.testing.fake"):
        created = await fake.create(_tag("no-re2", tag="UPPER"))
        await fake.create(_tag("again", tag="AGAIN"))
    assert created["spec"]["tag"] == "UPPER"
    warned = [r.getMessage() for r in caplog.records if "not checked" in r.getMessage()]
    assert len(warned) == 1 and "setpoint[tools]" in warned[0], warned
    with pytest.raises(Invalid, match="should be greater than or equal to 1"):
        await fake.create(_tag("bound", tag="UPPER", size=0))
