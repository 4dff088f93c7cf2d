"""The ``spec.conversion`` of a generated CRD: which kinds need a conversion webhook, and where.

A kind served in several versions is converted by the API server. With the ``None``
strategy the server only relabels ``apiVersion``, which is right when every version has the
same schema and silently wrong otherwise (a renamed field is dropped, a restructured one
pruned). So :func:`conversion_for` decides, per kind:

* every version has the hub's schema (descriptions aside): no ``conversion`` section (the
  server's default, ``None``);
* some version differs and is a spoke with converters
  (:class:`~setpoint.api.conversion.Convertible`): a ``Webhook`` conversion with
  ``conversionReviewVersions: ["v1"]`` and the
  :class:`WebhookClientConfig` given (in-cluster Service by default, or a URL for a local
  run);
* some version differs and has no converter: a :class:`~setpoint.crd.StructuralError` naming
  the two versions, so the CRD is never generated.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from setpoint.api.conversion import CONVERT_PATH, KindConversion, hub_of
from setpoint.api.declaration import DeclarationError
from setpoint.api.resource import Resource
from setpoint.api.validation import is_dns1123_label
from setpoint.crd.errors import StructuralError
from setpoint.crd.schema import type_name

__all__ = [
    "CONVERT_PATH",
    "WebhookClientConfig",
    "conversion_for",
    "schemas_equivalent",
]


@dataclass(frozen=True, kw_only=True)
class WebhookClientConfig:
    """How the API server reaches the conversion webhook: a Service, or a URL.

    The default is the kubebuilder layout's Service, ``webhook-service`` in namespace
    ``system`` on port 443, path ``/convert``: kustomize's ``namespace`` and ``namePrefix``
    rewrite both when ``config/default`` is built. Give ``url`` instead for an operator that
    runs outside the cluster (a local run against the local control plane), with the CA
    that signed its serving certificate in ``ca_bundle``.
    """

    url: str | None = None
    """``https://host:port/convert`` of an operator outside the cluster. Default: none (use
    the Service). The API server calls it directly, so the host must be reachable from it."""
    service_name: str = "webhook-service"
    """Name of the Service in front of the operator's webhook server."""
    service_namespace: str = "system"
    """Namespace of that Service (kustomize's ``namespace`` rewrites ``system``)."""
    service_port: int = 443
    """Port of the Service."""
    path: str = CONVERT_PATH
    """Path of the conversion endpoint on the Service."""
    ca_bundle: bytes | None = None
    """PEM CA certificate(s) the API server trusts for the webhook's serving certificate.
    Default: none written (cert-manager's CA injector or setpoint's certificate code fills it
    in on the cluster)."""

    def __post_init__(self) -> None:
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme != "https" or not parts.hostname:
                raise ValueError(
                    f"WebhookClientConfig.url={self.url!r} must be an https:// URL with a host "
                    "(the API server only calls webhooks over TLS)"
                )
            if parts.username or parts.password or parts.query or parts.fragment:
                raise ValueError(
                    f"WebhookClientConfig.url={self.url!r} must not carry user info, a query "
                    "or a fragment (the API server refuses them)"
                )
        for name in ("service_name", "service_namespace"):
            value = getattr(self, name)
            if not is_dns1123_label(value):
                raise ValueError(
                    f"WebhookClientConfig.{name}={value!r} must be a DNS label (lower-case "
                    "letters, digits and '-', starting and ending with a letter or digit)"
                )
        if not 1 <= self.service_port <= 65535:
            raise ValueError(
                f"WebhookClientConfig.service_port={self.service_port} must be 1 to 65535"
            )
        if not self.path.startswith("/"):
            raise ValueError(f"WebhookClientConfig.path={self.path!r} must start with '/'")
        if self.ca_bundle is not None and b"-----BEGIN CERTIFICATE-----" not in self.ca_bundle:
            raise ValueError(
                "WebhookClientConfig.ca_bundle must hold PEM certificates "
                "('-----BEGIN CERTIFICATE-----')"
            )

    def to_manifest(self) -> dict[str, Any]:
        """The ``clientConfig`` of the CRD's conversion webhook."""
        out: dict[str, Any]
        if self.url is not None:
            out = {"url": self.url}
        else:
            out = {
                "service": {
                    "name": self.service_name,
                    "namespace": self.service_namespace,
                    "path": self.path,
                    "port": self.service_port,
                }
            }
        if self.ca_bundle is not None:
            out["caBundle"] = base64.b64encode(self.ca_bundle).decode()
        return out


def schemas_equivalent(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two ``openAPIV3Schema`` documents describe the same data (descriptions aside)."""
    return bool(_strip_descriptions(a) == _strip_descriptions(b))


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {
            k: _strip_descriptions(v)
            for k, v in node.items()
            if k not in ("description", "title", "example")
        }
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def _name(cls: type[Resource]) -> str:
    gvk = cls.declaration().gvk
    return f"{gvk.kind} {gvk.api_version} ({cls.__module__}.{type_name(cls)})"


def conversion_for(
    classes: Sequence[type[Resource]],
    schemas: Mapping[str, Mapping[str, Any]],
    webhook: WebhookClientConfig | None,
    errors: list[StructuralError],
) -> dict[str, Any] | None:
    """The CRD's ``spec.conversion`` for the version classes of one kind, or ``None``.

    ``schemas`` maps each version to its ``openAPIV3Schema``. Problems are appended to
    ``errors`` (each naming the versions and how to fix it) and give ``None``.
    """
    if len(classes) < 2 and not any(hub_of(c) for c in classes):
        return None
    try:
        conversion = KindConversion.of(*classes)
    except DeclarationError as exc:
        errors.append(_problem(None, str(exc), "make every spoke sp.Convertible[TheHub]"))
        return None
    hub = conversion.hub
    hub_version = conversion.hub_version
    if hub not in classes:
        spoke = next(c for c in classes if hub_of(c) is hub)
        errors.append(
            _problem(
                spoke,
                f"converts through the hub {_name(hub)}, which is not one of the CRD's versions",
                f"declare {type_name(hub)} in the same modules (or pass it to crd_for) so "
                "the hub version is served",
            )
        )
        return None
    ok = True
    for version in conversion.versions:
        cls = conversion.class_of(version)
        if cls is hub or hub_of(cls) is hub:
            continue
        if not schemas_equivalent(schemas[version], schemas[hub_version]):
            ok = False
            errors.append(
                _problem(
                    cls,
                    f"versions {version} and {hub_version} of {conversion.kind}."
                    f"{conversion.group} differ in schema, but {type_name(cls)} declares no "
                    f"conversion; the API server would only relabel apiVersion and lose every "
                    "renamed or restructured field",
                    f"derive {type_name(cls)} from sp.Convertible[{type_name(hub)}] and "
                    "write to_hub() and from_hub(), or give both versions the same schema",
                )
            )
    if not ok or not conversion.has_converters():
        return None
    config = webhook or WebhookClientConfig()
    return {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": config.to_manifest(),
            "conversionReviewVersions": ["v1"],
        },
    }


def _problem(cls: type[Resource] | None, message: str, fix: str) -> StructuralError:
    return StructuralError(
        schema_path=(),
        message=message,
        fix=fix,
        resource=_name(cls) if cls is not None else None,
    )
