"""Parity: custom resources checked against their schema, and fieldValidation.

The Widget CRD (tests/_support/kinds.py) has a strict schema: ``spec.size`` an integer of
at least 1, ``spec.tags`` a list of strings, no unknown fields kept. The fake knows it
from the CRD created in it, as the server does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import setpoint as sp
from setpoint.client import collect_warnings
from setpoint.client.errors import ApiError, BadRequest, InternalError, Invalid
from setpoint.client.patch import JsonPatch, MergePatch
from tests._support.kinds import GROUP, WIDGET, WidgetSpec, WidgetStatus

if TYPE_CHECKING:
    from tests._support.parity import Api


def _widget(api: Api, name: str, **spec: Any) -> dict[str, Any]:
    return api.obj(WIDGET, name, spec=spec)


def _causes(error: ApiError) -> list[tuple[str, str]]:
    return [(c.field, c.reason) for c in error.causes]


async def test_invalid_values_are_refused_with_the_same_field_paths(crds: Api) -> None:
    """Create, update, merge patch and apply of an invalid custom resource: the same 422.

    A value below the minimum and a value of the wrong type are refused by the fake as by
    the server: 422 Invalid naming the kind and object, one cause per problem with the
    server's field path (``spec.size``) and reason (FieldValueInvalid,
    FieldValueTypeInvalid), sorted by field. A valid object is then stored, and each kind
    of write that would make it invalid is refused the same way.
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
