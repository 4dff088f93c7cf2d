"""Parity: fault injection wraps the real client and the fake alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from setpoint.api import kinds
from setpoint.client.errors import Conflict, Gone, NotFound, RequestTimeout, TooManyRequests
from setpoint.testing.faults import Call, FaultInjectingClient

if TYPE_CHECKING:
    from tests._support.parity import Api


async def test_injected_errors_stop_the_call(api: Api) -> None:
    """An injected error is raised instead of sending the call; the next call goes through.

    FaultInjectingClient around the real client (or the fake) refuses a create
    with 429 TooManyRequests carrying retry-after; nothing is created; the
    retry succeeds and the call log shows both attempts.
    """
    client = FaultInjectingClient(api.client)
    rule = client.faults.fail_next("create", kind=kinds.ConfigMap, error=TooManyRequests)
    with pytest.raises(TooManyRequests) as info:
        await client.create(api.cm("throttled"))
    assert info.value.retry_after == 1
    with pytest.raises(NotFound):
        await client.get(kinds.ConfigMap, "throttled", namespace=api.namespace)
    made = await client.create(api.cm("throttled"))
    assert made["metadata"]["name"] == "throttled"
    assert rule.hits == 1
    assert [c.verb for c in client.faults.calls] == ["create", "get", "create"]


async def test_applied_timeout_leaves_the_write_done(api: Api) -> None:
    """With applied=True the write reaches the server and the answer is lost (RequestTimeout).

    This is the ambiguous outcome of a real client timeout: the caller must
    re-read to learn that the change happened.
    """
    client = FaultInjectingClient(api.client)
    made = await client.create(dict(api.cm("lost-answer"), data={"v": "1"}))
    made["data"] = {"v": "2"}
    client.faults.timeout_next("update", applied=True)
    with pytest.raises(RequestTimeout):
        await client.update(made)
    got = await client.get(kinds.ConfigMap, "lost-answer", namespace=api.namespace)
    assert got["data"] == {"v": "2"}


async def test_intercepted_concurrent_writer_meets_a_real_conflict(api: Api) -> None:
    """An intercept handler that writes first makes the intercepted update a genuine Conflict."""
    client = FaultInjectingClient(api.client)
    mine = await client.create(dict(api.cm("raced"), data={"v": "mine"}))

    async def other_writer(call: Call) -> None:
        theirs = await api.client.get(kinds.ConfigMap, "raced", namespace=api.namespace)
        theirs["data"] = {"v": "theirs"}
        await api.client.update(theirs)

    client.faults.intercept("update", other_writer, times=1)
    mine["data"] = {"v": "changed"}
    with pytest.raises(Conflict) as info:
        await client.update(mine)
    assert "injected" not in str(info.value)  # the server's own Conflict
    got = await client.get(kinds.ConfigMap, "raced", namespace=api.namespace)
    assert got["data"] == {"v": "theirs"}


async def test_watch_fault_then_clean_watch(api: Api) -> None:
    """A watch fault is raised when iteration starts; a new watch then works normally."""
    client = FaultInjectingClient(api.client)
    await client.create(api.cm("watched", labels={"fault": "watch"}))
    client.faults.fail_next("watch", error=Gone)
    with pytest.raises(Gone):
        async with client.watch(kinds.ConfigMap, namespace=api.namespace) as failing:
            await failing.__anext__()
    async with client.watch(
        kinds.ConfigMap, namespace=api.namespace, labels="fault=watch"
    ) as watch:
        first = await watch.__anext__()
    assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "watched")
