"""Admission webhooks for Pods, a built-in kind, over JSON dicts (issue 30).

:class:`SidecarInjector` labels a Pod and adds a log-shipper sidecar (once);
:class:`LimitsRequired` refuses a Pod with a container without resource limits and warns
about images without a tag. Both only see Pods in namespaces labelled
:data:`NAMESPACE_LABEL` ``=true`` (so on a shared control plane they touch nothing else), and
both skip requests from nodes through a ``matchConditions`` CEL expression.
"""

from __future__ import annotations

from typing import Any

import setpoint as sp

NAMESPACE_LABEL = "pod-webhooks.test.setpoint.dev/enabled"
"""Label a namespace ``true`` to have its Pods sent to these webhooks."""

INJECTED_LABEL = "pod-webhooks.test.setpoint.dev/sidecar"
"""The label the injector sets on every Pod it sees (value: the sidecar's name)."""

SKIP_LABEL = "pod-webhooks.test.setpoint.dev/skip"
"""A Pod with this label is not sent to the injector (its object selector)."""

SIDECAR_NAME = "log-shipper"
"""The name of the injected container."""

SIDECAR: dict[str, Any] = {
    "name": SIDECAR_NAME,
    "image": "registry.k8s.io/pause:3.10",
    "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}},
}
"""The injected container, with limits (so :class:`LimitsRequired` accepts it)."""

ONLY_HERE: dict[str, Any] = {"matchLabels": {NAMESPACE_LABEL: "true"}}
NOT_FROM_NODES: dict[str, str] = {
    "not-from-a-node": "!request.userInfo.username.startsWith('system:node:')"
}


class SidecarInjector(sp.CustomDefaulter[dict[str, Any]]):
    """Labels every Pod it sees and adds the log-shipper sidecar when it is missing."""

    kind = sp.kinds.Pod
    webhook_options = sp.AdmissionOptions(
        name="sidecar.pods.test.setpoint.dev",
        operations=("CREATE",),
        namespace_selector=ONLY_HERE,
        object_selector={"matchExpressions": [{"key": SKIP_LABEL, "operator": "DoesNotExist"}]},
        match_conditions=NOT_FROM_NODES,
        reinvocation_policy="IfNeeded",
        timeout_seconds=5,
    )

    def default(self, obj: dict[str, Any]) -> None:
        """Set the label; append the sidecar unless a container already has its name."""
        labels = obj.setdefault("metadata", {}).setdefault("labels", {})
        labels[INJECTED_LABEL] = SIDECAR_NAME
        containers = obj["spec"]["containers"]
        if not any(c.get("name") == SIDECAR_NAME for c in containers):
            containers.append(
                {**SIDECAR, "resources": {"limits": dict(SIDECAR["resources"]["limits"])}}
            )


class LimitsRequired(sp.CustomValidator[dict[str, Any]]):
    """Refuses a Pod whose containers lack resource limits; warns about untagged images."""

    kind = sp.kinds.Pod
    webhook_options = sp.AdmissionOptions(
        name="limits.pods.test.setpoint.dev",
        namespace_selector=ONLY_HERE,
        match_conditions=NOT_FROM_NODES,
        side_effects="None",
        timeout_seconds=5,
    )

    def validate_create(self, obj: dict[str, Any]) -> sp.Warnings:
        """Deny a container without ``resources.limits``; warn about each untagged image."""
        spec = obj.get("spec", {})
        containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
        warnings = [
            f"container {c['name']!r}: image {c.get('image')!r} has no tag; pin a version"
            for c in containers
            if ":" not in str(c.get("image", "")).rsplit("/", 1)[-1]
        ]
        bare = [c["name"] for c in containers if not (c.get("resources") or {}).get("limits")]
        if bare:
            raise sp.Denied(
                f"spec.containers[{bare[0]}].resources.limits: container {bare[0]!r} has no "
                "resource limits; set limits.cpu and limits.memory",
                warnings=warnings,
            )
        return warnings or None


POLICY_LABEL = "pod-webhooks.test.setpoint.dev/policy"
"""Label a namespace ``true`` to have its Pods checked by :class:`LimitsPolicy`."""


class LimitsPolicy(sp.CustomValidator[dict[str, Any]]):
    """LimitsRequired's denial as CEL: a ValidatingAdmissionPolicy, no webhook at all."""

    kind = sp.kinds.Pod
    webhook_options = sp.AdmissionOptions(
        name="limits-policy.pods.test.setpoint.dev",
        operations=("CREATE",),
        namespace_selector={"matchLabels": {POLICY_LABEL: "true"}},
        match_conditions=NOT_FROM_NODES,
    )
    validations = (
        sp.CelValidation(
            "object.spec.containers.all(c, has(c.resources) && has(c.resources.limits))",
            message="every container needs resources.limits",
            message_expression=(
                '"container \'" + object.spec.containers.filter(c, !has(c.resources) || '
                '!has(c.resources.limits))[0].name + "\' has no resource limits"'
            ),
            reason="Forbidden",
        ),
    )
