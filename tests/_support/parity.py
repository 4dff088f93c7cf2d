"""The parity tests' backend: a client (fake or real), a namespace, and the test kinds.

The kinds are tests/_support/kinds.py's Gizmo (namespaced, status subresource), Doodad
(namespaced, no status subresource) and Dial (cluster-scoped, status subresource). The
fixtures that build an ``Api`` are in tests/integration/parity/conftest.py.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from tests._support.kinds import DIAL, DOODAD, GIZMO


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
