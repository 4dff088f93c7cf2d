"""Selectors as the API server reads them: every operator, and the server's own complaints.

These cases were the test kit's; the fake client and the cache now share one parser, so
both answer as kube-apiserver does (the parity tests hold the fake to the real server).
"""

import pytest

from setpoint.api.validation import label_value_problem
from setpoint.api.validation import qualified_name_problem as label_key_problem
from setpoint.cache.selectors import FieldMatcher, LabelMatcher, SelectorError


def parse_label_selector(selector: str | dict[str, str] | None) -> LabelMatcher:
    return LabelMatcher.parse(selector)


def parse_field_selector(
    selector: str | dict[str, str] | None, supported: frozenset[str], *, custom: bool
) -> FieldMatcher:
    return FieldMatcher.parse(selector).require_fields(supported, custom=custom)


LABELS = {
    "web": {"app": "web", "tier": "fe", "rank": "3"},
    "db": {"app": "db", "rank": "10"},
    "empty": {"app": ""},
    "none": {},
    "prefixed": {"example.com/role": "x"},
}


def selected(selector: str | dict[str, str]) -> set[str]:
    parsed = parse_label_selector(selector)
    return {name for name, labels in LABELS.items() if parsed.matches(labels)}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", set(LABELS)),
        ("app=web", {"web"}),
        ("app==web", {"web"}),
        ("app = web", {"web"}),
        ("app!=web", {"db", "empty", "none", "prefixed"}),
        ("app in (web, db)", {"web", "db"}),
        ("app notin (web)", {"db", "empty", "none", "prefixed"}),
        ("app in ()", {"empty"}),
        ("app in (web,)", {"web", "empty"}),
        ("app", {"web", "db", "empty"}),
        ("!app", {"none", "prefixed"}),
        ("app,tier", {"web"}),
        ("app=", {"empty"}),
        ("app!=", {"web", "db", "none", "prefixed"}),
        ("rank>5", {"db"}),
        ("rank<5", {"web"}),
        ("example.com/role=x", {"prefixed"}),
        ("app in (web,db),rank>5", {"db"}),
    ],
)
def test_label_selector_operators(selector: str, expected: set[str]) -> None:
    assert selected(selector) == expected


def test_mapping_selector_means_equality_on_every_entry() -> None:
    assert selected({"app": "web", "tier": "fe"}) == {"web"}
    assert selected({}) == set(LABELS)


@pytest.mark.parametrize(
    ("selector", "complaint"),
    [
        ("bad selector!", "found 'selector', expected: in, notin, =, ==, !=, gt, lt"),
        ("x in (a b)", "found 'b', expected: ',' or ')'"),
        ("app=web=x", "found '=', expected: ',' or 'end of string'"),
        ("!app=web", "found '=', expected: ',' or 'end of string'"),
        ("app in web", "found 'web' expected: '('"),
        ("rank>x", "must be an integer"),
        ("a b", "found 'b'"),
        ("=x", "expected: !, identifier"),
        ("-bad-=x", "invalid label key"),
        ("app=-x-", "invalid label value"),
    ],
)
def test_malformed_label_selectors(selector: str, complaint: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector(selector)
    assert complaint in str(info.value)


def test_label_key_and_value_rules() -> None:
    assert label_key_problem("app") is None
    assert label_key_problem("example.com/app") is None
    assert label_key_problem("Example.com/app") is not None
    assert label_key_problem("a" * 64) is not None
    assert label_key_problem("a b") is not None
    assert label_key_problem("x/") is not None
    assert label_value_problem("") is None
    assert label_value_problem("v1.2_3-x") is None
    assert label_value_problem("v" * 64) is not None
    assert label_value_problem("-x") is not None


SUPPORTED = frozenset({"metadata.name", "metadata.namespace"})


def test_field_selectors_match_paths() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}}
    assert parse_field_selector("metadata.name=a", SUPPORTED, custom=False).matches(obj)
    assert not parse_field_selector("metadata.name!=a", SUPPORTED, custom=False).matches(obj)
    assert parse_field_selector(
        "metadata.name==a,metadata.namespace=ns", SUPPORTED, custom=False
    ).matches(obj)
    assert not parse_field_selector("metadata.namespace=other", SUPPORTED, custom=True).matches(obj)
    assert parse_field_selector({"metadata.name": "a"}, SUPPORTED, custom=False).matches(obj)
    assert parse_field_selector(None, SUPPORTED, custom=False).matches(obj)


def test_unsupported_fields_use_the_servers_wording() -> None:
    with pytest.raises(SelectorError) as builtin:
        parse_field_selector("spec.x=1", SUPPORTED, custom=False)
    assert builtin.value.reason == (
        '"spec.x" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    with pytest.raises(SelectorError) as custom:
        parse_field_selector("spec.x=1", SUPPORTED, custom=True)
    assert custom.value.reason == "field label not supported: spec.x"
    with pytest.raises(SelectorError, match="can't understand"):
        parse_field_selector("metadata.name in (a)", SUPPORTED, custom=False)
