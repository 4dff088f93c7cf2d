"""The store: objects by key, the namespace index and secondary indexes stay consistent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from setpoint.api.keys import ObjectKey
from setpoint.cache.store import Store, by_label, parse_resource_version


def obj(name: str, namespace: str = "ns", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


def test_put_get_delete_and_namespace_index() -> None:
    store = Store()
    a, b = ObjectKey("ns", "a"), ObjectKey("other", "b")
    store.put(a, obj("a"))
    store.put(b, obj("b", "other"))
    store.put(a, obj("a", color="red"))
    assert store.get(a) == obj("a", color="red")
    assert len(store) == 2
    assert a in store
    assert set(store) == {a, b}
    assert store.keys_in_namespace("ns") == {a}
    assert store.delete(a) == obj("a", color="red")
    assert store.delete(a) is None
    assert store.keys_in_namespace("ns") == set()
    assert store.get(a) is None


def test_objects_are_kept_encoded_and_every_read_is_a_new_object() -> None:
    """The store keeps JSON bytes: later changes to the stored dict or to a read do not
    reach it; a value JSON cannot encode is kept as given rather than refused."""
    store = Store()
    a, b = ObjectKey("ns", "a"), ObjectKey("ns", "b")
    original = obj("a", color="red")
    store.put(a, original)
    original["metadata"]["labels"]["color"] = "changed after put"
    read = store.get(a)
    assert read == obj("a", color="red")
    assert read is not store.get(a)
    read["metadata"]["name"] = "mutated"
    assert store.get(a) == obj("a", color="red")
    snapshot = store.snapshot(a)
    assert isinstance(snapshot, bytes)
    store.put(a, obj("a", color="blue"))
    assert Store.decode(snapshot) == obj("a", color="red")  # a snapshot does not move
    odd = {"metadata": {"name": "b", "namespace": "ns"}, "when": {1, 2}}
    store.put(b, odd)
    assert store.get(b) is odd
    assert [k for k, _ in store.items()] == [a, b]
    assert next(iter(store.values())) == obj("a", color="blue")


def test_indexes_follow_changes_and_can_be_added_later() -> None:
    store = Store()
    a = ObjectKey("ns", "a")
    store.put(a, obj("a", color="red"))
    store.add_index("color", by_label("color"))
    assert store.keys_by_index("color", "red") == {a}
    store.put(a, obj("a", color="blue"))
    assert store.keys_by_index("color", "red") == set()
    assert store.keys_by_index("color", "blue") == {a}
    store.put(a, obj("a"))
    assert store.keys_by_index("color", "blue") == set()
    with pytest.raises(KeyError):
        store.keys_by_index("size", "x")
    with pytest.raises(ValueError, match="already exists"):
        store.add_index("color", by_label("color"))


def test_multi_value_and_failing_index_functions() -> None:
    store = Store()

    def tags(o: dict[str, Any]) -> list[str]:
        if o["metadata"]["name"] == "bad":
            raise RuntimeError("index bug")
        return list(o["metadata"]["labels"].values())

    store.add_index("tags", tags)
    store.put(ObjectKey("ns", "a"), obj("a", x="1", y="2"))
    store.put(ObjectKey("ns", "bad"), obj("bad", x="1"))
    assert store.keys_by_index("tags", "1") == {ObjectKey("ns", "a")}
    assert store.keys_by_index("tags", "2") == {ObjectKey("ns", "a")}


def test_resource_versions_parse_only_as_decimal_integers() -> None:
    assert parse_resource_version("12345") == 12345
    assert parse_resource_version("") is None
    assert parse_resource_version("v12") is None
    assert parse_resource_version("-1") is None


@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.one_of(st.none(), st.sampled_from(["r", "g", "b"]))),
        max_size=40,
    )
)
def test_index_always_equals_a_recomputation(ops: list[tuple[str, str | None]]) -> None:
    store = Store()
    store.add_index("color", by_label("color"))
    for name, color in ops:
        key = ObjectKey("ns", name)
        if color is None:
            store.delete(key)
        else:
            store.put(key, obj(name, color=color))
    for color in "rgb":
        expected = {k for k in store if store.get(k)["metadata"]["labels"]["color"] == color}  # type: ignore[index]
        assert store.keys_by_index("color", color) == expected
