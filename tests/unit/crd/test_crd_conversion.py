"""Generated CRDs and conversion: None for equal schemas, Webhook for spokes, refusal otherwise."""

from __future__ import annotations

import base64
from typing import Any, Self

import pytest

import setpoint as sp
from setpoint.api.conversion import Convertible
from setpoint.crd import CRDGenerationError, WebhookClientConfig, crd_for, generate_crds
from setpoint.tls.certs import CertificateAuthority

GROUP = "gen.setpoint.dev"


class BoxSpec(sp.Model):
    """The hub's spec."""

    width: int = 1
    depth: int = 1


class OldBoxSpec(sp.Model):
    """The old spec: one number."""

    size: int = 1


@sp.resource(group=GROUP, version="v1", kind="Box", storage=True)
class Box(sp.Resource):
    """The hub."""

    spec: BoxSpec


@sp.resource(group=GROUP, version="v1alpha1", kind="Box")
class BoxV1Alpha1(sp.Resource, Convertible[Box]):
    """A spoke with converters."""

    spec: OldBoxSpec

    def to_hub(self) -> Box:
        return Box(metadata=self.metadata, spec=BoxSpec(width=self.spec.size, depth=self.spec.size))

    @classmethod
    def from_hub(cls, hub: Box) -> Self:
        return cls(metadata=hub.metadata, spec=OldBoxSpec(size=hub.spec.width))


@sp.resource(group=GROUP, version="v1beta1", kind="Box")
class BoxV1Beta1(sp.Resource):
    """Another version with the hub's schema (documented differently): no converter needed."""

    spec: BoxSpec
    """The same fields as v1."""


def test_a_kind_with_converters_gets_a_webhook_conversion_to_the_service() -> None:
    crd = crd_for(Box, BoxV1Alpha1, BoxV1Beta1)
    assert crd["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {
                "service": {
                    "name": "webhook-service",
                    "namespace": "system",
                    "path": "/convert",
                    "port": 443,
                }
            },
            "conversionReviewVersions": ["v1"],
        },
    }
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1", "v1beta1", "v1alpha1"]


def test_a_local_run_points_the_crd_at_a_url_with_its_ca() -> None:
    ca = CertificateAuthority()
    config = WebhookClientConfig(url="https://127.0.0.1:9443/convert", ca_bundle=ca.cert_pem)
    (manifest,) = generate_crds([Box, BoxV1Alpha1], webhook=config)
    client_config = manifest.documents[0]["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client_config == {
        "url": "https://127.0.0.1:9443/convert",
        "caBundle": base64.b64encode(ca.cert_pem).decode(),
    }


def test_versions_with_one_schema_keep_the_servers_none_conversion() -> None:
    crd = crd_for(Box, BoxV1Beta1)
    assert "conversion" not in crd["spec"]


def test_versions_that_differ_without_a_converter_are_refused_naming_both() -> None:
    @sp.resource(group=GROUP, version="v1alpha2", kind="Box")
    class BoxV1Alpha2(sp.Resource):
        spec: OldBoxSpec

    with pytest.raises(CRDGenerationError) as info:
        crd_for(Box, BoxV1Alpha1, BoxV1Alpha2)
    (error,) = info.value.errors
    assert "versions v1alpha2 and v1 of Box.gen.setpoint.dev differ in schema" in str(error)
    assert "derive BoxV1Alpha2 from sp.Convertible[Box]" in error.fix


def test_a_spoke_whose_hub_is_not_generated_is_refused() -> None:
    with pytest.raises(
        CRDGenerationError, match=r"converts through the hub Box gen\.setpoint\.dev/v1"
    ):
        generate_crds([BoxV1Alpha1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "http://127.0.0.1/convert"}, "must be an https:// URL"),
        ({"url": "https://h/convert?x=1"}, "must not carry user info, a query"),
        ({"service_name": "Web_Hook"}, "service_name='Web_Hook' must be a DNS label"),
        ({"service_port": 0}, "service_port=0 must be 1 to 65535"),
        ({"path": "convert"}, "must start with '/'"),
        ({"ca_bundle": b"not a cert"}, "must hold PEM certificates"),
    ],
)
def test_webhook_client_config_is_validated(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WebhookClientConfig(**kwargs)
