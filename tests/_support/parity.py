"""The parity tests' backend (fake or real) and their three custom kinds.

Gizmo (namespaced, status subresource), Doodad (namespaced, no status subresource) and Dial
(cluster-scoped, status subresource). The fixtures that build an ``Api`` are in
tests/integration/parity/conftest.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind

GROUP = "parity.setpoint.dev"
GIZMO = GroupVersionKind(GROUP, "v1", "Gizmo")
DOODAD = GroupVersionKind(GROUP, "v1", "Doodad")
DIAL = GroupVersionKind(GROUP, "v1", "Dial")


def _crd(
    kind: str, plural: str, *, scope: str = "Namespaced", status: bool = True
) -> dict[str, Any]:
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
