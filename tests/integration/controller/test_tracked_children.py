"""Children in other namespaces, on the real server: the SecretMirror of issue 10.

A SecretMirror copies a Secret into every namespace its typed LabelSelector selects. The
copies cannot carry an owner reference (another namespace), so they are tracked with
``sp.track_owner``, mapped back with a mapper that reads the cache, kept exact with
``create_or_patch``, and removed by the finalizer recipe ``sp.delete_tracked_children``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import setpoint as sp
from setpoint import kinds
from setpoint.api.tracking import OWNER_UID_LABEL
from setpoint.client import Client, Invalid, NotFound
from setpoint.client.protocols import IndexReader
from setpoint.testing import eventually_passes, install_crds, run_operator

GROUP = "mirror.test.setpoint.dev"
FINALIZER = f"{GROUP}/copies"
COPY = "mirrored"


class SecretMirrorSpec(sp.Model):
    """What to copy where."""

    source: str
    """The Secret to copy, in the mirror's namespace."""
    namespace_selector: sp.LabelSelector = sp.field(default_factory=sp.LabelSelector)
    """The namespaces that get a copy."""


@sp.resource(group=GROUP, version="v1")
class SecretMirror(sp.Resource):
    """Copies a Secret into the namespaces a selector picks."""

    spec: SecretMirrorSpec


async def reconcile(ctx: sp.Context, request: sp.Request) -> None:
    mirror = await ctx.reader.get(SecretMirror, request.name, namespace=request.namespace)
    source = await ctx.reader.get(kinds.Secret, mirror.spec.source, namespace=request.namespace)
    selected = await ctx.reader.list(
        kinds.Namespace, labels=mirror.spec.namespace_selector.to_selector()
    )
    wanted = {n["metadata"]["name"] for n in selected} - {request.namespace}

    def replica(obj: dict[str, Any]) -> None:
        obj["type"] = source.get("type", "Opaque")
        obj["data"] = dict(source.get("data") or {})  # the whole map: an exact replica
        sp.track_owner(obj, mirror)

    for namespace in sorted(wanted):
        target = {"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": COPY, "namespace": namespace}}  # fmt: skip
        await sp.create_or_patch(ctx.client, target, replica)
    uid = mirror.metadata.uid
    assert uid is not None
    for copy in await ctx.reader.list(kinds.Secret, labels={OWNER_UID_LABEL: uid}):
        if copy["metadata"]["namespace"] not in wanted:
            with contextlib.suppress(NotFound):
                await ctx.client.delete(kinds.Secret, COPY, namespace=copy["metadata"]["namespace"])


async def secret_to_mirrors(secret: dict[str, Any], reader: IndexReader) -> list[sp.ObjectKey]:
    """A copy maps to its mirror (tracked); a source maps to the mirrors that copy it."""
    keys = sp.enqueue_tracked_owner(SecretMirror)(secret)
    namespace, name = secret["metadata"]["namespace"], secret["metadata"]["name"]
    for mirror in await reader.list(SecretMirror, namespace=namespace):
        if mirror.spec.source == name:
            keys.append(sp.ObjectKey(namespace, str(mirror.metadata.name)))
    return keys


async def remove_copies(ctx: sp.Context, mirror: SecretMirror) -> None:
    await sp.delete_tracked_children(ctx.client, mirror, kinds.Secret)


def setup(manager: sp.Manager) -> None:
    (
        manager.controller("secret-mirror")
        .for_(SecretMirror)
        .watches(kinds.Secret, secret_to_mirrors)
        .watches(kinds.Namespace, sp.enqueue_all(SecretMirror))
        .finalizer(FINALIZER, remove_copies)
        .build(reconcile)
    )


@pytest.fixture
async def targets(k8s: Client) -> AsyncIterator[tuple[str, list[str]]]:
    """Four namespaces; the first three carry the label the mirror selects."""
    team = f"mirror-{uuid.uuid4().hex[:6]}"
    names = [f"{team}-{i}" for i in range(4)]
    for i, name in enumerate(names):
        labels = {"team": team} if i < 3 else {}
        await k8s.create({"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": name, "labels": labels}})  # fmt: skip
    try:
        yield team, names
    finally:
        for name in names:
            with contextlib.suppress(NotFound):
                await k8s.delete(kinds.Namespace, name)


async def test_a_mirror_keeps_exact_copies_in_selected_namespaces(
    k8s: Client, namespace: str, kubeconfig_path: Path, targets: tuple[str, list[str]]
) -> None:
    """Copies follow the selector and the source, drift is undone, the finalizer removes them.

    The copies in other namespaces carry the tracking label and annotation; a deleted or
    edited copy is restored through the tracking mapper; a namespace labelled later gets
    a copy through the namespace mapper, which reads the cache; a source change rewrites
    every copy with no GET (create_or_patch reads through the cache); deleting the mirror
    runs the finalizer recipe, which deletes every copy. An invalid selector is refused by
    the server (the schema's CEL rules); an Exists requirement without values is accepted.
    """
    team, names = targets
    await install_crds(k8s, SecretMirror)
    await k8s.create({"apiVersion": "v1", "kind": "Secret",
                      "metadata": {"name": "db", "namespace": namespace},
                      "data": {"password": "czNjcjN0"}})  # fmt: skip

    async def copies(expected: dict[str, str], where: list[str]) -> None:
        listed = await k8s.list(kinds.Secret, labels={"setpoint.dev/owner-uid": uid})
        found = {s["metadata"]["namespace"]: s for s in listed}
        assert sorted(found) == sorted(where)
        for copy in found.values():
            assert copy["data"] == expected
            owner = copy["metadata"]["annotations"]["setpoint.dev/owner"]
            assert owner == f"SecretMirror.{GROUP} {namespace}/copy-db"

    # The mirror writes into other namespaces: its operator watches them all.
    async with run_operator(setup, kubeconfig=kubeconfig_path, namespaces=()) as op:
        created: dict[str, Any] = await k8s.create(
            {"apiVersion": f"{GROUP}/v1", "kind": "SecretMirror",
             "metadata": {"name": "copy-db", "namespace": namespace},
             "spec": {"source": "db", "namespaceSelector": {"matchLabels": {"team": team}}}}
        )  # fmt: skip
        uid = created["metadata"]["uid"]
        await eventually_passes(lambda: copies({"password": "czNjcjN0"}, names[:3]))

        # Drift: an extra key is removed (an exact replica), a deleted copy comes back.
        await k8s.patch(kinds.Secret, COPY, sp.MergePatch({"data": {"extra": "eA=="}}),
                        namespace=names[0])  # fmt: skip
        await k8s.delete(kinds.Secret, COPY, namespace=names[1])
        await eventually_passes(lambda: copies({"password": "czNjcjN0"}, names[:3]))

        # A namespace that starts matching gets a copy (the namespace mapper).
        await k8s.patch(kinds.Namespace, names[3], sp.MergePatch(
            {"metadata": {"labels": {"team": team}}}))  # fmt: skip
        await eventually_passes(lambda: copies({"password": "czNjcjN0"}, names))
        await op.wait_idle(timeout=30, settle=1.0)

        # A source change: every copy is rewritten, and none is fetched from the server.
        gets_before = _gets(op.metrics)
        await k8s.patch(kinds.Secret, "db", sp.MergePatch({"data": {"password": "bjN3"}}),
                        namespace=namespace)  # fmt: skip
        await eventually_passes(lambda: copies({"password": "bjN3"}, names))
        await op.wait_idle(timeout=30, settle=1.0)
        gets = _gets(op.metrics) - gets_before
        assert gets <= 2, f"{gets} GET requests to rewrite {len(names)} copies"

        # Deleting the mirror: the finalizer's recipe removes every copy.
        await k8s.delete(SecretMirror, "copy-db", namespace=namespace)

        async def mirror_gone() -> None:
            try:
                await k8s.get(SecretMirror, "copy-db", namespace=namespace)
            except NotFound:
                return
            raise AssertionError("the SecretMirror still exists")

        await eventually_passes(mirror_gone)
        await copies({}, [])

    with pytest.raises(Invalid) as refused:
        await k8s.create(
            {"apiVersion": f"{GROUP}/v1", "kind": "SecretMirror",
             "metadata": {"name": "bad", "namespace": namespace},
             "spec": {"source": "db",
                      "namespaceSelector": {"matchExpressions": [
                          {"key": "team", "operator": "In", "values": []}]}}}
        )  # fmt: skip
    assert "In and NotIn need values" in str(refused.value)

    # `values` left out, as kubectl users write Exists (and the model omits an empty list):
    # the rule must not fail with "no such key: values" (issue 10's acceptance run did).
    def selecting(name: str, requirement: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/v1", "kind": "SecretMirror",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"source": "db",
                         "namespaceSelector": {"matchExpressions": [requirement]}}}  # fmt: skip

    await k8s.create(selecting("exists", {"key": "team", "operator": "Exists"}))
    typed = SecretMirror.from_object(selecting("typed", {"key": "team", "operator": "Exists"}))
    await k8s.create(typed)
    with pytest.raises(Invalid) as refused:
        await k8s.create(selecting("in-without-values", {"key": "team", "operator": "In"}))
    assert "In and NotIn need values" in str(refused.value)
    assert "no such key" not in str(refused.value)


def _gets(metrics: sp.Metrics) -> float:
    """GET requests the operator's client sent so far (rest_client_requests_total)."""
    family = metrics.rest_client_requests_total
    return sum(
        sample.value
        for metric in family.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("method") == "GET"
    )


async def test_apply_child_keeps_fields_others_add_create_or_patch_replaces_them(
    k8s: Client, namespace: str
) -> None:
    """apply_child owns fields, not the object; create_or_patch of a whole map is a replica.

    Another writer adds a key to a child's data. apply_child with the same desired child
    reports UNCHANGED and the key stays (server-side apply leaves fields others own);
    create_or_patch assigning the whole data map removes it.
    """
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"},
               "metadata": {"name": "child", "namespace": namespace}}  # fmt: skip
    await sp.apply_child(k8s, desired, field_manager="owner")
    await k8s.patch(kinds.ConfigMap, "child", sp.MergePatch({"data": {"b": "2"}}),
                    namespace=namespace, field_manager="someone-else")  # fmt: skip
    result = await sp.apply_child(k8s, desired, field_manager="owner")
    assert result.outcome is sp.OperationResult.UNCHANGED
    kept = await k8s.get(kinds.ConfigMap, "child", namespace=namespace)
    assert kept["data"] == {"a": "1", "b": "2"}

    def exact(obj: dict[str, Any]) -> None:
        obj["data"] = {"a": "1"}

    result = await sp.create_or_patch(k8s, desired, exact)
    assert result.outcome is sp.OperationResult.UPDATED
    replica = await k8s.get(kinds.ConfigMap, "child", namespace=namespace)
    assert replica["data"] == {"a": "1"}
