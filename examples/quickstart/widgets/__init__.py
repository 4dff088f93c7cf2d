"""The Widget operator: the smallest complete setpoint operator, with its tests.

A ``Widget`` asks for a number of replicas; the operator keeps a ConfigMap named
``<widget>-config`` holding that number and a Deployment ``<widget>-web`` running that many
replicas (both owned by the Widget, so they are garbage-collected with it) and reports
``Ready`` with the generation it acted on. The ConfigMap is built as a dict, the Deployment
as a typed model (``setpoint.api.kinds.apps_v1``): either works for every child. Run it with
``setpoint run widgets``; ``setpoint generate crd widgets`` writes its CRD.

It is also the project ``make release-check`` copies into a fresh virtualenv, outside the
setpoint checkout, to run its unit and integration tests against an installed wheel.
"""

from __future__ import annotations

from typing import Any

import setpoint as sp
from setpoint import kinds
from setpoint.api.kinds import apps_v1, core_v1, meta_v1

__all__ = [
    "FIELD_MANAGER",
    "IMAGE",
    "Widget",
    "WidgetSpec",
    "WidgetStatus",
    "converge",
    "desired_config_map",
    "desired_deployment",
    "setup",
]

FIELD_MANAGER = "widget-operator"
"""The server-side apply field manager of everything the operator writes."""

IMAGE = "nginx:1.27"
"""The image the widget's Deployment runs."""


class WidgetSpec(sp.Model):
    """What the user wants."""

    replicas: int = sp.field(default=1, minimum=0, maximum=10)
    """How many replicas the widget's ConfigMap announces."""


class WidgetStatus(sp.Model):
    """What the operator observed last."""

    observed_generation: int | None = None
    """The ``metadata.generation`` this status describes."""
    conditions: list[sp.Condition] = sp.field(
        default_factory=list, list_type="map", list_map_keys=["type"], max_items=8
    )
    """``Ready``: the ConfigMap holds the spec's replicas."""


@sp.resource(group="quickstart.setpoint.dev", version="v1")
class Widget(sp.Resource):
    """A widget: its spec is the setpoint, its status reports back."""

    spec: WidgetSpec
    status: WidgetStatus | None = None


def desired_config_map(widget: Widget) -> dict[str, Any]:
    """The child ConfigMap ``widget`` asks for: exactly the fields the operator owns."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{widget.metadata.name}-config",
            "namespace": widget.metadata.namespace,
        },
        "data": {"replicas": str(widget.spec.replicas)},
    }


def desired_deployment(widget: Widget) -> apps_v1.Deployment:
    """The child Deployment ``widget`` asks for, typed: only the fields set here are applied.

    ``strategy``, ``revisionHistoryLimit`` and the rest are left unset, so the server's
    defaults apply and this operator owns none of them (another manager may set them).
    """
    name = str(widget.metadata.name)
    labels = {"app.kubernetes.io/name": "widget", "app.kubernetes.io/instance": name}
    return apps_v1.Deployment(
        metadata=sp.ObjectMeta(name=f"{name}-web", namespace=widget.metadata.namespace),
        spec=apps_v1.DeploymentSpec(
            replicas=widget.spec.replicas,
            selector=meta_v1.LabelSelector(match_labels=labels),
            template=core_v1.PodTemplateSpec(
                metadata=sp.ObjectMeta(labels=labels),
                spec=core_v1.PodSpec(
                    containers=[
                        core_v1.Container(
                            name="web",
                            image=IMAGE,
                            ports=[core_v1.ContainerPort(name="http", container_port=80)],
                        )
                    ]
                ),
            ),
        ),
    )


async def converge(client: Any, widget: Widget) -> None:
    """Make the world match ``widget``: apply its ConfigMap and Deployment, then report Ready.

    ``client`` is the live client in the operator (``ctx.client``) and a
    ``setpoint.testing.FakeClient`` in unit tests.
    """
    generation = widget.metadata.generation or 0
    await sp.apply_child(
        client, desired_config_map(widget), field_manager=FIELD_MANAGER, owner=widget
    )
    await sp.apply_child(
        client, desired_deployment(widget), field_manager=FIELD_MANAGER, owner=widget
    )

    def ready(obj: Widget) -> None:
        if obj.status is None:
            obj.status = WidgetStatus()
        obj.status.observed_generation = generation
        sp.set_condition(
            obj.status,
            "Ready",
            True,
            "ChildrenApplied",
            f"{widget.spec.replicas} replicas announced",
            observed_generation=generation,
        )

    await sp.update_status(client, widget, ready, field_manager=FIELD_MANAGER)


@sp.rbac.for_kind(kinds.ConfigMap, verbs=["get", "list", "watch", "create", "patch"])
@sp.rbac.for_kind(apps_v1.Deployment, verbs=["get", "list", "watch", "create", "patch"])
async def reconcile(ctx: sp.Context, request: sp.Request) -> sp.Result | None:
    """Reconcile one Widget; a deleted one needs nothing (its children are garbage-collected)."""
    try:
        widget = await ctx.reader.get(Widget, request.name, namespace=request.namespace)
    except sp.NotFound:
        return None
    await converge(ctx.client, widget)
    return None


def setup(manager: sp.Manager) -> None:
    """Register the Widget controller on ``manager`` (what ``setpoint run widgets`` calls)."""
    builder = manager.controller("widget").for_(Widget).owns(kinds.ConfigMap)
    builder.owns(apps_v1.Deployment).build(reconcile)
