"""FakeClient: the client API, typed kinds, kind registration, errors and subresources."""

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.declaration import resource
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.api.resource import Model, Resource
from setpoint.client import Preconditions
from setpoint.client.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    InternalError,
    Invalid,
    NotFound,
    ServerTimeout,
    UnknownKind,
    UnsupportedMediaType,
)
from setpoint.client.patch import ApplyPatch, JsonPatch, MergePatch, StrategicMergePatch
from setpoint.client.protocols import Reader, StatusWriter, Writer
from setpoint.testing.fake import FakeClient, FakeOptions
from tests._support.stored import stored


class WidgetSpec(Model):
    """Desired widget."""

    size: int = 1
    """How big."""


class WidgetStatus(Model):
    """Observed widget."""

    phase: str | None = None
    """Where it is."""


@resource(group="fake.setpoint.dev", version="v1")
class Widget(Resource):
    """A typed custom resource with a status subresource."""

    spec: WidgetSpec
    status: WidgetStatus | None = None


THING = GroupVersionKind("things.example.com", "v1", "Thing")
THING_INFO = ResourceInfo(THING, "things", True, frozenset({"status", "scale"}))


def cm(name: str, namespace: str = "ns", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


def test_satisfies_the_client_protocols() -> None:
    fake = FakeClient()
    assert isinstance(fake, Reader)
    assert isinstance(fake, Writer)
    assert isinstance(fake, StatusWriter)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="history"):
        FakeOptions(history=0)
    with pytest.raises(ValueError, match="field_manager"):
        FakeOptions(field_manager="")
    with pytest.raises(ValueError, match="default_namespace"):
        FakeOptions(default_namespace="")
    assert FakeClient(options=FakeOptions(default_namespace="x")).default_namespace == "x"


async def test_crud_round_trip_with_copies() -> None:
    fake = FakeClient()
    made = await fake.create(cm("a", k="v"))
    assert made["metadata"]["resourceVersion"] == "1"
    made["data"]["k"] = "mutated locally"
    got = await fake.get(kinds.ConfigMap, "a", namespace="ns")
    assert got["data"] == {"k": "v"}  # results are copies, the store is untouched
    got["data"]["k"] = "w"
    updated = await fake.update(got)
    assert updated["metadata"]["resourceVersion"] == "2"
    listed = await fake.list(kinds.ConfigMap)
    assert [o["data"] for o in listed] == [{"k": "w"}]
    assert listed.resource_version == "2"
    status = await fake.delete(kinds.ConfigMap, "a", namespace="ns")
    assert status["status"] == "Success"
    assert fake.lookup(kinds.ConfigMap, "a", namespace="ns") is None
    assert fake.resource_version == "3"


async def test_typed_objects_round_trip() -> None:
    fake = FakeClient()
    widget = Widget(metadata={"name": "w", "namespace": "ns"}, spec=WidgetSpec(size=3))
    made = await fake.create(widget)
    assert isinstance(made, Widget)
    assert made.metadata.generation == 1
    made.status = WidgetStatus(phase="Ready")
    made.spec.size = 9
    with_status = await fake.replace_status(made)
    assert with_status.status == WidgetStatus(phase="Ready")
    assert with_status.spec.size == 3  # update_status ignores spec
    listed = await fake.list(Widget, namespace="ns")
    assert [w.spec.size for w in listed] == [3]
    patched = await fake.patch(Widget, "w", MergePatch({"spec": {"size": 4}}), namespace="ns")
    assert isinstance(patched, Widget) and patched.metadata.generation == 2
    assert (await fake.resource_info(Widget)).plural == "widgets"
    assert isinstance(fake.lookup(Widget, "w", namespace="ns"), Widget)
    assert [w.metadata.name for w in fake.contents(Widget)] == ["w"]


async def test_kinds_come_from_builtins_registration_and_crds() -> None:
    fake = FakeClient(resources=[THING_INFO])
    assert (await fake.resource_info(kinds.Deployment)).plural == "deployments"
    assert (await fake.resource_info(THING)).subresources == {"status", "scale"}
    gadget = GroupVersionKind("gadgets.example.com", "v1", "Gadget")
    with pytest.raises(UnknownKind, match="CustomResourceDefinition"):
        await fake.get(gadget, "x", namespace="ns")
    await fake.create(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.gadgets.example.com"},
            "spec": {
                "group": "gadgets.example.com",
                "scope": "Cluster",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [{"name": "v1", "served": True, "storage": True}],
            },
        }
    )
    info = await fake.resource_info(gadget)
    assert (info.plural, info.namespaced, info.subresources) == ("gadgets", False, frozenset())
    crd = await fake.get(kinds.CustomResourceDefinition, "gadgets.gadgets.example.com")
    assert {c["type"] for c in crd["status"]["conditions"]} == {"Established", "NamesAccepted"}
    with pytest.raises(UnknownKind, match="serves v1"):
        await fake.get(GroupVersionKind("gadgets.example.com", "v2", "Gadget"), "x")
    fake.register(ResourceInfo(GroupVersionKind("x.example.com", "v1", "X"), "xs", False))
    assert (await fake.resource_info(GroupVersionKind("x.example.com", "v1", "X"))).plural == "xs"


async def test_scope_and_name_are_checked_like_the_client() -> None:
    fake = FakeClient()
    with pytest.raises(ValueError, match="namespaced: pass namespace="):
        await fake.get(kinds.ConfigMap, "a")
    with pytest.raises(ValueError, match="cluster-scoped"):
        await fake.get(kinds.Namespace, "a", namespace="ns")
    with pytest.raises(ValueError, match="must not be empty"):
        await fake.get(kinds.ConfigMap, "", namespace="ns")
    with pytest.raises(ValueError, match=r"no metadata\.name"):
        await fake.update({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "n"}})
    with pytest.raises(ValueError, match="apiVersion/kind"):
        await fake.create({"metadata": {"name": "x"}})


async def test_create_errors_and_generate_name() -> None:
    fake = FakeClient()
    await fake.create(cm("a"))
    with pytest.raises(AlreadyExists) as exists:
        await fake.create(cm("a"))
    assert exists.value.status["message"] == 'configmaps "a" already exists'
    with pytest.raises(InternalError, match="resourceVersion should not be set"):
        await fake.create(
            {**cm("b"), "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "3"}}
        )
    nameless = cm("x")
    del nameless["metadata"]["name"]
    with pytest.raises(Invalid, match="name or generateName is required"):
        await fake.create(nameless)
    nameless["metadata"]["generateName"] = "gen-"
    names = {(await fake.create(nameless))["metadata"]["name"] for _ in range(5)}
    assert len(names) == 5 and all(n.startswith("gen-") and len(n) == 9 for n in names)
    for bad in ("UPPER", "-dash", "a" * 254):
        with pytest.raises(Invalid) as info:
            await fake.create(cm(bad))
        assert info.value.causes[0].field == "metadata.name"
    with pytest.raises(Invalid):
        await fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}})
    labelled = cm("l")
    labelled["metadata"]["labels"] = {"ok": "fine", "bad key": "x", "k": "bad value!"}
    labelled["metadata"]["annotations"] = {"bad key": "x"}
    labelled["metadata"]["ownerReferences"] = [{"kind": "X", "name": "o"}]
    with pytest.raises(Invalid) as many:
        await fake.create(labelled)
    assert [c.field for c in many.value.causes] == [
        "metadata.labels",
        "metadata.labels",
        "metadata.annotations",
        "metadata.ownerReferences[0].apiVersion",
        "metadata.ownerReferences[0].uid",
    ]
    assert many.value.status["message"].startswith('ConfigMap "l" is invalid: [')
    undecodable: dict[str, Any]
    for undecodable in ({"labels": {"n": 5}}, {"annotations": []}, {"finalizers": "x"}):
        broken = cm("undecodable")
        broken["metadata"].update(undecodable)
        with pytest.raises(BadRequest, match="cannot be handled as a ConfigMap"):
            await fake.create(broken)
    made = await fake.create(cm("rv"))
    made["metadata"]["resourceVersion"] = "abc"
    with pytest.raises(InternalError, match=r"strconv\.ParseUint"):
        await fake.update(made)
    with pytest.raises(BadRequest, match="invalid resource version"):
        await fake.list(kinds.ConfigMap, resource_version="abc")


async def test_dry_run_changes_nothing() -> None:
    fake = FakeClient()
    await fake.create(cm("a", k="v"), dry_run=True)
    assert fake.lookup(kinds.ConfigMap, "a", namespace="ns") is None
    made = await fake.create(cm("a", k="v"))
    made["data"] = {"k": "w"}
    assert (await fake.update(made, dry_run=True))["data"] == {"k": "w"}
    assert (
        await fake.patch(
            kinds.ConfigMap, "a", MergePatch({"data": {"x": "1"}}), namespace="ns", dry_run=True
        )
    )["data"] == {"k": "v", "x": "1"}
    await fake.delete(kinds.ConfigMap, "a", namespace="ns", dry_run=True)
    kept = stored(fake, kinds.ConfigMap, "a", namespace="ns")
    assert kept["data"] == {"k": "v"}
    assert fake.resource_version == "1"


async def test_update_and_patch_errors() -> None:
    fake = FakeClient(resources=[THING_INFO])
    made: dict[str, Any] = await fake.create(
        {
            "apiVersion": "things.example.com/v1",
            "kind": "Thing",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"a": 1},
        }
    )
    with pytest.raises(Invalid, match="must be specified for an update"):
        await fake.update({**made, "metadata": {"name": "t", "namespace": "ns"}})
    with pytest.raises(Conflict, match="Precondition failed: UID"):
        await fake.update({**made, "metadata": {**made["metadata"], "uid": "other"}})
    with pytest.raises(NotFound):
        await fake.update({**made, "metadata": {**made["metadata"], "name": "missing"}})
    with pytest.raises(NotFound):
        await fake.update(made, subresource="nonsense")
    with pytest.raises(UnsupportedMediaType):
        await fake.patch(THING, "t", StrategicMergePatch({"spec": {"a": 2}}), namespace="ns")
    with pytest.raises(BadRequest, match="does not match the name on the URL"):
        await fake.patch(THING, "t", MergePatch({"metadata": {"name": "u"}}), namespace="ns")
    with pytest.raises(Invalid, match="field is immutable"):
        await fake.patch(THING, "t", MergePatch({"metadata": {"uid": "u"}}), namespace="ns")
    with pytest.raises(Invalid, match="failed"):
        await fake.patch(
            THING, "t", JsonPatch([{"op": "test", "path": "/spec/a", "value": 2}]), namespace="ns"
        )
    await fake.create(cm("t"))
    with pytest.raises(BadRequest):
        await fake.patch(
            kinds.ConfigMap, "t", StrategicMergePatch({"$patch": "delete"}), namespace="ns"
        )
    with pytest.raises(NotFound):
        await fake.patch(THING, "missing", MergePatch({}), namespace="ns")
    assert (await fake.get(THING, "t", namespace="ns"))["spec"] == {"a": 1}


async def test_apply_creates_and_validates() -> None:
    fake = FakeClient()
    made = await fake.apply(cm("a", k="v"), field_manager="ctrl")
    assert made["data"] == {"k": "v"}
    again = await fake.apply(cm("a", k="v"), field_manager="ctrl")
    assert again["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    with pytest.raises(BadRequest, match="apiVersion and kind"):
        await fake.patch(
            kinds.ConfigMap, "a", ApplyPatch({"metadata": {"name": "a"}}), namespace="ns"
        )
    with pytest.raises(BadRequest, match="does not match the name"):
        await fake.patch(kinds.ConfigMap, "a", ApplyPatch(cm("b")), namespace="ns")
    with pytest.raises(NotFound):
        await fake.apply(cm("new"), subresource="status")
    # Seeded objects have no owners: any manager may take their fields.
    fake.add(cm("seeded", k="old"))
    assert (await fake.apply(cm("seeded", k="new"), field_manager="x"))["data"] == {"k": "new"}


async def test_delete_preconditions_and_collection() -> None:
    fake = FakeClient()
    made = await fake.create(cm("a"))
    with pytest.raises(Conflict, match="UID in the precondition"):
        await fake.delete(
            kinds.ConfigMap, "a", namespace="ns", preconditions=Preconditions(uid="x")
        )
    with pytest.raises(Conflict, match="ResourceVersion in the precondition"):
        await fake.delete(
            kinds.ConfigMap, "a", namespace="ns", preconditions=Preconditions(resource_version="99")
        )
    await fake.delete(
        kinds.ConfigMap,
        "a",
        namespace="ns",
        preconditions=Preconditions(uid=made["metadata"]["uid"]),
    )
    for i in range(4):
        obj = cm(f"c{i}", namespace="ns" if i < 3 else "other")
        obj["metadata"]["labels"] = {"group": "a" if i % 2 == 0 else "b"}
        await fake.create(obj)
    await fake.delete_collection(kinds.ConfigMap, namespace="ns", labels="group=a")
    assert [o["metadata"]["name"] for o in fake.contents(kinds.ConfigMap)] == ["c1", "c3"]
    await fake.delete_collection(kinds.ConfigMap)
    assert fake.contents(kinds.ConfigMap) == []


async def test_list_pages_snapshots_and_versions() -> None:
    fake = FakeClient()
    for i in range(5):
        await fake.create(cm(f"p{i}"))
    first = await fake.list_page(kinds.ConfigMap, namespace="ns", limit=2)
    assert [o["metadata"]["name"] for o in first] == ["p0", "p1"]
    assert first.remaining_item_count == 3
    await fake.delete(kinds.ConfigMap, "p3", namespace="ns")
    rest = await fake.list_page(
        kinds.ConfigMap, namespace="ns", continue_token=first.continue_token
    )
    assert [o["metadata"]["name"] for o in rest] == ["p2", "p3", "p4"]  # the first page's snapshot
    now = await fake.list(kinds.ConfigMap, namespace="ns", resource_version="0")
    assert len(now) == 4
    with pytest.raises(ServerTimeout, match="Too large resource version"):
        await fake.list(kinds.ConfigMap, resource_version="999")
    with pytest.raises(BadRequest):
        await fake.list_page(kinds.ConfigMap, continue_token="garbage!")
    with pytest.raises(BadRequest):
        await fake.list(kinds.ConfigMap, labels="bad selector!")
    exact = await fake.list_page(
        kinds.ConfigMap, resource_version="2", resource_version_match="Exact"
    )
    assert [o["metadata"]["name"] for o in exact] == ["p0", "p1"]
    labelled = await fake.list_page(kinds.ConfigMap, labels="x", limit=1)
    assert labelled.remaining_item_count is None


async def test_subresources() -> None:
    fake = FakeClient(resources=[THING_INFO])
    await fake.create(
        {
            "apiVersion": "things.example.com/v1",
            "kind": "Thing",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"replicas": 1},
        }
    )
    scale = await fake.get_scale(THING, "t", namespace="ns")
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 1)
    assert (await fake.set_scale(THING, "t", 4, namespace="ns"))["spec"]["replicas"] == 4
    current = await fake.get_subresource(THING, "t", "scale", namespace="ns")
    current["spec"]["replicas"] = 6
    assert (await fake.update_subresource(THING, "t", "scale", current, namespace="ns"))["spec"][
        "replicas"
    ] == 6
    with pytest.raises(Conflict):
        await fake.update_subresource(THING, "t", "scale", current, namespace="ns")
    rv = (await fake.get(THING, "t", namespace="ns"))["metadata"]["resourceVersion"]
    status = await fake.update_subresource(
        THING,
        "t",
        "status",
        {"metadata": {"resourceVersion": rv}, "status": {"ok": True}},
        namespace="ns",
    )
    assert status["status"] == {"ok": True}
    with pytest.raises(NotFound):
        await fake.get_scale(kinds.ConfigMap, "x", namespace="ns")
    with pytest.raises(NotFound):
        await fake.get_subresource(THING, "t", "log", namespace="ns")

    await fake.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "ns"},
        }
    )
    token = await fake.create_subresource(
        kinds.ServiceAccount, "sa", "token", {"spec": {"expirationSeconds": 600}}, namespace="ns"
    )
    assert token["kind"] == "TokenRequest" and token["status"]["token"]
    await fake.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {},
        }
    )
    evicted = await fake.create_subresource(kinds.Pod, "p", "eviction", {}, namespace="ns")
    assert evicted["status"] == "Success"
    assert fake.lookup(kinds.Pod, "p", namespace="ns") is None
    with pytest.raises(NotFound):
        await fake.create_subresource(kinds.ConfigMap, "x", "frob", {}, namespace="ns")
    assert (await fake.server_version())["gitVersion"].startswith("v1.")


def test_add_seeds_state_as_given() -> None:
    fake = FakeClient(
        objects=[
            {
                "apiVersion": "things.example.com/v1",
                "kind": "Thing",
                "metadata": {
                    "name": "t",
                    "namespace": "ns",
                    "finalizers": ["x/y"],
                    "deletionTimestamp": "2024-01-01T00:00:00Z",
                    "resourceVersion": "77",
                },
                "status": {"phase": "Stuck"},
            },
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}},
        ],
        resources=[THING_INFO],
    )
    thing = stored(fake, THING, "t", namespace="ns")
    assert thing["status"] == {"phase": "Stuck"}
    assert thing["metadata"]["deletionGracePeriodSeconds"] == 0
    assert thing["metadata"]["generation"] == 1
    assert thing["metadata"]["resourceVersion"] == "2"  # the Namespace went first
    assert stored(fake, kinds.Namespace, "ns")["status"] == {"phase": "Active"}
    with pytest.raises(ValueError, match="deletionTimestamp but no finalizers"):
        fake.add(
            {
                **cm("gone"),
                "metadata": {
                    "name": "gone",
                    "namespace": "ns",
                    "deletionTimestamp": "2024-01-01T00:00:00Z",
                },
            }
        )
    with pytest.raises(ValueError, match=r"without metadata\.name"):
        fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns"}})
    with pytest.raises(ValueError, match="is namespaced"):
        fake.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    with pytest.raises(ValueError, match="cluster-scoped"):
        fake.add(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "namespace": "y"}}
        )
    with pytest.raises(AlreadyExists):
        fake.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}})
    with pytest.raises(UnknownKind):
        fake.add({"apiVersion": "nope.example.com/v1", "kind": "Nope", "metadata": {"name": "x"}})
