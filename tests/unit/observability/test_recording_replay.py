"""A recording with its Secrets redacted still replays without divergence (issue 27, finding 3)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from setpoint.api import kinds
from setpoint.client.patch import MergePatch
from setpoint.observability import recording
from setpoint.testing import FakeClient
from setpoint.testing.interleavings import WriterFunc, replay

OLD, NEW = "old-password-1", "new-password-2"
PATH = "/api/v1/namespaces/prod/secrets/db"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(rv: str, password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "prod", "resourceVersion": rv, "uid": "u1"},
        "type": "Opaque",
        "data": {"password": b64(password)},
    }


async def rotate(client: Any) -> None:
    """Read the Secret, then write a new password into it with a merge patch."""
    await client.get(kinds.Secret, "db", namespace="prod")
    await client.patch(
        kinds.Secret, "db", MergePatch({"data": {"password": b64(NEW)}}), namespace="prod"
    )


async def test_a_rotated_secret_replays_without_divergence(tmp_path: Path) -> None:
    """The recorded answers hold ``<redacted>``; the replayed ones are compared redacted too."""
    path = tmp_path / "rotation.jsonl"
    with recording.recording(recording.RecordOptions(path=path)) as recorder:
        recorder.event("v1, Kind=Secret", "add", secret("41", OLD))
        with recording.actor("rotator"):
            recorder.request(
                "GET", PATH, params=None, body=None, status=200, response=secret("41", OLD)
            )
            recorder.request(
                "PATCH",
                PATH,
                params=None,
                body={"data": {"password": b64(NEW)}},
                status=200,
                response=secret("42", NEW),
            )
    raw = path.read_bytes()
    for value in (OLD, NEW):
        assert value.encode() not in raw and b64(value).encode() not in raw

    def setup(fake: FakeClient) -> dict[str, WriterFunc]:
        return {"rotator": rotate}

    result = await replay(path, setup)
    assert result.divergences == []
    assert [str(step) for step in result.steps] == [
        "rotator: GET prod/db -> 200",
        "rotator: PATCH prod/db -> 200",
    ]
    stored = await result.fake.get(kinds.Secret, "db", namespace="prod")
    assert stored["data"] == {"password": b64(NEW)}
