"""Fixture API types for the CRD generator: every supported declaration appears at least once.

The golden files next to this module (``config/``) are generated from these
types; the unit tests compare against them and the integration tests install
the CRDs into a real API server. Regenerate deliberately with
``SETPOINT_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/crd/test_crd_golden.py``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field

from setpoint.api import kinds
from setpoint.api.declaration import (
    IntOrString,
    PrinterColumn,
    Quantity,
    Rule,
    Scale,
    field,
    resource,
)
from setpoint.api.rbac import rbac
from setpoint.api.resource import Model, ObjectMeta, Resource

GROUP = "fixtures.setpoint.dev"


class Phase(StrEnum):
    """Lifecycle phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    FAILED = "Failed"


class Condition(Model):
    """An observation of one aspect of the object's state."""

    type: str = field(max_length=316, pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    """Condition type in CamelCase, e.g. Ready."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str = field(min_length=1, max_length=1024)
    """Machine-readable CamelCase reason for the last transition."""
    message: str = field(default="", max_length=32768)
    """Human-readable details."""
    last_transition_time: datetime
    """When the status last changed."""
    observed_generation: int | None = field(None, minimum=0)
    """The generation the condition was computed for."""


class Port(Model):
    """A named network port."""

    name: str = field(max_length=15, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    """Port name, unique within the list."""
    port: int = field(minimum=1, maximum=65535)
    """Port number."""
    protocol: Literal["TCP", "UDP"] = "TCP"
    """Transport protocol."""


@Rule(
    "self.min <= self.max",
    message="min must not exceed max",
    field_path=".min",
    reason="FieldValueInvalid",
)
class Range(Model):
    """An inclusive integer range."""

    min: int = 0
    """Lower bound."""
    max: int = 10
    """Upper bound."""


class Selector(Model):
    """Label selector, replaced as a whole on apply."""

    match_labels: dict[str, Annotated[str, field(max_length=63)]] = field(
        default_factory=dict, max_properties=16
    )
    """Labels an object must carry."""


class Extension(Model):
    """A typed extension point that also keeps fields it does not know."""

    name: str | None = None
    """Extension name."""


class Template(Model):
    """A template with its own object metadata, like a pod template."""

    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Metadata of the objects made from the template."""
    image: str = field(max_length=255)
    """Image of the objects made from the template."""


class ThingSpec(Model):
    """Desired state of a Thing."""

    size: int = field(default=1, minimum=1)
    """How big."""


@resource(
    group=GROUP,
    version="v1",
    plural="thingies",
    singular="thingy",
    list_kind="ThingCollection",
)
class Thing(Resource):
    """A minimal resource without status: custom names, no subresources."""

    spec: ThingSpec | None = None


@Rule(
    "!self.paused || self.replicas == 0",
    message="a paused widget must have 0 replicas",
    field_path=".replicas",
)
class WidgetSpec(Model):
    """Desired state of a Widget."""

    replicas: int = field(default=1, minimum=0, maximum=100)
    """Number of replicas."""
    paused: bool = False
    """Stop reconciling while true."""
    image: str = field(
        min_length=1,
        max_length=255,
        pattern=r"^\S+$",
        rules=[
            Rule("!self.endsWith(':latest')", message="pin the image to a tag other than latest")
        ],
    )
    """Container image to run."""
    mode: Literal["fast", "safe"] = field(
        default="safe", rules=[Rule("self == oldSelf", message="mode is immutable")]
    )
    """Reconcile mode; cannot change after creation."""
    phase_hint: Phase | None = None
    """Phase to report while starting."""
    tier: str = field(default="gold", enum=["gold", "silver"])
    """Service tier."""
    ratio: float = field(default=0.5, minimum=0, maximum=1, exclusive_maximum=True)
    """Share of traffic, in [0, 1)."""
    step: int | None = field(None, minimum=0, exclusive_minimum=True, multiple_of=5)
    """Scaling step; a positive multiple of 5."""
    not_before: datetime | None = None
    """Do not start before this time."""
    owner_email: str | None = field(None, format="email", max_length=254)
    """Contact address."""
    api_url: str | None = field(None, json_name="apiURL", max_length=2048)
    """API endpoint (explicit JSON name)."""
    tags: list[Annotated[str, field(max_length=64)]] = field(
        default_factory=list,
        unique_items=True,
        max_items=10,
        rules=[
            Rule(
                "self.all(t, t.size() <= 32)",
                message_expression="'tag ' + self.filter(t, t.size() > 32)[0] + "
                "' is longer than 32 characters'",
            )
        ],
    )
    """Free-form tags, each at most once."""
    aliases: set[Annotated[str, field(max_length=63)]] = field(default_factory=set, max_items=8)
    """Other names (a set type)."""
    args: list[Annotated[str, field(max_length=1024)]] = field(
        default_factory=list, list_type="atomic", min_items=0, max_items=32
    )
    """Arguments, replaced as a whole on apply."""
    ports: list[Port] = field(default_factory=list, list_map_keys=["name"], max_items=16)
    """Ports, merged by name on apply."""
    env: dict[str, Annotated[str, field(max_length=4096)]] = field(
        default_factory=dict, min_properties=0, max_properties=32
    )
    """Environment variables."""
    selector: Selector | None = field(None, map_type="atomic")
    """Which objects to select."""
    range_: Range = field(default_factory=Range)
    """Allowed range (JSON name 'range'); defaults are applied inside it."""
    target_port: IntOrString = 8080
    """Port number or name."""
    memory: Quantity | None = None
    """Memory limit, e.g. 512Mi."""
    note: str | None = field(None, nullable=True, max_length=1024)
    """A note; null is stored as null."""
    config: dict[str, Any] | None = None
    """Free-form configuration, kept as is."""
    raw: Any = None
    """Any JSON value."""
    extension: Extension | None = field(None, preserve_unknown_fields=True)
    """Extension settings; unknown keys are kept."""
    manifest: dict[str, Any] | None = field(None, embedded_resource=True)
    """Any Kubernetes object, kept as is."""
    thing: Thing | None = None
    """A Thing to create (a typed embedded resource)."""
    template: Template | None = None
    """Template for created objects."""


class WidgetStatus(Model):
    """Observed state of a Widget."""

    replicas: int | None = None
    """Replicas observed."""
    selector: str | None = None
    """Label selector of the replicas, for the scale subresource."""
    phase: Phase | None = None
    """Current phase."""
    observed_generation: int | None = None
    """The generation last reconciled."""
    conditions: list[Condition] = field(default_factory=list, list_map_keys=["type"], max_items=8)
    """Current conditions, one per type."""


@Rule(
    "self.metadata.name.size() <= 40",
    message="widget names are at most 40 characters",
    reason="FieldValueForbidden",
)
@resource(
    group=GROUP,
    version="v1",
    short_names=["wd"],
    categories=["fixtures"],
    scale=Scale(label_selector_path=".status.selector"),
    printer_columns=[
        PrinterColumn(name="Replicas", json_path=".spec.replicas", type="integer"),
        PrinterColumn(name="Phase", json_path=".status.phase"),
        PrinterColumn(
            name="Image", json_path=".spec.image", priority=1, description="The image running"
        ),
        PrinterColumn(name="Age", json_path=".metadata.creationTimestamp", type="date"),
    ],
    selectable_fields=[".spec.mode"],
)
class Widget(Resource):
    """A Widget runs replicas of an image."""

    spec: WidgetSpec
    status: WidgetStatus | None = None


class GadgetSpec(Model):
    """Desired state of a Gadget."""

    size: int = field(default=1, minimum=1)
    """Gadget size."""
    color: str | None = field(None, max_length=32)
    """Gadget color."""


class GadgetStatus(Model):
    """Observed state of a Gadget."""

    ready: bool | None = None
    """Whether the gadget is ready."""


# The three Gadget versions share one schema, so the API server's None conversion (relabel
# apiVersion) is lossless and no conversion webhook is needed; a version whose schema differed
# would need converters (sp.Convertible) or generation refuses it. Subresources, deprecation
# and served-ness are per version and do differ.
@resource(
    group=GROUP,
    version="v1alpha1",
    kind="Gadget",
    scope="Cluster",
    deprecated=True,
    deprecation_warning="fixtures.setpoint.dev/v1alpha1 Gadget is deprecated; use v1",
    status_subresource=False,
)
class GadgetV1Alpha1(Resource):
    """A cluster-wide Gadget (old version)."""

    spec: GadgetSpec = Field(default_factory=GadgetSpec)
    status: GadgetStatus | None = None


@resource(
    group=GROUP,
    version="v1beta1",
    kind="Gadget",
    scope="Cluster",
    served=False,
    status_subresource=False,
)
class GadgetV1Beta1(Resource):
    """A cluster-wide Gadget (unserved intermediate version)."""

    spec: GadgetSpec = Field(default_factory=GadgetSpec)
    status: GadgetStatus | None = None


@resource(
    group=GROUP,
    version="v1",
    kind="Gadget",
    scope="Cluster",
    storage=True,
    short_names=["gd"],
)
class Gadget(Resource):
    """A cluster-wide Gadget (storage version)."""

    spec: GadgetSpec = Field(default_factory=GadgetSpec)
    status: GadgetStatus | None = None


@rbac(groups=[GROUP], resources=["widgets"], verbs=["get", "list", "watch", "update", "patch"])
@rbac(groups=[GROUP], resources=["widgets/status"], verbs=["get", "update", "patch"])
@rbac.for_kind(Widget, subresources=["scale"], verbs=["get"])
@rbac.for_kind(kinds.ConfigMap, verbs=["get", "list", "watch", "create", "delete"])
@rbac.for_kind(kinds.Event, verbs=["create", "patch"])
@rbac(groups=["coordination.k8s.io"], resources=["leases"], verbs=["*"], namespace="fixtures")
@rbac(urls=["/metrics"], verbs=["get"])
async def reconcile_widget(request: object) -> None:
    """A reconciler stand-in carrying the RBAC rules the fixtures declare."""


@rbac(groups=[GROUP], resources=["gadgets"], verbs=["get", "list", "watch"])
@rbac(groups=[GROUP], resources=["widgets"], verbs=["get", "create"])
class GadgetReconciler:
    """A class-based reconciler stand-in; its rules merge with the function's."""
