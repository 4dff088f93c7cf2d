"""The generated sharding admission policy on the real API server (issue 27, finding 5).

`setpoint generate sharding-policy` (setpoint.manager.shardpolicy) writes a
ValidatingAdmissionPolicy and binding. Installed here for a ring of its own (so no other
test's Gizmos are affected), with the operator's identity a real ServiceAccount (a token
from the TokenRequest API, RBAC to patch Gizmos) and the other writer a cluster admin
(a client certificate in ``system:masters``, which RBAC never stops but admission does).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.meta import uid_of
from setpoint.client import Client, Forbidden, MergePatch, load_kubeconfig
from setpoint.manager.sharding import (
    Handover,
    drain_label,
    handover_annotation,
    shard_label,
)
from setpoint.manager.shardpolicy import (
    ShardedResource,
    service_account_username,
    sharding_policy,
)
from setpoint.testing import ControlPlane
from setpoint.testing.waits import eventually
from tests._support.kinds import GIZMO

POLICY = GroupVersionKind("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy")
BINDING = GroupVersionKind("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding")


async def operator_client(k8s: Client, control_plane: ControlPlane, namespace: str) -> Client:
    """A client authenticated as ServiceAccount ``operator``, allowed to read and patch Gizmos."""
    await k8s.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "operator", "namespace": namespace},
        }
    )
    await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "gizmos", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["test.setpoint.dev"],
                    "resources": ["gizmos", "gizmos/status"],
                    "verbs": ["get", "list", "watch", "patch", "update"],
                }
            ],
        }
    )
    await k8s.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "operator-gizmos", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gizmos"},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}],
        }
    )
    token = await k8s.create_subresource(
        kinds.ServiceAccount,
        "operator",
        "token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
        namespace=namespace,
    )
    path = control_plane.kubeconfig_for_token(token["status"]["token"], name=f"{namespace}-op")
    return Client(load_kubeconfig(str(path)))


@pytest.fixture
async def ring(k8s: Client, namespace: str) -> AsyncIterator[str]:
    """A ring name of this test's own; its policy is installed and removed around the test."""
    name = f"vap{uuid.uuid4().hex[:8]}"
    policy, binding = sharding_policy(
        name,
        [ShardedResource("test.setpoint.dev", "gizmos")],
        operator=(service_account_username(namespace, "operator"),),
    )
    # Only this test's namespace, so a mistake here cannot block other tests' writes.
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    await k8s.create(policy)
    await k8s.create(binding)
    try:
        yield name
    finally:
        await k8s.delete(BINDING, binding["metadata"]["name"])
        await k8s.delete(POLICY, policy["metadata"]["name"])


def relabel(ring: str, shard: str | None) -> MergePatch:
    return MergePatch({"metadata": {"labels": {shard_label(ring): shard}}})


@pytest.mark.usefixtures("gizmo_crd")
async def test_only_the_operator_may_edit_the_shard_labels_and_the_record(
    k8s: Client, namespace: str, control_plane: ControlPlane, ring: str, tmp_path: Path
) -> None:
    """Only the operator's ServiceAccount may change a ring's shard labels and records.

    Another user (a cluster admin, even) is refused any change of the shard label, the drain
    label or the hand-over record, by patch or by a whole-object update, with a message
    naming the key and the operator; its other changes (labels, spec, status) pass; the
    operator's ServiceAccount changes all three.
    """
    created = await k8s.create(
        {
            "apiVersion": GIZMO.api_version,
            "kind": "Gizmo",
            "metadata": {
                "name": "g1",
                "namespace": namespace,
                "labels": {shard_label(ring): "alpha"},  # creating with the keys is allowed
            },
            "spec": {"size": 1},
        }
    )
    uid = uid_of(created)
    record = Handover("alpha", uid, via="new").render()
    operator = await operator_client(k8s, control_plane, namespace)
    admin_path = control_plane.kubeconfig_for_user(
        "mallory", ("system:masters",), path=tmp_path / "mallory.kubeconfig"
    )
    other = Client(load_kubeconfig(str(admin_path)))
    try:
        await operator.patch(
            GIZMO,
            "g1",
            MergePatch({"metadata": {"annotations": {handover_annotation(ring): record}}}),
            namespace=namespace,
        )

        async def refused() -> bool:
            # The API server picks the new policy up within a second or so.
            try:
                await other.patch(GIZMO, "g1", relabel(ring, "beta"), namespace=namespace)
            except Forbidden:
                return True
            await operator.patch(GIZMO, "g1", relabel(ring, "alpha"), namespace=namespace)
            return False

        await eventually(refused, timeout=30, description="the policy refuses a relabel")

        edits: list[tuple[str, dict[str, Any]]] = [
            ("move the shard label", {"labels": {shard_label(ring): "beta"}}),
            ("remove the shard label", {"labels": {shard_label(ring): None}}),
            ("add the drain label", {"labels": {drain_label(ring): "true"}}),
            ("edit the record", {"annotations": {handover_annotation(ring): record + "x"}}),
            ("remove the record", {"annotations": {handover_annotation(ring): None}}),
        ]
        for client, who in ((other, "mallory"), (k8s, "the plane's admin")):
            for what, metadata in edits:
                with pytest.raises(Forbidden) as caught:
                    await client.patch(
                        GIZMO, "g1", MergePatch({"metadata": metadata}), namespace=namespace
                    )
                message = str(caught.value)
                assert service_account_username(namespace, "operator") in message, (who, what)
                key = next(iter(next(iter(metadata.values()))))
                assert key in message, (who, what, message)

        # A whole-object update that drops the labels is refused as well.
        current = await k8s.get(GIZMO, "g1", namespace=namespace)
        current["metadata"]["labels"] = {}
        with pytest.raises(Forbidden):
            await other.update(current)

        # Everything else passes for other users.
        await other.patch(
            GIZMO,
            "g1",
            MergePatch({"metadata": {"labels": {"team": "blue"}}, "spec": {"size": 2}}),
            namespace=namespace,
        )
        await other.patch(
            GIZMO,
            "g1",
            MergePatch({"status": {"phase": "seen"}}),
            namespace=namespace,
            subresource="status",
        )

        # The operator's own identity changes all three keys.
        moved = Handover("beta", uid, previous="alpha", via="drain")
        await operator.patch(
            GIZMO,
            "g1",
            MergePatch(
                {
                    "metadata": {
                        "labels": {shard_label(ring): "beta", drain_label(ring): "true"},
                        "annotations": {handover_annotation(ring): moved.render()},
                    }
                }
            ),
            namespace=namespace,
        )
        final = await k8s.get(GIZMO, "g1", namespace=namespace)
        assert final["metadata"]["labels"][shard_label(ring)] == "beta"
        assert final["metadata"]["labels"]["team"] == "blue"
        assert final["metadata"]["annotations"][handover_annotation(ring)] == moved.render()
    finally:
        await other.close()
        await operator.close()
