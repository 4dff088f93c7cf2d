"""Declarative children with server-side apply: no write when unchanged, drift restored."""

from __future__ import annotations

from safewrites_support import RequestLog, gizmo

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.owners import is_controlled_by
from setpoint.client import Client
from setpoint.client.patch import JsonPatch, MergePatch, json_pointer
from setpoint.client.safe import OperationResult, apply_child

MANAGER = "gizmo-controller"


def deployment(namespace: str, replicas: int = 2) -> dict:
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
