"""Byte mutations for the HTTP/1.1 fuzz tests (the server's requests, the client's answers)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


def mutated(draw: st.DrawFn, good: Sequence[bytes]) -> bytes:
    """One of ``good`` with bytes flipped, cut, repeated or inserted, or any bytes at all."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    raw = bytearray(draw(st.sampled_from(good)))
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(raw)))
        action = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        if action == "flip" and where < len(raw):
            raw[where] = draw(st.integers(0, 255))
        elif action == "cut":
            del raw[where:]
        elif action == "insert":
            raw[where:where] = draw(st.sampled_from([b"\r\n", b" ", b":", b"\x00", b"0", b"\n"]))
        else:
            raw[where:where] = raw[where : where + draw(st.integers(1, 20))]
    return bytes(raw)
