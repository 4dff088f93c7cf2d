"""Vessel: a small typed resource with a validator and a defaulter, for the admission tests.

The validator refuses more crew than capacity (naming both), warns when nobody is captain,
refuses shrinking capacity on update (it needs the old object for that) and, for a captain
named ``"raise"``, fails with an unexpected exception (the panic path). The defaulter sets
``spec.port`` and puts a lone captain on the crew list.
"""

from __future__ import annotations

import setpoint as sp

GROUP = "admission.test.setpoint.dev"
"""The API group of Vessel (unique to these tests)."""

CRASH_CAPTAIN = "raise"
"""A captain's name that makes the validator raise RuntimeError (a bug, not a denial)."""


class VesselSpec(sp.Model):
    """What a vessel is."""

    capacity: int = sp.field(minimum=0)
    """How many people fit on board."""
    crew: list[str] = sp.field(default_factory=list)
    """Who is on board."""
    captain: str | None = None
    """Who is in command."""
    port: str | None = None
    """Home port; the defaulter sets it."""


@sp.resource(group=GROUP, version="v1")
class Vessel(sp.Resource):
    """A vessel, guarded by VesselValidator and defaulted by VesselDefaulter."""

    spec: VesselSpec


class VesselValidator(sp.CustomValidator[Vessel]):
    """Crew must fit; capacity may only grow; a vessel without a captain gets a warning."""

    def validate_create(self, obj: Vessel) -> sp.Warnings:
        """Refuse more crew than capacity; warn when there is no captain."""
        spec = obj.spec
        if spec.captain == CRASH_CAPTAIN:
            raise RuntimeError("the validator has a bug")
        if len(spec.crew) > spec.capacity:
            raise sp.Denied(
                f"spec.crew: {len(spec.crew)} people do not fit a capacity of {spec.capacity}",
                warnings=["consider a bigger vessel"],
            )
        if spec.captain is None:
            return [f"vessel {obj.metadata.name} has no captain: nobody is in command"]
        return None

    async def validate_update(self, old: Vessel, new: Vessel) -> sp.Warnings:
        """Refuse shrinking capacity (an async method, to show both kinds work)."""
        if new.spec.capacity < old.spec.capacity:
            raise sp.Denied(
                f"spec.capacity: cannot shrink from {old.spec.capacity} to {new.spec.capacity}"
            )
        return self.validate_create(new)


class VesselDefaulter(sp.CustomDefaulter[Vessel]):
    """Sets the home port, and puts a lone captain on the crew list."""

    def default(self, obj: Vessel) -> None:
        """Fill in spec.port and spec.crew."""
        if obj.spec.port is None:
            obj.spec.port = "home"
        if not obj.spec.crew and obj.spec.captain:
            obj.spec.crew = [obj.spec.captain]
