"""Fixtures shared by the client integration tests."""

import contextlib

import pytest_asyncio

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.client import AlreadyExists, Client
from setpoint.testing.waits import eventually

WIDGET = GroupVersionKind("test.setpoint.dev", "v1", "Widget")

_WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.setpoint.dev"},
    "spec": {
        "group": "test.setpoint.dev",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "listKind": "WidgetList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                    },
                },
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "replicas": {"type": "integer"},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "phase": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


@pytest_asyncio.fixture(loop_scope="session")
async def widget_crd(k8s: Client) -> GroupVersionKind:
    """The Widget CRD (status and scale subresources), installed and Established."""
    with contextlib.suppress(AlreadyExists):
        await k8s.create(_WIDGET_CRD)

    async def established() -> bool:
        got = await k8s.get(kinds.CustomResourceDefinition, "widgets.test.setpoint.dev")
        conditions = got.get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, timeout=30, description="widgets CRD established")
    return WIDGET
