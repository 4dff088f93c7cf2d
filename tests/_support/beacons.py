"""Beacon: a kind in two versions with converters, for the certificate rotation test.

``v1`` is the hub and storage version (``frequencyHz``); ``v1beta1`` is a spoke that says the
same in kilohertz (``frequencyKhz``), so every read at ``v1beta1`` goes through the conversion
webhook and a wrong conversion would show in the numbers.
"""

from __future__ import annotations

from typing import Self

import setpoint as sp

GROUP = "rotation.test.setpoint.dev"
"""The API group of Beacon (unique to these tests)."""


class BeaconSpec(sp.Model):
    """The hub's spec."""

    frequency_hz: int
    """The frequency, in hertz."""


@sp.resource(group=GROUP, version="v1", kind="Beacon", storage=True)
class Beacon(sp.Resource):
    """The hub (and storage) version."""

    spec: BeaconSpec


class BeaconSpecV1Beta1(sp.Model):
    """The old spec, in kilohertz."""

    frequency_khz: int
    """The frequency, in kilohertz."""


@sp.resource(group=GROUP, version="v1beta1", kind="Beacon")
class BeaconV1Beta1(sp.Resource, sp.Convertible[Beacon]):
    """The spoke: kilohertz instead of hertz."""

    spec: BeaconSpecV1Beta1

    def to_hub(self) -> Beacon:
        """Kilohertz to hertz."""
        return Beacon(
            metadata=self.metadata, spec=BeaconSpec(frequency_hz=self.spec.frequency_khz * 1000)
        )

    @classmethod
    def from_hub(cls, hub: Beacon) -> Self:
        """Hertz to kilohertz (the annotation keeps what does not divide)."""
        return cls(
            metadata=hub.metadata,
            spec=BeaconSpecV1Beta1(frequency_khz=hub.spec.frequency_hz // 1000),
        )
