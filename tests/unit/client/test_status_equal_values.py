"""update_status writes nothing when a typed mutation assigns the values already there."""

from __future__ import annotations

import setpoint as sp
from setpoint.testing import FakeClient


class PartStatus(sp.Model):
    """A status whose fields all have defaults."""

    ready: bool = False
    """Whether it is ready."""
    parts: list[str] = sp.field(default_factory=list)
    """The parts."""
    observed_generation: int | None = None
    """The generation observed."""


class PartSpec(sp.Model):
    """Nothing much."""

    size: int = 1
    """A size."""


@sp.resource(group="equal.test.setpoint.dev", version="v1")
class Part(sp.Resource):
    """A kind with a status subresource."""

    spec: PartSpec = sp.field(default_factory=PartSpec)
    status: PartStatus | None = None


def part() -> dict[str, object]:
    return {
        "apiVersion": "equal.test.setpoint.dev/v1",
        "kind": "Part",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"size": 1},
    }


async def test_assigning_equal_values_writes_nothing() -> None:
    """Assigning default values to absent fields, and equal values to present ones: UNCHANGED.

    The status holds only observedGeneration; the mutation assigns it again, and assigns
    ready=False and parts=[] (their defaults, absent from the JSON). No request is sent.
    """
    # Served without its schema, which would default ready=false as the server does.
    fake = FakeClient(resources=[Part.resource_info()])
    await fake.create(part())
    first = await sp.update_status(
        fake, await fake.get(Part, "p", namespace="default"), lambda o: _observe(o, 1)
    )
    assert first.outcome is sp.OperationResult.UPDATED
    live = await fake.get(Part, "p", namespace="default")
    assert live.to_object()["status"] == {"observedGeneration": 1}
    writes = len(fake.faults.calls_to("update"))

    def same(obj: Part) -> None:
        assert obj.status is not None
        obj.status.observed_generation = 1
        obj.status.ready = False
        obj.status.parts = []

    result = await sp.update_status(fake, live, same)
    assert result.outcome is sp.OperationResult.UNCHANGED
    assert len(fake.faults.calls_to("update")) == writes


async def test_a_real_change_is_still_written() -> None:
    """A value that differs from what the status holds is written, defaults and all."""
    fake = FakeClient(resources=[Part])
    await fake.create(part())
    live = await fake.get(Part, "p", namespace="default")

    def ready(obj: Part) -> None:
        _observe(obj, 1)
        assert obj.status is not None
        obj.status.ready = True

    result = await sp.update_status(fake, live, ready)
    assert result.outcome is sp.OperationResult.UPDATED
    stored = await fake.get(Part, "p", namespace="default")
    assert stored.status is not None and stored.status.ready is True


def _observe(obj: Part, generation: int) -> None:
    obj.status = obj.status or PartStatus()
    obj.status.observed_generation = generation
