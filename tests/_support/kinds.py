"""The custom kinds the tests use, declared as Python types; their CRDs are generated.

Four kinds in group ``test.setpoint.dev``, one per shape the tests need:

- ``Gizmo``: namespaced, with the status subresource. ``spec.size``/``spec.color`` and a
  status with ``conditions`` (``metav1.Condition``'s schema, so the server validates
  conditions as it does for any operator's CRD), ``entries``, ``phase``,
  ``observedGeneration``, ``size`` and ``configMap``. Both keep fields they do not
  declare, so tests can store arbitrary content.
- ``Doodad``: namespaced, without the status subresource (status is ordinary content).
- ``Dial``: cluster-scoped, with the status subresource.
- ``Widget``: namespaced, with the status and scale subresources and a strict schema
  (``spec.size`` at least 1; undeclared fields are pruned), for the client tests.

Tests mostly write these as dicts (``GIZMO`` and friends are the GVKs); the classes are
the single source of the CRDs (:data:`CRDS`, made by the same generator as ``setpoint
generate crd``), which the fake serves when they are created in it and the control plane
serves once :func:`install_crds` has run.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from typing import Any

import setpoint as sp
from setpoint.api import kinds
from setpoint.api.meta import JsonObject
from setpoint.client import AlreadyExists
from setpoint.crd import crd_for
from setpoint.testing import eventually

GROUP = "test.setpoint.dev"


class GizmoSpec(sp.Model):
    """What a Gizmo asks for."""

    size: int | None = None
    """How big: the controller tests copy it into a child ConfigMap and the status."""
    color: str | None = None
    """A second field for tests that change one field and keep another."""


class GizmoStatus(sp.Model):
    """What was observed about a Gizmo."""

    size: int | None = None
    """The size the child ConfigMap holds."""
    observed_generation: int | None = None
    """The generation this status describes."""
    config_map: str | None = None
    """The child ConfigMap's name."""
    phase: str | None = None
    """A free-form phase."""
    entries: list[str] = sp.field(default_factory=list)
    """A list concurrent writers append to."""
    conditions: list[sp.Condition] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["type"]
    )
    """Status conditions, validated by the server."""


@sp.resource(group=GROUP, version="v1")
class Gizmo(sp.Resource):
    """Namespaced, with the status subresource."""

    spec: GizmoSpec | None = sp.field(default=None, preserve_unknown_fields=True)
    status: GizmoStatus | None = sp.field(default=None, preserve_unknown_fields=True)


@sp.resource(group=GROUP, version="v1", status_subresource=False)
class Doodad(sp.Resource):
    """Namespaced, without the status subresource."""

    spec: dict[str, Any] | None = sp.field(default=None, preserve_unknown_fields=True)
    status: dict[str, Any] | None = sp.field(default=None, preserve_unknown_fields=True)


@sp.resource(group=GROUP, version="v1", scope="Cluster")
class Dial(sp.Resource):
    """Cluster-scoped, with the status subresource."""

    spec: dict[str, Any] | None = sp.field(default=None, preserve_unknown_fields=True)
    status: dict[str, Any] | None = sp.field(default=None, preserve_unknown_fields=True)


class WidgetSpec(sp.Model):
    """A Widget's spec: a validated size, replicas (the scale subresource) and tags."""

    size: int | None = sp.field(default=None, minimum=1)
    """At least 1: the server refuses 0 (422), which the client tests rely on."""
    replicas: int | None = None
    """What the scale subresource reads and writes."""
    tags: list[str] = sp.field(default_factory=list)
    """A list for patch tests."""


class WidgetStatus(sp.Model):
    """A Widget's status."""

    replicas: int | None = None
    """What the scale subresource reports."""
    phase: str | None = None
    """A free-form phase."""


@sp.resource(group=GROUP, version="v1", scale=sp.Scale())
class Widget(sp.Resource):
    """Namespaced, with the status and scale subresources and a strict schema (no unknown
    fields kept), for the client tests."""

    spec: WidgetSpec | None = None
    status: WidgetStatus | None = None


GIZMO = Gizmo.gvk
DOODAD = Doodad.gvk
DIAL = Dial.gvk
WIDGET = Widget.gvk

CRDS: list[JsonObject] = [crd_for(Gizmo), crd_for(Doodad), crd_for(Dial), crd_for(Widget)]
"""The generated CustomResourceDefinitions of the test kinds."""


async def install_crds(client: Any, crds: Iterable[JsonObject] = CRDS) -> None:
    """Create the CRDs (idempotent) and wait until each is Established and discoverable.

    ``client`` is the real client or a FakeClient (which establishes CRDs at once).
    """
    crds = list(crds)
    for crd in crds:
        with contextlib.suppress(AlreadyExists):
            await client.create(crd)

    async def established() -> bool:
        for crd in crds:
            got = await client.get(kinds.CustomResourceDefinition, crd["metadata"]["name"])
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(established, timeout=60, description="test CRDs established")
    for crd in crds:
        spec = crd["spec"]
        kind = sp.GroupVersionKind(
            spec["group"], spec["versions"][0]["name"], spec["names"]["kind"]
        )
        # Discovery must see the new kind before a client can address it.
        await eventually(
            functools.partial(client.resource_info, kind),
            timeout=30,
            description=f"{kind.kind} discoverable",
        )
