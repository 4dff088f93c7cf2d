"""Shared helpers of the safe-write integration tests (kinds, manifests, request log)."""

from __future__ import annotations

from typing import Any

from setpoint.api.gvk import GroupVersionKind

GIZMO = GroupVersionKind("safewrites.setpoint.dev", "v1", "Gizmo")

# metav1.Condition's schema, as controller-gen emits it, so the server validates
# conditions exactly as it does for any operator's CRD.
_CONDITION_SCHEMA = {
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "type": {
            "type": "string",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "reason": {
            "type": "string",
            "maxLength": 1024,
            "minLength": 1,
            "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "message": {"type": "string", "maxLength": 32768},
    },
}

GIZMO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gizmos.safewrites.setpoint.dev"},
    "spec": {
        "group": "safewrites.setpoint.dev",
        "scope": "Namespaced",
        "names": {
            "plural": "gizmos",
            "singular": "gizmo",
            "kind": "Gizmo",
            "listKind": "GizmoList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "color": {"type": "string"},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "phase": {"type": "string"},
                                    "observedGeneration": {"type": "integer"},
                                    "entries": {"type": "array", "items": {"type": "string"}},
                                    "conditions": {
                                        "type": "array",
                                        "items": _CONDITION_SCHEMA,
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["type"],
                                    },
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def gizmo(name: str, namespace: str, **spec: object) -> dict[str, Any]:
    """A Gizmo manifest."""
    return {
        "apiVersion": GIZMO.api_version,
        "kind": "Gizmo",
        "metadata": {"name": name, "namespace": namespace},
        "spec": dict(spec),
    }


class RequestLog:
    """Every HTTP request one client makes, as (method, code), via ``transport.on_request``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def __call__(self, method: str, host: str, code: str) -> None:
        self.requests.append((method, code))

    def writes(self) -> list[tuple[str, str]]:
        """Requests other than reads."""
        return [r for r in self.requests if r[0] not in ("GET", "HEAD")]

    def clear(self) -> None:
        self.requests.clear()
