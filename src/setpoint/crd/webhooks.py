"""Admission webhook configurations from the declared validators and defaulters.

``setpoint generate webhook`` writes ``config/webhook/manifests.yaml`` (where kubebuilder's
controller-gen writes it) holding one ``ValidatingWebhookConfiguration`` named
``validating-webhook-configuration`` with a webhook per :class:`setpoint.CustomValidator`,
and one ``MutatingWebhookConfiguration`` named ``mutating-webhook-configuration`` with a
webhook per :class:`setpoint.CustomDefaulter`, for setpoint's own resources and any other
kind alike (a Pod, any GVK: the rule names the kind's REST resource and scope, and the
options' selectors, policies and ``matchConditions`` are written as declared). kustomize's
``namePrefix`` and ``namespace`` then rename them and the Service they point at, exactly as
for a kubebuilder project.

Each webhook's ``clientConfig`` comes from a
:class:`~setpoint.crd.conversion.WebhookClientConfig`: the kubebuilder Service by default
(``webhook-service`` in ``system``, port 443, the webhook's own path), or, for an operator
running outside the cluster, ``url`` (scheme, host and port; each webhook's path is
appended). A ``ca_bundle`` is written when given; otherwise it is left for whatever injects
it (setpoint's self-managed certificates, or cert-manager's CA injector through the
``cert-manager.io/inject-ca-from`` annotation added in the kustomize layout).

Validators declared as CEL ``validations`` (:class:`setpoint.CelValidation`) need no
webhook: :func:`admission_policies` writes a ``ValidatingAdmissionPolicy`` and its binding
for each, in ``webhook/policies.yaml``.

Output is deterministic: webhooks are sorted by name and keys by the YAML renderer.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from setpoint.api.admission import AdmissionWebhookSpec, admission_spec_of, is_admission_webhook
from setpoint.crd.conversion import WebhookClientConfig
from setpoint.crd.manifests import Manifest

__all__ = [
    "MUTATING_CONFIGURATION",
    "POLICY_MANIFEST_PATH",
    "VALIDATING_CONFIGURATION",
    "WEBHOOK_MANIFEST_PATH",
    "admission_policies",
    "find_admission_webhooks",
    "generate_policies",
    "generate_webhooks",
    "webhook_configurations",
]

VALIDATING_CONFIGURATION: Final = "validating-webhook-configuration"
"""Name of the generated ValidatingWebhookConfiguration (kubebuilder's)."""
MUTATING_CONFIGURATION: Final = "mutating-webhook-configuration"
"""Name of the generated MutatingWebhookConfiguration (kubebuilder's)."""
WEBHOOK_MANIFEST_PATH: Final = "webhook/manifests.yaml"
"""Where the configurations go under the output directory (kubebuilder's layout)."""
POLICY_MANIFEST_PATH: Final = "webhook/policies.yaml"
"""Where the ValidatingAdmissionPolicies and their bindings go under the output directory."""


def find_admission_webhooks(modules: Iterable[ModuleType]) -> list[AdmissionWebhookSpec]:
    """The validators and defaulters declared in these modules, sorted by webhook name.

    Only classes defined in the given modules count, not ones they import.

    Raises:
        ValueError: two webhooks share a name or a path; the message names both classes.

    """
    modules = list(modules)
    names = {module.__name__ for module in modules}
    found: dict[type[Any], None] = {}
    for module in modules:
        for value in vars(module).values():
            if is_admission_webhook(value) and value.__module__ in names:
                found[value] = None
    specs = sorted((admission_spec_of(cls) for cls in found), key=lambda s: s.name)
    for attr in ("name", "path"):
        seen: dict[str, AdmissionWebhookSpec] = {}
        for spec in specs:
            if attr == "path" and spec.policy:
                continue  # a policy is not served: its path is never used
            other = seen.setdefault(getattr(spec, attr), spec)
            if other is not spec:
                raise ValueError(
                    f"{_qualname(other.cls)} and {_qualname(spec.cls)} both declare the webhook "
                    f"{attr} {getattr(spec, attr)!r}; give one of them another "
                    f"sp.AdmissionOptions({attr}=...)"
                )
    return specs


def _qualname(cls: type[Any]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _client_config(spec: AdmissionWebhookSpec, config: WebhookClientConfig) -> dict[str, Any]:
    out: dict[str, Any]
    if config.url is not None:
        parts = urlsplit(config.url)
        out = {"url": urlunsplit((parts.scheme, parts.netloc, spec.path, "", ""))}
    else:
        out = {
            "service": {
                "name": config.service_name,
                "namespace": config.service_namespace,
                "path": spec.path,
                "port": config.service_port,
            }
        }
    if config.ca_bundle is not None:
        out["caBundle"] = base64.b64encode(config.ca_bundle).decode()
    return out


def _webhook(spec: AdmissionWebhookSpec, config: WebhookClientConfig) -> dict[str, Any]:
    options = spec.options
    webhook: dict[str, Any] = {
        "name": spec.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(spec, config),
        "failurePolicy": options.failure_policy,
        "matchPolicy": options.match_policy,
        "sideEffects": options.side_effects,
        "timeoutSeconds": options.timeout_seconds,
        "rules": _rules(spec),
    }
    if options.namespace_selector is not None:
        webhook["namespaceSelector"] = dict(options.namespace_selector)
    if options.object_selector is not None:
        webhook["objectSelector"] = dict(options.object_selector)
    if options.match_conditions:
        webhook["matchConditions"] = _match_conditions(spec)
    if spec.mutating:
        webhook["reinvocationPolicy"] = options.reinvocation_policy
    return webhook


def webhook_configurations(
    webhooks: Sequence[AdmissionWebhookSpec],
    *,
    client_config: WebhookClientConfig | None = None,
    validating_name: str = VALIDATING_CONFIGURATION,
    mutating_name: str = MUTATING_CONFIGURATION,
) -> list[dict[str, Any]]:
    """The Mutating- and ValidatingWebhookConfiguration for ``webhooks`` (each only if needed).

    ``client_config`` says how the API server reaches the webhook server (default: the
    kubebuilder Service); its ``path`` is ignored, each webhook has its own. Validators
    declared as CEL ``validations`` are policies, not webhooks: :func:`admission_policies`.
    """
    config = client_config or WebhookClientConfig()
    out: list[dict[str, Any]] = []
    for mutating, kind, name in (
        (True, "MutatingWebhookConfiguration", mutating_name),
        (False, "ValidatingWebhookConfiguration", validating_name),
    ):
        hooks = sorted(
            (s for s in webhooks if s.mutating is mutating and not s.policy),
            key=lambda s: s.name,
        )
        if hooks:
            out.append(
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": name},
                    "webhooks": [_webhook(spec, config) for spec in hooks],
                }
            )
    return out


def _rules(spec: AdmissionWebhookSpec) -> list[dict[str, Any]]:
    """The rule matching the spec's kind and operations (webhooks and policies alike)."""
    return [
        {
            "apiGroups": [spec.gvk.group],
            "apiVersions": [spec.gvk.version],
            "operations": list(spec.operations),
            "resources": [spec.plural],
            "scope": spec.scope,
        }
    ]


def _match_conditions(spec: AdmissionWebhookSpec) -> list[dict[str, str]]:
    conditions = spec.options.match_conditions or {}
    return [{"name": name, "expression": expr} for name, expr in conditions.items()]


def admission_policies(policies: Sequence[AdmissionWebhookSpec]) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding per validator declared as CEL.

    Specs that are webhooks are skipped. Each policy is named as the webhook would be
    (``AdmissionOptions.name``), and so is its binding, whose ``validationActions`` is
    ``[Deny]``. The options map as for a webhook: ``failure_policy`` to ``failurePolicy``
    (what a CEL error does), the rule, selectors and ``match_policy`` to
    ``matchConstraints``, ``match_conditions`` to ``matchConditions``.
    """
    out: list[dict[str, Any]] = []
    for spec in sorted((s for s in policies if s.policy), key=lambda s: s.name):
        options = spec.options
        constraints: dict[str, Any] = {
            "matchPolicy": options.match_policy,
            "resourceRules": _rules(spec),
        }
        if options.namespace_selector is not None:
            constraints["namespaceSelector"] = dict(options.namespace_selector)
        if options.object_selector is not None:
            constraints["objectSelector"] = dict(options.object_selector)
        policy: dict[str, Any] = {
            "failurePolicy": options.failure_policy,
            "matchConstraints": constraints,
            "validations": [v.to_policy() for v in spec.validations],
        }
        if options.match_conditions:
            policy["matchConditions"] = _match_conditions(spec)
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": spec.name},
                "spec": policy,
            }
        )
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": spec.name},
                "spec": {"policyName": spec.name, "validationActions": ["Deny"]},
            }
        )
    return out


def generate_webhooks(
    webhooks: Sequence[AdmissionWebhookSpec],
    *,
    client_config: WebhookClientConfig | None = None,
) -> Manifest:
    """The ``webhook/manifests.yaml`` manifest for ``webhooks`` (see the module docstring)."""
    return Manifest(
        WEBHOOK_MANIFEST_PATH,
        tuple(webhook_configurations(webhooks, client_config=client_config)),
    )


def generate_policies(specs: Sequence[AdmissionWebhookSpec]) -> Manifest | None:
    """The ``webhook/policies.yaml`` manifest of :func:`admission_policies`, or ``None``.

    A file of its own: kustomize's ``namePrefix`` would rename a policy but not the
    ``policyName`` its binding refers to, so the kubebuilder layout does not list it; apply it
    as it is (or rename both by hand).
    """
    documents = admission_policies(specs)
    return Manifest(POLICY_MANIFEST_PATH, tuple(documents)) if documents else None
