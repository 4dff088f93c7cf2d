"""Unit tests: the reconcile logic against setpoint's in-memory fake API server."""

from __future__ import annotations

from widgets import IMAGE, Widget, converge, desired_config_map, desired_deployment

from setpoint import kinds
from setpoint.api.kinds import apps_v1
from setpoint.testing import FakeClient


def widget(replicas: int) -> dict[str, object]:
    return {
        "apiVersion": "quickstart.setpoint.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "team"},
        "spec": {"replicas": replicas},
    }


def test_the_config_map_carries_the_replicas() -> None:
    desired = desired_config_map(Widget.model_validate(widget(3)))
    assert desired["metadata"] == {"name": "w1-config", "namespace": "team"}
    assert desired["data"] == {"replicas": "3"}


def test_the_deployment_sets_only_what_the_operator_owns() -> None:
    desired = desired_deployment(Widget.model_validate(widget(3))).to_object()
    labels = {"app.kubernetes.io/name": "widget", "app.kubernetes.io/instance": "w1"}
    assert desired == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w1-web", "namespace": "team"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": IMAGE,
                            "ports": [{"name": "http", "containerPort": 80}],
                        }
                    ]
                },
            },
        },
    }


async def test_converge_applies_the_config_map_and_reports_ready() -> None:
    fake = FakeClient(resources=[Widget])
    await fake.create(widget(4))
    live = await fake.get(Widget, "w1", namespace="team")

    await converge(fake, live)

    config = await fake.get(kinds.ConfigMap, "w1-config", namespace="team")
    assert config["data"] == {"replicas": "4"}
    (owner,) = config["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Widget", "w1", True)
    web = await fake.get(apps_v1.Deployment, "w1-web", namespace="team")
    assert web.spec.replicas == 4
    assert [ref.name for ref in web.metadata.owner_references] == ["w1"]
    status = (await fake.get(Widget, "w1", namespace="team")).status
    assert status is not None
    assert status.observed_generation == live.metadata.generation
    assert [(c.type, c.status) for c in status.conditions] == [("Ready", "True")]


async def test_converge_twice_writes_nothing_the_second_time() -> None:
    fake = FakeClient(resources=[Widget])
    await fake.create(widget(2))
    live = await fake.get(Widget, "w1", namespace="team")
    await converge(fake, live)
    version = fake.resource_version

    await converge(fake, await fake.get(Widget, "w1", namespace="team"))

    assert fake.resource_version == version
