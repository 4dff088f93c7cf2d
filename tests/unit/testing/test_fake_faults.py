"""Fault injection: rules on the fake, and the interceptor around any client."""

import asyncio
from typing import Any

import pytest

from setpoint.api import kinds
from setpoint.api.clock import LoopClock
from setpoint.api.gvk import GroupVersionKind
from setpoint.api.kinds import ResourceInfo
from setpoint.client.errors import (
    Conflict,
    ConnectionFailed,
    Gone,
    InternalError,
    NotFound,
    RequestTimeout,
    ServerTimeout,
    TooManyRequests,
)
from setpoint.client.patch import MergePatch
from setpoint.testing.fake import FakeClient
from setpoint.testing.faults import Call, FaultInjectingClient, Faults
from tests._support.stored import stored
from tests._support.virtual_time import RecordingClock, run_timers


def cm(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns"},
        "data": dict(data),
    }


async def test_fail_next_with_a_class_builds_a_server_like_error() -> None:
    fake = FakeClient(objects=[cm("a")])
    rule = fake.faults.fail_next("update", kind=kinds.ConfigMap, error=Conflict)
    current = await fake.get(kinds.ConfigMap, "a", namespace="ns")
    with pytest.raises(Conflict) as info:
        await fake.update(current)
    assert info.value.code == 409
    assert info.value.details["name"] == "a"
    assert "injected fault" in str(info.value)
    assert rule.hits == 1 and rule not in fake.faults.rules
    assert (await fake.update(current))["metadata"]["name"] == "a"  # only the next one failed


async def test_error_kinds_and_defaults() -> None:
    fake = FakeClient(objects=[cm("a")])
    fake.faults.fail_next("get")
    with pytest.raises(InternalError):
        await fake.get(kinds.ConfigMap, "a", namespace="ns")
    fake.faults.fail_next("get", error=TooManyRequests)
    with pytest.raises(TooManyRequests) as throttled:
        await fake.get(kinds.ConfigMap, "a", namespace="ns")
    assert throttled.value.retry_after == 1
    fake.faults.fail_next("get", error=ServerTimeout)
    with pytest.raises(ServerTimeout):
        await fake.get(kinds.ConfigMap, "a", namespace="ns")
    fake.faults.fail_next("get", error=ConnectionFailed)
    with pytest.raises(ConnectionFailed):
        await fake.get(kinds.ConfigMap, "a", namespace="ns")
    fake.faults.fail_next("get", error=RuntimeError)
    with pytest.raises(RuntimeError, match="injected fault on get"):
        await fake.get(kinds.ConfigMap, "a", namespace="ns")
    instance = NotFound("custom", code=404)
    fake.faults.fail_next("get", error=instance, times=2)
    for _ in range(2):
        with pytest.raises(NotFound, match="custom") as info:
            await fake.get(kinds.ConfigMap, "a", namespace="ns")
        assert info.value is not instance  # a copy per raise
    fake.faults.fail_next("get", error=lambda call: ValueError(f"no {call.name}"))
    with pytest.raises(ValueError, match="no a"):
        await fake.get(kinds.ConfigMap, "a", namespace="ns")
    assert (await fake.get(kinds.ConfigMap, "a", namespace="ns"))["metadata"]["name"] == "a"


async def test_matching_skip_times_and_removal() -> None:
    fake = FakeClient(objects=[cm("a"), cm("b")])
    rule = fake.faults.fail_next("get", name="b", skip=1, times=None)
    await fake.get(kinds.ConfigMap, "a", namespace="ns")  # other name: not matched
    await fake.get(kinds.ConfigMap, "b", namespace="ns")  # skipped
    for _ in range(2):
        with pytest.raises(InternalError):
            await fake.get(kinds.ConfigMap, "b", namespace="ns")
    assert (rule.seen, rule.hits) == (3, 2)
    rule.remove()
    await fake.get(kinds.ConfigMap, "b", namespace="ns")
    fake.faults.fail_next("*", kind=kinds.Secret)
    await fake.get(kinds.ConfigMap, "a", namespace="ns")  # other kind
    fake.faults.fail_next(["create", "delete"], namespace="elsewhere")
    await fake.create(cm("c"))
    with pytest.raises(ValueError, match="unknown verb"):
        unknown_verb: Any = "frobnicate"  # deliberately not a verb
        fake.faults.fail_next(unknown_verb)
    with pytest.raises(ValueError, match="times"):
        fake.faults.fail_next("get", times=0)
    with pytest.raises(ValueError, match="skip"):
        fake.faults.fail_next("get", skip=-1)
    with pytest.raises(TypeError, match="kind must be"):
        kind_name: Any = "ConfigMap"  # deliberately a name, not a GroupVersionKind
        fake.faults.fail_next("get", kind=kind_name)


async def test_applied_failures_take_effect_first() -> None:
    fake = FakeClient()
    fake.faults.fail_next("create", error=ConnectionFailed, applied=True)
    with pytest.raises(ConnectionFailed):
        await fake.create(cm("a"))
    assert fake.lookup(kinds.ConfigMap, "a", namespace="ns") is not None
    fake.faults.timeout_next("delete", applied=True)
    with pytest.raises(RequestTimeout):
        await fake.delete(kinds.ConfigMap, "a", namespace="ns")
    assert fake.lookup(kinds.ConfigMap, "a", namespace="ns") is None


async def test_timeouts_and_latency_wait_on_the_faults_clock() -> None:
    clock = RecordingClock()
    fake = FakeClient(objects=[cm("a")], faults=Faults(clock=clock))
    fake.faults.timeout_next("get", after=0.02)
    start = clock.now()
    get = asyncio.create_task(fake.get(kinds.ConfigMap, "a", namespace="ns"))
    with pytest.raises(RequestTimeout) as info:
        await run_timers(clock, get)
    assert clock.now() - start == pytest.approx(0.02)
    assert info.value.timeout == 0.02
    fake.faults.add_latency("list", 0.5, times=1)
    listing = asyncio.create_task(fake.list(kinds.ConfigMap))
    assert await run_timers(clock, listing) == pytest.approx(0.5)
    assert clock.delays == pytest.approx([0.02, 0.5])
    assert [o["metadata"]["name"] for o in listing.result()] == ["a"]
    assert isinstance(Faults().clock, LoopClock)  # the running loop's clock by default
    with pytest.raises(ValueError):
        fake.faults.add_latency("get", -1)
    with pytest.raises(ValueError):
        fake.faults.timeout_next("get", after=-1)


async def test_intercept_simulates_a_concurrent_writer() -> None:
    fake = FakeClient(objects=[cm("a", v="1")])
    seen: list[Call] = []

    async def sneak_in(call: Call) -> None:
        seen.append(call)
        fake.add(cm("sneaky"))  # any write moves the global revision...
        current = stored(fake, kinds.ConfigMap, "a", namespace="ns")
        current["data"] = {"v": "theirs"}
        await fake.update(current)  # ...and this one makes the caller's copy stale

    fake.faults.intercept("update", sneak_in, times=1)
    mine = await fake.get(kinds.ConfigMap, "a", namespace="ns")
    mine["data"] = {"v": "mine"}
    with pytest.raises(Conflict):
        await fake.update(mine)
    assert seen[0].verb == "update" and seen[0].name == "a"
    assert seen[0].body["data"] == {"v": "mine"}
    assert stored(fake, kinds.ConfigMap, "a", namespace="ns")["data"] == {"v": "theirs"}
    calls = [c.verb for c in fake.faults.calls]
    assert calls == ["get", "update", "update"]
    assert len(fake.faults.calls_to("update", kinds.ConfigMap)) == 2
    fake.faults.intercept("get", seen.append)
    await fake.get(kinds.ConfigMap, "a", namespace="ns")
    assert seen[-1].verb == "get"
    fake.faults.clear()
    assert fake.faults.calls == [] and fake.faults.rules == []


async def test_watch_faults_fire_when_iteration_starts() -> None:
    fake = FakeClient()
    fake.faults.fail_next("watch", error=Gone)
    watch = fake.watch(kinds.ConfigMap)
    with pytest.raises(Gone):
        await watch.__anext__()
    assert fake.active_watches == 0


async def test_interceptor_wraps_any_client() -> None:
    inner = FakeClient(objects=[cm("a")])
    faults = Faults()
    client = FaultInjectingClient(inner, faults)
    assert client.default_namespace == "default"  # passed through
    faults.fail_next("patch", error=Conflict)
    with pytest.raises(Conflict):
        await client.patch(kinds.ConfigMap, "a", MergePatch({"data": {"x": "1"}}), namespace="ns")
    patched = await client.patch(
        kinds.ConfigMap, "a", MergePatch({"data": {"x": "1"}}), namespace="ns"
    )
    assert patched["data"] == {"x": "1"}
    assert (await client.get(kinds.ConfigMap, "a", namespace="ns"))["data"] == {"x": "1"}
    await client.create(cm("b"))
    got = await client.get(kinds.ConfigMap, "b", namespace="ns")
    got["data"] = {"y": "2"}
    await client.update(got)
    await client.apply(cm("c", z="3"), field_manager="m")
    assert len(await client.list(kinds.ConfigMap, namespace="ns")) == 3
    page = await client.list_page(kinds.ConfigMap, namespace="ns", limit=1)
    assert page.continue_token
    await client.delete(kinds.ConfigMap, "c", namespace="ns")
    await client.delete_collection(kinds.ConfigMap, namespace="ns", labels="none")
    verbs = [c.verb for c in faults.calls]
    assert verbs == [
        "patch",
        "patch",
        "get",
        "create",
        "get",
        "update",
        "apply",
        "list",
        "list_page",
        "delete",
        "delete_collection",
    ]
    faults.fail_next("watch", error=Gone)
    with pytest.raises(Gone):
        await client.watch(kinds.ConfigMap, namespace="ns").__anext__()
    async with client.watch(kinds.ConfigMap, namespace="ns") as watch:
        first = await watch.__anext__()
        assert first.type == "ADDED"
        assert watch.resource_version
        assert (await watch.__anext__()).type == "ADDED"
    async with client:
        pass
    assert inner.active_watches == 0


async def test_interceptor_subresource_verbs() -> None:
    thing = GroupVersionKind("things.example.com", "v1", "Thing")
    inner = FakeClient(
        resources=[ResourceInfo(thing, "things", True, frozenset({"status", "scale"}))]
    )
    client = FaultInjectingClient(inner)
    made = await client.create(
        {
            "apiVersion": "things.example.com/v1",
            "kind": "Thing",
            "metadata": {"name": "t", "namespace": "ns"},
            "spec": {"replicas": 1},
        }
    )
    made["status"] = {"ok": True}
    assert (await client.replace_status(made))["status"] == {"ok": True}
    client.faults.fail_next(["get_scale", "set_scale"], times=2, error=TooManyRequests)
    with pytest.raises(TooManyRequests):
        await client.get_scale(thing, "t", namespace="ns")
    with pytest.raises(TooManyRequests):
        await client.set_scale(thing, "t", 3, namespace="ns")
    assert (await client.set_scale(thing, "t", 3, namespace="ns"))["spec"]["replicas"] == 3
    assert (await client.get_scale(thing, "t", namespace="ns"))["spec"]["replicas"] == 3
    scale = await client.get_subresource(thing, "t", "scale", namespace="ns")
    scale["spec"]["replicas"] = 5
    assert (await client.update_subresource(thing, "t", "scale", scale, namespace="ns"))["spec"][
        "replicas"
    ] == 5
    await client.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "sa", "namespace": "ns"},
        }
    )
    token = await client.create_subresource(kinds.ServiceAccount, "sa", "token", {}, namespace="ns")
    assert token["status"]["token"]
    assert [c.subresource for c in client.faults.calls if c.verb.endswith("subresource")] == [
        "scale",
        "scale",
        "token",
    ]


def test_the_fault_injecting_client_is_an_api_client_on_every_python() -> None:
    """It satisfies ApiClient without __getattr__, as isinstance() checks from Python 3.12 on.

    Python 3.12 made isinstance() with a runtime protocol look attributes up statically
    (``inspect.getattr_static``): members lent by ``__getattr__`` stopped counting, and on
    3.12 and 3.13 ``Cache(FaultInjectingClient(...)).tracking_client()`` said the client
    "only lists and watches". Checked statically here so that 3.11 fails the same way.
    """
    import inspect

    from setpoint.cache import Cache
    from setpoint.client.protocols import ApiClient

    client = FaultInjectingClient(FakeClient())
    members = [name for name in dir(ApiClient) if not name.startswith("_")]
    assert "default_namespace" in members
    missing = []
    for name in members:
        try:
            inspect.getattr_static(client, name)
        except AttributeError:
            missing.append(name)
    assert missing == []
    assert isinstance(client, ApiClient)
    assert client.default_namespace == client.inner.default_namespace
    assert Cache(client).tracking_client().wrapped is client
