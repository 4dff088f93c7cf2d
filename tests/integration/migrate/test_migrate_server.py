"""Migrated legacy CRDs on a real API server: accepted, and objects valid before stay valid."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.client.errors import NotFound
from setpoint.migrate import migrate_crd
from setpoint.migrate.install import apply_crd

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "migrate"
CASES = sorted(p.stem for p in (GOLDEN / "v1beta1").glob("*.yaml"))


def _objects(case: str) -> list[dict[str, Any]]:
    text = (GOLDEN / "objects" / f"{case}.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """Everything but metadata: what pruning or validation could have changed."""
    return {k: v for k, v in obj.items() if k != "metadata"}


@pytest.mark.parametrize("case", CASES)
async def test_migrated_crd_is_accepted_and_old_objects_survive(
    k8s: Client, namespace: str, case: str
) -> None:
    """Each migrated corpus CRD installs; its legacy objects are accepted and read back unpruned.

    The objects under tests/golden/migrate/objects were valid under the v1beta1
    CRD (pruning off where it was off). After migration the server must accept
    every one, and reading it back must give exactly what was written: nothing
    rejected by a tightened schema, nothing dropped by pruning.
    """
    migration = migrate_crd(yaml.safe_load((GOLDEN / "v1beta1" / f"{case}.yaml").read_text()))
    crd = migration.crd
    name = crd["metadata"]["name"]
    await apply_crd(k8s, crd)
    created: list[tuple[GroupVersionKind, str, str | None]] = []
    try:
        cluster_scoped = crd["spec"]["scope"] == "Cluster"
        for obj in _objects(case):
            body = {**obj, "metadata": {**obj["metadata"]}}
            if cluster_scoped:
                body["metadata"]["name"] = f"{body['metadata']['name']}-{namespace}"[:63]
            else:
                body["metadata"]["namespace"] = namespace
            written = await k8s.create(body)
            gvk = GroupVersionKind.from_api_version(written["apiVersion"], written["kind"])
            ns = None if cluster_scoped else namespace
            created.append((gvk, written["metadata"]["name"], ns))
            read = await k8s.get(gvk, written["metadata"]["name"], namespace=ns)
            assert _content(read) == _content(body), (case, body["metadata"]["name"])
            assert _content(written) == _content(body)
    finally:
        for gvk, obj_name, ns in created:
            with contextlib.suppress(NotFound):
                await k8s.delete(gvk, obj_name, namespace=ns)
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, name)
