"""Parity: custom resources checked against their schema, and fieldValidation.

The Widget CRD (tests/_support/kinds.py) has a strict schema: ``spec.size`` an integer of
at least 1, ``spec.tags`` a list of strings, no unknown fields kept. The fake knows it
from the CRD created in it, as the server does. ``Pull`` (below) carries constraints
declared in Python (sp.exactly_one_of, sp.Constraint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pytest

import setpoint as sp
from setpoint.client import collect_warnings
from setpoint.client.errors import ApiError, BadRequest, InternalError, Invalid
from setpoint.client.patch import JsonPatch, MergePatch
from setpoint.crd import crd_for
from tests._support.kinds import GROUP, WIDGET, WidgetSpec, WidgetStatus, install_crds

if TYPE_CHECKING:
    from tests._support.parity import Api


def _widget(api: Api, name: str, **spec: Any) -> dict[str, Any]:
    return api.obj(WIDGET, name, spec=spec)


def _causes(error: ApiError) -> list[tuple[str, str]]:
    # The server visits properties in Go map order, so its causes come in any order.
    return sorted((c.field, c.reason) for c in error.causes)


async def test_invalid_values_are_refused_with_the_same_field_paths(crds: Api) -> None:
    """Create, update, merge patch and apply of an invalid custom resource: the same 422.

    A value below the minimum and a value of the wrong type are refused by the fake as by
    the server: 422 Invalid naming the kind and object, one cause per problem with the
    server's field path (``spec.size``) and reason (FieldValueInvalid,
    FieldValueTypeInvalid), in any order (the server's varies). A valid object is then
    stored, and each kind of write that would make it invalid is refused the same way.
    """
    c = crds.client
    with pytest.raises(Invalid) as created:
        await c.create(_widget(crds, "bad", size=0, tags="x"))
    assert _causes(created.value) == [
        ("spec.size", "FieldValueInvalid"),
        ("spec.tags", "FieldValueTypeInvalid"),
    ]
    assert created.value.status["message"].startswith(f'Widget.{GROUP} "bad" is invalid: [')
    assert created.value.details["kind"] == "Widget"

    live = await c.create(_widget(crds, "good", size=2, tags=["a"]))
    live["spec"]["size"] = "big"
    with pytest.raises(Invalid) as updated:
        await c.update(live)
    assert _causes(updated.value) == [("spec.size", "FieldValueTypeInvalid")]

    with pytest.raises(Invalid) as merged:
        await c.patch(WIDGET, "good", MergePatch({"spec": {"size": -1}}), namespace=crds.namespace)
    assert _causes(merged.value) == [("spec.size", "FieldValueInvalid")]

    with pytest.raises(Invalid) as patched:
        await c.patch(
            WIDGET,
            "good",
            JsonPatch([{"op": "add", "path": "/spec/tags/-", "value": 7}]),
            namespace=crds.namespace,
        )
    assert _causes(patched.value) == [("spec.tags[1]", "FieldValueTypeInvalid")]

    with pytest.raises(Invalid) as applied:
        await c.apply(_widget(crds, "good", size=0), field_manager="parity", force=True)
    assert _causes(applied.value) == [("spec.size", "FieldValueInvalid")]

    stored = await c.get(WIDGET, "good", namespace=crds.namespace)
    assert stored["spec"] == {"size": 2, "tags": ["a"]}


async def test_strict_refuses_unknown_fields_as_the_server_words_it(crds: Api) -> None:
    """fieldValidation=Strict: an undeclared field refuses create, update and patches.

    Create and update answer 400 BadRequest listing every unknown field, ObjectMeta's
    first, in the server's exact words (``strict decoding error: unknown field
    "spec.foo"``); merge and JSON patches answer 422 on the field ``patch``, ending with
    the same words; server-side apply refuses an undeclared field whatever
    fieldValidation says (500, ``.spec.foo: field not declared in schema``). Nothing is
    stored by the refused writes.
    """
    c, ns = crds.client, crds.namespace
    body = _widget(crds, "strict", size=2, foo=1, nested={"x": 1})
    body["metadata"]["bogus"] = 1
    body["extra"] = 3
    with pytest.raises(BadRequest) as created:
        await c.create(body, field_validation="Strict")
    assert created.value.status["message"] == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "metadata.bogus", unknown field "extra", unknown field "spec.foo", '
        'unknown field "spec.nested"'
    )

    live = await c.create(_widget(crds, "strict", size=2), field_validation="Strict")
    live["spec"]["foo"] = 5
    with pytest.raises(BadRequest) as updated:
        await c.update(live, field_validation="Strict")
    assert updated.value.status["message"].endswith(
        'strict decoding error: unknown field "spec.foo"'
    )

    for patch in (
        MergePatch({"spec": {"foo": 1, "size": 3}}),
        JsonPatch([{"op": "add", "path": "/spec/foo", "value": 1}]),
    ):
        with pytest.raises(Invalid) as patched:
            await c.patch(WIDGET, "strict", patch, namespace=ns, field_validation="Strict")
        assert [cause.field for cause in patched.value.causes] == ["patch"]
        assert patched.value.status["message"].endswith(
            'strict decoding error: unknown field "spec.foo"'
        )

    for validation in ("Strict", "Warn", "Ignore"):
        with pytest.raises(InternalError) as applied:
            await c.apply(
                _widget(crds, "strict", size=4, foo=1),
                field_manager="parity",
                field_validation=validation,
            )
        assert applied.value.status["message"] == (
            f"failed to create typed patch object ({ns}/strict; {GROUP}/v1, Kind=Widget): "
            ".spec.foo: field not declared in schema"
        )
    stored = await c.get(WIDGET, "strict", namespace=ns)
    assert stored["spec"] == {"size": 2}


async def test_warn_and_ignore_drop_unknown_fields(crds: Api) -> None:
    """fieldValidation=Warn (the default for dicts) warns per unknown field; Ignore is silent.

    Both store the object without the undeclared fields (pruned). Under Warn, and when a
    dict is written without fieldValidation (the server's default is Warn), each unknown
    field comes back as a warning (``unknown field "spec.foo"``) that reaches the caller
    through collect_warnings; Ignore answers none. Merge patches and status updates warn
    the same way.
    """
    c, ns = crds.client, crds.namespace
    for name, validation, expected in (
        ("warn", "Warn", ['unknown field "extra"', 'unknown field "spec.foo"']),
        ("default", None, ['unknown field "extra"', 'unknown field "spec.foo"']),
        ("ignore", "Ignore", []),
    ):
        body = dict(_widget(crds, name, size=2, foo=1), extra=3)
        with collect_warnings() as warnings:
            created = await c.create(body, field_validation=validation)
        assert warnings == expected, name
        assert created["spec"] == {"size": 2}
        assert "extra" not in created

    with collect_warnings() as warnings:
        patched = await c.patch(
            WIDGET, "warn", MergePatch({"spec": {"foo": 2, "size": 3}}), namespace=ns
        )
    assert warnings == ['unknown field "spec.foo"']
    assert patched["spec"] == {"size": 3}

    patched["status"] = {"phase": "up", "zzz": 1}
    with collect_warnings() as warnings:
        status = await c.replace_status(patched, field_validation="Warn")
    assert warnings == ['unknown field "status.zzz"']
    assert status["status"] == {"phase": "up"}


class SkewedSpec(WidgetSpec):
    """WidgetSpec plus a field the installed CRD does not declare."""

    colour: str | None = None
    """Not in the CRD."""


@sp.resource(group=GROUP, version="v1", kind="Widget", plural="widgets")
class SkewedWidget(sp.Resource):
    """A Widget as a newer Python type sees it: a spec field the installed CRD lacks."""

    spec: SkewedSpec | None = None
    status: WidgetStatus | None = None


async def test_typed_objects_are_strict_by_default(crds: Api) -> None:
    """A typed object is written with fieldValidation=Strict unless the caller says otherwise.

    A Python type that is newer than the installed CRD (a field the schema lacks) is
    refused with 400 BadRequest naming the field, on the fake as on the server; the same
    object with field_validation="Ignore" is stored without the field.
    """
    c = crds.client
    skewed = SkewedWidget(
        metadata=sp.ObjectMeta(name="skewed", namespace=crds.namespace),
        spec=SkewedSpec(size=2, colour="red"),
    )
    with pytest.raises(BadRequest) as refused:
        await c.create(skewed)
    assert refused.value.status["message"].endswith(
        'strict decoding error: unknown field "spec.colour"'
    )
    stored = await c.create(skewed, field_validation="Ignore")
    assert stored.spec is not None and stored.spec.colour is None and stored.spec.size == 2


class PullSpec(sp.Model):
    """Exactly one of an image and a build; an address that is IPv4 or IPv6."""

    image_ref: str | None = None
    """An image."""
    build_dir: str | None = None
    """A build context."""
    address: str | None = sp.field(
        default=None, one_of=[sp.Constraint(format="ipv4"), sp.Constraint(format="ipv6")]
    )
    """An address."""
    replicas: int = sp.field(default=1, minimum=0)
    """Defaulted by the server (and the fake)."""


sp.exactly_one_of("image_ref", "build_dir")(PullSpec)


@sp.resource(group=GROUP, version="v1")
class Pull(sp.Resource):
    """A kind whose schema carries constraints declared in Python."""

    spec: PullSpec


async def test_constraints_from_python_types_refuse_the_same_objects(api: Api) -> None:
    """A CRD generated from a Python type with junctors: the fake refuses what the server does.

    The type declares exactly_one_of two fields and a one_of of formats on a third. Both
    fields set, neither set, or an address that is neither IPv4 nor IPv6 is a 422 with
    the same causes on both backends: a failed junctor on the field ``<nil>`` naming the
    path in its message (kube-openapi's way), followed by the errors of the closest branch
    when none passed, and type and format errors in the server's words, sorted. A valid
    object is stored with the schema's default filled in.
    """

    await install_crds(api.client, [crd_for(Pull)])
    c = api.client

    def pull(name: str, **spec: Any) -> dict[str, Any]:
        return api.obj(Pull.gvk, name, spec=spec)

    one_of = '"{}" must validate one and only one schema (oneOf). Found {}'
    junctor = ("<nil>", "FieldValueInvalid")
    for name, spec, expected in (
        (
            "both",
            {"imageRef": "x", "buildDir": "."},
            [(*junctor, one_of.format("spec", "2 valid alternatives"))],
        ),
        (
            "neither",
            {},
            [
                (*junctor, one_of.format("spec", "none valid")),
                ("spec.imageRef", "FieldValueRequired", "Required value"),
            ],
        ),
        (
            "address",
            {"imageRef": "x", "address": "example.com", "buildDir": 3},
            [
                (*junctor, one_of.format("spec", "2 valid alternatives")),
                (*junctor, one_of.format("spec.address", "none valid")),
                (
                    "spec.address",
                    "FieldValueTypeInvalid",
                    'Invalid value: "example.com": spec.address in body must be of type ipv4: '
                    '"example.com"',
                ),
                (
                    "spec.buildDir",
                    "FieldValueTypeInvalid",
                    'Invalid value: "integer": spec.buildDir in body must be of type string: '
                    '"integer"',
                ),
            ],
        ),
    ):
        with pytest.raises(Invalid) as refused:
            await c.create(pull(name, **spec))
        got = [(cause.field, cause.reason, cause.message) for cause in refused.value.causes]
        want = [(f, r, f'Invalid value: "": {m}' if f == "<nil>" else m) for f, r, m in expected]
        assert sorted(got) == sorted(want), name  # the server's order varies (Go maps)
    created = await c.create(pull("ok", imageRef="x", address="::1"))
    assert created["spec"] == {"imageRef": "x", "address": "::1", "replicas": 1}


class LimitsSpec(sp.Model):
    """One field per kind of limit the server checks."""

    s: str | None = sp.field(default=None, min_length=2, max_length=3, pattern="^a")
    """Length and pattern."""
    e: Literal["a", "b"] | None = None
    """An enum."""
    n: float | None = sp.field(default=None, minimum=1.5, maximum=3, exclusive_maximum=True)
    """Number bounds."""
    i: int | None = sp.field(
        default=None, multiple_of=3, maximum=10, minimum=0, exclusive_minimum=True
    )
    """Integer bounds."""
    l: list[str] | None = sp.field(default=None, min_items=1, max_items=2)  # noqa: E741
    """Item counts."""
    m: dict[str, str] | None = sp.field(default=None, min_properties=1, max_properties=1)
    """Key counts."""
    st: set[str] | None = None
    """A set list."""


@sp.resource(group=GROUP, version="v1")
class Limits(sp.Resource):
    """A kind whose fields carry every kind of limit."""

    spec: LimitsSpec | None = None


async def test_limit_failures_are_worded_as_the_server_words_them(api: Api) -> None:
    """Bounds, lengths, counts, patterns, enums and set duplicates: the server's causes.

    Each value breaks one limit of a type declared in Python; the fake answers the cause
    the server answers, reason and message included (FieldValueTooLong and
    FieldValueTooMany for the upper limits of strings, lists and maps, the item index
    for a set's duplicate), and, as kube-openapi stops at a string's first failing
    check, a string too short that also misses the pattern gets one cause.
    """
    await install_crds(api.client, [crd_for(Limits)])

    def body(field: str, value: str, text: str) -> tuple[str, str, str]:
        return (
            f"spec.{field}",
            "FieldValueInvalid",
            f"Invalid value: {value}: spec.{field} in body {text}",
        )

    cases: list[tuple[dict[str, Any], tuple[str, str, str]]] = [
        ({"s": "b"}, body("s", '"b"', "should be at least 2 chars long")),
        ({"s": "abcd"}, ("spec.s", "FieldValueTooLong", "Too long: may not be more than 3 bytes")),
        ({"s": "bcd"}, body("s", '"bcd"', "should match '^a'")),
        (
            {"e": "c"},
            (
                "spec.e",
                "FieldValueNotSupported",
                'Unsupported value: "c": supported values: "a", "b"',
            ),
        ),
        ({"n": 3}, body("n", "3", "should be less than 3")),
        ({"n": 1.25}, body("n", "1.25", "should be greater than or equal to 1.5")),
        ({"i": 4}, body("i", "4", "should be a multiple of 3")),
        ({"i": 12}, body("i", "12", "should be less than or equal to 10")),
        ({"i": 0}, body("i", "0", "should be greater than 0")),
        ({"l": []}, body("l", "0", "should have at least 1 items")),
        (
            {"l": ["a", "b", "c"]},
            ("spec.l", "FieldValueTooMany", "Too many: 3: must have at most 2 items"),
        ),
        ({"m": {}}, body("m", "0", "should have at least 1 properties")),
        (
            {"m": {"a": "1", "b": "2"}},
            ("spec.m", "FieldValueTooMany", "Too many: 2: must have at most 1 item"),
        ),
        ({"st": ["a", "a"]}, ("spec.st[1]", "FieldValueDuplicate", 'Duplicate value: "a"')),
    ]
    for spec, expected in cases:
        with pytest.raises(Invalid) as refused:
            await api.client.create(api.obj(Limits.gvk, "limits", spec=spec), dry_run=True)
        got = [(c.field, c.reason, c.message) for c in refused.value.causes]
        assert got == [expected], spec
