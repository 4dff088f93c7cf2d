"""The Cache: shared informers, the Reader protocol, selectors, indexes, options, lifecycle."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import pytest

from setpoint.api.gvk import GroupVersionKind
from setpoint.api.runnable import Runnable, RunnableGroup
from setpoint.cache import (
    Cache,
    CacheNotStarted,
    CacheOptions,
    KindNotServed,
    KindOptions,
    NotCached,
    by_controller,
    by_field,
    by_owner_uid,
    keep_as_received,
)
from setpoint.cache.selectors import SelectorError
from setpoint.client.errors import NotFound
from setpoint.client.protocols import Reader
from setpoint.testing import FakeClient, eventually
from tests._support.widgets import CLUSTER_THING, WIDGET, fake_api, put, widget


@dataclass
class Widget:
    """A minimal typed object (the TypedObject protocol), standing in for a Resource."""

    gvk: ClassVar[GroupVersionKind] = WIDGET
    name: str
    namespace: str
    color: str
    raw: dict[str, Any]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        return cls(
            obj["metadata"]["name"],
            obj["metadata"]["namespace"],
            (obj.get("spec") or {}).get("color", ""),
            dict(obj),
        )

    def to_object(self) -> dict[str, Any]:
        return self.raw


def owned(name: str, owner_uid: str, owner_name: str, **extra: Any) -> dict[str, Any]:
    ref = {
        "apiVersion": "test.setpoint.dev/v1",
        "kind": "Parent",
        "name": owner_name,
        "uid": owner_uid,
        "controller": True,
    }
    return widget(name, metadata={"ownerReferences": [ref]}, **extra)


@pytest.fixture
async def api() -> FakeClient:
    fake = fake_api()
    await put(
        fake, widget("a", metadata={"labels": {"app": "web", "tier": "1"}}, spec={"color": "red"})
    )
    await put(
        fake, widget("b", metadata={"labels": {"app": "db", "tier": "2"}}, spec={"color": "blue"})
    )
    await put(fake, widget("c", namespace="other", spec={"color": "red"}))
    return fake


@pytest.fixture
async def cache(api: FakeClient) -> AsyncIterator[Cache]:
    c = Cache(api)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(5)


async def test_cache_is_a_runnable_and_a_reader(cache: Cache) -> None:
    assert isinstance(cache, Runnable)
    assert isinstance(cache, Reader)
    assert cache.group is RunnableGroup.CACHES
    assert cache.needs_leader_election is False
    assert cache.name == "cache"
    assert cache.failure() is None


async def test_get_returns_a_copy_and_lazily_creates_the_informer(cache: Cache) -> None:
    assert cache.informers() == []
    obj = await cache.get(WIDGET, "a", namespace="default")
    assert obj["spec"] == {"color": "red"}
    assert len(cache.informers()) == 1
    assert cache.synced
    obj["spec"]["color"] = "mutated"
    again = await cache.get(WIDGET, "a", namespace="default")
    assert again["spec"]["color"] == "red"
    assert cache.informer(WIDGET) is cache.informer(Widget)


async def test_typed_kinds_return_typed_objects(cache: Cache) -> None:
    one = await cache.get(Widget, "a", namespace="default")
    assert isinstance(one, Widget)
    assert one.color == "red"
    many = await cache.list(Widget, namespace="default")
    assert [w.name for w in many] == ["a", "b"]
    assert all(isinstance(w, Widget) for w in many)


async def test_not_found_is_the_clients_error(cache: Cache) -> None:
    with pytest.raises(NotFound) as caught:
        await cache.get(WIDGET, "nope", namespace="default")
    error = caught.value
    assert error.code == 404
    assert error.reason == "NotFound"
    assert error.details["name"] == "nope"
    assert 'widgets.test.setpoint.dev "nope" not found' in str(error)
    assert "cache" in str(error)


async def test_namespace_rules_match_the_client(cache: Cache, api: FakeClient) -> None:
    with pytest.raises(ValueError, match="namespaced"):
        await cache.get(WIDGET, "a")
    thing = {"apiVersion": CLUSTER_THING.api_version, "kind": CLUSTER_THING.kind}
    await put(api, {**thing, "metadata": {"name": "t"}}, kind=CLUSTER_THING)
    assert (await cache.get(CLUSTER_THING, "t"))["metadata"]["name"] == "t"
    with pytest.raises(ValueError, match="cluster-scoped"):
        await cache.get(CLUSTER_THING, "t", namespace="default")
    with pytest.raises(ValueError, match="cluster-scoped"):
        await cache.list(CLUSTER_THING, namespace="default")


async def test_list_by_namespace_labels_and_fields(cache: Cache) -> None:
    async def names(**kwargs: Any) -> list[str]:
        return [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in
                await cache.list(WIDGET, **kwargs)]  # fmt: skip

    assert await names() == ["default/a", "default/b", "other/c"]
    assert await names(namespace="default") == ["default/a", "default/b"]
    assert await names(labels={"app": "web"}) == ["default/a"]
    assert await names(labels="app in (web,db),tier!=2") == ["default/a"]
    assert await names(labels="!app") == ["other/c"]
    assert await names(labels="tier>1") == ["default/b"]
    assert await names(fields="spec.color=red") == ["default/a", "other/c"]
    assert await names(fields={"metadata.name": "b"}) == ["default/b"]
    assert await names(fields="spec.color!=red,metadata.namespace=default") == ["default/b"]
    listing = await cache.list(WIDGET)
    assert listing.resource_version == cache.informer(WIDGET).resource_version
    with pytest.raises(SelectorError):
        await cache.list(WIDGET, labels="app in (")


async def test_field_index_is_used_for_field_selectors(cache: Cache) -> None:
    # An index that deliberately disagrees with the field (it leaves "c" out) proves that
    # the list consulted the index rather than scanning every object.
    def partial(obj: dict[str, Any]) -> str | None:
        return "red" if obj["metadata"]["name"] == "a" else None

    assert [o["metadata"]["name"] for o in await cache.list(WIDGET, fields="spec.color=red")] == [
        "a",
        "c",
    ]
    cache.add_index(WIDGET, "field:spec.color", partial)
    red = await cache.list(WIDGET, fields="spec.color=red")
    assert [o["metadata"]["name"] for o in red] == ["a"]
    # Negated requirements cannot use an index; they scan.
    not_red = await cache.list(WIDGET, fields="spec.color!=red")
    assert [o["metadata"]["name"] for o in not_red] == ["b"]


def test_by_field_indexes_the_selector_value() -> None:
    index = by_field("spec.replicas")
    assert index(widget("x", spec={"replicas": 3})) == "3"
    assert index(widget("x")) == ""


async def test_owner_and_controller_indexes(cache: Cache, api: FakeClient) -> None:
    await put(api, owned("child-1", "uid-p", "parent"))
    await put(api, owned("child-2", "uid-p", "parent"))
    await put(api, owned("child-3", "uid-q", "other-parent"))
    cache.add_index(WIDGET, "owner", by_owner_uid)
    cache.add_index(
        WIDGET, "controller", by_controller(GroupVersionKind("test.setpoint.dev", "v2", "Parent"))
    )
    await cache.wait_for_sync(5)
    await eventually(lambda: len(cache.informer(WIDGET).store) == 6, timeout=5)
    children = await cache.list_by_index(WIDGET, "owner", "uid-p")
    assert [o["metadata"]["name"] for o in children] == ["child-1", "child-2"]
    controlled = await cache.list_by_index(WIDGET, "controller", "default/other-parent")
    assert [o["metadata"]["name"] for o in controlled] == ["child-3"]
    typed = await cache.list_by_index(Widget, "owner", "uid-q")
    assert isinstance(typed.items[0], Widget)
    with pytest.raises(KeyError, match="add_index"):
        await cache.list_by_index(WIDGET, "missing", "x")
    with pytest.raises(ValueError, match="already exists"):
        cache.add_index(WIDGET, "owner", by_owner_uid)


async def test_reads_before_start_fail_clearly(api: FakeClient) -> None:
    cache = Cache(api)
    with pytest.raises(CacheNotStarted, match="start"):
        await cache.get(WIDGET, "a", namespace="default")
    with pytest.raises(CacheNotStarted):
        await cache.wait_for_sync(1)
    await cache.stop(1)


async def test_informers_created_before_start_start_with_the_cache(api: FakeClient) -> None:
    cache = Cache(api)
    informer = cache.informer(WIDGET)
    assert not informer.started
    await cache.start()
    try:
        assert informer.started
        await cache.wait_for_sync(5)
        assert cache.synced
        assert len(informer.store) == 3
    finally:
        await cache.stop(5)
    assert not cache.started


async def test_unknown_kind_is_named_in_wait_for_sync(cache: Cache) -> None:
    missing = GroupVersionKind("missing.setpoint.dev", "v1", "Gadget")
    cache.informer(WIDGET)
    cache.informer(missing)
    with pytest.raises(KindNotServed, match="Gadget"):
        await cache.wait_for_sync(30)
    with pytest.raises(KindNotServed, match="Gadget"):
        await cache.get(missing, "x", namespace="default")


async def test_namespaced_cache_refuses_other_namespaces(api: FakeClient) -> None:
    cache = Cache(api, options=CacheOptions(namespaces=("default",)))
    await cache.start()
    try:
        names = [o["metadata"]["name"] for o in await cache.list(WIDGET)]
        assert names == ["a", "b"]
        with pytest.raises(NotCached, match="other"):
            await cache.get(WIDGET, "c", namespace="other")
        with pytest.raises(NotCached, match=r"CacheOptions\.namespaces"):
            await cache.list(WIDGET, namespace="other")
    finally:
        await cache.stop(5)


async def test_per_kind_options_override_the_defaults(api: FakeClient) -> None:
    await put(api, widget("m", data={"kept": "as sent"}))
    options = CacheOptions(
        namespaces=("default",),
        by_kind={WIDGET: KindOptions(namespaces=(), labels="", transform=keep_as_received)},
        labels="app=web",
    )
    effective = options.informer_options(WIDGET)
    assert effective.namespaces == ()
    assert effective.labels is None
    assert effective.transform is keep_as_received
    other = options.informer_options(CLUSTER_THING)
    assert other.namespaces == ("default",)
    assert other.labels == "app=web"
    cache = Cache(api, options=options)
    await cache.start()
    try:
        listing = await cache.list(WIDGET)
        assert len(listing) == 4
        m = await cache.get(WIDGET, "m", namespace="default")
        assert m == api.lookup(WIDGET, "m", namespace="default")  # no transform applied
    finally:
        await cache.stop(5)


async def test_every_read_returns_an_object_the_caller_owns(api: FakeClient) -> None:
    """Reads decode the store's JSON anew, copy_on_read=False included: mutating one read
    changes neither the cache nor the next read."""
    cache = Cache(api, options=CacheOptions(copy_on_read=False))
    await cache.start()
    try:
        first = await cache.get(WIDGET, "a", namespace="default")
        first["spec"]["color"] = "mutated"
        second = await cache.get(WIDGET, "a", namespace="default")
        assert second is not first
        assert second["spec"]["color"] == "red"
    finally:
        await cache.stop(5)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="empty name"):
        CacheOptions(namespaces=("",))
    with pytest.raises(ValueError, match="sync_timeout"):
        CacheOptions(sync_timeout=0)
    with pytest.raises(TypeError, match="KindOptions"):
        CacheOptions(by_kind={WIDGET: {"namespaces": ()}})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="resync_period"):
        KindOptions(resync_period=-1)
    with pytest.raises(TypeError, match="not a kind"):
        CacheOptions(by_kind={"Widget": KindOptions()})  # type: ignore[dict-item]
    assert CacheOptions(by_kind={Widget: KindOptions()}).by_kind == {WIDGET: KindOptions()}
