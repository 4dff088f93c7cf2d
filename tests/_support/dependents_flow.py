"""A three-level chain of dependents: a ConfigMap, a Gizmo that must turn Ready, a ConfigMap.

The parent is a Gizmo. ``config`` (a ConfigMap) is ready once applied; ``db`` (a child
Gizmo) is ready when its ``Ready`` condition is True, which the test sets by hand (as a
database operator would); ``app`` (a ConfigMap) depends on ``db`` and applies only while
the parent's ``spec.color`` is not ``"off"``. A parent with ``spec.color == "broken"`` makes
``db`` invalid (its size a string: the server refuses it with 422).

tests/unit/controller/test_dependents.py drives it over the fake client;
tests/integration/controller/test_dependents.py runs it in a controller on the real plane.
"""

from __future__ import annotations

from typing import Any

from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.controller.dependents import Dependent, Dependents
from tests._support.kinds import GIZMO

FIELD_MANAGER = "dependents-test"


def config(parent: JsonObject) -> JsonObject:
    name = parent["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-config"},
        "data": {"size": str((parent.get("spec") or {}).get("size", 1))},
    }


def db(parent: JsonObject) -> JsonObject:
    name = parent["metadata"]["name"]
    spec = parent.get("spec") or {}
    size: Any = "not-a-number" if spec.get("color") == "broken" else spec.get("size", 1)
    return {
        "apiVersion": GIZMO.api_version,
        "kind": GIZMO.kind,
        "metadata": {"name": f"{name}-db"},
        "spec": {"size": size},
    }


def app(parent: JsonObject) -> JsonObject:
    name = parent["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-app"},
        "data": {"database": f"{name}-db"},
    }


def app_enabled(parent: JsonObject) -> bool:
    return (parent.get("spec") or {}).get("color") != "off"


def chain(**options: Any) -> Dependents:
    """The three-level chain, declared out of order (the order comes from depends_on)."""
    return Dependents(
        Dependent("app", app, depends_on=["db"], activate=app_enabled),
        Dependent("db", db, depends_on=["config"], ready="Ready"),
        Dependent("config", config),
        field_manager=FIELD_MANAGER,
        **options,
    )


def parent_of(name: str, namespace: str, **spec: Any) -> JsonObject:
    return {
        "apiVersion": GIZMO.api_version,
        "kind": GIZMO.kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": 2, **spec},
    }


def mark_ready(db_object: JsonObject, generation: int | None = None) -> None:
    """Set the child Gizmo's Ready condition in place (the test plays the db's operator)."""
    status = db_object.setdefault("status", {})
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Up",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": generation or db_object["metadata"].get("generation", 1),
        }
    ]


def condition_of(parent: JsonObject, kind: str = "DependentsReady") -> JsonObject | None:
    for condition in (parent.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            found: JsonObject = condition
            return found
    return None


CONFIG_MAP = kinds.ConfigMap
