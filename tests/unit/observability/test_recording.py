"""The recorder: redaction, the size bound, actors, and the manager's informer events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from setpoint.api import kinds
from setpoint.controller import Context, Request
from setpoint.manager import Manager, ManagerOptions
from setpoint.observability import recording
from setpoint.observability.runtime import ReconcileInfo, reconcile_scope
from setpoint.testing import FakeClient, run_operator


def test_secrets_and_tokens_are_redacted_wherever_they_appear() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "managedFields": [{"manager": "kubectl"}]},
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"token": "abc"},
    }
    listed = {"apiVersion": "v1", "kind": "SecretList", "items": [dict(secret, kind="Secret")]}
    review = {"kind": "TokenReview", "spec": {"token": "eyJ..."}, "status": {"user": {}}}
    assert recording.redact(secret) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"password": recording.REDACTED},
        "stringData": {"token": recording.REDACTED},
    }
    assert recording.redact(listed)["items"][0]["data"] == {"password": recording.REDACTED}
    assert recording.redact(review)["spec"] == {"token": recording.REDACTED}
    config = {"kind": "ConfigMap", "data": {"k": "v"}}
    assert recording.redact(config) == config  # only Secrets' data is redacted


def test_the_file_stops_at_its_bound_with_a_truncated_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with recording.recording(recording.RecordOptions(path=path, max_bytes=4096)) as recorder:
        for i in range(100):
            recorder.event(
                "v1, Kind=ConfigMap", "add", {"kind": "ConfigMap", "n": i, "x": "y" * 50}
            )
    assert recorder.truncated
    assert path.stat().st_size <= 4096
    lines = recording.load(path)
    assert lines[-1]["type"] == "truncated"
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert recording.active_recorder() is None


async def test_actors_name_the_writer_or_the_reconcile() -> None:
    assert recording.current_actor() is None
    with recording.actor("writer-a"):
        assert recording.current_actor() == "writer-a"
    with reconcile_scope(ReconcileInfo("tenant", "prod", "acme", "id-1", 0.0)):
        assert recording.current_actor() == "tenant:prod/acme"


def test_bad_options_and_bad_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes=10: give at least 4096"):
        recording.RecordOptions(path=tmp_path / "x", max_bytes=10)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"seq": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not a JSON line"):
        recording.load(broken)


async def test_a_manager_option_records_the_informer_events(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"

    async def reconcile(ctx: Context, request: Request) -> None:
        return None

    def setup(manager: Manager) -> None:
        manager.controller("cms").for_(kinds.ConfigMap).build(reconcile)

    fake = FakeClient()
    options = ManagerOptions(
        metrics_bind_address="0",
        health_probe_bind_address="0",
        record=recording.RecordOptions(path=path),
    )
    async with run_operator(setup, client=fake, options=options) as op:
        await fake.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}}
        )
        await op.wait_idle(settle=0.2)
    assert recording.active_recorder() is None  # the manager stopped it
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    events = [(e["kind"], e["event"], e["object"]["metadata"]["name"]) for e in lines]
    assert ("v1, Kind=ConfigMap", "add", "a") in events
