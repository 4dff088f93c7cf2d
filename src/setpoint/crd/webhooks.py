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
    "VALIDATING_CONFIGURATION",
    "WEBHOOK_MANIFEST_PATH",
    "find_admission_webhooks",
    "generate_webhooks",
    "webhook_configurations",
]

VALIDATING_CONFIGURATION: Final = "validating-webhook-configuration"
"""Name of the generated ValidatingWebhookConfiguration (kubebuilder's)."""
MUTATING_CONFIGURATION: Final = "mutating-webhook-configuration"
"""Name of the generated MutatingWebhookConfiguration (kubebuilder's)."""
WEBHOOK_MANIFEST_PATH: Final = "webhook/manifests.yaml"
"""Where the configurations go under the output directory (kubebuilder's layout)."""


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
    gvk = spec.gvk
    options = spec.options
    webhook: dict[str, Any] = {
        "name": spec.name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": _client_config(spec, config),
        "failurePolicy": options.failure_policy,
        "matchPolicy": options.match_policy,
        "sideEffects": options.side_effects,
        "timeoutSeconds": options.timeout_seconds,
        "rules": [
            {
                "apiGroups": [gvk.group],
                "apiVersions": [gvk.version],
                "operations": list(spec.operations),
                "resources": [spec.plural],
                "scope": spec.scope,
            }
        ],
    }
    if options.namespace_selector is not None:
        webhook["namespaceSelector"] = dict(options.namespace_selector)
    if options.object_selector is not None:
        webhook["objectSelector"] = dict(options.object_selector)
    if options.match_conditions:
        webhook["matchConditions"] = [
            {"name": name, "expression": expression}
            for name, expression in options.match_conditions.items()
        ]
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
    kubebuilder Service); its ``path`` is ignored, each webhook has its own.
    """
    config = client_config or WebhookClientConfig()
    out: list[dict[str, Any]] = []
    for mutating, kind, name in (
        (True, "MutatingWebhookConfiguration", mutating_name),
        (False, "ValidatingWebhookConfiguration", validating_name),
    ):
        hooks = sorted((s for s in webhooks if s.mutating is mutating), key=lambda s: s.name)
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
