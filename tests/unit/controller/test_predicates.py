"""Predicates: which events may enqueue a reconcile."""

from __future__ import annotations

from typing import Any

import pytest

from setpoint.controller.predicates import (
    AddEvent,
    AnnotationsChanged,
    DeleteEvent,
    GenerationChanged,
    LabelsChanged,
    LabelSelectorPredicate,
    ResourceVersionChanged,
    UpdateEvent,
    all_of,
    any_of,
    check_predicates,
    not_,
)


def obj(generation: int = 1, rv: str = "1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x", "generation": generation, "resourceVersion": rv, **meta}}


ADD = AddEvent(obj(), is_initial_list=True)
DELETE = DeleteEvent(obj(), final_state_unknown=True)


@pytest.mark.parametrize(
    ("predicate", "old", "new", "expected"),
    [
        (GenerationChanged(), obj(1), obj(2), True),
        (GenerationChanged(), obj(1, rv="1"), obj(1, rv="2"), False),
        (GenerationChanged(), {"metadata": {}}, {"metadata": {}}, False),
        (LabelsChanged(), obj(labels={"a": "1"}), obj(labels={"a": "2"}), True),
        (LabelsChanged(), obj(labels={"a": "1"}), obj(2, labels={"a": "1"}), False),
        (LabelsChanged(), obj(), obj(labels={}), False),
        (AnnotationsChanged(), obj(annotations={"a": "1"}), obj(), True),
        (AnnotationsChanged(), obj(annotations={"a": "1"}), obj(annotations={"a": "1"}), False),
        (ResourceVersionChanged(), obj(rv="1"), obj(rv="2"), True),
        (ResourceVersionChanged(), obj(rv="1"), obj(rv="1"), False),
    ],
)
def test_changed_predicates_compare_updates(
    predicate: Any, old: dict[str, Any], new: dict[str, Any], expected: bool
) -> None:
    assert predicate(UpdateEvent(old, new)) is expected
    # Adds and deletes have nothing to compare: they pass.
    assert predicate(ADD) is True
    assert predicate(DELETE) is True


def test_update_event_object_is_the_new_state() -> None:
    old, new = obj(1), obj(2)
    assert UpdateEvent(old, new).object is new


def test_label_selector_predicate() -> None:
    predicate = LabelSelectorPredicate("app in (web),!legacy")
    assert predicate(AddEvent(obj(labels={"app": "web"})))
    assert not predicate(AddEvent(obj(labels={"app": "web", "legacy": "y"})))
    assert not predicate(UpdateEvent(obj(labels={"app": "web"}), obj(labels={"app": "db"})))
    assert LabelSelectorPredicate({"app": "web"})(DeleteEvent(obj(labels={"app": "web"})))
    assert "app in (web)" in repr(predicate)


def test_combinators() -> None:
    yes = lambda event: True  # noqa: E731
    no = lambda event: False  # noqa: E731
    assert all_of()(ADD) is True
    assert all_of(yes, yes)(ADD) is True
    assert all_of(yes, no)(ADD) is False
    assert any_of(no, yes)(ADD) is True
    assert any_of()(ADD) is False
    assert not_(no)(ADD) is True
    spec_or_labels = any_of(GenerationChanged(), LabelsChanged())
    assert spec_or_labels(UpdateEvent(obj(1), obj(1, labels={"a": "b"})))
    assert not spec_or_labels(UpdateEvent(obj(1, rv="1"), obj(1, rv="2")))
    assert repr(not_(GenerationChanged())) == "not_(GenerationChanged())"
    with pytest.raises(TypeError, match="not a predicate"):
        not_a_predicate: Any = "nope"  # deliberately the wrong type
        all_of(not_a_predicate)


def test_builder_predicate_lists_are_checked() -> None:
    assert check_predicates([GenerationChanged()])[0].__class__ is GenerationChanged
    with pytest.raises(TypeError, match="list of predicates"):
        check_predicates(GenerationChanged())
    with pytest.raises(TypeError, match="not a predicate"):
        check_predicates([42])
