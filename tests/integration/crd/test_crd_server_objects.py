"""Objects of generated CRDs on a real API server: validation, defaults, pruning, status."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.client.errors import Invalid
from setpoint.client.patch import MergePatch
from tests._support.crd_golden import load_fixtures

TYPES = load_fixtures()
WIDGET = GroupVersionKind("fixtures.setpoint.dev", "v1", "Widget")


def widget(namespace: str, name: str = "w", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "fixtures.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"image": "nginx:1.27", **spec},
    }


async def test_server_applies_schema_defaults(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """Fields left out are defaulted by the server to the Python defaults.

    Scalars (replicas, paused, mode, tier, ratio, targetPort), a nested model
    (range, with the defaults inside it), and defaults inside list items (a
    port's protocol) all come back filled in; optional fields without a
    default stay absent, and empty-collection defaults are not written.
    """
    created = await k8s.create(widget(namespace, ports=[{"name": "http", "port": 80}]))
    spec = created["spec"]
    assert spec["replicas"] == 1
    assert spec["paused"] is False
    assert spec["mode"] == "safe"
    assert spec["tier"] == "gold"
    assert spec["ratio"] == 0.5
    assert spec["targetPort"] == 8080
    assert spec["range"] == {"min": 0, "max": 10}
    assert spec["ports"] == [{"name": "http", "port": 80, "protocol": "TCP"}]
    for absent in ("step", "note", "tags", "env", "phaseHint", "memory", "apiURL"):
        assert absent not in spec, absent
    typed = TYPES.Widget.from_object(created)
    assert typed.spec.replicas == 1
    assert typed.spec.step is None


@pytest.mark.parametrize(
    "case",
    ids=lambda case: f"{case[1]}:{case[2][:30]}",
    argvalues=[
        ({"replicas": 101}, "spec.replicas", "less than or equal to 100"),
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        ({"image": ""}, "spec.image", "at least 1 chars long"),
        ({"image": "has space"}, "spec.image", "should match"),
        ({"image": "nginx:latest"}, "spec.image", "pin the image to a tag other than latest"),
        ({"tier": "bronze"}, "spec.tier", 'supported values: "gold", "silver"'),
        ({"mode": "slow"}, "spec.mode", 'supported values: "fast", "safe"'),
        ({"ratio": 1}, "spec.ratio", "less than 1"),
        ({"step": 0}, "spec.step", "greater than 0"),
        ({"step": 7}, "spec.step", "multiple of 5"),
        ({"tags": ["a", "a"]}, "spec.tags[1]", "Duplicate value"),
        ({"tags": ["x" * 40]}, "spec.tags", "tag " + "x" * 40 + " is longer than 32 characters"),
        (
            {"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]},
            "spec.ports[1]",
            "Duplicate value",
        ),
        ({"ports": [{"name": "a", "port": 0}]}, "spec.ports[0].port", "greater than or equal to 1"),
        ({"ports": [{"port": 1}]}, "spec.ports[0].name", "Required value"),
        ({"paused": True, "replicas": 1}, "spec.replicas", "a paused widget must have 0 replicas"),
        ({"range": {"min": 5, "max": 1}}, "spec.range.min", "min must not exceed max"),
        ({"targetPort": True}, "spec.targetPort", "must be of type"),
        ({"memory": "lots"}, "spec.memory", "should match"),
        ({"env": {f"k{i}": "v" for i in range(33)}}, "spec.env", "must have at most 32 items"),
        ({"aliases": ["a"] * 2}, "spec.aliases[1]", "Duplicate value"),
        (
            {"thing": {"apiVersion": "fixtures.setpoint.dev/v1", "kind": "Other"}},
            "spec.thing.kind",
            'supported values: "Thing"',
        ),
        ({"manifest": {"kind": "ConfigMap"}}, "spec.manifest.apiVersion", "Required value"),
    ],
)
async def test_invalid_objects_are_rejected_with_field_and_message(
    k8s: Client,
    namespace: str,
    installed_crds: dict[str, Any],
    case: tuple[dict[str, Any], str, str],
) -> None:
    """Each schema and CEL constraint rejects a violating object at the right field.

    The error's causes carry the field path (for CEL rules, the declared
    fieldPath) and the declared message.
    """
    spec, field, message = case
    with pytest.raises(Invalid) as info:
        await k8s.create(widget(namespace, **spec))
    causes = [(c.field, c.message) for c in info.value.causes]
    assert any(f == field and message in m for f, m in causes), causes


async def test_root_rules_apply_to_the_whole_object(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """A rule declared on the resource class sees metadata too, with its declared reason.

    Decorating the Widget class with a Rule puts it at the schema root, where
    ``self.metadata.name`` is available; the failure carries FieldValueForbidden.
    """
    with pytest.raises(Invalid) as info:
        await k8s.create(widget(namespace, name="n" * 41))
    causes = [(c.reason, c.message) for c in info.value.causes]
    assert any(
        reason == "FieldValueForbidden" and "widget names are at most 40 characters" in message
        for reason, message in causes
    ), causes


async def test_transition_rules_see_the_old_object(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """mode is immutable: a rule over oldSelf rejects changing it, not setting it first.

    Creating with any mode succeeds (there is no old object); a later patch
    that changes it fails at spec.mode with the declared message.
    """
    await k8s.create(widget(namespace, mode="fast"))
    with pytest.raises(Invalid) as info:
        await k8s.patch(WIDGET, "w", MergePatch({"spec": {"mode": "safe"}}), namespace=namespace)
    assert any(
        c.field == "spec.mode" and "mode is immutable" in c.message for c in info.value.causes
    ), info.value.causes


async def test_unknown_fields_are_pruned_unless_preserved(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """Fields the schema does not declare are dropped, except where unknown fields are kept.

    Dropped: unknown keys at the root, in spec, in a plain nested model. Kept:
    anything under a dict[str, Any] field, an Any field, a model declared
    with preserve_unknown_fields, and a raw embedded resource.
    """
    obj = widget(
        namespace,
        unknownField=1,
        range={"min": 1, "max": 2, "extra": True},
        config={"free": {"form": [1, 2]}},
        raw=[{"any": "thing"}],
        extension={"name": "e", "future": {"x": 1}},
        manifest={"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}},
    )
    obj["topLevelUnknown"] = "x"
    created = await k8s.create(obj)
    spec = created["spec"]
    assert "topLevelUnknown" not in created
    assert "unknownField" not in spec
    assert spec["range"] == {"min": 1, "max": 2}
    assert spec["config"] == {"free": {"form": [1, 2]}}
    assert spec["raw"] == [{"any": "thing"}]
    assert spec["extension"] == {"name": "e", "future": {"x": 1}}
    assert spec["manifest"]["data"] == {"a": "b"}


async def test_null_is_kept_only_where_nullable(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """An explicit null survives in a nullable field and is pruned from the others.

    note is declared nullable, so null is stored and the typed object writes
    it back as null; ownerEmail is not, so the server drops the null.
    """
    created = await k8s.create(widget(namespace, note=None, ownerEmail=None))
    assert created["spec"]["note"] is None
    assert "ownerEmail" not in created["spec"]
    typed = TYPES.Widget.from_object(created)
    assert typed.to_object()["spec"]["note"] is None


async def test_status_subresource_separates_spec_and_status(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """A spec update ignores status, and a status update ignores spec.

    The main resource drops status changes (and status on create); the status
    subresource drops spec changes. Only spec changes bump the generation.
    """
    obj = widget(namespace, replicas=1)
    obj["status"] = {"replicas": 7}
    created = await k8s.create(obj)
    assert "status" not in created
    generation = created["metadata"]["generation"]

    created["status"] = {"replicas": 3, "phase": "Running"}
    created["spec"]["replicas"] = 2
    updated = await k8s.update(created)
    assert updated["spec"]["replicas"] == 2
    assert "status" not in updated
    assert updated["metadata"]["generation"] == generation + 1

    updated["status"] = {"replicas": 3, "phase": "Running"}
    updated["spec"]["replicas"] = 5
    with_status = await k8s.replace_status(updated)
    assert with_status["status"] == {"replicas": 3, "phase": "Running"}
    assert with_status["spec"]["replicas"] == 2
    assert with_status["metadata"]["generation"] == generation + 1


async def test_scale_subresource_reads_the_declared_paths(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """The scale subresource reports spec/status replicas and the status selector, and scales.

    The paths declared with Scale(...) are what the server reads, and a scale
    request writes spec.replicas through them.
    """
    created = await k8s.create(widget(namespace, replicas=2))
    created["status"] = {"replicas": 1, "selector": "app=w"}
    await k8s.replace_status(created)
    scale = await k8s.get_scale(WIDGET, "w", namespace=namespace)
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": "app=w"}
    await k8s.set_scale(WIDGET, "w", 4, namespace=namespace)
    assert (await k8s.get(WIDGET, "w", namespace=namespace))["spec"]["replicas"] == 4


async def test_typed_objects_round_trip_through_the_server(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """A typed Widget is created, read, changed and written back without losing anything.

    Unset optional fields stay unset (not zero), server-set metadata and fields
    the class does not declare (managedFields, defaults) survive a
    read-modify-write, and the status written through the typed object is
    what comes back.
    """
    typed = TYPES.Widget(
        metadata={"name": "typed", "namespace": namespace, "labels": {"app": "x"}},
        spec=TYPES.WidgetSpec(image="nginx:1.27", replicas=0, paused=True, tags=["a"]),
    )
    created = await k8s.create(typed)
    assert isinstance(created, TYPES.Widget)
    assert created.metadata.uid and created.metadata.generation == 1
    assert created.spec.step is None  # unset, not 0
    assert created.spec.range_.max == 10  # defaulted by the server

    created.spec.replicas = 0
    created.spec.env["LOG"] = "debug"
    created.metadata.annotations["note"] = "kept"
    updated = await k8s.update(created)
    assert updated.spec.env == {"LOG": "debug"}
    assert updated.metadata.annotations == {"note": "kept"}
    assert updated.metadata.managed_fields  # server data the class holds as raw JSON

    updated.status = TYPES.WidgetStatus(
        replicas=0,
        phase=TYPES.Phase.PENDING,
        conditions=[
            TYPES.Condition(
                type="Ready",
                status="False",
                reason="Paused",
                last_transition_time="2024-01-01T00:00:00Z",
            )
        ],
    )
    with_status = await k8s.replace_status(updated)
    assert with_status.status is not None
    assert with_status.status.phase is TYPES.Phase.PENDING
    assert with_status.status.conditions[0].message == ""  # server default
    again = await k8s.get(TYPES.Widget, "typed", namespace=namespace)
    assert again.to_object()["spec"] == with_status.to_object()["spec"]


async def test_selectable_fields_filter_lists(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """spec.mode is declared selectable, so a field selector on it filters the list.

    Without selectable_fields the server rejects field selectors on custom fields.
    """
    await k8s.create(widget(namespace, name="fast", mode="fast"))
    await k8s.create(widget(namespace, name="safe", mode="safe"))
    fast = await k8s.list(TYPES.Widget, namespace=namespace, fields={"spec.mode": "fast"})
    assert [w.metadata.name for w in fast] == ["fast"]


async def test_custom_names_serve_the_resource(
    k8s: Client, namespace: str, installed_crds: dict[str, Any]
) -> None:
    """Thing is served under its declared plural, not the derived one.

    Declared plural/singular/list kind replace kubebuilder's derived names, and
    the typed class's resource_info agrees with discovery.
    """
    thing = await k8s.create(
        TYPES.Thing(metadata={"name": "t", "namespace": namespace}, spec=TYPES.ThingSpec(size=2))
    )
    assert thing.spec is not None and thing.spec.size == 2
    info = await k8s.resource_info(TYPES.Thing)
    assert info.plural == "thingies"
    listed = await k8s.list(TYPES.Thing, namespace=namespace)
    assert [t.metadata.name for t in listed] == ["t"]
