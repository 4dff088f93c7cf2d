"""allOf/anyOf/oneOf/not and formats declared on Python types (sp.Constraint), generated.

The same declarations against a real API server: the Python-type cases of
tests/integration/crd/test_crd_validator_diff.py.
"""

from __future__ import annotations

from typing import Any

import pytest

import setpoint as sp
from setpoint.client.errors import Invalid
from setpoint.crd import CRDGenerationError, crd_for, validate_structural
from setpoint.crd.objects import validate_object
from setpoint.crd.schema import model_schema
from setpoint.testing import FakeClient

GROUP = "constraints.test.setpoint.dev"


class Build(sp.Model):
    """How to build the image."""

    context_dir: str
    """The build context."""


@sp.exactly_one_of("image_ref", "build")
@sp.at_most_one_of("tag", "digest")
class Source(sp.Model):
    """Exactly one of an image and a build; at most one of a tag and a digest."""

    image_ref: str | None = None
    """An image."""
    build: Build | None = None
    """A build."""
    tag: str | None = None
    """A tag."""
    digest: str | None = None
    """A digest."""
    address: str | None = sp.field(
        default=None, one_of=[sp.Constraint(format="ipv4"), sp.Constraint(format="ipv6")]
    )
    """An IPv4 or IPv6 address."""
    port: int | None = sp.field(
        default=None, not_=sp.Constraint(enum=(22,)), any_of=[sp.Constraint(maximum=1023)]
    )
    """A privileged port, but not SSH's."""


@sp.resource(group=GROUP, version="v1")
class App(sp.Resource):
    """An app built or pulled."""

    spec: Source


def _schema(cls: type[Any]) -> dict[str, Any]:
    built = model_schema(cls)
    assert not built.errors, [str(e) for e in built.errors]
    return built.schema


def _errors(value: dict[str, Any], node: dict[str, Any]) -> list[str]:
    root = {"type": "object", "properties": {"spec": node}}
    return [str(e) for e in validate_object({"spec": value}, root)]


def test_model_constraints_become_junctors_with_json_names() -> None:
    node = _schema(Source)
    assert node["oneOf"] == [{"required": ["imageRef"]}, {"required": ["build"]}]
    assert node["not"] == {"required": ["tag", "digest"]}
    assert node["properties"]["address"]["oneOf"] == [{"format": "ipv4"}, {"format": "ipv6"}]
    assert node["properties"]["port"]["not"] == {"enum": [22]}
    assert node["properties"]["port"]["anyOf"] == [{"maximum": 1023}]
    assert (
        validate_structural(crd_for(App)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) == []
    )


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ({"imageRef": "nginx"}, True),
        ({"build": {"contextDir": "."}}, True),
        ({}, False),  # neither
        ({"imageRef": "nginx", "build": {"contextDir": "."}}, False),  # both
        ({"imageRef": "nginx", "tag": "1"}, True),
        ({"imageRef": "nginx", "tag": "1", "digest": "sha256:x"}, False),
        ({"imageRef": "nginx", "address": "10.0.0.1"}, True),
        ({"imageRef": "nginx", "address": "::1"}, True),
        ({"imageRef": "nginx", "address": "example.com"}, False),
        ({"imageRef": "nginx", "port": 80}, True),
        ({"imageRef": "nginx", "port": 22}, False),
        ({"imageRef": "nginx", "port": 8080}, False),
    ],
)
def test_generated_junctors_validate_as_declared(value: dict[str, Any], valid: bool) -> None:
    assert (not _errors(value, _schema(Source))) is valid


def test_a_constraint_beside_the_models_own_required_goes_under_all_of() -> None:
    @sp.Constraint(required=["b_field"])
    class Pair(sp.Model):
        """a is required by its type, b by the constraint."""

        a_field: int
        """A."""
        b_field: int | None = None
        """B."""

    node = _schema(Pair)
    assert node["required"] == ["aField"]
    assert node["allOf"] == [{"required": ["bField"]}]


def test_nested_properties_are_named_by_the_nested_type() -> None:
    @sp.Constraint(properties={"source": sp.Constraint(required=["image_ref"])})
    class Wrapper(sp.Model):
        """A model whose constraint reaches into a field's model."""

        source: Source | None = None
        """The source."""

    node = _schema(Wrapper)
    # The model's node has properties of its own, so the constraint goes under allOf;
    # image_ref is named as the nested type spells it in JSON.
    assert node["allOf"] == [{"properties": {"source": {"required": ["imageRef"]}}}]
    assert _errors({"source": {"build": {"contextDir": "."}}}, node)
    assert not _errors({"source": {"imageRef": "x"}}, node)


def test_mistakes_are_reported_when_the_crd_is_generated() -> None:
    @sp.exactly_one_of("image_ref", "nope")
    class UnknownName(sp.Model):
        """A constraint naming a field the type lacks."""

        image_ref: str | None = None
        """An image."""

    class BadFormat(sp.Model):
        """A format the server strips (so it would check nothing)."""

        when: str | None = sp.field(default=None, any_of=[sp.Constraint(format="datetim")])
        """When."""

    class ItemsOnScalar(sp.Model):
        """Items on a value that is not a list."""

        name: str | None = sp.field(
            default=None, not_=sp.Constraint(items=sp.Constraint(min_length=1))
        )
        """A name."""

    unknown = model_schema(UnknownName).errors
    assert len(unknown) == 1 and "'nope'" in unknown[0].message
    assert "imageRef" in unknown[0].fix
    bad_format = model_schema(BadFormat).errors
    assert len(bad_format) == 1 and "'datetim'" in bad_format[0].message
    assert "BadFormat.when" in str(bad_format[0])
    items = model_schema(ItemsOnScalar).errors
    assert len(items) == 1 and "not a list" in items[0].message

    @sp.resource(group=GROUP, version="v1")
    class Broken(sp.Resource):
        """A resource carrying the broken model."""

        spec: UnknownName | None = None

    with pytest.raises(CRDGenerationError, match="nope"):
        crd_for(Broken)


def test_constraint_arguments_are_checked_when_declared() -> None:
    with pytest.raises(ValueError, match="declares nothing"):
        sp.Constraint()
    with pytest.raises(ValueError, match="not the string"):
        sp.Constraint(required="image")
    with pytest.raises(ValueError, match="minimum=3 is greater than maximum=1"):
        sp.Constraint(minimum=3, maximum=1)
    with pytest.raises(ValueError, match="at least two"):
        sp.exactly_one_of("only")
    with pytest.raises(sp.DeclarationError, match="not a setpoint Model"):
        sp.exactly_one_of("a", "b")(dict)


async def test_the_fake_refuses_what_the_constraint_refuses() -> None:
    """The fake validates with the generated schema: both sources set is a 422.

    As kube-openapi reports it: a junctor's cause is on no field (``<nil>``), naming the
    path in its message.
    """
    fake = FakeClient(resources=[App])
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "App",
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {"imageRef": "nginx", "build": {"contextDir": "."}},
    }
    with pytest.raises(Invalid) as refused:
        await fake.create(body)
    assert [(c.field, c.reason, c.message) for c in refused.value.causes] == [
        (
            "<nil>",
            "FieldValueInvalid",
            'Invalid value: "": "spec" must validate one and only one schema (oneOf). '
            "Found 2 valid alternatives",
        )
    ]
    del body["spec"]["build"]
    created = await fake.create(body)
    assert created["spec"] == {"imageRef": "nginx"}
