"""A kind handle (``Kind[T]``): a GVK names a kind of JSON dicts, a typed class its instances.

Every reader and writer takes kinds through this one protocol (issue 28, "one signature per
method"); these tests pin what a GVK and a typed class answer as handles, and how a kind is
split and found, so the runtime behaves exactly as it did with two overloads per method.
"""

from __future__ import annotations

from typing import assert_type

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import JsonObject
from setpoint.api.types import Kind, TypedObject, kind_of, split_kind
from tests._support.gadgets import Gadget

GADGET_JSON: JsonObject = {
    "apiVersion": "descriptions.test.setpoint.dev/v1",
    "kind": "Gadget",
    "metadata": {"name": "g", "namespace": "ns"},
    "spec": {"size": 2},
}


def test_a_gvk_is_a_kind_of_json_dicts() -> None:
    handle: Kind[JsonObject] = kinds.ConfigMap
    assert handle.gvk is kinds.ConfigMap
    body: JsonObject = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    # The very dict: no copy, no parsing, as the client returned JSON before.
    assert handle.from_object(body) is body


def test_a_gvk_stays_a_plain_value() -> None:
    gvk = GroupVersionKind("apps", "v1", "Deployment")
    assert isinstance(gvk, GroupVersionKind)
    assert gvk == GroupVersionKind("apps", "v1", "Deployment")
    assert {gvk: 1}[GroupVersionKind("apps", "v1", "Deployment")] == 1
    assert str(gvk) == "apps/v1, Kind=Deployment"
    assert sorted([gvk, kinds.ConfigMap]) == [kinds.ConfigMap, gvk]


def test_a_typed_class_is_a_kind_of_its_instances() -> None:
    handle: Kind[Gadget] = Gadget
    assert handle.gvk == GroupVersionKind("descriptions.test.setpoint.dev", "v1", "Gadget")
    gadget = handle.from_object(GADGET_JSON)
    assert_type(gadget, Gadget)
    assert isinstance(gadget, Gadget) and gadget.spec.size == 2


def test_split_kind_gives_the_gvk_and_the_typed_class() -> None:
    assert split_kind(kinds.Secret) == (kinds.Secret, None)
    assert split_kind(Gadget) == (Gadget.gvk, Gadget)


@pytest.mark.parametrize("not_a_kind", ["ConfigMap", dict, 3])
def test_split_kind_refuses_what_is_not_a_kind(not_a_kind: object) -> None:
    with pytest.raises(TypeError, match="is not a kind: pass a GroupVersionKind or a typed class"):
        split_kind(not_a_kind)  # type: ignore[arg-type]


def test_kind_of_an_object_is_its_class_or_its_gvk() -> None:
    gadget = Gadget.from_object(GADGET_JSON)
    assert_type(kind_of(gadget), Kind[Gadget])
    assert kind_of(gadget) is Gadget
    assert_type(kind_of(GADGET_JSON), Kind[JsonObject])
    assert kind_of(GADGET_JSON) == Gadget.gvk
    typed: TypedObject = gadget
    assert kind_of(typed) is Gadget


def test_kind_of_a_dict_without_its_type_says_what_is_missing() -> None:
    with pytest.raises(ValueError, match="apiVersion"):
        kind_of({"metadata": {"name": "x"}})
