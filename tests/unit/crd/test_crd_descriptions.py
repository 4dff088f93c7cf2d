"""Generated CRD schemas carry only user-facing text: no reST markup, no developer notes."""

from __future__ import annotations

import json
from typing import Any

from setpoint.crd.generator import crd_for
from setpoint.crd.schema import plain_text
from tests._support.gadgets import Gadget


def schema() -> dict[str, Any]:
    crd = crd_for(Gadget)
    root: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return root


def test_reST_markup_becomes_plain_text() -> None:
    """Literals, interpreted text and roles lose their markup; labels and names remain."""
    assert plain_text("set ``status`` with :func:`set_condition`") == (
        "set status with set_condition"
    )
    assert plain_text("a :class:`~setpoint.api.Condition`") == "a Condition"
    assert plain_text("see :doc:`the guide <guide/crds>`") == "see the guide"
    assert plain_text("a `value` here") == "a value here"
    assert plain_text("it's plain already: a, b.") == "it's plain already: a, b."


def test_no_markup_reaches_the_schema() -> None:
    """No description anywhere in the generated schema carries reST markup."""
    text = json.dumps(schema())
    for marker in ("``", ":func:", ":class:", ":meth:", "`~"):
        assert marker not in text, marker
    spec = schema()["properties"]["spec"]
    assert spec["description"] == "What the Gadget should do; see Model for the base."
    assert spec["properties"]["size"]["description"] == "How many parts to make (see make_parts)."


def test_conditions_show_plain_condition_text_and_the_users_own() -> None:
    """status.conditions: the user's description on the list, plain metav1-style text below.

    kubectl explain prints the list's description followed by its items' description; the
    items' text is the plain description of a condition, not setpoint's docstring.
    """
    conditions = schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["description"] == (
        "Ready: every part exists. Degraded: something needs attention."
    )
    items = conditions["items"]
    assert items["description"] == (
        "One aspect of the object's current state, as observed by its controller."
    )
    assert "setpoint" not in json.dumps(items)
    assert "metav1" not in json.dumps(items)
    assert items["properties"]["status"]["description"] == (
        "Whether the condition holds: True, False or Unknown."
    )


def test_a_model_can_describe_itself_apart_from_its_docstring() -> None:
    """__schema_doc__ replaces the docstring as the schema description of a model."""
    internal = schema()["properties"]["internal"]
    assert internal["description"] == "Extra settings for experts."
