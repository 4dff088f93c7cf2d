"""Hub-and-spoke conversion in Python: converters, lossless round trips, metadata rules."""

from __future__ import annotations

import copy
from typing import Any, Self

import orjson
import pytest

import setpoint as sp
from setpoint.api.conversion import (
    CONVERSION_DATA_ANNOTATION,
    ConversionError,
    Convertible,
    KindConversion,
    convert,
    hub_of,
)
from setpoint.api.declaration import DeclarationError
from tests._support.machines import (
    GROUP,
    V1,
    V1BETA1,
    V2,
    VERSIONS,
    Machine,
    MachineV1,
    MachineV1Beta1,
    SpecV1,
    SpecV2,
    StatusV2,
    hub_object,
)

CONVERSION = KindConversion.of(*VERSIONS)


def without_conversion_data(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    annotations = out["metadata"].get("annotations", {})
    annotations.pop(CONVERSION_DATA_ANNOTATION, None)
    if not annotations:
        out["metadata"].pop("annotations", None)
    return out


def test_down_conversion_maps_fields_and_keeps_the_hub_data_in_an_annotation() -> None:
    hub = hub_object()
    spoke = CONVERSION.convert(hub, V1)
    assert spoke["apiVersion"] == V1
    assert spoke["spec"] == {"size": 3, "image": "nginx:1.27", "ports": [80], "safe": False}
    assert spoke["status"] == {"ready": 2}
    stored = orjson.loads(spoke["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION])
    assert stored == {"spec": hub["spec"], "status": hub["status"]}
    # Metadata is the server's, byte for byte, plus the annotation.
    meta = dict(spoke["metadata"])
    meta["annotations"] = without_conversion_data(spoke)["metadata"]["annotations"]
    assert meta == hub["metadata"]


def test_hub_to_spoke_to_hub_is_lossless_including_hub_only_fields() -> None:
    hub = hub_object()
    for spoke_version in (V1, V1BETA1):
        back = CONVERSION.convert(CONVERSION.convert(hub, spoke_version), V2)
        assert back == hub, spoke_version


def test_the_input_is_never_modified() -> None:
    hub = hub_object()
    before = copy.deepcopy(hub)
    spoke = CONVERSION.convert(hub, V1)
    spoke_before = copy.deepcopy(spoke)
    CONVERSION.convert(spoke, V2)
    assert hub == before
    assert spoke == spoke_before


def test_spoke_to_hub_to_spoke_gives_the_spoke_back() -> None:
    spoke = {
        "apiVersion": V1,
        "kind": "Machine",
        "metadata": {"name": "m2", "namespace": "prod", "uid": "u-2"},
        "spec": {"size": 2, "image": "redis:7", "ports": [6379], "safe": True},
    }
    hub = CONVERSION.convert(spoke, V2)
    assert CONVERSION_DATA_ANNOTATION not in hub["metadata"].get("annotations", {})
    assert hub["spec"]["image"] == {"repository": "redis", "tag": "7"}
    again = CONVERSION.convert(hub, V1)
    assert without_conversion_data(again) == spoke


def test_an_edit_at_the_spoke_wins_and_hub_only_fields_are_restored() -> None:
    spoke = CONVERSION.convert(hub_object(), V1)
    spoke["spec"]["size"] = 7  # the user scales at the old version
    spoke["spec"]["image"] = "nginx:1.28"
    hub = CONVERSION.convert(spoke, V2)
    assert hub["spec"]["replicas"] == 7
    assert hub["spec"]["image"] == {"repository": "nginx", "tag": "1.28"}
    assert hub["spec"]["paused"] is True  # only the hub has it: restored
    assert hub["spec"]["ports"] == [{"name": "http", "port": 80, "protocol": "TCP"}]
    assert hub["spec"]["mode"] == "Fast"


def test_a_field_the_spoke_holds_partly_keeps_the_users_change() -> None:
    # `safe` is a coarser view of `mode`; ports at v1 lose their names.
    spoke = CONVERSION.convert(hub_object(), V1)
    spoke["spec"]["safe"] = True
    spoke["spec"]["ports"] = [80, 443]
    hub = CONVERSION.convert(spoke, V2)
    assert hub["spec"]["mode"] == "Safe"
    # The spoke's list wins; the item the user left alone gets its hub-only fields back.
    assert hub["spec"]["ports"] == [
        {"name": "http", "port": 80, "protocol": "TCP"},
        {"name": "p443", "port": 443},
    ]


def test_unchanged_list_items_get_their_hub_only_fields_back() -> None:
    hub = hub_object(
        ports=[
            {"name": "http", "port": 80, "protocol": "TCP"},
            {"name": "dns", "port": 53, "protocol": "UDP"},
        ]
    )
    spoke = CONVERSION.convert(hub, V1)
    assert spoke["spec"]["ports"] == [80, 53]
    assert CONVERSION.convert(spoke, V2)["spec"]["ports"] == hub["spec"]["ports"]


def test_spoke_to_spoke_goes_through_the_hub_and_loses_nothing() -> None:
    hub = hub_object()
    beta = CONVERSION.convert(hub, V1BETA1)
    old = CONVERSION.convert(beta, V1)
    assert old["spec"] == {"size": 3, "image": "nginx:1.27", "ports": [80], "safe": False}
    assert CONVERSION.convert(old, V2) == hub


def test_the_annotation_never_reaches_the_hub_and_is_never_nested() -> None:
    hub = hub_object()
    stray = copy.deepcopy(hub)
    stray["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION] = '{"spec": {}}'
    spoke = CONVERSION.convert(stray, V1)
    stored = orjson.loads(spoke["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION])
    assert CONVERSION_DATA_ANNOTATION not in str(stored)
    back = CONVERSION.convert(spoke, V2)
    assert back == hub


def test_an_object_already_at_the_asked_version_comes_back_unchanged() -> None:
    hub = hub_object()
    same = CONVERSION.convert(hub, V2)
    assert same == hub
    assert same is not hub


def test_labels_and_annotations_set_by_a_converter_pass_through() -> None:
    class LabellingV1(MachineV1):
        @classmethod
        def from_hub(cls, hub: Machine) -> Self:
            out = super().from_hub(hub)
            out.metadata = out.metadata.model_copy(deep=True)
            out.metadata.labels["converted"] = "yes"
            return out

    conversion = KindConversion.of(
        Machine, sp.resource(group=GROUP, version="v1", kind="Machine")(LabellingV1)
    )
    spoke = conversion.convert(hub_object(), V1)
    assert spoke["metadata"]["labels"] == {"team": "a", "converted": "yes"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.finalizers.append("x"), "finalizers"),
        (lambda m: setattr(m, "name", "other"), "name"),
        (lambda m: setattr(m, "uid", None), "uid"),
        (lambda m: m.owner_references.clear(), "ownerReferences"),
    ],
)
def test_a_converter_changing_other_metadata_fails_naming_the_field(
    change: Any, field: str
) -> None:
    class MeddlingV1(MachineV1):
        def to_hub(self) -> Machine:
            hub = super().to_hub()
            change(hub.metadata)
            return hub

    meddling = sp.resource(group=GROUP, version="v1", kind="Machine")(MeddlingV1)
    obj = {
        "apiVersion": V1,
        "kind": "Machine",
        "metadata": {
            "name": "m3",
            "uid": "u-3",
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}],
        },
        "spec": {"image": "a:b"},
    }
    with pytest.raises(ConversionError) as info:
        KindConversion.of(Machine, meddling).convert(obj, V2)
    message = str(info.value)
    assert f"metadata.{field}" in message
    assert "Machine m3" in message and V1 in message and V2 in message
    assert "only metadata.labels and metadata.annotations" in message
    assert info.value.in_user_code


def test_a_new_metadata_object_without_the_servers_fields_is_caught() -> None:
    class ForgetfulV1(MachineV1):
        def to_hub(self) -> Machine:
            hub = super().to_hub()
            hub.metadata = sp.ObjectMeta(name=self.metadata.name)
            return hub

    forgetful = sp.resource(group=GROUP, version="v1", kind="Machine")(ForgetfulV1)
    spoke = CONVERSION.convert(hub_object(), V1)
    with pytest.raises(ConversionError, match=r"ForgetfulV1\.to_hub\(\) changed metadata\."):
        KindConversion.of(Machine, forgetful).convert(spoke, V2)


def test_an_exception_in_a_converter_names_the_object_versions_and_reason() -> None:
    class BrokenV1(MachineV1):
        @classmethod
        def from_hub(cls, hub: Machine) -> Self:
            raise KeyError("no such image")

    broken = sp.resource(group=GROUP, version="v1", kind="Machine")(BrokenV1)
    with pytest.raises(ConversionError) as info:
        KindConversion.of(Machine, broken).convert(hub_object(), V1)
    assert str(info.value) == (
        f"Machine prod/m1 ({V2}) -> {V1}: BrokenV1.from_hub() raised KeyError: 'no such image'"
    )
    assert info.value.in_user_code
    assert (info.value.object_ref, info.value.from_version, info.value.to_version) == (
        "Machine prod/m1",
        V2,
        V1,
    )


def test_a_converter_returning_the_wrong_type_is_an_error() -> None:
    class SloppyV1(MachineV1):
        def to_hub(self) -> Machine:
            return self  # type: ignore[return-value]

    sloppy = sp.resource(group=GROUP, version="v1", kind="Machine")(SloppyV1)
    spoke = {"apiVersion": V1, "kind": "Machine", "metadata": {"name": "x"}, "spec": {"image": "a"}}
    with pytest.raises(ConversionError, match=r"returned SloppyV1, expected a Machine"):
        KindConversion.of(Machine, sloppy).convert(spoke, V2)


@pytest.mark.parametrize(
    ("obj", "to", "expected"),
    [
        ({"apiVersion": f"{GROUP}/v9", "kind": "Machine"}, V2, "its apiVersion"),
        ({"apiVersion": V2, "kind": "Machine"}, f"{GROUP}/v9", "the desired apiVersion"),
        ({"apiVersion": "other.dev/v1", "kind": "Machine"}, V2, "'other.dev/v1' is not a version"),
        ({"apiVersion": V2, "kind": "Robot"}, V1, "kind is 'Robot'"),
        ({"apiVersion": 7, "kind": "Machine"}, V1, "apiVersion is 7"),
        ({"apiVersion": V2, "kind": "Machine", "metadata": []}, V1, "metadata is list"),
        (
            {
                "apiVersion": V2,
                "kind": "Machine",
                "metadata": {"name": "a"},
                "spec": {"replicas": "x"},
            },
            V1,
            "spec.replicas",
        ),
    ],
)
def test_bad_input_is_a_conversion_error_saying_what_is_wrong(
    obj: dict[str, Any], to: str, expected: str
) -> None:
    with pytest.raises(ConversionError) as info:
        CONVERSION.convert(obj, to)
    assert expected in str(info.value)
    assert not info.value.in_user_code


def test_a_malformed_annotation_is_reported_not_ignored() -> None:
    spoke = CONVERSION.convert(hub_object(), V1)
    spoke["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION] = "{not json"
    with pytest.raises(
        ConversionError, match=f"annotation {CONVERSION_DATA_ANNOTATION} is not JSON"
    ):
        CONVERSION.convert(spoke, V2)
    spoke["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION] = "[1, 2]"
    with pytest.raises(ConversionError, match="is not a JSON object"):
        CONVERSION.convert(spoke, V2)


def test_typed_convert_goes_both_ways() -> None:
    hub = Machine.from_object(hub_object())
    old = convert(hub, MachineV1)
    assert isinstance(old, MachineV1)
    assert old.spec.size == 3
    back = convert(old, Machine)
    assert back == hub
    beta = convert(old, MachineV1Beta1)
    assert beta.spec.image.tag == "1.27"


def test_versions_with_the_hubs_schema_are_relabelled() -> None:
    @sp.resource(group=GROUP, version="v2beta1", kind="Machine")
    class MachineV2Beta1(sp.Resource):
        spec: SpecV2
        status: StatusV2 | None = None

    conversion = KindConversion.of(Machine, MachineV1, MachineV2Beta1)
    beta = conversion.convert(hub_object(), f"{GROUP}/v2beta1")
    assert beta == {**hub_object(), "apiVersion": f"{GROUP}/v2beta1"}
    old = conversion.convert(beta, V1)
    assert old["spec"]["size"] == 3
    assert conversion.convert(old, f"{GROUP}/v2beta1") == beta


def test_the_hub_is_found_from_the_spokes() -> None:
    assert hub_of(MachineV1) is Machine
    assert hub_of(Machine) is None
    conversion = KindConversion.of(MachineV1)
    assert conversion.hub is Machine
    assert conversion.versions == ("v2", "v1")


def test_declaring_a_spoke_wrongly_fails_when_the_class_is_defined() -> None:
    with pytest.raises(DeclarationError, match="does not define from_hub"):

        class Half(sp.Resource, Convertible[Machine]):
            spec: SpecV1

            def to_hub(self) -> Machine:
                raise NotImplementedError

    with pytest.raises(DeclarationError, match="without naming the hub"):

        class Unnamed(sp.Resource, Convertible):  # type: ignore[type-arg]
            spec: SpecV1

    with pytest.raises(DeclarationError, match="is not a Resource class"):

        class NotAResource(sp.Resource, Convertible[int]):  # type: ignore[type-var]
            spec: SpecV1

    with pytest.raises(DeclarationError, match="is itself a spoke"):

        class Chained(sp.Resource, Convertible[MachineV1]):
            spec: SpecV1


def test_spokes_naming_different_hubs_or_versions_twice_are_refused() -> None:
    @sp.resource(group=GROUP, version="v3", kind="Machine")
    class OtherHub(sp.Resource):
        spec: SpecV2

    @sp.resource(group=GROUP, version="v1alpha1", kind="Machine")
    class ElsewhereV1Alpha1(sp.Resource, Convertible[OtherHub]):
        spec: SpecV2

        def to_hub(self) -> OtherHub:
            raise NotImplementedError

        @classmethod
        def from_hub(cls, hub: OtherHub) -> Self:
            raise NotImplementedError

    with pytest.raises(DeclarationError, match="name different hubs"):
        KindConversion.of(MachineV1, ElsewhereV1Alpha1)

    @sp.resource(group=GROUP, version="v1", kind="Machine")
    class AnotherV1(sp.Resource):
        spec: SpecV1

    with pytest.raises(DeclarationError, match="both declare version v1"):
        KindConversion.of(Machine, MachineV1, AnotherV1)
