"""context_for and FakeRecorder, and the unit-test pattern of docs/guide/testing.md, verbatim.

The guide's first Python block is executed as written and its test functions are run, so
the documented pattern cannot drift from the API.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest

import setpoint as sp
from setpoint import kinds
from setpoint.testing import FakeClient, FakeRecorder, RecordedEvent, context_for

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "guide" / "testing.md"
MARKER = "<!-- This block runs verbatim in tests/unit/testing/test_context.py"


def guide_block() -> str:
    text = GUIDE.read_text()
    assert MARKER in text, "the guide's tested block lost its marker"
    after = text[text.index(MARKER) :]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match is not None
    return match.group(1)


def guide_tests() -> list[tuple[str, Callable[[], Awaitable[None]]]]:
    namespace: dict[str, Any] = {"__name__": "testing_guide"}
    exec(compile(guide_block(), str(GUIDE), "exec"), namespace)
    return [
        (name, fn)
        for name, fn in namespace.items()
        if name.startswith("test_") and inspect.iscoroutinefunction(fn)
    ]


def test_the_guide_block_has_tests() -> None:
    names = [name for name, _ in guide_tests()]
    assert names == [
        "test_reconcile_writes_the_config_once",
        "test_a_deleted_deployment_is_left_alone",
    ]


@pytest.mark.parametrize("name", [name for name, _ in guide_tests()])
async def test_the_guide_pattern_runs_verbatim(name: str) -> None:
    await dict(guide_tests())[name]()


def test_the_fake_module_docstring_uses_the_real_signature() -> None:
    """The FakeClient docstring shows the same call shape as the guide."""
    from setpoint.testing import fake

    doc = fake.__doc__ or ""
    assert "context_for(fake, " in doc
    assert "await reconcile(ctx, ctx.request)" in doc
    assert "reconcile(fake," not in doc


async def test_context_for_builds_what_a_controller_builds() -> None:
    fake = FakeClient()
    ctx = context_for(fake, sp.ObjectKey("ns", "a"), gvk=kinds.ConfigMap, controller="cms")
    assert ctx.request == sp.ObjectKey("ns", "a")
    assert ctx.client is fake
    assert ctx.reader is fake
    assert isinstance(ctx.recorder, FakeRecorder)
    assert ctx.controller == "cms"
    assert ctx.gvk == kinds.ConfigMap
    assert ctx.log.name == "setpoint.controller"
    assert dict(ctx.log.bound) == {
        "controller": "cms",
        "gvk": str(kinds.ConfigMap),
        "namespace": "ns",
        "name": "a",
        "reconcile_id": ctx.reconcile_id,
    }
    other = context_for(fake, sp.ObjectKey("ns", "a"))
    assert other.reconcile_id != ctx.reconcile_id
    assert other.gvk is None
    assert "gvk" not in other.log.bound


async def test_context_for_takes_a_typed_kind_and_no_recorder() -> None:
    class Widget:
        gvk: ClassVar[sp.GroupVersionKind] = sp.GroupVersionKind("example.dev", "v1", "Widget")

        @classmethod
        def from_object(cls, obj: Mapping[str, Any]) -> Self:
            return cls()

        def to_object(self) -> dict[str, Any]:
            return {}

    ctx = context_for(FakeClient(), sp.ObjectKey("", "w"), gvk=Widget, recorder=None)
    assert ctx.gvk == Widget.gvk
    assert ctx.recorder is None


def test_context_for_refuses_a_request_that_is_not_a_key() -> None:
    with pytest.raises(TypeError, match=r"ObjectKey\(namespace, name\)"):
        not_a_key: Any = "ns/a"
        context_for(FakeClient(), not_a_key)


def test_fake_recorder_records_what_the_real_recorder_sends() -> None:
    recorder = FakeRecorder()
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
    }
    recorder.normal(obj, "Created", "made it")
    recorder.warning(obj, "Failed", "broke")
    recorder.event(obj, "Normal", "Scaled", "to 3", action="Scale", related=obj)
    assert recorder.reasons() == ["Created", "Failed", "Scaled"]
    assert recorder.events[0] == RecordedEvent(
        "Normal",
        "Created",
        "made it",
        "Created",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "a",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
        },
    )
    assert recorder.events[2].action == "Scale"
    assert recorder.events[2].related is not None
    assert recorder.dropped == []


def test_fake_recorder_drops_what_the_real_recorder_drops() -> None:
    recorder = FakeRecorder()
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    recorder.event(obj, "Error", "Boom", "bad type")
    recorder.event(obj, "Normal", "", "no reason")
    recorder.event(obj, "Normal", "R" * 129, "long reason")
    recorder.event({"kind": "ConfigMap"}, "Normal", "NoName", "no name")
    assert recorder.events == []
    assert len(recorder.dropped) == 4
    assert "type must be 'Normal' or 'Warning'" in recorder.dropped[0]
    assert "reason must be 1-128 characters" in recorder.dropped[1]
    assert "apiVersion, kind and metadata.name" in recorder.dropped[3]
