"""``stored(fake, kind, name)``: an object the test expects the fake to hold, typed for indexing."""

from __future__ import annotations

from typing import Any

from setpoint.api.gvk import GroupVersionKind
from setpoint.testing import FakeClient


def stored(
    fake: FakeClient, kind: GroupVersionKind, name: str, *, namespace: str | None = None
) -> dict[str, Any]:
    """The stored JSON object (``fake.lookup``), failing the test when there is none."""
    obj = fake.lookup(kind, name, namespace=namespace)
    assert obj is not None, f"the fake holds no {kind.kind} {namespace or ''}/{name}"
    assert isinstance(obj, dict)
    return obj
