"""Typed built-in kinds (issue 30, decision 0032): field presence, kind handles, the fake.

A generated class (``kinds.apps_v1.Deployment``) writes exactly the fields that were set,
keeps what it does not know, is a kind handle wherever a GVK is taken, and comes back
typed from ``get``/``list``/``apply_child`` when asked with the class (a dict when asked
with the GVK constant, as before). mypy checks this module too: the ``assert_type`` calls
and the ``type: ignore`` on a missing required field fail the type check if the generated
classes or the client's signatures lose their types.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any, assert_type

import orjson
import pytest
from pydantic import ValidationError

import setpoint as sp
from setpoint.api import kinds
from setpoint.api.kinds import apps_v1, core_v1, meta_v1, rbac_v1
from setpoint.api.meta import JsonObject
from setpoint.api.types import Kind, split_kind
from setpoint.client.objects import ObjectList
from setpoint.testing import FakeClient


def web(replicas: int | None = None) -> apps_v1.Deployment:
    spec = apps_v1.DeploymentSpec(
        selector=meta_v1.LabelSelector(match_labels={"app": "web"}),
        template=core_v1.PodTemplateSpec(
            metadata=sp.ObjectMeta(labels={"app": "web"}),
            spec=core_v1.PodSpec(containers=[core_v1.Container(name="web", image="nginx:1.27")]),
        ),
    )
    if replicas is not None:
        spec.replicas = replicas
    return apps_v1.Deployment(metadata=sp.ObjectMeta(name="web", namespace="ns"), spec=spec)


WEB_JSON: JsonObject = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        },
    },
}


def test_an_object_writes_exactly_the_fields_that_were_set() -> None:
    assert web().to_object() == WEB_JSON


def test_zero_false_and_empty_are_values_and_none_is_unset() -> None:
    deployment = web(replicas=0)
    deployment.spec.paused = False
    deployment.spec.min_ready_seconds = None  # assigned None: not sent (omitempty)
    container = deployment.spec.template.spec
    assert container is not None
    container.containers[0].args = []
    out = deployment.to_object()
    assert out["spec"]["replicas"] == 0
    assert out["spec"]["paused"] is False
    assert "minReadySeconds" not in out["spec"]
    assert out["spec"]["template"]["spec"]["containers"][0]["args"] == []


def test_json_names_that_are_not_plain_camel_case_are_kept() -> None:
    pod = core_v1.PodSpec(
        containers=[core_v1.Container(name="c")], host_ipc=True, set_hostname_as_fqdn=True
    )
    assert pod.model_dump(by_alias=True) == {
        "containers": [{"name": "c"}],
        "hostIPC": True,
        "setHostnameAsFQDN": True,
    }


def test_unknown_fields_survive_a_round_trip_at_every_depth() -> None:
    sent: JsonObject = {
        **WEB_JSON,
        "spec": {**WEB_JSON["spec"], "futureField": {"a": 1}},
        "status": {"replicas": 2, "newStatus": "x"},
    }
    parsed = apps_v1.Deployment.from_object(sent)
    assert parsed.status is not None and parsed.status.replicas == 2
    assert parsed.to_object() == sent


def test_parsing_refuses_another_kind() -> None:
    with pytest.raises(ValidationError, match="parses apps/v1 Deployment objects"):
        apps_v1.Deployment.from_object({**WEB_JSON, "kind": "StatefulSet"})


def test_a_required_field_is_required_by_mypy_and_at_run_time() -> None:
    with pytest.raises(ValidationError, match="name"):
        core_v1.Container(image="nginx")  # type: ignore[call-arg]


def test_int_or_string_and_quantities_keep_what_was_written() -> None:
    port = core_v1.ServicePort(port=80, target_port="http")
    assert port.model_dump(by_alias=True) == {"port": 80, "targetPort": "http"}
    limits = core_v1.ResourceRequirements(limits={"cpu": "500m", "memory": "1Gi"})
    assert limits.model_dump(by_alias=True) == {"limits": {"cpu": "500m", "memory": "1Gi"}}


def test_a_typed_class_is_the_kind_its_constant_names() -> None:
    handle: Kind[apps_v1.Deployment] = apps_v1.Deployment
    assert handle.gvk == kinds.Deployment
    assert split_kind(apps_v1.Deployment) == (kinds.Deployment, apps_v1.Deployment)
    assert rbac_v1.RoleBinding.gvk == kinds.RoleBinding
    assert kinds.apps_v1 is apps_v1  # the module, through the package's lazy attribute


def test_importing_setpoint_loads_no_generated_module() -> None:
    code = (
        "import sys, setpoint as sp, setpoint.api.kinds as k; sp.kinds.Deployment; "
        "print(sorted(m for m in sys.modules if m.startswith('setpoint.api.kinds.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


async def test_the_fake_client_reads_and_writes_typed_objects() -> None:
    fake = FakeClient()
    result, applied = await sp.apply_child(fake, web(replicas=2), field_manager="web-ctl")
    assert result is sp.OperationResult.CREATED
    assert_type(applied, apps_v1.Deployment)
    assert isinstance(applied, apps_v1.Deployment) and applied.metadata.uid

    got = await fake.get(apps_v1.Deployment, "web", namespace="ns")
    assert_type(got, apps_v1.Deployment)
    assert got.spec.replicas == 2
    listed = await fake.list(apps_v1.Deployment, namespace="ns")
    assert_type(listed, ObjectList[apps_v1.Deployment])
    assert [d.metadata.name for d in listed] == ["web"]
    # The constant still names a kind of dicts.
    raw = await fake.get(kinds.Deployment, "web", namespace="ns")
    assert_type(raw, JsonObject)
    assert raw["spec"]["replicas"] == 2

    again, _ = await sp.apply_child(fake, web(replicas=2), field_manager="web-ctl")
    assert again is sp.OperationResult.UNCHANGED


async def test_client_apply_sends_only_the_fields_set() -> None:
    fake = FakeClient()
    sent: list[Any] = []
    desired = rbac_v1.Role(
        metadata=sp.ObjectMeta(name="reader", namespace="ns"),
        rules=[rbac_v1.PolicyRule(verbs=["get"], api_groups=[""], resources=["pods"])],
    )
    sent.append(desired.to_object())
    stored = await fake.apply(desired, field_manager="m")
    assert_type(stored, rbac_v1.Role)
    assert sent == [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "reader", "namespace": "ns"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        }
    ]
    assert stored.rules is not None and stored.rules[0].verbs == ["get"]
    created = await fake.create(
        core_v1.ConfigMap(metadata=sp.ObjectMeta(name="c", namespace="ns"), data={"k": "v"})
    )
    assert_type(created, core_v1.ConfigMap)
    assert created.data == {"k": "v"}


def test_metadata_views_and_rbac_rules_take_the_class() -> None:
    assert sp.Metadata(apps_v1.Deployment) == sp.Metadata(kinds.Deployment)
    rule = sp.rbac.for_kind(apps_v1.Deployment, verbs=["get", "list"])
    assert rule == sp.rbac.for_kind(kinds.Deployment, verbs=["get", "list"])
    assert (list(rule.groups), list(rule.resources)) == (["apps"], ["deployments"])


class LabelPods(sp.CustomDefaulter[core_v1.Pod]):
    """A defaulter over typed Pods: labels each one."""

    def default(self, obj: core_v1.Pod) -> None:
        obj.metadata.labels["typed"] = "yes"


async def test_an_admission_defaulter_takes_the_typed_class() -> None:
    """The Pod arrives typed; the patch is its change, fields the model lacks untouched."""
    from setpoint.api.admission import admission_spec_of
    from setpoint.server.http import HttpRequest
    from setpoint.webhook.admission_review import AdmissionWebhook

    spec = admission_spec_of(LabelPods)
    assert spec.typed is core_v1.Pod and spec.gvk == kinds.Pod
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"containers": [{"name": "app", "image": "nginx"}], "futureField": 1},
    }
    request = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "name": "web",
        "namespace": "shop",
        "object": pod,
        "userInfo": {"username": "alice"},
    }
    hook = AdmissionWebhook(LabelPods())
    body = orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )
    response = await hook(HttpRequest("POST", hook.spec.path, body=body))
    answer = orjson.loads(response.body)["response"]
    assert answer["allowed"] is True
    patch = orjson.loads(base64.b64decode(answer["patch"]))
    assert patch == [{"op": "add", "path": "/metadata/labels", "value": {"typed": "yes"}}]
