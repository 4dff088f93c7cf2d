"""Objects that carry a caBundle, for the webhook certificate tests: a CRD, a webhook config."""

from __future__ import annotations

import base64
from typing import Any


def crd_with_webhook(group: str, *, strategy: str = "Webhook") -> dict[str, Any]:
    """A one-version CRD ``probes.<group>`` converting through a webhook nobody serves.

    With one version the API server never calls the webhook, so the URL may point nowhere.
    """
    conversion: dict[str, Any] = {"strategy": strategy}
    if strategy == "Webhook":
        conversion["webhook"] = {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/convert"},
        }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"probes.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": "Probe",
                "plural": "probes",
                "singular": "probe",
                "listKind": "ProbeList",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
            "conversion": conversion,
        },
    }


def validating_configuration(name: str, group: str, *, hooks: int = 1) -> dict[str, Any]:
    """A ValidatingWebhookConfiguration with ``hooks`` webhooks for ``probes.<group>``.

    ``failurePolicy: Ignore`` and a group nobody writes: the API server never depends on it.
    """
    webhooks = [
        {
            "name": f"v{i}.probes.{group}",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["probes"],
                }
            ],
        }
        for i in range(hooks)
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks,
    }


def ca_bundles(obj: dict[str, Any]) -> list[bytes]:
    """The decoded caBundle of every client config in a CRD or webhook configuration."""
    if obj["kind"] == "CustomResourceDefinition":
        configs = [obj["spec"]["conversion"]["webhook"]["clientConfig"]]
    else:
        configs = [w["clientConfig"] for w in obj["webhooks"]]
    return [base64.b64decode(c.get("caBundle", "")) for c in configs]
