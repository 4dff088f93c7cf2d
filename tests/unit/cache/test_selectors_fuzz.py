"""The selector parser on random input: a selector or a SelectorError, nothing else.

Random strings built from the pieces of the selector grammar (operators, parentheses,
commas, escapes, keys with prefixes, numbers Python reads and Go does not) and random label
sets. A parsed label selector must evaluate on any labels without raising, and print as a
string that parses back to the same requirements. SETPOINT_FUZZ_EXAMPLES sets the number of
examples (small in CI; ``make fuzz`` runs thousands).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.cache.selectors import FieldMatcher, LabelMatcher, SelectorError

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

PIECES = [
    "app",
    "tier",
    "example.com/app",
    "a/b/c",
    "-x",
    "x" * 70,
    "web",
    "",
    "=",
    "==",
    "!=",
    "!",
    "in",
    "notin",
    "(",
    ")",
    ",",
    ">",
    "<",
    " ",
    "5",
    "007",
    "1_000",
    "99999999999999999999",
    "\u0661\u0662",
    "-3",
    "+4",
    "\\",
    "\\,",
    "metadata.name",
    "spec.x",
    "\t",
    "\n",
]

text = st.lists(st.sampled_from(PIECES), max_size=12).map("".join)
labels = st.dictionaries(
    st.sampled_from(["app", "tier", "example.com/app", "size"]),
    st.sampled_from(["web", "", "5", "007", "1_000", "99999999999999999999", "12"]),
    max_size=4,
)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text, labels)
def test_random_label_selectors(selector: str, label_set: dict[str, str]) -> None:
    """Parse: a LabelMatcher or SelectorError; a parsed one evaluates and round-trips."""
    try:
        parsed = LabelMatcher.parse(selector)
    except SelectorError:
        return
    assert isinstance(parsed.matches(label_set), bool)
    again = LabelMatcher.parse(str(parsed))
    assert set(again.requirements) == set(parsed.requirements)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text, st.dictionaries(st.sampled_from(["metadata", "spec"]), st.text(max_size=4)))
def test_random_field_selectors(selector: str, obj: dict[str, str]) -> None:
    """Parse: a FieldMatcher or SelectorError; a parsed one evaluates on any object."""
    try:
        parsed = FieldMatcher.parse(selector)
    except SelectorError:
        return
    assert isinstance(parsed.matches(obj), bool)
