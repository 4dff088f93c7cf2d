"""Fuzzed answers fed to the client's HTTP/1.1 connection (decisions 0016 and 0018).

Mutated good answers (bytes flipped, cut, repeated, inserted) and random bytes, delivered in
random pieces and followed or not by the end of the stream: the request ends with an answer
or with ``ConnectionBroken`` (``ProtocolError`` included), never another exception, and a
connection kept for reuse after an answer carries the next request's answer whole (nothing
of the first answer is left to be read as the second). No sockets: the bytes go straight
into the protocol (``_http_drive``), so thousands of examples run in seconds.
SETPOINT_FUZZ_EXAMPLES sets the number of examples (small in CI; ``make fuzz`` runs
thousands). The comparison with h11 is ``test_http_differential_fuzz.py``.
"""

from __future__ import annotations

import gzip
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tests._support.mutations import mutated
from tests.unit.client._http_drive import setpoint_reads

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

GOOD = [
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\nuntil the end",
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 23\r\n\r\n"
    + gzip.compress(b"abc", mtime=0),
    b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"17\r\n"
    + gzip.compress(b"abc", mtime=0)
    + b"\r\n0\r\n\r\n",
]

PROBE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nprobe"


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A good answer with bytes flipped, cut, repeated or inserted, or any bytes at all."""
    return mutated(draw, GOOD)


@settings(max_examples=EXAMPLES, deadline=None)
@given(answer=answers(), piece=st.integers(1, 40), eof=st.booleans())
def test_any_answer_ends_in_a_response_or_connection_broken(
    answer: bytes, piece: int, eof: bool
) -> None:
    """Whatever the server sends, the request ends typed, and a reused connection is clean.

    ``setpoint_reads`` itself fails on any exception other than ``ConnectionBroken``.
    """
    (first,), connection = setpoint_reads([answer], eof=eof, piece=piece, max_body=1 << 20)
    if first[0] != "answer":
        assert not connection.usable, "a connection that gave no answer is not reused"
    elif connection.usable:
        outcomes, _ = setpoint_reads([answer, PROBE], piece=piece, max_body=1 << 20)
        assert outcomes[1] == ("answer", 200, (("content-length", ("5",)),), b"probe")
