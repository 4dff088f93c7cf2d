"""JSON equality: the fast C comparison agrees with the recursive one on every JSON value."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from setpoint.api.jsonvalues import _json_equal, json_equal

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5])
    | (st.text(max_size=3))
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


def test_json_equality_is_not_pythons() -> None:
    """true is not 1, 1 is 1.0, key order does not matter, a map never equals a list."""
    assert not json_equal({"a": True}, {"a": 1})
    assert not json_equal([True, 0], [1, False])
    assert json_equal({"a": 1, "b": [1.0]}, {"b": [1], "a": 1.0})
    assert json_equal({"x": {"y": [1, {"z": None}]}}, {"x": {"y": [1, {"z": None}]}})
    assert not json_equal({}, [])
    assert not json_equal({"a": [1, 2]}, {"a": [2, 1]})
    assert json_equal("s", "s") and json_equal(None, None) and not json_equal(None, "")


@given(json_values, json_values)
def test_the_fast_path_agrees_with_the_recursive_comparison(a: Any, b: Any) -> None:
    """On any two JSON values (and a value and its copy) both comparisons give one answer."""
    assert json_equal(a, b) == _json_equal(a, b)
    assert json_equal(a, a) and _json_equal(a, a)
