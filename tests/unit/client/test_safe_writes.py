"""Safe writes against the testing fake client: outcomes, retries, refusals, request counts."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.conditions import Condition, set_condition
from setpoint.api.declaration import field, resource
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.kinds import ResourceInfo
from setpoint.api.meta import key_of
from setpoint.api.owners import (
    AlreadyOwned,
    InvalidOwner,
    is_controlled_by,
    set_controller_reference,
)
from setpoint.api.resource import Model, Resource
from setpoint.client.errors import Conflict, Invalid, NotFound
from setpoint.client.patch import MergePatch
from setpoint.client.protocols import CachedClient
from setpoint.client.safe import (
    APPLIED_ANNOTATION_PREFIX,
    FinalizerOutcome,
    MutationScopeError,
    OperationResult,
    RetryOptions,
    add_finalizer,
    apply_child,
    apply_status,
    create_or_patch,
    create_or_update,
    has_finalizer,
    remove_finalizer,
    update_status,
    validate_finalizer_name,
)
from setpoint.testing.fake import FakeClient

GIZMO = GroupVersionKind("unit.setpoint.dev", "v1", "Gizmo")
GIZMO_INFO = ResourceInfo(GIZMO, "gizmos", True, frozenset({"status"}))
FAST = RetryOptions(attempts=3, initial_delay=0.0, max_delay=0.0)


class TaskStatus(Model):
    phase: str | None = None
    conditions: list[Condition] = field(
        default_factory=list, list_type="map", list_map_keys=["type"]
    )


class TaskSpec(Model):
    size: int = 1


@resource(group="unit.setpoint.dev", version="v1")
class Task(Resource):
    spec: TaskSpec = field(default_factory=TaskSpec)
    status: TaskStatus | None = None


def gizmo(name: str = "g", **status: object) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": GIZMO.api_version,
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"size": 1},
    }
    if status:
        obj["status"] = dict(status)
    return obj


def cm(name: str = "c", finalizers: list[str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def writes(fake: FakeClient) -> list[str]:
    return [c.verb for c in fake.faults.calls if c.verb not in ("get", "list", "watch")]


@pytest.fixture
def fake() -> FakeClient:
    return FakeClient(resources=[GIZMO_INFO, Task])


# --------------------------------------------------------------------------- status


async def test_update_status_writes_status_and_skips_empty_writes(fake: FakeClient) -> None:
    obj = await fake.create(gizmo())

    def running(o: dict[str, Any]) -> None:
        o.setdefault("status", {})["phase"] = "Running"

    result, written = await update_status(fake, obj, running)
    assert result is OperationResult.UPDATED
    assert written["status"] == {"phase": "Running"}
    assert obj.get("status") is None  # the caller's object is never modified
    fake.faults.calls.clear()
    result, same = await update_status(fake, written, running)
    assert result is OperationResult.UNCHANGED
    assert same is written
    assert fake.faults.calls == []


async def test_update_status_rereads_after_conflict(fake: FakeClient) -> None:
    obj = await fake.create(gizmo())

    async def other_writer(call: object) -> None:
        await fake.patch(
            GIZMO,
            "g",
            MergePatch({"status": {"phase": "Other"}}),
            namespace="ns",
            subresource="status",
        )

    fake.faults.intercept("update", other_writer, times=1)
    seen: list[object] = []

    async def mutate(o: dict[str, Any]) -> None:
        status = o.setdefault("status", {})
        seen.append(status.get("phase"))
        status["entries"] = ["mine"]

    result, written = await update_status(fake, obj, mutate, retry=FAST)
    assert result is OperationResult.UPDATED
    assert seen == [None, "Other"]
    assert written["status"] == {"phase": "Other", "entries": ["mine"]}
    assert [c.verb for c in fake.faults.calls].count("get") == 1


async def test_update_status_gives_up_with_the_conflict_and_a_note(fake: FakeClient) -> None:
    await fake.create(gizmo())
    fake.faults.fail_next("update", error=Conflict, times=None)
    with pytest.raises(Conflict) as info:
        await update_status(
            fake,
            (GIZMO, ObjectKey("ns", "g")),
            lambda o: o.update(status={"phase": "X"}),
            retry=FAST,
        )
    assert "after 3 attempts" in "".join(info.value.__notes__)
    assert writes(fake).count("update") == 3


async def test_update_status_refuses_spec_changes_and_kinds_without_status(
    fake: FakeClient,
) -> None:
    obj = await fake.create(gizmo())

    def sneaky(o: dict[str, Any]) -> None:
        o["spec"]["size"] = 9
        o["metadata"].setdefault("labels", {})["x"] = "y"

    with pytest.raises(MutationScopeError, match=r"metadata\.labels, spec"):
        await update_status(fake, obj, sneaky)
    with pytest.raises(ValueError, match="no status subresource"):
        await update_status(fake, await fake.create(cm()), lambda o: None)
    with pytest.raises(NotFound):
        await update_status(fake, (GIZMO, ObjectKey("ns", "missing")), lambda o: None)
    with pytest.raises(TypeError, match="ObjectKey"):
        await update_status(fake, (GIZMO, "ns/g"), lambda o: None)
    assert writes(fake) == ["create", "create"]


async def test_update_status_on_typed_objects(fake: FakeClient) -> None:
    task = await fake.create(Task.from_object({"metadata": {"name": "t", "namespace": "ns"}}))

    def ready(t: Task) -> None:
        t.status = t.status or TaskStatus()
        set_condition(t.status, "Ready", True, "Done")

    result, written = await update_status(fake, task, ready)
    assert result is OperationResult.UPDATED
    assert isinstance(written, Task)
    assert written.status is not None and written.status.conditions[0].reason == "Done"
    result, _ = await update_status(fake, (Task, ObjectKey("ns", "t")), ready)
    assert result is OperationResult.UNCHANGED


async def test_apply_status_refuses_other_fields(fake: FakeClient) -> None:
    await fake.create(gizmo())
    with pytest.raises(MutationScopeError, match="spec"):
        await apply_status(fake, gizmo(phase="X"), field_manager="m")
    desired = {k: v for k, v in gizmo(phase="X").items() if k != "spec"}
    result, written = await apply_status(fake, desired, field_manager="m")
    assert result is OperationResult.UPDATED
    assert written["status"]["phase"] == "X"


# --------------------------------------------------------------------------- finalizers


async def test_finalizer_add_and_remove_outcomes(fake: FakeClient) -> None:
    obj = await fake.create(cm(finalizers=["other.example.com/f"]))
    outcome, obj = await add_finalizer(fake, obj, "mine.example.com/f")
    assert outcome is FinalizerOutcome.ADDED
    assert obj["metadata"]["finalizers"] == ["other.example.com/f", "mine.example.com/f"]
    fake.faults.calls.clear()
    assert (await add_finalizer(fake, obj, "mine.example.com/f")).outcome is (
        FinalizerOutcome.ALREADY_PRESENT
    )
    outcome, obj = await remove_finalizer(fake, obj, "mine.example.com/f")
    assert outcome is FinalizerOutcome.REMOVED
    assert obj["metadata"]["finalizers"] == ["other.example.com/f"]
    assert (await remove_finalizer(fake, obj, "mine.example.com/f")).outcome is (
        FinalizerOutcome.ALREADY_ABSENT
    )
    assert writes(fake) == ["patch"]
    key = (kinds.ConfigMap, ObjectKey("ns", "nothing"))
    assert await add_finalizer(fake, key, "mine.example.com/f") == (FinalizerOutcome.GONE, None)
    assert await remove_finalizer(fake, key, "mine.example.com/f") == (FinalizerOutcome.GONE, None)


async def test_finalizer_patch_retries_when_another_writer_changes_the_list(
    fake: FakeClient,
) -> None:
    obj = await fake.create(cm(finalizers=["a.example.com/f"]))

    async def other_controller(call: object) -> None:
        live = await fake.get(kinds.ConfigMap, "c", namespace="ns")
        live["metadata"]["finalizers"] = ["b.example.com/f", *live["metadata"]["finalizers"]]
        await fake.update(live)

    fake.faults.intercept("patch", other_controller, times=1)
    outcome, obj = await add_finalizer(fake, obj, "mine.example.com/f", retry=FAST)
    assert outcome is FinalizerOutcome.ADDED
    assert obj["metadata"]["finalizers"] == [
        "b.example.com/f",
        "a.example.com/f",
        "mine.example.com/f",
    ]

    fake.faults.intercept("patch", other_controller, times=1)
    outcome, obj = await remove_finalizer(fake, obj, "a.example.com/f", retry=FAST)
    assert outcome is FinalizerOutcome.REMOVED
    assert obj["metadata"]["finalizers"] == [
        "b.example.com/f",
        "b.example.com/f",
        "mine.example.com/f",
    ]


async def test_no_finalizer_for_a_deleting_object(fake: FakeClient) -> None:
    stale = await fake.create(cm(finalizers=["keep.example.com/f"]))
    await fake.delete(kinds.ConfigMap, "c", namespace="ns")
    deleting = await fake.get(kinds.ConfigMap, "c", namespace="ns")
    fake.faults.calls.clear()
    assert await add_finalizer(fake, deleting, "late.example.com/f") == (
        FinalizerOutcome.DELETING,
        deleting,
    )
    assert fake.faults.calls == []
    outcome, seen = await add_finalizer(fake, stale, "late.example.com/f")
    assert outcome is FinalizerOutcome.DELETING
    assert not has_finalizer(seen, "late.example.com/f")
    outcome, _ = await remove_finalizer(fake, deleting, "keep.example.com/f")
    assert outcome is FinalizerOutcome.REMOVED
    with pytest.raises(NotFound):
        await fake.get(kinds.ConfigMap, "c", namespace="ns")


async def test_duplicate_finalizers_are_all_removed(fake: FakeClient) -> None:
    obj = await fake.create(
        cm(finalizers=["x.example.com/f", "o.example.com/f", "x.example.com/f"])
    )
    outcome, obj = await remove_finalizer(fake, obj, "x.example.com/f")
    assert outcome is FinalizerOutcome.REMOVED
    assert obj["metadata"]["finalizers"] == ["o.example.com/f"]


@pytest.mark.parametrize(
    "name", ["cleanup", "Example.com/x", "example.com/", "a/b/c", "e.com/" + "x" * 64]
)
def test_unqualified_finalizer_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="domain-qualified"):
        validate_finalizer_name(name)


def test_qualified_finalizer_names_pass() -> None:
    for name in ("example.com/cleanup", "a.b-c.io/Some_Name.v2"):
        validate_finalizer_name(name)
    assert has_finalizer(cm(finalizers=["example.com/cleanup"]), "example.com/cleanup")


# --------------------------------------------------------------------------- create_or_*


@pytest.mark.parametrize("write", [create_or_update, create_or_patch])
async def test_create_or_write_outcomes(fake: FakeClient, write: object) -> None:
    def mode_on(o: dict[str, Any]) -> None:
        o.setdefault("data", {})["mode"] = "on"

    result, created = await write(fake, cm(), mode_on)  # type: ignore[operator]
    assert result is OperationResult.CREATED
    assert created["data"] == {"mode": "on"}
    fake.faults.calls.clear()
    result, same = await write(fake, cm(), mode_on)  # type: ignore[operator]
    assert result is OperationResult.UNCHANGED
    assert writes(fake) == []
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    result, updated = await write(fake, cm(), lambda o: o["data"].update(mode="off"))  # type: ignore[operator]
    assert result is OperationResult.UPDATED
    assert updated["data"] == {"mode": "off"}


async def test_create_or_update_is_optimistic_and_create_or_patch_per_field(
    fake: FakeClient,
) -> None:
    for write, expected_calls in ((create_or_update, 2), (create_or_patch, 1)):
        name = f"c-{expected_calls}"
        await fake.create(cm(name, mode="on"))
        calls = 0

        async def mutate(o: dict[str, Any], name: str = name) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                await fake.patch(
                    kinds.ConfigMap,
                    name,
                    MergePatch({"metadata": {"labels": {"x": "y"}}}),
                    namespace="ns",
                )
            o["data"]["mode"] = "off"

        result, obj = await write(fake, cm(name), mutate, retry=FAST)
        assert result is OperationResult.UPDATED
        assert calls == expected_calls
        assert obj["metadata"]["labels"] == {"x": "y"}
        assert obj["data"] == {"mode": "off"}


async def test_create_or_patch_retries_when_its_own_field_changed(fake: FakeClient) -> None:
    owner = await fake.create(cm("owner"))
    await fake.create(cm("dep"))
    other = await fake.create(cm("other"))
    calls = 0

    async def mutate(o: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            live = await fake.get(kinds.ConfigMap, "dep", namespace="ns")
            live["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "other",
                    "uid": other["metadata"]["uid"],
                }
            ]
            await fake.update(live)
        set_controller_reference(o, owner)

    result, obj = await create_or_patch(fake, cm("dep"), mutate, retry=FAST)
    assert result is OperationResult.UPDATED
    assert calls == 2
    assert [r["name"] for r in obj["metadata"]["ownerReferences"]] == ["other", "owner"]


async def test_create_or_write_refusals(fake: FakeClient) -> None:
    await fake.create(gizmo())
    with pytest.raises(MutationScopeError, match="status"):
        await create_or_patch(fake, gizmo(), lambda o: o.update(status={"phase": "X"}))
    with pytest.raises(MutationScopeError, match="name"):
        await create_or_update(fake, cm(), lambda o: o["metadata"].update(name="renamed"))
    # A real validation failure names its field and is raised at once, not retried.
    await fake.create(cm())
    fake.faults.calls.clear()
    with pytest.raises(Invalid) as info:
        await create_or_patch(
            fake, cm(), lambda o: o["metadata"].update(labels={"bad key!": "x"}), retry=FAST
        )
    assert info.value.causes
    assert writes(fake) == ["patch"]


async def test_create_or_update_retries_a_lost_create_race(fake: FakeClient) -> None:
    async def racer(call: object) -> None:
        await fake.create(cm(mode="theirs"))

    fake.faults.intercept("create", racer, times=1)
    result, obj = await create_or_update(
        fake, cm(), lambda o: o.setdefault("data", {}).update(mine="yes"), retry=FAST
    )
    assert result is OperationResult.UPDATED
    assert obj["data"] == {"mode": "theirs", "mine": "yes"}


# --------------------------------------------------------------------------- apply_child


async def test_apply_child_creates_then_reports_unchanged(fake: FakeClient) -> None:
    owner = await fake.create(gizmo())
    result, child = await apply_child(fake, cm("child", k="v"), field_manager="ctl", owner=owner)
    assert result is OperationResult.CREATED
    assert is_controlled_by(child, owner)
    # The fake records no managedFields, so it applies again; the server changes nothing.
    result, _ = await apply_child(fake, cm("child", k="v"), field_manager="ctl", owner=owner)
    assert result is OperationResult.UNCHANGED
    result, changed = await apply_child(fake, cm("child", k="w"), field_manager="ctl", owner=owner)
    assert result is OperationResult.UPDATED
    assert changed["data"] == {"k": "w"}


async def test_apply_child_refuses_a_foreign_controller_and_bad_scopes(fake: FakeClient) -> None:
    owner = await fake.create(gizmo())
    rival = await fake.create(gizmo("rival"))
    await apply_child(fake, cm("child"), field_manager="ctl", owner=rival)
    with pytest.raises(AlreadyOwned, match="rival"):
        await apply_child(fake, cm("child"), field_manager="ctl", owner=owner)
    elsewhere = cm("child")
    elsewhere["metadata"]["namespace"] = "other"
    with pytest.raises(InvalidOwner, match="cross-namespace"):
        await apply_child(fake, elsewhere, field_manager="ctl", owner=owner)
    with pytest.raises(ValueError, match="field_manager"):
        await apply_child(fake, cm("child"), field_manager="")


class CachedFake:
    """The fake plus a cache view over its own store: a CachedClient, as ctx.client is."""

    def __init__(self, fake: FakeClient, *, blind: bool = False) -> None:
        self.fake = fake
        self.cache = self
        self.blind = blind
        """Pretend to have seen nothing (a cache that missed a create by someone else)."""

    def peek(self, kind: GroupVersionKind, key: ObjectKey) -> dict[str, Any] | None:
        if self.blind:
            return None
        obj = self.fake.lookup(kind, key.name, namespace=key.namespace or None)
        return obj if isinstance(obj, dict) else None

    def known_absent(self, kind: GroupVersionKind, obj: dict[str, Any]) -> bool:
        key = key_of(obj)
        return self.blind or self.peek(kind, key) is None

    async def wait_for_own_write(
        self, kind: GroupVersionKind, key: ObjectKey, timeout: float
    ) -> bool:
        return False  # the fake's store is the cache: nothing is ever on its way

    async def apply_outcome(self, obj: Any, **options: Any) -> Any:
        # Written out, not left to __getattr__: from Python 3.12 on, isinstance() with a
        # runtime protocol (CachedClient) sees only attributes that exist without calling it.
        return await self.fake.apply_outcome(obj, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)


async def test_apply_child_stamps_the_applied_annotation_unless_told_not_to(
    fake: FakeClient,
) -> None:
    result, child = await apply_child(fake, cm("marked", k="v"), field_manager="ctl")
    assert result is OperationResult.CREATED
    marks = [k for k in child["metadata"]["annotations"] if k.startswith(APPLIED_ANNOTATION_PREFIX)]
    assert len(marks) == 1
    _, both = await apply_child(fake, cm("marked", k="v"), field_manager="other-ctl")
    keys = both["metadata"]["annotations"]
    assert len([k for k in keys if k.startswith(APPLIED_ANNOTATION_PREFIX)]) == 2

    _, plain = await apply_child(
        fake, cm("plain", k="v"), field_manager="ctl", applied_annotation=False
    )
    assert "annotations" not in plain["metadata"]


async def test_apply_child_answers_from_the_cache_when_the_annotation_matches(
    fake: FakeClient,
) -> None:
    client = CachedFake(fake)
    assert isinstance(client, CachedClient)
    created, _ = await apply_child(client, cm("child", k="v"), field_manager="ctl")
    assert created is OperationResult.CREATED
    assert [c.verb for c in fake.faults.calls] == ["apply"]  # no GET before the first apply
    fake.faults.calls.clear()
    result, _ = await apply_child(client, cm("child", k="v"), field_manager="ctl")
    assert result is OperationResult.UNCHANGED
    assert fake.faults.calls == []  # not even a GET

    result, _ = await apply_child(client, cm("child", k="w"), field_manager="ctl")
    assert result is OperationResult.UPDATED  # a new desired state: a new fingerprint
    fake.faults.calls.clear()
    await apply_child(client, cm("child", k="w"), field_manager="ctl", applied_annotation=False)
    assert [c.verb for c in fake.faults.calls] == ["get", "apply"]


async def test_apply_child_without_a_get_still_refuses_a_foreign_controller(
    fake: FakeClient,
) -> None:
    """A cache that missed the child: the server's refusal becomes AlreadyOwned, and a child
    that existed without a controller is adopted and reported UPDATED (the server's 200)."""
    owner = await fake.create(gizmo())
    rival = await fake.create(gizmo("rival"))
    await apply_child(fake, cm("child"), field_manager="ctl", owner=rival)
    blind = CachedFake(fake, blind=True)
    with pytest.raises(AlreadyOwned, match="rival"):
        await apply_child(blind, cm("child"), field_manager="other-ctl", owner=owner)
    await fake.create(cm("orphan", k="v"))
    result, adopted = await apply_child(
        blind, cm("orphan", k="v"), field_manager="ctl", owner=owner
    )
    assert result is OperationResult.UPDATED
    assert is_controlled_by(adopted, owner)


def test_retry_options_are_validated() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryOptions(attempts=0)
    with pytest.raises(ValueError, match="max_delay"):
        RetryOptions(initial_delay=2.0, max_delay=1.0)
    with pytest.raises(ValueError, match="factor"):
        RetryOptions(factor=0.5)
    with pytest.raises(ValueError, match="jitter"):
        RetryOptions(jitter=2)
    delays = list(RetryOptions(attempts=5, initial_delay=0.1, max_delay=0.3, jitter=0).delays())
    assert delays == [0.1, 0.2, 0.3, 0.3]
