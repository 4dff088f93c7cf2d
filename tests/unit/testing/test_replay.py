"""Replay: a recording's requests run over the fake in the recorded order, compared as they go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from setpoint.testing import FakeClient
from setpoint.testing.interleavings import ReplayError, WriterFunc, replay
from tests._support import races
from tests._support.kinds import GIZMO

NS = "default"
BASE = f"/apis/{GIZMO.group}/{GIZMO.version}/namespaces/{NS}/gizmos"


def _gizmo(rv: str, entries: list[str] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": GIZMO.api_version,
        "kind": "Gizmo",
        "metadata": {"name": "race", "namespace": NS, "resourceVersion": rv, "uid": "u1"},
        "spec": {"size": 1},
    }
    if entries is not None:
        obj["status"] = {"entries": entries}
    return obj


def _request(
    actor: str | None, method: str, path: str, status: int, response: Any
) -> dict[str, Any]:
    return {
        "type": "request",
        "actor": actor,
        "method": method,
        "path": path,
        "status": status,
        "response": response,
    }


def _write(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_bytes(
        b"".join(orjson.dumps({"seq": i, **e}) + b"\n" for i, e in enumerate(entries, 1))
    )
    return path


@pytest.fixture
def race(tmp_path: Path) -> Path:
    """The lost-update race as the real server answered it (a and b read, a wins)."""
    conflict = {"kind": "Status", "code": 409, "reason": "Conflict"}
    return _write(
        tmp_path / "race.jsonl",
        [
            _request(None, "POST", BASE, 201, _gizmo("10")),
            {"type": "event", "kind": str(GIZMO), "event": "add", "object": _gizmo("10")},
            # Discovery inside the recording (a cold discovery cache): aggregated discovery
            # answers with named items, which must not seed the fake (was UnknownKind).
            _request(
                "a",
                "GET",
                "/apis",
                200,
                {
                    "apiVersion": "apidiscovery.k8s.io/v2",
                    "kind": "APIGroupDiscoveryList",
                    "items": [{"metadata": {"name": "apps"}, "versions": []}],
                },
            ),
            _request("a", "GET", f"{BASE}/race", 200, _gizmo("10")),
            _request("b", "GET", f"{BASE}/race", 200, _gizmo("10")),
            _request("a", "PUT", f"{BASE}/race/status", 200, _gizmo("11", ["a"])),
            _request("b", "PUT", f"{BASE}/race/status", 409, conflict),
        ],
    )


def plain(fake: FakeClient) -> dict[str, WriterFunc]:
    races.seeded_kinds(fake)
    return {name: races.plain_writer(name, NS) for name in ("a", "b")}


async def test_the_recorded_order_reproduces_the_lost_update(race: Path) -> None:
    result = await replay(race, plain)
    assert result.divergences == []
    assert [str(s) for s in result.steps] == [
        "a: GET default/race -> 200",
        "b: GET default/race -> 200",
        "a: PUT default/race/status -> 200",
        "b: PUT default/race/status -> 409",
    ]
    assert list(result.errors) == ["b"]
    assert await races.entries(result.fake, NS) == ["a"]


async def test_a_conflict_answered_before_the_write_that_beat_it_replays_after_it(
    tmp_path: Path,
) -> None:
    """Both PUTs in flight; b won on the server, but a's 409 was answered (and written) first.

    The lines overlap (b's PUT was sent before a's answer arrived), so replay applies b's
    write first, as the server did: no divergence. Seen on v1.35.4 in the real-server test.
    """
    conflict = {"kind": "Status", "code": 409, "reason": "Conflict"}
    put_a = _request("a", "PUT", f"{BASE}/race/status", 409, conflict)
    put_b = _request("b", "PUT", f"{BASE}/race/status", 200, _gizmo("11", ["b"]))
    recording = _write(
        tmp_path / "answered-out-of-order.jsonl",
        [
            _request(None, "POST", BASE, 201, _gizmo("10")),
            _request("a", "GET", f"{BASE}/race", 200, _gizmo("10")),
            _request("b", "GET", f"{BASE}/race", 200, _gizmo("10")),
            {**put_a, "sent": 1.0, "t": 1.5},
            {**put_b, "sent": 1.1, "t": 1.6},
        ],
    )
    result = await replay(recording, plain)
    assert result.divergences == []
    assert [str(s) for s in result.steps][-2:] == [
        "b: PUT default/race/status -> 200",
        "a: PUT default/race/status -> 409",
    ]
    assert await races.entries(result.fake, NS) == ["b"]

    # Without the overlap (b sent after a's answer) the recorded order stands, and the
    # replay says the fake disagrees with it.
    apart = _write(
        tmp_path / "apart.jsonl",
        [
            _request(None, "POST", BASE, 201, _gizmo("10")),
            _request("a", "GET", f"{BASE}/race", 200, _gizmo("10")),
            _request("b", "GET", f"{BASE}/race", 200, _gizmo("10")),
            {**put_a, "sent": 1.0, "t": 1.5},
            {**put_b, "sent": 1.7, "t": 1.8},
        ],
    )
    assert (await replay(apart, plain)).divergences != []


async def test_writers_that_behave_differently_are_reported(race: Path) -> None:
    def safe(fake: FakeClient) -> dict[str, WriterFunc]:
        races.seeded_kinds(fake)
        return {name: races.safe_writer(name, NS) for name in ("a", "b")}

    result = await replay(race, safe)
    # update_status retries the Conflict: a GET and a PUT the recording does not have.
    assert result.divergences == ["b sent more requests than the recording has"]


async def test_writers_the_recording_does_not_know_are_named(race: Path) -> None:
    def other(fake: FakeClient) -> dict[str, WriterFunc]:
        races.seeded_kinds(fake)
        return {"c": races.plain_writer("c", NS)}

    with pytest.raises(ReplayError, match=r"no request of the writers \['c'\]; the recording's"):
        await replay(race, other)
