"""Children the garbage collector cannot own: tracking label and annotation, mappers, cleanup."""

from __future__ import annotations

from typing import Any

import pytest

import setpoint as sp
from setpoint import kinds
from setpoint.api.tracking import OWNER_ANNOTATION, OWNER_UID_LABEL, owner_selector
from setpoint.client.protocols import IndexReader
from setpoint.testing import FakeClient, eventually_passes, run_operator

MIRROR = sp.GroupVersionKind("mirror.example.com", "v1", "SecretMirror")


def mirror(namespace: str = "ops", name: str = "db", uid: str = "u-1") -> dict[str, Any]:
    return {
        "apiVersion": "mirror.example.com/v1",
        "kind": "SecretMirror",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
    }


def secret(namespace: str, name: str = "copy") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
    }


def test_track_owner_stamps_a_label_and_an_annotation() -> None:
    """The child gets the owner's UID as a label and its kind and key as an annotation."""
    child = secret("team-a")
    assert sp.track_owner(child, mirror()) is True
    assert child["metadata"]["labels"] == {OWNER_UID_LABEL: "u-1"}
    assert child["metadata"]["annotations"] == {
        OWNER_ANNOTATION: "SecretMirror.mirror.example.com ops/db"
    }
    assert sp.track_owner(child, mirror()) is False  # already stamped
    assert sp.tracked_owner(child, MIRROR) == sp.ObjectKey("ops", "db")
    other = sp.GroupVersionKind("other.example.com", "v1", "SecretMirror")
    assert sp.tracked_owner(child, other) is None
    assert owner_selector(mirror()) == {OWNER_UID_LABEL: "u-1"}


def test_a_child_another_owner_tracks_is_not_taken_over() -> None:
    """A second owner is refused with AlreadyTracked naming the first; the child is unchanged.

    Issue 10's acceptance run: two SecretMirrors copying one Secret into one namespace
    re-stamped the copy's label in turn, each write reconciling the other, about ten
    writes a second with no error anywhere. A recreated owner (new UID) is refused too.
    """
    child = secret("team-a")
    sp.track_owner(child, mirror(name="db", uid="u-1"))
    before = {k: dict(v) for k, v in child["metadata"].items() if isinstance(v, dict)}
    for second in (mirror(name="other", uid="u-2"), mirror(name="db", uid="u-3")):
        with pytest.raises(sp.AlreadyTracked) as refused:
            sp.track_owner(child, second)
        assert refused.value.owner_uid == "u-1"
        assert refused.value.owner == "SecretMirror.mirror.example.com ops/db"
        assert "Secret team-a/copy is tracked by another owner" in str(refused.value)
        assert isinstance(refused.value, sp.TrackingError)
    assert {k: v for k, v in child["metadata"].items() if isinstance(v, dict)} == before


@sp.resource(group="mirror.example.com", version="v1")
class SecretMirror(sp.Resource):
    """A typed owner kind for the tests below."""


def test_tracked_owner_takes_a_typed_class_as_the_docs_show() -> None:
    """`sp.tracked_owner(child, SecretMirror)`: the owner kind may be a typed class too."""
    child = secret("team-a")
    sp.track_owner(child, SecretMirror.from_object(mirror()))
    assert sp.tracked_owner(child, SecretMirror) == sp.ObjectKey("ops", "db")
    assert sp.tracked_owner(SecretMirror.from_object(mirror()), SecretMirror) is None


def test_a_cluster_scoped_and_a_core_owner() -> None:
    """A cluster-scoped owner is named without a namespace; a core kind without a group."""
    child = secret("team-a")
    sp.track_owner(child, {"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": "team-a", "uid": "u-ns"}})  # fmt: skip
    assert child["metadata"]["annotations"][OWNER_ANNOTATION] == "Namespace team-a"
    assert sp.tracked_owner(child, kinds.Namespace) == sp.ObjectKey("", "team-a")


def test_an_owner_never_stored_cannot_be_tracked() -> None:
    """Without a UID there is nothing to select children by: TrackingError says so."""
    with pytest.raises(sp.TrackingError, match=r"no metadata\.uid"):
        sp.track_owner(secret("x"), {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "n"}})  # fmt: skip


def test_annotation_and_label_mappers() -> None:
    """The ready-made mappers read an owner key from an annotation or labels."""
    by_annotation = sp.enqueue_from_annotation("example.com/owner")
    obj = secret("team-a")
    obj["metadata"]["annotations"] = {"example.com/owner": "ops/db"}
    assert by_annotation(obj) == [sp.ObjectKey("ops", "db")]
    assert by_annotation(secret("team-a")) == []
    by_label = sp.enqueue_from_label("example.com/owner", namespace_label="example.com/owner-ns")
    obj["metadata"]["labels"] = {"example.com/owner": "db", "example.com/owner-ns": "ops"}
    assert by_label(obj) == [sp.ObjectKey("ops", "db")]
    cluster = sp.enqueue_from_label("example.com/owner")
    assert cluster(obj) == [sp.ObjectKey("", "db")]
    assert sp.enqueue_tracked_owner(MIRROR)(obj) == []


async def test_delete_tracked_children_in_every_namespace() -> None:
    """The finalizer recipe deletes the owner's children wherever they are, and only those."""
    fake = FakeClient()
    owner = mirror()
    mine = [secret(ns) for ns in ("team-a", "team-b", "team-c")]
    for child in mine:
        sp.track_owner(child, owner)
    stranger = secret("team-a", "other")
    sp.track_owner(stranger, mirror(uid="u-2"))
    fake.add(*mine, stranger, secret("team-b", "untracked"))
    assert await sp.delete_tracked_children(fake, owner, kinds.Secret) == 3
    left = sorted((s["metadata"]["namespace"], s["metadata"]["name"])
                  for s in fake.contents(kinds.Secret))  # fmt: skip
    assert left == [("team-a", "other"), ("team-b", "untracked")]
    assert await sp.delete_tracked_children(fake, owner, kinds.Secret) == 0  # idempotent


async def test_a_mapper_can_read_the_cache() -> None:
    """A two-parameter mapper receives the controller's reader and can list from the cache.

    A Namespace event maps to every ConfigMap named "watched" in the cache; each gets
    reconciled.
    """
    fake = FakeClient()
    fake.add(*(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched", "namespace": ns}}
        for ns in ("a", "b")
    ))  # fmt: skip
    seen: set[sp.ObjectKey] = set()

    async def namespace_to_configs(namespace: Any, reader: IndexReader) -> list[sp.ObjectKey]:
        listed = await reader.list(kinds.ConfigMap)
        return [sp.ObjectKey(c["metadata"]["namespace"], c["metadata"]["name"]) for c in listed]

    async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
        seen.add(request)

    def setup(manager: sp.Manager) -> None:
        manager.controller("configs").watches(kinds.ConfigMap, lambda obj: []).watches(
            kinds.Namespace, namespace_to_configs
        ).build(reconcile)

    async with run_operator(setup, client=fake):
        await fake.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "new"}})

        def both() -> None:
            assert seen == {sp.ObjectKey("a", "watched"), sp.ObjectKey("b", "watched")}

        await eventually_passes(both, timeout=10)
