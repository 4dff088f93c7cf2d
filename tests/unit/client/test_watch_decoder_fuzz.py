"""The watch decoder on random streams: events, MalformedResponse or ApiError, nothing else.

Random JSON values of every shape (and raw bytes) as lines, split into random chunks.
SETPOINT_FUZZ_EXAMPLES sets the number of examples (small in CI; ``make fuzz`` runs
thousands).
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setpoint.client._watchdecode import RawWatchEvent, WatchDecoder
from setpoint.client.errors import ApiError, MalformedResponse

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
        st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "Status"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["type", "object", "metadata", "code", "reason", "message", "x"]),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=10,
)

events = st.fixed_dictionaries(
    {"type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "NEW"])},
    optional={"object": json_values},
)

lines = st.one_of(
    json_values.map(orjson.dumps),
    events.map(orjson.dumps),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.just(b""),
    st.just(b"   "),
)


def decode(stream: bytes, cuts: list[int], max_line: int) -> list[RawWatchEvent]:
    decoder = WatchDecoder("https://api/watch", max_line=max_line)
    out: list[RawWatchEvent] = []
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    for start, end in itertools.pairwise(points):
        out.extend(decoder.feed(stream[start:end]))
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(lines, max_size=6),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    st.sampled_from([16, 200, 1 << 20]),
)
def test_random_streams_raise_only_documented_errors(
    stream_lines: list[bytes], cuts: list[int], max_line: int
) -> None:
    """Any stream, chunked anyhow: events, or MalformedResponse / ApiError, and the same
    outcome whatever the chunking."""
    stream = b"".join(line + b"\n" for line in stream_lines)
    outcome: Any
    try:
        outcome = [(e.type, e.object) for e in decode(stream, cuts, max_line)]
    except (MalformedResponse, ApiError) as exc:
        outcome = type(exc)
    try:
        whole: Any = [(e.type, e.object) for e in decode(stream, [], max_line)]
    except (MalformedResponse, ApiError) as exc:
        whole = type(exc)
    assert outcome == whole
    if isinstance(outcome, list):
        for kind, obj in outcome:
            assert isinstance(kind, str)
            assert isinstance(obj, dict)
