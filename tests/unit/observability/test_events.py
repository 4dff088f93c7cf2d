"""The Event recorder: Event shape, aggregation into series, bounds, retries, never raising."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

from setpoint.api import kinds
from setpoint.api.gvk import GroupVersionKind
from setpoint.observability.events import (
    EventBroadcaster,
    EventBroadcasterOptions,
    JsonMergePatch,
)
from setpoint.testing.waits import eventually

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-0", "namespace": "shop", "uid": "u-1", "resourceVersion": "42"},
}
NODE: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}


class ApiError(Exception):
    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"HTTP {code}")
        self.code = code


@dataclass
class FakeEventClient:
    """Stores Events by name; scripted failures pop from ``create_errors``/``patch_errors``."""

    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    creates: list[dict[str, Any]] = field(default_factory=list)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    create_errors: list[Exception] = field(default_factory=list)
    patch_errors: list[Exception] = field(default_factory=list)
    gate: asyncio.Event | None = None

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.gate is not None:
            await self.gate.wait()
        self.creates.append(obj)
        if self.create_errors:
            raise self.create_errors.pop(0)
        self.events[obj["metadata"]["name"]] = dict(obj)
        return obj

    async def patch(
        self, kind: GroupVersionKind, name: str, patch: Any, *, namespace: str | None = None
    ) -> dict[str, Any]:
        assert kind == kinds.Event
        assert isinstance(patch, JsonMergePatch)
        assert patch.content_type == "application/merge-patch+json"
        self.patches.append((name, patch.body()))
        if self.patch_errors:
            raise self.patch_errors.pop(0)
        self.events[name].update(patch.body())
        return self.events[name]


class Clocks:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = T0

    def tick(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)


@pytest.fixture
async def clocks() -> AsyncIterator[Clocks]:
    yield Clocks()


@pytest.fixture
async def client() -> AsyncIterator[FakeEventClient]:
    yield FakeEventClient()


@pytest.fixture
async def broadcasters() -> AsyncIterator[list[EventBroadcaster]]:
    made: list[EventBroadcaster] = []
    yield made
    for broadcaster in made:
        await broadcaster.stop(0)


def make(
    client: FakeEventClient,
    clocks: Clocks,
    broadcasters: list[EventBroadcaster],
    **options: Any,
) -> EventBroadcaster:
    options.setdefault("retry_backoff", 0.0)
    broadcaster = EventBroadcaster(
        client,
        EventBroadcasterOptions(**options),
        monotonic=lambda: clocks.mono,
        wall_clock=lambda: clocks.wall,
    )
    broadcasters.append(broadcaster)
    return broadcaster


async def test_an_event_has_the_events_v1_shape(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    recorder = broadcaster.recorder("example.com/shop-controller", reporting_instance="shop-1")
    recorder.event(POD, "Warning", "BackOff", "restarting", action="Restart", related=NODE)
    await eventually(lambda: len(client.events) == 1, timeout=5, description="event created")
    (event,) = client.events.values()
    assert event["apiVersion"] == "events.k8s.io/v1" and event["kind"] == "Event"
    assert event["metadata"]["namespace"] == "shop"
    assert event["metadata"]["name"].startswith("web-0.")
    assert event["eventTime"] == "2024-05-01T12:00:00.000000Z"
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-0",
        "namespace": "shop",
        "uid": "u-1",
        "resourceVersion": "42",
    }
    assert event["related"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert (event["type"], event["reason"], event["action"], event["note"]) == (
        "Warning",
        "BackOff",
        "Restart",
        "restarting",
    )
    assert event["reportingController"] == "example.com/shop-controller"
    assert event["reportingInstance"] == "shop-1"
    assert "series" not in event


async def test_action_defaults_to_reason_and_cluster_scoped_objects_report_in_default(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    broadcaster.recorder("node-controller").normal(NODE, "Cordoned", "node cordoned")
    await eventually(lambda: client.events, timeout=5, description="event created")
    (event,) = client.events.values()
    assert event["metadata"]["namespace"] == "default"
    assert event["action"] == "Cordoned" and event["type"] == "Normal"
    assert event["reportingInstance"].startswith("node-controller-")


async def test_repeats_within_the_window_update_the_series(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters, aggregation_window=60)
    await broadcaster.start()
    recorder = broadcaster.recorder("shop-controller")
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: client.events, timeout=5, description="first event")
    clocks.tick(10)
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: client.patches, timeout=5, description="series update")
    clocks.tick(10)
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: len(client.patches) == 2, timeout=5, description="second update")
    assert len(client.creates) == 1
    (name, event) = next(iter(client.events.items()))
    assert client.patches == [
        (name, {"series": {"count": 2, "lastObservedTime": "2024-05-01T12:00:10.000000Z"}}),
        (name, {"series": {"count": 3, "lastObservedTime": "2024-05-01T12:00:20.000000Z"}}),
    ]
    assert event["series"]["count"] == 3
    # A different note is a different Event.
    recorder.warning(POD, "BackOff", "restarting again")
    await eventually(lambda: len(client.creates) == 2, timeout=5, description="distinct event")


async def test_a_repeat_after_the_window_creates_a_new_event(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters, aggregation_window=60)
    await broadcaster.start()
    recorder = broadcaster.recorder("shop-controller")
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: client.events, timeout=5, description="first event")
    clocks.tick(61)
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: len(client.creates) == 2, timeout=5, description="second event")
    assert client.patches == []
    assert len({c["metadata"]["name"] for c in client.creates}) == 2


async def test_a_burst_of_repeats_costs_one_pending_update(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    client.gate = asyncio.Event()  # hold the first create in flight
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    recorder = broadcaster.recorder("shop-controller")
    recorder.warning(POD, "BackOff", "restarting")
    await asyncio.sleep(0)
    for _ in range(500):
        clocks.tick(0.01)
        recorder.warning(POD, "BackOff", "restarting")
    assert broadcaster.queued <= 1
    client.gate.set()
    await eventually(lambda: client.patches, timeout=5, description="series update")
    await eventually(lambda: broadcaster.queued == 0, timeout=5, description="drained")
    total = client.patches[-1][1]["series"]["count"] if client.patches else 0
    if client.creates[0].get("series"):
        total = max(total, client.creates[0]["series"]["count"])
    assert total == 501
    assert len(client.creates) + len(client.patches) <= 3


async def test_repeats_recorded_before_start_are_created_as_one_series(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    recorder = broadcaster.recorder("shop-controller")
    for _ in range(3):
        recorder.warning(POD, "BackOff", "restarting")
    assert client.creates == []
    await broadcaster.start()
    await eventually(lambda: broadcaster.queued == 0, timeout=5, description="drained")
    await eventually(lambda: client.creates, timeout=5, description="created")
    assert client.creates[0]["series"] == {
        "count": 3,
        "lastObservedTime": "2024-05-01T12:00:00.000000Z",
    }
    assert client.patches == []  # the create carried the whole series


async def test_the_queue_is_bounded_and_overflow_is_counted(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters, queue_size=3)
    recorder = broadcaster.recorder("shop-controller")
    for i in range(5):
        recorder.normal(POD, "Step", f"step {i}")
    assert broadcaster.queued == 3 and broadcaster.dropped == 2
    await broadcaster.start()
    await eventually(lambda: len(client.creates) == 3, timeout=5, description="sent")


async def test_bad_input_never_raises_into_the_caller(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    recorder = broadcaster.recorder("shop-controller")
    recorder.event(POD, "Error", "Bad", "not a valid type")
    recorder.event(POD, "Normal", "", "no reason")
    recorder.event(POD, "Normal", "R" * 129, "reason too long")
    recorder.event({"kind": "Pod"}, "Normal", "NoName", "no apiVersion/name")
    not_an_object: Any = None  # deliberately the wrong type: the recorder must not raise
    recorder.event(not_an_object, "Normal", "X", "not an object")
    assert broadcaster.dropped == 5 and broadcaster.queued == 0


async def test_long_notes_are_cut_to_the_api_limit(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    broadcaster.recorder("c").normal(POD, "Long", "é" * 1000)  # 2000 bytes
    await eventually(lambda: client.creates, timeout=5, description="created")
    note = client.creates[0]["note"]
    assert len(note.encode()) <= 1024 and note == "é" * 512


def test_reporting_controller_must_be_a_qualified_name() -> None:
    broadcaster = EventBroadcaster(FakeEventClient())
    for bad in ("", "has space", "a/b/c", "-x", "x" * 64, "UPPER_prefix/x"):
        with pytest.raises(ValueError, match="must be a qualified name"):
            broadcaster.recorder(bad)
    assert broadcaster.recorder("example.com/My_Controller.v1").reporting_controller
    with pytest.raises(ValueError, match="1-128 characters"):
        broadcaster.recorder("c", reporting_instance="x" * 129)


async def test_a_taken_name_is_retried_with_a_new_one(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    client.create_errors = [ApiError(409, "AlreadyExists")]
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    broadcaster.recorder("c").normal(POD, "Started", "ok")
    await eventually(lambda: client.events, timeout=5, description="created")
    first, second = (c["metadata"]["name"] for c in client.creates)
    assert first != second and list(client.events) == [second]


async def test_a_vanished_event_is_recreated_with_its_series(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    recorder = broadcaster.recorder("c")
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: client.events, timeout=5, description="created")
    client.patch_errors = [ApiError(404, "NotFound")]  # expired by the API server's TTL
    clocks.tick(5)
    recorder.warning(POD, "BackOff", "restarting")
    await eventually(lambda: len(client.creates) == 2, timeout=5, description="recreated")
    assert client.creates[1]["series"]["count"] == 2
    assert client.creates[1]["metadata"]["name"] != client.creates[0]["metadata"]["name"]


async def test_transient_errors_are_retried_and_permanent_ones_dropped(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    client.create_errors = [ApiError(503), TimeoutError()]
    broadcaster = make(client, clocks, broadcasters, max_attempts=3)
    await broadcaster.start()
    recorder = broadcaster.recorder("c")
    recorder.normal(POD, "A", "transient")
    await eventually(lambda: client.events, timeout=5, description="created on third try")
    assert len(client.creates) == 3 and broadcaster.dropped == 0

    client.create_errors = [ApiError(403, "namespace is being terminated")]
    recorder.normal(POD, "B", "forbidden")
    await eventually(lambda: broadcaster.dropped == 1, timeout=5, description="dropped")
    assert len(client.creates) == 4  # not retried

    client.create_errors = [ApiError(500)] * 3
    recorder.normal(POD, "C", "keeps failing")
    await eventually(lambda: broadcaster.dropped == 2, timeout=5, description="gave up")
    assert len(client.creates) == 7


async def test_events_can_be_recorded_from_other_threads(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    recorder = broadcaster.recorder("c")

    def work(i: int) -> None:
        recorder.normal(POD, "FromThread", f"thread {i}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    await eventually(lambda: len(client.events) == 8, timeout=5, description="all sent")


async def test_stop_sends_what_is_queued_then_drops_later_events(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    recorder = broadcaster.recorder("c")
    for i in range(5):
        recorder.normal(POD, "Step", f"step {i}")
    await broadcaster.stop(5)
    assert len(client.creates) == 5
    recorder.normal(POD, "Late", "after stop")
    assert broadcaster.dropped == 1 and broadcaster.failure() is None


async def test_typed_objects_are_accepted(
    client: FakeEventClient, clocks: Clocks, broadcasters: list[EventBroadcaster]
) -> None:
    class Widget:
        gvk: ClassVar[GroupVersionKind] = GroupVersionKind("ex.com", "v1", "Widget")

        @classmethod
        def from_object(cls, obj: Any) -> Widget:
            return cls()

        def to_object(self) -> dict[str, Any]:
            return {
                "apiVersion": "ex.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "namespace": "ns"},
            }

    broadcaster = make(client, clocks, broadcasters)
    await broadcaster.start()
    broadcaster.recorder("c").normal(Widget(), "Made", "made it")
    await eventually(lambda: client.events, timeout=5, description="created")
    assert client.creates[0]["regarding"]["kind"] == "Widget"
