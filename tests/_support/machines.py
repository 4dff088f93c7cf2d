"""Machine: a kind in three versions with converters, for the conversion tests.

``v2`` is the hub (and storage version). ``MachineV1.to_hub`` refuses an image containing
``!`` (a converter that fails, for the error paths). ``v1`` is a spoke whose spec is restructured
(``size`` is ``replicas``, the image one string, ports bare numbers, ``safe`` a coarser view
of ``mode``) and cannot hold ``paused`` or port names; ``v1beta1`` is a spoke with the hub's
shape minus ``ports`` and ``paused``. Unit tests convert in memory; integration tests serve
them through the webhook to a real API server.
"""

from __future__ import annotations

from typing import Any, Literal, Self

import setpoint as sp
from setpoint.api.conversion import Convertible

GROUP = "conv.setpoint.dev"
"""The API group of Machine."""


class Port(sp.Model):
    """A named port (hub)."""

    name: str
    port: int
    protocol: Literal["TCP", "UDP"] = "TCP"


class Image(sp.Model):
    """An image reference, split (hub)."""

    repository: str
    tag: str | None = None


class SpecV2(sp.Model):
    """The hub's spec: richer than every spoke's."""

    replicas: int = 1
    image: Image
    ports: list[Port] = sp.field(default_factory=list)
    paused: bool = False
    mode: Literal["Fast", "Safe"] = "Safe"


class StatusV2(sp.Model):
    """The hub's status."""

    ready: int | None = None


@sp.resource(group=GROUP, version="v2", kind="Machine", storage=True)
class Machine(sp.Resource):
    """The hub (and storage) version."""

    spec: SpecV2
    status: StatusV2 | None = None


class SpecV1(sp.Model):
    """The old spec: renamed, flattened, fewer fields."""

    size: int = 1
    image: str
    ports: list[int] = sp.field(default_factory=list)
    safe: bool = True


@sp.resource(group=GROUP, version="v1", kind="Machine")
class MachineV1(sp.Resource, Convertible[Machine]):
    """A spoke: `size` is `replicas`, the image one string, ports bare numbers."""

    spec: SpecV1
    status: StatusV2 | None = None

    def to_hub(self) -> Machine:
        if "!" in self.spec.image:
            # A converter may refuse what it cannot map; the API server reports it.
            raise ValueError(f"image {self.spec.image!r} is not an image reference")
        repository, colon, tag = self.spec.image.partition(":")
        return Machine(
            metadata=self.metadata,
            spec=SpecV2(
                replicas=self.spec.size,
                image=Image(repository=repository, tag=tag if colon else None),
                ports=[Port(name=f"p{p}", port=p) for p in self.spec.ports],
                mode="Safe" if self.spec.safe else "Fast",
            ),
            status=self.status,
        )

    @classmethod
    def from_hub(cls, hub: Machine) -> Self:
        return cls(
            metadata=hub.metadata,
            spec=SpecV1(
                size=hub.spec.replicas,
                image=_image_string(hub.spec.image),
                ports=[p.port for p in hub.spec.ports],
                safe=hub.spec.mode == "Safe",
            ),
            status=hub.status,
        )


def _image_string(image: Image) -> str:
    if image.tag is None:
        return image.repository
    return f"{image.repository}:{image.tag}"


class SpecV1Beta1(sp.Model):
    """A middle version: the hub's shape but without ports or paused."""

    replicas: int = 1
    image: Image
    mode: Literal["Fast", "Safe"] = "Safe"


@sp.resource(group=GROUP, version="v1beta1", kind="Machine")
class MachineV1Beta1(sp.Resource, Convertible[Machine]):
    """A second spoke, for spoke-to-spoke conversion through the hub."""

    spec: SpecV1Beta1
    status: StatusV2 | None = None

    def to_hub(self) -> Machine:
        s = self.spec
        return Machine(
            metadata=self.metadata,
            spec=SpecV2(replicas=s.replicas, image=s.image, mode=s.mode),
            status=self.status,
        )

    @classmethod
    def from_hub(cls, hub: Machine) -> Self:
        s = hub.spec
        return cls(
            metadata=hub.metadata,
            spec=SpecV1Beta1(replicas=s.replicas, image=s.image, mode=s.mode),
            status=hub.status,
        )


V1, V1BETA1, V2 = (f"{GROUP}/{v}" for v in ("v1", "v1beta1", "v2"))
"""The three apiVersions."""
VERSIONS = (Machine, MachineV1, MachineV1Beta1)
"""Every version class, hub first."""


def hub_object(name: str = "m1", namespace: str = "prod", **spec: Any) -> dict[str, Any]:
    """A Machine as the API server sends it at v2 (server-set metadata included)."""
    return {
        "apiVersion": V2,
        "kind": "Machine",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": "0b0e3c1e-1111-4d3a-9c1e-6f0e0c1e1111",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"team": "a"},
            "annotations": {"note": "kept"},
            "finalizers": ["conv.setpoint.dev/cleanup"],
            "managedFields": [
                {
                    "manager": "kubectl",
                    "operation": "Update",
                    "apiVersion": V2,
                    "time": "2026-01-02T03:04:05Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}},
                }
            ],
        },
        "spec": {
            "replicas": 3,
            "image": {"repository": "nginx", "tag": "1.27"},
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "paused": True,
            "mode": "Fast",
            **spec,
        },
        "status": {"ready": 2},
    }
