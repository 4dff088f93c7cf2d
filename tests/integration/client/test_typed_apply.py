"""Server-side apply of typed built-in kinds (issue 30, decision 0032) on the real server."""

from typing import Any

import setpoint as sp
from setpoint.api import kinds
from setpoint.api.kinds import apps_v1, core_v1, meta_v1
from setpoint.client import Client


def web(namespace: str, replicas: int | None = None) -> apps_v1.Deployment:
    spec = apps_v1.DeploymentSpec(
        selector=meta_v1.LabelSelector(match_labels={"app": "web"}),
        template=core_v1.PodTemplateSpec(
            metadata=sp.ObjectMeta(labels={"app": "web"}),
            spec=core_v1.PodSpec(
                containers=[
                    core_v1.Container(
                        name="web",
                        image="registry.invalid/web:1",
                        ports=[core_v1.ContainerPort(container_port=8080, name="http")],
                    )
                ]
            ),
        ),
    )
    if replicas is not None:
        spec.replicas = replicas
    return apps_v1.Deployment(metadata=sp.ObjectMeta(name="web", namespace=namespace), spec=spec)


def owned(obj: apps_v1.Deployment, manager: str) -> dict[str, Any]:
    """The ``fieldsV1`` set ``manager`` owns in ``obj``."""
    entries = [m for m in obj.metadata.managed_fields if m.get("manager") == manager]
    assert len(entries) == 1, obj.metadata.managed_fields
    fields: dict[str, Any] = entries[0]["fieldsV1"]
    return fields


async def test_a_typed_apply_owns_only_the_fields_that_were_set(
    k8s: Client, namespace: str
) -> None:
    """A typed Deployment applied without replicas leaves replicas to another manager.

    The server records the typed apply's fields for its manager: the selector, the
    template's container and its port, but not ``spec.replicas`` (never set) and none of
    the server's defaults. A second manager (an autoscaler) then applies ``replicas: 3``
    without a conflict; the typed apply, repeated, does not reset it. ``get`` with the
    class and ``apply_child`` answer typed objects; ``get`` with the constant a dict.
    """
    applied = await k8s.apply(web(namespace), field_manager="typed", force=True)
    assert isinstance(applied, apps_v1.Deployment)
    spec = owned(applied, "typed")["f:spec"]
    assert "f:replicas" not in spec
    assert set(spec) == {"f:selector", "f:template"}
    container = spec["f:template"]["f:spec"]["f:containers"]['k:{"name":"web"}']
    assert set(container) == {".", "f:image", "f:name", "f:ports"}
    assert applied.spec.replicas == 1  # the server's default, owned by no manager

    scaler = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 3},
    }
    await k8s.apply(scaler, field_manager="autoscaler")  # force=False: no conflict

    result, again = await sp.apply_child(
        k8s, web(namespace), field_manager="typed", applied_annotation=False
    )
    assert isinstance(again, apps_v1.Deployment)
    assert again.spec.replicas == 3
    got = await k8s.get(apps_v1.Deployment, "web", namespace=namespace)
    assert got.spec.replicas == 3
    assert got.spec.template.spec is not None
    assert got.spec.template.spec.containers[0].ports == [
        core_v1.ContainerPort(container_port=8080, name="http", protocol="TCP")
    ]
    raw = await k8s.get(kinds.Deployment, "web", namespace=namespace)
    assert raw["spec"]["replicas"] == 3
    assert result in (sp.OperationResult.UPDATED, sp.OperationResult.UNCHANGED)

    # Setting replicas in the typed object makes the typed manager its (co-)owner.
    forced = await k8s.apply(web(namespace, replicas=2), field_manager="typed", force=True)
    assert forced.spec.replicas == 2
    assert "f:replicas" in owned(forced, "typed")["f:spec"]
