"""setpoint's request parsing against h11's on generated streams (issue 27).

Streams are built from request parts (methods, targets, versions, header lines with odd
bytes, every framing, chunk sizes written every which way, line ends that are not CRLF) or
are corpus streams with bytes flipped, cut, repeated or inserted; each is followed by a probe
request and delivered in random pieces. setpoint must never handle a request h11 would not:
its handled requests are h11's, or the first of them (setpoint refuses more; the corpus,
``http_request_corpus.py``, names each reason). And where a stream is cut must not change
what setpoint handles. SETPOINT_FUZZ_EXAMPLES sets the number of examples (a few seconds in
CI; ``make fuzz`` runs thousands).
"""

from __future__ import annotations

import asyncio
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._support.mutations import mutated

from ._http1_drive import h11_serves, pieces_of, setpoint_serves
from .http_request_corpus import CASES, PROBE

EXAMPLES = int(os.environ.get("SETPOINT_FUZZ_EXAMPLES", "300"))

ODD = [b"", b" ", b"\t", b"\x00", b"\r", b"\n", b"\x0b", b"\x7f", b"\x80", b",", b";", b":"]


@st.composite
def chunk_size_line(draw: st.DrawFn, size: int) -> bytes:
    """``size`` as a chunk size line, written plainly or oddly."""
    digits = f"{size:x}".encode()
    if draw(st.booleans()):
        digits = digits.upper()
    digits = b"0" * draw(st.sampled_from([0, 0, 1, 3, 15, 19])) + digits
    before = draw(st.sampled_from([b"", b"", b" ", b"\t", b"+", b"0x"]))
    after = draw(
        st.sampled_from([b"", b"", b" ", b"\t", b";a", b";a=b", b';a="b c"', b";", b"; a"])
    )
    end = draw(st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"]))
    return before + digits + after + end


@st.composite
def structured(draw: st.DrawFn) -> bytes:
    """One request assembled from parts, most of them valid, some not."""
    crlf = draw(st.sampled_from([b"\r\n"] * 6 + [b"\n", b"\r"]))
    method = draw(st.sampled_from([b"GET", b"POST", b"HEAD", b"OPTIONS", b"PUT", b"get", b"FROB"]))
    target = draw(st.sampled_from([b"/", b"/a?b=c", b"/%41", b"*", b"http://h/x", b"h:1", b"/a b"]))
    version = draw(st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0"]))
    lines = [method + b" " + target + b" " + version]
    if draw(st.integers(0, 9)):
        lines.append(b"Host: h")
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from([b"X-A", b"Connection", b"Expect", b"Upgrade", b"Host"]))
        value = draw(st.sampled_from([b"v", b"close", b"keep-alive", b"100-continue", b"h2c"]))
        odd = draw(st.sampled_from(ODD))
        where = draw(st.integers(0, 3))
        line = [name + odd + b": " + value, odd + name + b": " + value, name + b": " + odd + value]
        lines.append(line[where] if where < 3 else name + b": " + value)
    body = draw(st.binary(max_size=40))
    framing = draw(st.sampled_from(["none", "length", "length", "chunked", "chunked", "both"]))
    payload = b""
    if framing in {"length", "both"}:
        declared = len(body) + draw(st.sampled_from([0, 0, 0, -1, 1]))
        lines.append(
            b"Content-Length: " + draw(st.sampled_from([b"", b"0", b" "])) + b"%d" % declared
        )
        if draw(st.integers(0, 9)) == 0:
            lines.append(b"Content-Length: %d" % declared)
        payload = body
    if framing in {"chunked", "both"}:
        lines.append(
            b"Transfer-Encoding: "
            + draw(st.sampled_from([b"chunked", b"Chunked", b"gzip, chunked"]))
        )
        parts = []
        rest = body
        while rest:
            size = draw(st.integers(1, len(rest)))
            parts.append(
                draw(chunk_size_line(size))
                + rest[:size]
                + draw(st.sampled_from([b"\r\n"] * 5 + [b"\n", b""]))
            )
            rest = rest[size:]
        parts.append(draw(chunk_size_line(0)))
        for _ in range(draw(st.integers(0, 2))):
            parts.append(b"X-T: " + draw(st.sampled_from([b"t", b"\x00", b"t\nY: u"])) + crlf)
        parts.append(draw(st.sampled_from([b"\r\n"] * 4 + [b"\n", b""])))
        payload = b"".join(parts)
    return crlf.join(lines) + crlf + crlf + payload


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """A structured request, or a corpus stream mutated; then the probe."""
    if draw(st.booleans()):
        return draw(structured()) + PROBE
    return mutated(draw, [case.stream for case in CASES if len(case.stream) < 2000])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(stream=streams(), cuts=st.lists(st.integers(1, 4000), max_size=6))
def test_setpoint_never_handles_what_h11_refuses(stream: bytes, cuts: list[int]) -> None:
    """Any stream, in any pieces: setpoint's handled requests are h11's or the first of them,
    the same whichever way the stream is cut."""
    pieces = pieces_of(stream, cuts)
    ours = asyncio.run(setpoint_serves([stream]))
    cut = asyncio.run(setpoint_serves(pieces))
    theirs = h11_serves([stream])
    assert ours.served == theirs.served[: len(ours.served)], (ours, theirs)
    assert cut.served == ours.served, (cut, ours)
    assert cut.statuses == ours.statuses
    assert 500 not in ours.statuses
