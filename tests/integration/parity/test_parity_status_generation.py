"""Parity: metadata.generation and the status subresource."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import pytest

from setpoint.api import kinds
from setpoint.client.errors import NotFound
from setpoint.client.patch import MergePatch

if TYPE_CHECKING:
    from tests._support.parity import Api


async def test_generation_bumps_on_spec_only_with_status_subresource(crds: Api) -> None:
    """With a status subresource, only spec changes bump generation.

    Metadata changes (labels) and status changes (through replace_status) keep
    the generation; a spec change increments it by one.
    """
    c, ns = crds.client, crds.namespace
    made = await c.create(crds.obj(crds.gizmo, "gen", spec={"a": 1}))
    assert made["metadata"]["generation"] == 1
    made["metadata"]["labels"] = {"x": "y"}
    labelled = await c.update(made)
    assert labelled["metadata"]["generation"] == 1
    labelled["status"] = {"phase": "Ready"}
    with_status = await c.replace_status(labelled)
    assert with_status["metadata"]["generation"] == 1
    with_status["spec"] = {"a": 2}
    respecced = await c.update(with_status)
    assert respecced["metadata"]["generation"] == 2
    annotated = await c.patch(
        crds.gizmo, "gen", MergePatch({"metadata": {"annotations": {"n": "1"}}}), namespace=ns
    )
    assert annotated["metadata"]["generation"] == 2


async def test_generation_without_status_subresource(crds: Api) -> None:
    """Without a status subresource, a status change is a spec-like change and bumps generation.

    Metadata changes still do not bump it, and /status does not exist (404).
    """
    c, ns = crds.client, crds.namespace
    made = await c.create(crds.obj(crds.doodad, "gen", spec={"a": 1}, status={"s": 1}))
    assert made["status"] == {"s": 1}  # no subresource: create keeps status
    assert made["metadata"]["generation"] == 1
    made["status"] = {"s": 2}
    changed = await c.update(made)
    assert changed["status"] == {"s": 2}
    assert changed["metadata"]["generation"] == 2
    changed["metadata"]["annotations"] = {"a": "b"}
    assert (await c.update(changed))["metadata"]["generation"] == 2
    with pytest.raises(NotFound):
        await c.replace_status(changed)
    with pytest.raises(NotFound):
        await c.patch(
            crds.doodad, "gen", MergePatch({"status": {"s": 3}}), namespace=ns, subresource="status"
        )


async def test_deployment_generation_counts_spec_and_annotations(api: Api) -> None:
    """A Deployment bumps generation on spec and annotation changes, not on labels."""
    c, ns = api.client, api.namespace
    deployment = api.obj(
        kinds.Deployment,
        "web",
        spec={
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "example"}]},
            },
        },
    )
    made = await c.create(deployment)
    assert made["metadata"]["generation"] == 1
    labels = await c.patch(
        kinds.Deployment, "web", MergePatch({"metadata": {"labels": {"q": "r"}}}), namespace=ns
    )
    assert labels["metadata"]["generation"] == 1
    notes = await c.patch(
        kinds.Deployment, "web", MergePatch({"metadata": {"annotations": {"q": "r"}}}), namespace=ns
    )
    assert notes["metadata"]["generation"] == 2
    scaled = await c.patch(
        kinds.Deployment, "web", MergePatch({"spec": {"replicas": 3}}), namespace=ns
    )
    assert scaled["metadata"]["generation"] == 3
    scale = await c.get_scale(kinds.Deployment, "web", namespace=ns)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    await c.set_scale(kinds.Deployment, "web", 2, namespace=ns)
    assert (await c.get(kinds.Deployment, "web", namespace=ns))["spec"]["replicas"] == 2


async def test_kinds_without_generation_keep_what_create_sent(api: Api) -> None:
    """A kind that does not track generation stores the client's value and never changes it."""
    c = api.client
    made = await c.create(dict(api.cm("gen", generation=7), data={"a": "1"}))
    assert made["metadata"]["generation"] == 7
    made["data"] = {"a": "2"}
    made["metadata"]["generation"] = 50
    assert (await c.update(made))["metadata"]["generation"] == 7


async def test_update_ignores_status(crds: Api) -> None:
    """Through the main resource, status cannot change: create drops it, update keeps the old.

    An update that changes only status is a no-op (same resourceVersion).
    """
    c = crds.client
    made = await c.create(crds.obj(crds.gizmo, "iso", spec={"a": 1}, status={"s": "sent"}))
    assert "status" not in made
    made["status"] = {"s": "via-update"}
    after = await c.update(made)
    assert "status" not in after
    assert after["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    with_status = copy.deepcopy(after)
    with_status["status"] = {"s": "real"}
    stored = await c.replace_status(with_status)
    stored["status"] = {"s": "overwritten?"}
    stored["spec"] = {"a": 2}
    result = await c.update(stored)
    assert result["status"] == {"s": "real"}
    assert result["spec"] == {"a": 2}


async def test_replace_status_ignores_everything_else(crds: Api) -> None:
    """Through the status subresource only status changes: spec, labels and finalizers stay.

    A status merge patch likewise ignores the spec part of the patch.
    """
    c, ns = crds.client, crds.namespace
    made = await c.create(crds.obj(crds.gizmo, "iso", spec={"a": 1}))
    made["status"] = {"s": 1}
    made["spec"] = {"a": 99}
    made["metadata"]["labels"] = {"sneaky": "yes"}
    made["metadata"]["finalizers"] = ["parity.setpoint.dev/sneaky"]
    result = await c.replace_status(made)
    assert result["status"] == {"s": 1}
    assert result["spec"] == {"a": 1}
    assert "labels" not in result["metadata"]
    assert "finalizers" not in result["metadata"]
    assert result["metadata"]["generation"] == 1
    patched = await c.patch(
        crds.gizmo,
        "iso",
        MergePatch({"status": {"s": 2}, "spec": {"a": 3}}),
        namespace=ns,
        subresource="status",
    )
    assert patched["status"] == {"s": 2}
    assert patched["spec"] == {"a": 1}
    ignored = await c.patch(crds.gizmo, "iso", MergePatch({"status": {"s": 3}}), namespace=ns)
    assert ignored["status"] == {"s": 2}
    got = await c.get_subresource(crds.gizmo, "iso", "status", namespace=ns)
    assert got["status"] == {"s": 2}
