"""Declarative children with server-side apply: no write when unchanged, drift restored."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.keys import ObjectKey
from setpoint.api.owners import AlreadyOwned, NotAdopted, is_controlled_by
from setpoint.client import Client
from setpoint.client.patch import JsonPatch, MergePatch, json_pointer
from setpoint.client.safe import Adoption, OperationResult, apply_child
from setpoint.testing import eventually
from tests._support.gizmos import gizmo
from tests._support.request_log import RequestLog

MANAGER = "gizmo-controller"


def deployment(namespace: str, replicas: int = 2) -> dict[str, Any]:
    """A desired Deployment: only the fields the controller cares about."""
    labels = {"app": "gizmo-web"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gizmo-web", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "registry.example/web:1.0",
                            "args": ["--port", "8080"],
                            "ports": [{"containerPort": 8080}],
                            "env": [{"name": "MODE", "value": "prod"}],
                        }
                    ]
                },
            },
        },
    }


async def test_declarative_child_writes_only_on_real_drift(
    k8s: Client,
    namespace: str,
    gizmo_crd: GroupVersionKind,
    counted: tuple[Client, RequestLog],
) -> None:
    """A child applied under the controller's field manager is rewritten only on real drift.

    The Deployment is created by apply, owned by a Gizmo. Re-applying the
    same desired state sends no write, although the server defaulted many
    fields and the Deployment controller keeps writing status. Another
    manager's label is left alone and causes no write. A change to an owned
    field (replicas, by another writer) is restored by the next apply, and
    after that the apply is quiet again.
    """
    client, log = counted
    owner = await client.create(gizmo("owner", namespace, size=1))

    result, child = await apply_child(
        client, deployment(namespace), field_manager=MANAGER, owner=owner
    )
    assert result is OperationResult.CREATED
    assert is_controlled_by(child, owner)
    assert child["spec"]["strategy"]["type"] == "RollingUpdate"  # a server default

    for _ in range(3):
        log.clear()
        result, _ = await apply_child(
            client, deployment(namespace), field_manager=MANAGER, owner=owner
        )
        assert result is OperationResult.UNCHANGED
        assert log.writes() == []

    # Another manager adds a label: not ours, not compared, not removed.
    await k8s.patch(
        kinds.Deployment,
        "gizmo-web",
        MergePatch({"metadata": {"labels": {"team": "blue"}}}),
        namespace=namespace,
        field_manager="labeler",
    )
    log.clear()
    result, live = await apply_child(
        client, deployment(namespace), field_manager=MANAGER, owner=owner
    )
    assert result is OperationResult.UNCHANGED
    assert log.writes() == []
    assert live["metadata"]["labels"]["team"] == "blue"

    # Drift in owned fields: replicas and the container's env value.
    await k8s.patch(
        kinds.Deployment,
        "gizmo-web",
        JsonPatch(
            [
                {"op": "replace", "path": json_pointer("spec", "replicas"), "value": 5},
                {
                    "op": "replace",
                    "path": "/spec/template/spec/containers/0/env/0/value",
                    "value": "debug",
                },
            ]
        ),
        namespace=namespace,
        field_manager="drifter",
    )
    log.clear()
    result, restored = await apply_child(
        client, deployment(namespace), field_manager=MANAGER, owner=owner
    )
    assert result is OperationResult.UPDATED
    assert [m for m, _ in log.writes()] == ["PATCH"]
    assert restored["spec"]["replicas"] == 2
    assert restored["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "prod"
    assert restored["metadata"]["labels"]["team"] == "blue"

    log.clear()
    result, _ = await apply_child(client, deployment(namespace), field_manager=MANAGER, owner=owner)
    assert result is OperationResult.UNCHANGED
    assert log.writes() == []

    # A changed desired state is applied; fields dropped from it are given up.
    smaller = deployment(namespace, replicas=1)
    del smaller["spec"]["template"]["spec"]["containers"][0]["args"]
    result, changed = await apply_child(client, smaller, field_manager=MANAGER, owner=owner)
    assert result is OperationResult.UPDATED
    assert changed["spec"]["replicas"] == 1
    assert "args" not in changed["spec"]["template"]["spec"]["containers"][0]
    log.clear()
    result, _ = await apply_child(client, smaller, field_manager=MANAGER, owner=owner)
    assert result is OperationResult.UNCHANGED
    assert log.writes() == []


async def test_apply_child_through_the_cache_sends_no_request_when_nothing_changed(
    k8s: Client, namespace: str, counted: tuple[Client, RequestLog]
) -> None:
    """With a controller's tracking client, a new child costs one apply, an unchanged one none.

    The cache knows the child does not exist, so the first apply goes out without a GET and
    the server's 201 says CREATED. apply_child records what it applied in an annotation;
    when the cache shows that marker and every applied value, it answers "unchanged"
    without a GET. Drift in an owned field is still seen (in the cache) and restored, and a
    new desired state that drops a field goes to the server, which removes the field.
    """
    from setpoint.cache import Cache, CacheOptions
    from setpoint.cache.consistency import TrackingClient

    client, log = counted
    # The cache lists and watches through the uncounted client; the log shows only what
    # apply_child sends (through the tracking client over the counted one).
    cache = Cache(k8s, options=CacheOptions(namespaces=(namespace,)))
    await cache.start()
    try:
        cache.informer(kinds.ConfigMap)
        await cache.wait_for_sync(30)
        tracking = TrackingClient(client, cache)
        desired = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "child", "namespace": namespace},
            "data": {"a": "1", "b": "2"},
        }
        await client.resource_info(kinds.ConfigMap)  # discovery, outside what is counted
        log.clear()
        created = await apply_child(tracking, desired, field_manager=MANAGER)
        assert created.outcome is OperationResult.CREATED
        assert log.requests == [("PATCH", "201")], log.requests

        async def cached_with_marker() -> bool:
            got = cache.peek(kinds.ConfigMap, ObjectKey(namespace, "child"))
            annotations = (got or {}).get("metadata", {}).get("annotations", {})
            return any(k.startswith("setpoint.dev/applied-") for k in annotations)

        await eventually(cached_with_marker, timeout=30, description="child in the cache")
        log.clear()
        again = await apply_child(tracking, desired, field_manager=MANAGER)
        assert again.outcome is OperationResult.UNCHANGED
        assert log.requests == [], log.requests

        # Drift in an owned field: seen in the cache, restored through the server.
        await k8s.patch(
            kinds.ConfigMap, "child", MergePatch({"data": {"a": "drifted"}}), namespace=namespace
        )

        async def drift_cached() -> bool:
            got = cache.peek(kinds.ConfigMap, ObjectKey(namespace, "child"))
            return bool((got or {}).get("data", {}).get("a") == "drifted")

        await eventually(drift_cached, timeout=30, description="drift seen by the cache")
        restored = await apply_child(tracking, desired, field_manager=MANAGER)
        assert restored.outcome is OperationResult.UPDATED
        assert (await k8s.get(kinds.ConfigMap, "child", namespace=namespace))["data"]["a"] == "1"

        # Dropping a field must reach the server (the cache cannot tell it is owned).
        smaller = {**desired, "data": {"a": "1"}}
        dropped = await apply_child(tracking, smaller, field_manager=MANAGER)
        assert dropped.outcome is OperationResult.UPDATED
        final = await k8s.get(kinds.ConfigMap, "child", namespace=namespace)
        assert final["data"] == {"a": "1"}
    finally:
        await cache.stop(5)


async def test_apply_child_without_a_get_refuses_a_child_another_owner_controls(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind, counted: tuple[Client, RequestLog]
) -> None:
    """A child the cache cannot see (outside its label selector) is applied without a GET.

    The server refuses a second controller reference (422); apply_child reads the child
    and raises AlreadyOwned naming the owner in control. The child is left as it was.
    """
    from setpoint.cache import Cache, CacheOptions, KindOptions
    from setpoint.cache.consistency import TrackingClient

    client, log = counted
    rival = await client.create(gizmo("rival", namespace, size=1))
    owner = await client.create(gizmo("owner", namespace, size=1))
    await apply_child(
        client,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "taken", "namespace": namespace},
        },
        field_manager="rival-controller",
        owner=rival,
    )
    cache = Cache(
        k8s,
        options=CacheOptions(
            namespaces=(namespace,),
            by_kind={kinds.ConfigMap: KindOptions(labels="app=gizmo")},
        ),
    )
    await cache.start()
    try:
        cache.informer(kinds.ConfigMap)
        await cache.wait_for_sync(30)
        desired = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "taken", "namespace": namespace, "labels": {"app": "gizmo"}},
            "data": {"a": "1"},
        }
        log.clear()
        with pytest.raises(AlreadyOwned, match="rival"):
            await apply_child(
                TrackingClient(client, cache), desired, field_manager=MANAGER, owner=owner
            )
        assert log.requests == [("PATCH", "422"), ("GET", "200")], log.requests
        live = await k8s.get(kinds.ConfigMap, "taken", namespace=namespace)
        assert is_controlled_by(live, rival)
        assert "data" not in live
    finally:
        await cache.stop(5)


def config_map(namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gizmo-settings", "namespace": namespace},
        "data": data,
    }


async def test_apply_child_does_not_adopt_what_it_did_not_create(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """A live child without a controller is refused unless adopt=Adoption.ORPHANS (item 8).

    Someone else's ConfigMap of the child's name keeps its data and gets no owner
    reference (so it is not deleted with the Gizmo); asking for adoption takes it over.
    """
    owner = await k8s.create(gizmo("owner", namespace, size=1))
    theirs = await k8s.create(config_map(namespace, mode="theirs"))
    with pytest.raises(NotAdopted, match="exists and has no controller"):
        await apply_child(
            k8s, config_map(namespace, mode="ours"), field_manager=MANAGER, owner=owner
        )
    after = await k8s.get(kinds.ConfigMap, "gizmo-settings", namespace=namespace)
    assert after["data"] == {"mode": "theirs"}
    assert "ownerReferences" not in after["metadata"]
    assert after["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]

    result, adopted = await apply_child(
        k8s,
        config_map(namespace, mode="ours"),
        field_manager=MANAGER,
        owner=owner,
        adopt=Adoption.ORPHANS,
    )
    assert result is OperationResult.UPDATED
    assert is_controlled_by(adopted, owner)
    assert adopted["data"] == {"mode": "ours"}


class CreatesFirst:
    """A client whose first apply is preceded by another writer creating the same object."""

    def __init__(self, inner: Client, rival: dict[str, Any]) -> None:
        self._inner = inner
        self._rival: dict[str, Any] | None = rival

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def apply(self, obj: Any, **kwargs: Any) -> Any:
        if self._rival is not None:
            rival, self._rival = self._rival, None
            await self._inner.create(rival, field_manager="someone-else")
        return await self._inner.apply(obj, **kwargs)


async def test_apply_child_that_loses_a_create_race_lets_go_again(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """Another writer creates the child between apply_child's GET and its apply: NotAdopted.

    The apply lands on their object; apply_child sees their field manager in the answer,
    releases the fields it had applied (its owner reference with them) and refuses, so the
    object is not deleted with the Gizmo.
    """
    owner = await k8s.create(gizmo("owner", namespace, size=1))
    racing = CreatesFirst(k8s, config_map(namespace, other="kept"))
    with pytest.raises(NotAdopted, match="created by another writer \\(someone-else\\)"):
        await apply_child(
            racing, config_map(namespace, mode="ours"), field_manager=MANAGER, owner=owner
        )
    after = await k8s.get(kinds.ConfigMap, "gizmo-settings", namespace=namespace)
    assert "ownerReferences" not in after["metadata"]
    assert after["data"] == {"other": "kept"}
    managers = {entry["manager"] for entry in after["metadata"].get("managedFields", [])}
    assert MANAGER not in managers


async def test_apply_child_without_a_get_does_not_adopt_an_unseen_orphan(
    k8s: Client, namespace: str, gizmo_crd: GroupVersionKind
) -> None:
    """The cache cannot see a child without a controller: the 200 OK gives it away.

    The apply (sent without a GET) lands on someone else's ConfigMap; the server answers
    200, not 201, and the answer carries their field manager, so apply_child releases
    what it applied and raises NotAdopted.
    """
    from setpoint.cache import Cache, CacheOptions, KindOptions
    from setpoint.cache.consistency import TrackingClient

    owner = await k8s.create(gizmo("owner", namespace, size=1))
    await k8s.create(config_map(namespace, other="kept"), field_manager="someone-else")
    cache = Cache(
        k8s,
        options=CacheOptions(
            namespaces=(namespace,),
            by_kind={kinds.ConfigMap: KindOptions(labels="app=gizmo")},
        ),
    )
    await cache.start()
    try:
        cache.informer(kinds.ConfigMap)
        await cache.wait_for_sync(30)
        desired = config_map(namespace, mode="ours")
        desired["metadata"]["labels"] = {"app": "gizmo"}
        with pytest.raises(NotAdopted, match="someone-else"):
            await apply_child(
                TrackingClient(k8s, cache), desired, field_manager=MANAGER, owner=owner
            )
    finally:
        await cache.stop(5)
    after = await k8s.get(kinds.ConfigMap, "gizmo-settings", namespace=namespace)
    assert "ownerReferences" not in after["metadata"]
    assert after["data"] == {"other": "kept"}
    assert "app" not in (after["metadata"].get("labels") or {})
