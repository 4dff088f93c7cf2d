"""Sprocket: a kind whose CRD the optional-controller tests install, delete and reinstall.

Its own group (``follow.test.setpoint.dev``), so deleting the CRD never touches the kinds
the other tests share (tests/_support/kinds.py).
"""

from __future__ import annotations

from typing import Any

from setpoint.api.gvk import GroupVersionKind

GROUP = "follow.test.setpoint.dev"
SPROCKET = GroupVersionKind(GROUP, "v1", "Sprocket")
CRD_NAME = f"sprockets.{GROUP}"


def sprocket_crd() -> dict[str, Any]:
    """The Sprocket CRD: namespaced, any content, one served version (a new dict each call)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "sprockets", "singular": "sprocket", "kind": "Sprocket"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def sprocket(name: str, namespace: str = "default") -> dict[str, Any]:
    """A Sprocket object."""
    return {
        "apiVersion": SPROCKET.api_version,
        "kind": "Sprocket",
        "metadata": {"name": name, "namespace": namespace},
    }
