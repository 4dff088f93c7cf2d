"""sp.LabelSelector: metav1.LabelSelector as a typed model, validated, with to_selector()."""

from __future__ import annotations

import pydantic
import pytest

import setpoint as sp
from setpoint.cache.selectors import LabelMatcher

SELECTOR = {
    "matchLabels": {"team": "a"},
    "matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod", "dev"]},
        {"key": "example.com/tier", "operator": "NotIn", "values": ["db"]},
        {"key": "owner", "operator": "Exists"},
        {"key": "legacy", "operator": "DoesNotExist"},
    ],
}

LABEL_SETS = [
    {"team": "a", "env": "dev", "owner": "x"},
    {"team": "a", "env": "qa", "owner": "x"},
    {"team": "a", "env": "prod", "owner": "x", "example.com/tier": "db"},
    {"team": "a", "env": "prod", "owner": "x", "legacy": ""},
    {"team": "b", "env": "prod", "owner": "x"},
    {"team": "a", "env": "prod"},
]


def test_to_selector_is_the_list_and_watch_syntax() -> None:
    """The selector string reads as the API server's syntax, sorted for stable requests."""
    selector = sp.LabelSelector.model_validate(SELECTOR)
    assert selector.to_selector() == (
        "team=a,env in (dev,prod),example.com/tier notin (db),owner,!legacy"
    )
    assert sp.LabelSelector().to_selector() == ""
    assert sp.LabelSelector().empty


@pytest.mark.parametrize("labels", LABEL_SETS)
def test_matches_agrees_with_the_parsed_selector(labels: dict[str, str]) -> None:
    """matches() and the server-syntax parser of the cache decide every label set alike."""
    selector = sp.LabelSelector.model_validate(SELECTOR)
    parsed = LabelMatcher.parse(selector.to_selector())
    assert selector.matches(labels) == parsed.matches(labels)


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"matchLabels": {"not a label!": "x"}}, "matchLabels key 'not a label!'"),
        ({"matchLabels": {"team": "bad value!"}}, "matchLabels['team']"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "needs at least one value"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["b"]}]},
            "takes no values",
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "operator"),
        ({"matchExpressions": [{"key": "a b", "operator": "Exists"}]}, "key:"),
    ],
)
def test_invalid_selectors_are_refused_naming_the_field(bad: dict[str, object], says: str) -> None:
    """A selector the API server would refuse is refused when parsed, naming the part."""
    with pytest.raises(pydantic.ValidationError, match=says.replace("[", r"\[")):
        sp.LabelSelector.model_validate(bad)


def test_a_spec_field_round_trips_in_the_crd_schema() -> None:
    """As a spec field it serializes in camelCase and carries CEL rules for the server."""

    class MirrorSpec(sp.Model):
        """A spec."""

        namespace_selector: sp.LabelSelector = sp.field(default_factory=sp.LabelSelector)
        """Where to mirror."""

    @sp.resource(group="labelselector.test.setpoint.dev", version="v1")
    class Mirror(sp.Resource):
        """A kind."""

        spec: MirrorSpec

    from setpoint.crd.generator import crd_for

    schema = crd_for(Mirror)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    node = schema["properties"]["spec"]["properties"]["namespaceSelector"]
    assert set(node["properties"]) == {"matchLabels", "matchExpressions"}
    requirement = node["properties"]["matchExpressions"]["items"]
    assert requirement["properties"]["operator"]["enum"] == [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
    ]
    assert requirement["x-kubernetes-validations"]
    parsed = Mirror.model_validate(
        {
            "apiVersion": "labelselector.test.setpoint.dev/v1",
            "kind": "Mirror",
            "metadata": {"name": "m"},
            "spec": {"namespaceSelector": {"matchLabels": {"team": "a"}}},
        }
    )
    assert parsed.spec.namespace_selector.to_selector() == "team=a"
