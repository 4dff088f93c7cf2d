"""Real legacy v1beta1 CRDs from public projects, migrated and installed on a real API server."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import Client
from setpoint.client.errors import NotFound, UnknownKind
from setpoint.migrate import migrate_crd
from setpoint.migrate.install import served_kinds
from setpoint.testing.waits import eventually

CORPUS = Path(__file__).resolve().parents[2] / "data" / "legacy_crds"
FILES = sorted(CORPUS.glob("*.yaml"))
FIELD_MANAGER = "setpoint-crd-migrate-test"


def _documents(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The file's CRD and the example objects that follow it."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    assert len(crds) == 1, f"{path.name}: one CRD per corpus file"
    return crds[0], [d for d in docs if d.get("kind") != "CustomResourceDefinition"]


async def _served(k8s: Client, name: str) -> dict[str, Any]:
    """The CRD once Established and every served version discoverable."""

    async def ready() -> dict[str, Any] | None:
        live: dict[str, Any] = await k8s.get(kinds.CustomResourceDefinition, name)
        conditions = {c["type"]: c["status"] for c in live.get("status", {}).get("conditions", ())}
        if conditions.get("Established") != "True":
            return None
        try:
            for gvk in served_kinds(live):
                await k8s.resource_info(gvk)
        except UnknownKind:
            await k8s.mapper.refresh()
            return None
        return live

    return await eventually(ready, timeout=60, description=f"CRD {name} Established and served")


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
async def test_migrated_legacy_crd_is_accepted_with_its_example(
    k8s: Client, namespace: str, path: Path
) -> None:
    """Each migrated legacy CRD is applied server-side, Established, and its example created.

    The corpus (tests/data/legacy_crds) holds v1beta1 CRDs shipped by public projects in
    several styles: controller-gen (with `scope: ""`, JSONPath printer columns, top-level
    validation), hand-written (a top-level `version` beside `versions`, no schema at all,
    `additionalProperties`), Go structs created at run time (one in a protected *.k8s.io
    group without the approval annotation) and generated OpenAPI v2 schemas (full
    ObjectMeta under metadata, `oneOf`). `setpoint crd migrate` must turn each
    into a v1 CRD the API server accepts through server-side apply and serves
    (Established, every served version discoverable), and the project's example object,
    valid under the old CRD, must be created and read back with its content unchanged
    (nothing rejected by the new schema, nothing pruned).
    """
    legacy, examples = _documents(path)
    crd = migrate_crd(legacy).crd
    name = crd["metadata"]["name"]
    await k8s.apply(crd, field_manager=FIELD_MANAGER, force=True)
    created: list[tuple[GroupVersionKind, str, str | None]] = []
    try:
        live = await _served(k8s, name)
        assert live["spec"].get("preserveUnknownFields", False) is False
        cluster_scoped = crd["spec"]["scope"] == "Cluster"
        for example in examples:
            body = {**example, "metadata": dict(example["metadata"])}
            if not cluster_scoped:
                body["metadata"]["namespace"] = namespace
            written = await k8s.create(body)
            gvk = GroupVersionKind.from_api_version(written["apiVersion"], written["kind"])
            ns = None if cluster_scoped else namespace
            created.append((gvk, written["metadata"]["name"], ns))
            read = await k8s.get(gvk, written["metadata"]["name"], namespace=ns)
            assert _content(read) == _content(body), path.name
    finally:
        for gvk, obj_name, ns in created:
            with contextlib.suppress(NotFound):
                await k8s.delete(gvk, obj_name, namespace=ns)
        with contextlib.suppress(NotFound):
            await k8s.delete(kinds.CustomResourceDefinition, name)

        async def gone() -> bool:
            try:
                await k8s.get(kinds.CustomResourceDefinition, name)
            except NotFound:
                return True
            return False

        # Two corpus files define prometheusrules.monitoring.coreos.com: wait it out.
        await eventually(gone, timeout=60, description=f"CRD {name} deleted")
