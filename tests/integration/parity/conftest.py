"""The parity fixture: every test here runs once against the fake and once against the server.

``api`` is parametrized over ``("fake", "real")``. Both give a client and a
fresh namespace; the fake one requires namespaces to exist, as the server does.
``crds`` installs three CRDs in either backend: Gizmo (namespaced, status
subresource), Doodad (namespaced, no status subresource) and Dial
(cluster-scoped, status subresource).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import AlreadyExists, Client
from setpoint.testing.fake import FakeClient, FakeOptions
from setpoint.testing.waits import eventually

GROUP = "parity.setpoint.dev"
GIZMO = GroupVersionKind(GROUP, "v1", "Gizmo")
DOODAD = GroupVersionKind(GROUP, "v1", "Doodad")
DIAL = GroupVersionKind(GROUP, "v1", "Dial")


def _crd(kind: str, plural: str, *, scope: str = "Namespaced", status: bool = True) -> dict:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }
        },
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
            },
            "versions": [version],
        },
    }


CRDS = [
    _crd("Gizmo", "gizmos"),
    _crd("Doodad", "doodads", status=False),
    _crd("Dial", "dials", scope="Cluster"),
]


@dataclass
class Api:
    """One backend under test: a client (fake or real), a fresh namespace, and which it is."""

    client: Any
    namespace: str
    backend: str

    gizmo = GIZMO
    """Namespaced custom kind with the status subresource."""
    doodad = DOODAD
    """Namespaced custom kind without the status subresource."""
    dial = DIAL
    """Cluster-scoped custom kind with the status subresource."""

    @staticmethod
    def unique(prefix: str) -> str:
        """A name no other test uses (for cluster-scoped objects, which outlive namespaces)."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def obj(self, kind: GroupVersionKind, name: str, **fields: Any) -> dict[str, Any]:
        """An object of ``kind`` in this namespace (cluster-scoped kinds: no namespace)."""
        metadata: dict[str, Any] = {"name": name}
        if kind != DIAL:
            metadata["namespace"] = self.namespace
        metadata.update(fields.pop("metadata", {}))
        return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": metadata, **fields}

    def cm(self, name: str, **metadata: Any) -> dict[str, Any]:
        """A ConfigMap in this namespace with extra metadata."""
        return self.obj(kinds.ConfigMap, name, metadata=metadata)


@pytest.fixture(params=["fake", "real"])
def api(request: pytest.FixtureRequest) -> Api:
    """A backend: the fake (requiring namespaces, like the server) or the real control plane."""
    if request.param == "fake":
        namespace = f"parity-{uuid.uuid4().hex[:6]}"
        fake = FakeClient(
            options=FakeOptions(require_namespaces=True),
            objects=[{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}],
        )
        return Api(fake, namespace, "fake")
    client: Client = request.getfixturevalue("k8s")
    return Api(client, request.getfixturevalue("namespace"), "real")


@pytest_asyncio.fixture(loop_scope="session")
async def crds(api: Api) -> Api:
    """The parity CRDs, installed (and Established) in the backend."""
    for crd in CRDS:
        with contextlib.suppress(AlreadyExists):
            await api.client.create(crd)

    async def established() -> bool:
        for crd in CRDS:
            got = await api.client.get(kinds.CustomResourceDefinition, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(established, timeout=30, description="parity CRDs established")
    # Discovery must see the new kinds before the client can address them.
    await eventually(
        lambda: api.client.resource_info(DIAL), timeout=30, description="Dial kind discoverable"
    )
    return api
