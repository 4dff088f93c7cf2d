"""Label and field selectors: the API server's syntax, parsed and matched locally."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from setpoint.cache.selectors import FieldMatcher, LabelMatcher, SelectorError, field_value

LABELS = {"app": "web", "tier": "3", "example.com/owner": "team-a"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web, db)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("missing in (db)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("tier>2", True),
        ("tier<3", False),
        ("app>2", False),
        ("example.com/owner=team-a", True),
        ("app=web,tier in (1,3),!missing", True),
        ("app=web,tier in (1,2)", False),
        (" app = web , tier ", True),
        (
            "app in ()",
            False,
        ),  # "()" is the set holding only the empty string, as the server reads it
        ("missing notin ()", True),
    ],
)
def test_label_selector_semantics(selector: str, matches: bool) -> None:
    assert LabelMatcher.parse(selector).matches(LABELS) is matches


@pytest.mark.parametrize("bound", ["1_000", "99999999999999999999", "9223372036854775808"])
def test_comparison_bounds_go_does_not_read_are_refused(bound: str) -> None:
    """`>`/`<` bounds are 64-bit ASCII decimals, as strconv.ParseInt reads them (issue 18, item 11).

    Python's int() reads "1_000" and 20-digit values; the API server
    answers such a selector with a 400, so the cache must refuse it too.
    """
    with pytest.raises(SelectorError, match="the value must be an integer"):
        LabelMatcher.parse(f"size>{bound}")


@pytest.mark.parametrize(
    ("value", "matches"),
    [
        ("1_000", False),
        ("99999999999999999999", False),
        ("\u0667", False),
        ("007", True),
        ("12", True),
    ],
)
def test_comparison_reads_label_values_as_go_does(value: str, matches: bool) -> None:
    """A label value strconv.ParseInt cannot read matches no `>` (the server selects the same)."""
    assert LabelMatcher.parse("size>5").matches({"size": value}) is matches


def test_label_mapping_means_equality() -> None:
    selector = LabelMatcher.parse({"app": "web", "tier": "3"})
    assert selector.matches(LABELS)
    assert not selector.matches({"app": "web"})
    assert selector.equality_pairs() == {"app": "web", "tier": "3"}


def test_label_matches_object_metadata() -> None:
    selector = LabelMatcher.parse("app=web")
    assert selector.matches_object({"metadata": {"labels": {"app": "web"}}})
    assert not selector.matches_object({"metadata": {}})
    assert LabelMatcher.parse(None).matches_object({})


@pytest.mark.parametrize(
    "bad",
    [
        "app in (",
        "=web",
        "app=we b",
        "a b",
        "tier>x",
        "app)",
        "bad key!=x",
        "app in (a b)",
    ],
)
def test_malformed_label_selectors_are_named(bad: str) -> None:
    with pytest.raises(SelectorError, match="label selector"):
        LabelMatcher.parse(bad)


def test_selector_errors_carry_the_servers_wording() -> None:
    with pytest.raises(SelectorError) as label:
        LabelMatcher.parse("x in (a b)")
    assert label.value.reason == "unable to parse requirement: found 'b', expected: ',' or ')'"
    assert str(label.value).startswith("label selector 'x in (a b)': ")
    with pytest.raises(SelectorError) as field:
        FieldMatcher.parse("metadata.name in (a)")
    assert "can't understand 'metadata.name in (a)'" in field.value.reason


def test_field_selectors_can_be_limited_to_the_fields_a_kind_supports() -> None:
    supported = frozenset({"metadata.name", "metadata.namespace"})
    selector = FieldMatcher.parse("metadata.name=a,,metadata.namespace!=b")
    assert selector.require_fields(supported, custom=False) is selector
    with pytest.raises(SelectorError) as builtin:
        FieldMatcher.parse("spec.x=1").require_fields(supported, custom=False)
    assert builtin.value.reason == (
        '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    with pytest.raises(SelectorError) as custom:
        FieldMatcher.parse("spec.x=1").require_fields(supported, custom=True)
    assert custom.value.reason == "field label not supported: spec.x"


def test_label_selector_round_trips_through_str() -> None:
    text = "app=web,tier!=2,env in (dev,prod),!legacy,owner,tier>1"
    parsed = LabelMatcher.parse(text)
    assert LabelMatcher.parse(str(parsed)) == parsed


OBJ = {
    "metadata": {"name": "x", "namespace": "ns"},
    "spec": {"replicas": 3, "paused": False, "nodeName": "n1", "list": [1]},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("metadata.name=x", True),
        ("metadata.name==x", True),
        ("metadata.name!=x", False),
        ("metadata.namespace=ns,status.phase=Running", True),
        ("spec.replicas=3", True),
        ("spec.paused=false", True),
        ("spec.missing=", True),
        ("spec.missing!=", False),
        ("spec.list=", True),
        ("spec.nodeName!=n2", True),
    ],
)
def test_field_selector_semantics(selector: str, matches: bool) -> None:
    assert FieldMatcher.parse(selector).matches(OBJ) is matches


def test_field_selector_escapes() -> None:
    obj = {"metadata": {"name": "a,b=c\\d"}}
    selector = FieldMatcher.parse("metadata.name=a\\,b\\=c\\\\d")
    assert selector.requirements[0].value == "a,b=c\\d"
    assert selector.matches(obj)
    assert FieldMatcher.parse(str(selector)) == selector


@pytest.mark.parametrize("bad", ["metadata.name", "=x", "a=b\\q", "a=b\\"])
def test_malformed_field_selectors_are_named(bad: str) -> None:
    with pytest.raises(SelectorError, match="field selector"):
        FieldMatcher.parse(bad)


def test_field_value_renders_like_the_server() -> None:
    assert field_value(OBJ, "spec.replicas") == "3"
    assert field_value(OBJ, "spec.paused") == "false"
    assert field_value(OBJ, "metadata.name.deeper") == ""
    assert field_value(OBJ, "spec") == ""


label_keys = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
label_values = st.from_regex(r"([a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?)?", fullmatch=True)


@given(
    st.dictionaries(label_keys, label_values, max_size=5),
    st.dictionaries(label_keys, label_values, max_size=5),
)
def test_equality_selector_agrees_with_dict_subset(
    wanted: dict[str, str], labels: dict[str, str]
) -> None:
    selector = LabelMatcher.parse(wanted)
    assert selector.matches(labels) == all(labels.get(k) == v for k, v in wanted.items())
    assert LabelMatcher.parse(str(selector)).matches(labels) == selector.matches(labels)
