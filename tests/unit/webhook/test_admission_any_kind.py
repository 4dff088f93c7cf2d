"""Admission webhooks for any kind: built-in Pods as dicts, other typed classes, any GVK."""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import orjson
import pytest
import yaml

import setpoint as sp
from setpoint.api.admission import admission_spec_of
from setpoint.cli.generate import register
from setpoint.crd import webhook_configurations
from setpoint.crd.webhooks import admission_policies
from setpoint.server.http import HttpRequest
from setpoint.webhook.admission_review import AdmissionWebhook
from tests._support import pod_webhooks
from tests._support.pod_webhooks import (
    INJECTED_LABEL,
    NAMESPACE_LABEL,
    POLICY_LABEL,
    SIDECAR,
    LimitsPolicy,
    LimitsRequired,
    SidecarInjector,
)


def pod(*containers: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop", "labels": dict(labels)},
        "spec": {
            "containers": list(containers),
            "restartPolicy": "Always",
            "unknownToSetpoint": {"kept": True},
        },
    }


APP = {"name": "app", "image": "nginx:1.27", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}


def review(obj: Any, operation: str = "CREATE", old: Any = None) -> bytes:
    request = {
        "uid": "u-7",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": operation,
        "name": "web",
        "namespace": "shop",
        "object": obj,
        "oldObject": old,
        "userInfo": {"username": "alice"},
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


async def answer(hook: AdmissionWebhook, body: bytes) -> dict[str, Any]:
    response = await hook(HttpRequest("POST", hook.spec.path, body=body))
    assert response.status == 200, response.body
    return orjson.loads(response.body)["response"]  # type: ignore[no-any-return]


def apply_patch(obj: dict[str, Any], patch: str) -> dict[str, Any]:
    from setpoint.testing._fake_patch import json_patch

    return json_patch(obj, orjson.loads(base64.b64decode(patch)))  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- declaring


@dataclass
class Gadget:
    """A typed class that is not a setpoint Resource: gvk, from_object and to_object."""

    gvk: ClassVar[sp.GroupVersionKind] = sp.GroupVersionKind("gadgets.example.com", "v1", "Gadget")
    name: str
    size: int
    rest: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Any) -> Self:
        rest = {k: v for k, v in obj.items() if k != "size"}
        return cls(obj["metadata"]["name"], int(obj.get("size", 0)), rest)

    def to_object(self) -> dict[str, Any]:
        return {**self.rest, "size": self.size}


def test_a_pod_webhook_is_declared_over_dicts_with_its_kind() -> None:
    """dict[str, Any] plus kind = sp.kinds.Pod: the built-in table gives resource and scope."""
    spec = admission_spec_of(SidecarInjector)
    assert spec.kind is sp.kinds.Pod and spec.typed is None and spec.resource is None
    assert (spec.gvk, spec.plural, spec.scope) == (sp.kinds.Pod, "pods", "Namespaced")
    assert spec.path == "/mutate--v1-pod"  # kubebuilder's path for the core group

    class Plain(sp.CustomValidator[dict[str, Any]]):
        kind = sp.kinds.Deployment

        def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
            return None

    plain = admission_spec_of(Plain)
    assert plain.name == "vdeployment-v1.apps.kb.io"
    assert plain.path == "/validate-apps-v1-deployment"
    assert (plain.plural, plain.scope) == ("deployments", "Namespaced")


def test_any_gvk_needs_its_resource_named_and_then_serves() -> None:
    """A GVK setpoint does not know: an error saying what to set; with it, the rule is built."""
    widget = sp.GroupVersionKind("example.com", "v1", "Widget")
    with pytest.raises(sp.DeclarationError, match=r"does not know the REST resource of Widget"):

        class Unknown(sp.CustomValidator[dict[str, Any]]):
            kind = widget

            def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
                return None

    class Known(sp.CustomValidator[dict[str, Any]]):
        kind = widget
        webhook_options = sp.AdmissionOptions(resource="widgets")

        def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
            return None

    spec = admission_spec_of(Known)
    assert (spec.plural, spec.scope, spec.name) == ("widgets", "*", "vwidget-v1.example.com")


def test_declaration_mistakes_of_any_kind_name_the_fix() -> None:
    """A dict webhook without kind, a kind that is not a GVK, two kinds, a bad option."""
    with pytest.raises(sp.DeclarationError, match=r"without naming the kind; set the class"):

        class NoKind(sp.CustomValidator[dict[str, Any]]):
            def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
                return None

    with pytest.raises(sp.DeclarationError, match=r"\.kind is 'Pod', not a GroupVersionKind"):

        class TextKind(sp.CustomValidator[dict[str, Any]]):
            kind = "Pod"  # type: ignore[assignment]

            def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
                return None

    with pytest.raises(sp.DeclarationError, match=r"names Gadget .* drop the kind attribute"):

        class Both(sp.CustomValidator[Gadget]):
            kind = sp.kinds.Pod

            def validate_create(self, obj: Gadget) -> sp.Warnings:
                return None

    with pytest.raises(sp.DeclarationError, match=r"names <class 'int'>, which is not"):

        class Number(sp.CustomValidator[int]):  # type: ignore[type-var]
            def validate_create(self, obj: int) -> sp.Warnings:
                return None

    with pytest.raises(ValueError, match=r"'bad name!' is not a qualified name"):
        sp.AdmissionOptions(match_conditions={"bad name!": "true"})
    with pytest.raises(ValueError, match=r"at most 64"):
        sp.AdmissionOptions(match_conditions={f"c{i}": "true" for i in range(65)})
    with pytest.raises(ValueError, match=r"non-empty CEL"):
        sp.AdmissionOptions(match_conditions={"empty": " "})
    with pytest.raises(ValueError, match=r"plural resource name"):
        sp.AdmissionOptions(resource="Pods")


# ------------------------------------------------------------------------------- serving


async def test_a_pod_defaulter_answers_with_a_json_patch_of_its_change() -> None:
    """The label and the sidecar are added; the patch applied to what was sent gives it."""
    sent = pod(APP, team="shop")
    original = copy.deepcopy(sent)
    hook = AdmissionWebhook(SidecarInjector())
    response = await answer(hook, review(sent))
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    operations = orjson.loads(base64.b64decode(response["patch"]))
    assert operations == [
        {"op": "add", "path": "/metadata/labels/pod-webhooks.test.setpoint.dev~1sidecar",
         "value": "log-shipper"},
        {"op": "replace", "path": "/spec/containers", "value": [APP, SIDECAR]},
    ]  # fmt: skip
    patched = apply_patch(sent, response["patch"])
    assert patched["metadata"]["labels"] == {"team": "shop", INJECTED_LABEL: "log-shipper"}
    assert patched["spec"]["unknownToSetpoint"] == {"kept": True}
    assert sent == original  # the defaulter changed its own copy

    again = await answer(hook, review(patched))  # reinvoked: nothing left to do
    assert again == {"uid": "u-7", "allowed": True}


async def test_a_dict_defaulter_may_return_a_new_object() -> None:
    """default() returning a dict: the patch is the difference to it; another type is a 500."""

    class Replacing(sp.CustomDefaulter[dict[str, Any]]):
        kind = sp.kinds.Pod
        result: ClassVar[Any] = None

        def default(self, obj: dict[str, Any]) -> Any:
            return Replacing.result

    Replacing.result = {**pod(APP), "spec": {"containers": [APP]}}
    response = await answer(AdmissionWebhook(Replacing()), review(pod(APP)))
    operations = orjson.loads(base64.b64decode(response["patch"]))
    assert operations == [{"op": "remove", "path": "/spec/restartPolicy"},
                          {"op": "remove", "path": "/spec/unknownToSetpoint"}]  # fmt: skip
    Replacing.result = ["not", "an", "object"]
    response = await answer(AdmissionWebhook(Replacing()), review(pod(APP)))
    assert response["allowed"] is False and response["status"]["code"] == 500
    assert "Replacing.default returned list" in response["status"]["message"]


async def test_a_pod_validator_denies_without_limits_and_warns() -> None:
    """No limits: denied naming the container, with the warnings; limits: allowed, warned."""
    hook = AdmissionWebhook(LimitsRequired())
    bare = {"name": "app", "image": "nginx"}
    response = await answer(hook, review(pod(bare)))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"] == (
        "spec.containers[app].resources.limits: container 'app' has no resource limits; "
        "set limits.cpu and limits.memory"
    )
    assert response["warnings"] == ["container 'app': image 'nginx' has no tag; pin a version"]
    untagged = {**APP, "image": "registry.example.com:5000/nginx"}
    response = await answer(hook, review(pod(untagged)))
    assert response["allowed"] is True
    assert response["warnings"] == [
        "container 'app': image 'registry.example.com:5000/nginx' has no tag; pin a version"
    ]
    assert await answer(hook, review(pod(APP))) == {"uid": "u-7", "allowed": True}


class GadgetDefaulter(sp.CustomDefaulter[Gadget]):
    """Gives a Gadget without a size the size 3."""

    webhook_options = sp.AdmissionOptions(resource="gadgets", scope="Cluster")

    def default(self, obj: Gadget) -> None:
        obj.size = obj.size or 3


async def test_any_typed_class_is_decoded_and_patched() -> None:
    """A typed class of its own (not a Resource) gets instances; the patch is its change."""
    spec = admission_spec_of(GadgetDefaulter)
    assert spec.typed is Gadget and spec.resource is None and spec.scope == "Cluster"
    sent = {"apiVersion": "gadgets.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    response = await answer(AdmissionWebhook(GadgetDefaulter()), review(sent))
    operations = orjson.loads(base64.b64decode(response["patch"]))
    assert operations == [{"op": "add", "path": "/size", "value": 3}]


# ----------------------------------------------------------------------------- generating


def test_the_pod_configurations_carry_every_option() -> None:
    """Rules for pods in the core group, selectors, policies, matchConditions, reinvocation."""
    specs = [admission_spec_of(SidecarInjector), admission_spec_of(LimitsRequired)]
    mutating, validating = webhook_configurations(specs)
    (inject,) = mutating["webhooks"]
    assert inject["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert inject["namespaceSelector"] == {"matchLabels": {NAMESPACE_LABEL: "true"}}
    assert inject["objectSelector"]["matchExpressions"][0]["operator"] == "DoesNotExist"
    assert inject["matchConditions"] == [
        {
            "name": "not-from-a-node",
            "expression": "!request.userInfo.username.startsWith('system:node:')",
        }
    ]
    assert (inject["reinvocationPolicy"], inject["timeoutSeconds"]) == ("IfNeeded", 5)
    assert (inject["failurePolicy"], inject["sideEffects"]) == ("Fail", "None")
    (limits,) = validating["webhooks"]
    assert limits["clientConfig"]["service"]["path"] == "/validate--v1-pod"
    assert "reinvocationPolicy" not in limits and "objectSelector" not in limits

    class Ordered(sp.CustomValidator[dict[str, Any]]):
        kind = sp.kinds.Secret
        webhook_options = sp.AdmissionOptions(
            match_conditions={"z-first": "true", "a-second": "has(object.data)"},
            failure_policy="Ignore",
            side_effects="NoneOnDryRun",
        )

        def validate_delete(self, obj: dict[str, Any]) -> sp.Warnings:
            return None

    (config,) = webhook_configurations([admission_spec_of(Ordered)])
    (hook,) = config["webhooks"]
    assert [c["name"] for c in hook["matchConditions"]] == ["z-first", "a-second"]
    assert (hook["failurePolicy"], hook["sideEffects"]) == ("Ignore", "NoneOnDryRun")
    assert hook["rules"][0]["operations"] == ["DELETE"]
    assert (
        "matchConditions"
        not in webhook_configurations([admission_spec_of(GadgetDefaulter)])[0]["webhooks"][0]
    )


def test_setpoint_generate_webhook_writes_the_pod_webhooks(tmp_path: Path) -> None:
    """The CLI finds dict webhooks of a built-in kind and writes their configurations."""
    import argparse

    parser = argparse.ArgumentParser(prog="setpoint")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["generate", "webhook", pod_webhooks.__name__, "--output-dir", str(tmp_path)]
    )
    assert args.func(args) == 0
    documents = list(yaml.safe_load_all((tmp_path / "webhook" / "manifests.yaml").read_text()))
    hooks = {h["name"]: h for d in documents for h in d["webhooks"]}
    assert set(hooks) == {"sidecar.pods.test.setpoint.dev", "limits.pods.test.setpoint.dev"}
    assert hooks["sidecar.pods.test.setpoint.dev"]["matchConditions"][0]["name"] == (
        "not-from-a-node"
    )
    assert hooks["limits.pods.test.setpoint.dev"]["rules"][0]["resources"] == ["pods"]
    policies = list(yaml.safe_load_all((tmp_path / "webhook" / "policies.yaml").read_text()))
    assert [(d["kind"], d["metadata"]["name"]) for d in policies] == [
        ("ValidatingAdmissionPolicy", "limits-policy.pods.test.setpoint.dev"),
        ("ValidatingAdmissionPolicyBinding", "limits-policy.pods.test.setpoint.dev"),
    ]


# ------------------------------------------------------------------------------ policies


def test_a_cel_validator_is_a_policy_and_not_a_webhook() -> None:
    """validations instead of methods: a ValidatingAdmissionPolicy and binding, no webhook."""
    spec = admission_spec_of(LimitsPolicy)
    assert spec.policy and spec.operations == ("CREATE",)
    assert webhook_configurations([spec]) == []
    policy, binding = admission_policies([spec, admission_spec_of(LimitsRequired)])
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    body = policy["spec"]
    assert body["failurePolicy"] == "Fail"
    assert body["matchConstraints"] == {
        "matchPolicy": "Equivalent",
        "namespaceSelector": {"matchLabels": {POLICY_LABEL: "true"}},
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
    }
    assert [c["name"] for c in body["matchConditions"]] == ["not-from-a-node"]
    (validation,) = body["validations"]
    assert validation["expression"].startswith("object.spec.containers.all(")
    assert (validation["message"], validation["reason"]) == (
        "every container needs resources.limits",
        "Forbidden",
    )
    assert binding["spec"] == {
        "policyName": "limits-policy.pods.test.setpoint.dev",
        "validationActions": ["Deny"],
    }
    with pytest.raises(ValueError, match=r"ValidatingAdmissionPolicy the API server evaluates"):
        AdmissionWebhook(LimitsPolicy())

    class Replicas(sp.CustomValidator[dict[str, Any]]):
        kind = sp.kinds.Deployment
        validations = (sp.CelValidation("object.spec.replicas <= 5"),)

    replicas = admission_spec_of(Replicas)
    assert replicas.operations == ("CREATE", "UPDATE")
    (made, _) = admission_policies([replicas])
    assert made["spec"]["validations"] == [{"expression": "object.spec.replicas <= 5"}]
    assert "matchConditions" not in made["spec"]


def test_policy_declaration_mistakes_name_the_fix() -> None:
    """CEL beside methods, validations that are not CelValidations, bad CelValidations."""
    with pytest.raises(sp.DeclarationError, match=r"declares both validations .* validate_create"):

        class Both(sp.CustomValidator[dict[str, Any]]):
            kind = sp.kinds.Pod
            validations = (sp.CelValidation("true"),)

            def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
                return None

    with pytest.raises(sp.DeclarationError, match=r"must be a tuple of sp.CelValidation"):

        class Text(sp.CustomValidator[dict[str, Any]]):
            kind = sp.kinds.Pod
            validations = "object.spec.replicas > 0"  # type: ignore[assignment]

    with pytest.raises(sp.DeclarationError, match=r"holds 'true'; write sp.CelValidation"):

        class Strings(sp.CustomValidator[dict[str, Any]]):
            kind = sp.kinds.Pod
            validations = ("true",)  # type: ignore[assignment]

    with pytest.raises(ValueError, match=r"expression is empty"):
        sp.CelValidation(" ")
    with pytest.raises(ValueError, match=r"message must be a non-empty single line"):
        sp.CelValidation("true", message="two\nlines")
    with pytest.raises(ValueError, match=r"reason='Gone' must be one of"):
        sp.CelValidation("true", reason="Gone")  # type: ignore[arg-type]
